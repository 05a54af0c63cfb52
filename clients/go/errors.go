// Copyright (c) 2026, the fencing developers

package pgfencing

import (
	"errors"

	"github.com/jackc/pgconn"
)

// The errors of pgfencing, for errors.Is.  An error that comes from the
// server keeps pgx's error as its cause: errors.As(err, &pgErr) with a
// *pgconn.PgError gives the SQLSTATE, the detail and the hint.
var (
	// ErrBusy: the name is held by another holder, and stayed held for
	// as long as the call waited.
	ErrBusy = errors.New("pgfencing: the name is held by another holder")

	// ErrLeaseLost: the lease is gone (FN004, a deadline passed without a
	// renewal, a newer holder fenced it out, or the server ended a batch
	// that idled past the ttl).  Stop the work; acquire again to start
	// over.  Never reconnect and carry on with the old token.
	ErrLeaseLost = errors.New("pgfencing: the lease is lost")

	// ErrStaleToken: FN001, a newer holder wrote first and this write was
	// rejected.  Stop, do not retry.
	ErrStaleToken = errors.New("pgfencing: stale fence token: a newer holder wrote first")

	// ErrNameCollision: FN002, another name with the same 64-bit lock key
	// is held.
	ErrNameCollision = errors.New("pgfencing: another name with the same lock key is held")

	// ErrNotPreloaded: FN003, fencing is not in shared_preload_libraries on
	// this server.
	ErrNotPreloaded = errors.New("pgfencing: fencing is not in shared_preload_libraries")

	// ErrNotInTransaction: 25P01, or refused before sending: outside a
	// transaction block a lock, the fence and fencing.token end with the
	// statement.
	ErrNotInTransaction = errors.New("pgfencing: not in a transaction block")

	// ErrReleased: the lease was released by this handle.
	ErrReleased = errors.New("pgfencing: the lease is released")
)

// byState maps the SQLSTATEs of fencing (and 25P01) to the errors above.
var byState = map[string]error{
	"FN001": ErrStaleToken,
	"FN002": ErrNameCollision,
	"FN003": ErrNotPreloaded,
	"FN004": ErrLeaseLost,
	"25P01": ErrNotInTransaction,
}

// fencingError is every error pgfencing makes: what it is (kinds, for
// errors.Is), what happened (msg) and what caused it (for errors.As and
// errors.Unwrap), usually pgx's error.
type fencingError struct {
	kinds []error
	msg   string
	cause error
}

func (e *fencingError) Error() string {
	if e.cause == nil {
		return e.msg
	}
	return e.msg + ": " + e.cause.Error()
}

func (e *fencingError) Unwrap() error { return e.cause }

func (e *fencingError) Is(target error) bool {
	for _, kind := range e.kinds {
		if kind == target {
			return true
		}
	}
	return false
}

func newError(kind error, msg string, cause error) error {
	return &fencingError{kinds: []error{kind}, msg: msg, cause: cause}
}

// sqlState is the SQLSTATE of a server error anywhere in err's chain, or
// "".
func sqlState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// Translate returns err as a pgfencing error when the server raised it
// with one of fencing's SQLSTATEs (FN001 ErrStaleToken, FN002
// ErrNameCollision, FN003 ErrNotPreloaded, FN004 ErrLeaseLost) or 25P01
// (ErrNotInTransaction), with err as its cause; any other error comes back
// as it is.  Use it for your own statements; a lease's Transaction and Use
// translate theirs, and also know when the lease is lost.
func Translate(err error) error {
	if err == nil {
		return nil
	}
	var ours *fencingError
	if errors.As(err, &ours) {
		return err
	}
	kind, ok := byState[sqlState(err)]
	if !ok {
		return err
	}
	return newError(kind, "pgfencing", err)
}
