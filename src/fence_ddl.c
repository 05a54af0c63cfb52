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
#include "access/table.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "catalog/pg_inherits.h"
#include "catalog/pg_trigger.h"
#include "commands/trigger.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "utils/acl.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
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

	if (pg_class_ownercheck(relid, GetUserId()))
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
	if (!OidIsValid(relid) || !pg_class_ownercheck(relid, GetUserId()))
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
 * Before a utility statement runs: ALTER TABLE on a fence column.
 */
void
fencing_fence_utility_before(PlannedStmt *pstmt)
{
	if (IsA(pstmt->utilityStmt, AlterTableStmt))
		fence_check_alter_table((AlterTableStmt *) pstmt->utilityStmt);
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
					parents = lappend(parents, ((AlterTableStmt *) stmt)->relation);
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
}
