// Copyright (c) 2026, the fencing developers
//
// SQLSTATE mapping: Translate, and the errors of a batch while its lease
// is held (fencing's SQLSTATEs become pgfencing's errors, FN004 and FN001
// lose the lease, other errors stay pgx's), each with pgx's error as its
// cause.

package pgfencing_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgconn"
	"github.com/jackc/pgx/v4"

	"fencing/pgfencing"
)

func raise(state string) string {
	return "DO $$ BEGIN RAISE EXCEPTION 'raised %' , '" + state + "' USING ERRCODE = '" + state + "'; END $$"
}

var mapped = []struct {
	state string
	err   error // nil: not one of pgfencing's
	lost  bool  // the lease is lost by it
}{
	{"FN001", pgfencing.ErrStaleToken, true},
	{"FN002", pgfencing.ErrNameCollision, false},
	{"FN003", pgfencing.ErrNotPreloaded, false},
	{"FN004", pgfencing.ErrLeaseLost, true},
	{"25P01", pgfencing.ErrNotInTransaction, false},
	{"22012", nil, false},
	{"40001", nil, false},
}

var kinds = []error{pgfencing.ErrBusy, pgfencing.ErrLeaseLost, pgfencing.ErrStaleToken, pgfencing.ErrNameCollision,
	pgfencing.ErrNotPreloaded, pgfencing.ErrNotInTransaction, pgfencing.ErrReleased}

// checkMapped: err is want (and no other kind but ErrLeaseLost when
// lost), with pgx's error of SQLSTATE state as its cause.
func checkMapped(t *testing.T, what string, err, want error, lost bool, state string) {
	t.Helper()
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != state {
		t.Errorf("%s %s: %v: pgx's error is not its cause", what, state, err)
	}
	for _, kind := range kinds {
		is := kind == want || lost && kind == pgfencing.ErrLeaseLost
		if errors.Is(err, kind) != is {
			t.Errorf("%s %s: errors.Is(%v, %v) is %v", what, state, err, kind, !is)
		}
	}
}

func TestTranslateMapsEachSQLState(t *testing.T) {
	t.Parallel()
	a := admin(t)
	for _, c := range mapped {
		_, err := a.Exec(context.Background(), raise(c.state))
		checkMapped(t, "Translate", pgfencing.Translate(err), c.err, c.err == pgfencing.ErrLeaseLost, c.state)
	}
	if pgfencing.Translate(nil) != nil {
		t.Error("Translate(nil) is not nil")
	}
}

func TestABatchsErrorsWhileItsLeaseIsHeld(t *testing.T) {
	t.Parallel()
	pool := newPool(t, connString())
	ctx := context.Background()
	for _, c := range mapped {
		lease, err := pgfencing.Acquire(ctx, pool, unique("mapped"), 30*time.Second, pgfencing.WithLogger(quiet))
		if err != nil {
			t.Fatal(err)
		}
		err = lease.Transaction(ctx, pool, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, raise(c.state))
			return err
		})
		checkMapped(t, "a batch's", err, c.err, c.lost, c.state)
		if lost := lease.Err() != nil; lost != c.lost {
			t.Errorf("%s in a batch: the lease lost %v, want %v", c.state, lost, c.lost)
		}
		_ = lease.Release(ctx)
	}
}
