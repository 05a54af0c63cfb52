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
 * Copyright (c) 2026, the fencing developers
 *
 * IDENTIFICATION
 *		src/check_fence.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "utils/builtins.h"

#include "fencing.h"

PG_FUNCTION_INFO_V1(fencing_check_fence);

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
 * fencing.check_fence(resource text, token bigint) returns bigint: raise
 * the resource's watermark to token, or raise ERRCODE_FENCING_STALE_TOKEN
 * if a higher token has already passed.  Returns the token.
 */
Datum
fencing_check_fence(PG_FUNCTION_ARGS)
{
	Datum		args[2];
	int64		token;
	int64		latest;
	int			rc;

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
#ifdef FENCING_MUTANT_CHECK_FENCE_UNISSUED_ALLOWED
	if (false)
#else
	if (token > latest)
#endif
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("fencing.check_fence(): token " INT64_FORMAT " has not been issued", token),
				 errdetail("The highest token issued so far is " INT64_FORMAT ".", latest),
				 errhint("Pass the token your lock call returned; an invented token would block the resource for every later holder.")));

	/* canonical here, so that a bad name is called a resource name */
	args[0] = PointerGetDatum(fencing_canonical_text(PG_GETARG_DATUM(0), "resource"));
	args[1] = Int64GetDatum(token);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");

	if (raise_watermark_plan == NULL)
		raise_watermark_plan = check_fence_prepare(raise_watermark_sql);
	rc = SPI_execute_plan(raise_watermark_plan, args, NULL, false, 0);
	if (rc != SPI_OK_INSERT_RETURNING)
		elog(ERROR, "SPI_execute_plan of \"%s\" returned %s",
			 raise_watermark_sql, SPI_result_code_string(rc));

	if (SPI_processed == 0)
	{
		char	   *resource = "?";
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

			resource = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
			current = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0],
												  SPI_tuptable->tupdesc, 2,
												  &isnull));
		}

		fencing_stat_add(FENCING_STAT_STALE_REJECTED, 1);
		ereport(ERROR,
				(errcode(ERRCODE_FENCING_STALE_TOKEN),
				 errmsg("stale fence token " INT64_FORMAT " for resource \"%s\"",
						token, resource),
				 errdetail("The resource's fence is already " INT64_FORMAT ", above the writer's token " INT64_FORMAT ".",
						   current, token),
				 errhint("A newer holder exists; stop this job, do not retry.")));
	}

	SPI_finish();
	PG_RETURN_INT64(token);
}
