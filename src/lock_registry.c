/*-------------------------------------------------------------------------
 *
 * lock_registry.c
 *		The bounded shared table behind the view fencing.locks.
 *
 * The lock itself is the core advisory lock (locks.c); this table only
 * names it, so that a DBA can see who holds or awaits which fencing lock and
 * so that a busy name can be told apart from a different name whose key
 * collides with it (L6).
 *
 * The table has fencing.max_tracked_locks slots, fixed at server start.  A
 * backend claims a slot for each lock it takes or awaits without taking any
 * lock: it compare-exchanges the slot's owner word from 0 to its PGPROC
 * number plus one, starting at key % capacity and probing linearly over a
 * bounded window.  The owner words sit in a dense array of their own, so a
 * probe over a crowded stretch of the table reads a few cache lines, not
 * one slot each.  Only the owner ever writes the other fields, bracketed
 * by a per-slot change counter that is odd while a write is in progress,
 * so readers (the view, the collision check) copy a slot consistently by
 * retrying until they see the same even counter before and after.
 *
 * When no slot in the window is free the lock still works; it is counted in
 * a shared "untracked" counter instead, and the view shows that count in a
 * row of its own.  Slots are released at the end of the transaction or
 * subtransaction that took them, including when the backend exits (the xact
 * callbacks in locks.c run during proc exit's AbortOutOfAnyTransaction).
 *
 * Copyright (c) 2026, the fencing developers
 *
 * IDENTIFICATION
 *		src/lock_registry.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "commands/dbcommands.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/ipc.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/timestamp.h"

#include "fencing.h"

PG_FUNCTION_INFO_V1(fencing_lock_rows);

/*
 * How many slots a claim or a collision lookup looks at, starting at
 * key % capacity.  Bounding it keeps both cheap when the table is nearly
 * full; a lock that finds no free slot in its window is counted as
 * untracked.
 */
#define REGISTRY_PROBE_WINDOW	256

/* The fields an owner publishes; readers copy them as a whole. */
typedef struct LockSlotData
{
	bool		valid;			/* false while the slot is free */
	bool		granted;		/* false while the owner waits */
	uint8		namelen;
	Oid			dboid;
	int			pid;
	int64		key;
	int64		token;			/* meaningful only when granted */
	TimestampTz since;
	char		name[FENCING_NAME_MAX_BYTES];
} LockSlotData;

typedef struct LockSlot
{
	pg_atomic_uint32 changecount;	/* odd while the owner writes data */
	LockSlotData data;
} LockSlot;

/* Slots never share a cache line, so two owners' writes do not collide. */
typedef union PaddedLockSlot
{
	LockSlot	slot;
	char		pad[TYPEALIGN(PG_CACHE_LINE_SIZE, sizeof(LockSlot))];
} PaddedLockSlot;

/*
 * Shared memory holds this header, then the owner words (0 when a slot is
 * free, else the owner's pgprocno + 1), then the slots, each part starting
 * on a cache line.
 */
typedef struct LockRegistry
{
	int			capacity;
	pg_atomic_uint64 untracked;	/* locks held or awaited without a slot */
} LockRegistry;

/* GUC fencing.max_tracked_locks */
static int	max_tracked_locks = 1024;

static LockRegistry *registry = NULL;
static pg_atomic_uint32 *owners = NULL;
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
							"Number of fencing locks the view fencing.locks can name at once.",
							"Locks beyond this still work; the view counts them in a row with a NULL name.",
							&max_tracked_locks,
							1024,
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

/*
 * Bytes of shared memory the table needs for the configured capacity.
 */
static Size
registry_size(void)
{
	Size		size = CACHELINEALIGN(sizeof(LockRegistry));

	size = add_size(size, CACHELINEALIGN(mul_size(max_tracked_locks,
												  sizeof(pg_atomic_uint32))));
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
	slots = (PaddedLockSlot *)
		((char *) owners + CACHELINEALIGN(max_tracked_locks *
										  sizeof(pg_atomic_uint32)));
	if (!found)
	{
		int			i;

		registry->capacity = max_tracked_locks;
		pg_atomic_init_u64(&registry->untracked, 0);
		for (i = 0; i < registry->capacity; i++)
		{
			LockSlot   *slot = &slots[i].slot;

			pg_atomic_init_u32(&owners[i], 0);
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
 * Copy a slot another backend may be writing.  Retries while a write is in
 * progress or happened during the copy, so the copy is one the owner
 * published.  Returns whether the slot held a lock.
 */
static bool
slot_read(LockSlot *slot, LockSlotData *copy)
{
	for (;;)
	{
		uint32		before;
		uint32		after;

		before = pg_atomic_read_u32(&slot->changecount);
		pg_read_barrier();
		if ((before & 1) == 0)
		{
			copy->valid = slot->data.valid;
			copy->granted = slot->data.granted;
			copy->namelen = Min(slot->data.namelen, FENCING_NAME_MAX_BYTES);
			copy->dboid = slot->data.dboid;
			copy->pid = slot->data.pid;
			copy->key = slot->data.key;
			copy->token = slot->data.token;
			copy->since = slot->data.since;
			memcpy(copy->name, slot->data.name, copy->namelen);
			pg_read_barrier();
			after = pg_atomic_read_u32(&slot->changecount);
			if (before == after)
				return copy->valid;
		}
		SPIN_DELAY();
	}
}

/*
 * The probe sequence of a key: claiming a slot and looking for a colliding
 * holder must visit the same slots in the same order, or the collision
 * check (L6) would miss holders that claim placed elsewhere.
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

/*
 * Claim a slot for a lock this backend holds (granted) or is about to
 * await, and publish its name.  Returns the slot number, or -1 when the
 * probe window had no free slot; the lock is then counted as untracked and
 * the caller must still pass -1 to fencing_lock_registry_release.  Takes no
 * lock, allocates nothing and cannot fail.
 */
int
fencing_lock_registry_claim(int64 key, const char *name, int namelen,
							int64 token, bool granted)
{
	uint32		me = (uint32) MyProc->pgprocno + 1;
	int			i;

	for (i = 0; i < probe_window(); i++)
	{
		int			n = probe_slot(key, i);
		LockSlot   *slot = &slots[n].slot;
		uint32		expected = 0;

		if (pg_atomic_read_u32(&owners[n]) != 0)
			continue;
		if (!pg_atomic_compare_exchange_u32(&owners[n], &expected, me))
			continue;

		slot_begin_write(slot);
		slot->data.valid = true;
		slot->data.granted = granted;
		slot->data.namelen = (uint8) namelen;
		slot->data.dboid = MyDatabaseId;
		slot->data.pid = MyProcPid;
		slot->data.key = key;
		slot->data.token = token;
		slot->data.since = GetCurrentStatementStartTimestamp();
		memcpy(slot->data.name, name, namelen);
		slot_end_write(slot);
		return n;
	}

	pg_atomic_fetch_add_u64(&registry->untracked, 1);
	return -1;
}

/*
 * A waiter got its lock: publish the token and the moment of the grant.
 */
void
fencing_lock_registry_grant(int slotno, int64 token)
{
	LockSlot   *slot;

	if (slotno < 0)
		return;
	slot = &slots[slotno].slot;
	slot_begin_write(slot);
	slot->data.granted = true;
	slot->data.token = token;
	slot->data.since = GetCurrentTimestamp();
	slot_end_write(slot);
}

/*
 * The lock ended (or the wait for it did): free the slot, or uncount an
 * untracked lock.  The slot is marked invalid before it is handed back, so
 * a reader never sees the previous owner's data under a new owner.
 */
void
fencing_lock_registry_release(int slotno)
{
	LockSlot   *slot;

	if (slotno < 0)
	{
		pg_atomic_fetch_sub_u64(&registry->untracked, 1);
		return;
	}
	slot = &slots[slotno].slot;
	slot_begin_write(slot);
	slot->data.valid = false;
	slot->data.granted = false;
	slot_end_write(slot);
	/* the next owner must see the final change counter */
	pg_write_barrier();
	pg_atomic_write_u32(&owners[slotno], 0);
}

/*
 * The canonical name this backend published in its own slot, or NULL for an
 * untracked lock.  Used when a key this transaction already holds is asked
 * for again: the same key under a different name is a hash collision, not a
 * re-acquisition.  Only the owner writes the slot, so no copy is needed.
 */
const char *
fencing_lock_registry_own_name(int slotno, int *namelen)
{
	LockSlot   *slot;

	if (slotno < 0)
		return NULL;
	slot = &slots[slotno].slot;
	*namelen = slot->data.namelen;
	return slot->data.name;
}

/*
 * Report a hash collision (L6).  Called only when the lock on this key is
 * busy: if the holder, as far as the table knows, took it under a different
 * canonical name, waiting or returning NULL would hide the real problem,
 * which is that two names share one lock.
 */
void
fencing_lock_registry_check_collision(int64 key, const char *name, int namelen)
{
	int			i;

	for (i = 0; i < probe_window(); i++)
	{
		int			n = probe_slot(key, i);
		LockSlot   *slot = &slots[n].slot;
		LockSlotData copy;

		/* cheap unsynchronised filter; the copy below is the real check */
		if (pg_atomic_read_u32(&owners[n]) == 0 || slot->data.key != key)
			continue;
		if (!slot_read(slot, &copy))
			continue;
		if (!copy.granted || copy.key != key || copy.dboid != MyDatabaseId)
			continue;
		if (copy.namelen == namelen && memcmp(copy.name, name, namelen) == 0)
			continue;

		ereport(ERROR,
				(errcode(ERRCODE_FENCING_KEY_COLLISION),
				 errmsg("lock name \"%.*s\" collides with \"%.*s\"",
						namelen, name, (int) copy.namelen, copy.name),
				 errdetail("Both names share the lock key %lld, which process %d holds under the other name.",
						   (long long) key, copy.pid),
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
		LockSlotData copy;

		if (pg_atomic_read_u32(&owners[i]) != 0 &&
			slot_read(&slots[i].slot, &copy))
			count++;
	}
	return count;
}

/*
 * Locks held or awaited without a slot, for fencing.status().
 */
int64
fencing_lock_registry_untracked(void)
{
	return registry ? (int64) pg_atomic_read_u64(&registry->untracked) : 0;
}

/*
 * SQL: fencing.lock_rows(), the set behind the view fencing.locks.  One row
 * per slot in use; then, if some locks found no slot, one row that carries
 * only their count, so that a full table is visible rather than silent.
 */
Datum
fencing_lock_rows(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Oid			cached_dboid = InvalidOid;
	char	   *cached_dbname = NULL;
	int64		untracked;
	int			i;

	InitMaterializedSRF(fcinfo, 0);

	for (i = 0; i < registry->capacity; i++)
	{
		LockSlot   *slot = &slots[i].slot;
		LockSlotData copy;
		Datum		values[8];
		bool		nulls[8];

		if (pg_atomic_read_u32(&owners[i]) == 0 || !slot_read(slot, &copy))
			continue;

		memset(nulls, 0, sizeof(nulls));

		if (copy.dboid != cached_dboid)
		{
			cached_dboid = copy.dboid;
			cached_dbname = get_database_name(copy.dboid);
		}
		if (cached_dbname != NULL)
		{
			Name		dbname = (Name) palloc0(NAMEDATALEN);

			namestrcpy(dbname, cached_dbname);
			values[0] = NameGetDatum(dbname);
		}
		else
			nulls[0] = true;

		values[1] = PointerGetDatum(cstring_to_text_with_len(copy.name,
															 copy.namelen));
		values[2] = Int64GetDatum(copy.key);
		if (copy.granted)
			values[3] = Int64GetDatum(copy.token);
		else
			nulls[3] = true;
		values[4] = Int32GetDatum(copy.pid);
		values[5] = TimestampTzGetDatum(copy.since);
		values[6] = BoolGetDatum(copy.granted);
		nulls[7] = true;

		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}

	untracked = (int64) pg_atomic_read_u64(&registry->untracked);
	if (untracked > 0)
	{
		Datum		values[8];
		bool		nulls[8];

		memset(values, 0, sizeof(values));
		memset(nulls, true, sizeof(nulls));
		values[7] = Int64GetDatum(untracked);
		nulls[7] = false;
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}

	return (Datum) 0;
}
