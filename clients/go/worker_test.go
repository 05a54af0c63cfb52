// Copyright (c) 2026, the fencing developers
//
// The worker: this test binary run again (helpers_test.go, startWorker)
// as a lease holder in a process of its own, for the tests that need real
// processes (a race, a holder stopped with SIGSTOP).  Its connections come
// from the PG* variables.  It reads one command a line on stdin and
// answers one line on stdout:
//
//   acquire NAME TTL_MS   "granted TOKEN" or "busy" (tries once)
//   write TABLE ID        a batch: lease.Transaction, one UPDATE of row ID
//   write2 TABLE ID       a batch of two UPDATEs of row ID; between them
//                         it prints "between" and reads a line
//   write_old TABLE ID    the UPDATE with the lease's token set by hand
//                         (fencing.set_token), as a holder that ignored
//                         ErrLeaseLost would write; Translate(err)
//   lost                  "yes" or "no"
//   release               "released", or what Release returned
//
// A write answers "ok", "LeaseLost", "StaleToken", or "error: " and the
// error when it is neither of pgfencing's.

package pgfencing_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v4"
	"github.com/jackc/pgx/v4/pgxpool"

	"fencing/pgfencing"
)

const workerEnv = "PGFENCING_TEST_WORKER"

func runWorker() int {
	ctx := context.Background()
	pool, err := pgxpool.Connect(ctx, "")
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 1
	}
	defer pool.Close()
	in := bufio.NewScanner(os.Stdin)
	var lease *pgfencing.Lease
	for in.Scan() {
		words := strings.Fields(in.Text())
		if len(words) == 0 {
			continue
		}
		var answer string
		id := 0
		if len(words) > 2 {
			id, _ = strconv.Atoi(words[2])
		}
		switch words[0] {
		case "acquire":
			ms, _ := strconv.Atoi(words[2])
			l, err := pgfencing.Acquire(ctx, pool, words[1], time.Duration(ms)*time.Millisecond,
				pgfencing.WithLogger(func(string, ...interface{}) {}))
			switch {
			case err == nil:
				lease = l
				answer = "granted " + l.TokenText()
			case errors.Is(err, pgfencing.ErrBusy):
				answer = "busy"
			default:
				answer = "error: " + err.Error()
			}
		case "write":
			answer = outcome(lease.Transaction(ctx, pool, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, "UPDATE "+words[1]+" SET amount = amount + 1 WHERE id = $1", id)
				return err
			}))
		case "write2":
			answer = outcome(lease.Transaction(ctx, pool, func(tx pgx.Tx) error {
				update := "UPDATE " + words[1] + " SET amount = amount + 1 WHERE id = $1"
				if _, err := tx.Exec(ctx, update, id); err != nil {
					return err
				}
				fmt.Println("between")
				in.Scan()
				_, err := tx.Exec(ctx, update, id)
				return err
			}))
		case "write_old":
			answer = outcome(pgfencing.Translate(pool.BeginFunc(ctx, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, "SELECT fencing.set_token($1)", lease.Token()); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, "UPDATE "+words[1]+" SET amount = amount + 1 WHERE id = $1", id)
				return err
			})))
		case "lost":
			answer = "no"
			if errors.Is(lease.Err(), pgfencing.ErrLeaseLost) {
				answer = "yes"
			}
		case "release":
			answer = "released"
			if err := lease.Release(ctx); err != nil {
				answer = outcome(err)
			}
		default:
			answer = "unknown command " + words[0]
		}
		fmt.Println(answer)
	}
	return 0
}

func outcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, pgfencing.ErrStaleToken):
		return "StaleToken"
	case errors.Is(err, pgfencing.ErrLeaseLost):
		return "LeaseLost"
	default:
		return "error: " + err.Error()
	}
}
