/*-------------------------------------------------------------------------
 *
 * view_defaults.c
 *		View defaults that would stand in for a writer's token.
 *
 * PostgreSQL fills a view's column default in for a write through the
 * view that gives no value.  On a column that writes the fence column of
 * a protected table, the trigger could not tell that default from the
 * writer's token, and a write without a token would pass (F7).  Such a
 * default is refused when it is given (ALTER VIEW, ddl.c), when the table
 * is protected (protect.c), and when a statement writes through the view.
 *
 * Copyright (c) 2026, the fencing developers
 *
 * IDENTIFICATION
 *		src/fence/view_defaults.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/relation.h"
#include "catalog/pg_inherits.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "nodes/parsenodes.h"
#include "parser/parsetree.h"
#include "rewrite/rewriteHandler.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"

#include "fence/fence.h"

/*
 * Whether a stored column default gives a value: DEFAULT NULL gives none.
 */
static bool
fence_stored_default_gives_value(AttrDefault *def)
{
	Node	   *expr = stringToNode(def->adbin);

	return !(IsA(expr, Const) && ((Const *) expr)->constisnull);
}

/*
 * The table column that column attnum of view viewid writes, following
 * automatically updatable views down to a table, or false when the column
 * writes no table column (it is an expression, or the view is not
 * automatically updatable: its own rules or INSTEAD OF triggers write).
 */
static bool
fence_view_column_target(Oid viewid, AttrNumber attnum, Oid *tableid,
						 AttrNumber *table_attnum)
{
	for (;;)
	{
		Relation	view = relation_open(viewid, AccessShareLock);
		Query	   *query = get_view_query(view);
		TargetEntry *entry;
		RangeTblEntry *base;
		Var		   *var;

		if (view_query_is_auto_updatable(query, false) != NULL ||
			(entry = get_tle_by_resno(query->targetList, attnum)) == NULL ||
			!IsA(entry->expr, Var) ||
			((Var *) entry->expr)->varattno <= 0)
		{
			relation_close(view, AccessShareLock);
			return false;
		}
		var = (Var *) entry->expr;
		base = rt_fetch(linitial_node(RangeTblRef, query->jointree->fromlist)->rtindex,
						query->rtable);
		viewid = base->relid;
		attnum = var->varattno;
		relation_close(view, AccessShareLock);
		if (base->relkind != RELKIND_VIEW)
		{
			*tableid = viewid;
			*table_attnum = attnum;
			return true;
		}
	}
}

/*
 * F7: column attnum of view viewid gets a default, or has one: refuse when
 * the column writes the fence column of a protected table (the table under
 * the view, or a partition or inheritance child of it, by the column's
 * name), as PostgreSQL fills the view's default in for a write through the
 * view that gives no value, and the trigger could not tell it from the
 * writer's token.  "what" says which of the two, for the message.
 */
void
fencing_refuse_view_default(Oid viewid, AttrNumber attnum, const char *what)
{
	Oid			tableid;
	AttrNumber	table_attnum;
	char	   *column;
	ListCell   *lc;

	if (!fence_view_column_target(viewid, attnum, &tableid, &table_attnum))
		return;
	column = get_attname(tableid, table_attnum, false);
	foreach(lc, find_all_inheritors(tableid, NoLock, NULL))
	{
		Oid			relid = lfirst_oid(lc);
		ListCell   *lc2;

		foreach(lc2, fencing_fence_triggers(relid))
		{
			if (strcmp(((FenceTrigger *) lfirst(lc2))->column, column) != 0)
				continue;
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_COLUMN_DEFINITION),
					 errmsg("column \"%s\" of view %s %s a default",
							get_attname(viewid, attnum, false),
							fencing_qualified_relid_name(viewid), what),
					 errdetail("The column writes fence column \"%s\" of protected table %s; its default would stand in for the writer's token, so a write without a token would pass the fence.",
							   column, fencing_qualified_relid_name(relid)),
					 errhint("Drop it with ALTER VIEW %s ALTER COLUMN %s DROP DEFAULT; writers assign the fence column or SET LOCAL fencing.token.",
							 fencing_qualified_relid_name(viewid),
							 quote_identifier(get_attname(viewid, attnum, false)))));
		}
	}
}

/*
 * The views (at any depth) over relid, over its inheritance ancestors and
 * over its descendants, whose columns have defaults: protect() refuses
 * them when a column writes the new fence column, as it refuses a default
 * on the table's own fence column.  protect() has installed the trigger,
 * so fencing_refuse_view_default() finds it.
 */
static const char *views_with_defaults_sql =
"WITH RECURSIVE tree(oid) AS ("
" SELECT $1 UNION SELECT i.inhparent FROM pg_catalog.pg_inherits i, tree"
" WHERE i.inhrelid OPERATOR(pg_catalog.=) tree.oid),"
" below(oid) AS ("
" SELECT $1 UNION SELECT i.inhrelid FROM pg_catalog.pg_inherits i, below"
" WHERE i.inhparent OPERATOR(pg_catalog.=) below.oid),"
" views(oid) AS ("
" SELECT r.ev_class FROM pg_catalog.pg_depend d"
" JOIN pg_catalog.pg_rewrite r ON r.oid OPERATOR(pg_catalog.=) d.objid"
" WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_rewrite'::pg_catalog.regclass"
" AND d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass"
" AND d.refobjid IN (SELECT oid FROM tree UNION SELECT oid FROM below)"
" UNION"
" SELECT r.ev_class FROM views, pg_catalog.pg_depend d"
" JOIN pg_catalog.pg_rewrite r ON r.oid OPERATOR(pg_catalog.=) d.objid"
" WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_rewrite'::pg_catalog.regclass"
" AND d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass"
" AND d.refobjid OPERATOR(pg_catalog.=) views.oid)"
" SELECT a.attrelid, a.attnum FROM views"
" JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) views.oid"
" JOIN pg_catalog.pg_attribute a ON a.attrelid OPERATOR(pg_catalog.=) c.oid"
" WHERE c.relkind OPERATOR(pg_catalog.=) 'v' AND a.atthasdef AND a.attnum OPERATOR(pg_catalog.>) 0"
" ORDER BY 1, 2";

void
fencing_refuse_view_defaults_over(Oid relid)
{
	Oid			argtypes[1] = {OIDOID};
	Datum		args[1] = {ObjectIdGetDatum(relid)};
	uint64		i;
	int			rc;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	rc = SPI_execute_with_args(views_with_defaults_sql, 1, argtypes, args, NULL, true, 0);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "SPI_execute_with_args of \"%s\" returned %s",
			 views_with_defaults_sql, SPI_result_code_string(rc));
	for (i = 0; i < SPI_processed; i++)
	{
		bool		isnull;
		Oid			viewid = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[i],
															SPI_tuptable->tupdesc, 1, &isnull));
		AttrNumber	attnum = DatumGetInt16(SPI_getbinval(SPI_tuptable->vals[i],
														 SPI_tuptable->tupdesc, 2, &isnull));
		Relation	view = relation_open(viewid, AccessShareLock);
		TupleConstr *constr = RelationGetDescr(view)->constr;
		int			j;

		for (j = 0; constr != NULL && j < constr->num_defval; j++)
		{
			if (constr->defval[j].adnum == attnum &&
				fence_stored_default_gives_value(&constr->defval[j]))
				fencing_refuse_view_default(viewid, attnum, "has");
		}
		relation_close(view, AccessShareLock);
	}
	SPI_finish();
}

/*
 * A statement that writes is about to run: refuse it when a view in its
 * range table has a default on a column that writes a protected table's
 * fence column.  ALTER VIEW refuses such defaults (ddl.c), but a view may
 * have been given its default before the table was protected, or before
 * the view was made to write the fence column.  Views rarely have
 * defaults, so most statements cost a loop over their range table.
 */
void
fencing_refuse_view_defaults_in(PlannedStmt *plan)
{
	ListCell   *lc;

	foreach(lc, plan->rtable)
	{
		RangeTblEntry *rte = (RangeTblEntry *) lfirst(lc);
		Relation	view;
		TupleConstr *constr;
		int			i;

		if (rte->relkind != RELKIND_VIEW || !OidIsValid(rte->relid))
			continue;
		view = relation_open(rte->relid, AccessShareLock);
		constr = RelationGetDescr(view)->constr;
		for (i = 0; constr != NULL && i < constr->num_defval; i++)
		{
			if (fence_stored_default_gives_value(&constr->defval[i]))
				fencing_refuse_view_default(rte->relid, constr->defval[i].adnum, "has");
		}
		relation_close(view, AccessShareLock);
	}
}
