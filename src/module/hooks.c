/*-------------------------------------------------------------------------
 *
 * hooks.c
 *		The executor, utility, object access and post-parse-analysis
 *		hooks: where statement events reach the layers below.
 *
 * Every level of a statement passes here on its way in and out, errors
 * included.  The hooks keep base/statement.c's state (how deeply
 * statements nest, which query runs at the innermost level) and call down
 * into the layers that react to a statement event:
 *
 *	- the fence layer sees a statement that writes before it runs (views
 *	  that would fill a fence column in), the end of each ExecutorRun and
 *	  ExecutorFinish (rows a statement moved out of a fence), DDL before
 *	  and after it runs, and, through the object access hook, each table
 *	  TRUNCATE is about to empty and each trigger just created, and each
 *	  statement after parse analysis (INSERTs that leave a fence column
 *	  out get the token in it);
 *	- the lock layer sees each top-level statement begin and end: a
 *	  lease's ttl bounds the time its holder is idle between top-level
 *	  statements, which core measures only from a ReadyForQuery, so the
 *	  idle timer of lease_ceiling.c is stopped when a top-level statement
 *	  begins and armed when it ends; after each top-level statement a
 *	  lease's idle limit and ceiling are put back if the statement changed
 *	  them.
 *
 * Copyright (c) 2026, the fencing developers
 *
 * IDENTIFICATION
 *		src/module/hooks.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "executor/executor.h"
#include "parser/analyze.h"
#include "tcop/utility.h"

#include "module/module.h"

static ExecutorRun_hook_type prev_ExecutorRun = NULL;
static ExecutorFinish_hook_type prev_ExecutorFinish = NULL;
static ProcessUtility_hook_type prev_ProcessUtility = NULL;
static object_access_hook_type prev_object_access_hook = NULL;
static post_parse_analyze_hook_type prev_post_parse_analyze_hook = NULL;

static void statement_ExecutorRun(FENCING_EXECUTOR_RUN_ARGS);
static void statement_ExecutorFinish(QueryDesc *queryDesc);
static void statement_ProcessUtility(PlannedStmt *pstmt, const char *queryString,
									 bool readOnlyTree,
									 ProcessUtilityContext context,
									 ParamListInfo params,
									 QueryEnvironment *queryEnv,
									 DestReceiver *dest, QueryCompletion *qc);
static void statement_object_access(ObjectAccessType access, Oid classId,
									Oid objectId, int subId, void *arg);
static void statement_post_parse_analyze(ParseState *pstate, Query *query,
										 JumbleState *jstate);

/*
 * Install the hooks; called from _PG_init.
 */
void
fencing_hooks_init(void)
{
	prev_ExecutorRun = ExecutorRun_hook;
	ExecutorRun_hook = statement_ExecutorRun;
	prev_ExecutorFinish = ExecutorFinish_hook;
	ExecutorFinish_hook = statement_ExecutorFinish;
	prev_ProcessUtility = ProcessUtility_hook;
	ProcessUtility_hook = statement_ProcessUtility;
	prev_object_access_hook = object_access_hook;
	object_access_hook = statement_object_access;
	prev_post_parse_analyze_hook = post_parse_analyze_hook;
	post_parse_analyze_hook = statement_post_parse_analyze;
}

/*
 * After parse analysis: INSERTs into protected tables that leave the fence
 * column out get the token there (the fence layer's stamp.c).  Hooks
 * installed before ours see the statement first, as it was written.
 */
static void
statement_post_parse_analyze(ParseState *pstate, Query *query,
							 JumbleState *jstate)
{
	if (prev_post_parse_analyze_hook)
		prev_post_parse_analyze_hook(pstate, query, jstate);
	fencing_fence_add_token_column(query);
}

/*
 * ExecutorRun: count the level and note the query that runs there.  BEFORE
 * ROW triggers fire inside ExecutorRun.  A statement that writes is first
 * shown to the fence layer (views that would fill a fence column in), and
 * once it has run, again (rows it moved out of a fence).  At the top
 * level, a lease's holder is busy while it runs and idle from its end,
 * error or not.
 */
static void
statement_ExecutorRun(FENCING_EXECUTOR_RUN_ARGS)
{
	FencingStatementState saved;

	if (queryDesc->operation != CMD_SELECT ||
		queryDesc->plannedstmt->hasModifyingCTE)
		fencing_fence_check_plan(queryDesc->plannedstmt);

	if (fencing_statement.depth == 0)
		fencing_lease_idle_statement_start();
	fencing_statement_enter(&saved, queryDesc);
	PG_TRY();
	{
		if (prev_ExecutorRun)
			prev_ExecutorRun(FENCING_EXECUTOR_RUN_PASS);
		else
			standard_ExecutorRun(FENCING_EXECUTOR_RUN_PASS);
		fencing_fence_run_end();
	}
	PG_FINALLY();
	{
		fencing_statement_leave(&saved);
		if (saved.depth == 0)
			fencing_lease_idle_statement_end();
	}
	PG_END_TRY();
}

/*
 * After a top-level statement: a lease's idle limit and ceiling are put
 * back if the statement changed them.
 */
static void
top_level_statement_done(void)
{
	fencing_lease_keep_limit();
	fencing_lease_ceiling_keep();
}

/*
 * ExecutorFinish: the writable CTEs that the query did not read to the
 * end run here, with their BEFORE ROW triggers, and then the AFTER
 * triggers; functions they call are nested statements like any other.
 * Rows those CTEs moved out of a fence are checked when it ends, as at
 * the end of ExecutorRun.
 */
static void
statement_ExecutorFinish(QueryDesc *queryDesc)
{
	FencingStatementState saved;

	if (fencing_statement.depth == 0)
		fencing_lease_idle_statement_start();
	fencing_statement_enter(&saved, queryDesc);
	PG_TRY();
	{
		if (prev_ExecutorFinish)
			prev_ExecutorFinish(queryDesc);
		else
			standard_ExecutorFinish(queryDesc);
		fencing_fence_run_end();
	}
	PG_FINALLY();
	{
		fencing_statement_leave(&saved);
		if (saved.depth == 0)
			fencing_lease_idle_statement_end();
	}
	PG_END_TRY();
	if (saved.depth == 0)
		top_level_statement_done();
}

/*
 * ProcessUtility: count the level (CALL and DO run their statements one
 * level down), let the lock layer refuse a session's change of
 * fencing.lock_delay with a hint, and let the fence layer look at DDL
 * before and after it runs.
 */
static void
statement_ProcessUtility(PlannedStmt *pstmt, const char *queryString,
						 bool readOnlyTree, ProcessUtilityContext context,
						 ParamListInfo params, QueryEnvironment *queryEnv,
						 DestReceiver *dest, QueryCompletion *qc)
{
	FencingStatementState saved;

	fencing_lock_delay_refuse_set(pstmt->utilityStmt);
	fencing_fence_utility_before(pstmt);

	if (fencing_statement.depth == 0)
		fencing_lease_idle_statement_start();
	fencing_statement_enter(&saved, NULL);
	PG_TRY();
	{
		if (prev_ProcessUtility)
			prev_ProcessUtility(pstmt, queryString, readOnlyTree, context,
								params, queryEnv, dest, qc);
		else
			standard_ProcessUtility(pstmt, queryString, readOnlyTree, context,
									params, queryEnv, dest, qc);
	}
	PG_FINALLY();
	{
		fencing_statement_leave(&saved);
		if (saved.depth == 0)
			fencing_lease_idle_statement_end();
	}
	PG_END_TRY();

	fencing_fence_utility_after(pstmt);
	if (saved.depth == 0)
		top_level_statement_done();
}

/*
 * Object access hook: PostgreSQL calls it for each table TRUNCATE is about
 * to empty, once the name is resolved, and for each trigger just created,
 * with the table it is on: the fence layer checks those two there.
 */
static void
statement_object_access(ObjectAccessType access, Oid classId, Oid objectId,
						int subId, void *arg)
{
	if (prev_object_access_hook)
		prev_object_access_hook(access, classId, objectId, subId, arg);
	fencing_fence_object_access(access, classId, objectId, subId, arg);
}
