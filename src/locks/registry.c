/*-------------------------------------------------------------------------
 *
 * registry.c
 *		The bounded shared table behind the view fencing.locks.
 *
 * The lock itself is the core advisory lock (grant.c); this table only
 * names it, so that a DBA can see who holds or awaits which fencing lock and
 * so that a busy name can be told apart from a different name whose key
 * collides with it (L6).
 *
 * The table has fencing.max_tracked_locks slots, fixed at server start.  A
 * backend claims a slot for each lock it takes or awaits without taking any
 * lock: it compare-exchanges the slot's owner word from 0 to its PGPROC
 * number plus one, starting at key % capacity and probing linearly, first
 * over a bounded window and then over the rest of the table.  The owner
 * words sit in a dense array of their own, so a probe over a crowded
 * stretch of the table reads a few cache lines, not one slot each.  Only
 * the owner ever writes the other fields, bracketed by a per-slot change
 * counter that is odd while a write is in progress, so readers (the view,
 * the collision check) copy a slot consistently by retrying until they see
 * the same even counter before and after.
 *
 * The collision check must see every backend that uses a key, so the slot
 * brackets the core lock on both sides (grant.c and held.c):
 *
 *	- it is claimed, in state "acquiring", before LockAcquire is called, and
 *	  only then marked waiting or granted; a busy LockAcquire therefore
 *	  always finds the holder's slot published;
 *	- it is freed only after core has released the lock (at
 *	  RESOURCE_RELEASE_AFTER_LOCKS), and every free first bumps a release
 *	  counter kept for the key's home position.  A busy check that found no
 *	  colliding slot compares that counter with the value it read before its
 *	  LockAcquire: if a holder of the key (or of a key with the same home)
 *	  left in between, the check cannot trust its scan and tries again.
 *
 * A semaphore's slots also say which permits are taken, so that a try
 * finds a full semaphore without a LockAcquire per permit, and which
 * backends wait for a permit of the key, so that a freed permit wakes those
 * (by their latches) and no waiter of another semaphore (semaphores.c).
 *
 * A lock that finds no free slot anywhere is refused (SQLSTATE 53400): it
 * could be neither named in the view nor checked for collisions (L6).
 * Claims that had to go past their key's window are counted, and while any
 * exist the collision check scans the whole table instead of the window.
 *
 * Copyright (c) 2026, the fencing developers
 *
 * IDENTIFICATION
 *		src/locks/registry.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_type.h"
#include "commands/dbcommands.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/condition_variable.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/timestamp.h"

#include "locks/locks.h"

/*
 * How many slots a claim tries first, and a collision lookup looks at,
 * starting at key % capacity.  Bounding it keeps both cheap when the table
 * is crowded; a claim that finds no free slot in its window goes on over
 * the rest of the table (and is counted, see outside_claims).
 */
#define REGISTRY_PROBE_WINDOW	256

typedef struct LockSlot
{
	pg_atomic_uint32 changecount;	/* odd while the owner writes data */
	FencingLockSlotData data;
} LockSlot;

/* Slots never share a cache line, so two owners' writes do not collide. */
typedef union PaddedLockSlot
{
	LockSlot	slot;
	char		pad[TYPEALIGN(PG_CACHE_LINE_SIZE, sizeof(LockSlot))];
} PaddedLockSlot;

/*
 * Shared memory holds this header, then the owner words (0 when a slot is
 * free, else the owner's PGPROC slot number + 1), then the release counters (one per
 * home position, bumped whenever a slot of a key with that home is freed),
 * then the slots, each part starting on a cache line.
 */
typedef struct LockRegistry
{
	int			capacity;
	pg_atomic_uint32 outside_claims;	/* slots claimed past their window */
	pg_atomic_uint32 permit_waiters;	/* backends waiting for a permit */
} LockRegistry;

/* GUC fencing.max_tracked_locks */
static int	max_tracked_locks = 4096;

static LockRegistry *registry = NULL;
static pg_atomic_uint32 *owners = NULL;
static pg_atomic_uint32 *releases = NULL;
static PaddedLockSlot *slots = NULL;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

static void registry_shmem_request(void);
static void registry_shmem_startup(void);
static Size registry_size(void);

/*
 * Define the capacity setting and register the shared-memory hooks; called
 * from _PG_init while the postmaster preloads the library.
 */
void
fencing_lock_registry_init(void)
{
	DefineCustomIntVariable("fencing.max_tracked_locks",
							"Number of fencing locks that can be held or awaited at once, cluster-wide.",
							"Each lock needs an entry to be named in fencing.locks and checked for key collisions; a lock that finds none is refused.",
							&max_tracked_locks,
							4096,
							16,
							1000000,
							PGC_POSTMASTER,
							0,
							NULL, NULL, NULL);

	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = registry_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = registry_shmem_startup;
}

/* Bytes of one dense array of per-slot words, rounded to a cache line. */
static Size
registry_word_array_size(void)
{
	return CACHELINEALIGN(mul_size(max_tracked_locks, sizeof(pg_atomic_uint32)));
}

/*
 * Bytes of shared memory the table needs for the configured capacity.
 */
static Size
registry_size(void)
{
	Size		size = CACHELINEALIGN(sizeof(LockRegistry));

	size = add_size(size, registry_word_array_size());	/* owners */
	size = add_size(size, registry_word_array_size());	/* releases */
	size = add_size(size, mul_size(max_tracked_locks, sizeof(PaddedLockSlot)));
	/* ShmemInitStruct aligns the start only to MAXALIGN */
	return add_size(size, PG_CACHE_LINE_SIZE);
}

/*
 * Ask for the table's memory.  This hook runs after every preloaded
 * library's _PG_init, so it is also the place to reserve the "fencing."
 * prefix: by now every part of the extension has defined its settings, and
 * a misspelt fencing.* setting is reported instead of silently ignored.
 */
static void
registry_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();

	MarkGUCPrefixReserved("fencing");
	RequestAddinShmemSpace(registry_size());
}

/*
 * Create the table at postmaster start and after every crash restart; a
 * restart ends every backend, so every slot starts free.
 */
static void
registry_shmem_startup(void)
{
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	registry = ShmemInitStruct("fencing lock registry", registry_size(), &found);
	registry = (LockRegistry *) CACHELINEALIGN(registry);
	owners = (pg_atomic_uint32 *)
		((char *) registry + CACHELINEALIGN(sizeof(LockRegistry)));
	releases = (pg_atomic_uint32 *)
		((char *) owners + registry_word_array_size());
	slots = (PaddedLockSlot *)
		((char *) releases + registry_word_array_size());
	if (!found)
	{
		int			i;

		registry->capacity = max_tracked_locks;
		pg_atomic_init_u32(&registry->outside_claims, 0);
		pg_atomic_init_u32(&registry->permit_waiters, 0);
		for (i = 0; i < registry->capacity; i++)
		{
			LockSlot   *slot = &slots[i].slot;

			pg_atomic_init_u32(&owners[i], 0);
			pg_atomic_init_u32(&releases[i], 0);
			pg_atomic_init_u32(&slot->changecount, 0);
			memset(&slot->data, 0, sizeof(slot->data));
		}
	}
	LWLockRelease(AddinShmemInitLock);
}

/*
 * The owner's write protocol: an odd counter tells readers to retry.  Only
 * the owner writes, so plain reads and writes of the counter suffice; the
 * barriers order them against the data.
 */
static inline void
slot_begin_write(LockSlot *slot)
{
	pg_atomic_write_u32(&slot->changecount,
						pg_atomic_read_u32(&slot->changecount) + 1);
	pg_write_barrier();
}

static inline void
slot_end_write(LockSlot *slot)
{
	pg_write_barrier();
	pg_atomic_write_u32(&slot->changecount,
						pg_atomic_read_u32(&slot->changecount) + 1);
}

/*
 * Copy a slot's fields once, between two reads of its change counter.
 * True when the copy is consistent (no write was in progress or happened
 * meanwhile); the copy is made either way, every length bounded, for a
 * reader that must take a slot a dead backend left half written.
 */
static bool
slot_copy(LockSlot *slot, FencingLockSlotData *copy)
{
	uint32		before = pg_atomic_read_u32(&slot->changecount);

	pg_read_barrier();
	copy->state = slot->data.state;
	copy->namelen = Min(slot->data.namelen, FENCING_NAME_MAX_BYTES);
	copy->mode = slot->data.mode;
	copy->permit = slot->data.permit;
	copy->permits = slot->data.permits;
	copy->dboid = slot->data.dboid;
	copy->roleid = slot->data.roleid;
	copy->pid = slot->data.pid;
	copy->key = slot->data.key;
	copy->token = slot->data.token;
	copy->since = slot->data.since;
	memcpy(copy->name, slot->data.name, copy->namelen);
	pg_read_barrier();
	return (before & 1) == 0 &&
		before == pg_atomic_read_u32(&slot->changecount);
}

/*
 * How a reader waits for an owner's write to end: an owner writes a few
 * fields, so a spin usually suffices, but it can be descheduled or stopped
 * half way; then the reader sleeps a millisecond at a time, answering
 * interrupts, and after about a second takes the copy as it is.
 */
#define SLOT_READ_SPINS		1000
#define SLOT_READ_SLEEPS	1000

/*
 * Copy a slot another backend may be writing.  Retries while a write is in
 * progress or happened during the copy, so that the copy is one the owner
 * published; returns false when the owner's write did not end in time, and
 * the copy is then as it was (every length bounded).
 */
static bool
slot_read(LockSlot *slot, FencingLockSlotData *copy)
{
	int			tries;

	for (tries = 0; !slot_copy(slot, copy); tries++)
	{
		if (tries >= SLOT_READ_SPINS + SLOT_READ_SLEEPS)
			return false;
		if (tries < SLOT_READ_SPINS)
			SPIN_DELAY();
		else
		{
			CHECK_FOR_INTERRUPTS();
			pg_usleep(1000L);
		}
	}
	return true;
}

/*
 * The probe sequence of a key: claiming a slot and looking for a colliding
 * holder must visit the same slots in the same order, or the collision
 * check (L6) would miss holders that claim placed elsewhere.  Position 0 is
 * the key's home.
 */
static inline int
probe_window(void)
{
	return Min(registry->capacity, REGISTRY_PROBE_WINDOW);
}

static inline int
probe_slot(int64 key, int i)
{
	return (int) (((uint64) key + (uint64) i) % (uint64) registry->capacity);
}

/* How far past its key's home a slot lies. */
static inline int
probe_distance(int64 key, int slotno)
{
	int			home = probe_slot(key, 0);

	return (slotno - home + registry->capacity) % registry->capacity;
}

/*
 * Claim a slot, in state "acquiring", for a lock this backend is about to
 * take, and publish its name.  The caller then calls LockAcquire: anyone
 * who finds the lock busy from now on can see who uses the key.  Returns
 * the slot number.  mode says how the name is held (for a semaphore's
 * permit, which one of how many).  Takes no lock and allocates nothing; a
 * full table is an error, raised before any lock is taken, because a lock
 * without a slot could not be checked for collisions (L6).
 */
int
fencing_lock_registry_claim(int64 key, const char *name, int namelen,
							FencingLockMode mode, int permit, int permits)
{
	uint32		me = (uint32) FENCING_MY_PROC_SLOT + 1;
	int			i;

	for (i = 0; i < registry->capacity; i++)
	{
		int			n = probe_slot(key, i);
		LockSlot   *slot = &slots[n].slot;
		uint32		expected = 0;

		if (pg_atomic_read_u32(&owners[n]) != 0)
			continue;
		if (!pg_atomic_compare_exchange_u32(&owners[n], &expected, me))
			continue;

		/* counted before the slot is published, so no check can miss it */
		if (unlikely(i >= probe_window()))
			pg_atomic_fetch_add_u32(&registry->outside_claims, 1);

		slot_begin_write(slot);
		slot->data.state = LOCK_SLOT_ACQUIRING;
		slot->data.namelen = (uint8) namelen;
		slot->data.mode = (uint8) mode;
		slot->data.permit = (uint16) permit;
		slot->data.permits = (uint16) permits;
		slot->data.dboid = MyDatabaseId;
		slot->data.roleid = GetSessionUserId();
		slot->data.pid = MyProcPid;
		slot->data.key = key;
		slot->data.token = 0;
		slot->data.since = GetCurrentStatementStartTimestamp();
		memcpy(slot->data.name, name, namelen);
		slot_end_write(slot);
		return n;
	}

	ereport(ERROR,
			(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
			 errmsg("too many fencing locks held or awaited at once"),
			 errdetail("All %d entries of fencing.max_tracked_locks are in use; a lock without an entry could not be checked for key collisions, so none was taken.",
					   registry->capacity),
			 errhint("Raise fencing.max_tracked_locks (it takes effect at server restart), or hold fewer locks at once.")));
	return -1;					/* keep the compiler quiet */
}

/*
 * The owner changes its slot's state (and, once granted, its token).
 */
static void
slot_set_state(int slotno, FencingLockSlotState state, int64 token, bool stamp)
{
	LockSlot   *slot = &slots[slotno].slot;

	slot_begin_write(slot);
	slot->data.state = state;
	slot->data.token = token;
	if (stamp)
		slot->data.since = GetCurrentTimestamp();
	slot_end_write(slot);
}

/*
 * The lock was busy and fencing.lock() is about to wait in core's queue.
 * The collision check still counts the slot: the grant can happen at any
 * moment inside LockAcquire, before the owner can say so.
 */
void
fencing_lock_registry_wait(int slotno)
{
	slot_set_state(slotno, LOCK_SLOT_WAITING, 0, false);
}

/*
 * The lock was granted: publish the token.  After a wait, "since" becomes
 * the moment of the grant; an immediate grant keeps the statement's start.
 */
void
fencing_lock_registry_grant(int slotno, int64 token, bool after_wait)
{
	slot_set_state(slotno, LOCK_SLOT_GRANTED, token, after_wait);
}

/*
 * The owner of a semaphore's slot got permit number permit.
 */
void
fencing_lock_registry_set_permit(int slotno, int permit)
{
	LockSlot   *slot = &slots[slotno].slot;

	slot_begin_write(slot);
	slot->data.permit = (uint16) permit;
	slot_end_write(slot);
}

/* How many slots a scan for the users of a key looks at. */
static inline int
probe_limit(void)
{
	return pg_atomic_read_u32(&registry->outside_claims) > 0 ?
		registry->capacity : probe_window();
}

/*
 * Copy slot n when it is in use for key in this database; false when it is
 * not, or when its owner's write did not end in time (a torn copy may mix
 * two owners' data: it names nobody).
 */
static bool
slot_of_key(int64 key, int n, FencingLockSlotData *copy)
{
	LockSlot   *slot = &slots[n].slot;

	/* cheap unsynchronised filter; the copy below is the real check */
	if (pg_atomic_read_u32(&owners[n]) == 0 || slot->data.key != key)
		return false;
	return slot_read(slot, copy) && copy->state != LOCK_SLOT_FREE &&
		copy->key == key && copy->dboid == MyDatabaseId;
}

/*
 * The permits of a key that the registry shows taken in this database:
 * taken[i - 1] is set for each permit i of 1..permits whose slot is not
 * free.  A permit being taken whose slot does not show it yet is tried by
 * the caller anyway; one whose holder has released it but not yet freed
 * its slot counts as taken, and the wake-up that follows the free
 * (fencing_lock_registry_permit_freed) makes a waiter look again.  Returns
 * how many permits it found taken.
 */
int
fencing_lock_registry_permits_taken(int64 key, int permits, bool *taken)
{
	int			limit = probe_limit();
	int			found = 0;
	int			i;

	memset(taken, 0, sizeof(bool) * permits);
	for (i = 0; i < limit; i++)
	{
		FencingLockSlotData copy;

		if (!slot_of_key(key, probe_slot(key, i), &copy) ||
			copy.mode != FENCING_LOCK_PERMIT ||
			copy.permit < 1 || copy.permit > permits || taken[copy.permit - 1])
			continue;
		taken[copy.permit - 1] = true;
		found++;
	}
	return found;
}

/*
 * This backend starts (1) or stops (-1) waiting for a permit.  A waiter
 * counts itself before its first try, and a release looks for waiters
 * only while some are counted: both sides order their count and their
 * lock with a full barrier, so a release that reads none comes before
 * the try of any waiter it could have woken.
 */
void
fencing_lock_registry_permit_waiting(int one)
{
	pg_atomic_fetch_add_u32(&registry->permit_waiters, one);
}

/*
 * A permit of the key was freed (core has released its lock, and its slot
 * is free): wake the backends that wait for a permit of the key in this
 * database, by their latches.  Runs in resource release, so it only reads:
 * a slot that is being written when it looks may be a waiter's, and is
 * woken too (a waiter woken for nothing tries once and sleeps again).
 */
void
fencing_lock_registry_permit_freed(int64 key)
{
	int			limit;
	int			i;

	/* the lock and the slot are free before we look for waiters */
	pg_memory_barrier();
	if (pg_atomic_read_u32(&registry->permit_waiters) == 0)
		return;
	limit = probe_limit();
	for (i = 0; i < limit; i++)
	{
		int			n = probe_slot(key, i);
		uint32		owner = pg_atomic_read_u32(&owners[n]);
		FencingLockSlotData copy;

		if (owner == 0 || slots[n].slot.data.key != key)
			continue;
		if (slot_copy(&slots[n].slot, &copy) &&
			(copy.state != LOCK_SLOT_WAITING || copy.key != key ||
			 copy.dboid != MyDatabaseId || copy.mode != FENCING_LOCK_PERMIT))
			continue;
		SetLatch(&GetPGProcByNumber(owner - 1)->procLatch);
	}
}

/*
 * The release counter of a key's home position, read before LockAcquire
 * and again after a collision scan that found nothing: unchanged means no
 * slot of the key was freed in between, so the scan saw every user of the
 * key that could have made the lock busy.
 */
uint32
fencing_lock_registry_releases(int64 key)
{
	pg_read_barrier();
	return pg_atomic_read_u32(&releases[probe_slot(key, 0)]);
}

/*
 * The lock ended (or the attempt or wait for it did), and core has already
 * released it: free the slot.  The release counter moves first, so a busy
 * check that no longer finds the slot knows to look again.  The slot is
 * marked free before it is handed back, so a reader never sees the previous
 * owner's data under a new owner.
 */
void
fencing_lock_registry_release(int slotno)
{
	LockSlot   *slot = &slots[slotno].slot;
	int64		key = slot->data.key;	/* only the owner writes it */

	pg_atomic_fetch_add_u32(&releases[probe_slot(key, 0)], 1);

	slot_begin_write(slot);
	slot->data.state = LOCK_SLOT_FREE;
	slot_end_write(slot);
	/* the next owner must see the final change counter */
	pg_write_barrier();
	pg_atomic_write_u32(&owners[slotno], 0);

	if (unlikely(probe_distance(key, slotno) >= probe_window()))
		pg_atomic_fetch_sub_u32(&registry->outside_claims, 1);
}

/*
 * Report a hash collision (L6).  Called only when the lock on this key is
 * busy: if any backend uses the key under a different canonical name
 * (holds it, is taking it, or waits for it), waiting or returning NULL
 * would hide the real problem, which is that two names share one lock.
 * Scans the key's window, or the whole table while some claim had to go
 * past its window.
 */
void
fencing_lock_registry_check_collision(int64 key, const char *name, int namelen)
{
	int			limit = probe_limit();
	int			i;

	for (i = 0; i < limit; i++)
	{
		FencingLockSlotData copy;

		if (!slot_of_key(key, probe_slot(key, i), &copy))
			continue;
		if (copy.namelen == namelen && memcmp(copy.name, name, namelen) == 0)
			continue;

		ereport(ERROR,
				(errcode(ERRCODE_FENCING_KEY_COLLISION),
				 errmsg("lock name \"%.*s\" collides with \"%.*s\"",
						namelen, name, (int) copy.namelen, copy.name),
				 errdetail("Both names share the lock key %lld, which process %d %s under the other name.",
						   (long long) key, copy.pid,
						   copy.state == LOCK_SLOT_GRANTED ? "holds" :
						   copy.state == LOCK_SLOT_WAITING ? "is waiting for" :
						   "is taking"),
				 errhint("Rename one of the two locks.")));
	}
}

/*
 * The configured number of slots, for fencing.status().
 */
int
fencing_lock_registry_capacity(void)
{
	return registry ? registry->capacity : 0;
}

/*
 * The configured number of slots, known before shared memory exists: the
 * size of the table of lock delays (delay.c).
 */
int
fencing_lock_registry_configured_capacity(void)
{
	return max_tracked_locks;
}

/* The lock a slot stands for, as its delay would record it. */
static void
slot_describe(const FencingLockSlotData *copy, FencingLockDelay *held)
{
	memset(held, 0, sizeof(*held));
	held->dboid = copy->dboid;
	held->roleid = copy->roleid;
	held->pid = copy->pid;
	held->key = copy->key;
	held->permit = copy->permit;
	held->permits = copy->permits;
	held->mode = copy->mode;
	held->namelen = Min(copy->namelen, FENCING_NAME_MAX_BYTES);
	memcpy(held->name, copy->name, held->namelen);
}

/*
 * The lock of one of this backend's own slots (which only it writes), for
 * the lock-delay its exit starts.
 */
void
fencing_lock_registry_describe(int slotno, FencingLockDelay *held)
{
	slot_describe(&slots[slotno].slot.data, held);
}

/*
 * Report every granted lock to fn, for the postmaster as it lets go of
 * shared memory (delay.c): no backend runs, but one that crashed may
 * have died in the middle of a write, so a slot that never reads
 * consistently is taken as it is, every length is bounded, and no lock is
 * taken.
 */
void
fencing_lock_registry_held_locks(void (*fn) (const FencingLockDelay *held))
{
	int			i;

	if (registry == NULL)
		return;
	for (i = 0; i < Min(registry->capacity, max_tracked_locks); i++)
	{
		FencingLockSlotData copy;
		FencingLockDelay held;
		int			tries;

		if (pg_atomic_read_u32(&owners[i]) == 0)
			continue;
		for (tries = 0; tries < 100; tries++)
			if (slot_copy(&slots[i].slot, &copy))
				break;
		if (copy.state != LOCK_SLOT_GRANTED)
			continue;
		slot_describe(&copy, &held);
		fn(&held);
	}
}

/*
 * The number of slots in use, for fencing.status().  A snapshot: slots come
 * and go while it counts.
 */
int
fencing_lock_registry_count(void)
{
	int			count = 0;
	int			i;

	if (registry == NULL)
		return 0;
	for (i = 0; i < registry->capacity; i++)
	{
		FencingLockSlotData copy;

		if (pg_atomic_read_u32(&owners[i]) == 0)
			continue;
		(void) slot_read(&slots[i].slot, &copy);
		if (copy.state != LOCK_SLOT_FREE)
			count++;
	}
	return count;
}

/*
 * Locks held or awaited without a slot, for fencing.status().  Since 1.1 a
 * lock that finds no slot is refused, so there are none.
 */
int64
fencing_lock_registry_untracked(void)
{
	return 0;
}

/*
 * Pass a copy of every slot in use to fn, for the view fencing.locks (a
 * snapshot: slots come and go while it runs).
 */
void
fencing_lock_registry_rows(void (*fn) (const FencingLockSlotData *copy, void *arg),
						   void *arg)
{
	int			i;

	for (i = 0; i < registry->capacity; i++)
	{
		FencingLockSlotData copy;

		if (pg_atomic_read_u32(&owners[i]) == 0)
			continue;
		(void) slot_read(&slots[i].slot, &copy);
		if (copy.state == LOCK_SLOT_FREE)
			continue;
		fn(&copy, arg);
	}
}
