/*-------------------------------------------------------------------------
 *
 * lock_delay_poke.c
 *		A test module that damages the shared table of lock delays
 *		(src/locks/locks.h) as a backend dying in the middle of a write, or a
 *		stray write, could: for test/t/044_lock_delay_restart.pl, which
 *		checks that the postmaster, copying the table at a crash restart,
 *		trusts neither its counts nor its times.
 *
 * Not part of the build; the test compiles it into its own directory:
 *
 *	gcc -shared -fPIC -I$(pg_config --includedir-server) -Isrc \
 *		test/tools/lock_delay_poke.c -o lock_delay_poke.so
 *
 * and creates test_lock_delay_poke(count int, capacity int, since
 * timestamptz) returns int from it.
 *
 * Copyright (c) 2026, the fencing developers
 *
 * IDENTIFICATION
 *		test/tools/lock_delay_poke.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "storage/shmem.h"
#include "utils/guc.h"
#include "utils/timestamp.h"

#include "locks/locks.h"

PG_MODULE_MAGIC;

PG_FUNCTION_INFO_V1(test_lock_delay_poke);

/*
 * test_lock_delay_poke(count int, capacity int, since timestamptz) returns
 * int: write "since" (and "until") into every entry in use, then the
 * table's count and capacity words, without the table's lock; NULL leaves
 * a field as it is.  Returns the number of entries that were in use.
 */
Datum
test_lock_delay_poke(PG_FUNCTION_ARGS)
{
	const char *setting = GetConfigOption("fencing.max_tracked_locks", false, false);
	int			capacity = atoi(setting);
	LockDelayTable *table;
	bool		found;
	uint32		count;
	uint32		i;

	table = ShmemInitStruct(LOCK_DELAY_SHMEM_NAME,
							lock_delay_table_size(capacity), &found);
	if (!found)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the table of fencing lock delays does not exist")));

	count = Min(pg_atomic_read_u32(&table->count), (uint32) capacity);
	if (!PG_ARGISNULL(2))
	{
		for (i = 0; i < count; i++)
		{
			table->entries[i].since = PG_GETARG_TIMESTAMPTZ(2);
			table->entries[i].until = PG_GETARG_TIMESTAMPTZ(2);
		}
	}
	if (!PG_ARGISNULL(1))
		table->capacity = PG_GETARG_INT32(1);
	if (!PG_ARGISNULL(0))
		pg_atomic_write_u32(&table->count, (uint32) PG_GETARG_INT32(0));
	PG_RETURN_INT32((int32) count);
}
