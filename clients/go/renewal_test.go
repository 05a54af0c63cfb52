// Copyright (c) 2026, the fencing developers
//
// The renewal and the deadline: a renewal every ttl/3 (not every ttl); it
// keeps the lease while the work is busy for longer than the ttl (and
// without it the lease is lost); it survives losing its connection; a
// renewal that cannot get through loses the lease at its deadline (the
// watchdog), also while another renewal, sent after it, got through with
// a shorter ttl; a batch that idles past the ttl is ended by the server
// and is ErrLeaseLost; and once the lease is lost or past its deadline
// every error of a batch is ErrLeaseLost, after the loss has run.

package pgfencing_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgconn"
	"github.com/jackc/pgx/v4"

	"fencing/pgfencing"
)

func TestRenewalComesEveryThirdOfTheTTL(t *testing.T) {
	t.Parallel()
	pool := newPool(t, connString())
	a := admin(t)
	name := unique("cadence")
	ttl := 3 * time.Second
	lease, err := pgfencing.Acquire(context.Background(), pool, name, ttl)
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(context.Background())
	// the server's renewed_at of each renewal, seen from outside, against
	// acquired_at: both on the server's clock
	var seen []time.Duration
	for until := time.Now().Add(ttl + ttl/4); time.Now().Before(until); time.Sleep(50 * time.Millisecond) {
		var since time.Duration
		one(t, a, &since, "SELECT renewed_at - acquired_at FROM fencing.leases WHERE name = $1", name)
		if since > 0 && (len(seen) == 0 || since != seen[len(seen)-1]) {
			seen = append(seen, since)
		}
	}
	if len(seen) < 3 {
		t.Fatalf("%d renewals in %v of a lease of %v (at %v after the acquisition), want one every ttl/3",
			len(seen), ttl+ttl/4, ttl, seen)
	}
	last := time.Duration(0)
	for _, at := range seen {
		if gap := at - last; gap < ttl/3-ttl/10 || gap > ttl/2 {
			t.Fatalf("renewals at %v after the acquisition: a gap of %v, want about ttl/3 = %v", seen, gap, ttl/3)
		}
		last = at
	}
}

func TestRenewalKeepsTheLeaseWhileTheWorkIsBusy(t *testing.T) {
	t.Parallel()
	pool := newPool(t, connString())
	table := ledger(t)
	ttl := 1500 * time.Millisecond
	busy := func(lease *pgfencing.Lease, row int) error {
		return lease.Transaction(context.Background(), pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(context.Background(), "SELECT pg_sleep(3.5)"); err != nil {
				return err
			}
			_, err := tx.Exec(context.Background(), "UPDATE "+table+" SET amount = amount + 1 WHERE id = $1", row)
			return err
		})
	}
	kept, err := pgfencing.Acquire(context.Background(), pool, unique("busy"), ttl)
	if err != nil {
		t.Fatal(err)
	}
	unrenewed, err := pgfencing.Acquire(context.Background(), pool, unique("busy-unrenewed"), ttl,
		pgfencing.WithoutRenewal(), pgfencing.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	go func() { done <- busy(unrenewed, 2) }()
	if err := busy(kept, 1); err != nil {
		t.Fatalf("the renewed lease's busy batch: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the busy batch without renewal, which committed before its next statement: %v", err)
	}
	if kept.Err() != nil {
		t.Fatalf("the renewed lease after a batch of 3.5 s: %v", kept.Err())
	}
	if err := kept.Transaction(context.Background(), pool, func(pgx.Tx) error { return nil }); err != nil {
		t.Fatalf("the next batch of the renewed lease: %v", err)
	}
	if err := unrenewed.Transaction(context.Background(), pool, func(pgx.Tx) error { return nil }); !errors.Is(err, pgfencing.ErrLeaseLost) {
		t.Fatalf("the next batch without renewal: %v, want ErrLeaseLost", err)
	}
	if err := kept.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestRenewalSurvivesLosingItsConnection(t *testing.T) {
	t.Parallel()
	app := unique("renewer")
	pool := newPool(t, connString("application_name="+app))
	a := admin(t)
	ttl := 1500 * time.Millisecond
	lease, err := pgfencing.Acquire(context.Background(), pool, unique("reconnect"), ttl, pgfencing.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(context.Background())
	waitFor(t, 10*time.Second, "the renewal's connection", func() bool {
		var n int
		one(t, a, &n, "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", app)
		return n >= 2 // the pool's and the renewal's
	})
	mustExec(t, a, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1", app)
	var terminatedAt time.Time
	one(t, a, &terminatedAt, "SELECT now()")
	if closedWithin(lease.Done(), 2*ttl) {
		t.Fatalf("lost after its connections were terminated: %v", lease.Err())
	}
	var renewed bool
	one(t, a, &renewed, "SELECT renewed_at > $2 AND expires_at > now() FROM fencing.leases WHERE name = $1 AND token = $3",
		lease.Name(), terminatedAt, lease.Token())
	if !renewed {
		t.Fatal("no renewal reached the server after its connection was terminated")
	}
}

func TestAStalledRenewalLosesTheLeaseByItsDeadline(t *testing.T) {
	t.Parallel()
	proxy := newStallingProxy(t)
	pool := newPool(t, proxy.connString())
	a := admin(t)
	name := unique("stalled")
	ttl := 2 * time.Second
	var toldAt atomic.Value
	lease, err := pgfencing.Acquire(context.Background(), pool, name, ttl, pgfencing.WithLogger(quiet),
		pgfencing.OnLost(func(error) { toldAt.Store(time.Now()) }))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		proxy.resume()
		_ = lease.Release(context.Background())
	}()
	// a renewal by hand for a minute, then the goroutine's renewals, with
	// the lease's own ttl, put the server's expiry back near
	if _, err := lease.Renew(context.Background(), time.Minute); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 3*ttl, "a renewal with the lease's own ttl", func() bool {
		var back bool
		one(t, a, &back, "SELECT expires_at - now() < interval '10 s' FROM fencing.leases WHERE name = $1", name)
		return back
	})
	proxy.stall()
	stalledAt := time.Now()
	if !closedWithin(lease.Done(), ttl+1500*time.Millisecond) {
		t.Fatalf("not lost %v after the stall of the renewals of a lease of %v", ttl+1500*time.Millisecond, ttl)
	}
	told, _ := toldAt.Load().(time.Time)
	if told.IsZero() || told.Sub(stalledAt) > ttl+time.Second {
		t.Fatalf("OnLost ran %v after the stall", told.Sub(stalledAt))
	}
	if !errors.Is(lease.Err(), pgfencing.ErrLeaseLost) || !strings.Contains(lease.Err().Error(), "not renewed") {
		t.Fatalf("Err: %v", lease.Err())
	}
}

func TestOverlappingRenewalsNeverHoldTheLeasePastTheServersExpiry(t *testing.T) {
	// Renew for a minute is sent and stalls on its way; before its answer,
	// a batch renews for the lease's own ttl on another connection and
	// gets through.  Either may be the renewal the server applied last:
	// the lease must count as lost once the server let it go and another
	// holder took it, not a minute after the stalled renewal was sent.
	t.Parallel()
	proxy := newStallingProxy(t)
	stalledPool := newPool(t, proxy.connString())
	direct := newPool(t, connString())
	a := admin(t)
	name := unique("overlap")
	ttl := 2 * time.Second
	lease, err := pgfencing.Acquire(context.Background(), stalledPool, name, ttl, pgfencing.WithoutRenewal(),
		pgfencing.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	proxy.stall()
	stalled := make(chan struct{})
	go func() {
		defer close(stalled)
		_, _ = lease.Renew(context.Background(), time.Minute)
	}()
	defer func() {
		proxy.resume()
		<-stalled
	}()
	waitFor(t, 10*time.Second, "Renew reaching the proxy", proxy.isHolding)
	if err := lease.Transaction(context.Background(), direct, func(pgx.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	var other *int64
	one(t, a, &other, "SELECT fencing.acquire_lease($1, '30 s', '10 s', 'the next holder')", name)
	if other == nil {
		t.Fatal("the server kept the lease for longer than the batch's ttl")
	}
	defer mustExec(t, a, "SELECT fencing.release_lease($1, $2)", name, *other)
	if !closedWithin(lease.Done(), time.Second) {
		t.Fatal("the lease still counts as held after the server let it go and another holder took it")
	}
	if err := lease.Transaction(context.Background(), direct, func(pgx.Tx) error { return nil }); !errors.Is(err, pgfencing.ErrLeaseLost) {
		t.Fatalf("the next batch: %v, want ErrLeaseLost", err)
	}
}

func TestABatchIdlePastTheTTLIsEndedAndLeaseLost(t *testing.T) {
	t.Parallel()
	pool := newPool(t, connString())
	a := admin(t)
	table := ledger(t)
	ttl := time.Second
	lease, err := pgfencing.Acquire(context.Background(), pool, unique("idle"), ttl, pgfencing.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(context.Background())
	ctx := context.Background()
	err = lease.Transaction(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "UPDATE "+table+" SET amount = 9 WHERE id = 1"); err != nil {
			return err
		}
		// the batch sits idle; the renewals keep the lease, and the server
		// ends the session at the lease's idle limit
		pid := tx.Conn().PgConn().PID()
		waitFor(t, 10*ttl, "the server ending the idle batch's session", func() bool {
			var n int
			one(t, a, &n, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pid)
			return n == 0
		})
		_, err := tx.Exec(ctx, "UPDATE "+table+" SET amount = 10 WHERE id = 1")
		return err
	})
	// pgx reads the server's FATAL 25P03 when its write gets through; on a
	// unix socket the write fails first, with a broken pipe
	var pgErr *pgconn.PgError
	if !errors.Is(err, pgfencing.ErrLeaseLost) || !strings.Contains(err.Error(), "idled") || errors.Unwrap(err) == nil ||
		errors.As(err, &pgErr) && pgErr.Code != "25P03" {
		t.Fatalf("the idle batch's next statement: %v, want ErrLeaseLost saying it idled, caused by pgx's error", err)
	}
	if !closedWithin(lease.Done(), time.Second) {
		t.Fatal("the lease is not lost after its batch idled past the ttl")
	}
	if got := amount(t, table, 1); got != 0 {
		t.Fatalf("row 1: %d: the ended batch was committed", got)
	}
}

func TestErrorsPastTheDeadlineAreLeaseLostAfterTheLossRan(t *testing.T) {
	t.Parallel()
	pool := newPool(t, connString())
	ttl := time.Second
	var told, sawLost atomic.Bool
	handle := make(chan *pgfencing.Lease, 1)
	lease, err := pgfencing.Acquire(context.Background(), pool, unique("past-deadline"), ttl,
		pgfencing.WithoutRenewal(), pgfencing.WithLogger(quiet),
		pgfencing.OnLost(func(error) { panic("a loss function that panics stops no other") }),
		pgfencing.OnLost(func(error) {
			sawLost.Store((<-handle).Err() != nil) // the reason is set before the functions run
			time.Sleep(time.Second)
			told.Store(true)
		}))
	if err != nil {
		t.Fatal(err)
	}
	handle <- lease
	after := make(chan bool, 1)
	go func() {
		<-lease.Done()
		after <- told.Load()
	}()
	ctx := context.Background()
	err = lease.Transaction(ctx, pool, func(tx pgx.Tx) error {
		// busy, not idle: the deadline passes during the statement, and
		// the watchdog loses the lease
		if _, err := tx.Exec(ctx, "SELECT pg_sleep(1.4)"); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "SELECT 1/0")
		if !told.Load() {
			t.Error("the statement's error came back before the OnLost functions had run")
		}
		return err
	})
	var pgErr *pgconn.PgError
	if !errors.Is(err, pgfencing.ErrLeaseLost) || !errors.As(err, &pgErr) || pgErr.Code != "22012" {
		t.Fatalf("an error past the deadline: %v, want ErrLeaseLost caused by pgx's 22012", err)
	}
	select {
	case toldFirst := <-after:
		if !toldFirst || !sawLost.Load() {
			t.Fatalf("the loss ran out of order: Err seen by OnLost %v, OnLost done when Done closed %v",
				sawLost.Load(), toldFirst)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Done was not closed")
	}
}
