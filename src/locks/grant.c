/*-------------------------------------------------------------------------
 *
 * grant.c
 *		The grant machinery every lock function shares: find the lock this
 *		transaction holds already, try it once, wait for it, give a grant
 *		back while a lock-delay is in force, warn when the lock ends with
 *		the statement.
 *
 * A fencing lock IS the core advisory lock that
 * pg_try_advisory_xact_lock(fencing.lock_key(name)) takes: the same lock
 * tag, the same mode, owned by the transaction.  So code that uses the raw
 * advisory functions on the same key excludes and is excluded by ours (L2).
 *
 * A request's registry slot (registry.c) is claimed before LockAcquire, so
 * that anyone who finds the lock busy can see who uses the key, and stays
 * "pending" (held.c) until the grant enters the lock in the transaction's
 * table.  The steps that run on every grant (drawing the token, entering
 * the lock, the lock-delay check) are inline in locks.h.
 *
 * Copyright (c) 2026, the fencing developers
 *
 * IDENTIFICATION
 *		src/locks/grant.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "storage/lock.h"
#include "utils/timestamp.h"

#include "locks/locks.h"

/* The transaction in which the autocommit warning was last given. */
static LocalTransactionId autocommit_warned_lxid = InvalidLocalTransactionId;

/*
 * The error of fencing_check_own_name: this transaction holds the key
 * under another canonical name.
 */
void
fencing_report_name_collision(const HeldLock *h, const LockRequest *req)
{
	ereport(ERROR,
			(errcode(ERRCODE_FENCING_KEY_COLLISION),
			 errmsg("lock name \"%s\" collides with \"%.*s\"",
					req->name, h->namelen, h->name),
			 errdetail("Both names share the lock key %lld, which this transaction already holds under the other name.",
					   (long long) req->key),
			 errhint("Rename one of the two locks.")));
}

/*
 * This transaction already holds the key through fencing: the entry, after
 * checking that it was taken under the same name and in a mode that covers
 * the one asked for (an exclusive lock covers a shared request); else NULL.
 * Core's lock is held by the entry's (sub)transaction or an ancestor of it
 * until that one ends, so there is nothing to acquire again.
 */
HeldLock *
fencing_held_again(const LockRequest *req)
{
	HeldLock   *h = fencing_held_find(req->key, false);

	if (h != NULL)
	{
		fencing_check_own_name(h, req);
		if (unlikely(h->lockmode == ShareLock && req->lockmode != ShareLock))
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("fencing lock \"%s\" is held in shared mode by this transaction",
							req->name),
					 errdetail("A shared lock is not made exclusive: two shared holders doing so would wait for each other."),
					 errhint("Take the lock exclusively from the start, or end this transaction first.")));
	}
	return h;
}

/*
 * Publish the name, then try the core lock once without waiting.  True
 * when granted (or when the transaction already held the key through the
 * raw advisory functions); the slot stays pending until fencing_grant().
 * When busy, checks for a collision (raising FN002) and returns false with
 * the slot still pending; likewise, without the check, when a lock-delay
 * is in force on the name.
 *
 * The check after a busy LockAcquire scans the registry; the holder may
 * commit and free its slot between the two.  The release counter read
 * before LockAcquire tells: if it moved, the scan proves nothing, so try
 * again (the lock may well be free now).
 */
bool
fencing_attempt(const LockRequest *req)
{
	uint32		releases;

	fencing_held_reserve();
	fencing_pending.slot = fencing_lock_registry_claim(req->key, req->name,
													   req->namelen,
													   req->lockmode == ShareLock ?
													   FENCING_LOCK_SHARED :
													   FENCING_LOCK_EXCLUSIVE, 0, 0);
	fencing_pending.subid = GetCurrentSubTransactionId();

	releases = fencing_lock_registry_releases(req->key);
	for (;;)
	{
		uint32		now;

		if (LockAcquire(&req->tag, req->lockmode, false, true) !=
			LOCKACQUIRE_NOT_AVAIL)
			return fencing_give_back_if_delayed(&req->tag, req->lockmode,
												req->key, 0) == 0 &&
				!fencing_give_back_if_leased(req);

		fencing_lock_registry_check_collision(req->key, req->name,
											  req->namelen);
		now = fencing_lock_registry_releases(req->key);
		if (now == releases)
			return false;
		releases = now;
		CHECK_FOR_INTERRUPTS();
	}
}

/*
 * fencing_attempt() found the lock busy or delayed: wait until it is
 * granted, or until deadline when has_timeout.  A busy lock is waited for
 * in core's queue; a lock under a lock-delay on the latch until the delay
 * ends (no polling; lock_timeout does not apply to that part, the timeout
 * argument and statement_timeout do); a grant that comes while a delay is
 * in force (the holder we waited for was lost) is given back and waited
 * for likewise.  Returns whether the lock was granted; either way the
 * pending slot stays the caller's.
 */
bool
fencing_wait_for_grant(const LockRequest *req, bool has_timeout,
					   TimestampTz deadline)
{
	fencing_lock_registry_wait(fencing_pending.slot);
	for (;;)
	{
		int64		remaining_ms = 0;
		TimestampTz until;

		if (has_timeout)
		{
			/* not TimestampDifferenceMilliseconds, which 17 and 18 stop at INT_MAX */
			remaining_ms = (deadline - GetCurrentTimestamp() + 999) / 1000;
			if (remaining_ms <= 0)
				return false;
		}
		until = fencing_lock_delay_refuses(req->key, 0);
		if (until != 0)
		{
			fencing_lock_delay_sleep(until, has_timeout ? deadline : 0);
			continue;
		}
		if (fencing_lease_refuses(req->key, req->name, req->namelen) != 0)
		{
			fencing_lease_sleep(req->key, req->name, req->namelen,
								has_timeout ? deadline : 0);
			continue;
		}
		if (!has_timeout)
			(void) LockAcquire(&req->tag, req->lockmode, false, false);
		else if (!fencing_lock_wait_with_timeout(&req->tag, req->lockmode,
												 (int) Min(remaining_ms, INT_MAX)))
		{
			/* lock_timeout counts at most INT_MAX ms: wait on for the rest */
			if (remaining_ms > INT_MAX)
				continue;
			return false;
		}
		if (fencing_give_back_if_delayed(&req->tag, req->lockmode,
										 req->key, 0) == 0 &&
			!fencing_give_back_if_leased(req))
			return true;
	}
}

/*
 * A lock taken by the client's own statement outside a transaction block
 * lives only as long as that statement: the token it returns guards
 * nothing.  Say so, once per statement, as core does for SET LOCAL.  Not
 * inside a function, procedure or DO block (which may use the lock in the
 * same statement), nor in an implicit transaction block (several
 * statements in one query message, or a pipeline's statements after its
 * first, which share one transaction): fencing_outside_transaction_block.
 */
void
fencing_warn_if_autocommit(const LockRequest *reqs, int nreqs,
						   const char *function)
{
	StringInfoData names;
	int			i;

	if (!fencing_outside_transaction_block())
		return;
	if (autocommit_warned_lxid == FENCING_MY_LXID)
		return;
	autocommit_warned_lxid = FENCING_MY_LXID;

	initStringInfo(&names);
	for (i = 0; i < nreqs; i++)
		appendStringInfo(&names, "%s\"%s\"", i > 0 ? ", " : "", reqs[i].name);

	ereport(WARNING,
			(errcode(ERRCODE_NO_ACTIVE_SQL_TRANSACTION),
			 nreqs == 1 ?
			 errmsg("fencing lock %s is released at the end of this statement",
					names.data) :
			 errmsg("fencing locks %s are released at the end of this statement",
					names.data),
			 errdetail("%s was called outside a transaction block, so the lock ends with the statement that took it, and its token guards nothing after that.",
					   function),
			 errhint("Start a transaction with BEGIN, take the lock, do the work, then COMMIT.")));
}

/*
 * try_lock and lease: the entry of the lock, already held or newly granted
 * (with the autocommit warning), or NULL when busy.
 */
HeldLock *
fencing_take_without_waiting(const LockRequest *req, const char *function)
{
	HeldLock   *h = fencing_held_again(req);

	if (h != NULL)
		return h;
	if (!fencing_attempt(req))
	{
		fencing_release_pending();
		fencing_stat_add(FENCING_STAT_LOCKS_BUSY, 1);
		return NULL;
	}
	h = fencing_grant(req, false);
	fencing_warn_if_autocommit(req, 1, function);
	return h;
}
