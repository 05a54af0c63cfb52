/*-------------------------------------------------------------------------
 *
 * single.c
 *		One named lock: fencing.try_lock(), lock(), try_lock_shared(),
 *		lock_shared(), and held_token(), the check a holder makes before
 *		each side effect.
 *
 * Each grant draws a fresh token; taking a lock this transaction holds
 * already answers with the token it was granted with (L5).  The shared
 * forms take the same core lock in share mode: any number of shared
 * holders at once, none while an exclusive holder has it or an exclusive
 * request waits for it (core's queue rule, which keeps a stream of readers
 * from starving a writer).  Each shared holder gets a token of its own.
 *
 * Copyright (c) 2026, the fencing developers
 *
 * IDENTIFICATION
 *		src/locks/single.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "storage/lock.h"
#include "utils/timestamp.h"

#include "locks/locks.h"

PG_FUNCTION_INFO_V1(fencing_try_lock);
PG_FUNCTION_INFO_V1(fencing_lock);
PG_FUNCTION_INFO_V1(fencing_try_lock_shared);
PG_FUNCTION_INFO_V1(fencing_lock_shared);
PG_FUNCTION_INFO_V1(fencing_held_token);

/* Count a grant of one lock in fencing.stats, and return its token. */
static inline Datum
granted(const HeldLock *h, LOCKMODE lockmode)
{
	fencing_stat_add(FENCING_STAT_LOCKS_GRANTED, 1);
	if (lockmode == ShareLock)
		fencing_stat_add(FENCING_STAT_SHARED_LOCKS_GRANTED, 1);
	PG_RETURN_INT64(h->token);
}

/*
 * try_lock and try_lock_shared: the token when granted, NULL when busy.
 * Inlined into each, so the mode is a constant.
 */
static inline Datum
try_lock_in_mode(FunctionCallInfo fcinfo, LOCKMODE lockmode,
				 const char *function)
{
	LockRequest req;
	HeldLock   *h;

	fencing_error_if_standby(function);
	fencing_error_if_null_name(fcinfo);
	fencing_prepare_request(&req, PG_GETARG_DATUM(0), lockmode);

	h = fencing_take_without_waiting(&req, function);
	if (h == NULL)
		PG_RETURN_NULL();
	return granted(h, lockmode);
}

/*
 * The lock was busy (the pending slot is still claimed): wait for it, for
 * at most timeout_ms when has_timeout (zero: not at all).  Whether it was
 * granted; when not, the pending slot is freed and the time-out counted.
 */
static bool
wait_for_lock(const LockRequest *req, bool has_timeout, int64 timeout_ms)
{
	if (!(has_timeout && timeout_ms == 0) &&
		fencing_wait_for_grant(req, has_timeout,
							   has_timeout ?
							   TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
														   timeout_ms) : 0))
		return true;
	/* the internal rollback has released a grant that raced */
	fencing_release_pending();
	fencing_stat_add(FENCING_STAT_LOCKS_TIMED_OUT, 1);
	return false;
}

/*
 * lock and lock_shared.  Waits in core's lock queue: NULL timeout waits
 * until granted (or until lock_timeout, statement_timeout, a deadlock or a
 * cancel ends the statement with an error); a zero timeout tries once;
 * otherwise NULL when the timeout passes.  Timeouts are rounded up to whole
 * milliseconds.  While it waits, the view shows the wait.
 */
static inline Datum
lock_in_mode(FunctionCallInfo fcinfo, LOCKMODE lockmode, const char *function)
{
	LockRequest req;
	HeldLock   *h;
	bool		has_timeout;
	int64		timeout_ms;

	fencing_error_if_standby(function);
	fencing_error_if_null_name(fcinfo);
	has_timeout = fencing_timeout_arg(fcinfo, 1, &timeout_ms);

	fencing_prepare_request(&req, PG_GETARG_DATUM(0), lockmode);

	if ((h = fencing_held_again(&req)) == NULL)
	{
		bool		waited = false;

		if (!fencing_attempt(&req))
		{
			if (!wait_for_lock(&req, has_timeout, timeout_ms))
				PG_RETURN_NULL();
			waited = true;
		}
		h = fencing_grant(&req, waited);
		fencing_warn_if_autocommit(&req, 1, function);
	}
	return granted(h, lockmode);
}

/*
 * SQL: fencing.try_lock(name).  The token when granted, NULL when another
 * transaction holds the lock.
 */
Datum
fencing_try_lock(PG_FUNCTION_ARGS)
{
	return try_lock_in_mode(fcinfo, ExclusiveLock, "fencing.try_lock()");
}

/*
 * SQL: fencing.lock(name, timeout).  Waits for the lock (lock_in_mode).
 */
Datum
fencing_lock(PG_FUNCTION_ARGS)
{
	return lock_in_mode(fcinfo, ExclusiveLock, "fencing.lock()");
}

/*
 * SQL: fencing.try_lock_shared(name).  The lock in shared mode.
 */
Datum
fencing_try_lock_shared(PG_FUNCTION_ARGS)
{
	return try_lock_in_mode(fcinfo, ShareLock, "fencing.try_lock_shared()");
}

/*
 * SQL: fencing.lock_shared(name, timeout).  Waits for the lock in shared
 * mode; queued behind an exclusive request that waits before it.
 */
Datum
fencing_lock_shared(PG_FUNCTION_ARGS)
{
	return lock_in_mode(fcinfo, ShareLock, "fencing.lock_shared()");
}

/*
 * SQL: fencing.held_token(name).  The token of this transaction's grant of
 * the lock, or NULL when this transaction does not hold it through
 * fencing: the check a holder makes before each side effect.  A semaphore
 * permit held under the name counts when the name's lock is not held.
 */
Datum
fencing_held_token(PG_FUNCTION_ARGS)
{
	LockRequest req;
	HeldLock   *h;

	fencing_error_if_standby("fencing.held_token()");
	fencing_prepare_request(&req, PG_GETARG_DATUM(0), ExclusiveLock);

	h = fencing_held_find(req.key, false);
	if (h == NULL)
		h = fencing_held_find(req.key, true);
	if (h == NULL)
		PG_RETURN_NULL();
	fencing_check_own_name(h, &req);
	PG_RETURN_INT64(h->token);
}
