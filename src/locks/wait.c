/*-------------------------------------------------------------------------
 *
 * wait.c
 *		A wait in core's lock queue, bounded by a timeout.
 *
 * Waiting (fencing.lock and lock_all) uses core's own lock wait: the queue
 * is fair, the deadlock detector sees us, and lock_timeout,
 * statement_timeout and query cancel interrupt the wait as for any lock.
 * A wait with a timeout runs inside an internal subtransaction with
 * lock_timeout lowered to the timeout; only the resulting "lock timeout"
 * error is turned into "not granted", and the subtransaction's rollback
 * undoes the wait cleanly (including a grant that raced with the timeout).
 * A grant is then moved to the caller's resource owner, where every other
 * grant path leaves its lock.
 *
 * Copyright (c) 2026, the fencing developers
 *
 * IDENTIFICATION
 *		src/locks/wait.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "miscadmin.h"
#include "storage/lock.h"
#include "utils/memutils.h"
#include "utils/resowner.h"

#include "locks/locks.h"

/*
 * A lock granted in an internal subtransaction passes, when that commits,
 * to the (sub)transaction's own resource owner, CurTransactionResourceOwner.
 * The caller's resource owner may be another one (a portal's: every
 * statement runs under one), and every other grant leaves the lock with
 * the caller's, where giving it back (a lock-delay, a group whose next name
 * is busy) and the release bookkeeping look for it.  Take the lock once
 * more for the caller's owner (it is held, so only the local count moves)
 * and let go of the transaction owner's hold.
 */
static void
move_to_current_owner(const LOCKTAG *tag, LOCKMODE lockmode)
{
	ResourceOwner owner = CurrentResourceOwner;

	if (owner == CurTransactionResourceOwner)
		return;
	(void) LockAcquire(tag, lockmode, false, true);
	CurrentResourceOwner = CurTransactionResourceOwner;
	LockRelease(tag, lockmode, false);
	CurrentResourceOwner = owner;
}

/*
 * Wait in core's lock queue for at most timeout_ms.  lock_timeout is
 * lowered to the timeout for the duration of the wait (unless the session's
 * own lock_timeout is shorter, which then wins and raises its usual error),
 * and the wait runs in an internal subtransaction so that the timeout's
 * error can be caught safely: the rollback removes us from the queue and
 * releases a grant that raced with the timeout.  Every other error (query
 * cancel, statement_timeout, deadlock, the session's lock_timeout) is
 * re-thrown.  Returns whether the lock was granted.  The wait's registry
 * slot was claimed outside the internal subtransaction, so its rollback
 * leaves the slot to the caller.
 */
bool
fencing_lock_wait_with_timeout(const LOCKTAG *tag, LOCKMODE lockmode,
							   int timeout_ms)
{
	MemoryContext oldcontext = CurrentMemoryContext;
	ResourceOwner oldowner = CurrentResourceOwner;
	int			session_lock_timeout = LockTimeout;
	bool		ours = (session_lock_timeout <= 0 ||
						timeout_ms <= session_lock_timeout);
	volatile bool granted = false;

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(oldcontext);

	PG_TRY();
	{
		if (ours)
			LockTimeout = timeout_ms;
		(void) LockAcquire(tag, lockmode, false, false);

		/*
		 * A lock timeout that fired just as the lock was granted is still
		 * pending as a cancel; take it here, where it can be told apart,
		 * rather than let it cancel the caller's statement later.
		 */
		CHECK_FOR_INTERRUPTS();

		LockTimeout = session_lock_timeout;
		ReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(oldcontext);
		CurrentResourceOwner = oldowner;
		granted = true;
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		LockTimeout = session_lock_timeout;
		MemoryContextSwitchTo(oldcontext);
		edata = CopyErrorData();
		FlushErrorState();

		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(oldcontext);
		CurrentResourceOwner = oldowner;

		if (!ours || edata->sqlerrcode != ERRCODE_LOCK_NOT_AVAILABLE)
			ReThrowError(edata);
		FreeErrorData(edata);
	}
	PG_END_TRY();

	if (granted)
		move_to_current_owner(tag, lockmode);
	return granted;
}
