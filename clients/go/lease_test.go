// Copyright (c) 2026, the fencing developers
//
// Lease: acquire and release, the token, Use and Transaction (one round
// trip, commit and rollback), a stale write, Renew, a broken lease, the
// sources (a pool, one *pgx.Conn), and bad arguments.

package pgfencing_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgconn"
	"github.com/jackc/pgx/v4"
	"github.com/jackc/pgx/v4/pgxpool"

	"fencing/pgfencing"
)

func quiet(string, ...interface{}) {}

func TestAcquireAndRelease(t *testing.T) {
	t.Parallel()
	pool := newPool(t, connString())
	a := admin(t)
	name := unique("acquire")
	lease, err := pgfencing.Acquire(context.Background(), pool, name, 30*time.Second, pgfencing.WithHolder("test job"))
	if err != nil {
		t.Fatal(err)
	}
	if lease.Token() <= 1<<53 {
		t.Fatalf("token %d is not above 2^53", lease.Token())
	}
	var token int64
	var holder, text string
	if err := a.QueryRow(context.Background(), "SELECT token, token::text, holder FROM fencing.leases WHERE name = $1",
		name).Scan(&token, &text, &holder); err != nil {
		t.Fatal(err)
	}
	if token != lease.Token() || text != lease.TokenText() || holder != "test job" {
		t.Fatalf("fencing.leases: %d %q %q; the lease: %d %q", token, text, holder, lease.Token(), lease.TokenText())
	}
	out, err := json.Marshal(map[string]string{"token": lease.TokenText()})
	if err != nil || string(out) != `{"token":"`+text+`"}` {
		t.Fatalf("as JSON: %s %v", out, err)
	}
	if lease.Err() != nil {
		t.Fatalf("Err of a held lease: %v", lease.Err())
	}
	if err := lease.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !closedWithin(lease.Done(), time.Second) || lease.Context().Err() == nil {
		t.Fatal("Done is not closed after Release")
	}
	if !errors.Is(lease.Err(), pgfencing.ErrReleased) {
		t.Fatalf("Err after Release: %v", lease.Err())
	}
	var n int
	one(t, a, &n, "SELECT count(*) FROM fencing.leases WHERE name = $1", name)
	if n != 0 {
		t.Fatal("the lease is still in fencing.leases after Release")
	}
	if err := lease.Release(context.Background()); !errors.Is(err, pgfencing.ErrReleased) {
		t.Fatalf("a second Release: %v", err)
	}
	if err := lease.Transaction(context.Background(), pool, func(pgx.Tx) error { return nil }); !errors.Is(err, pgfencing.ErrReleased) {
		t.Fatalf("Transaction after Release: %v", err)
	}
}

func TestAcquireIsBusyWhileHeldUnderAnySpelling(t *testing.T) {
	t.Parallel()
	pool := newPool(t, connString())
	name := unique("Straße")
	lease, err := pgfencing.Acquire(context.Background(), pool, name, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(context.Background())
	for _, spelling := range []string{name, "  " + strings.ToUpper(name) + " "} {
		if _, err := pgfencing.Acquire(context.Background(), pool, spelling, 30*time.Second); !errors.Is(err, pgfencing.ErrBusy) {
			t.Fatalf("Acquire(%q) of a held name: %v, want ErrBusy", spelling, err)
		}
	}
}

func TestTransactionFencesTheBatch(t *testing.T) {
	t.Parallel()
	pool := newPool(t, connString())
	table := ledger(t)
	name := unique("batch")
	lease, err := pgfencing.Acquire(context.Background(), pool, name, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(context.Background())
	ctx := context.Background()
	err = lease.Transaction(ctx, pool, func(tx pgx.Tx) error {
		var setting string
		if err := tx.QueryRow(ctx, "SELECT current_setting('fencing.token')").Scan(&setting); err != nil {
			return err
		}
		if setting != lease.TokenText() {
			t.Errorf("fencing.token in the batch: %s, want %s", setting, lease.TokenText())
		}
		_, err := tx.Exec(ctx, "UPDATE "+table+" SET amount = 5 WHERE id = $1", 1)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	a := admin(t)
	var fence, resource int64
	one(t, a, &fence, "SELECT fence FROM "+table+" WHERE id = 1")
	one(t, a, &resource, "SELECT fence FROM fencing.resource_fences WHERE resource = fencing.normalize_name($1)", name)
	if fence != lease.Token() || resource != lease.Token() {
		t.Fatalf("the row's fence %d and the run's fence %d, want the token %d", fence, resource, lease.Token())
	}

	failed := errors.New("the batch's own failure")
	err = lease.Transaction(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "UPDATE "+table+" SET amount = 6 WHERE id = 1"); err != nil {
			return err
		}
		return failed
	})
	if err != failed {
		t.Fatalf("Transaction returned %v, want the function's own error", err)
	}
	func() {
		defer func() { _ = recover() }()
		_ = lease.Transaction(ctx, pool, func(tx pgx.Tx) error {
			_, _ = tx.Exec(ctx, "UPDATE "+table+" SET amount = 7 WHERE id = 1")
			panic("the batch panics")
		})
	}()
	if got := amount(t, table, 1); got != 5 {
		t.Fatalf("row 1: %d, want 5: a failed batch and a panicking one must roll back", got)
	}
	if lease.Err() != nil {
		t.Fatalf("the lease after the batches: %v", lease.Err())
	}
}

// capture is a pgx logger that keeps the statements pgx executed.
type capture struct {
	mu  sync.Mutex
	sql []string
}

func (c *capture) Log(_ context.Context, _ pgx.LogLevel, msg string, data map[string]interface{}) {
	if msg == "Exec" || msg == "Query" {
		if sql, ok := data["sql"].(string); ok {
			c.mu.Lock()
			c.sql = append(c.sql, sql)
			c.mu.Unlock()
		}
	}
}

func TestTransactionSendsBeginAndUseLeaseInOneRoundTrip(t *testing.T) {
	t.Parallel()
	cfg, err := pgxpool.ParseConfig(connString())
	if err != nil {
		t.Fatal(err)
	}
	log := &capture{}
	cfg.ConnConfig.Logger = log
	cfg.ConnConfig.LogLevel = pgx.LogLevelInfo
	pool, err := pgxpool.ConnectConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	lease, err := pgfencing.Acquire(context.Background(), pool, unique("round-trip"), 30*time.Second, pgfencing.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(context.Background())
	log.mu.Lock()
	log.sql = nil
	log.mu.Unlock()
	if err := lease.Transaction(context.Background(), pool, func(pgx.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	if len(log.sql) != 2 || !strings.HasPrefix(log.sql[0], "begin ") || !strings.Contains(log.sql[0], "fencing.use_lease(") ||
		log.sql[1] != "commit" {
		t.Fatalf("an empty batch sent %q, want BEGIN with use_lease in one statement, then COMMIT", log.sql)
	}
}

func TestUseInTheCallersTransaction(t *testing.T) {
	t.Parallel()
	pool := newPool(t, connString())
	table := ledger(t)
	lease, err := pgfencing.Acquire(context.Background(), pool, unique("use"), 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(context.Background())
	ctx := context.Background()
	err = pool.BeginTxFunc(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead}, func(tx pgx.Tx) error {
		if err := lease.Use(ctx, tx); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "UPDATE "+table+" SET amount = 3 WHERE id = 2")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var fence int64
	one(t, admin(t), &fence, "SELECT fence FROM "+table+" WHERE id = 2")
	if fence != lease.Token() {
		t.Fatalf("row 2's fence %d, want the token %d", fence, lease.Token())
	}

	_, tx := outsideItsBlock(t)
	if err := lease.Use(ctx, tx); !errors.Is(err, pgfencing.ErrNotInTransaction) {
		t.Fatalf("Use outside a transaction block: %v, want ErrNotInTransaction", err)
	}
}

func TestAStaleWriteInABatchIsStaleTokenAndLosesTheLease(t *testing.T) {
	t.Parallel()
	pool := newPool(t, connString())
	table := ledger(t)
	name := unique("stale")
	reasons := make(chan error, 2)
	lease, err := pgfencing.Acquire(context.Background(), pool, name, 30*time.Second, pgfencing.WithLogger(quiet),
		pgfencing.OnLost(func(reason error) { reasons <- reason }))
	if err != nil {
		t.Fatal(err)
	}
	// a newer holder's token reached the row first
	mustExec(t, admin(t), "UPDATE "+table+" SET amount = 1, fence = fencing.next_token() WHERE id = 1")
	ctx := context.Background()
	err = lease.Transaction(ctx, pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "UPDATE "+table+" SET amount = 99 WHERE id = 1")
		return err
	})
	var pgErr *pgconn.PgError
	if !errors.Is(err, pgfencing.ErrStaleToken) || !errors.Is(err, pgfencing.ErrLeaseLost) ||
		!errors.As(err, &pgErr) || pgErr.Code != "FN001" {
		t.Fatalf("a stale write: %v, want ErrStaleToken and ErrLeaseLost caused by FN001", err)
	}
	if len(reasons) != 1 || !closedWithin(lease.Done(), time.Second) || !errors.Is(lease.Err(), pgfencing.ErrLeaseLost) {
		t.Fatalf("the lease after FN001: OnLost called %d times, Err %v", len(reasons), lease.Err())
	}
	if err := lease.Transaction(ctx, pool, func(pgx.Tx) error { return nil }); !errors.Is(err, pgfencing.ErrLeaseLost) {
		t.Fatalf("the next batch: %v, want ErrLeaseLost", err)
	}
	if got := amount(t, table, 1); got != 1 {
		t.Fatalf("row 1: %d, want the newer holder's 1", got)
	}
	_ = lease.Release(ctx)
}

func TestABatchThatSwallowedItsErrorIsNotASuccess(t *testing.T) {
	t.Parallel()
	pool := newPool(t, connString())
	table := ledger(t)
	lease, err := pgfencing.Acquire(context.Background(), pool, unique("swallowed"), 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(context.Background())
	ctx := context.Background()
	err = lease.Transaction(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "UPDATE "+table+" SET amount = 7 WHERE id = 1"); err != nil {
			return err
		}
		_, _ = tx.Exec(ctx, "SELECT 1/0") // caught and ignored
		return nil
	})
	if !errors.Is(err, pgx.ErrTxCommitRollback) {
		t.Fatalf("a batch whose transaction failed: %v, want pgx's ErrTxCommitRollback", err)
	}
	if got := amount(t, table, 1); got != 0 {
		t.Fatalf("row 1: %d: the failed batch was committed", got)
	}
	if lease.Err() != nil {
		t.Fatalf("the lease after a failed batch: %v", lease.Err())
	}
}

func TestRenewReturnsTheNewExpiry(t *testing.T) {
	t.Parallel()
	pool := newPool(t, connString())
	name := unique("renew")
	lease, err := pgfencing.Acquire(context.Background(), pool, name, 5*time.Second, pgfencing.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(context.Background())
	expires, err := lease.Renew(context.Background(), 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var server time.Time
	one(t, admin(t), &server, "SELECT expires_at FROM fencing.leases WHERE name = $1", name)
	if !server.Equal(expires) || time.Until(expires) < 100*time.Second {
		t.Fatalf("Renew returned %v, fencing.leases says %v", expires, server)
	}
}

func TestABrokenLeaseIsLostAndTold(t *testing.T) {
	t.Parallel()
	pool := newPool(t, connString())
	name := unique("broken")
	ttl := 1500 * time.Millisecond
	told := make(chan error, 2)
	handle := make(chan *pgfencing.Lease, 1)
	released := make(chan error, 1)
	lease, err := pgfencing.Acquire(context.Background(), pool, name, ttl, pgfencing.WithLogger(quiet),
		pgfencing.OnLost(func(reason error) { told <- reason }),
		pgfencing.OnLost(func(error) { released <- (<-handle).Release(context.Background()) }))
	if err != nil {
		t.Fatal(err)
	}
	handle <- lease
	var broken int64
	one(t, admin(t), &broken, "SELECT fencing.break_lease($1)", name)
	if broken != lease.Token() {
		t.Fatalf("break_lease returned %d, want %d", broken, lease.Token())
	}
	if !closedWithin(lease.Done(), 3*ttl) {
		t.Fatal("the renewal did not notice the break")
	}
	var pgErr *pgconn.PgError
	select {
	case reason := <-told:
		if !errors.Is(reason, pgfencing.ErrLeaseLost) || !errors.As(reason, &pgErr) || pgErr.Code != "FN004" {
			t.Fatalf("OnLost was told %v, want ErrLeaseLost caused by FN004", reason)
		}
	default:
		t.Fatal("Done was closed before OnLost was called")
	}
	if err := <-released; !errors.Is(err, pgfencing.ErrLeaseLost) {
		t.Fatalf("Release of the broken lease, from OnLost: %v, want ErrLeaseLost", err)
	}
	if !errors.Is(lease.Err(), pgfencing.ErrLeaseLost) || lease.Context().Err() == nil {
		t.Fatalf("Err %v, Context %v", lease.Err(), lease.Context().Err())
	}
	if err := lease.Transaction(context.Background(), pool, func(pgx.Tx) error { return nil }); !errors.Is(err, pgfencing.ErrReleased) {
		t.Fatalf("Transaction after the loss and the release: %v", err)
	}
}

func TestOneConnectionAsTheSource(t *testing.T) {
	t.Parallel()
	conn := connect(t, connString("application_name=one-conn"))
	table := ledger(t)
	ttl := 1500 * time.Millisecond
	ctx := context.Background()
	lease, err := pgfencing.Acquire(ctx, conn, unique("one-conn"), ttl)
	if err != nil {
		t.Fatal(err)
	}
	if err := lease.Transaction(ctx, conn, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "UPDATE "+table+" SET amount = 4 WHERE id = 1")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	// the renewals keep it, on a connection of their own
	if closedWithin(lease.Done(), 2*ttl) {
		t.Fatalf("lost while the renewals should keep it: %v", lease.Err())
	}
	// the caller's connection in a failed transaction: the release goes
	// through the lease's own connection, and the transaction is left to
	// the caller
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = tx.Exec(ctx, "SELECT 1/0")
	if err := lease.Release(ctx); err != nil {
		t.Fatalf("Release while the caller's transaction failed: %v", err)
	}
	if status := conn.PgConn().TxStatus(); status != 'E' {
		t.Fatalf("the caller's transaction: status %c, want E", status)
	}
	_ = tx.Rollback(ctx)
}

func TestBadArguments(t *testing.T) {
	t.Parallel()
	pool := newPool(t, connString())
	ctx := context.Background()
	for _, c := range []struct {
		name string
		ttl  time.Duration
		opts []pgfencing.Option
	}{
		{"zero-ttl", 0, nil},
		{"nul\x00name", time.Second, nil},
		{"bad-utf8-\xff", time.Second, nil},
		{"negative-wait", time.Second, []pgfencing.Option{pgfencing.WithWait(-time.Second)}},
		{"holder-nul", time.Second, []pgfencing.Option{pgfencing.WithHolder("a\x00b")}},
	} {
		if lease, err := pgfencing.Acquire(ctx, pool, c.name, c.ttl, c.opts...); err == nil {
			_ = lease.Release(ctx)
			t.Errorf("Acquire(%q, %v) was accepted", c.name, c.ttl)
		}
	}
	// the server's own refusal: an empty name
	var pgErr *pgconn.PgError
	if _, err := pgfencing.Acquire(ctx, pool, "", time.Second); !errors.As(err, &pgErr) || pgErr.Code != "22023" {
		t.Errorf("Acquire of an empty name: %v, want the server's 22023", err)
	}
	// a name written as hex (not plain ASCII) reaches the server intact
	name := unique("ＩＮＶＯＩＣＥ 'quoted' \\ back")
	lease, err := pgfencing.Acquire(ctx, pool, name, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(ctx)
	var normalized string
	one(t, admin(t), &normalized, "SELECT name FROM fencing.leases WHERE token = $1", lease.Token())
	var want string
	one(t, admin(t), &want, "SELECT fencing.normalize_name($1)", name)
	if normalized != want {
		t.Fatalf("the lease's name %q, want %q", normalized, want)
	}
}
