// Copyright (c) 2026, the fencing developers

package pgfencing

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v4"
	"github.com/jackc/pgx/v4/pgxpool"
)

// TxBeginner is what Transaction begins a batch on: a *pgxpool.Pool, a
// *pgx.Conn, a *pgxpool.Conn.
type TxBeginner interface {
	BeginTx(ctx context.Context, txOptions pgx.TxOptions) (pgx.Tx, error)
}

// Option configures Acquire.
type Option func(*options)

type options struct {
	wait    time.Duration
	waitSet bool
	holder  string
	onLost  []func(error)
	renew   bool
	logf    func(format string, args ...interface{})
}

// WithWait makes Acquire wait for a held name at most d (WaitForever: as
// long as ctx allows), in the server, which wakes it when the name is
// released or its lease lapses.  Without it, Acquire waits until ctx's
// deadline, and tries once when ctx has none.  A wait is never longer
// than ctx allows.
func WithWait(d time.Duration) Option {
	return func(o *options) {
		o.wait = d
		o.waitSet = true
	}
}

// WithHolder sets what fencing.leases shows as the holder (default: the
// host name and the process id), at most 256 bytes.
func WithHolder(text string) Option {
	return func(o *options) { o.holder = text }
}

// OnLost adds a function called with the reason when the lease is lost,
// before Done is closed.  A panic in one is logged and does not stop the
// others.  The functions run one after another in the goroutine that
// noticed the loss.  They must not wait for Done or Context, which close
// after they return, nor call Use, Transaction or Renew, which return
// only after the loss has run; Err and Release may be called.
func OnLost(f func(reason error)) Option {
	return func(o *options) { o.onLost = append(o.onLost, f) }
}

// WithoutRenewal: no renewal every ttl/3; each Use, Transaction and Renew
// renews the lease, and nothing else does.  The deadline's watchdog still
// runs.
func WithoutRenewal() Option {
	return func(o *options) { o.renew = false }
}

// WithLogger sets where a lease logs a renewal that failed (and is tried
// again), a loss, and a panic of a loss function.  Default: log.Printf.
func WithLogger(logf func(format string, args ...interface{})) Option {
	return func(o *options) { o.logf = logf }
}

// Lease is a lease on a name held by the server across commits,
// rollbacks and reconnects, until it is released or its ttl passes
// without a renewal.  Its token fences the work: start each batch with
// Use or Transaction.
//
// While it is held, a goroutine renews it every ttl/3 on a connection of
// its own.  When a renewal gets FN004, or cannot get through before the
// deadline, the lease is lost: Err returns the reason, the OnLost
// functions run, then Done is closed and Context is cancelled, in that
// order.  From then on every error of an operation of the lease is
// ErrLeaseLost.
type Lease struct {
	name   string
	ttl    time.Duration
	token  int64
	holder string
	db     Querier
	own    *ownConn // the renewals' connection; nil: renew through db
	logf   func(format string, args ...interface{})

	ctx    context.Context
	cancel context.CancelFunc

	// stopRenewal ends the renewal goroutine and cancels its statement.
	stopRenewal context.CancelFunc
	renewalCtx  context.Context

	mu        sync.Mutex
	renewals  []*renewal // see settleLocked
	deadline  time.Time
	watchdog  *time.Timer
	lost      error // the reason, set first thing when the lease is lost
	released  bool
	ended     bool // Done is closed, or is being closed by release
	callbacks []func(error)
}

// Acquire takes a lease on name for ttl: a *Lease, or ErrBusy when the
// name stays held for as long as it waits (see WithWait).  db is where the
// lease's own statements go (acquire_lease, renew_lease, release_lease): a
// *pgxpool.Pool, a *pgx.Conn, or a pgx.Tx (the lease takes effect at once
// whatever the transaction does).  For those the renewals go through a
// connection the lease opens with db's configuration; any other Querier
// must be safe for concurrent use, as the renewals go through it.  When
// ctx ends while acquire_lease waits or its answer is on its way, the
// server is asked to cancel it, and a lease it granted first is released:
// Acquire returns ctx's error (ErrBusy past its deadline), holding
// nothing.
func Acquire(ctx context.Context, db Querier, name string, ttl time.Duration, opts ...Option) (*Lease, error) {
	o := options{renew: true, logf: log.Printf}
	for _, opt := range opts {
		opt(&o)
	}
	if ttl <= 0 {
		return nil, fmt.Errorf("pgfencing: the ttl must be positive, not %v", ttl)
	}
	if o.waitSet && o.wait < 0 {
		return nil, fmt.Errorf("pgfencing: WithWait must not be negative, not %v", o.wait)
	}
	if o.holder == "" {
		host, _ := os.Hostname()
		o.holder = host + " pid " + strconv.Itoa(os.Getpid())
	}
	if _, err := acquireSQL(name, ttl, 0, o.holder); err != nil {
		return nil, err
	}
	wait := o.wait
	if !o.waitSet {
		wait = 0
		if _, ok := ctx.Deadline(); ok {
			wait = WaitForever
		}
	}
	started := time.Now()
	for {
		left := wait
		if wait != WaitForever {
			left = wait - time.Since(started)
			if left < 0 {
				left = 0
			}
		}
		step, bounded := serverWait(ctx, left)
		if step > longestWait {
			step = longestWait
		}
		query, _ := acquireSQL(name, ttl, step, o.holder)
		sent := time.Now()
		token, err := acquireCall(ctx, db, name, ttl, query)
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
			return nil, newError(ErrBusy, fmt.Sprintf("pgfencing: lease %q: not granted before the context's deadline", name), err)
		}
		if err != nil {
			if Translate(err) == err {
				return nil, fmt.Errorf("pgfencing: acquiring lease %q: %w", name, err)
			}
			return nil, Translate(err)
		}
		if token != nil {
			return granted(db, name, ttl, *token, sent, o), nil
		}
		// still held when the server's wait ended: busy, unless that wait
		// was cut short by its cap of INT_MAX milliseconds
		if step == 0 || bounded || wait != WaitForever && time.Since(started) >= wait {
			return nil, newError(ErrBusy, fmt.Sprintf("pgfencing: lease %q is held by another holder", name), nil)
		}
	}
}

// acquireCall runs one acquire_lease, whose answer the context does not
// cut off: pgx would close the connection when ctx ends, and a lease the
// server granted just before would stay taken, its token never heard.
// When ctx ends, the server is asked to cancel the statement (a cancel
// request: a wait ends with 57014), and its answer is read all the same;
// a token it brings is released, and the context's error returned.  An
// answer that does not come within the ttl after that is given up: a
// grant has lapsed by then.  A db that gives no connection to cancel on
// runs it as pgx does.
func acquireCall(ctx context.Context, db Querier, name string, ttl time.Duration, query string) (*int64, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var conn *pgx.Conn
	switch d := db.(type) {
	case *pgxpool.Pool:
		c, err := d.Acquire(ctx)
		if err != nil {
			return nil, err
		}
		defer c.Release()
		conn = c.Conn()
	case *pgx.Conn:
		conn = d
	case interface{ Conn() *pgx.Conn }: // pgx.Tx, *pgxpool.Conn
		conn = d.Conn()
	}
	var token *int64
	if conn == nil {
		err := queryRow(ctx, db, query, &token)
		return token, err
	}
	answer, giveUp := context.WithCancel(context.Background())
	defer giveUp()
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case <-answer.Done():
			return
		case <-ctx.Done():
		}
		// not cut off by the answer: a cancel request half sent could
		// reach the session later, and cancel the release
		cancelCtx, stop := context.WithTimeout(context.Background(), ttl)
		_ = conn.PgConn().CancelRequest(cancelCtx)
		stop()
		late := time.NewTimer(ttl)
		defer late.Stop()
		select {
		case <-answer.Done():
		case <-late.C:
			giveUp()
		}
	}()
	err := queryRow(answer, conn, query, &token)
	giveUp()
	<-watched // the cancel request, if any, has been acted on
	if ctx.Err() == nil {
		return token, err
	}
	if token != nil && !conn.IsClosed() {
		release, stop := context.WithTimeout(context.Background(), ttl)
		var released bool
		_ = queryRow(release, conn, leaseSQL("release_lease", name, *token), &released)
		stop()
	}
	return nil, ctx.Err()
}

func granted(db Querier, name string, ttl time.Duration, token int64, sent time.Time, o options) *Lease {
	l := &Lease{
		name:      name,
		ttl:       ttl,
		token:     token,
		holder:    o.holder,
		db:        db,
		logf:      o.logf,
		callbacks: o.onLost,
	}
	if cfg := connConfig(db); cfg != nil {
		l.own = &ownConn{cfg: cfg}
	}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	l.renewalCtx, l.stopRenewal = context.WithCancel(context.Background())
	l.mu.Lock()
	l.renewals = []*renewal{{sent: sent, ttl: ttl, answered: time.Now()}}
	l.watchdog = time.AfterFunc(time.Hour, l.deadlinePassed)
	l.settleLocked()
	l.mu.Unlock()
	if o.renew {
		go l.renewLoop()
	}
	return l
}

// connConfig is the configuration of the connection behind db, for the
// renewals' own connection; nil when db is something else.
func connConfig(db Querier) *pgx.ConnConfig {
	switch d := db.(type) {
	case *pgxpool.Pool:
		return d.Config().ConnConfig
	case *pgx.Conn:
		return d.Config()
	case interface{ Conn() *pgx.Conn }: // pgx.Tx, *pgxpool.Conn
		if c := d.Conn(); c != nil {
			return c.Config()
		}
	}
	return nil
}

// Name is the name the lease was acquired with.
func (l *Lease) Name() string { return l.name }

// TTL is the lease's ttl.
func (l *Lease) TTL() time.Duration { return l.ttl }

// Token is the fence token of this holding.  Tokens exceed 2^53: keep
// them as int64, never as a float64 (nor a JSON number read by
// JavaScript).
func (l *Lease) Token() int64 { return l.token }

// TokenText is the token as decimal digits, the form for JSON and for
// anything that would read a number as a float64.
func (l *Lease) TokenText() string { return strconv.FormatInt(l.token, 10) }

// Done is closed when the lease is lost (after the OnLost functions have
// run) or released.
func (l *Lease) Done() <-chan struct{} { return l.ctx.Done() }

// Context is cancelled when Done is closed: give it to the work that must
// stop when the lease ends.
func (l *Lease) Context() context.Context { return l.ctx }

// Err is nil while the lease is held; then why it is lost (errors.Is
// ErrLeaseLost), or ErrReleased.
func (l *Lease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost != nil {
		return l.lost
	}
	if l.released {
		return ErrReleased
	}
	return nil
}

// Use makes tx a batch of the lease: it runs fencing.use_lease in it,
// which checks that the lease is held with this token, renews it, raises
// the fence of the lease's name to the token and sets fencing.token for
// the rest of the transaction, so that every row it writes is stamped
// with the token.  Call it first in each transaction of the work, or let
// Transaction do it.
func (l *Lease) Use(ctx context.Context, tx pgx.Tx) error {
	if err := l.usable(); err != nil {
		return err
	}
	if err := requireTransaction(tx, "Use"); err != nil {
		return err
	}
	r := l.renewing(l.ttl)
	_, err := tx.Exec(ctx, leaseSQL("use_lease", l.name, l.token))
	l.answered(r)
	if err != nil {
		return l.check(err)
	}
	l.renewed(r)
	return nil
}

// Transaction runs one batch: BEGIN and fencing.use_lease in one round
// trip, then fn with the transaction, then COMMIT (ROLLBACK when fn
// returns an error or panics).  Every error of it, and of each statement
// fn runs on the transaction it is given, comes back translated: FN001 is
// ErrStaleToken, and once the lease is lost or past its deadline every
// error is ErrLeaseLost (the cause stays pgx's error).  When use_lease
// fails, pgx closes the connection it began on (a pool replaces it).
func (l *Lease) Transaction(ctx context.Context, db TxBeginner, fn func(pgx.Tx) error) error {
	if err := l.usable(); err != nil {
		return err
	}
	// pgx writes the modes of TxOptions into its BEGIN as they are, so
	// use_lease goes in the same simple query: one round trip.
	begin := pgx.TxOptions{DeferrableMode: pgx.TxDeferrableMode("not deferrable; " + leaseSQL("use_lease", l.name, l.token))}
	r := l.renewing(l.ttl)
	tx, err := db.BeginTx(ctx, begin)
	l.answered(r)
	if err != nil {
		return l.check(err)
	}
	l.renewed(r)
	done := false
	defer func() {
		if !done {
			_ = tx.Rollback(ctx)
		}
	}()
	if err := fn(&batchTx{Tx: tx, lease: l, idle: &idleClock{ended: time.Now()}}); err != nil {
		return l.check(err)
	}
	done = true
	if err := tx.Commit(ctx); err != nil {
		return l.check(err)
	}
	return nil
}

// Renew renews the lease now, for ttl (0: the lease's own), and returns
// the server's new expiry.  The next renewal, the goroutine's or a Use's,
// sets it back to the lease's own ttl from then, as the server does.
func (l *Lease) Renew(ctx context.Context, ttl time.Duration) (time.Time, error) {
	if ttl < 0 {
		return time.Time{}, fmt.Errorf("pgfencing: the ttl must not be negative, not %v", ttl)
	}
	if err := l.usable(); err != nil {
		return time.Time{}, err
	}
	span := ttl
	if span == 0 {
		span = l.ttl
	}
	r := l.renewing(span)
	var expires time.Time
	err := queryRow(ctx, l.db, renewSQL(l.name, l.token, ttl), &expires)
	l.answered(r)
	if err != nil {
		return time.Time{}, l.check(err)
	}
	l.renewed(r)
	return expires, nil
}

// Release frees the lease and closes Done.  It returns ErrLeaseLost when
// the server no longer held the lease with this token (it lapsed or was
// broken: work after that may have been fenced out).  A Release that did
// not get through (a lost connection) may be called again; the lease
// lapses at its deadline meanwhile.
func (l *Lease) Release(ctx context.Context) error {
	l.mu.Lock()
	if l.released {
		l.mu.Unlock()
		return newError(ErrReleased, fmt.Sprintf("pgfencing: lease %q is already released", l.name), nil)
	}
	l.mu.Unlock()
	// a renewal still on its way is cancelled, and one that reaches the
	// server after the release gets FN004, which nobody hears
	l.stopRenewal()
	var released bool
	var err error
	if c, ok := l.db.(*pgx.Conn); ok && l.own != nil && !canRun(c) {
		// its transaction failed, or it is busy: that is the caller's to
		// end, and the lease is the server's, not the session's
		err = l.own.queryRow(ctx, leaseSQL("release_lease", l.name, l.token), &released)
	} else {
		err = queryRow(ctx, l.db, leaseSQL("release_lease", l.name, l.token), &released)
	}
	if err != nil {
		return Translate(err)
	}
	l.mu.Lock()
	l.released = true
	l.watchdog.Stop()
	wasLost := l.lost != nil
	endNow := !l.ended
	l.ended = true
	l.mu.Unlock()
	if endNow {
		l.cancel()
	}
	if l.own != nil {
		l.own.close()
	}
	if !released {
		msg := fmt.Sprintf("pgfencing: lease %q was not held with token %d any more", l.name, l.token)
		if wasLost {
			return l.lostError(nil)
		}
		return newError(ErrLeaseLost, msg, nil)
	}
	return nil
}

// canRun: can c run a statement now (open, not busy, not in a failed
// transaction)?
func canRun(c *pgx.Conn) bool {
	if c.IsClosed() || c.PgConn().IsBusy() {
		return false
	}
	return c.PgConn().TxStatus() != 'E'
}

// requireTransaction refuses a transaction whose connection is outside a
// transaction block (ended by a COMMIT of its own), where what it takes
// would end with the statement.
func requireTransaction(tx pgx.Tx, what string) error {
	if c := tx.Conn(); c != nil && !c.IsClosed() && c.PgConn().TxStatus() == 'I' {
		return newError(ErrNotInTransaction, "pgfencing: "+what+" needs a transaction: this one's "+
			"connection is outside a transaction block, where it would end with the statement", nil)
	}
	return nil
}

// --- the deadline ---------------------------------------------------------------

// A renewal sets the server's expiry to when it runs plus its ttl,
// replacing the expiry before it, also a later one; it runs after it was
// sent, so the expiry it sets is at or after sent + ttl here.  Renewals
// overlap (the goroutine's, Renew, Use, Transaction) and the server may
// apply them in another order than their answers come back, so the
// deadline is the earliest sent + ttl of the renewals that may have been
// the last one applied: each one from when it is sent until a successful
// renewal sent after its answer came back (which ran after it).
type renewal struct {
	sent     time.Time
	ttl      time.Duration
	answered time.Time // zero while in flight
}

// renewing: a renewal for ttl is sent now; the deadline may come sooner.
func (l *Lease) renewing(ttl time.Duration) *renewal {
	r := &renewal{sent: time.Now(), ttl: ttl}
	l.mu.Lock()
	l.renewals = append(l.renewals, r)
	l.settleLocked()
	l.mu.Unlock()
	return r
}

// answered: its answer or its error came back (it ran before that, or not
// at all).
func (l *Lease) answered(r *renewal) {
	l.mu.Lock()
	r.answered = time.Now()
	l.mu.Unlock()
}

// renewed: it succeeded, so it ran after every renewal answered before it
// was sent, none of which is the last one applied any more.
func (l *Lease) renewed(r *renewal) {
	l.mu.Lock()
	kept := l.renewals[:0]
	for _, other := range l.renewals {
		if other == r || other.answered.IsZero() || !other.answered.Before(r.sent) {
			kept = append(kept, other)
		}
	}
	l.renewals = kept
	l.settleLocked()
	l.mu.Unlock()
}

func (l *Lease) settleLocked() {
	if l.lost != nil || l.released {
		return
	}
	var deadline time.Time
	for i, r := range l.renewals {
		if end := r.sent.Add(r.ttl); i == 0 || end.Before(deadline) {
			deadline = end
		}
	}
	l.deadline = deadline
	l.watchdog.Reset(time.Until(deadline))
}

// deadlinePassed is the watchdog: the lease is lost at its deadline even
// when a renewal is stuck (a network that swallows packets).  A timer that
// runs before its time sets itself again for what is left.
func (l *Lease) deadlinePassed() {
	l.mu.Lock()
	if l.lost != nil || l.released {
		l.mu.Unlock()
		return
	}
	if left := time.Until(l.deadline); left > 0 {
		l.watchdog.Reset(left)
		l.mu.Unlock()
		return
	}
	l.mu.Unlock()
	l.lose(l.notRenewed(nil))
}

func (l *Lease) overdue() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return !time.Now().Before(l.deadline)
}

// --- losing the lease -------------------------------------------------------------

func (l *Lease) notRenewed(cause error) error {
	return newError(ErrLeaseLost, fmt.Sprintf("pgfencing: lease %q was not renewed within its ttl of %v: "+
		"it may have expired", l.name, l.ttl), cause)
}

// lostBy is the reason of a loss the server said (FN004).
func (l *Lease) lostBy(err error) error {
	return newError(ErrLeaseLost, fmt.Sprintf("pgfencing: lease %q is lost", l.name), err)
}

// lose runs the loss, once: it sets the reason (code that looks sees it),
// stops the renewals, runs the OnLost functions, then closes Done and
// cancels Context.  It returns when all of that has happened, also when
// another goroutine runs it.
func (l *Lease) lose(reason error) {
	l.mu.Lock()
	if l.lost != nil || l.ended {
		l.mu.Unlock()
		<-l.ctx.Done()
		return
	}
	l.lost = reason
	l.ended = true
	l.watchdog.Stop()
	callbacks := append([]func(error){}, l.callbacks...)
	l.mu.Unlock()
	l.stopRenewal()
	l.logf("%v", reason)
	for _, f := range callbacks {
		l.callBack(f, reason)
	}
	l.cancel()
}

func (l *Lease) callBack(f func(error), reason error) {
	defer func() {
		if p := recover(); p != nil {
			l.logf("pgfencing: lease %q: a function of OnLost panicked: %v", l.name, p)
		}
	}()
	f(reason)
}

// lostError is the error an operation returns once the lease is lost, with
// the operation's own error as its cause (nil when it sent nothing).  The
// server's idle limit (25P03, or a batch's connection that broke after it
// idled past the ttl: batchTx) says why it ended the session; any other
// cause gets the reason the lease was lost.
func (l *Lease) lostError(cause error) error {
	var idle *idleEnded
	if sqlState(cause) == "25P03" || errors.As(cause, &idle) {
		return newError(ErrLeaseLost, fmt.Sprintf("pgfencing: lease %q: the batch idled in its transaction "+
			"past the lease's ttl of %v, and the server ended its session", l.name, l.ttl), cause)
	}
	l.mu.Lock()
	reason := l.lost
	l.mu.Unlock()
	if reason == nil {
		reason = ErrLeaseLost
	}
	if cause == nil || errors.Unwrap(reason) == cause {
		return reason
	}
	return newError(ErrLeaseLost, reason.Error()+"; the call failed", cause)
}

// usable: nil while the lease may be used; else why not (a lease past its
// deadline is lost first).
func (l *Lease) usable() error {
	l.mu.Lock()
	released, lost := l.released, l.lost != nil
	l.mu.Unlock()
	if released {
		return newError(ErrReleased, fmt.Sprintf("pgfencing: lease %q is released", l.name), nil)
	}
	if !lost && l.overdue() {
		l.lose(l.notRenewed(nil))
	}
	if l.Err() != nil {
		<-l.ctx.Done()
		return l.lostError(nil)
	}
	return nil
}

// check translates the error of an operation of the lease: FN004 loses
// the lease; FN001 loses it and is ErrStaleToken (and ErrLeaseLost); the
// end of a batch's session for idling past the ttl (25P03) loses it; once
// the lease is lost or past its deadline any error is ErrLeaseLost; and
// while it is held, other errors are pgx's, or translated by SQLSTATE
// (Translate).  Each error comes back only after the loss has run.
func (l *Lease) check(err error) error {
	if err == nil {
		return nil
	}
	var ours *fencingError
	if errors.As(err, &ours) && (ours.Is(ErrLeaseLost) || ours.Is(ErrReleased)) {
		return err
	}
	switch sqlState(err) {
	case "FN004":
		l.lose(l.lostBy(err))
		return l.lostError(err)
	case "FN001":
		l.lose(newError(ErrLeaseLost, fmt.Sprintf("pgfencing: lease %q: a newer holder fenced this one out", l.name), err))
		return &fencingError{kinds: []error{ErrStaleToken, ErrLeaseLost},
			msg: fmt.Sprintf("pgfencing: lease %q: a newer holder wrote first, this write was rejected", l.name), cause: err}
	case "25P03":
		l.lose(l.lostError(err))
		return l.lostError(err)
	}
	var idle *idleEnded
	if errors.As(err, &idle) {
		l.lose(l.lostError(err))
		return l.lostError(err)
	}
	l.mu.Lock()
	lost := l.lost != nil
	l.mu.Unlock()
	if lost || l.overdue() {
		l.lose(l.notRenewed(nil))
		return l.lostError(err)
	}
	return Translate(err)
}

// --- the renewals ------------------------------------------------------------------

// retryEvery bounds how soon a renewal that failed for another reason than
// FN004 (a lost connection) is tried again.
const retryEvery = 500 * time.Millisecond

func (l *Lease) renewLoop() {
	if l.own != nil {
		defer l.own.close()
	}
	every := l.ttl / 3
	timer := time.NewTimer(every)
	defer timer.Stop()
	for {
		select {
		case <-l.renewalCtx.Done():
			return
		case <-timer.C:
		}
		pause, ok := l.renewOnce(every)
		if !ok {
			return
		}
		timer.Reset(pause)
	}
}

// renewOnce sends one renewal: the pause before the next, and false when
// the renewals are over.
func (l *Lease) renewOnce(every time.Duration) (time.Duration, bool) {
	r := l.renewing(l.ttl)
	l.mu.Lock()
	deadline := l.deadline
	l.mu.Unlock()
	// a renewal that cannot get through by the deadline is of no use
	ctx, cancel := context.WithDeadline(l.renewalCtx, deadline)
	var expires time.Time
	var err error
	query := renewSQL(l.name, l.token, 0)
	if l.own != nil {
		err = l.own.queryRow(ctx, query, &expires)
	} else {
		err = queryRow(ctx, l.db, query, &expires)
	}
	cancel()
	l.answered(r)
	if l.renewalCtx.Err() != nil {
		return 0, false
	}
	if err == nil {
		l.renewed(r)
		return every, true
	}
	if sqlState(err) == "FN004" {
		l.lose(l.lostBy(err))
		return 0, false
	}
	if l.overdue() {
		l.lose(l.notRenewed(err))
		return 0, false
	}
	l.logf("pgfencing: lease %q: a renewal failed, trying again: %v", l.name, err)
	if every > retryEvery {
		return retryEvery, true
	}
	return every, true
}

// ownConn is the connection a lease opens for its renewals (and for a
// release its caller's connection cannot run), opened again when it
// breaks.
type ownConn struct {
	mu   sync.Mutex
	cfg  *pgx.ConnConfig
	conn *pgx.Conn
}

func (o *ownConn) queryRow(ctx context.Context, sql string, dest ...interface{}) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.conn == nil || o.conn.IsClosed() {
		conn, err := pgx.ConnectConfig(ctx, o.cfg.Copy())
		if err != nil {
			return err
		}
		o.conn = conn
	}
	return queryRow(ctx, o.conn, sql, dest...)
}

func (o *ownConn) close() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.conn != nil {
		_ = o.conn.Close(context.Background())
		o.conn = nil
	}
}
