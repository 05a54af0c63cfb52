/*-------------------------------------------------------------------------
 *
 * tokens.h
 *		The token layer: fence tokens from one shared counter, made
 *		durable by reservations.
 *
 * Above the base layer, below locks and fences, which draw tokens here:
 *
 *	rmgr.c			fencing's WAL resource managers; each module registers
 *					the records it writes (their info codes, check, redo,
 *					desc), so that redo never calls upward
 *	state_file.c	$PGDATA/fencing.state, the limit across checkpoints
 *	sync_wait.c		the wait for synchronous standbys, as a commit waits
 *	token_wal.c		the shared state (its owner) and the reservations
 *	tokens.c		the fast path and the token functions
 *
 * Copyright (c) 2026, the fencing developers
 *
 * IDENTIFICATION
 *		src/tokens/tokens.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef FENCING_TOKENS_H
#define FENCING_TOKENS_H

#include "base/base.h"

#include "access/xlogdefs.h"
#include "lib/stringinfo.h"
#include "port/atomics.h"
#include "storage/lwlock.h"

struct XLogReaderState;

/*
 * Tokens count nanoseconds: the clock floor is the number of microseconds
 * since 2000-01-01 times this factor.  A bigint of nanoseconds lasts until
 * about 2292, and every such token is far above every token fencing 1.0
 * issued, which counted microseconds.
 */
#define FENCING_NS_PER_CLOCK_UNIT	INT64CONST(1000)

/* Tokens covered by one reservation: one millisecond of clock. */
#define FENCING_RESERVE_BLOCK		INT64CONST(1000000)

/*
 * The lead bound B: no reservation publishes a limit above the clock plus
 * this (two milliseconds), so every token is at most B above its server's
 * clock when it is issued.  Exceptions (a clock stepped back by more than
 * fencing.clock_tolerance, advance_token far ahead) are logged and shown by
 * fencing.status().
 */
#define FENCING_LEAD_BOUND			INT64CONST(2000000)

/*
 * The largest at_least advance_token accepts: a reservation above it,
 * block included, must still fit in a bigint.
 */
#define FENCING_MAX_AT_LEAST		(PG_INT64_MAX - FENCING_RESERVE_BLOCK - 1)

/* ---------------------------------------------------------------------
 * The shared state (token_wal.c owns it; tokens.c's fast path reads it)
 * ---------------------------------------------------------------------
 */

/*
 * counter is the last value taken by pg_atomic_add_fetch_u64; limit is the
 * highest value covered by a reservation that is in the state file, flushed
 * to WAL and confirmed by synchronous standbys.  A value t is handed out
 * only once t <= limit, so after any crash the server restarts above every
 * token it ever returned.  counter may run ahead of limit while the backends
 * holding those values wait for a reservation.
 *
 * The rest is touched only by reservations and redo, under lock:
 * pending_limit/pending_lsn describe the newest reservation record written
 * (perhaps not yet flushed or confirmed), so that backends arriving at the
 * boundary together share one WAL record and one flush; file_limit and
 * file_timeline are what the state file holds (timeline 0: unknown).
 *
 * fresh_start is set when this server may not know every token issued
 * before (no state file, a file from fencing 1.0, a data directory restored
 * from a base backup); timeline_checked once the first reservation has
 * compared the file's timeline with the current one.  file_behind is set
 * when redo could not write the state file; ahead_logged while reservations
 * run ahead of the clock by more than the lead bound, so that it is logged
 * once per episode.  fresh_reason says why, for the log (a FreshStartReason).
 */
typedef struct FencingTokenState
{
	pg_atomic_uint64 counter;
	pg_atomic_uint64 limit;
	LWLock	   *lock;
	uint64		pending_limit;
	XLogRecPtr	pending_lsn;
	uint64		file_limit;
	TimeLineID	file_timeline;
	bool		fresh_start;
	uint8		fresh_reason;
	bool		timeline_checked;
	bool		file_behind;
	bool		ahead_logged;
} FencingTokenState;

extern FencingTokenState *fencing_token_state;

/* Lift an atomic counter to at least "to"; never moves it back. */
static inline void
fencing_raise_atomic(pg_atomic_uint64 *value, uint64 to)
{
	uint64		current = pg_atomic_read_u64(value);

	while (current < to &&
		   !pg_atomic_compare_exchange_u64(value, &current, to))
		;
}

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

/* ---------------------------------------------------------------------
 * rmgr.c
 * ---------------------------------------------------------------------
 */

/*
 * Every WAL record of the extension is written under this resource manager
 * id (to be listed on
 * https://wiki.postgresql.org/wiki/CustomWALResourceManagers).
 */
#define FENCING_RMGR_ID			199

/*
 * The records one module writes under fencing's resource manager, told
 * apart by their info code (XLogRecGetInfo() & ~XLR_INFO_MASK).  identify
 * names a code of the module's, or returns NULL for a code that is not;
 * check returns NULL for a valid record, else a sentence saying what is
 * wrong (redo then stops with an error, desc shows it); redo and desc are
 * called only for valid records.  Registered from _PG_init, before
 * recovery can meet a record.
 */
typedef struct FencingWalRecords
{
	const char *(*identify) (uint8 info);
	const char *(*check) (struct XLogReaderState *record);
	void		(*redo) (struct XLogReaderState *record);
	void		(*desc) (StringInfo buf, struct XLogReaderState *record);
} FencingWalRecords;

extern void fencing_rmgr_init(void);
extern void fencing_wal_register_records(const FencingWalRecords *records);

/* ---------------------------------------------------------------------
 * state_file.c
 * ---------------------------------------------------------------------
 */
extern bool fencing_state_file_write(uint64 limit, TimeLineID timeline,
									 int elevel);
extern void fencing_state_file_load(FencingTokenState *state,
									int clock_tolerance_ms);
extern const char *fencing_state_file_path(void);

/* ---------------------------------------------------------------------
 * sync_wait.c
 * ---------------------------------------------------------------------
 */
extern void fencing_wait_for_sync_standbys(XLogRecPtr lsn, const char *what,
										   const char *detail);

/* ---------------------------------------------------------------------
 * token_wal.c
 * ---------------------------------------------------------------------
 */

/* What fencing.status() shows about reservations. */
typedef struct FencingTokenWalStatus
{
	int64		clock_floor;
	int			clock_tolerance_ms;
	bool		fresh_start_pending;
	bool		state_file_behind;
} FencingTokenWalStatus;

extern void fencing_token_wal_init(void);
extern void fencing_reserve_tokens(uint64 needed);
extern int64 fencing_clock_floor(void);
extern void fencing_token_wal_status(FencingTokenWalStatus *status);

/* ---------------------------------------------------------------------
 * tokens.c
 * ---------------------------------------------------------------------
 */
extern int64 fencing_issue_token(void);
extern int64 fencing_read_latest_token(void);
extern int64 fencing_read_reserved_limit(void);

#endif							/* FENCING_TOKENS_H */
