/*-------------------------------------------------------------------------
 *
 * stamp.c
 *		INSERTs into a protected table that leave its fence column out
 *		get fencing.token_in_force() in its place.
 *
 * With fencing.token set, the trigger stamps the token into each new row
 * whose fence column is NULL: a new copy of the row, which the executor
 * copies again into its slot, per row.  Most such INSERTs leave the fence
 * column out altogether (the token is the transaction's, not the
 * statement's).  For those the statement itself can compute the value:
 * after parse analysis, the column gets a call to token_in_force(), which
 * returns the token the trigger would stamp, or NULL when it would stamp
 * none.  The row is then built with its fence, and the trigger, which
 * still checks every row by its own rules (and still stamps a NULL),
 * finds nothing to change.
 *
 * Nothing is decided here that the trigger does not decide again: a value
 * put in by this file is the trigger's own fallback, read one step
 * earlier, so the rules of a fenced INSERT stay in trigger.c.  Only the
 * statement's own target, a table or partitioned table with an enabled
 * fence trigger whose fence column is a bigint, is changed; views, COPY,
 * MERGE and everything else keep the trigger's stamping.  The call counts
 * as the trigger's write: it needs no INSERT right on the column (column
 * privileges are not widened), as the trigger's stamp needs none.  A cached
 * plan follows protect() and unprotect(): both change the table's
 * triggers, which invalidates plans on it, and a new parse analysis passes
 * here again.
 *
 * Copyright (c) 2026, the fencing developers
 *
 * IDENTIFICATION
 *		src/fence/stamp.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/table.h"
#include "catalog/pg_trigger.h"
#include "catalog/pg_type.h"
#include "nodes/makefuncs.h"
#include "parser/parsetree.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"

#include "fence/fence.h"

/*
 * The fence column of rel's enabled fence trigger that fires before each
 * inserted row, or InvalidAttrNumber.  The trigger's first argument names
 * it ("fence" when it has none).
 */
static AttrNumber
stamp_fence_attnum(Relation rel)
{
	TriggerDesc *trigdesc = rel->trigdesc;
	Oid			funcid;
	int			i;

	if (trigdesc == NULL || !trigdesc->trig_insert_before_row)
		return InvalidAttrNumber;
	funcid = fencing_reject_stale_function();
	if (!OidIsValid(funcid))
		return InvalidAttrNumber;
	for (i = 0; i < trigdesc->numtriggers; i++)
	{
		Trigger    *trigger = &trigdesc->triggers[i];
		const char *column;

		if (trigger->tgfoid != funcid ||
			trigger->tgenabled == TRIGGER_DISABLED ||
			!TRIGGER_FOR_ROW(trigger->tgtype) ||
			!TRIGGER_FOR_BEFORE(trigger->tgtype) ||
			!TRIGGER_FOR_INSERT(trigger->tgtype))
			continue;
		column = trigger->tgnargs > 0 ? trigger->tgargs[0] : FENCE_DEFAULT_COLUMN;
		return get_attnum(RelationGetRelid(rel), column);
	}
	return InvalidAttrNumber;
}

/* Whether the INSERT's target list already gives column attnum a value. */
static bool
stamp_column_assigned(Query *query, AttrNumber attnum)
{
	ListCell   *lc;

	foreach(lc, query->targetList)
	{
		TargetEntry *tle = lfirst_node(TargetEntry, lc);

		if (!tle->resjunk && tle->resno == attnum)
			return true;
	}
	return false;
}

/*
 * The call that stands in for the fence column: fencing.token_in_force(),
 * looked up as the trigger's function is.  NULL when this database's
 * fencing has no such function (the extension not yet updated to the
 * library's version).
 */
static Expr *
stamp_token_call(void)
{
	Oid			funcid = fencing_function("token_in_force");

	if (!OidIsValid(funcid) || get_func_rettype(funcid) != INT8OID)
		return NULL;
	return (Expr *) makeFuncExpr(funcid, INT8OID, NIL, InvalidOid, InvalidOid,
								 COERCE_EXPLICIT_CALL);
}

/*
 * One INSERT: its target, if protected and its fence column left out,
 * gets the call in that column.
 */
static void
stamp_insert(Query *query)
{
	RangeTblEntry *rte = rt_fetch(query->resultRelation, query->rtable);
	Relation	rel;
	AttrNumber	attnum;
	Form_pg_attribute attr;
	Expr	   *call;

	if (rte->rtekind != RTE_RELATION ||
		(rte->relkind != RELKIND_RELATION &&
		 rte->relkind != RELKIND_PARTITIONED_TABLE))
		return;

	/* the parser holds the target's lock */
	rel = table_open(rte->relid, NoLock);
	attnum = stamp_fence_attnum(rel);
	if (attnum <= 0 || stamp_column_assigned(query, attnum))
	{
		table_close(rel, NoLock);
		return;
	}
	attr = TupleDescAttr(RelationGetDescr(rel), attnum - 1);
	if (attr->attisdropped || attr->atttypid != INT8OID ||
		attr->attgenerated != '\0' || (call = stamp_token_call()) == NULL)
	{
		table_close(rel, NoLock);
		return;
	}
	query->targetList = lappend(query->targetList,
								makeTargetEntry(call, attnum,
												pstrdup(NameStr(attr->attname)),
												false));
	table_close(rel, NoLock);
}

/*
 * After parse analysis (the module layer's hook): the statement, and the
 * INSERTs of its WITH clauses at any depth.
 */
void
fencing_fence_add_token_column(Query *query)
{
	ListCell   *lc;

	if (query->commandType == CMD_INSERT && query->resultRelation > 0)
		stamp_insert(query);
	foreach(lc, query->cteList)
	{
		CommonTableExpr *cte = lfirst_node(CommonTableExpr, lc);

		if (IsA(cte->ctequery, Query))
			fencing_fence_add_token_column((Query *) cte->ctequery);
	}
}
