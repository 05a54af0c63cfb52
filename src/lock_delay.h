/*-------------------------------------------------------------------------
 *
 * lock_delay.h
 *		The layout of the shared table of lock delays (lock_delay.c), for
 *		that file and for the test module that damages it on purpose
 *		(test/tools/lock_delay_poke.c).
 *
 * Copyright (c) 2026, the fencing developers
 *
 * IDENTIFICATION
 *		src/lock_delay.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef FENCING_LOCK_DELAY_H
#define FENCING_LOCK_DELAY_H

#include "port/atomics.h"
#include "storage/lwlock.h"

#include "fencing.h"

/* The name under which the table lives in shared memory. */
#define LOCK_DELAY_SHMEM_NAME	"fencing lock delays"

/*
 * The shared table: entries[0 .. count - 1] are in use, kept dense (a
 * removed entry is replaced by the last one).  The lock protects the
 * entries; count is also an atomic so that the grant paths can see "no
 * delay" without taking it.  delay_ms is fencing.lock_delay as the
 * postmaster last read it, the value every backend applies (a backend's own
 * copy waits for its next command to follow a reload).  The entries are
 * followed by capacity role OIDs, scratch space for whoever holds the lock
 * exclusively (lock_delay.c counts the delays of each role in it).
 */
typedef struct LockDelayTable
{
	LWLock	   *lock;
	int			capacity;
	pg_atomic_uint32 count;
	pg_atomic_uint32 delay_ms;
	FencingLockDelay entries[FLEXIBLE_ARRAY_MEMBER];
} LockDelayTable;

/* Bytes of shared memory the table takes for this many entries. */
static inline Size
lock_delay_table_size(int capacity)
{
	Size		size = offsetof(LockDelayTable, entries);

	size = add_size(size, mul_size(capacity, sizeof(FencingLockDelay)));
	return add_size(size, mul_size(capacity, sizeof(Oid)));
}

/* The scratch space after the entries. */
static inline Oid *
lock_delay_table_scratch(LockDelayTable *table, int capacity)
{
	return (Oid *) &table->entries[capacity];
}

#endif							/* FENCING_LOCK_DELAY_H */
