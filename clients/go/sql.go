// Copyright (c) 2026, the fencing developers

package pgfencing

import (
	"context"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v4"
)

// Why every statement goes unbound.  A SELECT sent through the extended
// protocol (pgx uses it for every query with arguments) leaves its unnamed
// portal open when it completes, and that portal keeps the statement's
// snapshot registered until the next statement: a READ COMMITTED
// transaction that then sits idle holding a lock or a lease keeps
// backend_xmin set and holds back VACUUM in its database.  A simple query
// drops its portal when it completes.  And pgx prepares statements with
// arguments by name, which PgBouncer in transaction pooling mode cannot
// follow from one server connection to the next.  So pgfencing writes each
// value into the statement and sends it as a simple query: Exec without
// arguments, or QueryRow with pgx.QuerySimpleProtocol(true) and no others.
//
// A value written into the statement cannot break out of it, whatever the
// session's settings: text made of printable ASCII other than ' and \ (the
// only characters with a meaning inside '...') is written as it is; any
// other text goes as the hex digits of its UTF-8 bytes, decoded by the
// server, so the statement is pure ASCII with nothing to escape.  A NUL,
// which PostgreSQL text cannot hold, and bytes that are not UTF-8 are
// refused before anything is sent.

// sqlText is value as an SQL expression of type text.
func sqlText(value, what string) (string, error) {
	if strings.IndexByte(value, 0) >= 0 {
		return "", fmt.Errorf("pgfencing: %s contains a NUL character, which PostgreSQL text cannot hold", what)
	}
	if !utf8.ValidString(value) {
		return "", fmt.Errorf("pgfencing: %s is not valid UTF-8", what)
	}
	for i := 0; i < len(value); i++ {
		if c := value[i]; c < 0x20 || c > 0x7e || c == '\'' || c == '\\' {
			return "pg_catalog.convert_from(pg_catalog.decode('" + hex.EncodeToString([]byte(value)) +
				"', 'hex'), 'UTF8')", nil
		}
	}
	return "'" + value + "'::pg_catalog.text", nil
}

// sqlBigint is a token as an SQL expression of type bigint.
func sqlBigint(token int64) string {
	return strconv.FormatInt(token, 10) + "::bigint"
}

// sqlInterval is a duration (not negative), rounded up to whole
// milliseconds as the server rounds it, as an SQL expression of type
// interval.
func sqlInterval(d time.Duration) string {
	ms := (d + time.Millisecond - 1) / time.Millisecond
	return "'" + strconv.FormatInt(int64(ms), 10) + " milliseconds'::interval"
}

// longestWait is the longest timeout one call of acquire_lease or lock
// takes (INT_MAX milliseconds); a longer wait repeats the call.
const longestWait = time.Duration(1<<31-1) * time.Millisecond

// WaitForever, given to WithWait or Lock, waits for a held name as long
// as the context allows.
const WaitForever = time.Duration(1<<63 - 1)

func acquireSQL(name string, ttl, wait time.Duration, holder string) (string, error) {
	n, err := sqlText(name, "the lease name")
	if err != nil {
		return "", err
	}
	h, err := sqlText(holder, "the holder")
	if err != nil {
		return "", err
	}
	return "SELECT fencing.acquire_lease(" + n + ", " + sqlInterval(ttl) + ", " + sqlInterval(wait) + ", " + h + ")", nil
}

// leaseSQL is a call of function(name, token), or with ttl (0: NULL, the
// lease's own) for renew_lease.
func leaseSQL(function, name string, token int64) string {
	// the name was checked by Acquire
	n, _ := sqlText(name, "the lease name")
	return "SELECT fencing." + function + "(" + n + ", " + sqlBigint(token) + ")"
}

func renewSQL(name string, token int64, ttl time.Duration) string {
	n, _ := sqlText(name, "the lease name")
	span := "NULL::interval"
	if ttl > 0 {
		span = sqlInterval(ttl)
	}
	return "SELECT fencing.renew_lease(" + n + ", " + sqlBigint(token) + ", " + span + ")"
}

func tryLockSQL(name string) (string, error) {
	n, err := sqlText(name, "the lock name")
	if err != nil {
		return "", err
	}
	return "SELECT fencing.try_lock(" + n + ")", nil
}

func lockSQL(name string, timeout time.Duration) (string, error) {
	n, err := sqlText(name, "the lock name")
	if err != nil {
		return "", err
	}
	wait := "NULL::interval"
	if timeout != WaitForever {
		wait = sqlInterval(timeout)
	}
	return "SELECT fencing.lock(" + n + ", " + wait + ")", nil
}

// Querier is what runs a statement that returns one row: a *pgxpool.Pool,
// a *pgx.Conn, a pgx.Tx.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...interface{}) pgx.Row
}

// queryRow runs one statement of pgfencing (unbound, see above) and scans
// its one row.
func queryRow(ctx context.Context, db Querier, sql string, dest ...interface{}) error {
	return db.QueryRow(ctx, sql, pgx.QuerySimpleProtocol(true)).Scan(dest...)
}

// serverWait is how long a call that waits in the server may wait: wait,
// bounded by the context's deadline less a margin, so that the server
// answers "still held" before the context ends the call; and whether the
// deadline bounded it.
func serverWait(ctx context.Context, wait time.Duration) (time.Duration, bool) {
	deadline, ok := ctx.Deadline()
	if !ok {
		return wait, false
	}
	left := time.Until(deadline)
	margin := left / 10
	if margin > 250*time.Millisecond {
		margin = 250 * time.Millisecond
	}
	left -= margin
	if left < 0 {
		left = 0
	}
	if left < wait {
		return left, true
	}
	return wait, false
}
