// Copyright (c) 2026, the fencing developers

package pgfencing

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgconn"
	"github.com/jackc/pgx/v4"
)

// batchTx is the transaction Transaction gives its function: pgx's, with
// the error of every statement translated by the lease (Lease.check), so
// that the function sees ErrLeaseLost and ErrStaleToken where the lease's
// rule says, and a swallowed FN004 or FN001 still loses the lease.
type batchTx struct {
	pgx.Tx
	lease *Lease
	idle  *idleClock
}

// idleClock tells whether the batch sat idle past the lease's ttl before
// a statement whose connection then broke.  use_lease limits the batch's
// idle time in its transaction to the ttl, and the server ends the session
// of a batch that passes it (FATAL 25P03).  pgx reads that message only
// when its next write gets through; on a unix socket the write fails at
// once (a broken pipe) and the server's reason is never read.  So the
// batch keeps the time its last statement ended.
type idleClock struct {
	mu    sync.Mutex
	ended time.Time // when the last statement (or the BEGIN) ended
	idle  time.Duration
}

// starting: a statement is sent now.
func (c *idleClock) starting() {
	c.mu.Lock()
	c.idle = time.Since(c.ended)
	c.mu.Unlock()
}

// finished: the statement ended with err, which comes back as the lease
// translates it; a broken connection after an idle time of at least the
// ttl is the server's idle limit.
func (c *idleClock) finished(l *Lease, conn *pgx.Conn, err error) error {
	c.mu.Lock()
	c.ended = time.Now()
	idle := c.idle
	c.mu.Unlock()
	if err != nil && idle >= l.ttl && sqlState(err) == "" && conn != nil && conn.IsClosed() {
		return l.check(&idleEnded{cause: err})
	}
	return l.check(err)
}

// idleEnded: the connection of a batch that sat idle past the ttl broke.
type idleEnded struct{ cause error }

func (e *idleEnded) Error() string { return e.cause.Error() }
func (e *idleEnded) Unwrap() error { return e.cause }

// done is every method's end: the error of the statement it ran.
func (t *batchTx) done(err error) error {
	return t.idle.finished(t.lease, t.Tx.Conn(), err)
}

func (t *batchTx) Begin(ctx context.Context) (pgx.Tx, error) {
	t.idle.starting()
	tx, err := t.Tx.Begin(ctx)
	if err = t.done(err); err != nil {
		return nil, err
	}
	return &batchTx{Tx: tx, lease: t.lease, idle: t.idle}, nil
}

func (t *batchTx) BeginFunc(ctx context.Context, f func(pgx.Tx) error) error {
	t.idle.starting()
	return t.done(t.Tx.BeginFunc(ctx, func(tx pgx.Tx) error {
		return f(&batchTx{Tx: tx, lease: t.lease, idle: t.idle})
	}))
}

func (t *batchTx) Commit(ctx context.Context) error {
	t.idle.starting()
	return t.done(t.Tx.Commit(ctx))
}

func (t *batchTx) Rollback(ctx context.Context) error {
	t.idle.starting()
	return t.done(t.Tx.Rollback(ctx))
}

func (t *batchTx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, rows pgx.CopyFromSource) (int64, error) {
	t.idle.starting()
	n, err := t.Tx.CopyFrom(ctx, table, columns, rows)
	return n, t.done(err)
}

func (t *batchTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	t.idle.starting()
	return &batchResults{BatchResults: t.Tx.SendBatch(ctx, b), tx: t}
}

func (t *batchTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	t.idle.starting()
	sd, err := t.Tx.Prepare(ctx, name, sql)
	return sd, t.done(err)
}

func (t *batchTx) Exec(ctx context.Context, sql string, args ...interface{}) (pgconn.CommandTag, error) {
	t.idle.starting()
	tag, err := t.Tx.Exec(ctx, sql, args...)
	return tag, t.done(err)
}

func (t *batchTx) Query(ctx context.Context, sql string, args ...interface{}) (pgx.Rows, error) {
	t.idle.starting()
	rows, err := t.Tx.Query(ctx, sql, args...)
	if rows != nil {
		rows = &batchRows{Rows: rows, tx: t}
	}
	return rows, t.done(err)
}

func (t *batchTx) QueryRow(ctx context.Context, sql string, args ...interface{}) pgx.Row {
	t.idle.starting()
	return &batchRow{row: t.Tx.QueryRow(ctx, sql, args...), tx: t}
}

func (t *batchTx) QueryFunc(ctx context.Context, sql string, args []interface{}, scans []interface{},
	f func(pgx.QueryFuncRow) error) (pgconn.CommandTag, error) {
	t.idle.starting()
	tag, err := t.Tx.QueryFunc(ctx, sql, args, scans, f)
	return tag, t.done(err)
}

// The rows of a query are the end of its statement: their errors count as
// its end.

type batchRows struct {
	pgx.Rows
	tx *batchTx
}

func (r *batchRows) Err() error { return r.tx.done(r.Rows.Err()) }

func (r *batchRows) Scan(dest ...interface{}) error { return r.tx.lease.check(r.Rows.Scan(dest...)) }

func (r *batchRows) Values() ([]interface{}, error) {
	values, err := r.Rows.Values()
	return values, r.tx.lease.check(err)
}

type batchRow struct {
	row pgx.Row
	tx  *batchTx
}

func (r *batchRow) Scan(dest ...interface{}) error { return r.tx.done(r.row.Scan(dest...)) }

type batchResults struct {
	pgx.BatchResults
	tx *batchTx
}

func (b *batchResults) Exec() (pgconn.CommandTag, error) {
	tag, err := b.BatchResults.Exec()
	return tag, b.tx.done(err)
}

func (b *batchResults) Query() (pgx.Rows, error) {
	rows, err := b.BatchResults.Query()
	if rows != nil {
		rows = &batchRows{Rows: rows, tx: b.tx}
	}
	return rows, b.tx.done(err)
}

func (b *batchResults) QueryRow() pgx.Row {
	return &batchRow{row: b.BatchResults.QueryRow(), tx: b.tx}
}

func (b *batchResults) QueryFunc(scans []interface{}, f func(pgx.QueryFuncRow) error) (pgconn.CommandTag, error) {
	tag, err := b.BatchResults.QueryFunc(scans, f)
	return tag, b.tx.done(err)
}

func (b *batchResults) Close() error { return b.tx.done(b.BatchResults.Close()) }
