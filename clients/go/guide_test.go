// Copyright (c) 2026, the fencing developers
//
// The guide's three tests, through pgfencing and real processes: the
// concurrency test (N >= 10 racers, goroutines on connections of their
// own and processes, one winner that does the work), the expiry test (the
// holder stopped with SIGSTOP past its ttl, between two batches and
// between two statements of one batch: its write is rejected and it gets
// ErrLeaseLost), and the release test (a stale release frees nobody
// else's lease).

package pgfencing_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v4"

	"fencing/pgfencing"
)

const racers = 12

func TestRaceOfTwelveGoroutinesHasOneWinner(t *testing.T) {
	t.Parallel()
	table := ledger(t)
	name := unique("race-goroutines")
	conns := make([]*pgx.Conn, racers)
	for i := range conns {
		conns[i] = connect(t, connString())
	}
	for round := 1; round <= 2; round++ {
		start := make(chan struct{})
		results := make([]error, racers)
		leases := make([]*pgfencing.Lease, racers)
		var wg sync.WaitGroup
		for i := range conns {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				<-start
				leases[i], results[i] = pgfencing.Acquire(context.Background(), conns[i], name, 30*time.Second)
				if results[i] == nil {
					results[i] = leases[i].Transaction(context.Background(), conns[i], func(tx pgx.Tx) error {
						_, err := tx.Exec(context.Background(), "UPDATE "+table+" SET amount = amount + 1 WHERE id = 1")
						return err
					})
				}
			}(i)
		}
		close(start)
		wg.Wait()
		winners := 0
		for i, err := range results {
			switch {
			case err == nil:
				winners++
				if err := leases[i].Release(context.Background()); err != nil {
					t.Fatalf("round %d: release: %v", round, err)
				}
			case !errors.Is(err, pgfencing.ErrBusy):
				t.Fatalf("round %d: racer %d: %v", round, i, err)
			}
		}
		if winners != 1 {
			t.Fatalf("round %d: %d winners of %d racers", round, winners, racers)
		}
	}
	if got := amount(t, table, 1); got != 2 {
		t.Fatalf("the work was done %d times in 2 rounds", got)
	}
}

func TestRaceOfTwelveProcessesHasOneWinner(t *testing.T) {
	t.Parallel()
	table := ledger(t)
	name := unique("race-processes")
	workers := make([]*worker, racers)
	for i := range workers {
		workers[i] = startWorker(t)
	}
	for round := 1; round <= 2; round++ {
		for _, w := range workers {
			w.send("acquire %s 30000", name)
		}
		var winner *worker
		var answers []string
		for _, w := range workers {
			answer := w.read()
			answers = append(answers, answer)
			if strings.HasPrefix(answer, "granted ") {
				if winner != nil {
					t.Fatalf("round %d: two winners: %v", round, answers)
				}
				winner = w
			} else if answer != "busy" {
				t.Fatalf("round %d: %q", round, answer)
			}
		}
		if winner == nil {
			t.Fatalf("round %d: no winner: %v", round, answers)
		}
		if got := winner.ask("write %s 1", table); got != "ok" {
			t.Fatalf("round %d: the winner's write: %s", round, got)
		}
		if got := winner.ask("release"); got != "released" {
			t.Fatalf("round %d: the winner's release: %s", round, got)
		}
	}
	if got := amount(t, table, 1); got != 2 {
		t.Fatalf("the work was done %d times in 2 rounds", got)
	}
}

// stopped runs fn while the worker's process is stopped with SIGSTOP.
func stopped(t *testing.T, w *worker, fn func()) {
	t.Helper()
	if err := syscall.Kill(w.cmd.Process.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := syscall.Kill(w.cmd.Process.Pid, syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
	}()
	fn()
}

// takeOver: a newer holder acquires name (waiting in the server until the
// stopped holder's lease lapses) and writes row 1 of table; its lease.
func takeOver(t *testing.T, table, name string, old int64, ttl time.Duration) *pgfencing.Lease {
	t.Helper()
	pool := newPool(t, connString())
	stoppedAt := time.Now()
	newer, err := pgfencing.Acquire(context.Background(), pool, name, 30*time.Second, pgfencing.WithWait(ttl+20*time.Second))
	if err != nil {
		t.Fatalf("the newer holder: %v", err)
	}
	if waited := time.Since(stoppedAt); waited < ttl-time.Second {
		t.Fatalf("the newer holder got the lease %v after the stop, before the ttl of %v", waited, ttl)
	}
	if newer.Token() <= old {
		t.Fatalf("the newer token %d is not above the stopped holder's %d", newer.Token(), old)
	}
	err = newer.Transaction(context.Background(), pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(context.Background(), "UPDATE "+table+" SET amount = amount + 100 WHERE id = 1")
		return err
	})
	if err != nil {
		t.Fatalf("the newer holder's write: %v", err)
	}
	return newer
}

func grantedToken(t *testing.T, answer string) int64 {
	t.Helper()
	if !strings.HasPrefix(answer, "granted ") {
		t.Fatalf("acquire: %s", answer)
	}
	token, err := strconv.ParseInt(strings.TrimPrefix(answer, "granted "), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return token
}

// expiring starts a worker that takes a lease of ttl on a new name, then
// runs command on row 1 of a new ledger and answers answer: the table,
// the name, the worker and its token.
func expiring(t *testing.T, prefix string, ttl time.Duration, command, answer string) (string, string, *worker, int64) {
	t.Helper()
	table := ledger(t)
	name := unique(prefix)
	holder := startWorker(t)
	old := grantedToken(t, holder.ask("acquire %s %d", name, ttl.Milliseconds()))
	if got := holder.ask("%s %s 1", command, table); got != answer {
		t.Fatalf("the holder's %s: %s, want %s", command, got, answer)
	}
	return table, name, holder, old
}

func TestHolderStoppedPastItsTTLIsFencedOut(t *testing.T) {
	t.Parallel()
	ttl := 2 * time.Second
	table, name, holder, old := expiring(t, "expiry", ttl, "write", "ok")
	var newer *pgfencing.Lease
	stopped(t, holder, func() { newer = takeOver(t, table, name, old, ttl) })
	if got := holder.ask("write %s 1", table); got != "LeaseLost" {
		t.Fatalf("the stopped holder's next batch, after SIGCONT: %s", got)
	}
	if got := holder.ask("write_old %s 1", table); got != "StaleToken" {
		t.Fatalf("a write with the stopped holder's token: %s", got)
	}
	if got := holder.ask("lost"); got != "yes" {
		t.Fatalf("the stopped holder's lease lost: %s", got)
	}
	if got := holder.ask("release"); got != "LeaseLost" {
		t.Fatalf("the stopped holder's release: %s", got)
	}
	var n int
	var fence int64
	if err := admin(t).QueryRow(context.Background(), "SELECT amount, fence FROM "+table+" WHERE id = 1").Scan(&n, &fence); err != nil {
		t.Fatal(err)
	}
	if n != 101 || fence != newer.Token() {
		t.Fatalf("row 1: amount %d fence %d, want 101 and the newer token %d", n, fence, newer.Token())
	}
	if err := newer.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestHolderStoppedBetweenTwoStatementsOfABatchIsFencedOut(t *testing.T) {
	t.Parallel()
	ttl := 2 * time.Second
	table, name, holder, old := expiring(t, "expiry-mid-batch", ttl, "write2", "between")
	var newer *pgfencing.Lease
	// the server ends the stopped batch's session at its idle limit, which
	// frees the row and the run's fence for the newer holder
	stopped(t, holder, func() { newer = takeOver(t, table, name, old, ttl) })
	if got := holder.ask("go on"); got != "LeaseLost" {
		t.Fatalf("the batch's second statement, after SIGCONT: %s", got)
	}
	if got := holder.ask("write_old %s 1", table); got != "StaleToken" {
		t.Fatalf("a write with the stopped holder's token: %s", got)
	}
	if got := amount(t, table, 1); got != 100 {
		t.Fatalf("row 1: amount %d, want 100 (the newer holder's write alone)", got)
	}
	if err := newer.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestStaleReleaseFreesNobodyElsesLease(t *testing.T) {
	t.Parallel()
	pool := newPool(t, connString())
	a := admin(t)
	name := unique("release")
	first, err := pgfencing.Acquire(context.Background(), pool, name, time.Second, pgfencing.WithoutRenewal(),
		pgfencing.WithLogger(func(string, ...interface{}) {}))
	if err != nil {
		t.Fatal(err)
	}
	second, err := pgfencing.Acquire(context.Background(), pool, name, 30*time.Second, pgfencing.WithWait(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if second.Token() <= first.Token() {
		t.Fatalf("second token %d not above the first %d", second.Token(), first.Token())
	}
	if err := first.Release(context.Background()); !errors.Is(err, pgfencing.ErrLeaseLost) {
		t.Fatalf("the stale release: %v, want ErrLeaseLost", err)
	}
	var held int64
	one(t, a, &held, "SELECT token FROM fencing.leases WHERE name = $1", name)
	if held != second.Token() {
		t.Fatalf("the lease is held with %d, want the second token %d", held, second.Token())
	}
	if _, err := pgfencing.Acquire(context.Background(), pool, name, 30*time.Second); !errors.Is(err, pgfencing.ErrBusy) {
		t.Fatalf("a third acquire while the second holds it: %v", err)
	}
	if err := second.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	third, err := pgfencing.Acquire(context.Background(), pool, name, 30*time.Second)
	if err != nil {
		t.Fatalf("a third acquire after the release: %v", err)
	}
	if err := third.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}
