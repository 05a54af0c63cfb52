/*-------------------------------------------------------------------------
 *
 * lease_table.c
 *		The shared table of the leases that outlive a transaction: its
 *		memory, its index, its filter and the condition variables of its
 *		waiters.
 *
 * One table of leases, keyed by (database, lock key), with an
 * open-addressing index over its entries.  Whoever changes it holds its
 * LWLock exclusively (leases.c, lease_store.c); the grant paths read the
 * filter without the lock.  An entry is written between two increments of
 * its change counter, so that the postmaster, which copies the table
 * without the lock when it lets go of shared memory, can skip an entry a
 * dying backend left half written.
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

#include "locks/locks.h"

LeaseTable *fencing_lease_table = NULL;
uint32	   *fencing_lease_index = NULL;
Lease	   *fencing_lease_entries = NULL;
pg_atomic_uint32 *fencing_lease_filter = NULL;

/* Slots of the index: a power of two, at least twice the capacity. */
static uint32
lease_index_slots(int capacity)
{
	uint32		slots = 1;

	while (slots < (uint32) capacity * 2)
		slots <<= 1;
	return slots;
}

/* Bytes of shared memory the table takes for this many entries. */
Size
fencing_lease_table_size(int capacity)
{
	Size		size = MAXALIGN(sizeof(LeaseTable));

	size = add_size(size, MAXALIGN(mul_size(lease_index_slots(capacity),
											sizeof(uint32))));
	return add_size(size, mul_size(capacity, sizeof(Lease)));
}

/* An empty table of the given capacity. */
static void
lease_table_init(LeaseTable *table, uint32 *index, Lease *entries,
				 int capacity, uint32 index_mask)
{
	int			i;

	table->lock = &(GetNamedLWLockTranche(LEASE_TABLE_SHMEM_NAME))->lock;
	table->capacity = capacity;
	table->index_mask = index_mask;
	table->count = 0;
	table->serving = false;
	table->seq = 0;
	table->changes = 0;
	table->last_known = 0;
	table->last_lsn = InvalidXLogRecPtr;
	table->keeper_latch = NULL;
	pg_atomic_init_u32(&table->keeper_wanted, 0);
	for (i = 0; i < FENCING_LEASE_FILTER_SIZE; i++)
		pg_atomic_init_u32(&table->filter[i], 0);
	for (i = 0; i < LEASE_CV_COUNT; i++)
		ConditionVariableInit(&table->cvs[i]);
	memset(index, 0, sizeof(uint32) * (index_mask + 1));
	memset(entries, 0, sizeof(Lease) * capacity);
}

/*
 * Find or create the table in shared memory, at postmaster start, after a
 * crash restart, and in each backend that attaches; true when it existed.
 * The caller holds AddinShmemInitLock.
 */
bool
fencing_lease_table_attach(int capacity)
{
	bool		found;
	uint32		slots = lease_index_slots(capacity);
	char	   *base;

	base = ShmemInitStruct(LEASE_TABLE_SHMEM_NAME,
						   fencing_lease_table_size(capacity), &found);
	fencing_lease_table = (LeaseTable *) base;
	fencing_lease_index = (uint32 *) (base + MAXALIGN(sizeof(LeaseTable)));
	fencing_lease_entries = (Lease *) ((char *) fencing_lease_index +
									   MAXALIGN(mul_size(slots, sizeof(uint32))));
	if (!found)
		lease_table_init(fencing_lease_table, fencing_lease_index,
						 fencing_lease_entries, capacity, slots - 1);
	fencing_lease_filter = fencing_lease_table->filter;
	return found;
}

/* Where (database, key) starts probing in the index. */
static inline uint32
lease_home(Oid dboid, int64 key)
{
	return fencing_lease_hash(dboid, key) & fencing_lease_table->index_mask;
}

/* The filter counter of (database, key). */
static inline pg_atomic_uint32 *
lease_filter_counter(Oid dboid, int64 key)
{
	return &fencing_lease_table->filter[fencing_lease_hash(dboid, key) &
										(FENCING_LEASE_FILTER_SIZE - 1)];
}

/* The entry of (database, key), or -1. */
int
fencing_lease_find(Oid dboid, int64 key)
{
	uint32		mask = fencing_lease_table->index_mask;
	uint32		s = lease_home(dboid, key);
	uint32		e;

	while ((e = fencing_lease_index[s]) != 0)
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

	while (fencing_lease_index[s] != (uint32) entry + 1)
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

	fencing_lease_index[hole] = 0;
	for (;;)
	{
		uint32		e;
		uint32		home;

		j = (j + 1) & mask;
		if ((e = fencing_lease_index[j]) == 0)
			return;
		home = lease_home(fencing_lease_entries[e - 1].data.dboid,
						  fencing_lease_entries[e - 1].data.key);
		if (((j - hole) & mask) <= ((j - home) & mask))
		{
			fencing_lease_index[hole] = e;
			fencing_lease_index[j] = 0;
			hole = j;
		}
	}
}

/*
 * Write an entry, bracketed by its change counter, for the postmaster's
 * copy without the lock.
 */
static void
lease_write(Lease *lease, const LeaseData *data, bool lapse_noted)
{
	lease->changecount++;
	pg_write_barrier();
	lease->lapse_noted = lapse_noted;
	lease->data = *data;
	pg_write_barrier();
	lease->changecount++;
}

/*
 * Store a lease: over entry (another state of the same name's lease, or a
 * new lease replacing a lapsed one), or, with entry -1, in a new entry,
 * for which the caller has made room.  The caller holds the lock
 * exclusively.
 */
Lease *
fencing_lease_put(int entry, const LeaseData *data)
{
	Lease	   *lease;

	if (entry >= 0)
	{
		lease = &fencing_lease_entries[entry];
		Assert(lease->data.key == data->key && lease->data.dboid == data->dboid);
		lease_write(lease, data,
					lease->lapse_noted && lease->data.token == data->token);
		return lease;
	}

	Assert(fencing_lease_table->count < fencing_lease_table->capacity);
	entry = fencing_lease_table->count;
	lease = &fencing_lease_entries[entry];
	lease_write(lease, data, false);
	{
		uint32		mask = fencing_lease_table->index_mask;
		uint32		s = lease_home(data->dboid, data->key);

		while (fencing_lease_index[s] != 0)
			s = (s + 1) & mask;
		fencing_lease_index[s] = (uint32) entry + 1;
	}
	pg_atomic_fetch_add_u32(lease_filter_counter(data->dboid, data->key), 1);
	pg_write_barrier();
	fencing_lease_table->count++;
	return lease;
}

/* Drop an entry; the last one takes its place.  Exclusive lock held. */
void
fencing_lease_remove(int entry)
{
	int			last = fencing_lease_table->count - 1;
	Lease	   *lease = &fencing_lease_entries[entry];
	pg_atomic_uint32 *counter = lease_filter_counter(lease->data.dboid,
													 lease->data.key);

	lease_index_delete(lease_slot_of(entry));
	if (entry != last)
	{
		uint32		s = lease_slot_of(last);

		lease_write(lease, &fencing_lease_entries[last].data,
					fencing_lease_entries[last].lapse_noted);
		fencing_lease_index[s] = (uint32) entry + 1;
	}
	fencing_lease_table->count--;
	pg_atomic_fetch_sub_u32(counter, 1);
}

/*
 * Where an entry stands at now: held until *until, delayed until *until
 * (lapsed or broken, under fencing.lock_delay), or gone.
 */
LeaseState
fencing_lease_state(const Lease *lease, TimestampTz now, TimestampTz *until)
{
	TimestampTz gone;

	if (!lease->data.broken && now < lease->data.expires_at)
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

/* The entry's lapse (or break) has been counted. */

/*
 * The entry's lapse (or break) has been counted.  Exclusive lock held.
 */
void
fencing_lease_note_lapse(Lease *lease)
{
	lease->changecount++;
	pg_write_barrier();
	lease->lapse_noted = true;
	pg_write_barrier();
	lease->changecount++;
}
