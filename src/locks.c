/*-------------------------------------------------------------------------
 *
 * locks.c
 *		Named locks: transaction-scoped advisory locks on hashed, normalised
 *		names, each grant handing out a fence token.
 *
 * A fencing lock IS the core advisory lock that
 * pg_try_advisory_xact_lock(fencing.lock_key(name)) takes: the same lock
 * tag, the same mode, owned by the transaction.  So code that uses the raw
 * advisory functions on the same key excludes and is excluded by ours (L2),
 * and the lock ends with its transaction, subtransaction rollback or
 * backend exit exactly as core advisory locks do (L3); nothing of ours has
 * to be cleaned up for the lock itself to go away.
 *
 * On top of the core lock this file keeps, per backend, a small table from
 * key to the token handed out in this transaction and the canonical name it
 * was taken under, so that taking the lock again returns the same token
 * (L5) and taking it under a colliding name is an error (L6).  The table
 * follows core's resource owners: each entry remembers the resource owner
 * that holds core's lock (the portal of the statement or cursor that took
 * it, or a subtransaction's), and when core releases that owner's locks (a
 * subtransaction or a failed cursor aborting) the entry goes too; when core
 * hands them to the parent owner (a portal dropped at the end of its
 * statement, a subtransaction committing) so do we.  So a lock taken by a
 * cursor stays past the rollback of a savepoint it was fetched in, as core
 * keeps it, and goes with one it was declared in.  Entries are kept in
 * acquisition order.
 *
 * Every lock also has a slot in the shared registry (lock_registry.c),
 * which names it in fencing.locks and lets a busy caller tell contention
 * from a key collision.  The slot is claimed before LockAcquire and freed
 * only after core has released the lock (a resource-owner callback at
 * RESOURCE_RELEASE_AFTER_LOCKS, for the transaction and for each aborting
 * subtransaction; on_shmem_exit, which runs after ShutdownPostgres, as the
 * last safety net), so that no moment exists at which the lock is held and
 * its name unpublished.
 *
 * Waiting (fencing.lock) uses core's own lock wait: the queue is fair, the
 * deadlock detector sees us, and lock_timeout, statement_timeout and query
 * cancel interrupt the wait as for any lock.  A wait with a timeout runs
 * inside an internal subtransaction with lock_timeout lowered to the
 * timeout; only the resulting "lock timeout" error is turned into NULL, and
 * the subtransaction's rollback undoes the wait cleanly (including a grant
 * that raced with the timeout).  A grant is then moved to the caller's
 * resource owner, where every other grant path leaves its lock.
 *
 * A group of names (fencing.try_lock_all, fencing.lock_all) is taken lock
 * by lock in key order under one token drawn at the end; see "Lock groups"
 * below.
 *
 * Copyright (c) 2026, the fencing developers
 *
 * IDENTIFICATION
 *		src/locks.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "common/hashfn.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "storage/condition_variable.h"
#include "storage/ipc.h"
#include "storage/lock.h"
#include "storage/proc.h"
#include "utils/array.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/timeout.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "compat.h"
#include "fencing.h"

PG_FUNCTION_INFO_V1(fencing_try_lock);
PG_FUNCTION_INFO_V1(fencing_lock);
PG_FUNCTION_INFO_V1(fencing_lease);
PG_FUNCTION_INFO_V1(fencing_held_token);
PG_FUNCTION_INFO_V1(fencing_try_lock_all);
PG_FUNCTION_INFO_V1(fencing_lock_all);
PG_FUNCTION_INFO_V1(fencing_try_lock_shared);
PG_FUNCTION_INFO_V1(fencing_lock_shared);
PG_FUNCTION_INFO_V1(fencing_try_acquire);
PG_FUNCTION_INFO_V1(fencing_acquire);

/* A lock this transaction holds, and the token it was granted with. */
typedef struct HeldLock
{
	int64		key;
	int64		token;
	ResourceOwner owner;		/* the one holding core's lock */
	SubTransactionId lease_subid;	/* outermost one that took a lease on
									 * it, or InvalidSubTransactionId */
	LOCKMODE	lockmode;		/* ExclusiveLock or ShareLock */
	uint16		permit;			/* a semaphore's permit number, or 0 */
	int			slot;			/* registry slot */
	uint32		bucket;			/* position in held_index */
	int			namelen;
	char		name[FENCING_NAME_MAX_BYTES];	/* canonical, not terminated */
} HeldLock;

/*
 * The backend-local table, allocated once in TopMemoryContext and grown by
 * doubling: held[] in acquisition order, held_index[] an open-addressing
 * index over it (entry number + 1, 0 = empty) twice its size.  Removing
 * entries only from the tail, in reverse order of insertion, keeps linear
 * probing correct without tombstones.
 */
static HeldLock *held = NULL;
static uint32 *held_index = NULL;
static int	held_count = 0;
static int	held_capacity = 0;
static uint32 held_index_mask = 0;

/*
 * Entries [0, held_settled) belong to TopTransactionResourceOwner, whose
 * locks go only at the end of the transaction: the release of any other
 * owner need not look at them.  Locks move up to it as the statements that
 * took them end, so this prefix keeps the work of each release to the
 * entries of the statements and savepoints still open.
 */
static int	held_settled = 0;

#define HELD_INITIAL_CAPACITY	64

/*
 * The registry slot of a lock being taken or awaited, claimed before
 * LockAcquire and not yet in held[], and the subtransaction that claimed it.
 */
static int	pending_slot = -1;
static SubTransactionId pending_subid = InvalidSubTransactionId;

/*
 * Set while the pending slot is a semaphore's, from the grant of a permit's
 * lock until its entry is in held[]: an abort in between frees the permit,
 * and its waiters must hear of it.
 */
static bool pending_permit_key_set = false;
static int64 pending_permit_key = 0;

/*
 * Entries of held[] with a lease.  The backend's exit uses it to count
 * sessions the server ended because a lease holder sat idle too long; it
 * follows the entries, so a lease rolled back with its subtransaction no
 * longer counts.
 */
static int	leases_held = 0;

/*
 * The idle limits the transaction's leases impose, nested as the setting
 * itself is (each lease() sets it like SET LOCAL, which a subtransaction's
 * rollback undoes and its commit hands to the parent): a lease whose ttl
 * is shorter than the limit in force pushes it, with its subtransaction.
 * From the bottom, ttls strictly decrease and subtransaction ids never
 * decrease, so the top is both the limit in force (what
 * fencing_lease_keep_limit keeps) and the first to go when a
 * subtransaction rolls back.  Emptied at the end of the transaction.
 */
typedef struct LeaseLimit
{
	SubTransactionId subid;
	int			ttl_ms;
} LeaseLimit;

static LeaseLimit *lease_limits = NULL;
static int	lease_limit_count = 0;
static int	lease_limit_capacity = 0;

/* The transaction in which the autocommit warning was last given. */
static LocalTransactionId autocommit_warned_lxid = InvalidLocalTransactionId;

static bool exit_callback_registered = false;


/* A lock name, canonicalised once per call. */
typedef struct LockRequest
{
	char		name[FENCING_NAME_MAX_BYTES + 1];
	int			namelen;
	int64		key;
	LOCKTAG		tag;
	LOCKMODE	lockmode;		/* ExclusiveLock or ShareLock */
	uint16		permit;			/* a semaphore's permit number, or 0 */
} LockRequest;

static void held_rebuild_index(void);
static void held_settle(void);
static void locks_xact_callback(XactEvent event, void *arg);
static void locks_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
								   SubTransactionId parentSubid, void *arg);
static void locks_resource_release(ResourceReleasePhase phase, bool isCommit,
								   bool isTopLevel, void *arg);
static void locks_shmem_exit(int code, Datum arg);
static void locks_before_exit(int code, Datum arg);
static void start_exit_delays(void);

/*
 * Register the end-of-transaction callbacks; called from _PG_init, so every
 * backend inherits them.  They cost one comparison when no lock is held.
 */
void
fencing_locks_init(void)
{
	RegisterXactCallback(locks_xact_callback, NULL);
	RegisterSubXactCallback(locks_subxact_callback, NULL);
	RegisterResourceReleaseCallback(locks_resource_release, NULL);
}

/*
 * Where a key starts probing.  Keys are already hashes of names, but raw
 * advisory keys need not be, so mix once more.
 */
static inline uint32
held_hash(int64 key)
{
	return murmurhash32((uint32) ((uint64) key ^ ((uint64) key >> 32)));
}

/*
 * Make room for one more entry before anything is changed, so that running
 * out of memory leaves the table and the registry consistent.  The first
 * call also arranges for slots to be freed if the backend exits in a way
 * that skips the resource-owner callback; on_shmem_exit callbacks run after
 * ShutdownPostgres has released the locks.
 */
static void
held_reserve(void)
{
	HeldLock   *new_held;
	uint32	   *new_index;
	int			new_capacity;
	uint32		new_mask;

	if (likely(held_count < held_capacity))
		return;

	if (!exit_callback_registered)
	{
		on_shmem_exit(locks_shmem_exit, (Datum) 0);
		before_shmem_exit(locks_before_exit, (Datum) 0);
		exit_callback_registered = true;
	}

	new_capacity = held_capacity > 0 ? held_capacity * 2 : HELD_INITIAL_CAPACITY;
	new_mask = (uint32) new_capacity * 2 - 1;
	new_held = MemoryContextAlloc(TopMemoryContext,
								  sizeof(HeldLock) * new_capacity);
	new_index = MemoryContextAlloc(TopMemoryContext,
								   sizeof(uint32) * (new_mask + 1));
	if (held_count > 0)
		memcpy(new_held, held, sizeof(HeldLock) * held_count);

	if (held)
		pfree(held);
	if (held_index)
		pfree(held_index);
	held = new_held;
	held_index = new_index;
	held_capacity = new_capacity;
	held_index_mask = new_mask;
	held_rebuild_index();
}

/*
 * Index every entry anew, in acquisition order, so that removing the newest
 * entries later stays exact: after the table grew, or after entries were
 * removed from its middle.
 */
static void
held_rebuild_index(void)
{
	int			i;

	memset(held_index, 0, sizeof(uint32) * (held_index_mask + 1));
	for (i = 0; i < held_count; i++)
	{
		uint32		b = held_hash(held[i].key) & held_index_mask;

		while (held_index[b] != 0)
			b = (b + 1) & held_index_mask;
		held[i].bucket = b;
		held_index[b] = (uint32) i + 1;
	}
}

/*
 * The entry for a key this transaction took through us, or NULL: a lock,
 * or with permit set a semaphore's permit (the permits of a name are locks
 * of their own, apart from the name's lock).
 */
static HeldLock *
held_find(int64 key, bool permit)
{
	uint32		b;
	uint32		e;

	if (held_count == 0)
		return NULL;

	b = held_hash(key) & held_index_mask;
	while ((e = held_index[b]) != 0)
	{
		if (held[e - 1].key == key && (held[e - 1].permit != 0) == permit)
			return &held[e - 1];
		b = (b + 1) & held_index_mask;
	}
	return NULL;
}

/*
 * Remember a grant, with its canonical name.  held_reserve() must have made
 * room.
 */
static HeldLock *
held_insert(const LockRequest *req, int64 token, int slot)
{
	uint32		b = held_hash(req->key) & held_index_mask;
	HeldLock   *h;

	Assert(held_count < held_capacity);
	while (held_index[b] != 0)
		b = (b + 1) & held_index_mask;

	h = &held[held_count];
	h->key = req->key;
	h->token = token;
	h->owner = CurrentResourceOwner;
	h->lease_subid = InvalidSubTransactionId;
	h->lockmode = req->lockmode;
	h->permit = req->permit;
	h->slot = slot;
	h->bucket = b;
	h->namelen = req->namelen;
	memcpy(h->name, req->name, req->namelen);
	held_index[b] = (uint32) held_count + 1;
	held_count++;
	held_settle();
	return h;
}

/*
 * Core has released the lock of an entry: free its registry slot, and wake
 * the waiters of a semaphore whose permit it was.  The caller takes the
 * entry out of the table.
 */
static void
held_forget(const HeldLock *h)
{
	fencing_lock_registry_release(h->slot);
	if (h->lease_subid != InvalidSubTransactionId)
		leases_held--;
	if (h->permit != 0)
		fencing_lock_registry_permit_freed(h->key);
}

/*
 * Forget the most recent grant.  Core must already have released the lock.
 */
static void
held_pop(void)
{
	HeldLock   *h = &held[held_count - 1];

	held_forget(h);
	held_index[h->bucket] = 0;
	held_count--;
	held_settled = Min(held_settled, held_count);
}

/*
 * Extend the prefix of entries known to belong to the transaction's own
 * resource owner.
 */
static void
held_settle(void)
{
	while (held_settled < held_count &&
		   held[held_settled].owner == TopTransactionResourceOwner)
		held_settled++;
}

/*
 * Core has released the locks of a resource owner (a subtransaction or a
 * cursor aborting): forget the entries it held.  They are usually the
 * newest; otherwise the table is compacted, keeping the order of the rest.
 */
static void
held_drop_owned_by(ResourceOwner owner)
{
	int			kept;
	int			i;

	while (held_count > held_settled && held[held_count - 1].owner == owner)
		held_pop();
	for (i = held_settled; i < held_count; i++)
	{
		if (held[i].owner == owner)
			break;
	}
	if (i == held_count)
		return;
	for (kept = i; i < held_count; i++)
	{
		if (held[i].owner == owner)
		{
			held_forget(&held[i]);
			continue;
		}
		held[kept++] = held[i];
	}
	held_count = kept;
	held_rebuild_index();
}

/*
 * Core has handed the locks of a resource owner to its parent (a portal
 * dropped at the end of its statement, a subtransaction committing): so do
 * the entries.
 */
static void
held_reassign(ResourceOwner owner, ResourceOwner parent)
{
	int			i;

	for (i = held_settled; i < held_count; i++)
	{
		if (held[i].owner == owner)
			held[i].owner = parent;
	}
	held_settle();
}

/*
 * Free the slot of a lock being taken or awaited that was not granted.
 */
static void
release_pending(void)
{
	if (pending_slot >= 0)
	{
		fencing_lock_registry_release(pending_slot);
		pending_slot = -1;
		pending_subid = InvalidSubTransactionId;
		/* a permit's lock granted but not yet entered in held[] */
		if (pending_permit_key_set)
			fencing_lock_registry_permit_freed(pending_permit_key);
		pending_permit_key_set = false;
	}
}

/*
 * The transaction ended and core has released every lock: forget them all
 * and free their slots.
 */
static void
release_all(void)
{
	release_pending();
	while (held_count > 0)
		held_pop();
	held_settled = 0;
	lease_limit_count = 0;
	Assert(leases_held == 0);
	fencing_lease_idle_changed();
}

/*
 * A subtransaction was rolled back and core has released the locks its
 * resource owner held (locks_resource_release forgets those entries):
 * forget leases taken in it on locks that stay, and free the slot of an
 * attempt or wait that it or a subtransaction inside it began.
 */
static void
release_subtransaction(SubTransactionId subid)
{
	int			i;

	if (pending_slot >= 0 && pending_subid >= subid)
		release_pending();
	for (i = 0; leases_held > 0 && i < held_count; i++)
	{
		if (held[i].lease_subid == subid)
		{
			held[i].lease_subid = InvalidSubTransactionId;
			leases_held--;
		}
	}
}

/*
 * Resource release, after the locks: the one moment at which core has let
 * go of the locks and nothing else has run yet.  Core calls it for each
 * resource owner it releases, with CurrentResourceOwner pointing at it, the
 * children before their parent.  At transaction end (commit, abort, and
 * the abort that backend exit performs) every slot is freed.  Otherwise the
 * owner's locks were released (abort: a subtransaction, a failed cursor)
 * or handed to its parent (a portal dropped, a subtransaction committed),
 * and its entries follow.
 */
static void
locks_resource_release(ResourceReleasePhase phase, bool isCommit,
					   bool isTopLevel, void *arg)
{
	if (held_count == 0 && pending_slot < 0)
		return;
	if (phase == RESOURCE_RELEASE_BEFORE_LOCKS)
	{
		/*
		 * An abort during backend exit, before locks_before_exit ran: a
		 * before_shmem_exit callback registered after ours (core's removal
		 * of temporary relations, for one) aborts the open transaction
		 * first.  Core still holds the locks here.
		 */
		if (!isCommit && proc_exit_inprogress)
			start_exit_delays();
		return;
	}
	if (phase != RESOURCE_RELEASE_AFTER_LOCKS)
		return;

	if (isTopLevel)
		release_all();
	else if (isCommit)
		held_reassign(CurrentResourceOwner,
					  ResourceOwnerGetParent(CurrentResourceOwner));
	else
	{
		held_drop_owned_by(CurrentResourceOwner);
		if (CurrentResourceOwner == CurTransactionResourceOwner)
			release_subtransaction(GetCurrentSubTransactionId());
		fencing_lease_idle_changed();
	}
}

/*
 * Transaction end.  PREPARE is refused while fencing locks are held: the
 * prepared transaction would keep the lock with no session to renew a
 * lease or to end it, and the view could not say who holds it.  The slots
 * themselves are freed by locks_resource_release, after the locks.
 */
static void
locks_xact_callback(XactEvent event, void *arg)
{
	if (event == XACT_EVENT_PRE_PREPARE && held_count > 0)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("cannot PREPARE a transaction that holds fencing locks"),
				 errdetail("A prepared transaction would keep the lock with no session to renew or end it."),
				 errhint("Commit or roll back instead, or take the lock in a transaction that is not prepared.")));
}

/*
 * Subtransaction end: the idle limits its leases set go with its rollback,
 * whatever became of their locks (a cursor that failed may have lost them
 * already), as the setting itself does; on commit they pass to the parent,
 * and so do the leases taken in it.  (The locks follow their resource
 * owners, in locks_resource_release.)
 */
static void
locks_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
					   SubTransactionId parentSubid, void *arg)
{
	int			i;

	if (event == SUBXACT_EVENT_ABORT_SUB)
	{
		while (lease_limit_count > 0 &&
			   lease_limits[lease_limit_count - 1].subid >= mySubid)
			lease_limit_count--;
		return;
	}
	if (event != SUBXACT_EVENT_COMMIT_SUB)
		return;
	for (i = lease_limit_count - 1;
		 i >= 0 && lease_limits[i].subid == mySubid; i--)
		lease_limits[i].subid = parentSubid;
	for (i = 0; leases_held > 0 && i < held_count; i++)
	{
		if (held[i].lease_subid == mySubid)
			held[i].lease_subid = parentSubid;
	}
}

/*
 * Backend exit: proc exit aborts the open transaction in ShutdownPostgres,
 * which frees everything through locks_resource_release; this runs after
 * it, as the safety net for an exit that skipped it, so that no slot stays
 * claimed by a dead backend.
 */
static void
locks_shmem_exit(int code, Datum arg)
{
	release_all();
}

/*
 * Backend exit with the transaction still open (a lease that expired,
 * pg_terminate_backend, any FATAL, the client gone): the session ended
 * abnormally, so every lock it was granted gets its lock-delay
 * (lock_delay.c).  Runs before ShutdownPostgres aborts the transaction,
 * so the locks are still held and nobody has been granted them.  Locks of
 * a group still being taken have no token yet and guarded nothing.
 */
static void
locks_before_exit(int code, Datum arg)
{
	start_exit_delays();
}

/*
 * The work of locks_before_exit, done once per exit: from that callback,
 * or from the first abort during exit when another before_shmem_exit
 * callback aborted the transaction before it (locks_resource_release).
 * A session the server ended because a lease's holder sat idle too long
 * (core's idle_in_transaction_session_timeout went off, or the idle timer
 * of lease_ceiling.c) while the transaction still holds a lease counts as
 * an expired lease; the timeout's indicator stays set until the next wait
 * for a command, which an exit never reaches, and the count does not
 * depend on the report reaching the server log.
 */
static void
start_exit_delays(void)
{
	static bool started = false;
	int			i;

	if (started)
		return;
	started = true;
	if (leases_held > 0 &&
		(fencing_lease_idle_timer_fired() ||
		 get_timeout_indicator(IDLE_IN_TRANSACTION_SESSION_TIMEOUT, false)))
		fencing_stat_add(FENCING_STAT_LEASES_EXPIRED, 1);
#ifdef FENCING_MUTANT_LOCK_DELAY_NOT_STARTED
	return;
#endif
	for (i = 0; i < held_count; i++)
	{
		FencingLockDelay delay;

		if (held[i].token == 0)
			continue;
		fencing_lock_registry_describe(held[i].slot, &delay);
		fencing_lock_delay_start(&delay);
	}
}

/*
 * Canonicalise the name and build the advisory lock tag exactly as
 * pg_try_advisory_xact_lock(bigint) and pg_try_advisory_xact_lock_shared
 * (bigint) do for the same key; they differ only in the lock mode.
 */
static inline void
set_advisory_tag(LOCKTAG *tag, int64 key)
{
	SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId,
						 (uint32) ((uint64) key >> 32),
						 (uint32) key, 1);
}

static void
prepare_request(LockRequest *req, Datum name, LOCKMODE lockmode)
{
	req->namelen = fencing_canonical_name(name, req->name);
	req->key = fencing_key_of_canonical(req->name, req->namelen);
	set_advisory_tag(&req->tag, req->key);
	req->lockmode = lockmode;
	req->permit = 0;
}

/*
 * The lock on this key is already ours under another canonical name: the
 * two names collide (L6), and answering with the other name's token would
 * let two holders believe they hold two different locks.
 */
static void
check_own_name(const HeldLock *h, const LockRequest *req)
{
	if (h->namelen == req->namelen &&
		memcmp(h->name, req->name, h->namelen) == 0)
		return;

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
 * the one asked for (an exclusive lock covers a shared request); else NULL.  Core's lock
 * is held by the entry's (sub)transaction or an ancestor of it until that
 * one ends, so there is nothing to acquire again.
 */
static HeldLock *
held_again(const LockRequest *req)
{
	HeldLock   *h = held_find(req->key, false);

#ifdef FENCING_MUTANT_REACQUIRE_NEW_TOKEN
	return NULL;
#endif
	if (h != NULL)
	{
		check_own_name(h, req);
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
 * When the lock-delay in force on a lock ends, or 0 when none is: what
 * every grant path asks.
 */
static inline TimestampTz
delay_in_force(int64 key, int permit)
{
#ifdef FENCING_MUTANT_LOCK_DELAY_IGNORED
	return 0;
#endif
	return fencing_lock_delay_refuses(key, permit);
}

/*
 * Core has just granted the lock: give it back when a lock-delay is in
 * force on it (its last holder was lost, lock_delay.c), and count the
 * refusal.  Returns when the delay ends, or 0 when the grant stands; with
 * no delay anywhere that costs one atomic read.  Checked after the grant,
 * not before, so that a holder lost while we were taking the lock (whose
 * delay starts before core releases its lock) is always seen.
 */
static inline TimestampTz
give_back_if_delayed(const LOCKTAG *tag, LOCKMODE lockmode, int64 key,
					 int permit)
{
	TimestampTz until = delay_in_force(key, permit);

	if (unlikely(until != 0))
	{
		LockRelease(tag, lockmode, false);
		fencing_stat_add(FENCING_STAT_DELAYED_REFUSALS, 1);
	}
	return until;
}

/*
 * Publish the name, then try the core lock once without waiting.  True
 * when granted (or when the transaction already held the key through the
 * raw advisory functions); the slot stays pending until grant().  When
 * busy, checks for a collision (raising FN002) and returns false with the
 * slot still pending; likewise, without the check, when a lock-delay is in
 * force on the name.
 *
 * The check after a busy LockAcquire scans the registry; the holder may
 * commit and free its slot between the two.  The release counter read
 * before LockAcquire tells: if it moved, the scan proves nothing, so try
 * again (the lock may well be free now).
 */
static bool
attempt(const LockRequest *req)
{
	uint32		releases;

	held_reserve();
	pending_slot = fencing_lock_registry_claim(req->key, req->name,
											   req->namelen,
											   req->lockmode == ShareLock ?
											   FENCING_LOCK_SHARED :
											   FENCING_LOCK_EXCLUSIVE, 0, 0);
	pending_subid = GetCurrentSubTransactionId();

	releases = fencing_lock_registry_releases(req->key);
	for (;;)
	{
		uint32		now;

#ifdef FENCING_MUTANT_TRY_LOCK_IGNORES_BUSY
		return true;
#endif
#ifdef FENCING_MUTANT_LOCK_SESSION_SCOPED
		if (LockAcquire(&req->tag, req->lockmode, true, true) !=
			LOCKACQUIRE_NOT_AVAIL)
			return true;
#else
		if (LockAcquire(&req->tag, req->lockmode, false, true) !=
			LOCKACQUIRE_NOT_AVAIL)
			return give_back_if_delayed(&req->tag, req->lockmode,
										req->key, 0) == 0;
#endif

#ifndef FENCING_MUTANT_COLLISION_UNREPORTED
		fencing_lock_registry_check_collision(req->key, req->name,
											  req->namelen);
#endif
		now = fencing_lock_registry_releases(req->key);
		if (now == releases)
			return false;
		releases = now;
		CHECK_FOR_INTERRUPTS();
	}
}

/*
 * The pending lock was granted: remember it under this token (0 while a
 * group is still being taken; its registry slot then stays "acquiring").
 * From here on the entry, not pending_slot, owns the slot.
 */
static HeldLock *
hold_pending(const LockRequest *req, int64 token)
{
	HeldLock   *h = held_insert(req, token, pending_slot);

	pending_slot = -1;
	pending_subid = InvalidSubTransactionId;
	return h;
}

/*
 * The pending lock was granted: draw its token, publish it and remember the
 * grant.  If drawing the token fails, the lock and the pending slot go with
 * the (sub)transaction's abort.
 */
static HeldLock *
grant(const LockRequest *req, bool after_wait)
{
	int64		token = fencing_issue_token();

#ifdef FENCING_MUTANT_LOCK_GRANT_ASSIGNS_XID
	(void) GetCurrentTransactionId();
#endif
	fencing_lock_registry_grant(pending_slot, token, after_wait);
	return hold_pending(req, token);
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
static void
warn_if_autocommit(const LockRequest *reqs, int nreqs, const char *function)
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
static HeldLock *
take_without_waiting(const LockRequest *req, const char *function)
{
	HeldLock   *h = held_again(req);

	if (h != NULL)
		return h;
	if (!attempt(req))
	{
		release_pending();
		fencing_stat_add(FENCING_STAT_LOCKS_BUSY, 1);
		return NULL;
	}
	h = grant(req, false);
	warn_if_autocommit(req, 1, function);
	return h;
}

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
move_to_current_owner(const LockRequest *req)
{
	ResourceOwner owner = CurrentResourceOwner;

	if (owner == CurTransactionResourceOwner)
		return;
	(void) LockAcquire(&req->tag, req->lockmode, false, true);
	CurrentResourceOwner = CurTransactionResourceOwner;
	LockRelease(&req->tag, req->lockmode, false);
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
static bool
wait_with_timeout(const LockRequest *req, int timeout_ms)
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
		(void) LockAcquire(&req->tag, req->lockmode, false, false);

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
		move_to_current_owner(req);
	return granted;
}

/*
 * attempt() found the lock busy or delayed: wait until it is granted, or
 * until deadline when has_timeout.  A busy lock is waited for in core's
 * queue; a lock under a lock-delay on the latch until the delay ends (no
 * polling; lock_timeout does not apply to that part, the timeout argument
 * and statement_timeout do); a grant that comes while a delay is in force
 * (the holder we waited for was lost) is given back and waited for
 * likewise.  Returns whether the lock was granted; either way the pending
 * slot stays the caller's.
 */
static bool
wait_for_grant(const LockRequest *req, bool has_timeout, TimestampTz deadline)
{
	fencing_lock_registry_wait(pending_slot);
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
		if (!has_timeout)
			(void) LockAcquire(&req->tag, req->lockmode, false, false);
		else if (!wait_with_timeout(req, (int) Min(remaining_ms, INT_MAX)))
		{
			/* lock_timeout counts at most INT_MAX ms: wait on for the rest */
			if (remaining_ms > INT_MAX)
				continue;
			return false;
		}
		if (give_back_if_delayed(&req->tag, req->lockmode, req->key, 0) == 0)
			return true;
	}
}

/*
 * An interval as microseconds, as a double so that months and days cannot
 * overflow; a month counts as 30 days, as in interval comparison.
 */
static double
interval_usecs(const Interval *span)
{
	return (double) span->time +
		(double) span->day * USECS_PER_DAY +
		(double) span->month * DAYS_PER_MONTH * USECS_PER_DAY;
}

/*
 * The timeout argument (number argno) of the waiting functions: false when
 * the wait has no bound (NULL, 'infinity', or longer than a timestamp can
 * count, some hundred thousand years), else true with *timeout_ms set,
 * rounded up to whole milliseconds.  Negative (also '-infinity') is an
 * error.
 */
static bool
timeout_arg(FunctionCallInfo fcinfo, int argno, int64 *timeout_ms)
{
	double		usecs;

	*timeout_ms = 0;
	if (PG_ARGISNULL(argno))
		return false;
	usecs = interval_usecs(PG_GETARG_INTERVAL_P(argno));
	if (usecs < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("lock timeout must not be negative"),
				 errhint("Pass NULL to wait without a timeout, or zero to try once.")));
	if (usecs > (double) (PG_INT64_MAX / 2))
		return false;
	*timeout_ms = (int64) ceil(usecs / 1000.0);
	return true;
}

/*
 * A NULL lock name would silently mean "no lock"; say so instead.
 */
static void
error_if_null_name(FunctionCallInfo fcinfo)
{
	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("lock name must not be null")));
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
	error_if_null_name(fcinfo);
	prepare_request(&req, PG_GETARG_DATUM(0), lockmode);

	h = take_without_waiting(&req, function);
	if (h == NULL)
		PG_RETURN_NULL();
	fencing_stat_add(FENCING_STAT_LOCKS_GRANTED, 1);
	if (lockmode == ShareLock)
		fencing_stat_add(FENCING_STAT_SHARED_LOCKS_GRANTED, 1);
	PG_RETURN_INT64(h->token);
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
	error_if_null_name(fcinfo);
	has_timeout = timeout_arg(fcinfo, 1, &timeout_ms);

	prepare_request(&req, PG_GETARG_DATUM(0), lockmode);

	if ((h = held_again(&req)) == NULL)
	{
		bool		waited = false;

		if (!attempt(&req))
		{
			if (has_timeout && timeout_ms == 0)
			{
				release_pending();
				fencing_stat_add(FENCING_STAT_LOCKS_TIMED_OUT, 1);
				PG_RETURN_NULL();
			}

			if (!wait_for_grant(&req, has_timeout,
								has_timeout ?
								TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
															timeout_ms) : 0))
			{
				/* the internal rollback has released a grant that raced */
				release_pending();
				fencing_stat_add(FENCING_STAT_LOCKS_TIMED_OUT, 1);
				PG_RETURN_NULL();
			}
			waited = true;
		}
		h = grant(&req, waited);
		warn_if_autocommit(&req, 1, function);
	}
	fencing_stat_add(FENCING_STAT_LOCKS_GRANTED, 1);
	if (lockmode == ShareLock)
		fencing_stat_add(FENCING_STAT_SHARED_LOCKS_GRANTED, 1);
	PG_RETURN_INT64(h->token);
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
 * SQL: fencing.try_lock_shared(name).  The lock in shared mode: any number
 * of shared holders at once, none while an exclusive holder has it or an
 * exclusive request waits for it (core's queue rule, which keeps a stream
 * of readers from starving a writer).  Each shared holder gets a token of
 * its own.
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
 * Make room for one more idle limit, before the lease takes its lock, so
 * that running out of memory holds nothing.
 */
static void
lease_limit_reserve(void)
{
	int			new_capacity;

	if (lease_limit_count < lease_limit_capacity)
		return;
	new_capacity = lease_limit_capacity > 0 ? lease_limit_capacity * 2 : 8;
	if (lease_limits == NULL)
		lease_limits = MemoryContextAlloc(TopMemoryContext,
										  sizeof(LeaseLimit) * new_capacity);
	else
		lease_limits = repalloc(lease_limits,
								sizeof(LeaseLimit) * new_capacity);
	lease_limit_capacity = new_capacity;
}

/*
 * A lease with this ttl was granted: it is the limit in force from now on
 * if it is shorter than the one in force.  lease_limit_reserve() must have
 * made room.
 */
static void
lease_limit_push(int ttl_ms)
{
	if (lease_limit_count > 0 &&
		lease_limits[lease_limit_count - 1].ttl_ms <= ttl_ms)
		return;
	Assert(lease_limit_count < lease_limit_capacity);
	lease_limits[lease_limit_count].subid = GetCurrentSubTransactionId();
	lease_limits[lease_limit_count].ttl_ms = ttl_ms;
	lease_limit_count++;
}

/*
 * The idle limit the transaction's leases impose, in milliseconds, or 0
 * when it holds no lease.
 */
int
fencing_lease_ttl_in_force(void)
{
	if (leases_held == 0 || lease_limit_count == 0)
		return 0;
	return lease_limits[lease_limit_count - 1].ttl_ms;
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
	double		usecs;
	int			ttl_ms;
	int			max_hold_ms = 0;

	fencing_error_if_standby("fencing.lease()");
	error_if_null_name(fcinfo);

	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("lease ttl must not be null"),
				 errhint("Use fencing.try_lock() for a lock without a lease.")));
	usecs = interval_usecs(PG_GETARG_INTERVAL_P(1));
	if (usecs <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("lease ttl must be positive")));
	if (usecs < 1000.0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("lease ttl must be at least 1 millisecond")));
	if (usecs / 1000.0 > (double) INT_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("lease ttl must be at most %d milliseconds", INT_MAX)));
	ttl_ms = (int) floor(usecs / 1000.0);
	if (PG_NARGS() > 2 && !PG_ARGISNULL(2))
		max_hold_ms = fencing_lease_max_hold_ms(interval_usecs(PG_GETARG_INTERVAL_P(2)));

	prepare_request(&req, PG_GETARG_DATUM(0), ExclusiveLock);
	lease_limit_reserve();
	fencing_lease_idle_prepare();

	h = take_without_waiting(&req, "fencing.lease()");
	if (h == NULL)
		PG_RETURN_NULL();

	(void) shorten_idle_limit(ttl_ms);
	lease_limit_push(ttl_ms);
	if (max_hold_ms > 0)
		fencing_lease_ceiling_set(req.name, req.namelen, max_hold_ms);

	if (h->lease_subid == InvalidSubTransactionId)
	{
		h->lease_subid = GetCurrentSubTransactionId();
		leases_held++;
	}
	fencing_stat_add(FENCING_STAT_LOCKS_GRANTED, 1);
	fencing_stat_add(FENCING_STAT_LEASES_GRANTED, 1);
	PG_RETURN_INT64(h->token);
}

/*
 * Called after each top-level statement.  A lease is only as good as the
 * idle limit behind it: a holder that ran SET, RESET or set_config() on
 * idle_in_transaction_session_timeout after lease() would otherwise idle
 * forever with the lock.  While a lease is in force, put the limit back to
 * the ttl in force (the shortest of the transaction's leases that were not
 * rolled back; a SET LOCAL, so the session value returns when the
 * transaction ends) and say so.  A shorter limit set
 * by the session stays: it only ends a stalled holder sooner.
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
	prepare_request(&req, PG_GETARG_DATUM(0), ExclusiveLock);

	h = held_find(req.key, false);
	if (h == NULL)
		h = held_find(req.key, true);
	if (h == NULL)
		PG_RETURN_NULL();
	check_own_name(h, &req);
	PG_RETURN_INT64(h->token);
}

/*
 * Lock groups: fencing.try_lock_all() and fencing.lock_all().
 *
 * A group is a set of names taken together under one token.  Its locks are
 * taken one by one, in the order of their keys (then names), the order
 * every caller uses, so two groups that share names cannot each hold a
 * name the other waits for: the first name they share is taken by one of
 * them first, and the other waits for it before taking anything after it.
 * Each lock taken is entered in held[] at once, with token 0 and its
 * registry slot still "acquiring", so an error at any point (a cancel, a
 * collision, a full registry) releases what was taken with the
 * (sub)transaction, as for a single lock.  When a name is busy (try) or its
 * wait times out, the names already taken in this call are released on the
 * spot, newest first, so the caller holds nothing of the group.  Only when
 * every name is held is the one token drawn and published for all of them.
 */

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
 * Canonicalise the names of a group, sort them into the order they are
 * taken in and drop repeats (names equal after normalisation are one
 * lock).  Two different names with the same key cannot both be held: that
 * is a collision (L6), reported before anything is taken.  Returns the
 * palloc'd requests and sets *count.
 */
static LockRequest *
prepare_group(FunctionCallInfo fcinfo, int *count)
{
	ArrayType  *names;
	Datum	   *elems;
	bool	   *elem_nulls;
	int			nelems;
	LockRequest *reqs;
	int			n = 0;
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
		prepare_request(&reqs[i], elems[i], ExclusiveLock);
	}
	qsort(reqs, nelems, sizeof(LockRequest), request_cmp);

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
	*count = n;
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
		HeldLock   *h = held_again(&reqs[i]);

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
 * taken in this call, which are the tail of held[].
 */
static void
release_newest(int count)
{
	ResourceOwner save = CurrentResourceOwner;

	while (count-- > 0)
	{
		HeldLock   *h = &held[held_count - 1];
		LOCKTAG		tag;

		set_advisory_tag(&tag, h->key);
		CurrentResourceOwner = h->owner;
		LockRelease(&tag, h->lockmode, false);
		CurrentResourceOwner = save;
		held_pop();
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

		if (!attempt(req))
		{
			if (!wait || !wait_for_grant(req, has_timeout, deadline))
			{
				release_pending();
				release_newest(taken);
				return 0;
			}
			waited = true;
		}
		(void) hold_pending(req, 0);
	}

	token = fencing_issue_token();
	for (taken = held_count - n; taken < held_count; taken++)
	{
		held[taken].token = token;
		fencing_lock_registry_grant(held[taken].slot, token, waited);
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
		warn_if_autocommit(reqs, n, function);
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
	has_timeout = timeout_arg(fcinfo, 1, &timeout_ms);
	reqs = prepare_group(fcinfo, &n);
	if (!lock_group(reqs, n, true, has_timeout, timeout_ms,
					"fencing.lock_all()", &token))
		PG_RETURN_NULL();
	PG_RETURN_INT64(token);
}

/*
 * Semaphores: fencing.try_acquire() and fencing.acquire().
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
 * that of try_lock.
 *
 * Core's lock manager can wait for one lock, not for any of m, so a waiter
 * sleeps on a condition variable of the name's key (lock_registry.c keeps a
 * small array of them) and tries again when woken.  Every release of a
 * permit broadcasts it, after core has released the lock (held_pop, from
 * the resource-release callback), and a waiter prepares to sleep before it
 * tries, so no release between its try and its sleep is missed: the wait
 * does not poll.  It shows in pg_stat_activity as wait_event_type
 * "Extension".  The wait is interrupted by a cancel and statement_timeout;
 * lock_timeout and the deadlock detector do not see it (it is not a lock
 * wait), so the timeout argument is what bounds it.
 */

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
	int			i;

	*delay_end = 0;
	for (i = 1; i <= permits; i++)
	{
		TimestampTz until = delay_in_force(req->key, i);

		if (until != 0)
			fencing_stat_add(FENCING_STAT_DELAYED_REFUSALS, 1);
		else
		{
			set_permit_tag(&req->tag, req->key, i);
			if (LockAcquire(&req->tag, ExclusiveLock, false, true) ==
				LOCKACQUIRE_NOT_AVAIL)
				continue;
			until = give_back_if_delayed(&req->tag, ExclusiveLock,
										 req->key, i);
			if (until == 0)
			{
				req->permit = (uint16) i;
				pending_permit_key = req->key;
				pending_permit_key_set = true;
				fencing_lock_registry_set_permit(pending_slot, i);
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
 * Take a permit of a semaphore: the entry of the permit this transaction
 * already holds (L5), or of a newly granted one, or NULL when all were busy
 * (and wait is false, or the timeout passed).
 */
static HeldLock *
take_permit(LockRequest *req, int permits, bool wait, bool has_timeout,
			int64 timeout_ms, const char *function)
{
	HeldLock   *h = held_find(req->key, true);
	bool		granted;
	bool		waited = false;
	TimestampTz delay_end;

	if (h != NULL)
	{
		check_own_name(h, req);
		return h;
	}

	held_reserve();
	pending_slot = fencing_lock_registry_claim(req->key, req->name,
											   req->namelen,
											   FENCING_LOCK_PERMIT, 0,
											   permits);
	pending_subid = GetCurrentSubTransactionId();

	granted = attempt_permits(req, permits, &delay_end);
	if (!granted && wait && !(has_timeout && timeout_ms == 0))
	{
		ConditionVariable *cv = fencing_lock_registry_permit_cv(req->key);
		TimestampTz deadline = 0;

		if (has_timeout)
			deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
												   timeout_ms);
		fencing_lock_registry_wait(pending_slot);
		waited = true;

		/* prepared before each try, so a release after it wakes the sleep */
		ConditionVariablePrepareToSleep(cv);
		while (!(granted = attempt_permits(req, permits, &delay_end)))
		{
			long		sleep_ms = -1;

			if (has_timeout)
			{
				sleep_ms = TimestampDifferenceMilliseconds(GetCurrentTimestamp(),
														   deadline);
				if (sleep_ms <= 0)
					break;
			}
			/* no release wakes us when a permit's lock-delay ends */
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
			sleep_ms = Min(sleep_ms, (long) INT_MAX);
			(void) ConditionVariableTimedSleep(cv, sleep_ms, PG_WAIT_EXTENSION);
		}
		ConditionVariableCancelSleep();
	}

	if (!granted)
	{
		release_pending();
		return NULL;
	}
	h = grant(req, waited);
	pending_permit_key_set = false;		/* the entry owns the permit now */
	warn_if_autocommit(req, 1, function);
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
	error_if_null_name(fcinfo);
	permits = permits_arg(fcinfo);
	if (wait)
		has_timeout = timeout_arg(fcinfo, 2, &timeout_ms);
	prepare_request(&req, PG_GETARG_DATUM(0), ExclusiveLock);

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
