/*-------------------------------------------------------------------------
 *
 * held.c
 *		What this transaction holds: its fencing locks, which of them carry
 *		a lease, and the idle limit those leases impose; kept in step with
 *		core's locks by the transaction, subtransaction and resource-owner
 *		callbacks.
 *
 * A fencing lock IS the core advisory lock that
 * pg_try_advisory_xact_lock(fencing.lock_key(name)) takes: the same lock
 * tag, the same mode, owned by the transaction.  So the lock ends with its
 * transaction, subtransaction rollback or backend exit exactly as core
 * advisory locks do (L3); nothing of ours has to be cleaned up for the lock
 * itself to go away.
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
 * Every lock also has a slot in the shared registry (registry.c), which
 * names it in fencing.locks and lets a busy caller tell contention from a
 * key collision.  The slot is claimed before LockAcquire (grant.c) and
 * freed here only after core has released the lock (a resource-owner
 * callback at RESOURCE_RELEASE_AFTER_LOCKS, for the transaction and for
 * each aborting subtransaction; on_shmem_exit, which runs after
 * ShutdownPostgres, as the last safety net), so that no moment exists at
 * which the lock is held and its name unpublished.
 *
 * A backend that exits with its transaction open lost its locks
 * abnormally: each gets its lock-delay (delay.c) before core lets go.
 *
 * Copyright (c) 2026, the fencing developers
 *
 * IDENTIFICATION
 *		src/locks/held.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "common/hashfn.h"
#include "storage/ipc.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/timeout.h"

#include "locks/locks.h"

#define HELD_INITIAL_CAPACITY	64

FencingHeldTable fencing_held = {NULL, NULL, 0, 0, 0, 0};

FencingPendingLock fencing_pending = {-1, InvalidSubTransactionId, false, 0};

/*
 * Entries of the table with a lease.  The backend's exit uses it to count
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
	bool		by_use;			/* pushed by use_lease(), with no lock here */
} LeaseLimit;

static LeaseLimit *lease_limits = NULL;
static int	lease_limit_count = 0;
static int	lease_limit_capacity = 0;

/*
 * How many of the limits were pushed by use_lease() (fence/use_lease.c):
 * a lease that outlives the transaction, whose batch holds the row lock of
 * its resource fence, imposes its ttl with no lock in this table.
 */
static int	lease_use_limits = 0;

static bool exit_callback_registered = false;

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
 * The idle timer (lease_ceiling.c) learns here where the ttl in force comes
 * from.
 */
void
fencing_locks_init(void)
{
	RegisterXactCallback(locks_xact_callback, NULL);
	RegisterSubXactCallback(locks_subxact_callback, NULL);
	RegisterResourceReleaseCallback(locks_resource_release, NULL);
	fencing_lease_idle_ttl_source(fencing_lease_ttl_in_force);
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
 * The table is full (fencing_held_reserve): double it.  The first call
 * also arranges for slots to be freed if the backend exits in a way that
 * skips the resource-owner callback; on_shmem_exit callbacks run after
 * ShutdownPostgres has released the locks.
 */
void
fencing_held_grow(void)
{
	HeldLock   *new_held;
	uint32	   *new_index;
	int			new_capacity;
	uint32		new_mask;

	if (!exit_callback_registered)
	{
		on_shmem_exit(locks_shmem_exit, (Datum) 0);
		before_shmem_exit(locks_before_exit, (Datum) 0);
		exit_callback_registered = true;
	}

	new_capacity = fencing_held.capacity > 0 ?
		fencing_held.capacity * 2 : HELD_INITIAL_CAPACITY;
	new_mask = (uint32) new_capacity * 2 - 1;
	new_held = MemoryContextAlloc(TopMemoryContext,
								  sizeof(HeldLock) * new_capacity);
	new_index = MemoryContextAlloc(TopMemoryContext,
								   sizeof(uint32) * (new_mask + 1));
	if (fencing_held.count > 0)
		memcpy(new_held, fencing_held.locks,
			   sizeof(HeldLock) * fencing_held.count);

	if (fencing_held.locks)
		pfree(fencing_held.locks);
	if (fencing_held.index)
		pfree(fencing_held.index);
	fencing_held.locks = new_held;
	fencing_held.index = new_index;
	fencing_held.capacity = new_capacity;
	fencing_held.mask = new_mask;
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
	HeldLock   *held = fencing_held.locks;
	uint32		mask = fencing_held.mask;
	int			i;

	memset(fencing_held.index, 0, sizeof(uint32) * (mask + 1));
	for (i = 0; i < fencing_held.count; i++)
	{
		uint32		b = held_hash(held[i].key) & mask;

		while (fencing_held.index[b] != 0)
			b = (b + 1) & mask;
		held[i].bucket = b;
		fencing_held.index[b] = (uint32) i + 1;
	}
}

/*
 * The entry for a key this transaction took through us, or NULL: a lock,
 * or with permit set a semaphore's permit (the permits of a name are locks
 * of their own, apart from the name's lock).
 */
HeldLock *
fencing_held_find(int64 key, bool permit)
{
	HeldLock   *held = fencing_held.locks;
	uint32		b;
	uint32		e;

	if (fencing_held.count == 0)
		return NULL;

	b = held_hash(key) & fencing_held.mask;
	while ((e = fencing_held.index[b]) != 0)
	{
		if (held[e - 1].key == key && (held[e - 1].permit != 0) == permit)
			return &held[e - 1];
		b = (b + 1) & fencing_held.mask;
	}
	return NULL;
}

/*
 * Remember a grant, with its canonical name.  fencing_held_reserve() must
 * have made room.
 */
HeldLock *
fencing_held_insert(const LockRequest *req, int64 token, int slot)
{
	uint32		b = held_hash(req->key) & fencing_held.mask;
	HeldLock   *h;

	Assert(fencing_held.count < fencing_held.capacity);
	while (fencing_held.index[b] != 0)
		b = (b + 1) & fencing_held.mask;

	h = &fencing_held.locks[fencing_held.count];
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
	fencing_held.index[b] = (uint32) fencing_held.count + 1;
	fencing_held.count++;
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
void
fencing_held_pop(void)
{
	HeldLock   *h = &fencing_held.locks[fencing_held.count - 1];

	held_forget(h);
	fencing_held.index[h->bucket] = 0;
	fencing_held.count--;
	fencing_held.settled = Min(fencing_held.settled, fencing_held.count);
}

/*
 * Extend the prefix of entries known to belong to the transaction's own
 * resource owner.
 */
static void
held_settle(void)
{
	while (fencing_held.settled < fencing_held.count &&
		   fencing_held.locks[fencing_held.settled].owner == TopTransactionResourceOwner)
		fencing_held.settled++;
}

/*
 * Core has released the locks of a resource owner (a subtransaction or a
 * cursor aborting): forget the entries it held.  They are usually the
 * newest; otherwise the table is compacted, keeping the order of the rest.
 */
static void
held_drop_owned_by(ResourceOwner owner)
{
	HeldLock   *held = fencing_held.locks;
	int			kept;
	int			i;

	while (fencing_held.count > fencing_held.settled &&
		   held[fencing_held.count - 1].owner == owner)
		fencing_held_pop();
	for (i = fencing_held.settled; i < fencing_held.count; i++)
	{
		if (held[i].owner == owner)
			break;
	}
	if (i == fencing_held.count)
		return;
	for (kept = i; i < fencing_held.count; i++)
	{
		if (held[i].owner == owner)
		{
			held_forget(&held[i]);
			continue;
		}
		held[kept++] = held[i];
	}
	fencing_held.count = kept;
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

	for (i = fencing_held.settled; i < fencing_held.count; i++)
	{
		if (fencing_held.locks[i].owner == owner)
			fencing_held.locks[i].owner = parent;
	}
	held_settle();
}

/*
 * Free the slot of a lock being taken or awaited that was not granted.
 */
void
fencing_release_pending(void)
{
	if (fencing_pending.slot >= 0)
	{
		fencing_lock_registry_release(fencing_pending.slot);
		fencing_pending.slot = -1;
		fencing_pending.subid = InvalidSubTransactionId;
		/* a permit's lock granted but not yet entered in the table */
		if (fencing_pending.permit_key_set)
			fencing_lock_registry_permit_freed(fencing_pending.permit_key);
		fencing_pending.permit_key_set = false;
	}
}

/*
 * The transaction ended and core has released every lock: forget them all
 * and free their slots.
 */
static void
release_all(void)
{
	fencing_release_pending();
	while (fencing_held.count > 0)
		fencing_held_pop();
	fencing_held.settled = 0;
	lease_limit_count = 0;
	lease_use_limits = 0;
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

	if (fencing_pending.slot >= 0 && fencing_pending.subid >= subid)
		fencing_release_pending();
	for (i = 0; leases_held > 0 && i < fencing_held.count; i++)
	{
		if (fencing_held.locks[i].lease_subid == subid)
		{
			fencing_held.locks[i].lease_subid = InvalidSubTransactionId;
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
	if (fencing_held.count == 0 && fencing_pending.slot < 0 &&
		lease_limit_count == 0)
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
 * lease or to end it, and the view could not say who holds it.  It is
 * refused too after use_lease(): the prepared transaction would keep the
 * lease's resource fence locked with no idle limit, and the holder's next
 * batch would wait for it until someone ended it by hand.  The slots
 * themselves are freed by locks_resource_release, after the locks.
 */
static void
locks_xact_callback(XactEvent event, void *arg)
{
	if (event != XACT_EVENT_PRE_PREPARE)
		return;
	if (fencing_held.count > 0)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("cannot PREPARE a transaction that holds fencing locks"),
				 errdetail("A prepared transaction would keep the lock with no session to renew or end it."),
				 errhint("Commit or roll back instead, or take the lock in a transaction that is not prepared.")));
	if (lease_use_limits > 0)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("cannot PREPARE a transaction that used a lease"),
				 errdetail("fencing.use_lease() locked the lease's resource fence for this transaction; a prepared transaction would keep it locked with no session and no idle limit, and the next batch would wait for it."),
				 errhint("Commit or roll back instead.")));
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
		{
			if (lease_limits[lease_limit_count - 1].by_use)
				lease_use_limits--;
			lease_limit_count--;
		}
		return;
	}
	if (event != SUBXACT_EVENT_COMMIT_SUB)
		return;
	for (i = lease_limit_count - 1;
		 i >= 0 && lease_limits[i].subid == mySubid; i--)
		lease_limits[i].subid = parentSubid;
	for (i = 0; leases_held > 0 && i < fencing_held.count; i++)
	{
		if (fencing_held.locks[i].lease_subid == mySubid)
			fencing_held.locks[i].lease_subid = parentSubid;
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
 * abnormally, so every lock it was granted gets its lock-delay (delay.c).
 * Runs before ShutdownPostgres aborts the transaction, so the locks are
 * still held and nobody has been granted them.  Locks of a group still
 * being taken have no token yet and guarded nothing.
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
	for (i = 0; i < fencing_held.count; i++)
	{
		FencingLockDelay delay;

		if (fencing_held.locks[i].token == 0)
			continue;
		fencing_lock_registry_describe(fencing_held.locks[i].slot, &delay);
		fencing_lock_delay_start(&delay);
	}
}

/*
 * The leases of the transaction (tx_lease.c).  lease() took a lease on
 * the lock of entry h: it belongs to the (sub)transaction running now,
 * unless an outer one took one on the same lock already.
 */
void
fencing_held_take_lease(HeldLock *h)
{
	if (h->lease_subid != InvalidSubTransactionId)
		return;
	h->lease_subid = GetCurrentSubTransactionId();
	leases_held++;
}

/*
 * Make room for one more idle limit, before the lease takes its lock, so
 * that running out of memory holds nothing.
 */
void
fencing_lease_limit_reserve(void)
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
 * A lease with this ttl was granted (by_use: a lease that outlives the
 * transaction was used in it): it is the limit in force from now on if it
 * is shorter than the one in force.  A use is always recorded, until its
 * subtransaction rolls back: it keeps the idle limit and the PREPARE
 * refusal after a lock that set a shorter limit is gone (a cursor that
 * failed).  fencing_lease_limit_reserve() must have made room.
 */
void
fencing_lease_limit_push(int ttl_ms, bool by_use)
{
	if (lease_limit_count > 0 &&
		lease_limits[lease_limit_count - 1].ttl_ms <= ttl_ms)
	{
		/*
		 * A shorter limit is in force; a use is still recorded (with that
		 * limit), so that it outlives the lock behind the shorter one.
		 */
		if (!by_use ||
			(lease_limits[lease_limit_count - 1].by_use &&
			 lease_limits[lease_limit_count - 1].subid == GetCurrentSubTransactionId()))
			return;
		ttl_ms = lease_limits[lease_limit_count - 1].ttl_ms;
	}
	Assert(lease_limit_count < lease_limit_capacity);
	lease_limits[lease_limit_count].subid = GetCurrentSubTransactionId();
	lease_limits[lease_limit_count].ttl_ms = ttl_ms;
	lease_limits[lease_limit_count].by_use = by_use;
	lease_limit_count++;
	if (by_use)
		lease_use_limits++;
}

/*
 * The idle limit the transaction's leases impose, in milliseconds, or 0
 * when it holds no lease and used none.
 */
int
fencing_lease_ttl_in_force(void)
{
	if ((leases_held == 0 && lease_use_limits == 0) || lease_limit_count == 0)
		return 0;
	return lease_limits[lease_limit_count - 1].ttl_ms;
}
