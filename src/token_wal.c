/*-------------------------------------------------------------------------
 *
 * token_wal.c
 *		Durable reservations of fence tokens: an fsynced state file, a
 *		custom WAL record, the synchronous-standby wait, the clock floor and
 *		the lead bound.
 *
 * The counter in shared memory hands out tokens up to a limit.  Raising the
 * limit (a reservation) is the only durable step and the only slow one:
 *
 *	1. write the new limit to $PGDATA/fencing.state and fsync it;
 *	2. write a WAL record of our own resource manager carrying the limit;
 *	3. XLogFlush it, then wait for synchronous standbys as a commit would;
 *	4. publish the limit in shared memory.
 *
 * The state file exists because there is no checkpoint hook: once a
 * checkpoint has passed the record, crash recovery would not replay it, so
 * the file carries the limit across.  It is written before the record, so
 * that a checkpoint (and the base backup that starts with one) whose redo
 * point lies beyond the record always finds the file at the new limit; a
 * file ahead of WAL only skips values.  Redo of the record raises the limit
 * on a standby and writes the standby's own state file.
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
 * Copyright (c) 2026, the fencing developers
 *
 * IDENTIFICATION
 *		src/token_wal.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "access/xact.h"
#include "access/xlog.h"
#include "access/xlog_internal.h"
#include "access/xloginsert.h"
#include "access/xlogreader.h"
#include "access/xlogrecovery.h"
#include "miscadmin.h"
#include "port/pg_crc32c.h"
#include "portability/instr_time.h"
#include "postmaster/interrupt.h"
#include "replication/syncrep.h"
#include "replication/walsender.h"
#include "replication/walsender_private.h"
#include "storage/fd.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "tcop/tcopprot.h"
#include "utils/elog.h"
#include "utils/guc.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "fencing.h"
#include "compat.h"
#include "token_state.h"

/*
 * Resource manager ids.  199 is fencing's own (to be listed on
 * https://wiki.postgresql.org/wiki/CustomWALResourceManagers); every record
 * is written under it.  fencing 1.0 wrote under RM_EXPERIMENTAL_ID (128),
 * which stays registered for replay only, with the same record format, so
 * that WAL written by 1.0 still replays (crash recovery right after the
 * upgrade, a 1.1 standby of a 1.0 primary) unless fencing.replay_1_0_wal
 * frees the id for another extension.
 */
#define FENCING_RMGR_ID			199
#define FENCING_RMGR_NAME		"fencing"
#define FENCING_1_0_RMGR_ID		RM_EXPERIMENTAL_ID
#define FENCING_1_0_RMGR_NAME	"fencing_1_0"

#define XLOG_FENCING_RESERVE	0x00

#define FENCING_STATE_FILE		"fencing.state"
#define FENCING_STATE_TMP		"fencing.state.tmp"
#define FENCING_STATE_MAGIC		0x464E4331	/* "FNC1" */
#define FENCING_STATE_VERSION	2
#define FENCING_BACKUP_LABEL	"backup_label"

/* The WAL record: the new limit, nothing else. */
typedef struct xl_fencing_reserve
{
	uint64		limit;
} xl_fencing_reserve;

/*
 * The state file, version 2: the limit and the WAL timeline it belongs to
 * (0: unknown, the next reservation makes a fresh start), guarded by a
 * magic number and a CRC.  Version 1 (fencing 1.0) had no timeline and its
 * CRC where the timeline is now; both are 24 bytes.
 */
typedef struct FencingStateFile
{
	uint32		magic;
	uint32		version;
	uint64		limit;
	TimeLineID	timeline;
	pg_crc32c	crc;
} FencingStateFile;

typedef struct FencingStateFileV1
{
	uint32		magic;
	uint32		version;
	uint64		limit;
	pg_crc32c	crc;
} FencingStateFileV1;

StaticAssertDecl(sizeof(FencingStateFile) == sizeof(FencingStateFileV1),
				 "state file versions 1 and 2 must have the same size");

/* Why this server makes a fresh start (FencingTokenState.fresh_reason). */
typedef enum FreshStartReason
{
	FRESH_NONE,
	FRESH_NO_STATE_FILE,
	FRESH_VERSION_1_FILE,
	FRESH_UNKNOWN_TIMELINE,
	FRESH_BACKUP_LABEL,
	FRESH_OTHER_TIMELINE
} FreshStartReason;

/* Settings. */
static int	clock_tolerance_ms = 1000;
static bool replay_1_0_wal = true;

static void fencing_rmgr_redo(XLogReaderState *record);
static void fencing_rmgr_desc(StringInfo buf, XLogReaderState *record);
static const char *fencing_rmgr_identify(uint8 info);
static bool write_state_file(uint64 limit, TimeLineID timeline, int elevel);
FENCING_NORETURN static void report_damaged_state_file(const char *detail);
static void wait_for_sync_standbys(XLogRecPtr lsn);

static RmgrData fencing_rmgr = {
	.rm_name = FENCING_RMGR_NAME,
	.rm_redo = fencing_rmgr_redo,
	.rm_desc = fencing_rmgr_desc,
	.rm_identify = fencing_rmgr_identify
};

static RmgrData fencing_1_0_rmgr = {
	.rm_name = FENCING_1_0_RMGR_NAME,
	.rm_redo = fencing_rmgr_redo,
	.rm_desc = fencing_rmgr_desc,
	.rm_identify = fencing_rmgr_identify
};

/*
 * Define the settings and register the resource managers; must happen while
 * the postmaster preloads the library, before recovery can meet a record.
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
	DefineCustomBoolVariable("fencing.replay_1_0_wal",
							 "Replays WAL records written by fencing 1.0 (resource manager id 128).",
							 "Turn off only when another extension needs resource manager id 128 and no WAL written by fencing 1.0 remains to be replayed.",
							 &replay_1_0_wal,
							 true,
							 PGC_POSTMASTER,
							 0,
							 NULL, NULL, NULL);

	RegisterCustomRmgr(FENCING_RMGR_ID, &fencing_rmgr);
	if (replay_1_0_wal)
		RegisterCustomRmgr(FENCING_1_0_RMGR_ID, &fencing_1_0_rmgr);
}

/* Where the state file lives, for fencing.status(). */
const char *
fencing_state_file_path(void)
{
	return FENCING_STATE_FILE;
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
 * Log a fresh start and lift the counter above everything an earlier
 * server may have issued within the lead bound and the clock tolerance.
 * Called under the tokens lock by the first reservation.
 */
static void
make_fresh_start(FencingTokenState *state, uint64 clock)
{
#ifdef FENCING_MUTANT_FRESH_START_AT_CLOCK
	uint64		floor = clock;
#else
	uint64		floor = clock + FENCING_LEAD_BOUND + clock_tolerance();
#endif
	const char *reason;

	switch ((FreshStartReason) state->fresh_reason)
	{
		case FRESH_NO_STATE_FILE:
			reason = "it had no state file when it started";
			break;
		case FRESH_VERSION_1_FILE:
			reason = "its state file was written by fencing 1.0";
			break;
		case FRESH_BACKUP_LABEL:
			reason = "its data directory was restored from a base backup";
			break;
		case FRESH_OTHER_TIMELINE:
			reason = "its state file belongs to another WAL timeline";
			break;
		default:
			reason = "the timeline of its state file is unknown";
			break;
	}
	fencing_raise_atomic(&state->counter, floor);
	state->fresh_start = false;
	ereport(LOG,
			(errmsg("fence tokens make a fresh start above " UINT64_FORMAT, floor),
			 errdetail("This server may not know every token issued before (%s), so tokens continue above its clock plus the lead bound plus fencing.clock_tolerance (%d ms); the first token waits until the clock has caught up.",
					   reason, clock_tolerance_ms)));
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

	if (!state->timeline_checked)
	{
#ifdef FENCING_MUTANT_NO_FRESH_START_ON_NEW_TIMELINE
		if (false)
#else
		if (!state->fresh_start &&
			state->file_timeline != GetWALInsertionTimeLine())
#endif
		{
			state->fresh_start = true;
			state->fresh_reason = FRESH_OTHER_TIMELINE;
		}
		state->timeline_checked = true;
	}
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
#ifdef FENCING_MUTANT_STATE_FILE_PREVIOUS_LIMIT
		(void) write_state_file(state->pending_limit, timeline, ERROR);
#else
		(void) write_state_file(target, timeline, ERROR);
#endif
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
#ifdef FENCING_MUTANT_PUBLISH_BEFORE_FLUSH
				fencing_raise_atomic(&state->limit, target);
#endif
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
		wait_for_sync_standbys(lsn);
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
 * While a reservation waits in core's SyncRepWaitForLSN: the log hook it
 * replaced.  A cancel or a termination request ends that wait with a
 * WARNING written for a commit ("The transaction has already committed
 * locally, but might not have been replicated to the standby"), which is
 * false of a reservation: no transaction committed, and the caller gets
 * an error and no token instead.
 */
static emit_log_hook_type sync_wait_prev_emit_log_hook = NULL;

/*
 * Keep that WARNING out of the server log during the wait (the client is
 * kept from it by client_min_messages, see wait_for_sync_standbys); every
 * other report passes on.
 */
static void
sync_wait_emit_log(ErrorData *edata)
{
	if (edata->elevel == WARNING && edata->funcname != NULL &&
		strcmp(edata->funcname, "SyncRepWaitForLSN") == 0)
	{
		edata->output_to_server = false;
		return;
	}
	if (sync_wait_prev_emit_log_hook)
		sync_wait_prev_emit_log_hook(edata);
}

/*
 * Core's wait for synchronous standbys, without its words for a commit:
 * client_min_messages = error for the wait keeps its WARNING from the
 * client (the log hook, from the server log), and the output core turns
 * off when a termination request ends the wait (a commit must not look
 * failed to its client) is turned on again, so that the client of a
 * reservation learns why its session ends.  The caller has made a GUC
 * nesting level.
 */
static void
sync_rep_wait_quietly(XLogRecPtr lsn)
{
	CommandDest dest = whereToSendOutput;

	(void) set_config_option("client_min_messages", "error",
							 PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	sync_wait_prev_emit_log_hook = emit_log_hook;
	emit_log_hook = sync_wait_emit_log;
	PG_TRY();
	{
		HOLD_INTERRUPTS();
		SyncRepWaitForLSN(lsn, false);
		RESUME_INTERRUPTS();
	}
	PG_FINALLY();
	{
		emit_log_hook = sync_wait_prev_emit_log_hook;
	}
	PG_END_TRY();

	if (ProcDiePending && whereToSendOutput == DestNone)
		whereToSendOutput = dest;
}

/*
 * Wait, like a commit, until synchronous standbys have flushed the
 * reservation record, so a token is never handed out that a failover to a
 * synchronous standby could hand out again.  A session's own
 * synchronous_commit = off or local must not weaken a cluster-wide
 * guarantee, so the wait is at least remote_flush whatever the session says.
 *
 * Whether synchronous standbys are defined is read from
 * synchronous_standby_names, as core's SyncStandbysDefined() does, not from
 * WalSndCtl's flags (whose layout differs between 15.x minor releases);
 * WalSndCtl->lsn[] is read, which every 15.x release lays out alike.
 * SyncRepWaitForLSN returns when the wait is cancelled (having consumed the
 * cancel), and at once while the checkpointer has not yet seen a new
 * setting; if the standbys did not confirm the record we raise an error,
 * so the caller gets no token.  A termination request ends the session
 * once the wait has returned.
 */
static void
wait_for_sync_standbys(XLogRecPtr lsn)
{
	int			nestlevel;
	XLogRecPtr	confirmed;

	if (max_wal_senders == 0 ||
		SyncRepStandbyNames == NULL || SyncRepStandbyNames[0] == '\0')
		return;

	nestlevel = NewGUCNestLevel();
	if (synchronous_commit < SYNCHRONOUS_COMMIT_REMOTE_FLUSH)
		(void) set_config_option("synchronous_commit", "on",
								 PGC_USERSET, PGC_S_SESSION,
								 GUC_ACTION_SAVE, true, 0, false);
	sync_rep_wait_quietly(lsn);
	AtEOXact_GUC(true, nestlevel);

	/* A terminate request during the wait ends the session here. */
	CHECK_FOR_INTERRUPTS();

	LWLockAcquire(SyncRepLock, LW_SHARED);
	confirmed = WalSndCtl->lsn[SYNC_REP_WAIT_FLUSH];
	LWLockRelease(SyncRepLock);

	/*
	 * Core also ends the wait when synchronous_standby_names is emptied: the
	 * operator no longer asks for synchronous standbys, and core's commits
	 * go through then.  This backend learns of the change only by reading
	 * the configuration it has been signalled to reload; a reservation
	 * behaves like a commit, so with no synchronous standby named any more
	 * it needs no confirmation either.
	 */
	if (confirmed < lsn && ConfigReloadPending)
	{
		ConfigReloadPending = false;
		ProcessConfigFile(PGC_SIGHUP);
		if (SyncRepStandbyNames == NULL || SyncRepStandbyNames[0] == '\0')
			return;
	}

	if (confirmed < lsn)
		ereport(ERROR,
				(errcode(ERRCODE_QUERY_CANCELED),
				 errmsg("canceling wait for synchronous standbys to confirm a fence token reservation"),
				 errdetail("No token was handed out. The reservation is flushed locally but not yet confirmed by the synchronous standbys listed in synchronous_standby_names."),
				 errhint("Bring a synchronous standby back, or change synchronous_standby_names; the next call waits again.")));
}

/*
 * Write the limit and its timeline to the state file: a temporary file,
 * fsync, and durable_rename, so that a crash leaves either the old content
 * or the new one, never a torn file.  Reports a failure at elevel and, when
 * that returns, returns false.  Called under the tokens lock, by the
 * startup process during redo, or by the postmaster at start.
 */
static bool
write_state_file(uint64 limit, TimeLineID timeline, int elevel)
{
	FencingStateFile content;
	int			fd;
	int			save_errno;

	memset(&content, 0, sizeof(content));
	content.magic = FENCING_STATE_MAGIC;
	content.version = FENCING_STATE_VERSION;
	content.limit = limit;
	content.timeline = timeline;
	INIT_CRC32C(content.crc);
	COMP_CRC32C(content.crc, &content, offsetof(FencingStateFile, crc));
	FIN_CRC32C(content.crc);

	fd = OpenTransientFile(FENCING_STATE_TMP, O_WRONLY | O_CREAT | O_TRUNC | PG_BINARY);
	if (fd < 0)
	{
		ereport(elevel,
				(errcode_for_file_access(),
				 errmsg("could not create file \"%s\": %m", FENCING_STATE_TMP)));
		return false;
	}
	errno = 0;
	if (write(fd, &content, sizeof(content)) != sizeof(content))
	{
		save_errno = errno ? errno : ENOSPC;
		CloseTransientFile(fd);
		errno = save_errno;
		ereport(elevel,
				(errcode_for_file_access(),
				 errmsg("could not write file \"%s\": %m", FENCING_STATE_TMP)));
		return false;
	}
	if (pg_fsync(fd) != 0)
	{
		save_errno = errno;
		CloseTransientFile(fd);
		errno = save_errno;
		ereport(data_sync_elevel(elevel),
				(errcode_for_file_access(),
				 errmsg("could not fsync file \"%s\": %m", FENCING_STATE_TMP)));
		return false;
	}
	if (CloseTransientFile(fd) != 0)
	{
		ereport(elevel,
				(errcode_for_file_access(),
				 errmsg("could not close file \"%s\": %m", FENCING_STATE_TMP)));
		return false;
	}
	return durable_rename(FENCING_STATE_TMP, FENCING_STATE_FILE, elevel) == 0;
}

/*
 * A damaged state file stops the server: the limit it should hold is what
 * keeps tokens from repeating after a crash, and starting without it would
 * quietly rest T2 on the clock alone.
 */
static void
report_damaged_state_file(const char *detail)
{
	ereport(FATAL,
			(errcode(ERRCODE_DATA_CORRUPTED),
			 errmsg("fencing state file \"%s\" is damaged", FENCING_STATE_FILE),
			 errdetail("%s", detail),
			 errhint("Restore the file from a backup of this server, or remove it; without it the server starts as a new cluster does, with a fresh start above its clock plus fencing.clock_tolerance.")));
}

/*
 * Read the state file into the shared state at postmaster start (and after
 * a crash restart), before redo can raise it further.  A missing file is a
 * fresh start (a new cluster, or one that never issued a token), and so is
 * a file from fencing 1.0 or one whose timeline is unknown; each is logged.
 * A file that cannot be read, or that is damaged, stops the server.  A
 * backup_label means the data directory is a restored base backup, whose
 * state file may be older than tokens the original server handed out after
 * the backup began: a fresh start, recorded in the file (timeline unknown)
 * so that a restart before the first reservation does not forget it.
 */
void
fencing_state_file_load(FencingTokenState *state)
{
	FencingStateFile content;
	char		buf[sizeof(FencingStateFile) + 1];
	pg_crc32c	crc;
	size_t		crc_offset;
	pg_crc32c	stored_crc;
	struct stat st;
	int			fd;
	int			nread;
	int			save_errno;

	state->file_limit = 0;
	state->file_timeline = 0;
	state->fresh_start = false;
	state->fresh_reason = FRESH_NONE;

	fd = OpenTransientFile(FENCING_STATE_FILE, O_RDONLY | PG_BINARY);
	if (fd < 0)
	{
		if (errno != ENOENT)
			ereport(FATAL,
					(errcode_for_file_access(),
					 errmsg("could not open fencing state file \"%s\": %m", FENCING_STATE_FILE),
					 errhint("Make the file readable by the server, or restore it from a backup of this server.")));
		ereport(LOG,
				(errmsg("fencing state file \"%s\" not found: fence tokens make a fresh start", FENCING_STATE_FILE),
				 errdetail("A new cluster has no state file. Tokens will continue above this server's clock plus fencing.clock_tolerance (%d ms).",
						   clock_tolerance_ms)));
		state->fresh_start = true;
		state->fresh_reason = FRESH_NO_STATE_FILE;
		return;
	}
	nread = read(fd, buf, sizeof(buf));
	save_errno = errno;
	CloseTransientFile(fd);
	if (nread < 0)
	{
		errno = save_errno;
		ereport(FATAL,
				(errcode_for_file_access(),
				 errmsg("could not read fencing state file \"%s\": %m", FENCING_STATE_FILE),
				 errhint("Restore the file from a backup of this server, or remove it; without it the server starts as a new cluster does, with a fresh start above its clock plus fencing.clock_tolerance.")));
	}
	if (nread != sizeof(FencingStateFile))
		report_damaged_state_file(psprintf("The file has %d bytes; a valid one has %d.",
										   nread, (int) sizeof(FencingStateFile)));
	memcpy(&content, buf, sizeof(content));
	if (content.magic != FENCING_STATE_MAGIC)
		report_damaged_state_file(psprintf("Its magic number is 0x%08X instead of 0x%08X.",
										   content.magic, FENCING_STATE_MAGIC));
	if (content.version == 1)
	{
		FencingStateFileV1 v1;

		memcpy(&v1, buf, sizeof(v1));
		crc_offset = offsetof(FencingStateFileV1, crc);
		stored_crc = v1.crc;
	}
	else if (content.version == FENCING_STATE_VERSION)
	{
		crc_offset = offsetof(FencingStateFile, crc);
		stored_crc = content.crc;
	}
	else
		report_damaged_state_file(psprintf("Its format version is %u; this server reads versions 1 and %d.",
										   content.version, FENCING_STATE_VERSION));
	INIT_CRC32C(crc);
	COMP_CRC32C(crc, buf, crc_offset);
	FIN_CRC32C(crc);
	if (!EQ_CRC32C(crc, stored_crc))
		report_damaged_state_file(pstrdup("Its checksum does not match its content."));
	if (content.limit > (uint64) PG_INT64_MAX)
		report_damaged_state_file(psprintf("Its limit " UINT64_FORMAT " is above the largest bigint.",
										   content.limit));

	state->file_limit = content.limit;
	if (content.version == 1)
	{
		ereport(LOG,
				(errmsg("fencing state file \"%s\" was written by fencing 1.0: fence tokens make a fresh start", FENCING_STATE_FILE),
				 errdetail("Tokens continue above " UINT64_FORMAT " and above this server's clock plus fencing.clock_tolerance (%d ms).",
						   content.limit, clock_tolerance_ms)));
		state->fresh_start = true;
		state->fresh_reason = FRESH_VERSION_1_FILE;
		return;
	}
	state->file_timeline = content.timeline;
	if (stat(FENCING_BACKUP_LABEL, &st) == 0)
	{
		ereport(LOG,
				(errmsg("fencing: the data directory was restored from a base backup: fence tokens make a fresh start"),
				 errdetail("Tokens continue above " UINT64_FORMAT " and above this server's clock plus fencing.clock_tolerance (%d ms).",
						   content.limit, clock_tolerance_ms)));
		state->fresh_start = true;
		state->fresh_reason = FRESH_BACKUP_LABEL;
		if (content.timeline != 0)
		{
			(void) write_state_file(content.limit, 0, FATAL);
			state->file_timeline = 0;
		}
	}
	else if (content.timeline == 0)
	{
		state->fresh_start = true;
		state->fresh_reason = FRESH_UNKNOWN_TIMELINE;
	}
}

/*
 * The ERROR for a record this build did not write.  Redo must not trust a
 * record blindly: another extension may use the same resource manager id.
 */
static void
report_invalid_record(XLogReaderState *record, const char *detail)
{
	ereport(ERROR,
			(errcode(ERRCODE_DATA_CORRUPTED),
			 errmsg("invalid fencing WAL record at %X/%X (resource manager %d)",
					LSN_FORMAT_ARGS(record->ReadRecPtr), XLogRecGetRmid(record)),
			 errdetail("%s", detail),
			 errhint("Another extension may write WAL under the same resource manager id; fencing uses id %d, and id %d for WAL written by fencing 1.0 unless fencing.replay_1_0_wal is off.",
					 FENCING_RMGR_ID, FENCING_1_0_RMGR_ID)));
}

/*
 * Check a record and return its limit; shared by redo and desc.  Returns
 * NULL when the record is valid, else a sentence saying what is wrong.
 */
static const char *
check_record(XLogReaderState *record, uint64 *limit)
{
	uint8		info = XLogRecGetInfo(record) & ~XLR_INFO_MASK;
	xl_fencing_reserve xlrec;

	if (info != XLOG_FENCING_RESERVE)
		return psprintf("Its info bits are 0x%02X; fencing writes only 0x%02X (RESERVE).",
						info, XLOG_FENCING_RESERVE);
	if (XLogRecHasAnyBlockRefs(record))
		return pstrdup("It references data blocks; a fencing reservation references none.");
	if (XLogRecGetDataLen(record) != sizeof(xlrec))
		return psprintf("It carries %u bytes of data; a fencing reservation carries %d.",
						XLogRecGetDataLen(record), (int) sizeof(xlrec));
	memcpy(&xlrec, XLogRecGetData(record), sizeof(xlrec));
	if (xlrec.limit > (uint64) PG_INT64_MAX)
		return psprintf("Its limit " UINT64_FORMAT " is above the largest bigint.",
						xlrec.limit);
	*limit = xlrec.limit;
	return NULL;
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
fencing_rmgr_redo(XLogReaderState *record)
{
	FencingTokenState *state = fencing_token_state;
	const char *problem;
	uint64		limit = 0;
	TimeLineID	timeline;

	problem = check_record(record, &limit);
	if (problem != NULL)
		report_invalid_record(record, problem);
#ifdef FENCING_MUTANT_REDO_NOOP
	return;
#endif
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

		if (write_state_file(file_limit, timeline, WARNING))
		{
			if (state->file_behind)
				ereport(LOG,
						(errmsg("fencing state file \"%s\" is up to date again", FENCING_STATE_FILE)));
			state->file_limit = file_limit;
			state->file_timeline = timeline;
			state->file_behind = false;
		}
		else
			state->file_behind = true;
	}
	LWLockRelease(state->lock);
}

/* Describe a record, for redo error context and pg_walinspect. */
static void
fencing_rmgr_desc(StringInfo buf, XLogReaderState *record)
{
	uint64		limit = 0;
	const char *problem = check_record(record, &limit);

	if (problem == NULL)
		appendStringInfo(buf, "limit " UINT64_FORMAT, limit);
	else
		appendStringInfo(buf, "invalid record: %s", problem);
}

/* Name a record type. */
static const char *
fencing_rmgr_identify(uint8 info)
{
	if ((info & ~XLR_INFO_MASK) == XLOG_FENCING_RESERVE)
		return "RESERVE";
	return NULL;
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
