// Copyright (c) 2026, the fencing developers

package pgfencing

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v4"
)

// TryLock takes fencing's lock on name in tx, without waiting: the token,
// or ErrBusy when the name is held.  The lock ends with the transaction.
// A transaction whose connection is outside a transaction block is
// refused (ErrNotInTransaction): there the lock would end with the
// statement.
func TryLock(ctx context.Context, tx pgx.Tx, name string) (int64, error) {
	query, err := tryLockSQL(name)
	if err != nil {
		return 0, err
	}
	return lockIn(ctx, tx, name, "TryLock", query)
}

// Lock takes fencing's lock on name in tx, waiting in the server's lock
// queue at most timeout (0 tries once; WaitForever waits as long as ctx
// allows), and never past ctx's deadline: the token, or ErrBusy when the
// name stayed held.  It refuses what TryLock refuses.
func Lock(ctx context.Context, tx pgx.Tx, name string, timeout time.Duration) (int64, error) {
	if timeout < 0 {
		return 0, fmt.Errorf("pgfencing: the timeout must not be negative, not %v", timeout)
	}
	wait, _ := serverWait(ctx, timeout)
	query, err := lockSQL(name, wait)
	if err != nil {
		return 0, err
	}
	return lockIn(ctx, tx, name, "Lock", query)
}

func lockIn(ctx context.Context, tx pgx.Tx, name, what, query string) (int64, error) {
	if err := requireTransaction(tx, what); err != nil {
		return 0, err
	}
	var token *int64
	if err := queryRow(ctx, tx, query, &token); err != nil {
		return 0, Translate(err)
	}
	if err := requireTransaction(tx, what); err != nil {
		return 0, err
	}
	if token == nil {
		return 0, newError(ErrBusy, fmt.Sprintf("pgfencing: lock %q is held by another holder", name), nil)
	}
	return *token, nil
}
