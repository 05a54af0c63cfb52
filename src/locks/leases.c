/*-------------------------------------------------------------------------
 *
 * leases.c
 *		Leases that outlive a transaction: fencing.acquire_lease(),
 *		renew_lease(), release_lease(), break_lease(), the renewal of
 *		use_lease() (fence/use_lease.c), the view fencing.leases, and the
 *		check every grant path makes.
 *
 * A lease is held by the server, not by a transaction or a connection: it
 * is an entry of a shared table keyed by (database, lock key), with its
 * canonical name, its token and its expiry on the server's clock.  It stays
 * after COMMIT, ROLLBACK and disconnect until it is released, broken, or
 * its ttl passes without a renewal (then it has lapsed).  lease_store.c
 * makes the table survive restarts, crashes and failovers.
 *
 * Exclusion (LL1).  A lease holds no core lock (it outlives its backend),
 * so the grant paths exclude it as they exclude a lock-delay: after core
 * has granted a name's advisory lock, fencing.try_lock(), lock(), lease(),
 * the groups and the shared locks ask fencing_lease_refuses() and give the
 * lock back when a lease, or the lock-delay a lapsed or broken one left,
 * holds the name (grant.c, through locks.h).  acquire_lease() takes the
 * name's core lock exclusively in the caller's transaction, without
 * waiting, looks at the table and inserts the entry, then releases the
 * core lock at once.  Both
 * sides hold the core lock while they look, so a lease and a lock of a
 * transaction are never granted together, and a shared holder makes the
 * exclusive try fail.  A semaphore's permits are other locks and are not
 * excluded; nor is the raw pg_advisory_xact_lock(lock_key(name)), which is
 * core's and never asks.
 *
 * Cost.  A grant on a name no lease holds must stay one atomic read: the
 * table keeps a filter of counters by hash of (database, key), and only a
 * non-zero counter takes the table's lock, shared, to look the key up.
 *
 * Decisions (LL1').  Every decision about an entry is taken under the
 * table's lock held exclusively, on the entry as it is then, with the
 * clock read after the lock is held: an acquisition looks again at the
 * entry it replaces, so that a renewal that came in between wins, and a
 * renewal that comes after the expiry finds it passed.
 *
 * Expiry (LL2) is measured on the server's clock only.  The first to see
 * an entry whose expires_at has passed (the keeper, a renewal, an
 * acquisition, the start of service) notes its end, once (LEASE_FLAG_ENDED,
 * counted, written to WAL); an ended lease is never held again.  The entry
 * stays as the name's lock-delay (LL6) until expires_at +
 * fencing.lock_delay, then the keeper, or the next acquisition of the
 * name, drops it.  A break ends the lease with expires_at the moment of
 * the break, so it starts the delay too; a release drops the entry, so it
 * does not.  Before a caller is told that a lease ended (FN004, the token
 * of a break, a delay cleared), the end is made durable (LL2',
 * lease_store.c).
 *
 * Accounting (LL7').  The table is shared by every role of every
 * database; a role (the session user that acquires) may hold at most
 * fencing.max_leases_per_role entries, its lapsed leases under their
 * lock-delay included, so that one role cannot take the table from the
 * others.  Superusers are not counted against it.
 *
 * Waiting does not poll: a waiter sleeps on a condition variable of the
 * name's filter bucket, with a timeout at the lease's expiry (or the end
 * of its delay) or the caller's deadline, whichever is first; release and
 * break wake the variable.  A renewal moves the expiry: the waiter wakes
 * once at the old one, looks, and sleeps again.
 *
 * Every change is a WAL record (lease_store.c) written without a flush,
 * and no function here assigns a transaction id; use_lease() raises the
 * resource fence, which is a write, and renews only once everything else
 * it does has succeeded (LL9).
 *
 * Copyright (c) 2026, the fencing developers
 *
 * IDENTIFICATION
 *		src/locks/leases.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_type.h"
#include "commands/dbcommands.h"
#include "funcapi.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "nodes/value.h"
#include "parser/parse_func.h"
#include "storage/ipc.h"
#include "storage/shmem.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "locks/locks.h"

PG_FUNCTION_INFO_V1(fencing_acquire_lease);
PG_FUNCTION_INFO_V1(fencing_renew_lease);
PG_FUNCTION_INFO_V1(fencing_release_lease);
PG_FUNCTION_INFO_V1(fencing_break_lease);
PG_FUNCTION_INFO_V1(fencing_lease_rows);

/* GUC fencing.max_leases */
static int	max_leases = 1024;

/* GUC fencing.max_leases_per_role: -1 for a quarter of fencing.max_leases */
static int	max_leases_per_role = -1;

/*
 * A role that holds this many leases or more does not get the table's
 * reserve (lease_check_room).
 */
#define LEASE_RESERVE_FLOOR		2

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

/* A lease name, canonicalised once per call, and its core lock's tag. */
typedef struct LeaseRequest
{
	char		name[FENCING_NAME_MAX_BYTES + 1];
	int			namelen;
	int64		key;
	LOCKTAG		tag;
	Oid			caller;			/* the session user */
	bool		caller_is_superuser;
} LeaseRequest;

/* Why a lease is not held with a token, for FN004's detail. */
typedef enum LeaseLossReason
{
	LEASE_HELD,					/* it is held with the token */
	LEASE_NOT_HELD,				/* no entry: released, lapsed long ago, lost */
	LEASE_OTHER_TOKEN,			/* held, or delayed, under another token */
	LEASE_OTHER_ROLE,			/* held with the token by another session user */
	LEASE_EXPIRED,				/* lapsed: at is its expiry */
	LEASE_BROKEN,				/* broken: at is when */
	LEASE_OTHER_NAME			/* the key belongs to another name (L6) */
} LeaseLossReason;

typedef struct LeaseLoss
{
	LeaseLossReason reason;
	TimestampTz at;
	int			namelen;		/* LEASE_OTHER_NAME: the other name */
	char		name[FENCING_NAME_MAX_BYTES];
} LeaseLoss;

static void leases_shmem_request(void);
static void leases_shmem_startup(void);
static int	lease_clear_delays(bool every, int64 key);

/*
 * Define fencing.max_leases and register the shared memory and the keeper;
 * called from _PG_init while the postmaster preloads the library.
 */
void
fencing_leases_init(void)
{
	DefineCustomIntVariable("fencing.max_leases",
							"Number of leases that can be held at once, cluster-wide.",
							"Leases taken with fencing.acquire_lease(), and those still keeping their name under a lock-delay, each need an entry; a full table refuses new leases. On a standby it must be at least the primary's.",
							&max_leases,
							1024,
							16,
							100000,
							PGC_POSTMASTER,
							0,
							NULL, NULL, NULL);
	DefineCustomIntVariable("fencing.max_leases_per_role",
							"Number of leases one role can hold at once, cluster-wide.",
							"Each lease a role holds, and each of its lapsed or broken leases still keeping its name under a lock-delay, counts; superusers are not limited. -1 allows a quarter of fencing.max_leases.",
							&max_leases_per_role,
							-1,
							-1,
							100000,
							PGC_SIGHUP,
							0,
							NULL, NULL, NULL);

	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = leases_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = leases_shmem_startup;

	fencing_lease_store_init();
	fencing_lock_delay_also_clear(lease_clear_delays);
}

/* Ask for the table's shared memory and its LWLock. */
static void
leases_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(fencing_lease_table_size(max_leases));
	RequestNamedLWLockTranche(LEASE_TABLE_SHMEM_NAME, 1);
}

/*
 * Create the table at postmaster start and after a crash restart; in the
 * postmaster, lease_store.c then fills it from the state file.
 */
static void
leases_shmem_startup(void)
{
	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	(void) fencing_lease_table_attach(max_leases);
	LWLockRelease(AddinShmemInitLock);

	if (!IsUnderPostmaster)
		fencing_lease_store_startup();
}

/* Is the lease's name this canonical name? */
static inline bool
lease_named(const LeaseData *d, const char *name, int namelen)
{
	return d->namelen == namelen && memcmp(d->name, name, namelen) == 0;
}

/* FN002, as the locks raise it: the key is leased under another name. */
static void
lease_collision(const char *name, int namelen, const char *other,
				int otherlen, int64 key)
{
	ereport(ERROR,
			(errcode(ERRCODE_FENCING_KEY_COLLISION),
			 errmsg("lock name \"%.*s\" collides with \"%.*s\"",
					namelen, name, otherlen, other),
			 errdetail("Both names share the lock key %lld, which a lease holds under the other name.",
					   (long long) key),
			 errhint("Rename one of the two locks.")));
}

/*
 * The slow path of fencing_lease_refuses(): the filter has entries at the
 * key's places.  When the lease on the name, or the lock-delay it left,
 * ends; 0 when there is none.  A lease under another name with the same
 * key is FN002.  A lease found past its expiry with its end not yet noted
 * has it noted first, under the lock held exclusively, before a grant
 * goes ahead on its name: else a clock stepped back could make it
 * renewable beside that grant.
 */
TimestampTz
fencing_lease_until(int64 key, const char *name, int namelen)
{
	TimestampTz until = 0;
	TimestampTz now;
	LWLockMode	mode = LW_SHARED;
	bool		noted = false;
	int			otherlen = -1;
	char		other[FENCING_NAME_MAX_BYTES];
	int			i;

	fencing_lease_ensure_serving();
	for (;;)
	{
		LWLockAcquire(fencing_lease_table->lock, mode);
		now = GetCurrentTimestamp();
		i = fencing_lease_find(MyDatabaseId, key);
		if (i < 0 || fencing_lease_ended(&fencing_lease_entries[i].data) ||
			now < fencing_lease_entries[i].data.expires_at)
			break;
		if (mode == LW_EXCLUSIVE)
		{
			fencing_lease_note_end(i, now);
			noted = true;
			break;
		}
		LWLockRelease(fencing_lease_table->lock);
		mode = LW_EXCLUSIVE;
	}
	if (i >= 0 &&
		fencing_lease_state(&fencing_lease_entries[i], now, &until) != LEASE_GONE &&
		!lease_named(&fencing_lease_entries[i].data, name, namelen))
	{
		otherlen = fencing_lease_entries[i].data.namelen;
		memcpy(other, fencing_lease_entries[i].data.name, otherlen);
	}
	LWLockRelease(fencing_lease_table->lock);
	if (noted)
		fencing_lease_changed();

	if (otherlen >= 0)
		lease_collision(name, namelen, other, otherlen, key);
	return until;
}

/*
 * Sleep until the lease on the name (or its delay) ends, it is released or
 * broken, or deadline (0: none) passes, whichever comes first.  Prepared
 * before it looks again, so a release after the look wakes it.  The caller
 * tries again.
 */
void
fencing_lease_sleep(int64 key, const char *name, int namelen,
					TimestampTz deadline)
{
	ConditionVariable *cv = fencing_lease_cv(MyDatabaseId, key);
	TimestampTz until;

	ConditionVariablePrepareToSleep(cv);
	until = fencing_lease_refuses(key, name, namelen);
	if (until != 0)
	{
		TimestampTz end = (deadline != 0 && deadline < until) ? deadline : until;
		long		ms = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), end);

		if (ms > 0)
			(void) ConditionVariableTimedSleep(cv, ms, PG_WAIT_EXTENSION);
	}
	ConditionVariableCancelSleep();
	CHECK_FOR_INTERRUPTS();
}

/* Is entry e a lease of this database that keeps its name under its delay? */
static bool
lease_delayed_here(int e, TimestampTz now)
{
	TimestampTz until;

	return fencing_lease_entries[e].data.dboid == MyDatabaseId &&
		fencing_lease_state(&fencing_lease_entries[e], now, &until) == LEASE_DELAYED;
}

/*
 * For fencing.clear_lock_delays() (delay.c), an operator's call: end
 * the lock-delays that lapsed and broken leases left on the name with this
 * key in this database, or with every on each name of this database, and
 * wake their waiters.  Each end is a drop in WAL and in the file, durable
 * before the call returns, so that no restart brings a cleared delay back.
 * Returns how many ended.
 */
static int
lease_clear_delays(bool every, int64 key)
{
	LeaseTable *table = fencing_lease_table;
	int		   *delayed;
	int			ndelayed = 0;
	LeaseDurable durable;
	TimestampTz now;
	int			heap;
	int			e;
	int			pos;
	int			i;

	fencing_lease_ensure_serving();
	LWLockAcquire(table->lock, LW_EXCLUSIVE);
	now = GetCurrentTimestamp();
	delayed = palloc(sizeof(int) * Max(table->count, 1));
	if (!every)
	{
		e = fencing_lease_find(MyDatabaseId, key);
		if (e >= 0 && lease_delayed_here(e, now))
			delayed[ndelayed++] = e;
	}
	else
	{
		/* a lapse nobody noted yet is still in the heap of live leases */
		for (heap = LEASE_HEAP_LIVE; heap <= LEASE_HEAP_ENDED; heap++)
			for (pos = 0; (e = fencing_lease_heap_entry(heap, pos)) >= 0; pos++)
				if (lease_delayed_here(e, now))
					delayed[ndelayed++] = e;
	}
	/* each drop moves entries in the heap: drop after the whole look */
	for (i = 0; i < ndelayed; i++)
	{
		LeaseData	data;

		fencing_lease_note_end(delayed[i], now);
		data = fencing_lease_entries[delayed[i]].data;
		fencing_lease_remove(delayed[i],
							 fencing_lease_log(XLOG_FENCING_LEASE_DROP, &data, now));
		ConditionVariableBroadcast(fencing_lease_cv(MyDatabaseId, data.key));
	}
	durable.seq = table->seq;
	durable.lsn = table->last_lsn;
	LWLockRelease(table->lock);

	if (ndelayed > 0)
	{
		fencing_lease_changed();
		fencing_lease_make_durable(&durable);
	}
	pfree(delayed);
	return ndelayed;
}

/*
 * Arguments.
 */

/* The name argument (argument 0), canonical, with its key and lock tag. */
static void
lease_request(LeaseRequest *req, FunctionCallInfo fcinfo)
{
	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("lease name must not be null")));
	req->namelen = fencing_canonical_name_of(PG_GETARG_DATUM(0), req->name,
											 "lease");
	req->key = fencing_key_of_canonical(req->name, req->namelen);
	SET_LOCKTAG_ADVISORY(req->tag, MyDatabaseId,
						 (uint32) ((uint64) req->key >> 32),
						 (uint32) req->key, 1);
	req->caller = GetSessionUserId();
	req->caller_is_superuser = superuser_arg(req->caller);
}

/* The token argument, which must be given. */
static int64
lease_token_arg(FunctionCallInfo fcinfo, int argno)
{
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("lease token must not be null"),
				 errhint("Pass the token fencing.acquire_lease() returned.")));
	return PG_GETARG_INT64(argno);
}

/*
 * The holder argument, as UTF-8 (like the names, so that every database
 * reads the same bytes) into buf; its length, or -1 when NULL.
 */
static int
lease_holder_arg(FunctionCallInfo fcinfo, int argno, char *buf)
{
	text	   *holder;
	char	   *utf8;
	int			len;

	if (PG_ARGISNULL(argno))
		return -1;
	holder = PG_GETARG_TEXT_PP(argno);
	len = VARSIZE_ANY_EXHDR(holder);
	utf8 = pg_server_to_any(VARDATA_ANY(holder), len, PG_UTF8);
	if (utf8 != VARDATA_ANY(holder))
		len = strlen(utf8);
	if (len > FENCING_LEASE_HOLDER_MAX_BYTES)
		ereport(ERROR,
				(errcode(ERRCODE_STRING_DATA_RIGHT_TRUNCATION),
				 errmsg("lease holder is too long"),
				 errdetail("The holder is %d bytes of UTF-8; at most %d are kept.",
						   len, FENCING_LEASE_HOLDER_MAX_BYTES),
				 errhint("Describe the holder briefly, for example by its host, process id and job.")));
	memcpy(buf, utf8, len);
	return len;
}

/*
 * A lease must not coexist with the caller's own transaction lock on the
 * name (taken through fencing or the raw advisory functions, in either
 * mode): core would grant our exclusive try to the transaction that already
 * holds the lock, and the lease would then share the name with it.
 */
static void
refuse_own_lock(const LeaseRequest *req)
{
	if (!fencing_lock_held_by_me(&req->tag, ExclusiveLock) &&
		!fencing_lock_held_by_me(&req->tag, ShareLock))
		return;
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_IN_USE),
			 errmsg("fencing lock \"%s\" is held by this transaction", req->name),
			 errdetail("A lease excludes every lock of its name, also the caller's own."),
			 errhint("Take the lease in a transaction that does not hold the lock, or use the lock alone.")));
}

/*
 * Take the table's lock in mode, then read the clock, then find the
 * entry of the caller's name (-1: none): every decision about an entry is
 * taken on the state seen under the lock, at a moment read once the lock
 * is held, so that nothing decided elsewhere in between is missed.
 */
static int
lease_lock_and_find(const LeaseRequest *req, LWLockMode mode, TimestampTz *now)
{
	LWLockAcquire(fencing_lease_table->lock, mode);
	*now = GetCurrentTimestamp();
	return fencing_lease_find(MyDatabaseId, req->key);
}

/*
 * FN004: the caller's lease is gone.  Its holder must stop.
 */
static void
lease_lost(const LeaseRequest *req, int64 token, const LeaseLoss *loss)
{
	char	   *detail;

	switch (loss->reason)
	{
		case LEASE_EXPIRED:
			detail = psprintf("The lease expired at %s without a renewal.",
							  timestamptz_to_str(loss->at));
			break;
		case LEASE_BROKEN:
			detail = psprintf("The lease was broken at %s.",
							  timestamptz_to_str(loss->at));
			break;
		case LEASE_OTHER_TOKEN:
			detail = pstrdup("The name is leased under another token: this lease ended and the name was taken again.");
			break;
		case LEASE_OTHER_ROLE:
			detail = pstrdup("The lease was acquired by another session user: only that user, or a superuser, renews, uses or releases it.");
			break;
		default:
			detail = pstrdup("Nobody holds a lease on the name: it was released, broken or not renewed in time, or lost in a crash or a failover.");
			break;
	}
	ereport(ERROR,
			(errcode(ERRCODE_FENCING_LEASE_LOST),
			 errmsg("fencing lease \"%s\" is not held with token " INT64_FORMAT,
					req->name, token),
			 errdetail("%s", detail),
			 errhint("Stop the work; acquire the lease again to start over.")));
}

/*
 * Is entry i (-1: none) the lease on the name, held with token at now by
 * the caller?  Tokens count up and are no secret, so the token alone does
 * not make the caller the holder: the lease must have been acquired by the
 * caller's session user, or the caller be a superuser (an operator who
 * means to take a lease away breaks it).  The role is compared first, so
 * that another role learns nothing of the token.  When not held, *loss
 * says why.
 */
static bool
lease_held(int i, const LeaseRequest *req, int64 token, TimestampTz now,
		   LeaseLoss *loss)
{
	const Lease *lease;
	TimestampTz until;
	bool		gone;

	loss->reason = LEASE_NOT_HELD;
	if (i < 0)
		return false;
	lease = &fencing_lease_entries[i];
	gone = fencing_lease_state(lease, now, &until) == LEASE_GONE;
	if (!lease_named(&lease->data, req->name, req->namelen))
	{
		if (gone)
			return false;
		loss->reason = LEASE_OTHER_NAME;
		loss->namelen = lease->data.namelen;
		memcpy(loss->name, lease->data.name, loss->namelen);
		return false;
	}
	if (lease->data.roleid != req->caller && !req->caller_is_superuser)
	{
		if (!gone)
			loss->reason = LEASE_OTHER_ROLE;
		return false;
	}
	if (lease->data.token != token)
	{
		if (!gone)
			loss->reason = LEASE_OTHER_TOKEN;
		return false;
	}
	if (lease->data.flags & LEASE_FLAG_BROKEN)
		loss->reason = LEASE_BROKEN;
	else if (fencing_lease_ended(&lease->data) || now >= lease->data.expires_at)
		loss->reason = LEASE_EXPIRED;
	else
	{
		loss->reason = LEASE_HELD;
		return true;
	}
	loss->at = lease->data.expires_at;
	return false;
}

/*
 * The caller holds the table's lock exclusively and found the lease not
 * held with token (*loss says why): note the end of a lease found past
 * its expiry, let go of the lock, make what it saw durable, and raise the
 * error.  Another role's lease is nothing the caller may be told about,
 * so that answer waits for nothing.
 */
static void
lease_refuse(int i, const LeaseRequest *req, int64 token, LeaseLoss *loss)
{
	LeaseDurable durable;

	if (loss->reason == LEASE_EXPIRED)
		fencing_lease_note_end(i, GetCurrentTimestamp());
	fencing_lease_durable_of(MyDatabaseId, req->key, &durable);
	LWLockRelease(fencing_lease_table->lock);
	fencing_lease_changed();

	if (loss->reason == LEASE_OTHER_NAME)
		lease_collision(req->name, req->namelen, loss->name, loss->namelen,
						req->key);
	if (loss->reason != LEASE_OTHER_ROLE)
		fencing_lease_make_durable(&durable);
	lease_lost(req, token, loss);
}

/*
 * acquire_lease().
 */

/*
 * Take the name's core lock exclusively, waiting in core's queue (as
 * fencing.lock() does) when wait is set: until deadline, or with no bound
 * when deadline is 0.  A busy name used by another name with the same key
 * is FN002.  Whether it was granted; a wait longer than lock_timeout can
 * count returns false before the deadline, and the caller waits on.
 */
static bool
lease_core_lock(const LeaseRequest *req, bool wait, TimestampTz deadline)
{
	long		remaining;

	if (LockAcquire(&req->tag, ExclusiveLock, false, true) != LOCKACQUIRE_NOT_AVAIL)
		return true;
	fencing_lock_registry_check_collision(req->key, req->name, req->namelen);
	if (!wait)
		return false;
	if (deadline == 0)
	{
		(void) LockAcquire(&req->tag, ExclusiveLock, false, false);
		return true;
	}
	remaining = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), deadline);
	if (remaining <= 0)
		return false;
	return fencing_lock_wait_with_timeout(&req->tag, ExclusiveLock,
										  (int) Min(remaining, INT_MAX));
}

/* Whether a caller waiting until deadline (0: no bound) must give up. */
static inline bool
lease_wait_over(bool wait, TimestampTz deadline)
{
	return !wait || (deadline != 0 && GetCurrentTimestamp() >= deadline);
}

/*
 * Make room until want entries are free, if entries are gone: drop those
 * whose delay is over, the soonest first, and note the lapse of a lease
 * whose delay would be over by now (then drop it), one at a time, so
 * that nothing is done that frees no entry.  Whether there is room now.
 * Exclusive lock held.
 */
static bool
lease_make_room(TimestampTz now, int want)
{
	int			delay_ms = fencing_lock_delay_ms();

	while (fencing_lease_table->nfree < want)
	{
		int			e = fencing_lease_heap_top(LEASE_HEAP_ENDED);

		if (e >= 0 &&
			TimestampTzPlusMilliseconds(fencing_lease_entries[e].data.expires_at,
										delay_ms) <= now)
		{
			LeaseData	data = fencing_lease_entries[e].data;

			fencing_lease_remove(e, fencing_lease_log(XLOG_FENCING_LEASE_DROP,
													  &data, now));
			continue;
		}
		e = fencing_lease_heap_top(LEASE_HEAP_LIVE);
		if (e < 0 ||
			TimestampTzPlusMilliseconds(fencing_lease_entries[e].data.expires_at,
										delay_ms) > now)
			break;
		fencing_lease_note_end(e, now);
	}
	return fencing_lease_table->nfree >= want;
}

/* The most entries a role may have: fencing.max_leases_per_role in force. */
static int
lease_role_limit(void)
{
	if (max_leases_per_role < 0)
		return Max(fencing_lease_table->capacity / 4, 1);
	return max_leases_per_role;
}

/*
 * Refuse a new lease that finds no room (those of other roles are not
 * touched): the caller's role at its share, the table full, or the table's
 * reserve reached by a role that holds LEASE_RESERVE_FLOOR leases or more.
 * The reserve, the last eighth of the table, is for roles that hold fewer:
 * roles that each stay within their share cannot together take the table
 * from a role that holds none.  i is the entry the lease would replace
 * (-1: a new one).  Exclusive lock held; it is let go of before an error.
 */
static void
lease_check_room(const LeaseRequest *req, int i, TimestampTz now)
{
	int			held = 0;
	int			limit;
	int			reserve = Max(fencing_lease_table->capacity / 8, 1);
	bool		in_reserve;

	if (!req->caller_is_superuser)
	{
		held = fencing_lease_role_count(req->caller);
		if (i >= 0 && fencing_lease_entries[i].data.roleid == req->caller)
			held--;
		limit = lease_role_limit();
		if (held >= limit)
		{
			LWLockRelease(fencing_lease_table->lock);
			ereport(ERROR,
					(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
					 errmsg("role \"%s\" holds too many fencing leases",
							GetUserNameFromId(req->caller, false)),
					 errdetail("It holds %d entries of the lease table, and fencing.max_leases_per_role allows %d; a lapsed or broken lease takes its entry until its lock-delay ends. No lease was taken.",
							   held, limit),
					 errhint("Release leases that are no longer needed, or raise fencing.max_leases_per_role.")));
		}
	}
	if (i >= 0)
		return;
	in_reserve = !req->caller_is_superuser && held >= LEASE_RESERVE_FLOOR;
	if (lease_make_room(now, in_reserve ? reserve + 1 : 1))
		return;
	LWLockRelease(fencing_lease_table->lock);
	if (in_reserve && fencing_lease_table->nfree > 0)
		ereport(ERROR,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("role \"%s\" holds too many fencing leases",
						GetUserNameFromId(req->caller, false)),
				 errdetail("Only the last %d entries of the lease table are free, and they are kept for roles that hold fewer than %d leases; it holds %d. No lease was taken.",
						   reserve, LEASE_RESERVE_FLOOR, held),
				 errhint("Release leases that are no longer needed, or raise fencing.max_leases (it takes effect at server restart).")));
	ereport(ERROR,
			(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
			 errmsg("too many fencing leases held at once"),
			 errdetail("All %d entries of fencing.max_leases are held or keep a name under its lock-delay; no lease was taken.",
					   fencing_lease_table->capacity),
			 errhint("Release leases that are no longer needed, or raise fencing.max_leases (it takes effect at server restart).")));
}

/*
 * Store a lease in entry i (-1: a new entry), write its record, let go of
 * the table's lock (held exclusively by the caller) and count the change.
 */
static void
lease_store(int i, const LeaseData *data, TimestampTz now, FencingStat stat)
{
	(void) fencing_lease_put(i, data,
							 fencing_lease_log(XLOG_FENCING_LEASE_PUT, data, now));
	LWLockRelease(fencing_lease_table->lock);
	fencing_lease_changed();
	fencing_stat_add(stat, 1);
}

/* A new lease's data, acquired at now with the given token. */
static void
lease_new_data(LeaseData *data, const LeaseRequest *req, int64 token,
			   int ttl_ms, TimestampTz now, const char *holder, int holderlen)
{
	memset(data, 0, sizeof(*data));
	data->token = token;
	data->dboid = MyDatabaseId;
	data->roleid = req->caller;
	data->key = req->key;
	data->ttl_ms = ttl_ms;
	data->span_ms = ttl_ms;
	data->acquired_at = now;
	data->renewed_at = now;
	data->expires_at = TimestampTzPlusMilliseconds(now, ttl_ms);
	data->namelen = (uint8) req->namelen;
	memcpy(data->name, req->name, req->namelen);
	data->holderlen = (int16) holderlen;
	if (holderlen > 0)
		memcpy(data->holder, holder, holderlen);
}

/*
 * Enter the new lease, under the name's core lock, which the caller holds
 * and which showed no lease or delay on the name.  The table's entry of
 * the name is looked at again under the table's lock: a renewal or a
 * break may have come in between.  Returns the token, or 0 when the name
 * is leased after all.
 */
static int64
lease_insert(const LeaseRequest *req, int ttl_ms, const char *holder,
			 int holderlen)
{
	LeaseData	data;
	TimestampTz now;
	TimestampTz until;
	int64		token = fencing_issue_token();
	int			i;

	i = lease_lock_and_find(req, LW_EXCLUSIVE, &now);
	if (i >= 0)
	{
		if (fencing_lease_state(&fencing_lease_entries[i], now, &until) != LEASE_GONE)
		{
			LWLockRelease(fencing_lease_table->lock);
			return 0;
		}
		/* the name's last lease is over: count its lapse before it goes */
		fencing_lease_note_end(i, now);
	}
	lease_check_room(req, i, now);
	lease_new_data(&data, req, token, ttl_ms, now, holder, holderlen);
	lease_store(i, &data, now, FENCING_STAT_LEASES_ACQUIRED);
	return token;
}

/*
 * Take the lease, trying again while the name is busy and wait is set,
 * until deadline (0: no bound).  The token, or 0 when the name stayed
 * busy.
 */
static int64
lease_take(const LeaseRequest *req, int ttl_ms, const char *holder,
		   int holderlen, bool wait, TimestampTz deadline)
{
	for (;;)
	{
		TimestampTz delayed;
		TimestampTz leased = 0;
		int64		token = 0;

		CHECK_FOR_INTERRUPTS();
		if (!lease_core_lock(req, wait, deadline))
		{
			if (lease_wait_over(wait, deadline))
				return 0;
			continue;
		}

		/* the core lock is ours: no lock or lease of the name can start now */
		delayed = fencing_lock_delay_refuses(req->key, 0);
		if (delayed == 0)
			leased = fencing_lease_refuses(req->key, req->name, req->namelen);
		else
			fencing_stat_add(FENCING_STAT_DELAYED_REFUSALS, 1);
		if (delayed == 0 && leased == 0)
			token = lease_insert(req, ttl_ms, holder, holderlen);
		LockRelease(&req->tag, ExclusiveLock, false);
		if (token != 0)
			return token;

		if (lease_wait_over(wait, deadline))
			return 0;
		if (delayed != 0)
			fencing_lock_delay_sleep(delayed, deadline);
		else
			fencing_lease_sleep(req->key, req->name, req->namelen, deadline);
	}
}

/*
 * SQL: fencing.acquire_lease(name, ttl, timeout, holder).  A fresh token
 * when the name was free (its lease held until ttl passes without a
 * renewal), or NULL when a lease, a transaction's lock or a lock-delay
 * holds it and the timeout (NULL: do not wait; zero: try once) passes.
 */
Datum
fencing_acquire_lease(PG_FUNCTION_ARGS)
{
	LeaseRequest req;
	char		holder[FENCING_LEASE_HOLDER_MAX_BYTES];
	int			holderlen;
	int			ttl_ms;
	bool		wait = PG_NARGS() > 2 && !PG_ARGISNULL(2);
	int64		timeout_ms;
	TimestampTz deadline = 0;
	int64		token;

	fencing_error_if_standby("fencing.acquire_lease()");
	lease_request(&req, fcinfo);
	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("lease ttl must not be null"),
				 errhint("A lease ends when its ttl passes without a renewal; pass how long that may be.")));
	ttl_ms = fencing_ttl_arg_ms(PG_GETARG_INTERVAL_P(1));
	/* NULL: no wait; 'infinity' and the like: a wait with no bound */
	if (wait && fencing_timeout_arg(fcinfo, 2, &timeout_ms))
		deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), timeout_ms);
	holderlen = PG_NARGS() > 3 ? lease_holder_arg(fcinfo, 3, holder) : -1;
	refuse_own_lock(&req);
	fencing_lease_ensure_serving();

	token = lease_take(&req, ttl_ms, holder, holderlen, wait, deadline);
	if (token == 0)
		PG_RETURN_NULL();
	PG_RETURN_INT64(token);
}

/*
 * Renewal, for renew_lease() and use_lease(): the lease on the name held
 * with token now lasts ttl_ms (0: the ttl it was taken with) from now.
 * FN004 when it is not held with token.  Returns the new expiry, and in
 * *span_ms how long from now that is.
 */
static TimestampTz
lease_renew(const LeaseRequest *req, int64 token, int ttl_ms, int *span_ms)
{
	LeaseLoss	loss;
	LeaseData	data;
	TimestampTz now;
	int			i;

	fencing_lease_ensure_serving();
	i = lease_lock_and_find(req, LW_EXCLUSIVE, &now);
	if (!lease_held(i, req, token, now, &loss))
		lease_refuse(i, req, token, &loss);
	data = fencing_lease_entries[i].data;
	data.span_ms = ttl_ms > 0 ? ttl_ms : data.ttl_ms;
	data.renewed_at = now;
	data.expires_at = TimestampTzPlusMilliseconds(now, data.span_ms);
	lease_store(i, &data, now, FENCING_STAT_LEASES_RENEWED);
	*span_ms = data.span_ms;
	return data.expires_at;
}

/*
 * SQL: fencing.renew_lease(name, token, ttl).  The lease held with token
 * lasts ttl (NULL or left out: the ttl it was taken with) from now;
 * returns the new expiry.  FN004 when it is not held with token, also
 * when it lapsed and nobody took the name since (no resurrection).
 */
Datum
fencing_renew_lease(PG_FUNCTION_ARGS)
{
	LeaseRequest req;
	int64		token;
	int			ttl_ms = 0;

	fencing_error_if_standby("fencing.renew_lease()");
	lease_request(&req, fcinfo);
	token = lease_token_arg(fcinfo, 1);
	if (PG_NARGS() > 2 && !PG_ARGISNULL(2))
		ttl_ms = fencing_ttl_arg_ms(PG_GETARG_INTERVAL_P(2));
	PG_RETURN_TIMESTAMPTZ(lease_renew(&req, token, ttl_ms, &ttl_ms));
}

/*
 * For fencing.use_lease() (fence/use_lease.c), before anything else it
 * does: FN004 unless the lease on the name argument (argument 0) is held
 * with the token argument (argument 1, returned in *token).  Changes
 * nothing while it is held (the renewal comes last,
 * fencing_lease_renew_for_use), and returns the ttl the renewal will
 * give, the longest the holder may stay idle.
 */
int
fencing_lease_check_for_use(FunctionCallInfo fcinfo, int64 *token)
{
	LeaseRequest req;
	LeaseLoss	loss;
	TimestampTz now;
	int			ttl_ms;
	int			i;

	lease_request(&req, fcinfo);
	*token = lease_token_arg(fcinfo, 1);
	fencing_lease_ensure_serving();

	i = lease_lock_and_find(&req, LW_SHARED, &now);
	if (lease_held(i, &req, *token, now, &loss))
	{
		ttl_ms = fencing_lease_entries[i].data.ttl_ms;
		LWLockRelease(fencing_lease_table->lock);
		return ttl_ms;
	}
	LWLockRelease(fencing_lease_table->lock);

	/* not held: decide and answer under the lock that writes */
	i = lease_lock_and_find(&req, LW_EXCLUSIVE, &now);
	if (!lease_held(i, &req, *token, now, &loss))
		lease_refuse(i, &req, *token, &loss);
	ttl_ms = fencing_lease_entries[i].data.ttl_ms;
	LWLockRelease(fencing_lease_table->lock);
	return ttl_ms;
}

/*
 * For fencing.use_lease(), once the fence is raised and the token set:
 * the lease lasts its own ttl from now.  FN004 when it ended meanwhile;
 * the caller's transaction then aborts with all the rest.
 */
void
fencing_lease_renew_for_use(FunctionCallInfo fcinfo)
{
	LeaseRequest req;
	int			span_ms;

	lease_request(&req, fcinfo);
	(void) lease_renew(&req, lease_token_arg(fcinfo, 1), 0, &span_ms);
}

/*
 * SQL: fencing.release_lease(name, token).  Frees the lease held with
 * token and returns true; false, freeing nothing, when it is not held with
 * token (another holder's, an old one, a lapsed one: a lapsed lease's
 * lock-delay stays).  A release starts no delay.
 */
Datum
fencing_release_lease(PG_FUNCTION_ARGS)
{
	LeaseRequest req;
	LeaseLoss	loss;
	LeaseData	data;
	TimestampTz now;
	int64		token;
	int			i;
	bool		released;

	fencing_error_if_standby("fencing.release_lease()");
	lease_request(&req, fcinfo);
	token = lease_token_arg(fcinfo, 1);
	fencing_lease_ensure_serving();

	i = lease_lock_and_find(&req, LW_EXCLUSIVE, &now);
	released = lease_held(i, &req, token, now, &loss);
	if (released)
	{
		data = fencing_lease_entries[i].data;
		fencing_lease_remove(i, fencing_lease_log(XLOG_FENCING_LEASE_DROP, &data, now));
	}
	else if (loss.reason == LEASE_EXPIRED)
		fencing_lease_note_end(i, now);
	LWLockRelease(fencing_lease_table->lock);
	fencing_lease_changed();

	if (loss.reason == LEASE_OTHER_NAME)
		lease_collision(req.name, req.namelen, loss.name, loss.namelen, req.key);
	if (released)
	{
		ConditionVariableBroadcast(fencing_lease_cv(MyDatabaseId, req.key));
		fencing_stat_add(FENCING_STAT_LEASES_RELEASED, 1);
	}
	PG_RETURN_BOOL(released);
}

/*
 * SQL: fencing.break_lease(name), revoked from PUBLIC.  An operator frees
 * the lease on name whatever its token, and gets that token (NULL: none
 * was held).  The lease ends now: the name stays under its lock-delay
 * from now, the end is durable before the token is returned, and the
 * server log says who broke which lease.
 */
Datum
fencing_break_lease(PG_FUNCTION_ARGS)
{
	LeaseRequest req;
	LeaseData	data;
	LeaseDurable durable;
	TimestampTz now;
	TimestampTz until;
	int			i;

	fencing_error_if_standby("fencing.break_lease()");
	lease_request(&req, fcinfo);
	fencing_lease_ensure_serving();

	i = lease_lock_and_find(&req, LW_EXCLUSIVE, &now);
	if (i < 0 || !lease_named(&fencing_lease_entries[i].data, req.name, req.namelen) ||
		fencing_lease_state(&fencing_lease_entries[i], now, &until) != LEASE_LIVE)
	{
		LWLockRelease(fencing_lease_table->lock);
		PG_RETURN_NULL();
	}
	data = fencing_lease_entries[i].data;
	data.flags |= LEASE_FLAG_BROKEN | LEASE_FLAG_ENDED;
	data.expires_at = now;
	(void) fencing_lease_put(i, &data,
							 fencing_lease_log(XLOG_FENCING_LEASE_PUT, &data, now));
	fencing_lease_durable_of(MyDatabaseId, req.key, &durable);
	LWLockRelease(fencing_lease_table->lock);
	fencing_lease_changed();
	fencing_stat_add(FENCING_STAT_LEASES_BROKEN, 1);
	if (fencing_lock_delay_ms() > 0)
		fencing_stat_add(FENCING_STAT_DELAYS_STARTED, 1);

	fencing_lease_make_durable(&durable);
	ConditionVariableBroadcast(fencing_lease_cv(MyDatabaseId, req.key));
	ereport(LOG,
			(errmsg("fencing lease \"%s\" with token " INT64_FORMAT " was broken",
					req.name, data.token),
			 errdetail("Role \"%s\" broke it from process %d; its holder%s%.*s%s gets FN004 at its next renewal.",
					   GetUserNameFromId(GetUserId(), false), MyProcPid,
					   data.holderlen > 0 ? " (" : "",
					   Max(data.holderlen, 0), data.holder,
					   data.holderlen > 0 ? ")" : "")));
	PG_RETURN_INT64(data.token);
}

/*
 * The views.
 */

/* Entries a view copies per hold of the table's lock. */
#define LEASE_VIEW_CHUNK	4096

/* Copy what the views show of entry e at now into *row; false when gone. */
static bool
lease_row_fill(FencingLeaseRow *row, int e, TimestampTz now)
{
	const Lease *lease = &fencing_lease_entries[e];
	const LeaseData *d = &lease->data;
	TimestampTz until;
	LeaseState	state;

	if (!lease->in_use ||
		(state = fencing_lease_state(lease, now, &until)) == LEASE_GONE)
		return false;
	row->dboid = d->dboid;
	row->roleid = d->roleid;
	row->key = d->key;
	row->token = d->token;
	row->acquired_at = d->acquired_at;
	row->renewed_at = d->renewed_at;
	row->expires_at = d->expires_at;
	row->delayed_until = state == LEASE_DELAYED ? until : 0;
	row->namelen = d->namelen;
	memcpy(row->name, d->name, d->namelen);
	row->holderlen = d->holderlen;
	if (d->holderlen > 0)
		memcpy(row->holder, d->holder, d->holderlen);
	return true;
}

/*
 * The leases held and those keeping their name under a lock-delay, for
 * fencing.leases and fencing.locks; *count is set.  As for the locks
 * (lock_registry.c), a lease's name is for members of pg_read_all_stats
 * and for roles with the privileges of the session user that acquired it;
 * here its token and holder too, since the token is what renews and
 * releases a lease.  The entries are copied a chunk per hold of the lock,
 * so that a read of a large table does not hold every change back for
 * long: each row is as its entry was, the rows are not one instant's.
 */
FencingLeaseRow *
fencing_lease_snapshot(int *count)
{
	Oid			me = GetUserId();
	bool		see_all = has_privs_of_role(me, ROLE_PG_READ_ALL_STATS);
	int			capacity = fencing_lease_table->capacity;
	int			room = 64;
	FencingLeaseRow *rows = palloc(sizeof(FencingLeaseRow) * room);
	int			first;
	int			i;

	*count = 0;
	fencing_lease_ensure_serving();
	for (first = 0; first < capacity; first += LEASE_VIEW_CHUNK)
	{
		int			last = Min(first + LEASE_VIEW_CHUNK, capacity);
		TimestampTz now;
		int			e;

		LWLockAcquire(fencing_lease_table->lock, LW_SHARED);
		now = GetCurrentTimestamp();
		if (*count + (last - first) > room)
		{
			/* not under the lock: a failed allocation must not leave it held */
			LWLockRelease(fencing_lease_table->lock);
			room = Max(room * 2, *count + (last - first));
			rows = repalloc(rows, sizeof(FencingLeaseRow) * room);
			LWLockAcquire(fencing_lease_table->lock, LW_SHARED);
			now = GetCurrentTimestamp();
		}
		for (e = first; e < last; e++)
			if (lease_row_fill(&rows[*count], e, now))
				(*count)++;
		LWLockRelease(fencing_lease_table->lock);
	}

	/* role membership is looked up in the catalogs: not under the lock */
	for (i = 0; i < *count; i++)
		rows[i].visible = see_all || has_privs_of_role(me, rows[i].roleid);
	return rows;
}

/*
 * SQL: fencing.lease_rows(), the set behind the view fencing.leases: one
 * row per lease held, in every database.
 */
Datum
fencing_lease_rows(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	FencingLeaseRow *rows;
	Oid			cached_dboid = InvalidOid;
	char	   *dbname = NULL;
	int			count;
	int			i;

	InitMaterializedSRF(fcinfo, 0);
	rows = fencing_lease_snapshot(&count);
	for (i = 0; i < count; i++)
	{
		FencingLeaseRow *row = &rows[i];
		Datum		values[7] = {0};
		bool		nulls[7] = {true, true, true, true, false, false, false};

		if (row->delayed_until != 0)
			continue;
		if (row->dboid != cached_dboid)
		{
			cached_dboid = row->dboid;
			dbname = get_database_name(row->dboid);
		}
		if (row->visible)
		{
			values[0] = PointerGetDatum(cstring_to_text_with_len(row->name,
																 row->namelen));
			nulls[0] = false;
			values[2] = Int64GetDatum(row->token);
			nulls[2] = false;
			if (row->holderlen >= 0)
			{
				values[3] = PointerGetDatum(cstring_to_text_with_len(row->holder,
																	 row->holderlen));
				nulls[3] = false;
			}
		}
		if (dbname != NULL)
		{
			Name		name = (Name) palloc0(NAMEDATALEN);

			namestrcpy(name, dbname);
			values[1] = NameGetDatum(name);
			nulls[1] = false;
		}
		values[4] = TimestampTzGetDatum(row->acquired_at);
		values[5] = TimestampTzGetDatum(row->renewed_at);
		values[6] = TimestampTzGetDatum(row->expires_at);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}
