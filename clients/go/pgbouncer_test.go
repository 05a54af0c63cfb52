// Copyright (c) 2026, the fencing developers
//
// A lease's whole life through PgBouncer in transaction pooling mode:
// every transaction may run on another server connection, so nothing may
// live in the session, and nothing of pgfencing's may be prepared on one.
// The application's own statements with arguments use pgx's describe
// mode (statement_cache_mode=describe), which prepares nothing by name.

package pgfencing_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v4"
	"github.com/jackc/pgx/v4/pgxpool"

	"fencing/pgfencing"
)

// bouncerPool is a pool on PgBouncer, with pgx's describe mode for the
// test's own statements.
func bouncerPool(t *testing.T) *pgxpool.Pool {
	return newPool(t, connString("port="+os.Getenv("FENCING_BOUNCER_PORT"), "statement_cache_mode=describe",
		"pool_max_conns=4"))
}

func TestALeaseThroughPgBouncer(t *testing.T) {
	t.Parallel()
	pool, table, ctx := bouncerPool(t), ledger(t), context.Background()
	name := unique("bouncer")
	ttl := 1500 * time.Millisecond
	lease, err := pgfencing.Acquire(ctx, pool, name, ttl)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 8; i++ {
		err := lease.Transaction(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "UPDATE "+table+" SET amount = amount + 1 WHERE id = $1", 1+i%2); err != nil {
				return err
			}
			var setting string
			if err := tx.QueryRow(ctx, "SELECT current_setting('fencing.token')").Scan(&setting); err != nil {
				return err
			}
			if setting != lease.TokenText() {
				t.Errorf("fencing.token in batch %d: %s", i, setting)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
	}
	// after each COMMIT, no server connection of the pooler keeps the token
	for i := 0; i < 4; i++ {
		var setting *string
		one(t, pool, &setting, "SELECT nullif(current_setting('fencing.token', true), '')")
		if setting != nil {
			t.Fatalf("a server connection kept fencing.token %s", *setting)
		}
	}
	if closedWithin(lease.Done(), 2*ttl) {
		t.Fatalf("the renewals through PgBouncer did not keep the lease: %v", lease.Err())
	}
	if _, err := pgfencing.Acquire(ctx, pool, name, ttl); !errors.Is(err, pgfencing.ErrBusy) {
		t.Fatalf("a second Acquire through PgBouncer: %v", err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for _, id := range []int{1, 2} {
		var n int
		var fence int64
		if err := admin(t).QueryRow(ctx, "SELECT amount, fence FROM "+table+" WHERE id = $1", id).Scan(&n, &fence); err != nil {
			t.Fatal(err)
		}
		if n != 4 || fence != lease.Token() {
			t.Fatalf("row %d: amount %d fence %d, want 4 and %d", id, n, fence, lease.Token())
		}
	}
}

func TestAStaleHolderThroughPgBouncer(t *testing.T) {
	t.Parallel()
	pool, table, ctx := bouncerPool(t), ledger(t), context.Background()
	name := unique("bouncer-stale")
	old, err := pgfencing.Acquire(ctx, pool, name, time.Second, pgfencing.WithoutRenewal(), pgfencing.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	newer, err := pgfencing.Acquire(ctx, pool, name, 30*time.Second, pgfencing.WithWait(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer newer.Release(ctx)
	write := func(lease *pgfencing.Lease, amount int) error {
		return lease.Transaction(ctx, pool, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "UPDATE "+table+" SET amount = $1 WHERE id = 1", amount)
			return err
		})
	}
	if err := write(newer, 1); err != nil {
		t.Fatal(err)
	}
	if err := write(old, 2); !errors.Is(err, pgfencing.ErrLeaseLost) {
		t.Fatalf("the stale holder's batch: %v, want ErrLeaseLost", err)
	}
	if got := amount(t, table, 1); got != 1 {
		t.Fatalf("row 1: %d, want the newer holder's 1", got)
	}
}
