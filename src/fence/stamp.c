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
 * earlier, so the rules of a fenced INSERT stay in trigger.c.  Read one
 * step earlier, it is seen earlier too, so the call goes in only where
 * nothing runs between the row being built and the fence trigger, and the
 * trigger is sure to fire:
 *
 *	- the target is a table, or a partitioned table whose every leaf
 *	  partition is a table (a row fires its leaf's triggers) and none of
 *	  whose levels is partitioned by the fence column (rows are routed
 *	  before any row trigger fires);
 *	- the target has no rules (a rule would see the call in NEW);
 *	- the statement's own column values call no volatile function, also in
 *	  a subquery, nor do the defaults of the columns it leaves out
 *	  (nextval() aside), and no column's type may run a domain's check (a
 *	  domain, an array of one, a composite or range type): one evaluated
 *	  after the call could change fencing.token before the trigger reads
 *	  it;
 *	- on the table, or on every leaf, the only BEFORE ROW INSERT trigger
 *	  is one fence trigger, without a WHEN condition, which fires in this
 *	  session
 *	  (session_replication_role), on a bigint fence column of the same name
 *	  everywhere;
 *	- the statement leaves that column out, and PUBLIC may execute
 *	  token_in_force() (the executor checks the call for the role that
 *	  runs the plan; the trigger's own stamp is checked by nobody).
 *
 * Everything else (views, COPY, MERGE, other triggers, a column the
 * statement gives) keeps the trigger's stamping.  The call counts as the
 * trigger's write: it needs no INSERT right on the column (column
 * privileges are not widened), as the trigger's stamp needs none.  A
 * cached plan follows protect(), unprotect() and rules and triggers of
 * the target: each invalidates plans on the table, and a new parse
 * analysis passes here again.  A plan cached for a partitioned table does
 * not follow a trigger created, disabled or enabled on one of its
 * partitions afterwards (core invalidates plans on the partition only),
 * nor a later change of session_replication_role: the row is then built
 * with the token that counted when it was built, which the fence trigger,
 * if it fires, checks as ever.
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
#include "catalog/partition.h"
#include "catalog/pg_inherits.h"
#include "catalog/pg_trigger.h"
#include "catalog/pg_type.h"
#include "nodes/makefuncs.h"
#include "optimizer/optimizer.h"
#include "parser/parsetree.h"
#include "rewrite/rewriteHandler.h"
#include "utils/acl.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"

#include "fence/fence.h"

/* The name of column attnum of rel. */
static inline const char *
stamp_column_name(Relation rel, AttrNumber attnum)
{
	return NameStr(TupleDescAttr(RelationGetDescr(rel), attnum - 1)->attname);
}

/*
 * The fence column of rel's only BEFORE ROW INSERT trigger, when that is a
 * fence trigger (funcid) that fires in this session, on a bigint column;
 * else InvalidAttrNumber.  The trigger's first argument names the column
 * ("fence" when it has none).
 */
static AttrNumber
stamp_sole_fence_column(Relation rel, Oid funcid)
{
	TriggerDesc *trigdesc = rel->trigdesc;
	Trigger    *fence = NULL;
	AttrNumber	attnum;
	int			i;

	if (trigdesc == NULL || !trigdesc->trig_insert_before_row)
		return InvalidAttrNumber;
	for (i = 0; i < trigdesc->numtriggers; i++)
	{
		Trigger    *trigger = &trigdesc->triggers[i];

		if (!TRIGGER_FOR_ROW(trigger->tgtype) ||
			!TRIGGER_FOR_BEFORE(trigger->tgtype) ||
			!TRIGGER_FOR_INSERT(trigger->tgtype))
			continue;
		if (fence != NULL || trigger->tgfoid != funcid ||
			trigger->tgqual != NULL ||
			!fencing_tgenabled_fires_here(trigger->tgenabled))
			return InvalidAttrNumber;
		fence = trigger;
	}
	if (fence == NULL)
		return InvalidAttrNumber;
	attnum = get_attnum(RelationGetRelid(rel),
						fence->tgnargs > 0 ? fence->tgargs[0] : FENCE_DEFAULT_COLUMN);
	if (attnum <= 0 ||
		TupleDescAttr(RelationGetDescr(rel), attnum - 1)->atttypid != INT8OID ||
		TupleDescAttr(RelationGetDescr(rel), attnum - 1)->attgenerated != '\0')
		return InvalidAttrNumber;
	return attnum;
}

/*
 * Whether column (by name) is in the partition key of the partitioned
 * table rel, as a column or in an expression: rows are routed by it before
 * any row trigger fires, so routing must see the value the trigger would.
 */
static bool
stamp_routes_by(Relation rel, const char *column)
{
	AttrNumber	attnum = get_attnum(RelationGetRelid(rel), column);

	return attnum <= 0 ||
		has_partition_attrs(rel,
							bms_make_singleton(attnum - FirstLowInvalidHeapAttributeNumber),
							NULL);
}

/*
 * Whether every leaf partition of the partitioned table rel is a table
 * whose only BEFORE ROW INSERT trigger is a fence trigger on a column
 * named column.  The partitions are locked as a scan of rel would lock
 * them, parent first.
 */
static bool
stamp_leaves_fenced(Relation rel, Oid funcid, const char *column)
{
	List	   *relids = find_all_inheritors(RelationGetRelid(rel),
											 AccessShareLock, NULL);
	ListCell   *lc;
	bool		fenced = true;

	foreach(lc, relids)
	{
		Oid			relid = lfirst_oid(lc);
		char		relkind = get_rel_relkind(relid);
		Relation	leaf;
		AttrNumber	attnum;

		if (relkind == RELKIND_PARTITIONED_TABLE)
		{
			Relation	parted = table_open(relid, NoLock);

			fenced = !stamp_routes_by(parted, column);
			table_close(parted, NoLock);
			if (!fenced)
				break;
			continue;
		}
		if (relkind != RELKIND_RELATION)
		{
			fenced = false;
			break;
		}
		leaf = table_open(relid, NoLock);
		attnum = stamp_sole_fence_column(leaf, funcid);
		fenced = attnum > 0 && strcmp(stamp_column_name(leaf, attnum), column) == 0;
		table_close(leaf, NoLock);
		if (!fenced)
			break;
	}
	list_free(relids);
	return fenced;
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
 * Whether coercing a value to type typid may run a domain's check: a
 * domain, a composite, range or multirange type (whose fields or subtype
 * may be domains), or an array of one of these.
 */
static bool
stamp_type_may_check(Oid typid)
{
	char		typtype = get_typtype(typid);
	Oid			elem;

	if (typtype == TYPTYPE_DOMAIN || typtype == TYPTYPE_COMPOSITE ||
		typtype == TYPTYPE_RANGE || typtype == TYPTYPE_MULTIRANGE)
		return true;
	elem = get_element_type(typid);
	return OidIsValid(elem) && stamp_type_may_check(elem);
}

/*
 * Whether building a row of the INSERT into rel may run anything that
 * could change fencing.token: a volatile call among the statement's
 * values or the defaults of the columns it leaves out, or a domain's
 * check on any column.
 */
static bool
stamp_row_may_change_token(Query *query, Relation rel)
{
	TupleDesc	tupdesc = RelationGetDescr(rel);
	AttrNumber	attnum;

	if (contain_volatile_functions_not_nextval((Node *) query->targetList))
		return true;
	for (attnum = 1; attnum <= tupdesc->natts; attnum++)
	{
		Form_pg_attribute attr = TupleDescAttr(tupdesc, attnum - 1);

		if (attr->attisdropped || attr->attgenerated != '\0')
			continue;
		if (stamp_type_may_check(attr->atttypid))
			return true;
		if ((attr->atthasdef || attr->attidentity != '\0') &&
			!stamp_column_assigned(query, attnum) &&
			contain_volatile_functions_not_nextval(build_column_default(rel, attnum)))
			return true;
	}
	return false;
}

/*
 * The call that stands in for the fence column: fencing.token_in_force(),
 * looked up as the trigger's function is; NULL when this database's
 * fencing has no such function (the extension not yet updated to the
 * library's version) or PUBLIC may not execute it.  PUBLIC, not the
 * role analysing the statement: a cached plan runs for whichever role the
 * session has then, and a REVOKE invalidates plans that call it.
 */
static Expr *
stamp_token_call(void)
{
	Oid			funcid = fencing_function("token_in_force");

	if (!OidIsValid(funcid) || get_func_rettype(funcid) != INT8OID ||
		fencing_function_aclcheck(funcid, ACL_ID_PUBLIC) != ACLCHECK_OK)
		return NULL;
	return (Expr *) makeFuncExpr(funcid, INT8OID, NIL, InvalidOid, InvalidOid,
								 COERCE_EXPLICIT_CALL);
}

/*
 * The fence column of the INSERT's target when the call may stand in for
 * it (the file header's conditions but the last), else InvalidAttrNumber.
 */
static AttrNumber
stamp_target_column(Query *query, Relation rel)
{
	Oid			funcid;
	AttrNumber	attnum;

	/* the catalog lookups only for a table with BEFORE ROW INSERT triggers */
	if (rel->trigdesc == NULL || !rel->trigdesc->trig_insert_before_row ||
		rel->rd_rules != NULL ||
		!OidIsValid(funcid = fencing_reject_stale_function()))
		return InvalidAttrNumber;
	attnum = stamp_sole_fence_column(rel, funcid);
	if (attnum <= 0 || stamp_column_assigned(query, attnum) ||
		stamp_row_may_change_token(query, rel))
		return InvalidAttrNumber;
	if (rel->rd_rel->relkind == RELKIND_PARTITIONED_TABLE &&
		!stamp_leaves_fenced(rel, funcid, stamp_column_name(rel, attnum)))
		return InvalidAttrNumber;
	return attnum;
}

/*
 * One INSERT: its target, if the call may stand in for its fence column,
 * gets it there.
 */
static void
stamp_insert(Query *query)
{
	RangeTblEntry *rte = rt_fetch(query->resultRelation, query->rtable);
	Relation	rel;
	AttrNumber	attnum;
	Expr	   *call;

	if (rte->rtekind != RTE_RELATION ||
		(rte->relkind != RELKIND_RELATION &&
		 rte->relkind != RELKIND_PARTITIONED_TABLE))
		return;

	/* the parser holds the target's lock */
	rel = table_open(rte->relid, NoLock);
	attnum = stamp_target_column(query, rel);
	if (attnum > 0 && (call = stamp_token_call()) != NULL)
		query->targetList =
			lappend(query->targetList,
					makeTargetEntry(call, attnum,
									pstrdup(stamp_column_name(rel, attnum)),
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
