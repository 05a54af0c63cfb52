/*-------------------------------------------------------------------------
 *
 * tokens.c
 *		Fence tokens: one shared-memory counter, one atomic add per token.
 *
 * A token is the value of pg_atomic_add_fetch_u64 on a cluster-wide
 * counter, so tokens are unique and every token is greater than every token
 * returned before its call began, across backends and databases (T1).  It
 * is handed out only when it is at or below the durable reservation limit;
 * crossing the limit calls down into token_wal.c, which owns the shared
 * state and reserves the next block (T2, T3, T4).  The fast path takes no
 * LWLock, allocates nothing, makes no system call, writes no WAL and
 * assigns no transaction id (T5).
 *
 * Copyright (c) 2026, the fencing developers
 *
 * IDENTIFICATION
 *		src/tokens/tokens.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"

#include "tokens/tokens.h"

PG_FUNCTION_INFO_V1(fencing_next_token);
PG_FUNCTION_INFO_V1(fencing_latest_token);
PG_FUNCTION_INFO_V1(fencing_advance_token);

/*
 * The hot path: one atomic add and one read.  The returned value was drawn
 * during this call, so it is above every token returned before the call
 * began, and it is at or below the durable limit, so no crash can bring it
 * back.
 */
int64
fencing_issue_token(void)
{
	uint64		token;

	fencing_error_if_standby("fencing.next_token()");

	for (;;)
	{
		token = pg_atomic_add_fetch_u64(&fencing_token_state->counter, 1);
		if (likely(token <= pg_atomic_read_u64(&fencing_token_state->limit)))
			break;

		/*
		 * Past the limit: wait for a reservation that covers this value, then
		 * draw again, because the reservation may have lifted the counter to
		 * the clock floor and a value drawn before the lift would sit below
		 * it.
		 */
		fencing_reserve_tokens(token);
	}

	fencing_stat_add(FENCING_STAT_TOKENS_ISSUED, 1);
	return (int64) token;
}

/*
 * The highest token that may have been handed out.  Values above the limit
 * have not been handed out yet, so the smaller of the two is a tight upper
 * bound; after a restart it is the durable limit.
 */
int64
fencing_read_latest_token(void)
{
	uint64		counter = pg_atomic_read_u64(&fencing_token_state->counter);
	uint64		limit = pg_atomic_read_u64(&fencing_token_state->limit);

	return (int64) Min(counter, limit);
}

/* The durable reservation limit, for fencing.status(). */
int64
fencing_read_reserved_limit(void)
{
	return (int64) pg_atomic_read_u64(&fencing_token_state->limit);
}

/*
 * SQL: fencing.next_token()
 */
Datum
fencing_next_token(PG_FUNCTION_ARGS)
{
	PG_RETURN_INT64(fencing_issue_token());
}

/*
 * SQL: fencing.latest_token()
 *
 * Allowed on a standby too, where it shows the limit replayed from the
 * primary's reservations: a monitoring query, not a token.
 */
Datum
fencing_latest_token(PG_FUNCTION_ARGS)
{
	PG_RETURN_INT64(fencing_read_latest_token());
}

/*
 * SQL: fencing.advance_token(at_least bigint)
 *
 * For an operator who knows tokens were issued elsewhere (an old cluster
 * whose clock ran ahead, a restore from an old backup): make a reservation
 * above at_least durable, then lift the counter to it, so neither this
 * session nor a crash can bring back a token at or below it.  Never moves
 * back.
 * Returns the latest token, which is now at least at_least.
 *
 * Every check that can fail comes before the counter moves, and the
 * counter moves only once the reservation is confirmed, so an error (also
 * a cancelled wait for synchronous standbys) leaves the counter and the
 * published limit as they were.  The reservation of a failed call may
 * already be in WAL and in the state file: the server then restarts above
 * it after a crash, which only skips values.  A target up to the lead bound
 * plus fencing.clock_tolerance beyond the clock makes the call wait for the
 * clock (token_wal.c); a target further ahead returns at once and voids the
 * lead bound until the clock passes it.
 */
Datum
fencing_advance_token(PG_FUNCTION_ARGS)
{
	int64		at_least;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("at_least must not be null")));
	at_least = PG_GETARG_INT64(0);
	if (at_least < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("at_least must not be negative"),
				 errdetail("Fence tokens are positive; %lld would never move the counter.",
						   (long long) at_least)));
	if (at_least > FENCING_MAX_AT_LEAST)
		ereport(ERROR,
				(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
				 errmsg("at_least must be at most %lld", (long long) FENCING_MAX_AT_LEAST),
				 errdetail("A reservation of " INT64_FORMAT " tokens above it must still fit in a bigint.",
						   FENCING_RESERVE_BLOCK)));
	fencing_error_if_standby("fencing.advance_token()");

	if (pg_atomic_read_u64(&fencing_token_state->limit) < (uint64) at_least + 1)
		fencing_reserve_tokens((uint64) at_least + 1);
	fencing_raise_atomic(&fencing_token_state->counter, (uint64) at_least);

	PG_RETURN_INT64(Max(fencing_read_latest_token(), at_least));
}
