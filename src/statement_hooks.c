/*-------------------------------------------------------------------------
 *
 * statement_hooks.c
 *		Where in a statement this backend is: how deeply statements nest,
 *		and which query's executor runs at the innermost level; and the
 *		utility hook through which fence_ddl.c sees DDL on protected tables.
 *
 * Two guarantees need to know the statement around a function call, which
 * fmgr does not tell:
 *
 *	- A row trigger is not told which ModifyTable node fired it.  A MERGE
 *	  tells its row triggers the union of the columns that all of its
 *	  UPDATE actions assign, not those of the action that fired, and an
 *	  UPDATE that moves a row to another partition fires a DELETE and an
 *	  INSERT trigger that look like any other: reject_stale() finds the
 *	  node in the running query's executor state (DESIGN.md F3, F7).
 *	- A lock taken by a statement that runs outside a transaction block is
 *	  released when that statement ends; the lock functions warn about it
 *	  (and set_token() refuses to run) only when they are called by the
 *	  top-level statement itself, whatever protocol the client speaks, not
 *	  from inside a function, procedure or DO block that may do its work in
 *	  the same statement.
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

#include "access/xact.h"
#include "executor/executor.h"
#include "nodes/params.h"
#include "tcop/utility.h"

#include "compat.h"
#include "fencing.h"

/* executor and utility levels running now; 0 between statements */
static int	statement_depth = 0;

/*
 * The query whose executor runs now at the innermost level, and that
 * level: a trigger fired at another level (a utility statement's, such as
 * COPY) has no query.
 */
static QueryDesc *running_query = NULL;
static int	running_query_depth = 0;

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
 * The query whose ExecutorRun or ExecutorFinish is running at the current
 * level, or NULL.  A row trigger fires inside the executor of the query
 * whose ModifyTable node wrote the row, at that query's level; statements
 * that the trigger itself runs are one level down, with queries of their
 * own.
 */
QueryDesc *
fencing_running_query(void)
{
	return running_query_depth == statement_depth ? running_query : NULL;
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
 * while it runs its code.  The client's own statement runs with none in
 * the simple query protocol, and in the extended protocol with only the
 * one postgres.c pushes around Bind and Execute to name the portal's
 * parameters in errors (ParamsErrorCallback), whether the statement is
 * named or unnamed and has parameters or not.  So a stack that holds
 * nothing else tells the two apart.  Anything else that pushed a context
 * only makes the answer "not top level": the autocommit warning is then
 * not given, and set_token() is allowed, as SET LOCAL is in a function.
 */
bool
fencing_called_from_top_level(void)
{
	ErrorContextCallback *context;

	if (statement_depth > 1)
		return false;
	for (context = error_context_stack; context != NULL;
		 context = context->previous)
	{
		if (context->callback != ParamsErrorCallback)
			return false;
	}
	return true;
}

/*
 * Whether the client's own statement is calling, outside any transaction
 * block, so that whatever the call sets up for the transaction ends with
 * this statement: a lock, a lease, fencing.token.
 *
 * A transaction block is BEGIN ... COMMIT, and also the implicit one of
 * several statements sent in one simple query.  In the extended protocol
 * every statement up to the next Sync runs in one transaction, and a
 * pipeline sends several: from its second statement on, a statement
 * shares its transaction with the ones before it.  PostgreSQL 18 makes
 * those statements an implicit transaction block; 15 and 17 only flag the
 * transaction once an Execute completed without committing
 * (XACT_FLAGS_PIPELINING), and reading the flag gives every version the
 * same answer.  When a pipeline's first statement runs, nothing tells it
 * from a lone statement whose Sync follows: it counts as outside.
 */
bool
fencing_outside_transaction_block(void)
{
	if (IsTransactionBlock())
		return false;
	if ((MyXactFlags & XACT_FLAGS_PIPELINING) != 0)
		return false;
	return fencing_called_from_top_level();
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
 * ExecutorRun: count the level and note the query that runs there.  BEFORE
 * ROW triggers fire inside ExecutorRun.  A statement that writes is first
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
	QueryDesc  *saved_query = running_query;
	int			saved_query_depth = running_query_depth;

	if (queryDesc->operation != CMD_SELECT ||
		queryDesc->plannedstmt->hasModifyingCTE)
		fencing_fence_check_plan(queryDesc->plannedstmt);

	if (saved_depth == 0)
		fencing_lease_idle_statement_start();
	statement_depth++;
	running_query = queryDesc;
	running_query_depth = statement_depth;
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
		running_query = saved_query;
		running_query_depth = saved_query_depth;
		if (saved_depth == 0)
			fencing_lease_idle_statement_end();
	}
	PG_END_TRY();
}

/*
 * ExecutorFinish: the writable CTEs that the query did not read to the
 * end run here, with their BEFORE ROW triggers, and then the AFTER
 * triggers; functions they call are nested statements like any other.
 * Rows those CTEs moved out of a fence are checked when it ends, as at
 * the end of ExecutorRun.  The end of a top-level statement is where a
 * lease's idle limit and ceiling are put back if the statement changed them.
 */
static void
statement_ExecutorFinish(QueryDesc *queryDesc)
{
	int			saved_depth = statement_depth;
	QueryDesc  *saved_query = running_query;
	int			saved_query_depth = running_query_depth;

	if (saved_depth == 0)
		fencing_lease_idle_statement_start();
	statement_depth++;
	running_query = queryDesc;
	running_query_depth = statement_depth;
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
		statement_depth = saved_depth;
		running_query = saved_query;
		running_query_depth = saved_query_depth;
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
