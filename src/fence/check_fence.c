/*-------------------------------------------------------------------------
 *
 * check_fence.c
 *		Fences for resources that are not one row: fencing.check_fence().
 *
 * An invoice run that inserts many lines, a file or a bucket has no row
 * whose fence column the trigger could compare with.  check_fence() keeps a
 * watermark per resource in fencing.resource_fences and raises it to the
 * caller's token in one INSERT ... ON CONFLICT DO UPDATE ... WHERE fence <=
 * token.  The row stays locked until the caller's transaction ends, so
 * concurrent calls on one resource serialise, and a caller that commits its
 * work in the same transaction has checked the fence atomically with it.
 * A stale token raises the same SQLSTATE as the trigger.
 *
 * The function is SECURITY DEFINER (the table is not writable by PUBLIC),
 * so it refuses tokens above fencing.latest_token(): a token nobody was
 * issued would let any role block a resource for everyone.  Even an issued
 * token, fresh from fencing.next_token(), fences out every holder of the
 * resource, so EXECUTE is revoked from PUBLIC (DESIGN.md F9): the owner
 * grants it to the roles that hold the locks and to services that check
 * the tokens their clients send.
 *
 * The table's owner, members of pg_write_all_data and superusers may write
 * the table itself, and a clean-up job that lowers or deletes a watermark
 * lets stale holders in again.  guard_resource_fences(), a trigger on the
 * table, holds the rule for every role: a row is updated only by the
 * statement fencing_raise_resource_fence() runs, never lowered or renamed;
 * a new row (what pg_restore's COPY loads) needs a canonical name and an
 * issued token; DELETE and TRUNCATE are refused.
 *
 * Copyright (c) 2026, the fencing developers
 *
 * IDENTIFICATION
 *		src/fence/check_fence.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "executor/spi.h"
#include "utils/builtins.h"
#include "utils/rel.h"

#include "fence/fence.h"

PG_FUNCTION_INFO_V1(fencing_check_fence);
PG_FUNCTION_INFO_V1(fencing_guard_resource_fences);

/* Prepared once per backend; every name in them carries its schema. */
static SPIPlanPtr raise_watermark_plan = NULL;
static SPIPlanPtr read_watermark_plan = NULL;

static const char *raise_watermark_sql =
"INSERT INTO fencing.resource_fences AS f (resource, fence)"
" VALUES ($1, $2)"
" ON CONFLICT (resource) DO UPDATE"
" SET fence = EXCLUDED.fence, updated_at = pg_catalog.now()"
" WHERE f.fence OPERATOR(pg_catalog.<=) EXCLUDED.fence"
" RETURNING f.fence";

/*
 * fencing_statement_depth() of the statement that
 * fencing_raise_resource_fence() runs while it runs, else 0: the only
 * statement whose row triggers may let a watermark be updated.
 */
static int	raising_depth = 0;

static const char *read_watermark_sql =
"SELECT f.resource, f.fence FROM fencing.resource_fences AS f"
" WHERE f.resource OPERATOR(pg_catalog.=) $1";

/*
 * Prepare a statement and keep it for the life of the backend: the check
 * sits on the path of every fenced job step, so it should not re-plan.
 */
static SPIPlanPtr
check_fence_prepare(const char *sql)
{
	Oid			argtypes[2] = {TEXTOID, INT8OID};
	SPIPlanPtr	plan;

	plan = SPI_prepare(sql, 2, argtypes);
	if (plan == NULL)
		elog(ERROR, "SPI_prepare of \"%s\" failed: %s", sql,
			 SPI_result_code_string(SPI_result));
	if (SPI_keepplan(plan) != 0)
		elog(ERROR, "SPI_keepplan failed");
	return plan;
}

/*
 * Run raise_watermark_sql for (resource, token), marked as the statement
 * that may update the table; a statement nested in it (run by another
 * trigger) is one level deeper and is not.
 */
static int
check_fence_run_raise(Datum *args)
{
	int			saved_depth = raising_depth;
	int			rc;

	if (raise_watermark_plan == NULL)
		raise_watermark_plan = check_fence_prepare(raise_watermark_sql);
	/* SPI runs the statement one executor level below the caller */
	raising_depth = fencing_statement_depth() + 1;
	PG_TRY();
	{
		rc = SPI_execute_plan(raise_watermark_plan, args, NULL, false, 0);
	}
	PG_FINALLY();
	{
		raising_depth = saved_depth;
	}
	PG_END_TRY();
	return rc;
}

/*
 * Raise the watermark of resource (canonical) to token (issued: 1 <= token
 * <= latest_token(), checked by the caller), or raise
 * ERRCODE_FENCING_STALE_TOKEN if a higher token has already passed.  The
 * one way a watermark changes: check_fence() and use_lease() call it.
 */
void
fencing_raise_resource_fence(text *resource, int64 token)
{
	Datum		args[2];
	int			rc;

	args[0] = PointerGetDatum(resource);
	args[1] = Int64GetDatum(token);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");

	rc = check_fence_run_raise(args);
	if (rc != SPI_OK_INSERT_RETURNING)
		elog(ERROR, "SPI_execute_plan of \"%s\" returned %s",
			 raise_watermark_sql, SPI_result_code_string(rc));

	if (SPI_processed == 0)
	{
		char	   *name = "?";
		int64		current = 0;

		/* the conflicting row is locked by us now: this reads its last version */
		if (read_watermark_plan == NULL)
			read_watermark_plan = check_fence_prepare(read_watermark_sql);
		rc = SPI_execute_plan(read_watermark_plan, args, NULL, false, 1);
		if (rc != SPI_OK_SELECT)
			elog(ERROR, "SPI_execute_plan of \"%s\" returned %s",
				 read_watermark_sql, SPI_result_code_string(rc));
		if (SPI_processed == 1)
		{
			bool		isnull;

			name = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
			current = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0],
												  SPI_tuptable->tupdesc, 2,
												  &isnull));
		}

		fencing_stat_add(FENCING_STAT_STALE_REJECTED, 1);
		ereport(ERROR,
				(errcode(ERRCODE_FENCING_STALE_TOKEN),
				 errmsg("stale fence token " INT64_FORMAT " for resource \"%s\"",
						token, name),
				 errdetail("The resource's fence is already " INT64_FORMAT ", above the writer's token " INT64_FORMAT ".",
						   current, token),
				 errhint("A newer holder exists; stop this job, do not retry.")));
	}

	SPI_finish();
}

/*
 * fencing.check_fence(resource text, token bigint) returns bigint: raise
 * the resource's watermark to token, or raise ERRCODE_FENCING_STALE_TOKEN
 * if a higher token has already passed.  Returns the token.
 */
Datum
fencing_check_fence(PG_FUNCTION_ARGS)
{
	int64		token;
	int64		latest;

	if (PG_ARGISNULL(0) || PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("fencing.check_fence(): %s must not be null",
						PG_ARGISNULL(0) ? "resource" : "token"),
				 errhint("Pass the resource's name and the token of the lock you hold.")));

	/* before judging the token: on a standby, "not issued" would hide why */
	fencing_error_if_standby("fencing.check_fence()");

	/* the trigger's rule (F8): 1 <= token <= latest_token() */
	token = PG_GETARG_INT64(1);
	if (token < 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("fencing.check_fence(): token " INT64_FORMAT " has not been issued", token),
				 errdetail("Fence tokens start at 1."),
				 errhint("Pass the token your lock call returned.")));

	latest = fencing_read_latest_token();
	if (token > latest)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("fencing.check_fence(): token " INT64_FORMAT " has not been issued", token),
				 errdetail("The highest token issued so far is " INT64_FORMAT ".", latest),
				 errhint("Pass the token your lock call returned; an invented token would block the resource for every later holder.")));

	/* canonical here, so that a bad name is called a resource name */
	fencing_raise_resource_fence(fencing_canonical_text(PG_GETARG_DATUM(0), "resource"),
								 token);
	PG_RETURN_INT64(token);
}

/*
 * Whether the guard fires for the statement fencing_raise_resource_fence()
 * runs, rather than for one nested in it or run by anything else.
 */
static bool
guard_by_raise(void)
{
	return raising_depth > 0 && raising_depth == fencing_statement_depth();
}

/*
 * The guard's refusal of a write that would lower or remove watermarks.
 */
static void
guard_refuse(const char *what)
{
	ereport(ERROR,
			(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			 errmsg("cannot %s fencing.resource_fences", what),
			 errdetail("A resource's fence only goes up, through fencing.check_fence(); lowering or removing it would let stale holders in again."),
			 errhint("Raise a resource's fence with fencing.check_fence(resource, token).")));
}

/*
 * F8 for a new row: its fence must be a token this cluster has issued.  A
 * new cluster that pg_restore fills has issued none yet: its first token
 * makes the fresh start above every earlier cluster's tokens (T4), so one
 * is drawn before a fence above latest_token() is refused.
 */
static void
guard_new_fence(const char *resource, int64 fence)
{
	int64		latest = fencing_read_latest_token();

	if (fence >= 1 && fence > latest)
	{
		(void) fencing_issue_token();
		latest = fencing_read_latest_token();
	}
	if (fence >= 1 && fence <= latest)
		return;
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("fence token " INT64_FORMAT " for resource \"%s\" has not been issued",
					fence, resource),
			 fence < 1 ?
			 errdetail("Fence tokens start at 1.") :
			 errdetail("The highest token issued so far is " INT64_FORMAT ".", latest),
			 errhint("A resource's fence is raised with fencing.check_fence(resource, token). Restoring fences of a cluster whose tokens run ahead of this one's clock needs fencing.advance_token() first.")));
}

/*
 * The resource and fence columns of fencing.resource_fences, found by name,
 * so that the table's own DDL cannot move them under the guard.
 */
static void
guard_columns(TupleDesc tupdesc, int *resource_col, int *fence_col)
{
	*resource_col = SPI_fnumber(tupdesc, "resource");
	*fence_col = SPI_fnumber(tupdesc, "fence");
	if (*resource_col <= 0 || *fence_col <= 0)
		elog(ERROR, "fencing.resource_fences has no column \"%s\"",
			 *resource_col <= 0 ? "resource" : "fence");
}

/*
 * An UPDATE of a watermark (the statement raise_watermark_sql runs, which
 * the caller has checked): only for the same resource, upwards, to an
 * issued token.
 */
static void
guard_update(TriggerData *trigdata, int resource_col, int fence_col,
			 const char *resource, int64 fence)
{
	TupleDesc	tupdesc = RelationGetDescr(trigdata->tg_relation);
	char	   *old_resource;
	int64		old_fence;
	bool		isnull;

	old_resource = SPI_getvalue(trigdata->tg_trigtuple, tupdesc, resource_col);
	old_fence = DatumGetInt64(heap_getattr(trigdata->tg_trigtuple, fence_col,
										   tupdesc, &isnull));
	if (old_resource == NULL || strcmp(old_resource, resource) != 0 ||
		fence < old_fence || fence > fencing_read_latest_token())
		guard_refuse("update");
}

/*
 * A new row: check_fence's, or one that pg_restore's COPY loads, which
 * needs the canonical name check_fence() would have looked it up by, and
 * an issued token.
 */
static void
guard_new_row(const char *resource, int64 fence)
{
	if (!guard_by_raise())
	{
		text	   *canonical = fencing_canonical_text(CStringGetTextDatum(resource),
													   "resource");

		if (strcmp(text_to_cstring(canonical), resource) != 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("resource name \"%s\" is not in canonical form", resource),
					 errdetail("fencing.check_fence() looks resources up by their canonical name, \"%s\".",
							   text_to_cstring(canonical)),
					 errhint("Raise a resource's fence with fencing.check_fence(resource, token).")));
	}
	guard_new_fence(resource, fence);
}

/*
 * fencing.guard_resource_fences(): BEFORE INSERT OR UPDATE OR DELETE FOR
 * EACH ROW and BEFORE TRUNCATE on fencing.resource_fences, the rule of the
 * file header for every role that can write the table.
 */
Datum
fencing_guard_resource_fences(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	TupleDesc	tupdesc;
	HeapTuple	newtuple;
	int			resource_col;
	int			fence_col;
	bool		isnull;
	char	   *resource;
	int64		fence;
	Datum		value;

	if (!CALLED_AS_TRIGGER(fcinfo) ||
		!(TRIGGER_FIRED_BEFORE(trigdata->tg_event) &&
		  (TRIGGER_FIRED_FOR_ROW(trigdata->tg_event) ||
		   TRIGGER_FIRED_BY_TRUNCATE(trigdata->tg_event))))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("fencing.guard_resource_fences() must be fired BEFORE each row or BEFORE TRUNCATE"),
				 errhint("It is the extension's own trigger on fencing.resource_fences.")));

	if (TRIGGER_FIRED_BY_TRUNCATE(trigdata->tg_event))
		guard_refuse("truncate");
	if (TRIGGER_FIRED_BY_DELETE(trigdata->tg_event))
		guard_refuse("delete from");
	if (TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event) && !guard_by_raise())
		guard_refuse("update");

	tupdesc = RelationGetDescr(trigdata->tg_relation);
	guard_columns(tupdesc, &resource_col, &fence_col);
	newtuple = TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event) ?
		trigdata->tg_newtuple : trigdata->tg_trigtuple;
	value = heap_getattr(newtuple, fence_col, tupdesc, &isnull);
	fence = isnull ? 0 : DatumGetInt64(value);
	resource = SPI_getvalue(newtuple, tupdesc, resource_col);
	if (resource == NULL)
		resource = "";

	if (TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event))
		guard_update(trigdata, resource_col, fence_col, resource, fence);
	else
		guard_new_row(resource, fence);
	return PointerGetDatum(newtuple);
}
