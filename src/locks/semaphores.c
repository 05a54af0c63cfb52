/*-------------------------------------------------------------------------
 *
 * semaphores.c
 *		Semaphores: fencing.try_acquire() and fencing.acquire().
 *
 * A semaphore of m permits on a name is m core locks: permit i is the
 * exclusive advisory lock whose tag is the name's key with
 * FENCING_PERMIT_TAG_BASE + i in its last field (core's advisory functions
 * use 1 and 2 there, so the raw functions cannot reach a permit, and a
 * name's permits are apart from the name's lock).  Holding permit i is
 * holding that lock, so a permit ends with its (sub)transaction or backend
 * exactly like any fencing lock, and at most m transactions hold permits
 * numbered 1..m at once.  A caller tries permits 1..m in turn without
 * waiting; with all of them free the first try succeeds, so the cost is
 * that of try_lock.  From the first busy one on it skips those the
 * registry shows taken (registry.c), so a full semaphore costs one
 * LockAcquire and one look at the registry, not m LockAcquire calls.
 *
 * Core's lock manager can wait for one lock, not for any of m, so a waiter
 * marks its registry slot waiting, sleeps on its latch and tries again
 * when woken.  Every release of a permit, after core has released the lock
 * and the slot is free (held.c, from the resource-release callback), sets
 * the latches of the key's waiters and of nobody else's; a waiter is
 * marked before it first tries, so no release between a try and its sleep
 * is missed: the wait does not poll.  It shows in pg_stat_activity as
 * wait_event_type "Extension".  The wait is interrupted by a cancel and statement_timeout;
 * lock_timeout and the deadlock detector do not see it (it is not a lock
 * wait), so the timeout argument is what bounds it.
 *
 * Copyright (c) 2026, the fencing developers
 *
 * IDENTIFICATION
 *		src/locks/semaphores.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/latch.h"
#include "storage/lock.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "locks/locks.h"

PG_FUNCTION_INFO_V1(fencing_try_acquire);
PG_FUNCTION_INFO_V1(fencing_acquire);

#define FENCING_PERMIT_TAG_BASE	0x4000
#define FENCING_MAX_PERMITS		1000

/* The lock tag of permit i of the key. */
static inline void
set_permit_tag(LOCKTAG *tag, int64 key, int permit)
{
	SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId,
						 (uint32) ((uint64) key >> 32),
						 (uint32) key, FENCING_PERMIT_TAG_BASE + permit);
}

/*
 * The permits argument, checked: 1 to FENCING_MAX_PERMITS.
 */
static int
permits_arg(FunctionCallInfo fcinfo)
{
	int			permits;

	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("number of permits must not be null")));
	permits = PG_GETARG_INT32(1);
	if (permits < 1 || permits > FENCING_MAX_PERMITS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("number of permits must be between 1 and %d", FENCING_MAX_PERMITS),
				 errdetail("The call asked for %d permits.", permits),
				 errhint("Every caller of a semaphore should pass the same number of permits.")));
	return permits;
}

/*
 * Try permits 1..permits once each, without waiting, with the pending
 * slot claimed.  True when one was granted (the pending slot then names
 * it); when all are busy or delayed, checks for a key collision (FN002)
 * and returns false, the slot still pending, with *delay_end set to when
 * the first lock-delay on an otherwise free permit ends (0: none).
 *
 * A permit under a lock-delay is not even taken: taking it and giving it
 * back would make it look busy to a waiter trying it at that moment, which
 * would learn nothing of the delay and, with no release to come, sleep
 * past its end.  A delay that starts while the permit is being taken (its
 * holder lost just then) is still seen after the grant, as on every grant
 * path; that give-back wakes the waiters, which then see the delay
 * themselves.
 */
static bool
attempt_permits(LockRequest *req, int permits, TimestampTz *delay_end)
{
	bool		taken[FENCING_MAX_PERMITS];
	bool		looked = false;
	int			i;

	*delay_end = 0;
	for (i = 1; i <= permits; i++)
	{
		TimestampTz until;

		if (looked && taken[i - 1])
			continue;
		until = fencing_delay_in_force(req->key, i);
		if (until != 0)
			fencing_stat_add(FENCING_STAT_DELAYED_REFUSALS, 1);
		else
		{
			set_permit_tag(&req->tag, req->key, i);
			if (LockAcquire(&req->tag, ExclusiveLock, false, true) ==
				LOCKACQUIRE_NOT_AVAIL)
			{
				/* the first busy permit: learn which others are taken */
				if (!looked)
					(void) fencing_lock_registry_permits_taken(req->key, permits,
															   taken);
				looked = true;
				continue;
			}
			until = fencing_give_back_if_delayed(&req->tag, ExclusiveLock,
												 req->key, i);
			if (until == 0)
			{
				req->permit = (uint16) i;
				fencing_pending.permit_key = req->key;
				fencing_pending.permit_key_set = true;
				fencing_lock_registry_set_permit(fencing_pending.slot, i);
				return true;
			}
			fencing_lock_registry_permit_freed(req->key);
		}
		if (*delay_end == 0 || until < *delay_end)
			*delay_end = until;
	}
	fencing_lock_registry_check_collision(req->key, req->name, req->namelen);
	return false;
}

/*
 * How long a waiter for a permit sleeps before it tries again: until the
 * deadline (0: none), or the end of the first lock-delay on a free permit
 * when that is sooner (no release wakes us when a delay ends); -1 for no
 * bound, 0 when the deadline has passed.
 */
static long
permit_sleep_ms(TimestampTz deadline, TimestampTz delay_end)
{
	long		sleep_ms = -1;

	if (deadline != 0)
	{
		sleep_ms = TimestampDifferenceMilliseconds(GetCurrentTimestamp(),
												   deadline);
		if (sleep_ms <= 0)
			return 0;
	}
	if (delay_end != 0)
	{
		long		delay_ms =
			TimestampDifferenceMilliseconds(GetCurrentTimestamp(),
											delay_end);

		delay_ms = Max(delay_ms, 1);
		if (sleep_ms < 0 || delay_ms < sleep_ms)
			sleep_ms = delay_ms;
	}
	/* a latch wait counts at most INT_MAX ms; a longer one loops */
	return Min(sleep_ms, (long) INT_MAX);
}

/*
 * Every permit was busy or delayed: mark the slot waiting and count this
 * backend among the waiters (until it stops, by error too), sleep on the
 * latch and try again on each wake-up, until a permit is granted (true) or
 * the deadline passes (0: none).  The slot is marked before the first try
 * and the latch reset before each, so a release after a try wakes the
 * sleep that follows it.
 */
static bool
wait_for_permit(LockRequest *req, int permits, TimestampTz deadline)
{
	TimestampTz delay_end;
	volatile bool granted = false;

	fencing_lock_registry_wait(fencing_pending.slot);
	fencing_lock_registry_permit_waiting(1);
	PG_TRY();
	{
		while (!(granted = attempt_permits(req, permits, &delay_end)))
		{
			long		sleep_ms = permit_sleep_ms(deadline, delay_end);

			if (sleep_ms == 0)
				break;
			(void) WaitLatch(MyLatch,
							 WL_LATCH_SET | WL_EXIT_ON_PM_DEATH |
							 (sleep_ms > 0 ? WL_TIMEOUT : 0),
							 sleep_ms, PG_WAIT_EXTENSION);
			ResetLatch(MyLatch);
			CHECK_FOR_INTERRUPTS();
		}
	}
	PG_FINALLY();
	{
		fencing_lock_registry_permit_waiting(-1);
	}
	PG_END_TRY();
	return granted;
}

/*
 * Take a permit of a semaphore: the entry of the permit this transaction
 * already holds (L5), or of a newly granted one, or NULL when all were busy
 * (and wait is false, or the timeout passed).
 */
static HeldLock *
take_permit(LockRequest *req, int permits, bool wait, bool has_timeout,
			int64 timeout_ms, const char *function)
{
	HeldLock   *h = fencing_held_find(req->key, true);
	bool		granted;
	bool		waited = false;
	TimestampTz delay_end;

	if (h != NULL)
	{
		fencing_check_own_name(h, req);
		return h;
	}

	fencing_held_reserve();
	fencing_pending.slot = fencing_lock_registry_claim(req->key, req->name,
													   req->namelen,
													   FENCING_LOCK_PERMIT, 0,
													   permits);
	fencing_pending.subid = GetCurrentSubTransactionId();

	granted = attempt_permits(req, permits, &delay_end);
	if (!granted && wait && !(has_timeout && timeout_ms == 0))
	{
		granted = wait_for_permit(req, permits,
								  has_timeout ?
								  TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
															  timeout_ms) : 0);
		waited = true;
	}

	if (!granted)
	{
		fencing_release_pending();
		return NULL;
	}
	h = fencing_grant(req, waited);
	fencing_pending.permit_key_set = false;		/* the entry owns the permit now */
	fencing_warn_if_autocommit(req, 1, function);
	return h;
}

/*
 * The common part of try_acquire and acquire.
 */
static Datum
acquire_permit(FunctionCallInfo fcinfo, bool wait, const char *function)
{
	LockRequest req;
	HeldLock   *h;
	int			permits;
	bool		has_timeout = false;
	int64		timeout_ms = 0;

	fencing_error_if_standby(function);
	fencing_error_if_null_name(fcinfo);
	permits = permits_arg(fcinfo);
	if (wait)
		has_timeout = fencing_timeout_arg(fcinfo, 2, &timeout_ms);
	fencing_prepare_request(&req, PG_GETARG_DATUM(0), ExclusiveLock);

	h = take_permit(&req, permits, wait, has_timeout, timeout_ms, function);
	if (h == NULL)
	{
		fencing_stat_add(wait ? FENCING_STAT_LOCKS_TIMED_OUT :
						 FENCING_STAT_LOCKS_BUSY, 1);
		PG_RETURN_NULL();
	}
	fencing_stat_add(FENCING_STAT_LOCKS_GRANTED, 1);
	fencing_stat_add(FENCING_STAT_PERMITS_GRANTED, 1);
	PG_RETURN_INT64(h->token);
}

/*
 * SQL: fencing.try_acquire(name, permits).  A permit of the semaphore
 * "name" of at most permits holders: its own fresh token, or NULL when all
 * permits are held.
 */
Datum
fencing_try_acquire(PG_FUNCTION_ARGS)
{
	return acquire_permit(fcinfo, false, "fencing.try_acquire()");
}

/*
 * SQL: fencing.acquire(name, permits, timeout).  Waits for a permit to be
 * freed (NULL timeout: no bound; zero: try once); NULL when the timeout
 * passes.
 */
Datum
fencing_acquire(PG_FUNCTION_ARGS)
{
	return acquire_permit(fcinfo, true, "fencing.acquire()");
}
