/*-------------------------------------------------------------------------
 *
 * token_wal.c
 *		The shared state behind fence tokens, and its durable reservations:
 *		the state file, a WAL record of fencing's resource manager, the
 *		synchronous-standby wait, the clock floor and the lead bound.
 *
 * The counter in shared memory hands out tokens up to a limit.  Raising the
 * limit (a reservation) is the only durable step and the only slow one:
 *
 *	1. write the new limit to $PGDATA/fencing.state and fsync it;
 *	2. write a WAL record of our own resource manager carrying the limit;
 *	3. XLogFlush it, then wait for synchronous standbys as a commit would;
 *	4. publish the limit in shared memory.
 *
 * The state file (state_file.c) exists because there is no checkpoint
 * hook: once a checkpoint has passed the record, crash recovery would not
 * replay it, so the file carries the limit across.  It is written before
 * the record, so
 * that a checkpoint (and the base backup that starts with one) whose redo
 * point lies beyond the record always finds the file at the new limit; a
 * file ahead of WAL only skips values.  Redo of the record raises the limit
 * on a standby and writes the standby's own state file.  This file owns the
 * shared state and creates it; tokens.c's fast path only reads and adds.
 *
 * Tokens count nanoseconds of the clock: a reservation starts at
 * max(counter, clock floor), covers FENCING_RESERVE_BLOCK tokens, and never
 * publishes a limit above clock + FENCING_LEAD_BOUND.  When the counter is
 * ahead of that (a clock that stepped back, a fresh start), the reservation
 * waits for the clock, at most fencing.clock_tolerance + the bound.  So a
 * token is at most the bound above its server's clock when issued, and a
 * server that may not know every earlier token (no state file, a file from
 * another timeline or from fencing 1.0, a restored base backup) makes a
 * fresh start above its clock + bound + fencing.clock_tolerance: above every
 * token of the old server whenever the clocks agree within the tolerance.
 *
 *
 * IDENTIFICATION
 *		src/tokens/token_wal.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xlog.h"
#include "access/xlog_internal.h"
#include "access/xloginsert.h"
#include "access/xlogreader.h"
#include "access/xlogrecovery.h"
#include "miscadmin.h"
#include "portability/instr_time.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/guc.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "tokens/tokens.h"

/* The code of a reservation record, the only kind this file writes. */
#define XLOG_FENCING_RESERVE	0x00

/* The WAL record: the new limit, nothing else. */
typedef struct xl_fencing_reserve
{
	uint64		limit;
} xl_fencing_reserve;

FencingTokenState *fencing_token_state = NULL;

/* GUC fencing.clock_tolerance */
static int	clock_tolerance_ms = 1000;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

static const char *reservation_identify(uint8 info);
static const char *reservation_check(XLogReaderState *record);
static void reservation_redo(XLogReaderState *record);
static void reservation_desc(StringInfo buf, XLogReaderState *record);

static const FencingWalRecords reservation_records = {
	.identify = reservation_identify,
	.check = reservation_check,
	.redo = reservation_redo,
	.desc = reservation_desc
};

static void tokens_shmem_request(void);
static void tokens_shmem_startup(void);

/*
 * Define the setting, register the resource managers with the reservation
 * record, and the shared-memory hooks; must happen while the postmaster
 * preloads the library, before recovery can meet a record.
 */
void
fencing_token_wal_init(void)
{
	DefineCustomIntVariable("fencing.clock_tolerance",
							"How far a new or recovered cluster's clock may lag the old server's clock without reissuing its tokens.",
							"A server that may not know every earlier token starts above its clock plus the lead bound plus this, and so waits about this long before its first token.",
							&clock_tolerance_ms,
							1000,
							0,
							3600 * 1000,
							PGC_SIGHUP,
							GUC_UNIT_MS,
							NULL, NULL, NULL);
	fencing_rmgr_init();
	fencing_wal_register_records(&reservation_records);

	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = tokens_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = tokens_shmem_startup;
}

/*
 * Ask for room for the counter and for the LWLock that serialises
 * reservations (the slow path only).
 */
static void
tokens_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();

	RequestAddinShmemSpace(MAXALIGN(sizeof(FencingTokenState)));
	RequestNamedLWLockTranche("fencing_tokens", 1);
}

/*
 * Create the state at postmaster start and after every crash restart.  The
 * counter resumes at the limit recorded in the state file: every token ever
 * returned is at or below it.  Redo of our WAL records may raise it further
 * before the first backend runs.  A damaged state file stops the server
 * here (state_file.c says why and how to repair it).
 */
static void
tokens_shmem_startup(void)
{
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	fencing_token_state = ShmemInitStruct("fencing tokens",
										  sizeof(FencingTokenState),
										  &found);
	if (!found)
	{
		FencingTokenState *state = fencing_token_state;

		memset(state, 0, sizeof(FencingTokenState));
		fencing_state_file_load(state, clock_tolerance_ms);
		pg_atomic_init_u64(&state->counter, state->file_limit);
		pg_atomic_init_u64(&state->limit, state->file_limit);
		state->lock = &(GetNamedLWLockTranche("fencing_tokens"))->lock;
		state->pending_limit = state->file_limit;
		state->pending_lsn = InvalidXLogRecPtr;
	}
	LWLockRelease(AddinShmemInitLock);
}

/*
 * The clock floor: microseconds since 2000-01-01 by this server's clock,
 * in token units (nanoseconds), never negative.  Read only by reservations
 * and fencing.status(), never per token.
 */
int64
fencing_clock_floor(void)
{
	TimestampTz now = GetCurrentTimestamp();

	return now > 0 ? (int64) now * FENCING_NS_PER_CLOCK_UNIT : 0;
}

/* fencing.clock_tolerance in token units. */
static uint64
clock_tolerance(void)
{
	return (uint64) clock_tolerance_ms * UINT64CONST(1000000);
}

/*
 * Why this server makes a fresh start, for the log.
 */
static const char *
fresh_start_reason(FreshStartReason reason)
{
	switch (reason)
	{
		case FRESH_NO_STATE_FILE:
			return "it had no state file when it started";
		case FRESH_VERSION_1_FILE:
			return "its state file was written by fencing 1.0";
		case FRESH_BACKUP_LABEL:
			return "its data directory was restored from a base backup";
		case FRESH_OTHER_TIMELINE:
			return "its state file belongs to another WAL timeline";
		default:
			return "the timeline of its state file is unknown";
	}
}

/*
 * Log a fresh start and lift the counter above everything an earlier
 * server may have issued within the lead bound and the clock tolerance.
 * Called under the tokens lock by the first reservation.
 */
static void
make_fresh_start(FencingTokenState *state, uint64 clock)
{
	uint64		floor = clock + FENCING_LEAD_BOUND + clock_tolerance();

	fencing_raise_atomic(&state->counter, floor);
	state->fresh_start = false;
	ereport(LOG,
			(errmsg("fence tokens make a fresh start above " UINT64_FORMAT, floor),
			 errdetail("This server may not know every token issued before (%s), so tokens continue above its clock plus the lead bound plus fencing.clock_tolerance (%d ms); the first token waits until the clock has caught up.",
					   fresh_start_reason((FreshStartReason) state->fresh_reason),
					   clock_tolerance_ms)));
}

/*
 * The first reservation of this server compares the state file's timeline
 * with its own: a file of another timeline (a promotion, a point-in-time
 * recovery) may not know every token issued on this one, a fresh start.
 * Called under the tokens lock.
 */
static void
check_timeline_once(FencingTokenState *state)
{
	if (state->timeline_checked)
		return;
	if (!state->fresh_start &&
		state->file_timeline != GetWALInsertionTimeLine())
	{
		state->fresh_start = true;
		state->fresh_reason = FRESH_OTHER_TIMELINE;
	}
	state->timeline_checked = true;
}

/*
 * Decide the next reservation, under the tokens lock.  Returns 0 and sets
 * *target, having lifted the counter to the clock floor; or returns how
 * many nanoseconds the clock must advance before a reservation covering
 * "needed" fits under clock + lead bound.
 *
 * The counter is not lifted to "needed": only advance_token asks for more
 * than the counter, and it lifts the counter itself once the reservation
 * is confirmed.  A reservation that fails (its wait for synchronous
 * standbys cancelled) then leaves later tokens where they were, whereas
 * the clock floor is where they would be anyway.
 */
static uint64
plan_reservation(FencingTokenState *state, uint64 needed, uint64 *target)
{
	uint64		clock = (uint64) fencing_clock_floor();
	uint64		start;
	uint64		base;
	uint64		cap = clock + FENCING_LEAD_BOUND;

	check_timeline_once(state);
	if (state->fresh_start)
		make_fresh_start(state, clock);

	start = Max(pg_atomic_read_u64(&state->counter), clock);
	base = Max(start, needed);
	if (base > (uint64) (PG_INT64_MAX - FENCING_RESERVE_BLOCK))
		ereport(ERROR,
				(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
				 errmsg("fence tokens are exhausted"),
				 errdetail("The next reservation would pass the largest bigint.")));

	if (base + FENCING_RESERVE_BLOCK <= cap)
		*target = base + FENCING_RESERVE_BLOCK;
	else if (base < cap)
		*target = cap;
	else
	{
		uint64		shortfall = base + 1 - cap;

		if (shortfall <= clock_tolerance() + FENCING_LEAD_BOUND)
			return shortfall;

		/* Too far ahead to wait for: reserve anyway, and say so. */
		*target = base + FENCING_RESERVE_BLOCK;
		if (!state->ahead_logged)
			ereport(LOG,
					(errmsg("fence tokens run " UINT64_FORMAT " ms ahead of the clock",
							(base - clock) / UINT64CONST(1000000)),
					 errdetail("The counter is at " UINT64_FORMAT " and the clock floor at " UINT64_FORMAT "; waiting for the clock would take longer than fencing.clock_tolerance (%d ms) plus the lead bound. The lead bound does not hold until the clock passes these tokens.",
							   base, clock, clock_tolerance_ms),
					 errhint("If the clock stepped back, check the server's time synchronisation; tokens stay unique and increasing.")));
		state->ahead_logged = true;
	}
	if (*target <= cap)
		state->ahead_logged = false;

	fencing_raise_atomic(&state->counter, start);
	return 0;
}

/*
 * Write a planned reservation, under the tokens lock: the state file
 * first, then the WAL record.  Returns the record's LSN and leaves it as
 * the pending reservation for backends arriving meanwhile.
 */
static XLogRecPtr
write_reservation(FencingTokenState *state, uint64 target)
{
	TimeLineID	timeline = GetWALInsertionTimeLine();
	xl_fencing_reserve xlrec;
	XLogRecPtr	lsn;

	if (state->file_limit < target || state->file_timeline != timeline)
	{
		(void) fencing_state_file_write(target, timeline, ERROR);
		state->file_limit = target;
		state->file_timeline = timeline;
	}

	xlrec.limit = target;
	XLogBeginInsert();
	XLogRegisterData((char *) &xlrec, sizeof(xlrec));
	lsn = XLogInsert(FENCING_RMGR_ID, XLOG_FENCING_RESERVE);

	state->pending_limit = target;
	state->pending_lsn = lsn;
	return lsn;
}

/*
 * Sleep until the clock has advanced by "ns" (rounded up to a
 * millisecond), holding no lock; cancellable.
 */
static void
wait_for_clock(uint64 ns)
{
	long		ms = (long) ((ns + UINT64CONST(999999)) / UINT64CONST(1000000));

	(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
					 ms, PG_WAIT_EXTENSION);
	ResetLatch(MyLatch);
	CHECK_FOR_INTERRUPTS();
}

/*
 * Make every token up to at least "needed" safe to hand out, and return once
 * the shared limit covers it.  Called when the fast path found its token
 * above the limit, and by advance_token.
 *
 * Backends that reach the boundary together share one record: the first
 * writes it and leaves its limit and LSN in shared memory; the rest find it
 * there and only wait for the same flush and confirmation.  No lock is held
 * while flushing, waiting for standbys or waiting for the clock, so a
 * cancelled waiter leaves nothing behind and the next caller simply waits
 * again.  fencing.stats counts a reservation for the backend that wrote its
 * record, once.
 */
void
fencing_reserve_tokens(uint64 needed)
{
	FencingTokenState *state = fencing_token_state;

	while (pg_atomic_read_u64(&state->limit) < needed)
	{
		uint64		target = 0;
		uint64		clock_wait = 0;
		XLogRecPtr	lsn = InvalidXLogRecPtr;
		bool		wrote = false;
		instr_time	start,
					duration;

		INSTR_TIME_SET_CURRENT(start);

		LWLockAcquire(state->lock, LW_EXCLUSIVE);
		if (state->pending_limit >= needed &&
			!XLogRecPtrIsInvalid(state->pending_lsn))
		{
			target = state->pending_limit;
			lsn = state->pending_lsn;
		}
		else
		{
			clock_wait = plan_reservation(state, needed, &target);
			if (clock_wait == 0)
			{
				lsn = write_reservation(state, target);
				wrote = true;
			}
		}
		LWLockRelease(state->lock);

		if (clock_wait > 0)
		{
			wait_for_clock(clock_wait);
			continue;
		}

		XLogFlush(lsn);
		fencing_wait_for_sync_standbys(lsn, "a fence token reservation",
									   "No token was handed out.");
		fencing_raise_atomic(&state->limit, target);

		if (wrote)
		{
			INSTR_TIME_SET_CURRENT(duration);
			INSTR_TIME_SUBTRACT(duration, start);
			fencing_stat_add(FENCING_STAT_RESERVATIONS, 1);
			fencing_stat_add(FENCING_STAT_RESERVATION_USEC,
							 (uint64) INSTR_TIME_GET_MICROSEC(duration));
		}
	}
}

/*
 * The reservation record: its code's name, for identify.
 */
static const char *
reservation_identify(uint8 info)
{
	return info == XLOG_FENCING_RESERVE ? "RESERVE" : NULL;
}

/*
 * Check a reservation record, for redo and desc (rmgr.c): NULL when it is
 * valid, else a sentence saying what is wrong.
 */
static const char *
reservation_check(XLogReaderState *record)
{
	xl_fencing_reserve xlrec;

	if (XLogRecHasAnyBlockRefs(record))
		return pstrdup("It references data blocks; a fencing reservation references none.");
	if (XLogRecGetDataLen(record) != sizeof(xlrec))
		return psprintf("It carries %u bytes of data; a fencing reservation carries %d.",
						XLogRecGetDataLen(record), (int) sizeof(xlrec));
	memcpy(&xlrec, XLogRecGetData(record), sizeof(xlrec));
	if (xlrec.limit > (uint64) PG_INT64_MAX)
		return psprintf("Its limit " UINT64_FORMAT " is above the largest bigint.",
						xlrec.limit);
	return NULL;
}

/* The limit of a reservation record that reservation_check accepted. */
static uint64
reservation_limit(XLogReaderState *record)
{
	xl_fencing_reserve xlrec;

	memcpy(&xlrec, XLogRecGetData(record), sizeof(xlrec));
	return xlrec.limit;
}

/*
 * Redo a reservation, in crash recovery or on a standby: every token up to
 * the record's limit may have been handed out by the primary, so the
 * counter and limit move up to it, and the state file follows so that the
 * next restart does not depend on replaying this record again.  The limit
 * published here covers no fresh tokens; the first call after promotion
 * makes a reservation of its own above it (a fresh start: the promotion
 * began a new timeline).
 *
 * A failure to write the state file (ENOSPC, EACCES) must not stop the
 * standby: it is a WARNING, remembered as file_behind and retried at the
 * next record; the limit in memory rises all the same.  While the server
 * does not know its timeline is its own (a fresh start is pending), the file
 * keeps the timeline unknown.
 */
static void
reservation_redo(XLogReaderState *record)
{
	FencingTokenState *state = fencing_token_state;
	uint64		limit = reservation_limit(record);
	TimeLineID	timeline;

	(void) GetCurrentReplayRecPtr(&timeline);
	if (state->fresh_start)
		timeline = 0;

	LWLockAcquire(state->lock, LW_EXCLUSIVE);
	fencing_raise_atomic(&state->counter, limit);
	fencing_raise_atomic(&state->limit, limit);
	if (state->pending_limit < limit)
		state->pending_limit = limit;
	state->pending_lsn = InvalidXLogRecPtr;
	if (state->file_limit < limit || state->file_behind)
	{
		uint64		file_limit = Max(state->file_limit, limit);

		if (fencing_state_file_write(file_limit, timeline, WARNING))
		{
			if (state->file_behind)
				ereport(LOG,
						(errmsg("fencing state file \"%s\" is up to date again",
								fencing_state_file_path())));
			state->file_limit = file_limit;
			state->file_timeline = timeline;
			state->file_behind = false;
		}
		else
			state->file_behind = true;
	}
	LWLockRelease(state->lock);
}

/* Describe a reservation record, for redo error context and pg_walinspect. */
static void
reservation_desc(StringInfo buf, XLogReaderState *record)
{
	appendStringInfo(buf, "limit " UINT64_FORMAT, reservation_limit(record));
}

/*
 * What fencing.status() shows about the reservation side: the clock floor,
 * the tolerance, whether the next reservation makes a fresh start, and
 * whether redo could not write the state file.
 */
void
fencing_token_wal_status(FencingTokenWalStatus *status)
{
	FencingTokenState *state = fencing_token_state;
	bool		in_recovery = RecoveryInProgress();

	status->clock_floor = fencing_clock_floor();
	status->clock_tolerance_ms = clock_tolerance_ms;

	LWLockAcquire(state->lock, LW_SHARED);
	if (in_recovery)
		status->fresh_start_pending = true;		/* promotion starts a timeline */
	else
		status->fresh_start_pending = state->fresh_start ||
			(!state->timeline_checked &&
			 state->file_timeline != GetWALInsertionTimeLine());
	status->state_file_behind = state->file_behind;
	LWLockRelease(state->lock);
}
