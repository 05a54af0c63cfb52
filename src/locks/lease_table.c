/*-------------------------------------------------------------------------
 *
 * lease_table.c
 *		The shared table of the leases that outlive a transaction: its
 *		memory, its index, its heaps, its dirty ring, its counts by role,
 *		its filter and the condition variables of its waiters.
 *
 * One table of leases, keyed by (database, lock key).  An entry keeps its
 * number while it is in use, and that number is its slot in the state
 * file (lease_store.c), so that the file can be written one entry at a
 * time.  Around the entries:
 *
 *	- an open-addressing index from (database, key) to the entry;
 *	- two binary heaps of the entries in use, one of the live leases by
 *	  expiry and one of the ended ones by the moment they ended, so that
 *	  the next lapse and the next end of a lock-delay are found without a
 *	  pass over the table;
 *	- the dirty ring: each entry changed since the file last got it, once,
 *	  oldest first;
 *	- the number of entries of each role, for fencing.max_leases_per_role;
 *	- the filter of the grant paths: counters at three places per
 *	  (database, key), read without the lock.
 *
 * Whoever changes the table holds its LWLock exclusively (leases.c,
 * lease_store.c); every operation here costs O(log n) at most.  An entry
 * is written between two increments of its change counter, so that the
 * postmaster, which copies entries without the lock when it lets go of
 * shared memory, can skip an entry a dying backend left half written.
 *
 * Copyright (c) 2026, the fencing developers
 *
 * IDENTIFICATION
 *		src/locks/lease_table.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/condition_variable.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/hsearch.h"

#include "locks/locks.h"

#define LEASE_ROLES_SHMEM_NAME	"fencing lease roles"

/* The number of entries of one role. */
typedef struct LeaseRoleCount
{
	Oid			roleid;			/* the hash key */
	int			count;
} LeaseRoleCount;

LeaseTable *fencing_lease_table = NULL;
Lease	   *fencing_lease_entries = NULL;
pg_atomic_uint32 *fencing_lease_filter = NULL;
uint32		fencing_lease_filter_mask = 0;

static uint32 *lease_index = NULL;
static int32 *lease_free = NULL;
static int32 *lease_heaps[2] = {NULL, NULL};
static int32 *lease_dirty = NULL;
static HTAB *lease_roles = NULL;

/* Slots of the index: a power of two, at least twice the capacity. */
static uint32
lease_index_slots(int capacity)
{
	uint32		slots = 1;

	while (slots < (uint32) capacity * 2)
		slots <<= 1;
	return slots;
}

/* Counters of the grant filter: a power of two. */
static uint32
lease_filter_slots(int capacity)
{
	uint32		slots = LEASE_GRANT_FILTER_MIN;

	while (slots < (uint64) capacity * LEASE_GRANT_FILTER_PER_ENTRY)
		slots <<= 1;
	return slots;
}

/* The bytes of the arrays that follow the table's header. */
static Size
lease_arrays_size(int capacity)
{
	Size		size = MAXALIGN(mul_size(lease_index_slots(capacity),
										 sizeof(uint32)));

	size = add_size(size, MAXALIGN(mul_size(capacity, sizeof(Lease))));
	/* the free stack, two heaps and the dirty ring */
	size = add_size(size, mul_size(4, MAXALIGN(mul_size(capacity, sizeof(int32)))));
	return add_size(size, mul_size(lease_filter_slots(capacity),
								   sizeof(pg_atomic_uint32)));
}

/* Bytes of shared memory the table takes for this many entries. */
Size
fencing_lease_table_size(int capacity)
{
	Size		size = MAXALIGN(sizeof(LeaseTable));

	size = add_size(size, lease_arrays_size(capacity));
	return add_size(size, hash_estimate_size(capacity, sizeof(LeaseRoleCount)));
}

/* Point the file's pointers at the arrays after the header at base. */
static void
lease_arrays_locate(char *base, int capacity)
{
	char	   *p = base + MAXALIGN(sizeof(LeaseTable));
	Size		ints = MAXALIGN(mul_size(capacity, sizeof(int32)));

	lease_index = (uint32 *) p;
	p += MAXALIGN(mul_size(lease_index_slots(capacity), sizeof(uint32)));
	fencing_lease_entries = (Lease *) p;
	p += MAXALIGN(mul_size(capacity, sizeof(Lease)));
	lease_free = (int32 *) p;
	p += ints;
	lease_heaps[LEASE_HEAP_LIVE] = (int32 *) p;
	p += ints;
	lease_heaps[LEASE_HEAP_ENDED] = (int32 *) p;
	p += ints;
	lease_dirty = (int32 *) p;
	p += ints;
	fencing_lease_filter = (pg_atomic_uint32 *) p;
	fencing_lease_filter_mask = lease_filter_slots(capacity) - 1;
}

/* An empty table of the given capacity. */
static void
lease_table_init(LeaseTable *table, int capacity, uint32 index_mask)
{
	int			i;

	memset(table, 0, sizeof(LeaseTable));
	table->lock = &(GetNamedLWLockTranche(LEASE_TABLE_SHMEM_NAME))->lock;
	table->capacity = capacity;
	table->index_mask = index_mask;
	table->nfree = capacity;
	table->last_lsn = InvalidXLogRecPtr;
	pg_atomic_init_u32(&table->keeper_wanted, 0);
	pg_atomic_init_u64(&table->file_seq, 0);
	pg_atomic_init_u32(&table->flushing, 0);
	ConditionVariableInit(&table->flushed);
	for (i = 0; i <= (int) fencing_lease_filter_mask; i++)
		pg_atomic_init_u32(&fencing_lease_filter[i], 0);
	for (i = 0; i < LEASE_CV_COUNT; i++)
		ConditionVariableInit(&table->cvs[i]);
	memset(lease_index, 0, sizeof(uint32) * (index_mask + 1));
	memset(fencing_lease_entries, 0, sizeof(Lease) * capacity);
	/* popped from the top: entry 0 first */
	for (i = 0; i < capacity; i++)
		lease_free[i] = capacity - 1 - i;
}

/*
 * Find or create the table in shared memory, at postmaster start, after a
 * crash restart, and in each backend that attaches; true when it existed.
 * The caller holds AddinShmemInitLock.
 */
bool
fencing_lease_table_attach(int capacity)
{
	HASHCTL		info;
	bool		found;
	char	   *base;

	base = ShmemInitStruct(LEASE_TABLE_SHMEM_NAME,
						   add_size(MAXALIGN(sizeof(LeaseTable)),
									lease_arrays_size(capacity)),
						   &found);
	fencing_lease_table = (LeaseTable *) base;
	lease_arrays_locate(base, capacity);
	if (!found)
		lease_table_init(fencing_lease_table, capacity,
						 lease_index_slots(capacity) - 1);
	memset(&info, 0, sizeof(info));
	info.keysize = sizeof(Oid);
	info.entrysize = sizeof(LeaseRoleCount);
	lease_roles = ShmemInitHash(LEASE_ROLES_SHMEM_NAME, capacity, capacity,
								&info, HASH_ELEM | HASH_BLOBS);
	return found;
}

/* Where (database, key) starts probing in the index. */
static inline uint32
lease_home(Oid dboid, int64 key)
{
	return fencing_lease_hash(dboid, key) & fencing_lease_table->index_mask;
}

/* Count an entry of (database, key) in (one) or out (-1) of the grant filter. */
static void
lease_filter_count(Oid dboid, int64 key, int one)
{
	uint64		hash = fencing_lease_filter_hash(dboid, key);
	int			probe;

	for (probe = 0; probe < LEASE_GRANT_FILTER_PROBES; probe++)
		pg_atomic_fetch_add_u32(&fencing_lease_filter[fencing_lease_filter_place(hash, probe)],
								one);
}

/* The entry of (database, key), or -1. */
int
fencing_lease_find(Oid dboid, int64 key)
{
	uint32		mask = fencing_lease_table->index_mask;
	uint32		s = lease_home(dboid, key);
	uint32		e;

	while ((e = lease_index[s]) != 0)
	{
		const LeaseData *d = &fencing_lease_entries[e - 1].data;

		if (d->key == key && d->dboid == dboid)
			return (int) e - 1;
		s = (s + 1) & mask;
	}
	return -1;
}

/* The index slot that points to an entry. */
static uint32
lease_slot_of(int entry)
{
	const LeaseData *d = &fencing_lease_entries[entry].data;
	uint32		mask = fencing_lease_table->index_mask;
	uint32		s = lease_home(d->dboid, d->key);

	while (lease_index[s] != (uint32) entry + 1)
		s = (s + 1) & mask;
	return s;
}

/*
 * Empty an index slot, moving later slots of the probe run back into the
 * hole where their probe sequence allows (linear probing without
 * tombstones).
 */
static void
lease_index_delete(uint32 hole)
{
	uint32		mask = fencing_lease_table->index_mask;
	uint32		j = hole;

	lease_index[hole] = 0;
	for (;;)
	{
		uint32		e;
		uint32		home;

		j = (j + 1) & mask;
		if ((e = lease_index[j]) == 0)
			return;
		home = lease_home(fencing_lease_entries[e - 1].data.dboid,
						  fencing_lease_entries[e - 1].data.key);
		if (((j - hole) & mask) <= ((j - home) & mask))
		{
			lease_index[hole] = e;
			lease_index[j] = 0;
			hole = j;
		}
	}
}

/* Point an index slot of the key's probe run at the entry. */
static void
lease_index_insert(int entry)
{
	const LeaseData *d = &fencing_lease_entries[entry].data;
	uint32		mask = fencing_lease_table->index_mask;
	uint32		s = lease_home(d->dboid, d->key);

	while (lease_index[s] != 0)
		s = (s + 1) & mask;
	lease_index[s] = (uint32) entry + 1;
}

/*
 * The heaps.  Each is ordered by expires_at: for a live lease its expiry,
 * for an ended one the moment it ended (its lock-delay runs from there).
 */

static inline TimestampTz
lease_heap_key(int entry)
{
	return fencing_lease_entries[entry].data.expires_at;
}

static inline void
lease_heap_set(int heap, int pos, int entry)
{
	lease_heaps[heap][pos] = entry;
	fencing_lease_entries[entry].heap_pos = pos;
}

static void
lease_heap_sift_up(int heap, int pos)
{
	int			entry = lease_heaps[heap][pos];
	TimestampTz key = lease_heap_key(entry);

	while (pos > 0)
	{
		int			parent = (pos - 1) / 2;

		if (lease_heap_key(lease_heaps[heap][parent]) <= key)
			break;
		lease_heap_set(heap, pos, lease_heaps[heap][parent]);
		pos = parent;
	}
	lease_heap_set(heap, pos, entry);
}

static void
lease_heap_sift_down(int heap, int pos)
{
	int			count = fencing_lease_table->heap_count[heap];
	int			entry = lease_heaps[heap][pos];
	TimestampTz key = lease_heap_key(entry);

	for (;;)
	{
		int			child = 2 * pos + 1;

		if (child >= count)
			break;
		if (child + 1 < count &&
			lease_heap_key(lease_heaps[heap][child + 1]) <
			lease_heap_key(lease_heaps[heap][child]))
			child++;
		if (key <= lease_heap_key(lease_heaps[heap][child]))
			break;
		lease_heap_set(heap, pos, lease_heaps[heap][child]);
		pos = child;
	}
	lease_heap_set(heap, pos, entry);
}

static void
lease_heap_insert(int heap, int entry)
{
	int			pos = fencing_lease_table->heap_count[heap]++;

	fencing_lease_entries[entry].heap = (uint8) heap;
	lease_heap_set(heap, pos, entry);
	lease_heap_sift_up(heap, pos);
}

static void
lease_heap_delete(int entry)
{
	int			heap = fencing_lease_entries[entry].heap;
	int			pos = fencing_lease_entries[entry].heap_pos;
	int			last = --fencing_lease_table->heap_count[heap];
	int			moved;

	if (pos == last)
		return;
	moved = lease_heaps[heap][last];
	lease_heap_set(heap, pos, moved);
	lease_heap_sift_up(heap, pos);
	lease_heap_sift_down(heap, fencing_lease_entries[moved].heap_pos);
}

/* Put an entry whose data just changed where its heap wants it. */
static void
lease_heap_place(int entry, bool is_new)
{
	Lease	   *lease = &fencing_lease_entries[entry];
	int			heap = fencing_lease_ended(&lease->data) ?
		LEASE_HEAP_ENDED : LEASE_HEAP_LIVE;

	if (!is_new && lease->heap == heap)
	{
		lease_heap_sift_up(heap, lease->heap_pos);
		lease_heap_sift_down(heap, lease->heap_pos);
		return;
	}
	if (!is_new)
		lease_heap_delete(entry);
	lease_heap_insert(heap, entry);
}

/* The entry at the top of a heap (the soonest), or -1 when it is empty. */
int
fencing_lease_heap_top(int heap)
{
	return fencing_lease_table->heap_count[heap] > 0 ? lease_heaps[heap][0] : -1;
}

/*
 * The entry at position pos of a heap, or -1 past its end: between them,
 * the two heaps hold every entry in use, for whoever must see them all.
 */
int
fencing_lease_heap_entry(int heap, int pos)
{
	return pos < fencing_lease_table->heap_count[heap] ? lease_heaps[heap][pos] : -1;
}

/*
 * The dirty ring.
 */

/* The entry must reach the file; it goes in the ring once. */
static void
lease_dirty_push(int entry)
{
	LeaseTable *table = fencing_lease_table;

	if (fencing_lease_entries[entry].dirty)
		return;
	fencing_lease_entries[entry].dirty = true;
	lease_dirty[(table->dirty_head + table->dirty_count) % table->capacity] = entry;
	table->dirty_count++;
}

/*
 * The entry changed longest ago that the file has not got yet, taken out
 * of the ring, or -1 when there is none.
 */
int
fencing_lease_dirty_pop(void)
{
	LeaseTable *table = fencing_lease_table;
	int			entry;

	if (table->dirty_count == 0)
		return -1;
	entry = lease_dirty[table->dirty_head];
	table->dirty_head = (table->dirty_head + 1) % table->capacity;
	table->dirty_count--;
	fencing_lease_entries[entry].dirty = false;
	return entry;
}

/* An entry taken out of the ring whose write failed goes back in. */
void
fencing_lease_dirty_again(int entry)
{
	lease_dirty_push(entry);
}

/*
 * The counts by role.
 */

/* How many entries the role has. */
int
fencing_lease_role_count(Oid roleid)
{
	LeaseRoleCount *rc = hash_search(lease_roles, &roleid, HASH_FIND, NULL);

	return rc != NULL ? rc->count : 0;
}

/*
 * One entry more (delta 1) or fewer (-1) for the role.  There are never
 * more roles with entries than entries, which the hash table was sized
 * for.
 */
static void
lease_role_add(Oid roleid, int delta)
{
	bool		found;
	LeaseRoleCount *rc = hash_search(lease_roles, &roleid,
									 delta > 0 ? HASH_ENTER_NULL : HASH_FIND,
									 &found);

	if (rc == NULL)
	{
		/* an entry more for a role needs room, made before anything changed */
		if (delta > 0)
			elog(ERROR, "out of shared memory for the fencing lease counts of role %u",
				 roleid);
		return;
	}
	if (delta > 0 && !found)
		rc->count = 0;
	rc->count += delta;
	if (rc->count <= 0)
		(void) hash_search(lease_roles, &roleid, HASH_REMOVE, NULL);
}

/*
 * Entries.
 */

/* Write an entry's data, bracketed by its change counter. */
static void
lease_write(Lease *lease, const LeaseData *data, bool in_use, uint64 seq)
{
	lease->changecount++;
	pg_write_barrier();
	lease->in_use = in_use;
	lease->seq = seq;
	if (data != NULL)
		lease->data = *data;
	else
		memset(&lease->data, 0, sizeof(LeaseData));
	pg_write_barrier();
	lease->changecount++;
}

/*
 * Store a lease as change seq: over entry (another state of the same
 * name's lease, or a new lease replacing an ended one), or, with entry -1,
 * in a free entry, for which the caller has made room.  Returns the
 * entry.  The caller holds the lock exclusively.
 */
int
fencing_lease_put(int entry, const LeaseData *data, uint64 seq)
{
	LeaseTable *table = fencing_lease_table;
	Lease	   *lease;

	if (entry >= 0)
	{
		lease = &fencing_lease_entries[entry];
		Assert(lease->in_use && lease->data.key == data->key &&
			   lease->data.dboid == data->dboid);
		if (lease->data.roleid != data->roleid)
		{
			lease_role_add(data->roleid, 1);
			lease_role_add(lease->data.roleid, -1);
		}
		lease_write(lease, data, true, seq);
		lease_heap_place(entry, false);
		lease_dirty_push(entry);
		return entry;
	}

	Assert(table->nfree > 0);
	lease_role_add(data->roleid, 1);
	entry = lease_free[--table->nfree];
	lease = &fencing_lease_entries[entry];
	lease_write(lease, data, true, seq);
	lease_index_insert(entry);
	lease_heap_place(entry, true);
	lease_dirty_push(entry);
	lease_filter_count(data->dboid, data->key, 1);
	pg_write_barrier();
	table->count++;
	return entry;
}

/*
 * At start, before anyone uses the table: put a lease read from slot entry
 * of the state file back into that same entry, which is free.  The free
 * stack is made anew by fencing_lease_loaded().
 */
void
fencing_lease_load_at(int entry, const LeaseData *data, uint64 seq)
{
	Lease	   *lease = &fencing_lease_entries[entry];

	Assert(!lease->in_use);
	lease_role_add(data->roleid, 1);
	lease_write(lease, data, true, seq);
	lease_index_insert(entry);
	lease_heap_place(entry, true);
	lease_filter_count(data->dboid, data->key, 1);
	fencing_lease_table->count++;
}

/*
 * At start, once the file is read: the free stack of the entries not in
 * use (the lowest on top), and nothing dirty, since the file holds it all.
 */
void
fencing_lease_loaded(void)
{
	LeaseTable *table = fencing_lease_table;
	int			i;

	table->nfree = 0;
	for (i = table->capacity - 1; i >= 0; i--)
	{
		fencing_lease_entries[i].dirty = false;
		if (!fencing_lease_entries[i].in_use)
			lease_free[table->nfree++] = i;
	}
	table->dirty_head = 0;
	table->dirty_count = 0;
}

/* Drop an entry as change seq; it becomes free.  Exclusive lock held. */
void
fencing_lease_remove(int entry, uint64 seq)
{
	LeaseTable *table = fencing_lease_table;
	Lease	   *lease = &fencing_lease_entries[entry];
	Oid			dboid = lease->data.dboid;
	int64		key = lease->data.key;

	Assert(lease->in_use);
	lease_index_delete(lease_slot_of(entry));
	lease_heap_delete(entry);
	lease_role_add(lease->data.roleid, -1);
	lease_write(lease, NULL, false, seq);
	lease_dirty_push(entry);
	lease_free[table->nfree++] = entry;
	table->count--;
	lease_filter_count(dboid, key, -1);
}

/*
 * Where an entry stands at now: held until *until, delayed until *until
 * (ended, or past its expiry, under fencing.lock_delay), or gone.
 */
LeaseState
fencing_lease_state(const Lease *lease, TimestampTz now, TimestampTz *until)
{
	TimestampTz gone;

	if (!fencing_lease_ended(&lease->data) && now < lease->data.expires_at)
	{
		*until = lease->data.expires_at;
		return LEASE_LIVE;
	}
	gone = TimestampTzPlusMilliseconds(lease->data.expires_at,
									   fencing_lock_delay_ms());
	if (now < gone)
	{
		*until = gone;
		return LEASE_DELAYED;
	}
	*until = 0;
	return LEASE_GONE;
}
