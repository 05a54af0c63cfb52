/*-------------------------------------------------------------------------
 *
 * reports.c
 *		The errors of reject_stale(): a write without a token, with two, a
 *		token never issued, a stale one, a row moved out of its fence.
 *
 * Each names the table, the fence column and the tokens, and says what to
 * do; a stale or missing token has the extension's own SQLSTATE, which no
 * framework retries: the holder must stop.
 *
 * Copyright (c) 2026, the fencing developers
 *
 * IDENTIFICATION
 *		src/fence/reports.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/rel.h"

#include "fence/fence.h"

/*
 * F2: a write that claims no token cannot be ordered against the row's
 * fence, so it is refused with the same SQLSTATE as a stale one: the
 * caller has a bug or lost its lock, and retrying will not help.  When
 * fencing.token holds a value from an earlier transaction, say so: that
 * caller relied on a session-level SET (F6).
 */
void
fencing_fence_report_missing(Relation rel, const char *column,
							 FenceMissingKind kind, FenceStaleMode mode)
{
	/*
	 * In 'skip' mode a caller may expect every unwanted write to be skipped;
	 * only stale ones are (a write without a token cannot be ordered), so
	 * the detail says so.
	 */
	const char *skip_note = mode == FENCE_STALE_SKIP ?
		" The table skips stale writes (on_stale 'skip'); a write without a token is an error in every mode." : "";

	ereport(ERROR,
			(errcode(ERRCODE_FENCING_STALE_TOKEN),
			 errmsg("missing fence token for %s on table %s",
					kind == FENCE_MISSING_DELETE ? "DELETE" : "write",
					fencing_qualified_relname(rel)),
			 fencing_token_setting.is_set ?
			 errdetail("fencing.token was set in an earlier transaction; it counts only in the transaction that set it.%s",
					   skip_note) :
			 kind == FENCE_MISSING_DELETE ?
			 errdetail("A DELETE on a fenced table is checked against fencing.token, which is not set.%s",
					   skip_note) :
			 kind == FENCE_MISSING_MERGE ?
			 errdetail("A MERGE on a protected table needs SET LOCAL fencing.token: PostgreSQL gives a row trigger the union of the columns of all the MERGE's UPDATE actions, so the trigger cannot tell which action fired.%s",
					   skip_note) :
			 kind == FENCE_MISSING_NULL ?
			 errdetail("The statement sets fence column \"%s\" to NULL and fencing.token is not set.%s",
					   column, skip_note) :
			 errdetail("The statement gives no value for fence column \"%s\" and fencing.token is not set.%s",
					   column, skip_note),
			 fencing_token_setting.is_set ?
			 errhint("Run SET LOCAL fencing.token = <token of the lock you hold> in the transaction that writes.") :
			 kind == FENCE_MISSING_DELETE ?
			 errhint("Run SET LOCAL fencing.token = <token of the lock you hold> in the transaction that deletes.") :
			 kind == FENCE_MISSING_MERGE ?
			 errhint("Run SET LOCAL fencing.token = <token of the lock you hold> before the MERGE.") :
			 errhint("Run SET LOCAL fencing.token = <token of the lock you hold>, or assign the token to column \"%s\".",
					 column),
			 errtable(rel)));
}

/*
 * A write whose fence column holds another value than fencing.token claims
 * two tokens, and only one of them could be checked against the row: refuse
 * it rather than guess which one the writer holds.
 */
void
fencing_fence_report_two_tokens(Relation rel, const char *column, int64 given)
{
	ereport(ERROR,
			(errcode(ERRCODE_FENCING_STALE_TOKEN),
			 errmsg("two fence tokens for one write on table %s",
					fencing_qualified_relname(rel)),
			 errdetail("fencing.token is " INT64_FORMAT " but the statement sets fence column \"%s\" to " INT64_FORMAT "; a write carries one token.",
					   fencing_token_setting.value, column, given),
			 errhint("Leave column \"%s\" out of the statement (the trigger stamps fencing.token into it), or set it to the same token.",
					 column),
			 errtable(rel)));
}

/*
 * F8: a fence above every token issued so far (or below the first) was not
 * handed out by a lock; written into a row it would make the row
 * unwritable for every later holder.  Same SQLSTATE and wording as
 * check_fence() uses for the resource fence.
 */
void
fencing_fence_report_not_issued(Relation rel, const char *column, int64 token,
								int64 latest)
{
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("fence token " INT64_FORMAT " for table %s has not been issued",
					token, fencing_qualified_relname(rel)),
			 token < 1 ?
			 errdetail("Fence tokens start at 1.") :
			 errdetail("The highest token issued so far is " INT64_FORMAT ".", latest),
			 errhint("Write the token your lock call returned into column \"%s\"; an invented token would lock every later holder out of the row.",
					 column),
			 errtable(rel)));
}

/*
 * F1/F4: a holder whose token is below the row's fence has been superseded
 * (its lease ended and someone else wrote since).  Name the table and both
 * tokens, and say plainly that the job must stop: the SQLSTATE is not in a
 * class that frameworks retry.
 */
void
fencing_fence_report_stale(Relation rel, const char *column, int64 stale,
						   int64 current)
{
	ereport(ERROR,
			(errcode(ERRCODE_FENCING_STALE_TOKEN),
			 errmsg("stale fence token " INT64_FORMAT " for table %s",
					stale, fencing_qualified_relname(rel)),
			 errdetail("The row's fence column \"%s\" is already " INT64_FORMAT ", above the writer's token " INT64_FORMAT ".",
					   column, current, stale),
			 errhint("A newer holder exists; stop this job, do not retry."),
			 errtable(rel)));
}

/*
 * F3/F7: a row left a protected partition, by an UPDATE without
 * fencing.token, for a partition whose trigger did not claim it: the row
 * left the fence as by a DELETE, which needs fencing.token.  Missing-token
 * errors are raised in skip mode too.
 */
void
fencing_fence_report_unclaimed_move(Oid relid, const char *column)
{
	ereport(ERROR,
			(errcode(ERRCODE_FENCING_STALE_TOKEN),
			 errmsg("missing fence token for a row moved out of table %s",
					fencing_qualified_relid_name(relid)),
			 errdetail("The UPDATE moved a row to a partition that is not protected with fence column \"%s\"; a row leaving the fence is checked as a DELETE, against fencing.token, which is not set.",
					   column),
			 errhint("Run SET LOCAL fencing.token = <token of the lock you hold> in the transaction that moves the row, or protect the partitioned table above both partitions.")));
}
