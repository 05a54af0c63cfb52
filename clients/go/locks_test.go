// Copyright (c) 2026, the fencing developers
//
// Transaction locks: TryLock and Lock in a transaction, busy, ending with
// the transaction, refused outside a transaction block; and what a
// transaction that holds a lock or a lease and then sits idle holds back:
// no snapshot (its backend_xmin stays NULL), whatever pgfencing sent.

package pgfencing_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v4"

	"fencing/pgfencing"
)

func TestTryLockAndLock(t *testing.T) {
	t.Parallel()
	pool := newPool(t, connString())
	ctx := context.Background()
	name := unique("report")
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	token, err := pgfencing.TryLock(ctx, tx, name)
	if err != nil || token <= 1<<53 {
		t.Fatalf("TryLock: %d, %v", token, err)
	}
	again, err := pgfencing.Lock(ctx, tx, "  "+name+" ", 0)
	if err != nil || again != token {
		t.Fatalf("Lock of a lock the transaction holds: %d, %v; want the same token %d", again, err, token)
	}
	other, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pgfencing.TryLock(ctx, other, name); !errors.Is(err, pgfencing.ErrBusy) {
		t.Fatalf("TryLock of a held name: %v, want ErrBusy", err)
	}
	started := time.Now()
	if _, err := pgfencing.Lock(ctx, other, name, 300*time.Millisecond); !errors.Is(err, pgfencing.ErrBusy) ||
		time.Since(started) < 300*time.Millisecond {
		t.Fatalf("Lock of a held name: %v after %v, want ErrBusy after 300 ms", err, time.Since(started))
	}
	got := make(chan error, 1)
	go func() {
		_, err := pgfencing.Lock(ctx, other, name, pgfencing.WaitForever)
		got <- err
	}()
	time.Sleep(200 * time.Millisecond)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("Lock waiting for a commit: %v", err)
	}
	_ = other.Rollback(ctx)
}

func TestLocksAreRefusedOutsideATransactionBlock(t *testing.T) {
	t.Parallel()
	conn, tx := outsideItsBlock(t)
	ctx := context.Background()
	name := unique("outside")
	if _, err := pgfencing.TryLock(ctx, tx, name); !errors.Is(err, pgfencing.ErrNotInTransaction) {
		t.Fatalf("TryLock outside a transaction block: %v", err)
	}
	if _, err := pgfencing.Lock(ctx, tx, name, time.Second); !errors.Is(err, pgfencing.ErrNotInTransaction) {
		t.Fatalf("Lock outside a transaction block: %v", err)
	}
	var held *int64
	one(t, conn, &held, "SELECT fencing.held_token($1)", name)
	if held != nil {
		t.Fatal("a refused lock was taken")
	}
	_ = tx.Rollback(ctx)
}

func backendXmin(t *testing.T, pid uint32) *uint32 {
	t.Helper()
	a := admin(t)
	waitFor(t, 10*time.Second, "the session idle in transaction", func() bool {
		var state string
		one(t, a, &state, "SELECT state FROM pg_stat_activity WHERE pid = $1", pid)
		return state == "idle in transaction"
	})
	var xmin *uint32
	one(t, a, &xmin, "SELECT backend_xmin::text::bigint FROM pg_stat_activity WHERE pid = $1", pid)
	return xmin
}

func TestAnIdleHolderHoldsNoSnapshot(t *testing.T) {
	t.Parallel()
	pool := newPool(t, connString())
	ctx := context.Background()
	lease, err := pgfencing.Acquire(ctx, pool, unique("idle-lease"), time.Minute, pgfencing.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(ctx)
	for what, hold := range map[string]func(pgx.Tx) error{
		"TryLock": func(tx pgx.Tx) error { _, err := pgfencing.TryLock(ctx, tx, unique("idle")); return err },
		"Lock":    func(tx pgx.Tx) error { _, err := pgfencing.Lock(ctx, tx, unique("idle"), time.Second); return err },
		"Use":     func(tx pgx.Tx) error { return lease.Use(ctx, tx) },
		"Lock forever": func(tx pgx.Tx) error {
			_, err := pgfencing.Lock(ctx, tx, unique("idle"), pgfencing.WaitForever)
			return err
		},
	} {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := hold(tx); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if xmin := backendXmin(t, tx.Conn().PgConn().PID()); xmin != nil {
			t.Errorf("idle after %s: backend_xmin %d, want NULL", what, *xmin)
		}
		_ = tx.Rollback(ctx)
	}
	err = lease.Transaction(ctx, pool, func(tx pgx.Tx) error {
		if xmin := backendXmin(t, tx.Conn().PgConn().PID()); xmin != nil {
			t.Errorf("idle in a batch of Transaction: backend_xmin %d, want NULL", *xmin)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
