/*-------------------------------------------------------------------------
 *
 * statement.c
 *		Where in a statement this backend is: how deeply statements nest,
 *		and which query's executor runs at the innermost level.
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
 * The state is plain data (base.h): the executor and utility hooks of the
 * module layer move it on the way into and out of every level, errors
 * included, so a caught error cannot leave it wrong.  The depth counts the
 * executor and utility levels that are running, as pg_stat_statements does
 * for its nesting level: 1 while a top-level query runs, more inside
 * functions it calls.
 *
 * Copyright (c) 2026, the fencing developers
 *
 * IDENTIFICATION
 *		src/base/statement.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "nodes/params.h"

#include "base/base.h"

FencingStatementState fencing_statement = {0, NULL, 0};

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
	return fencing_statement.query_depth == fencing_statement.depth ?
		fencing_statement.query : NULL;
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

	if (fencing_statement.depth > 1)
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
	return fencing_statement.depth;
}
