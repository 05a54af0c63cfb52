/*-------------------------------------------------------------------------
 *
 * token_state.h
 *		The shared-memory state behind fence tokens, seen by tokens.c (the
 *		fast path) and token_wal.c (durable reservations and redo).
 *
 * Copyright (c) 2026, the fencing developers
 *
 * IDENTIFICATION
 *		src/token_state.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef FENCING_TOKEN_STATE_H
#define FENCING_TOKEN_STATE_H

#include "access/xlogdefs.h"
#include "port/atomics.h"
#include "storage/lwlock.h"

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
 * once per episode.  fresh_reason says why, for the log (token_wal.c).
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

#endif							/* FENCING_TOKEN_STATE_H */
