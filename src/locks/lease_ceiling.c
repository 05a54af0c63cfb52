/*-------------------------------------------------------------------------
 *
 * lease_ceiling.c
 *		The hard ceiling of a lease: fencing.lease(name, ttl, max_hold) ends
 *		the holder's transaction max_hold after the call, busy or idle; and
 *		the timer that holds a lease's ttl where core's idle timeout does
 *		not reach (a client in pipeline mode that stalls without Sync).
 *
 * A lease's ttl only limits how long the holder may sit idle between
 * statements; a holder stuck in one long statement (a pg_sleep, a wait for
 * another lock, a runaway query) keeps the lock for as long as that takes.
 * max_hold bounds the whole holding, as ShedLock's lockAtMostFor does: at
 * the deadline the server ends the holder's session, and with it the
 * transaction and the lock.
 *
 * How the session is ended depends on the server (the one #if below, keyed
 * on base.h):
 *
 *	- PostgreSQL 17 and later: through core's transaction_timeout, so that
 *	  the holder sees core's own FATAL 25P04 "terminating connection due to
 *	  transaction timeout".  Two things are needed, and neither alone works:
 *	  the TRANSACTION_TIMEOUT timer armed at the deadline (enable_timeout_at:
 *	  a SET of the setting arms it "after n ms from now" only when it is not
 *	  running yet, and never moves a running one), and the setting itself
 *	  above zero for the rest of the transaction (a SET LOCAL): the interrupt
 *	  is ignored when the setting is 0, and core disarms the timer at commit,
 *	  abort and prepare only when the setting is above 0.  The setting is
 *	  the deadline's distance from the transaction's start, rounded up,
 *	  because core skips the idle-in-transaction and statement timers that
 *	  are not shorter than it, trusting the transaction timer to come first.
 *	  An earlier finish (the session's own transaction_timeout, an earlier
 *	  ceiling) is never moved later.  Nothing in core moves a running timer
 *	  later within a transaction; a SET of transaction_timeout to 0 stops
 *	  it, and the statement hook puts it back after the statement, with a
 *	  WARNING, as tx_lease.c does for the idle limit.
 *	- Every version: a timer of the extension's own, a POSIX timer of the
 *	  process that raises SIGUSR2 (which a backend otherwise ignores),
 *	  whose handler does what die() does (flags and the latch only), so the
 *	  holder sees core's FATAL 57P01 "terminating connection due to
 *	  administrator command".  It is deliberately not one of core's
 *	  timeouts: the recovery from every ERROR stops all of those, and a
 *	  statement refused in an aborted subtransaction reaches no code of
 *	  ours that could arm one again (the log hook sees the refusal only if
 *	  log_min_messages lets it through).  On 15 and 16 it is the ceiling,
 *	  armed at the deadline.  On 17 and later it is the backstop, armed a second
 *	  after the deadline: core honours a transaction timeout only at a
 *	  CHECK_FOR_INTERRUPTS, and a backend blocked on its client inside a
 *	  statement (COPY FROM STDIN whose client sends nothing, a result the
 *	  client does not read) reaches none; it honours a termination request
 *	  there.  The backstop also holds while one statement of the holder's
 *	  own switches transaction_timeout off (a function's SET clause).
 *
 * On both, a LOG line names the lease and its max_hold when the ceiling
 * ended a session, and fencing.stats counts it (leases_ceiling_ended).  The
 * report that ends the session is recognised in the log hook; a report
 * not sent to the server log (log_min_messages = panic) never reaches it,
 * so the backend's exit looks again, at the timers themselves.
 *
 * The ceilings of a transaction form a stack: each belongs to the
 * (sub)transaction that asked for it, like the lease's ttl (a SET LOCAL),
 * and goes when that subtransaction rolls back; only the earliest deadline
 * matters, so a ceiling no earlier than one already on the stack (which is
 * older, hence outlives it) is not pushed, and the top is the deadline in
 * force.  At transaction end (commit, including a COMMIT inside a
 * procedure, abort, and the exit of the backend) the stack is emptied and
 * the timer disarmed.  A transaction with a ceiling cannot be prepared:
 * the prepared transaction would keep the lock with nothing to end it.
 *
 * The ttl's timer is a second POSIX timer on the same signal; see "The idle
 * limit of a lease" below.
 *
 * Copyright (c) 2026, the fencing developers
 *
 * IDENTIFICATION
 *		src/locks/lease_ceiling.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>
#include <signal.h>
#include <time.h>

#include "access/xact.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/timeout.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "locks/locks.h"

/* One lease's ceiling. */
typedef struct LeaseCeiling
{
	TimestampTz deadline;		/* when the holder's transaction ends */
	TimestampTz granted;		/* when lease() asked for it */
	int			max_hold_ms;
	SubTransactionId subid;		/* (sub)transaction that asked for it */
	char		name[FENCING_NAME_MAX_BYTES + 1];	/* canonical */
} LeaseCeiling;

/*
 * The stack, in TopMemoryContext: deadlines strictly decreasing from the
 * bottom, subtransaction ids never decreasing, so the top is both the
 * deadline in force and the first to go when a subtransaction rolls back.
 */
static LeaseCeiling *ceilings = NULL;
static int	ceiling_count = 0;
static int	ceiling_capacity = 0;

/*
 * A POSIX timer of the backend on the monotonic clock, raising SIGUSR2, and
 * when it is due (nanoseconds on that clock, 0: not armed), which the
 * signal handler compares with the clock to tell which of the two timers
 * below went off.  The due time is set before the timer is armed and
 * cleared before it is stopped, so the handler never misses an expiry and
 * ignores a signal that comes late.  Only this file arms or stops them.
 */
typedef struct LeaseTimer
{
	timer_t		id;
	bool		created;
	volatile int64 due_ns;
} LeaseTimer;

/* the ceiling's (max_hold), and the one that ends a session idle past ttl */
static LeaseTimer termination_timer;
static LeaseTimer idle_timer;

/* and when the first one is due as a timestamp, for the ceiling's bookkeeping */
static TimestampTz termination_timer_finish = 0;

/* whether this process's SIGUSR2 is ours: 0 not asked yet, 1 yes, -1 no */
static int	sigusr2_ours = 0;

/* set by the handler, so that the report they cause is known for what it is */
static volatile sig_atomic_t termination_timer_fired = false;
static volatile sig_atomic_t idle_timer_fired = false;

/*
 * The idle timer's state: between two top-level statements with a lease in
 * force, it is due at the end of the last one (idle_since_ns) plus the ttl
 * in force; while a statement runs it is stopped.
 */
static bool idle_between_statements = false;
static int64 idle_since_ns = 0;

/*
 * How soon the idle timer looks again when it went off while the backend
 * was busy between statements (a Parse, a Bind) rather than waiting for
 * its client.
 */
#define IDLE_RECHECK_NS		(20 * 1000 * 1000)

/* set when the ceiling ended the session: what the exit callback logs */
static bool ended_by_ceiling = false;
static LeaseCeiling ended_ceiling;

static bool exit_callback_registered = false;

static emit_log_hook_type prev_emit_log_hook = NULL;

static void ceiling_xact_callback(XactEvent event, void *arg);
static void ceiling_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
									 SubTransactionId parentSubid, void *arg);
static void ceiling_emit_log(ErrorData *edata);
static void ceiling_before_exit(int code, Datum arg);

/* The monotonic clock in nanoseconds; safe in a signal handler. */
static int64
monotonic_ns(void)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return (int64) now.tv_sec * 1000000000 + now.tv_nsec;
}

/* Whether t went off by now. */
static inline bool
timer_went_off(const LeaseTimer *t, int64 now)
{
	int64		due = t->due_ns;

	return due != 0 && now >= due;
}

/*
 * The idle timer went off: if the backend is waiting for its client (in
 * the middle of no statement: the timer is stopped while one runs), end
 * the session the way core's idle_in_transaction_session_timeout does, so
 * that the holder sees core's own FATAL 25P03; core honours it while it
 * waits for a command, also while it discards messages up to a Sync after
 * an error.  Busy between statements instead (parsing, planning): look
 * again soon.
 */
static void
idle_timer_went_off(int64 now)
{
	struct itimerspec when;

	if (*my_wait_event_info == WAIT_EVENT_CLIENT_READ)
	{
		idle_timer_fired = true;
		IdleInTransactionSessionTimeoutPending = true;
		InterruptPending = true;
		return;
	}
	memset(&when, 0, sizeof(when));
	when.it_value.tv_nsec = IDLE_RECHECK_NS;
	idle_timer.due_ns = now + IDLE_RECHECK_NS;
	(void) timer_settime(idle_timer.id, 0, &when, NULL);
}

/*
 * SIGUSR2: one of the two timers went off.  The ceiling's ends the session
 * the way pg_terminate_backend() does.  From a signal handler, so only
 * flags, the latch, and the clock and timer calls POSIX allows here.
 */
static void
lease_timer_signal_handler(SIGNAL_ARGS)
{
	int			save_errno = errno;
	int64		now = monotonic_ns();

	if (!proc_exit_inprogress)
	{
		if (timer_went_off(&termination_timer, now))
		{
			termination_timer_fired = true;
			InterruptPending = true;
			ProcDiePending = true;
		}
		if (timer_went_off(&idle_timer, now))
			idle_timer_went_off(now);
	}
	SetLatch(MyLatch);
	errno = save_errno;
}

/*
 * Take SIGUSR2 for the timers, once per backend.  It is ignored by every
 * backend PostgreSQL starts for a client; a process that uses it for
 * something else (a walsender) cannot have the timers.  Returns whether
 * they can be used.
 */
static bool
lease_signal_available(void)
{
	struct sigaction current;

	if (sigusr2_ours == 0)
	{
		if (sigaction(SIGUSR2, NULL, &current) == 0 &&
			current.sa_handler == SIG_IGN)
		{
			pqsignal(SIGUSR2, lease_timer_signal_handler);
			sigusr2_ours = 1;
		}
		else
			sigusr2_ours = -1;
	}
	return sigusr2_ours > 0;
}

/*
 * Create a timer, once per backend, before the lease that needs it takes
 * its lock (so that a failure here holds nothing).
 */
static void
lease_timer_create(LeaseTimer *t, const char *what)
{
	struct sigevent event;

	if (t->created)
		return;
	memset(&event, 0, sizeof(event));
	event.sigev_notify = SIGEV_SIGNAL;
	event.sigev_signo = SIGUSR2;
	if (timer_create(CLOCK_MONOTONIC, &event, &t->id) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_RESOURCES),
				 errmsg("could not create the timer of %s: %m", what)));
	t->due_ns = 0;
	t->created = true;
}

/*
 * Arm a timer to go off delay_ns from now (relative, on the monotonic
 * clock), or stop it (delay_ns 0).  Failing to set it would leave a lock
 * without its limit: the session ends instead.
 */
static void
lease_timer_set(LeaseTimer *t, int64 delay_ns, const char *what)
{
	struct itimerspec when;

	memset(&when, 0, sizeof(when));
	if (delay_ns > 0)
	{
		when.it_value.tv_sec = delay_ns / 1000000000;
		when.it_value.tv_nsec = delay_ns % 1000000000;
		t->due_ns = monotonic_ns() + delay_ns;
	}
	else
		t->due_ns = 0;
	if (timer_settime(t->id, 0, &when, NULL) != 0)
		ereport(FATAL,
				(errmsg_internal("could not set the timer of %s: %m", what)));
}

/*
 * Create the ceiling's timer, before the first lease with a max_hold takes
 * its lock; a process whose SIGUSR2 is not free cannot have a ceiling.
 */
static void
termination_timer_create(void)
{
	if (!lease_signal_available())
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("a lease with max_hold cannot be taken in this process"),
				 errdetail("The timer of max_hold signals SIGUSR2, which this process uses for something else."),
				 errhint("Take the lease in a regular client session.")));
	lease_timer_create(&termination_timer, "a lease's max_hold");
}

/*
 * Bring the ceiling's timer in line with the ceiling in force (the top of
 * the stack), or stop it when there is none.  Nothing else moves this
 * timer, so it is exactly the top's deadline plus the grace, and only a
 * change costs a system call.
 */
static void
termination_timer_sync(void)
{
	TimestampTz finish = 0;

	if (!termination_timer.created)
		return;
	if (ceiling_count > 0 && !proc_exit_inprogress)
		finish = ceilings[ceiling_count - 1].deadline +
			(TimestampTz) FENCING_CEILING_GRACE_MS * 1000;
	if (finish == termination_timer_finish)
		return;
	/* a zero delay would disarm: a deadline already passed is 1 us away */
	lease_timer_set(&termination_timer,
					finish == 0 ? 0 :
					Max(finish - GetCurrentTimestamp(), 1) * 1000,
					"a lease's max_hold");
	termination_timer_finish = finish;
}

/*
 * The idle limit of a lease (its ttl).  Core enforces it with
 * idle_in_transaction_session_timeout, which the lease sets, but core arms
 * that timer only when it sends ReadyForQuery, at a Sync or after a simple
 * query: a client in pipeline mode that sends Parse, Bind, Execute and
 * Flush and then stalls, or one whose statement failed in a savepoint so
 * that the server discards its messages up to the next Sync, would keep
 * the lease for ever.  So the extension's own idle timer is armed at the
 * end of every top-level statement while a lease is in force, due the ttl
 * in force later, and stopped when the next top-level statement begins
 * (the module layer's hooks); the ttl changing between statements (ROLLBACK TO, the
 * end of the transaction) moves it.  A process whose SIGUSR2 is not free
 * (a walsender, which speaks only the simple protocol) has core's timeout
 * alone.
 */

/*
 * The idle limit of the transaction's leases in milliseconds (0: no lease
 * in force), as the file that keeps the transaction's leases says (held.c,
 * above this one, registers it at load time): the idle timer is due that
 * long after the last top-level statement ended.
 */
static int	(*ttl_in_force) (void) = NULL;

/*
 * Register where the ttl in force comes from; called from _PG_init.
 */
void
fencing_lease_idle_ttl_source(int (*source) (void))
{
	ttl_in_force = source;
}

/*
 * Make sure the idle timer exists, before a lease takes its lock.
 */
void
fencing_lease_idle_prepare(void)
{
	if (lease_signal_available())
		lease_timer_create(&idle_timer, "a lease's ttl");
}

/*
 * Arm the idle timer at idle_since_ns plus the ttl in force, or stop it
 * when no lease is in force.  A deadline already passed is 1 ns away.
 */
static void
idle_timer_sync(void)
{
	int			ttl_ms = ttl_in_force();
	int64		delay_ns = 0;

	if (!idle_timer.created)
		return;
	if (ttl_ms > 0 && idle_between_statements && !proc_exit_inprogress)
		delay_ns = Max(idle_since_ns + (int64) ttl_ms * 1000000 -
					   monotonic_ns(), 1);
	if (delay_ns == 0 && idle_timer.due_ns == 0)
		return;
	lease_timer_set(&idle_timer, delay_ns, "a lease's ttl");
}

/*
 * A top-level statement begins: the holder is not idle.
 */
void
fencing_lease_idle_statement_start(void)
{
	idle_between_statements = false;
	if (idle_timer.due_ns != 0)
		lease_timer_set(&idle_timer, 0, "a lease's ttl");
}

/*
 * A top-level statement ended, or failed: the idle time starts now.
 */
void
fencing_lease_idle_statement_end(void)
{
	idle_between_statements = true;
	if (!idle_timer.created)
		return;
	if (ttl_in_force() > 0)
		idle_since_ns = monotonic_ns();
	idle_timer_sync();
}

/*
 * The ttl in force changed outside a statement (a savepoint rolled back,
 * the transaction ended): the idle timer follows.
 */
void
fencing_lease_idle_changed(void)
{
	idle_timer_sync();
}

/*
 * Whether the idle timer ended the session (for fencing.stats).
 */
bool
fencing_lease_idle_timer_fired(void)
{
	return idle_timer_fired;
}

/*
 * What differs between server versions, in one place: on 17+, core's
 * transaction timer and the setting that must stay in force with it.
 */
#ifdef FENCING_CEILING_TRANSACTION_TIMEOUT

/*
 * Whether this transaction armed core's timer (17+: it must be disarmed at
 * the transaction's end), and how that timer stood before.
 */
static bool timer_touched = false;
static bool saved_timer_active = false;
static TimestampTz saved_timer_finish = 0;

/*
 * Keep transaction_timeout above zero, and no longer than the deadline's
 * distance from the transaction's start, for the rest of the transaction
 * (a SET LOCAL).  A shorter setting stays; it counts from the
 * transaction's start, as core's own timer does, and *finish is moved up to
 * it (core applies a setting made inside the transaction to a stopped timer
 * only, never to a running one).  True when it changed the setting.
 */
static bool
ceiling_keep_setting(TimestampTz deadline, TimestampTz *finish)
{
	TimestampTz xact_start = GetCurrentTransactionStartTimestamp();
	double		limit_ms = ceil((double) (deadline - xact_start) / 1000.0);
	char		value[32];

	limit_ms = Max(Min(limit_ms, (double) INT_MAX), 1.0);
	if (TransactionTimeout > 0 && TransactionTimeout <= (int) limit_ms)
	{
		*finish = Min(*finish,
					  xact_start + (TimestampTz) TransactionTimeout * 1000);
		return false;
	}
	snprintf(value, sizeof(value), "%d", (int) limit_ms);
	(void) set_config_option("transaction_timeout", value,
							 PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_LOCAL, true, 0, false);
	return true;
}

/*
 * Make core's timer fire no later than finish; an earlier finish is never
 * moved.  True when it changed the timer.
 */
static bool
core_timer_no_later_than(TimestampTz finish)
{
	if (get_timeout_active(TRANSACTION_TIMEOUT) &&
		get_timeout_finish_time(TRANSACTION_TIMEOUT) <= finish)
		return false;
	enable_timeout_at(TRANSACTION_TIMEOUT, finish);
	return true;
}

/*
 * Bring the setting and core's timer in line with a deadline, remembering
 * first how the timer stood before this transaction's first ceiling.  True
 * when it changed either.
 */
static bool
core_timer_arm(TimestampTz deadline)
{
	TimestampTz finish = deadline;
	bool		changed;

	if (!timer_touched)
	{
		saved_timer_active = get_timeout_active(TRANSACTION_TIMEOUT);
		saved_timer_finish = saved_timer_active ?
			get_timeout_finish_time(TRANSACTION_TIMEOUT) : 0;
		timer_touched = true;
	}
	changed = ceiling_keep_setting(deadline, &finish);
	if (core_timer_no_later_than(finish))
		changed = true;
	return changed;
}

/*
 * A subtransaction's ceilings went: put core's timer back as it stood
 * before this transaction's first ceiling, then no later than the earliest
 * ceiling left.  The setting is left alone: the rollback puts it back as it
 * was before the subtransaction.
 */
static void
core_timer_rearm(void)
{
	if (!timer_touched)
		return;
	if (saved_timer_active)
		enable_timeout_at(TRANSACTION_TIMEOUT, saved_timer_finish);
	else if (get_timeout_active(TRANSACTION_TIMEOUT))
		disable_timeout(TRANSACTION_TIMEOUT, false);
	if (ceiling_count > 0)
		(void) core_timer_no_later_than(ceilings[ceiling_count - 1].deadline);
}

/*
 * An error stopped every timer: core's goes back to the deadline in force
 * (only the timer: no setting is changed while an error is reported).
 */
static void
core_timer_rearm_after_error(TimestampTz deadline)
{
	if (timer_touched)
		(void) core_timer_no_later_than(deadline);
}

/*
 * The transaction ended: core has disarmed its own timer if its setting
 * was on; stop it if it was not.
 */
static void
core_timer_disarm(void)
{
	if (!timer_touched)
		return;
	if (get_timeout_active(TRANSACTION_TIMEOUT))
		disable_timeout(TRANSACTION_TIMEOUT, false);
	timer_touched = false;
	saved_timer_active = false;
}

/*
 * Whether a FATAL report is core's transaction timeout ending the session
 * once the ceiling's deadline has passed.
 */
static bool
core_timer_ended_session(ErrorData *edata)
{
	return edata->sqlerrcode == ERRCODE_TRANSACTION_TIMEOUT &&
		GetCurrentTimestamp() >= ceilings[ceiling_count - 1].deadline;
}

/*
 * The same, seen at backend exit without the report: core's timer went off
 * (its indicator stays set until it is armed or stopped again, and nothing
 * does either between the report and the exit callbacks) and the deadline
 * has passed.
 */
static bool
core_timer_fired_past_deadline(void)
{
	return get_timeout_indicator(TRANSACTION_TIMEOUT, false) &&
		GetCurrentTimestamp() >= ceilings[ceiling_count - 1].deadline;
}

#else							/* PostgreSQL 15 and 16: no core timer */

static bool
core_timer_ended_session(ErrorData *edata)
{
	return false;
}

static bool
core_timer_fired_past_deadline(void)
{
	return false;
}

static bool
core_timer_arm(TimestampTz deadline)
{
	return false;
}

static void
core_timer_rearm(void)
{
}

static void
core_timer_rearm_after_error(TimestampTz deadline)
{
}

static void
core_timer_disarm(void)
{
}

#endif							/* FENCING_CEILING_TRANSACTION_TIMEOUT */

/*
 * Register the callbacks; called from _PG_init, after fencing_locks_init,
 * so that the PREPARE refusal below is the one a holder of a ceiling sees
 * (the last callback registered is called first).
 */
void
fencing_lease_ceiling_init(void)
{
	RegisterXactCallback(ceiling_xact_callback, NULL);
	RegisterSubXactCallback(ceiling_subxact_callback, NULL);
	prev_emit_log_hook = emit_log_hook;
	emit_log_hook = ceiling_emit_log;
}

/*
 * max_hold in milliseconds, from its length in microseconds: positive, at
 * most INT_MAX milliseconds (transaction_timeout's range), rounded up so
 * that a sub-millisecond ceiling is one millisecond, not none.  Called
 * before the lease takes its lock, so it also makes sure the ceiling's
 * timer exists.
 */
int
fencing_lease_max_hold_ms(double usecs)
{
	if (usecs <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("lease max_hold must be positive"),
				 errhint("Pass NULL for a lease without a ceiling.")));
	if (ceil(usecs / 1000.0) > (double) INT_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("lease max_hold must be at most %d milliseconds",
						INT_MAX)));
	termination_timer_create();
	return (int) ceil(usecs / 1000.0);
}

/*
 * A subtransaction's ceilings went: both timers move back to the earliest
 * ceiling left, or to where they stood before.
 */
static void
ceiling_rearm(void)
{
	core_timer_rearm();
	termination_timer_sync();
}

/*
 * An ERROR that reaches the top level stops every one of core's timers
 * (PostgresMain's recovery calls disable_all_timeouts() before it aborts);
 * when it ends only a subtransaction (a savepoint, psql's ON_ERROR_ROLLBACK),
 * or is one more refusal in a subtransaction already aborted, the outer
 * transaction keeps its locks, so on 17+ core's transaction timer must be
 * armed again (the extension's own timer is not among those stopped).  A
 * deadline already passed fires at once.
 */
static void
ceiling_rearm_after_error(void)
{
	if (ceiling_count > 0 && !proc_exit_inprogress)
		core_timer_rearm_after_error(ceilings[ceiling_count - 1].deadline);
}

/*
 * A lease on the canonical name was granted with a ceiling of max_hold_ms:
 * the holder's transaction ends max_hold_ms from now, or earlier if an
 * earlier limit is in force already.
 */
void
fencing_lease_ceiling_set(const char *name, int namelen, int max_hold_ms)
{
	TimestampTz now = GetCurrentTimestamp();
	TimestampTz deadline = now + (TimestampTz) max_hold_ms * 1000;
	LeaseCeiling *c;

	if (!exit_callback_registered)
	{
		before_shmem_exit(ceiling_before_exit, (Datum) 0);
		exit_callback_registered = true;
	}

	/* an older ceiling that comes first outlives this one: nothing to do */
	if (ceiling_count > 0 && ceilings[ceiling_count - 1].deadline <= deadline)
		return;

	if (ceiling_count == ceiling_capacity)
	{
		int			new_capacity = ceiling_capacity > 0 ? ceiling_capacity * 2 : 8;

		if (ceilings == NULL)
			ceilings = MemoryContextAlloc(TopMemoryContext,
										  sizeof(LeaseCeiling) * new_capacity);
		else
			ceilings = repalloc(ceilings, sizeof(LeaseCeiling) * new_capacity);
		ceiling_capacity = new_capacity;
	}

	c = &ceilings[ceiling_count];
	c->deadline = deadline;
	c->granted = now;
	c->max_hold_ms = max_hold_ms;
	c->subid = GetCurrentSubTransactionId();
	Assert(namelen <= FENCING_NAME_MAX_BYTES);
	memcpy(c->name, name, namelen);
	c->name[namelen] = '\0';
	ceiling_count++;

	(void) core_timer_arm(deadline);
	termination_timer_sync();
}

/*
 * Called after each top-level statement, to put back what the holder's own
 * statements may have stopped: on PostgreSQL 17 and later the session can
 * switch core's timer off (SET transaction_timeout = 0, RESET, set_config),
 * which is put back and said.  The extension's own timer needs nothing:
 * only this file moves it.
 */
void
fencing_lease_ceiling_keep(void)
{
	LeaseCeiling *c;

	if (ceiling_count == 0)
		return;
	c = &ceilings[ceiling_count - 1];
	if (!core_timer_arm(c->deadline))
		return;
	ereport(WARNING,
			(errcode(ERRCODE_WARNING),
			 errmsg("transaction_timeout stays in force while this transaction holds a lease with max_hold"),
			 errdetail("The lease on \"%s\" ends this transaction at %s.",
					   c->name, timestamptz_to_str(c->deadline)),
			 errhint("End the transaction to end the lease; the session's own setting returns then.")));
}

/*
 * The ceiling in force ended the session: remember it for the LOG line and
 * count it, once.
 */
static void
ceiling_note_ending(void)
{
	if (ended_by_ceiling)
		return;
	ended_by_ceiling = true;
	ended_ceiling = ceilings[ceiling_count - 1];
	fencing_stat_add(FENCING_STAT_LEASES_CEILING_ENDED, 1);
}

/*
 * The backend is exiting with a ceiling in force: if a ceiling's timer went
 * off, that is why (its handler asked for the exit, or core's transaction
 * timeout reported it), whether or not the report reached the log hook.
 */
static void
ceiling_note_ending_at_exit(void)
{
	if (ceiling_count > 0 &&
		(termination_timer_fired || core_timer_fired_past_deadline()))
		ceiling_note_ending();
}

/*
 * Transaction end empties the stack and disarms the timer: the lease ends
 * with its transaction, and so does its ceiling (also at a COMMIT inside a
 * procedure, which starts a new transaction).  PREPARE is refused while a
 * ceiling is in force: nothing would end the prepared transaction, which
 * keeps the lock, at max_hold.
 */
static void
ceiling_xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_PRE_PREPARE:
			if (ceiling_count > 0)
				ereport(ERROR,
						(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						 errmsg("cannot PREPARE a transaction that holds a lease with max_hold"),
						 errdetail("The lease on \"%s\" has a max_hold of %d ms, and a prepared transaction would keep the lock past it with no session to end it.",
								   ceilings[ceiling_count - 1].name,
								   ceilings[ceiling_count - 1].max_hold_ms),
						 errhint("Commit or roll back instead.")));
			break;
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
		case XACT_EVENT_PREPARE:
			/* an exit callback run before ours may abort first */
			if (event == XACT_EVENT_ABORT && proc_exit_inprogress)
				ceiling_note_ending_at_exit();
			ceiling_count = 0;
			core_timer_disarm();
			termination_timer_sync();
			break;
		default:
			break;
	}
}

/*
 * A ceiling belongs to the (sub)transaction that asked for it: on commit
 * of a subtransaction its ceilings pass to the parent, on rollback they go
 * and the timer moves back to the earliest one left (or to where it was).
 * A rollback that takes none of them may come from an ERROR, which has
 * stopped the timer: it is armed again.
 */
static void
ceiling_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
						 SubTransactionId parentSubid, void *arg)
{
	int			i;

	if (ceiling_count == 0)
		return;
	if (event == SUBXACT_EVENT_COMMIT_SUB)
	{
		for (i = ceiling_count - 1; i >= 0 && ceilings[i].subid == mySubid; i--)
			ceilings[i].subid = parentSubid;
	}
	else if (event == SUBXACT_EVENT_ABORT_SUB)
	{
		int			before = ceiling_count;

		while (ceiling_count > 0 &&
			   ceilings[ceiling_count - 1].subid >= mySubid)
			ceiling_count--;
		if (ceiling_count != before)
			ceiling_rearm();
		else
			ceiling_rearm_after_error();
	}
}

/*
 * The report that ends the session: when it is the one the ceiling's
 * timers cause (25P04 from core's transaction timeout on 17+, once the
 * deadline in force has passed; 57P01 once the extension's own timer went
 * off), the ceiling ended the session.  Count it here, where the report is
 * seen (the exit callback counts it when the report was not sent to the
 * server log, and so never came here); the LOG line waits for the exit
 * callback (no report from inside a report).  An ERROR seen here is one
 * the top level is recovering from, after stopping every one of core's
 * timers: on 17+ core's transaction timer is armed again (this is the only
 * hook that sees a statement refused in an aborted subtransaction; the
 * report reaches it unless log_min_messages is above ERROR, and then the
 * extension's own timer, a second later, ends the session).
 */
static void
ceiling_emit_log(ErrorData *edata)
{
	if (ceiling_count > 0 && !ended_by_ceiling && edata->elevel == FATAL &&
		((edata->sqlerrcode == ERRCODE_ADMIN_SHUTDOWN &&
		  termination_timer_fired) ||
		 core_timer_ended_session(edata)))
		ceiling_note_ending();
	if (edata->elevel == ERROR)
		ceiling_rearm_after_error();
	if (prev_emit_log_hook)
		prev_emit_log_hook(edata);
}

/*
 * Backend exit after the ceiling ended the session: count it if the log
 * hook did not see the report, and tell the DBA which lease and which
 * max_hold did it, since core's message names neither.
 */
static void
ceiling_before_exit(int code, Datum arg)
{
	ceiling_note_ending_at_exit();
	if (!ended_by_ceiling)
		return;
	ereport(LOG,
			(errmsg("fencing lease \"%s\" reached its max_hold of %d ms; the server ended its session",
					ended_ceiling.name, ended_ceiling.max_hold_ms),
			 errdetail("The lease was granted at %s; its transaction had to end by %s.",
					   pstrdup(timestamptz_to_str(ended_ceiling.granted)),
					   timestamptz_to_str(ended_ceiling.deadline))));
}
