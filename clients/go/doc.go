// Copyright (c) 2026, the fencing developers

// Package pgfencing holds leases and locks of the PostgreSQL extension
// fencing with pgx v4, with a fence token the database checks on every
// write: a holder that was paused past its lease wakes up, writes, and
// gets ErrStaleToken or ErrLeaseLost instead of corrupting the data.
//
//	lease, err := pgfencing.Acquire(ctx, pool, "invoice-run:2026-10", 30*time.Second)
//	if errors.Is(err, pgfencing.ErrBusy) {
//		return nil // another worker has the run
//	}
//	defer lease.Release(context.Background())
//	for more := true; more; {
//		err := lease.Transaction(ctx, pool, func(tx pgx.Tx) error {
//			tag, err := tx.Exec(ctx, billNextBatch)
//			more = tag.RowsAffected() > 0
//			return err
//		})
//		if err != nil {
//			return err // ErrLeaseLost, ErrStaleToken: stop, do not retry
//		}
//	}
//
// The lease is held by the server, not by a transaction or a connection;
// a goroutine renews it every ttl/3, and Done, Context and the OnLost
// functions tell the program the moment it is lost.
package pgfencing
