// Copyright (c) 2026, the fencing developers
//
// Waiting for a held name happens in the server, on one statement, until
// a release wakes the waiter, the context's deadline or WithWait ends it
// (ErrBusy), or the context is cancelled, which ends the server's wait
// too.

package pgfencing_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"fencing/pgfencing"
)

// waiting: is the session of application_name app waiting in the server
// on one acquire_lease, and since when did that statement start?
func waiting(t *testing.T, app string) (bool, time.Time) {
	t.Helper()
	var n int
	var started time.Time
	err := admin(t).QueryRow(context.Background(), "SELECT count(*), coalesce(max(query_start), now())"+
		" FROM pg_stat_activity WHERE application_name = $1 AND state = 'active'"+
		" AND wait_event_type = 'Extension' AND query LIKE '%acquire_lease%'", app).Scan(&n, &started)
	if err != nil {
		t.Fatal(err)
	}
	return n == 1, started
}

func TestAcquireWaitsInTheServerUntilARelease(t *testing.T) {
	t.Parallel()
	name := unique("handover")
	app := unique("waiter")
	holder, err := pgfencing.Acquire(context.Background(), newPool(t, connString()), name, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	waiterPool := newPool(t, connString("application_name="+app))
	type result struct {
		lease *pgfencing.Lease
		err   error
		at    time.Time
	}
	got := make(chan result, 1)
	go func() {
		l, err := pgfencing.Acquire(context.Background(), waiterPool, name, time.Minute, pgfencing.WithWait(30*time.Second))
		got <- result{l, err, time.Now()}
	}()
	var since time.Time
	waitFor(t, 10*time.Second, "the waiter waiting in the server", func() bool {
		ok, started := waiting(t, app)
		since = started
		return ok
	})
	time.Sleep(500 * time.Millisecond)
	if ok, started := waiting(t, app); !ok || !started.Equal(since) {
		t.Fatal("the waiter does not wait on one statement in the server")
	}
	released := time.Now()
	if err := holder.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil {
		t.Fatalf("the waiter: %v", r.err)
	}
	// a ttl of a minute: only the release can have let it in this soon
	if r.at.Sub(released) > 5*time.Second {
		t.Fatalf("the waiter got the name %v after the release", r.at.Sub(released))
	}
	if r.lease.Token() <= holder.Token() {
		t.Fatal("the waiter's token is not above the holder's")
	}
	_ = r.lease.Release(context.Background())
}

func TestAcquireWaitsForTheContextsDeadlineOrWithWait(t *testing.T) {
	t.Parallel()
	pool := newPool(t, connString())
	name := unique("deadline")
	holder, err := pgfencing.Acquire(context.Background(), pool, name, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release(context.Background())
	for _, c := range []struct {
		what     string
		ctx      context.Context
		opts     []pgfencing.Option
		min, max time.Duration
	}{
		{"a context of 1.5 s", ctxFor(t, 1500*time.Millisecond), nil, 1200 * time.Millisecond, 3 * time.Second},
		{"WithWait(800 ms)", context.Background(), []pgfencing.Option{pgfencing.WithWait(800 * time.Millisecond)},
			800 * time.Millisecond, 3 * time.Second},
		{"WithWait(500 ms) in a context of a minute", ctxFor(t, time.Minute),
			[]pgfencing.Option{pgfencing.WithWait(500 * time.Millisecond)}, 500 * time.Millisecond, 3 * time.Second},
		{"neither: try once", context.Background(), nil, 0, 3 * time.Second},
	} {
		started := time.Now()
		_, err := pgfencing.Acquire(c.ctx, pool, name, time.Minute, c.opts...)
		took := time.Since(started)
		if !errors.Is(err, pgfencing.ErrBusy) {
			t.Fatalf("%s: %v, want ErrBusy", c.what, err)
		}
		if took < c.min || took > c.max {
			t.Fatalf("%s: ErrBusy after %v, want between %v and %v", c.what, took, c.min, c.max)
		}
	}
}

func TestACancelledAcquireStopsWaitingInTheServer(t *testing.T) {
	t.Parallel()
	a := admin(t)
	name := unique("cancel")
	app := unique("cancelled")
	holder, err := pgfencing.Acquire(context.Background(), newPool(t, connString()), name, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	returned := make(chan error, 1)
	go func() {
		_, err := pgfencing.Acquire(ctx, newPool(t, connString("application_name="+app)), name, time.Minute,
			pgfencing.WithWait(pgfencing.WaitForever))
		returned <- err
	}()
	waitFor(t, 10*time.Second, "the waiter waiting in the server", func() bool {
		ok, _ := waiting(t, app)
		return ok
	})
	cancel()
	select {
	case err := <-returned:
		if !errors.Is(err, context.Canceled) || errors.Is(err, pgfencing.ErrBusy) {
			t.Fatalf("a cancelled Acquire: %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a cancelled Acquire did not return")
	}
	waitFor(t, 10*time.Second, "the server's wait ending", func() bool {
		var n int
		one(t, a, &n, "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND query LIKE '%acquire_lease%'"+
			" AND state = 'active'", app)
		return n == 0
	})
	if err := holder.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	// a wait left in the server would take the name the moment it is free
	time.Sleep(300 * time.Millisecond)
	var n int
	one(t, a, &n, "SELECT count(*) FROM fencing.leases WHERE name = $1", name)
	if n != 0 {
		t.Fatal("the cancelled Acquire took the name after the release")
	}
}

func TestAContextEndedAfterTheGrantLeavesNothingHeld(t *testing.T) {
	// The server grants the waiter the name; its answer stops on the way
	// (a proxy that holds its traffic), and the context ends meanwhile:
	// Acquire returns the context's error, and must not leave the lease
	// it was granted taken.
	for _, c := range []struct {
		what string
		ctx  func() (context.Context, context.CancelFunc)
		end  func(context.Context, context.CancelFunc)
		want error
	}{
		{"cancelled", func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) },
			func(_ context.Context, cancel context.CancelFunc) { cancel() }, context.Canceled},
		{"past its deadline", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 6*time.Second)
		}, func(ctx context.Context, _ context.CancelFunc) { <-ctx.Done() }, pgfencing.ErrBusy},
	} {
		c := c
		t.Run(c.what, func(t *testing.T) {
			t.Parallel()
			a := admin(t)
			name := unique("granted")
			app := unique("granted")
			holder, err := pgfencing.Acquire(context.Background(), newPool(t, connString()), name, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			proxy := newStallingProxy(t)
			pool := newPool(t, proxy.connString("application_name="+app))
			ctx, cancel := c.ctx()
			defer cancel()
			returned := make(chan error, 1)
			go func() {
				l, err := pgfencing.Acquire(ctx, pool, name, time.Minute, pgfencing.WithWait(pgfencing.WaitForever))
				if l != nil {
					_ = l.Release(context.Background())
				}
				returned <- err
			}()
			waitFor(t, 10*time.Second, "the waiter waiting in the server", func() bool {
				ok, _ := waiting(t, app)
				return ok
			})
			proxy.stall()
			if err := holder.Release(context.Background()); err != nil {
				t.Fatal(err)
			}
			waitFor(t, 10*time.Second, "the waiter granted in the server", func() bool {
				var n int
				one(t, a, &n, "SELECT count(*) FROM fencing.leases WHERE name = $1 AND token > $2", name, holder.Token())
				return n == 1
			})
			c.end(ctx, cancel)
			var got error
			back := false
			select {
			case got = <-returned:
				back = true
			case <-time.After(2 * time.Second):
			}
			proxy.resume()
			if !back {
				select {
				case got = <-returned:
				case <-time.After(30 * time.Second):
					t.Fatal("Acquire did not return once its answer got through")
				}
			}
			if !errors.Is(got, c.want) {
				t.Fatalf("Acquire: %v, want %v", got, c.want)
			}
			waitFor(t, 10*time.Second, "the granted lease released", func() bool {
				var n int
				one(t, a, &n, "SELECT count(*) FROM fencing.leases WHERE name = $1", name)
				return n == 0
			})
		})
	}
}
