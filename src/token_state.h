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

/* Tokens covered by one reservation. */
#define FENCING_RESERVE_BLOCK		INT64CONST(1000000)

/*
 * The largest at_least advance_token accepts: a reservation above it,
 * block included, must still fit in a bigint.
 */
#define FENCING_MAX_AT_LEAST		(PG_INT64_MAX - FENCING_RESERVE_BLOCK - 1)

/*
 * counter is the last value taken by pg_atomic_add_fetch_u64; limit is the
 * highest value covered by a reservation that is flushed to WAL, confirmed by
 * synchronous standbys and written to the state file.  A value t is handed
 * out only once t <= limit, so after any crash the server restarts above
 * every token it ever returned.  counter may run ahead of limit while the
 * backends holding those values wait for a reservation.
 *
 * The rest is touched only by reservations, under lock:
 * pending_limit/pending_lsn describe the newest reservation record written
 * (perhaps not yet flushed or confirmed), so that backends arriving at the
 * boundary together share one WAL record and one flush; file_limit is what
 * the state file holds, and file_behind is set while redo could not write
 * it.
 */
typedef struct FencingTokenState
{
	pg_atomic_uint64 counter;
	pg_atomic_uint64 limit;
	LWLock	   *lock;
	uint64		pending_limit;
	XLogRecPtr	pending_lsn;
	uint64		file_limit;
	bool		file_behind;
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
