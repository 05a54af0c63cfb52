/*-------------------------------------------------------------------------
 *
 * tx_lease.c
 *		fencing.lease(name, ttl, max_hold): a lock of the transaction with
 *		a lease the server enforces, and the idle limit that enforces it.
 *
 * A lease is try_lock plus a limit on how long its holder may sit idle
 * between statements: for the rest of the transaction
 * idle_in_transaction_session_timeout is at most ttl (like SET LOCAL), so
 * a holder that stalls for longer than ttl has its session ended by the
 * server and the lock freed.  Which locks carry a lease and the idle limit
 * in force follow the transaction's subtransactions (held.c); the timers
 * that hold the ttl where core's timeout does not reach, and the ceiling
 * of max_hold, are lease_ceiling.c's.
 *
 * Copyright (c) 2026, the fencing developers
 *
 * IDENTIFICATION
 *		src/locks/tx_lease.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "storage/lock.h"
#include "utils/guc.h"

#include "locks/locks.h"

PG_FUNCTION_INFO_V1(fencing_lease);

/*
 * Make idle_in_transaction_session_timeout at most ttl_ms for the rest of
 * the transaction (a SET LOCAL).  Never lengthens a limit already in force
 * (an earlier, shorter lease, or the session's own setting): the server
 * would end the session then anyway.  True when it changed the setting.
 */
static bool
shorten_idle_limit(int ttl_ms)
{
	char		value[32];

	if (IdleInTransactionSessionTimeout > 0 &&
		IdleInTransactionSessionTimeout <= ttl_ms)
		return false;
	snprintf(value, sizeof(value), "%d", ttl_ms);
	(void) set_config_option("idle_in_transaction_session_timeout", value,
							 PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_LOCAL, true, 0, false);
	return true;
}

/*
 * SQL: fencing.lease(name, ttl, max_hold).  try_lock, plus a
 * server-enforced lease: for the rest of the transaction
 * idle_in_transaction_session_timeout is at most ttl (like SET LOCAL), so a
 * holder that stalls between statements for longer than ttl has its
 * session ended by the server and the lock freed.  Any statement, such as
 * fencing.held_token(), restarts the idle clock.  The ttl is validated
 * before the lock is tried, and rounded down to whole milliseconds (a
 * lease never lasts longer than asked).  The lease belongs to the
 * (sub)transaction that took it: rolled back with it, like the setting.
 * A max_hold (not NULL), validated with the ttl, also ends the transaction
 * max_hold after the call, busy or idle (lease_ceiling.c).  The 1.0
 * function, lease(name, ttl), is this one called with two arguments.
 */
Datum
fencing_lease(PG_FUNCTION_ARGS)
{
	LockRequest req;
	HeldLock   *h;
	int			ttl_ms;
	int			max_hold_ms = 0;

	fencing_error_if_standby("fencing.lease()");
	fencing_error_if_null_name(fcinfo);

	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("lease ttl must not be null"),
				 errhint("Use fencing.try_lock() for a lock without a lease.")));
	ttl_ms = fencing_ttl_arg_ms(PG_GETARG_INTERVAL_P(1));
	if (PG_NARGS() > 2 && !PG_ARGISNULL(2))
		max_hold_ms = fencing_lease_max_hold_ms(fencing_interval_usecs(PG_GETARG_INTERVAL_P(2)));

	fencing_prepare_request(&req, PG_GETARG_DATUM(0), ExclusiveLock);
	fencing_lease_limit_reserve();
	fencing_lease_idle_prepare();

	h = fencing_take_without_waiting(&req, "fencing.lease()");
	if (h == NULL)
		PG_RETURN_NULL();

	(void) shorten_idle_limit(ttl_ms);
	fencing_lease_limit_push(ttl_ms, false);
	if (max_hold_ms > 0)
		fencing_lease_ceiling_set(req.name, req.namelen, max_hold_ms);

	fencing_held_take_lease(h);
	fencing_stat_add(FENCING_STAT_LOCKS_GRANTED, 1);
	fencing_stat_add(FENCING_STAT_LEASES_GRANTED, 1);
	PG_RETURN_INT64(h->token);
}

/*
 * For fencing.use_lease() (fence/use_lease.c): the lease that outlives the
 * transaction was used in it, and the batch now holds the row lock of the
 * lease's resource fence until the transaction ends.  A holder frozen in
 * that transaction would keep the next holder's use_lease() waiting for
 * ever, long after the lease lapsed; so its idle time is bounded by the
 * lease's ttl exactly as lease() bounds it (the setting, the timer that
 * also holds in pipeline mode, the limit kept after each statement), and
 * a holder idle past it has its session ended (FATAL 25P03), its
 * transaction rolled back and the row lock freed.
 */
void
fencing_lease_idle_limit_for_use(int ttl_ms)
{
	fencing_lease_limit_reserve();
	fencing_lease_idle_prepare();
	(void) shorten_idle_limit(ttl_ms);
	fencing_lease_limit_push(ttl_ms, true);
}

/*
 * Called after each top-level statement.  A lease is only as good as the
 * idle limit behind it: a holder that ran SET, RESET or set_config() on
 * idle_in_transaction_session_timeout after lease() would otherwise idle
 * forever with the lock.  While a lease is in force, put the limit back to
 * the ttl in force (the shortest of the transaction's leases that were not
 * rolled back; a SET LOCAL, so the session value returns when the
 * transaction ends) and say so.  A shorter limit set by the session stays:
 * it only ends a stalled holder sooner.
 */
void
fencing_lease_keep_limit(void)
{
	int			ttl_ms = fencing_lease_ttl_in_force();

	if (ttl_ms <= 0 || !shorten_idle_limit(ttl_ms))
		return;
	ereport(WARNING,
			(errcode(ERRCODE_WARNING),
			 errmsg("idle_in_transaction_session_timeout stays at %d ms while this transaction holds a lease",
					ttl_ms),
			 errdetail("A lease ends the session of a holder that sits idle longer than its ttl; a longer or disabled limit would let a stalled holder keep the lock."),
			 errhint("End the transaction to end the lease; the session's own setting returns then.")));
}
