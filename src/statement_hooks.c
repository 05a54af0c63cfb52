/*-------------------------------------------------------------------------
 *
 * statement_hooks.c
 *		Where in a statement this backend is: how deeply statements nest,
 *		and whether a MERGE is running; and the utility hook through which
 *		fence_ddl.c sees DDL on protected tables.
 *
 * Two guarantees need to know the statement around a function call, which
 * fmgr does not tell:
 *
 *	- A row trigger fired by MERGE is told the union of the columns that
 *	  all of the MERGE's UPDATE actions assign, not those of the action that
 *	  fired, so reject_stale() must know that a MERGE is running to refuse
 *	  to take an untouched fence column for a token (DESIGN.md F7).
 *	- A lock taken by a statement that runs outside a transaction block is
 *	  released when that statement ends; the lock functions warn about it
 *	  only when they are called by the top-level statement itself, not from
 *	  inside a function, procedure or DO block that may do its work in the
 *	  same statement.
 *
 * And a lease's ttl bounds the time its holder is idle between top-level
 * statements, which core measures only from a ReadyForQuery: the idle timer
 * of lease_ceiling.c is stopped when a top-level statement begins and armed
 * when it ends.
 *
 * The depth counts the executor and utility levels that are running, as
 * pg_stat_statements does for its nesting level: 1 while a top-level query
 * runs, more inside functions it calls.  Both counters are restored on the
 * way out, errors included, so a caught error cannot leave them wrong.
 *
 * Copyright (c) 2026, the fencing developers
 *
 * IDENTIFICATION
 *		src/statement_hooks.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "executor/executor.h"
#include "tcop/utility.h"

#include "compat.h"
#include "fencing.h"

/* executor and utility levels running now; 0 between statements */
static int	statement_depth = 0;

/* MERGE statements running now (MERGE can nest through functions) */
static int	merge_depth = 0;

static ExecutorRun_hook_type prev_ExecutorRun = NULL;
static ExecutorFinish_hook_type prev_ExecutorFinish = NULL;
static ProcessUtility_hook_type prev_ProcessUtility = NULL;
static object_access_hook_type prev_object_access_hook = NULL;

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

/*
 * Install the hooks; called from _PG_init.
 */
void
fencing_statement_hooks_init(void)
{
	prev_ExecutorRun = ExecutorRun_hook;
	ExecutorRun_hook = statement_ExecutorRun;
	prev_ExecutorFinish = ExecutorFinish_hook;
	ExecutorFinish_hook = statement_ExecutorFinish;
	prev_ProcessUtility = ProcessUtility_hook;
	ProcessUtility_hook = statement_ProcessUtility;
	prev_object_access_hook = object_access_hook;
	object_access_hook = statement_object_access;
}

/*
 * Whether a MERGE statement is running in this backend, at any level.  A
 * row trigger that fires while this is true may have been fired by the
 * MERGE or by a statement nested inside it; reject_stale() treats both the
 * same way, which errs on the safe side.
 */
bool
fencing_merge_running(void)
{
	return merge_depth > 0;
}

/*
 * Whether the function being called belongs to the top-level statement of
 * the client (depth 1), rather than to a statement inside a function,
 * procedure or DO block.
 *
 * The depth alone cannot tell: PL/pgSQL evaluates simple expressions
 * ("x := f()", "RETURN f()") without the executor, so a function called
 * that way from a PL/pgSQL function of a top-level query still sees depth
 * 1.  Every procedural language (and SQL functions) pushes an error context
 * while it runs its code, and the client's own statement runs with none,
 * so an empty error context stack tells the two apart.  Anything else that
 * pushed a context only makes the answer "not top level", the safe side
 * for the one caller, a warning.
 */
bool
fencing_called_from_top_level(void)
{
	return statement_depth <= 1 && error_context_stack == NULL;
}

/*
 * The executor level running now: 1 inside a top-level query, more inside
 * functions it calls.  A row trigger fires at the level of the statement
 * that wrote the row.
 */
int
fencing_statement_depth(void)
{
	return statement_depth;
}

/*
 * ExecutorRun: count the level, and whether it is a MERGE.  BEFORE ROW
 * triggers fire inside ExecutorRun.  A statement that writes is first
 * shown to fence_ddl.c (views that would fill a fence column in), and
 * once it has run, to fence_trigger.c (rows it moved out of a fence).  At
 * the top level, a lease's holder is busy while it runs and idle from its
 * end, error or not (lease_ceiling.c's idle timer); so in the two hooks
 * below.
 */
static void
statement_ExecutorRun(FENCING_EXECUTOR_RUN_ARGS)
{
	int			saved_depth = statement_depth;
	int			saved_merge = merge_depth;

	if (queryDesc->operation != CMD_SELECT ||
		queryDesc->plannedstmt->hasModifyingCTE)
		fencing_fence_check_plan(queryDesc->plannedstmt);

	if (saved_depth == 0)
		fencing_lease_idle_statement_start();
	statement_depth++;
	if (queryDesc->operation == CMD_MERGE)
		merge_depth++;
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
		statement_depth = saved_depth;
		merge_depth = saved_merge;
		if (saved_depth == 0)
			fencing_lease_idle_statement_end();
	}
	PG_END_TRY();
}

/*
 * ExecutorFinish: AFTER triggers run here; functions they call are nested
 * statements like any other.  The end of a top-level statement is where a
 * lease's idle limit and ceiling are put back if the statement changed them.
 */
static void
statement_ExecutorFinish(QueryDesc *queryDesc)
{
	int			saved_depth = statement_depth;

	if (saved_depth == 0)
		fencing_lease_idle_statement_start();
	statement_depth++;
	PG_TRY();
	{
		if (prev_ExecutorFinish)
			prev_ExecutorFinish(queryDesc);
		else
			standard_ExecutorFinish(queryDesc);
	}
	PG_FINALLY();
	{
		statement_depth = saved_depth;
		if (saved_depth == 0)
			fencing_lease_idle_statement_end();
	}
	PG_END_TRY();
	if (saved_depth == 0)
	{
		fencing_lease_keep_limit();
		fencing_lease_ceiling_keep();
	}
}

/*
 * ProcessUtility: count the level (CALL and DO run their statements one
 * level down), and let fence_ddl.c look at DDL before and after it runs.
 */
static void
statement_ProcessUtility(PlannedStmt *pstmt, const char *queryString,
						 bool readOnlyTree, ProcessUtilityContext context,
						 ParamListInfo params, QueryEnvironment *queryEnv,
						 DestReceiver *dest, QueryCompletion *qc)
{
	int			saved_depth = statement_depth;

	fencing_fence_utility_before(pstmt);

	if (saved_depth == 0)
		fencing_lease_idle_statement_start();
	statement_depth++;
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
		statement_depth = saved_depth;
		if (saved_depth == 0)
			fencing_lease_idle_statement_end();
	}
	PG_END_TRY();

	fencing_fence_utility_after(pstmt);
	if (saved_depth == 0)
	{
		fencing_lease_keep_limit();
		fencing_lease_ceiling_keep();
	}
}

/*
 * Object access hook: PostgreSQL calls it for each table TRUNCATE is about
 * to empty, once the name is resolved, and for each trigger just created,
 * with the table it is on: fence_ddl.c checks those two there.
 */
static void
statement_object_access(ObjectAccessType access, Oid classId, Oid objectId,
						int subId, void *arg)
{
	if (prev_object_access_hook)
		prev_object_access_hook(access, classId, objectId, subId, arg);
	fencing_fence_object_access(access, classId, objectId, subId, arg);
}
