/*-------------------------------------------------------------------------
 *
 * stats.c
 *		Cluster-wide counters behind the view fencing.stats.
 *
 * Every backend counts into its own slot of a shared array, indexed by its
 * PGPROC number, with a plain read and write of its own cache line: no
 * shared atomic add, no lock, nothing contended on the token and lock hot
 * paths.  The view sums the slots; a reset records the sums as a baseline
 * rather than touching other backends' slots.
 *
 * Copyright (c) 2026, the fencing developers
 *
 * IDENTIFICATION
 *		src/base/stats.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/twophase.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/ipc.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/timestamp.h"

#include "base/base.h"

PG_FUNCTION_INFO_V1(fencing_stat_rows);
PG_FUNCTION_INFO_V1(fencing_lease_stat_rows);
PG_FUNCTION_INFO_V1(fencing_stats_reset);

/* One backend's counters, padded so that two backends never share a line. */
typedef union FencingStatSlot
{
	pg_atomic_uint64 counts[FENCING_STAT_COUNT];
	char		pad[TYPEALIGN(PG_CACHE_LINE_SIZE,
							  sizeof(pg_atomic_uint64) * FENCING_STAT_COUNT)];
} FencingStatSlot;

/*
 * The shared header; the slots follow it from the next cache line on (the
 * header's size is no multiple of a line, so they are placed by address,
 * not as a member).
 */
typedef struct FencingStatShared
{
	slock_t		mutex;			/* protects baseline and reset_time */
	uint64		baseline[FENCING_STAT_COUNT];
	TimestampTz reset_time;
	int			nslots;
} FencingStatShared;

static FencingStatShared *stat_shared = NULL;
static FencingStatSlot *stat_slots = NULL;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

/* Every PGPROC that can run our functions has a slot. */
static int
stat_slot_count(void)
{
	return MaxBackends + NUM_AUXILIARY_PROCS + max_prepared_xacts;
}

static Size
stat_shmem_size(void)
{
	return add_size(sizeof(FencingStatShared) + PG_CACHE_LINE_SIZE,
					mul_size(stat_slot_count(), sizeof(FencingStatSlot)));
}

/* Ask for the slot array once MaxBackends is known. */
static void
stat_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(stat_shmem_size());
}

/* Create the zeroed slot array at postmaster start and crash restart. */
static void
stat_shmem_startup(void)
{
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	stat_shared = ShmemInitStruct("fencing stats", stat_shmem_size(), &found);
	stat_slots = (FencingStatSlot *) TYPEALIGN(PG_CACHE_LINE_SIZE,
											   (char *) stat_shared + sizeof(FencingStatShared));
	if (!found)
	{
		int			i,
					j;

		SpinLockInit(&stat_shared->mutex);
		memset(stat_shared->baseline, 0, sizeof(stat_shared->baseline));
		stat_shared->reset_time = GetCurrentTimestamp();
		stat_shared->nslots = stat_slot_count();
		for (i = 0; i < stat_shared->nslots; i++)
			for (j = 0; j < FENCING_STAT_COUNT; j++)
				pg_atomic_init_u64(&stat_slots[i].counts[j], 0);
	}
	LWLockRelease(AddinShmemInitLock);
}

/* Register the hooks; called from _PG_init. */
void
fencing_stats_init(void)
{
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = stat_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = stat_shmem_startup;
}

/*
 * Count n events of one kind.  Only this backend writes its slot, so a read
 * and a write (no locked instruction) are enough; readers may see a value a
 * moment old, which is all a counter promises.
 */
void
fencing_stat_add(FencingStat which, uint64 n)
{
	pg_atomic_uint64 *counter;

	if (unlikely(MyProc == NULL || stat_shared == NULL ||
				 FENCING_MY_PROC_SLOT >= stat_shared->nslots))
		return;
	counter = &stat_slots[FENCING_MY_PROC_SLOT].counts[which];
	pg_atomic_write_u64(counter, pg_atomic_read_u64(counter) + n);
}

/* Sum of every slot for one counter, less the baseline of the last reset. */
static uint64
stat_total(FencingStat which, const uint64 *baseline)
{
	uint64		sum = 0;
	int			i;

	for (i = 0; i < stat_shared->nslots; i++)
		sum += pg_atomic_read_u64(&stat_slots[i].counts[which]);
	return sum >= baseline[which] ? sum - baseline[which] : 0;
}

/*
 * SQL: fencing.stat_rows(), the row behind the view fencing.stats.  The
 * columns of later versions come after those of 1.0, so a database not yet
 * updated (which declares fewer) still reads its own.
 */
#define STAT_ROWS_COLUMNS	16

Datum
fencing_stat_rows(PG_FUNCTION_ARGS)
{
	TupleDesc	tupdesc;
	Datum		values[STAT_ROWS_COLUMNS];
	bool		nulls[STAT_ROWS_COLUMNS] = {0};
	uint64		baseline[FENCING_STAT_COUNT];
	TimestampTz reset_time;

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");

	SpinLockAcquire(&stat_shared->mutex);
	memcpy(baseline, stat_shared->baseline, sizeof(baseline));
	reset_time = stat_shared->reset_time;
	SpinLockRelease(&stat_shared->mutex);

	values[0] = Int64GetDatum((int64) stat_total(FENCING_STAT_TOKENS_ISSUED, baseline));
	values[1] = Int64GetDatum((int64) stat_total(FENCING_STAT_RESERVATIONS, baseline));
	values[2] = Float8GetDatum(stat_total(FENCING_STAT_RESERVATION_USEC, baseline) / 1000.0);
	values[3] = Int64GetDatum((int64) stat_total(FENCING_STAT_LOCKS_GRANTED, baseline));
	values[4] = Int64GetDatum((int64) stat_total(FENCING_STAT_LOCKS_BUSY, baseline));
	values[5] = Int64GetDatum((int64) stat_total(FENCING_STAT_LOCKS_TIMED_OUT, baseline));
	values[6] = Int64GetDatum((int64) stat_total(FENCING_STAT_LEASES_GRANTED, baseline));
	values[7] = Int64GetDatum((int64) stat_total(FENCING_STAT_LEASES_EXPIRED, baseline));
	values[8] = Int64GetDatum((int64) stat_total(FENCING_STAT_STALE_REJECTED, baseline));
	values[9] = TimestampTzGetDatum(reset_time);
	/* added in 1.1, after the 1.0 columns, which a 1.0 database declares */
	values[10] = Int64GetDatum((int64) stat_total(FENCING_STAT_LOCK_GROUPS_GRANTED, baseline));
	values[11] = Int64GetDatum((int64) stat_total(FENCING_STAT_SHARED_LOCKS_GRANTED, baseline));
	values[12] = Int64GetDatum((int64) stat_total(FENCING_STAT_PERMITS_GRANTED, baseline));
	values[13] = Int64GetDatum((int64) stat_total(FENCING_STAT_LEASES_CEILING_ENDED, baseline));
	values[14] = Int64GetDatum((int64) stat_total(FENCING_STAT_DELAYS_STARTED, baseline));
	values[15] = Int64GetDatum((int64) stat_total(FENCING_STAT_DELAYED_REFUSALS, baseline));

	if (tupdesc->natts > STAT_ROWS_COLUMNS)
		elog(ERROR, "fencing.stat_rows() is declared with %d columns, expected at most %d",
			 tupdesc->natts, STAT_ROWS_COLUMNS);

	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}

/*
 * SQL: fencing.lease_stat_rows(), the columns of fencing.stats about the
 * leases that outlive a transaction (1.2): acquired, renewed, released,
 * lapsed, broken.  A function of their own, so that the view gains them at
 * its end without dropping fencing.stat_rows().
 */
Datum
fencing_lease_stat_rows(PG_FUNCTION_ARGS)
{
	static const FencingStat which[] = {
		FENCING_STAT_LEASES_ACQUIRED,
		FENCING_STAT_LEASES_RENEWED,
		FENCING_STAT_LEASES_RELEASED,
		FENCING_STAT_LEASES_LAPSED,
		FENCING_STAT_LEASES_BROKEN
	};
	TupleDesc	tupdesc;
	Datum		values[lengthof(which)];
	bool		nulls[lengthof(which)] = {0};
	uint64		baseline[FENCING_STAT_COUNT];
	int			i;

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	if (tupdesc->natts != lengthof(which))
		elog(ERROR, "fencing.lease_stat_rows() is declared with %d columns, expected %d",
			 tupdesc->natts, (int) lengthof(which));

	SpinLockAcquire(&stat_shared->mutex);
	memcpy(baseline, stat_shared->baseline, sizeof(baseline));
	SpinLockRelease(&stat_shared->mutex);
	for (i = 0; i < (int) lengthof(which); i++)
		values[i] = Int64GetDatum((int64) stat_total(which[i], baseline));

	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}

/*
 * SQL: fencing.stats_reset(), revoked from PUBLIC.  Records the current sums
 * as the new zero.
 */
Datum
fencing_stats_reset(PG_FUNCTION_ARGS)
{
	uint64		zero[FENCING_STAT_COUNT] = {0};
	uint64		sums[FENCING_STAT_COUNT];
	int			j;
	TimestampTz now = GetCurrentTimestamp();

	for (j = 0; j < FENCING_STAT_COUNT; j++)
		sums[j] = stat_total((FencingStat) j, zero);

	SpinLockAcquire(&stat_shared->mutex);
	memcpy(stat_shared->baseline, sums, sizeof(sums));
	stat_shared->reset_time = now;
	SpinLockRelease(&stat_shared->mutex);

	PG_RETURN_VOID();
}
