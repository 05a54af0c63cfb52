/*-------------------------------------------------------------------------
 *
 * groups.c
 *		Lock groups: fencing.try_lock_all() and fencing.lock_all().
 *
 * A group is a set of names taken together under one token.  Its locks are
 * taken one by one, in the order of their keys (then names), the order
 * every caller uses, so two groups that share names cannot each hold a
 * name the other waits for: the first name they share is taken by one of
 * them first, and the other waits for it before taking anything after it.
 * Each lock taken is entered in the transaction's table (held.c) at once,
 * with token 0 and its registry slot still "acquiring", so an error at any
 * point (a cancel, a collision, a full registry) releases what was taken
 * with the (sub)transaction, as for a single lock.  When a name is busy (try) or its
 * wait times out, the names already taken in this call are released on the
 * spot, newest first, so the caller holds nothing of the group.  Only when
 * every name is held is the one token drawn and published for all of them.
 *
 * Copyright (c) 2026, the fencing developers
 *
 * IDENTIFICATION
 *		src/locks/groups.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "storage/lock.h"
#include "utils/array.h"
#include "utils/timestamp.h"

#include "locks/locks.h"

PG_FUNCTION_INFO_V1(fencing_try_lock_all);
PG_FUNCTION_INFO_V1(fencing_lock_all);

/* Sort order of a group's requests: key, then canonical name. */
static int
request_cmp(const void *a, const void *b)
{
	const LockRequest *ra = (const LockRequest *) a;
	const LockRequest *rb = (const LockRequest *) b;
	int			cmp;

	if (ra->key != rb->key)
		return ra->key < rb->key ? -1 : 1;
	cmp = memcmp(ra->name, rb->name, Min(ra->namelen, rb->namelen));
	if (cmp != 0)
		return cmp;
	return ra->namelen - rb->namelen;
}

/*
 * Drop the repeats of a sorted group (names equal after normalisation are
 * one lock) and return how many requests are left.  Two different names
 * with the same key cannot both be held: that is a collision (L6),
 * reported before anything is taken.
 */
static int
drop_repeats(LockRequest *reqs, int nelems)
{
	int			n = 0;
	int			i;

	for (i = 0; i < nelems; i++)
	{
		if (n > 0 && reqs[n - 1].key == reqs[i].key)
		{
			if (request_cmp(&reqs[n - 1], &reqs[i]) == 0)
				continue;
			ereport(ERROR,
					(errcode(ERRCODE_FENCING_KEY_COLLISION),
					 errmsg("lock name \"%s\" collides with \"%s\"",
							reqs[i].name, reqs[n - 1].name),
					 errdetail("Both names share the lock key %lld, so one group cannot hold both.",
							   (long long) reqs[i].key),
					 errhint("Rename one of the two locks.")));
		}
		if (n != i)
			reqs[n] = reqs[i];
		n++;
	}
	return n;
}

/*
 * Canonicalise the names of a group, sort them into the order they are
 * taken in and drop repeats (drop_repeats).  Returns the palloc'd requests
 * and sets *count.
 */
static LockRequest *
prepare_group(FunctionCallInfo fcinfo, int *count)
{
	ArrayType  *names;
	Datum	   *elems;
	bool	   *elem_nulls;
	int			nelems;
	LockRequest *reqs;
	int			i;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("lock name list must not be null")));
	names = PG_GETARG_ARRAYTYPE_P(0);
	deconstruct_array(names, TEXTOID, -1, false, TYPALIGN_INT,
					  &elems, &elem_nulls, &nelems);
	if (nelems == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("lock name list must not be empty")));

	reqs = palloc(sizeof(LockRequest) * nelems);
	for (i = 0; i < nelems; i++)
	{
		if (elem_nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("lock name must not be null"),
					 errdetail("Element %d of the list is null.", i + 1)));
		fencing_prepare_request(&reqs[i], elems[i], ExclusiveLock);
	}
	qsort(reqs, nelems, sizeof(LockRequest), request_cmp);
	*count = drop_repeats(reqs, nelems);
	return reqs;
}

/*
 * Does this transaction already hold the whole group?  A group has one
 * token, which held_token() returns for each of its names, so it can be
 * taken again only as a whole: when every name is held under one token
 * (the same group, or a part of it, taken again: L5), that token is the
 * answer.  A group that overlaps locks held under other tokens, or only
 * some of its names, is an error, since no single token could stand for
 * it.
 */
static bool
group_held(const LockRequest *reqs, int n, int64 *token)
{
	int			held_n = 0;
	bool		one_token = true;
	int			i;

	for (i = 0; i < n; i++)
	{
		HeldLock   *h = fencing_held_again(&reqs[i]);

		if (h == NULL)
			continue;
		if (held_n == 0)
			*token = h->token;
		else if (h->token != *token)
			one_token = false;
		held_n++;
	}
	if (held_n == 0)
		return false;
	if (held_n == n && one_token)
		return true;

	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("lock group overlaps fencing locks this transaction already holds"),
			 errdetail("This transaction holds %d of the group's %d names, not all under one token; a group has a single token for all its names.",
					   held_n, n),
			 errhint("Take the names together in one call, before taking any of them alone.")));
	return false;				/* keep the compiler quiet */
}

/*
 * Release the last count locks taken, newest first: core's lock, held for
 * the entry's resource owner, then the entry and its slot.  Only for locks
 * taken in this call, which are the tail of the table.
 */
static void
release_newest(int count)
{
	ResourceOwner save = CurrentResourceOwner;

	while (count-- > 0)
	{
		HeldLock   *h = &fencing_held.locks[fencing_held.count - 1];
		LOCKTAG		tag;

		fencing_set_advisory_tag(&tag, h->key);
		CurrentResourceOwner = h->owner;
		LockRelease(&tag, h->lockmode, false);
		CurrentResourceOwner = save;
		fencing_held_pop();
	}
}

/*
 * Take every lock of a sorted group, waiting for busy ones when wait is
 * set (for at most timeout_ms in all, when has_timeout).  On success the
 * group's token is drawn and published and returned; 0 when a name was busy
 * or the time ran out, with nothing of the group held.
 */
static int64
take_group(LockRequest *reqs, int n, bool wait, bool has_timeout,
		   int64 timeout_ms)
{
	TimestampTz deadline = 0;
	bool		waited = false;
	int64		token;
	int			taken;

	if (wait && has_timeout)
		deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
											   timeout_ms);

	for (taken = 0; taken < n; taken++)
	{
		LockRequest *req = &reqs[taken];

		if (!fencing_attempt(req))
		{
			if (!wait || !fencing_wait_for_grant(req, has_timeout, deadline))
			{
				fencing_release_pending();
				release_newest(taken);
				return 0;
			}
			waited = true;
		}
		(void) fencing_hold_pending(req, 0);
	}

	token = fencing_issue_token();
	for (taken = fencing_held.count - n; taken < fencing_held.count; taken++)
	{
		fencing_held.locks[taken].token = token;
		fencing_lock_registry_grant(fencing_held.locks[taken].slot, token,
									waited);
	}
	return token;
}

/*
 * The common part of try_lock_all and lock_all: the group's token, already
 * held or newly granted (with the autocommit warning), or false when a
 * name was busy or the time ran out, counted in fencing.stats.
 */
static bool
lock_group(LockRequest *reqs, int n, bool wait, bool has_timeout,
		   int64 timeout_ms, const char *function, int64 *token)
{
	if (!group_held(reqs, n, token))
	{
		*token = take_group(reqs, n, wait, has_timeout, timeout_ms);
		if (*token == 0)
		{
			fencing_stat_add(wait ? FENCING_STAT_LOCKS_TIMED_OUT :
							 FENCING_STAT_LOCKS_BUSY, 1);
			return false;
		}
		fencing_warn_if_autocommit(reqs, n, function);
	}
	fencing_stat_add(FENCING_STAT_LOCKS_GRANTED, n);
	fencing_stat_add(FENCING_STAT_LOCK_GROUPS_GRANTED, 1);
	return true;
}

/*
 * SQL: fencing.try_lock_all(names).  Every name or none: the group's token
 * when all were free, NULL (holding none of them) when any was busy.
 */
Datum
fencing_try_lock_all(PG_FUNCTION_ARGS)
{
	LockRequest *reqs;
	int			n;
	int64		token;

	fencing_error_if_standby("fencing.try_lock_all()");
	reqs = prepare_group(fcinfo, &n);
	if (!lock_group(reqs, n, false, false, 0, "fencing.try_lock_all()", &token))
		PG_RETURN_NULL();
	PG_RETURN_INT64(token);
}

/*
 * SQL: fencing.lock_all(names, timeout).  As try_lock_all, but waits for
 * busy names in core's lock queue, in key order, holding the names before
 * them meanwhile; timeout bounds the whole call (NULL: no bound, zero: try
 * once), and when it passes the names taken so far are released and the
 * answer is NULL.  Errors end the wait as for fencing.lock().
 */
Datum
fencing_lock_all(PG_FUNCTION_ARGS)
{
	LockRequest *reqs;
	int			n;
	int64		token;
	bool		has_timeout;
	int64		timeout_ms;

	fencing_error_if_standby("fencing.lock_all()");
	has_timeout = fencing_timeout_arg(fcinfo, 1, &timeout_ms);
	reqs = prepare_group(fcinfo, &n);
	if (!lock_group(reqs, n, true, has_timeout, timeout_ms,
					"fencing.lock_all()", &token))
		PG_RETURN_NULL();
	PG_RETURN_INT64(token);
}
