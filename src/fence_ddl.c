/*-------------------------------------------------------------------------
 *
 * fence_ddl.c
 *		DDL that would open a protected table to unfenced writes: seen by
 *		the utility hook of statement_hooks.c before and after it runs, and
 *		by its object access hook while it runs.
 *
 * Row triggers see every row change except those that DDL makes, and DDL
 * can change what the trigger sees.  What this file watches:
 *
 *	- TRUNCATE empties tables without firing row triggers.  It is refused
 *	  for every table it would empty whose fence trigger would fire in this
 *	  session (DESIGN.md F7).  The check runs from the object access hook
 *	  that TRUNCATE calls for each table it empties, after PostgreSQL has
 *	  resolved the names: the named tables, their partitions and
 *	  inheritance children unless ONLY, and with CASCADE the tables that
 *	  reference them, exactly the set it empties, whatever the search_path
 *	  or a concurrent rename makes of the names.
 *	- A table attached to a protected table by inheritance is written
 *	  through its parent without the parent's triggers: after CREATE TABLE
 *	  ... INHERITS or PARTITION OF and ALTER TABLE ... INHERIT or ATTACH
 *	  PARTITION, fence_protect.c makes the new children follow the parent's
 *	  fence, or the DDL fails.
 *	- A role that may create triggers on a table (the TRIGGER privilege)
 *	  without owning it could replace the fence trigger, or add one that
 *	  runs before it and rewrites the fence: on a protected table only the
 *	  owner may add or replace row triggers.
 *	- A default, identity or generation expression on the fence column
 *	  would stand in for the writer's token; ALTER TABLE refuses to give the
 *	  fence column of a protected table one, so that the mistake shows when
 *	  it is made (the trigger refuses such a column as well when it fires).
 *	- protect(), and the tables added under a protected parent later, find
 *	  the fence trigger by its name: ALTER TRIGGER refuses to rename it.
 *
 * What the owner of a table may still do on purpose (disable the trigger,
 * drop it from an inheritance child, detach a partition, replicate with
 * session_replication_role = replica) is documented as an escape hatch.
 *
 * Copyright (c) 2026, the fencing developers
 *
 * IDENTIFICATION
 *		src/fence_ddl.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/relation.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "catalog/pg_inherits.h"
#include "catalog/pg_trigger.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "parser/parsetree.h"
#include "rewrite/rewriteHandler.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

#include "compat.h"
#include "fencing.h"

/*
 * TRUNCATE is about to empty relid (OAT_TRUNCATE): refuse if relid carries
 * a fence trigger that would check a DELETE in this session.  A disabled
 * trigger, or an ORIGIN one under session_replication_role = replica, does
 * not protect the table, and then neither does this.
 */
static void
fence_refuse_truncate(Oid relid)
{
	ListCell   *lc;

#ifdef FENCING_MUTANT_TRUNCATE_ALLOWED
	return;
#endif
	foreach(lc, fencing_fence_triggers(relid))
	{
		FenceTrigger *trigger = (FenceTrigger *) lfirst(lc);

		if (!TRIGGER_FOR_DELETE(trigger->type) || !fencing_trigger_fires_here(trigger))
			continue;
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("cannot truncate protected table %s",
						fencing_qualified_relid_name(relid)),
				 errdetail("TRUNCATE removes rows without firing row triggers, so the fence cannot check it."),
				 errhint("Delete the rows with SET LOCAL fencing.token = <token of the lock you hold>, or run fencing.unprotect() first (table owner).")));
	}
}

/*
 * A trigger has just been created or replaced (OAT_POST_CREATE, not
 * internal): unless the current user owns its table, refuse it when the
 * table is protected, when it replaces the fence trigger, or when it is a
 * fence trigger itself.  Row triggers fire in name order and may change
 * the row, so a trigger added by a role with only the TRIGGER privilege
 * could rewrite the fence after the check or replace the check; the owner
 * can unprotect the table anyway.  The new row is read with SnapshotSelf:
 * the catalog snapshot does not see it before the command ends.
 */
static void
fence_check_new_trigger(Oid trigoid)
{
	Oid			funcid = fencing_reject_stale_function();
	Relation	tgrel;
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple	tuple;
	Form_pg_trigger form;
	Oid			relid;
	char	   *tgname;
	bool		refuse;
	ListCell   *lc;

	if (!OidIsValid(funcid))
		return;

	tgrel = table_open(TriggerRelationId, AccessShareLock);
	ScanKeyInit(&key, Anum_pg_trigger_oid, BTEqualStrategyNumber, F_OIDEQ,
				ObjectIdGetDatum(trigoid));
	scan = systable_beginscan(tgrel, TriggerOidIndexId, true, SnapshotSelf, 1, &key);
	tuple = systable_getnext(scan);
	if (!HeapTupleIsValid(tuple))
		elog(ERROR, "could not find new trigger %u", trigoid);
	form = (Form_pg_trigger) GETSTRUCT(tuple);
	relid = form->tgrelid;
	tgname = pstrdup(NameStr(form->tgname));
	refuse = strcmp(tgname, FENCE_TRIGGER_NAME) == 0 || form->tgfoid == funcid;
	systable_endscan(scan);
	table_close(tgrel, AccessShareLock);

	if (fencing_owns_relation(relid, GetUserId()))
		return;

	foreach(lc, fencing_fence_triggers(relid))
	{
		if (((FenceTrigger *) lfirst(lc))->oid != trigoid)
			refuse = true;
	}
	if (refuse)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to create trigger \"%s\" on protected table %s",
						tgname, fencing_qualified_relid_name(relid)),
				 errdetail("Only the owner of a table protected by fencing.protect() may add or replace its triggers: a trigger could rewrite the fence column before the check, or replace the check."),
				 errhint("Ask the owner of table %s to create the trigger.",
						 fencing_qualified_relid_name(relid))));
}

/*
 * Object access hook (statement_hooks.c): TRUNCATE of a table and triggers
 * created by users.  Every other event costs a comparison.
 */
void
fencing_fence_object_access(ObjectAccessType access, Oid classId,
							Oid objectId, int subId, void *arg)
{
	if (access == OAT_TRUNCATE && classId == RelationRelationId)
		fence_refuse_truncate(objectId);
	else if (access == OAT_POST_CREATE && classId == TriggerRelationId &&
			 !(arg != NULL && ((ObjectAccessPostCreate *) arg)->is_internal))
		fence_check_new_trigger(objectId);
}

/*
 * Whether a column default from the parser (before transformation) is
 * anything but NULL: DEFAULT NULL gives no value and leaves F2 intact.
 */
static bool
fence_default_is_null(Node *expr)
{
	while (expr != NULL && IsA(expr, TypeCast))
		expr = ((TypeCast *) expr)->arg;
	return expr == NULL || (IsA(expr, A_Const) && ((A_Const *) expr)->isnull);
}

/*
 * What a command of ALTER TABLE would give column cmd->name (or the column
 * it adds) in place of a writer's token: "a default", "an identity" or "a
 * generation expression"; NULL for commands that give none.
 */
static const char *
fence_column_stand_in(AlterTableCmd *cmd, const char **column)
{
	*column = cmd->name;
	switch (cmd->subtype)
	{
		case AT_ColumnDefault:
			return fence_default_is_null(cmd->def) ? NULL : "a default";
		case AT_AddIdentity:
			return "an identity";
#ifdef FENCING_HAVE_SET_EXPRESSION
		case AT_SetExpression:
			return "a generation expression";
#endif
		case AT_AddColumn:
			{
				ColumnDef  *def = (ColumnDef *) cmd->def;
				ListCell   *lc;

				*column = def->colname;
				if (def->identity != '\0')
					return "an identity";
				if (!fence_default_is_null(def->raw_default))
					return "a default";
				foreach(lc, def->constraints)
				{
					Constraint *constraint = (Constraint *) lfirst(lc);

					if (constraint->contype == CONSTR_IDENTITY)
						return "an identity";
					if (constraint->contype == CONSTR_GENERATED)
						return "a generation expression";
					if (constraint->contype == CONSTR_DEFAULT &&
						!fence_default_is_null(constraint->raw_expr))
						return "a default";
				}
				return NULL;
			}
		default:
			return NULL;
	}
}

/*
 * ALTER TABLE: refuse, before it runs, to give the fence column of a
 * protected table (or of a protected table below it, where the command
 * recurses) a value that would stand in for the writer's token.  Only the
 * owner can run ALTER TABLE, and the trigger refuses such a column when it
 * fires, so this is about showing the mistake when it is made; the names
 * are resolved as PostgreSQL will, without a lock.
 */
static void
fence_check_alter_table(AlterTableStmt *stmt)
{
	List	   *relids;
	Oid			relid;
	ListCell   *lc;

	if (stmt->objtype != OBJECT_TABLE)
		return;

	foreach(lc, stmt->cmds)
	{
		const char *column;

		if (fence_column_stand_in((AlterTableCmd *) lfirst(lc), &column) != NULL)
			break;
	}
	if (lc == NULL)
		return;

	/* a role that does not own the table hears that from PostgreSQL */
	relid = RangeVarGetRelid(stmt->relation, NoLock, true);
	if (!OidIsValid(relid) || !fencing_owns_relation(relid, GetUserId()))
		return;
	relids = stmt->relation->inh ? find_all_inheritors(relid, NoLock, NULL)
		: list_make1_oid(relid);

	foreach(lc, relids)
	{
		Oid			tableid = lfirst_oid(lc);
		List	   *triggers = fencing_fence_triggers(tableid);
		ListCell   *lc2;

		if (triggers == NIL)
			continue;
		foreach(lc2, stmt->cmds)
		{
			const char *column;
			const char *stand_in = fence_column_stand_in((AlterTableCmd *) lfirst(lc2), &column);
			ListCell   *lc3;

			if (stand_in == NULL)
				continue;
			foreach(lc3, triggers)
			{
				if (strcmp(((FenceTrigger *) lfirst(lc3))->column, column) != 0)
					continue;
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_COLUMN_DEFINITION),
						 errmsg("fence column \"%s\" of protected table %s cannot have %s",
								column, fencing_qualified_relid_name(tableid), stand_in),
						 errdetail("It would stand in for the writer's token, so a write without a token would pass the fence."),
						 errhint("Writers assign the fence column or SET LOCAL fencing.token; run fencing.unprotect() first to change the column.")));
			}
		}
	}
}

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
static void
fence_refuse_view_default(Oid viewid, AttrNumber attnum, const char *what)
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
 * them when a column writes the new fence column (review finding 1), as
 * it refuses a default on the table's own fence column.  protect() has
 * installed the trigger, so fence_refuse_view_default() finds it.
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
				fence_refuse_view_default(viewid, attnum, "has");
		}
		relation_close(view, AccessShareLock);
	}
	SPI_finish();
}

/*
 * ALTER VIEW (or ALTER TABLE) ... ALTER COLUMN ... SET DEFAULT on a view:
 * refuse a default that would stand in for a protected table's token
 * (review finding 1).  Any role may create a view, a temporary one too, on
 * a table it may write, so this is checked for every role.
 */
static void
fence_check_alter_view(AlterTableStmt *stmt)
{
	Oid			viewid = InvalidOid;
	ListCell   *lc;

	foreach(lc, stmt->cmds)
	{
		AlterTableCmd *cmd = (AlterTableCmd *) lfirst(lc);
		AttrNumber	attnum;

		if (cmd->subtype != AT_ColumnDefault || fence_default_is_null(cmd->def))
			continue;
		if (!OidIsValid(viewid))
		{
			viewid = RangeVarGetRelid(stmt->relation, NoLock, true);
			if (!OidIsValid(viewid) || get_rel_relkind(viewid) != RELKIND_VIEW)
				return;
		}
		attnum = get_attnum(viewid, cmd->name);
		if (attnum > 0)
			fence_refuse_view_default(viewid, attnum, "cannot have");
	}
}

/*
 * A statement that writes is about to run: refuse it when a view in its
 * range table has a default on a column that writes a protected table's
 * fence column (review finding 1).  ALTER VIEW refuses such defaults, but
 * a view may have been given its default before the table was protected,
 * or before the view was made to write the fence column.  Views rarely
 * have defaults, so most statements cost a loop over their range table.
 */
void
fencing_fence_check_plan(PlannedStmt *plan)
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
				fence_refuse_view_default(rte->relid, constr->defval[i].adnum, "has");
		}
		relation_close(view, AccessShareLock);
	}
}

/*
 * ALTER TABLE ... ATTACH PARTITION of a table protected on its own (or
 * with a partition that is) to a protected table: PostgreSQL would fail
 * to clone the parent's fence trigger onto it with a bare "trigger
 * already exists".  Say why, and what to do, before it runs (review
 * finding 10).  Names are resolved as PostgreSQL will, without a lock.
 */
static void
fence_check_attach_partition(AlterTableStmt *stmt)
{
	Oid			parentid = InvalidOid;
	ListCell   *lc;

	foreach(lc, stmt->cmds)
	{
		AlterTableCmd *cmd = (AlterTableCmd *) lfirst(lc);
		Oid			partid;
		ListCell   *lc2;

		if (cmd->subtype != AT_AttachPartition)
			continue;
		if (!OidIsValid(parentid))
		{
			parentid = RangeVarGetRelid(stmt->relation, NoLock, true);
			if (!OidIsValid(parentid) || fencing_protect_trigger(parentid) == NULL)
				return;
		}
		partid = RangeVarGetRelid(((PartitionCmd *) cmd->def)->name, NoLock, true);
		if (!OidIsValid(partid))
			continue;
		foreach(lc2, find_all_inheritors(partid, NoLock, NULL))
		{
			Oid			relid = lfirst_oid(lc2);
			FenceTrigger *own = fencing_protect_trigger(relid);

			if (own == NULL || own->is_clone)
				continue;
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("cannot attach %s to protected table %s: table %s is protected on its own",
							fencing_qualified_relid_name(partid),
							fencing_qualified_relid_name(parentid),
							fencing_qualified_relid_name(relid)),
					 errdetail("A partition of a protected table carries its parent's fence trigger, which PostgreSQL cannot add while the table has its own."),
					 errhint("Run SELECT fencing.unprotect('%s') first; once attached, it follows the fence of %s.",
							 fencing_qualified_relid_name(relid),
							 fencing_qualified_relid_name(parentid))));
		}
	}
}

/*
 * ALTER TRIGGER ... RENAME of the trigger protect() installed: the table
 * would keep a fence that protect() no longer finds (it would install a
 * second one) and that inheritance children added later would not
 * follow.  Refused before it runs, for every role; names are resolved as
 * PostgreSQL will, without a lock.
 */
static void
fence_check_rename_trigger(RenameStmt *stmt)
{
	Oid			relid;
	FenceTrigger *fence;

	if (stmt->renameType != OBJECT_TRIGGER ||
		strcmp(stmt->subname, FENCE_TRIGGER_NAME) != 0)
		return;
	relid = RangeVarGetRelid(stmt->relation, NoLock, true);
	if (!OidIsValid(relid) || (fence = fencing_protect_trigger(relid)) == NULL)
		return;
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("cannot rename trigger \"%s\" on protected table %s",
					fence->name, fencing_qualified_relid_name(relid)),
			 errdetail("fencing.protect() and the tables added under a protected table find its fence trigger by this name."),
			 errhint("Run fencing.unprotect() first to remove the fence.")));
}

/*
 * Before a utility statement runs: ALTER TABLE on a fence column, ALTER
 * VIEW on a column that writes one, ATTACH PARTITION of a protected table,
 * a rename of the fence trigger.
 */
void
fencing_fence_utility_before(PlannedStmt *pstmt)
{
	if (IsA(pstmt->utilityStmt, AlterTableStmt))
	{
		fence_check_alter_table((AlterTableStmt *) pstmt->utilityStmt);
		fence_check_alter_view((AlterTableStmt *) pstmt->utilityStmt);
		fence_check_attach_partition((AlterTableStmt *) pstmt->utilityStmt);
	}
	else if (IsA(pstmt->utilityStmt, RenameStmt))
		fence_check_rename_trigger((RenameStmt *) pstmt->utilityStmt);
}

/*
 * After a utility statement ran: the parents it may have given children,
 * resolved as the statement resolved them (inside CREATE SCHEMA, with the
 * new schema first in the path, as the statement saw it).  Every other
 * statement, a SET LOCAL fencing.token among them, costs a tag test.
 */
void
fencing_fence_utility_after(PlannedStmt *pstmt)
{
	Node	   *stmt = pstmt->utilityStmt;
	List	   *parents = NIL;
	List	   *attached = NIL;
	ListCell   *lc;

	switch (nodeTag(stmt))
	{
		case T_CreateStmt:
			parents = ((CreateStmt *) stmt)->inhRelations;
			break;
		case T_CreateForeignTableStmt:
			parents = ((CreateForeignTableStmt *) stmt)->base.inhRelations;
			break;
		case T_AlterTableStmt:
			foreach(lc, ((AlterTableStmt *) stmt)->cmds)
			{
				AlterTableCmd *cmd = (AlterTableCmd *) lfirst(lc);

				if (cmd->subtype == AT_AddInherit)
					parents = lappend(parents, cmd->def);
				else if (cmd->subtype == AT_AttachPartition)
				{
					parents = lappend(parents, ((AlterTableStmt *) stmt)->relation);
					attached = lappend(attached, ((PartitionCmd *) cmd->def)->name);
				}
			}
			break;
		default:
			return;
	}

	if (parents == NIL)
		return;

	/* make the statement's pg_inherits rows visible to the catalog scans */
	CommandCounterIncrement();
	foreach(lc, parents)
	{
		Oid			parentid = RangeVarGetRelid((RangeVar *) lfirst(lc), NoLock, true);

		if (OidIsValid(parentid))
			fencing_follow_new_children(parentid);
	}

	/*
	 * ATTACH PARTITION under a parent that is not protected: a protected
	 * table attached gets clones of the parent's row triggers (review
	 * finding 2); a protected parent's new partitions were told above.
	 */
	foreach(lc, attached)
	{
		Oid			parentid = RangeVarGetRelid(((AlterTableStmt *) stmt)->relation, NoLock, true);
		Oid			partid = RangeVarGetRelid((RangeVar *) lfirst(lc), NoLock, true);
		ListCell   *lc2;

		if (!OidIsValid(parentid) || !OidIsValid(partid) ||
			fencing_protect_trigger(parentid) != NULL)
			continue;
		foreach(lc2, find_all_inheritors(partid, AccessShareLock, NULL))
			fencing_warn_other_row_triggers(lfirst_oid(lc2), "fencing");
	}
}
