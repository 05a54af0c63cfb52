/*-------------------------------------------------------------------------
 *
 * ddl.c
 *		DDL that would open a protected table to unfenced writes: seen by
 *		the module layer's utility hook before and after it runs, and
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
 *	  PARTITION, protect.c makes the new children follow the parent's
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
 * session_replication_role = replica) is documented as an escape hatch,
 * and the ways that switch the fence off without touching protect() say
 * so in a WARNING: ALTER TABLE ... DISABLE TRIGGER or ENABLE REPLICA
 * TRIGGER on the fence trigger, a BEFORE ROW trigger that the owner adds
 * or enables on a protected table (it may change the fence), a fence
 * trigger replaced by hand with one that checks only some writes, and
 * each write, COPY and TRUNCATE of a protected table by a session whose
 * session_replication_role keeps the fence trigger from firing.
 *
 * Copyright (c) 2026, the fencing developers
 *
 * IDENTIFICATION
 *		src/fence/ddl.c
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

#include "fence/fence.h"

/*
 * WARNING: fence trigger "trigger" of table relid does not fire for
 * ordinary sessions (disabled, or REPLICA), or, with in_session, not in
 * this one (session_replication_role).  Only in regular backends: a
 * logical replication apply worker runs as replica on purpose, its rows
 * fenced by the publisher.
 */
static void
fence_warn_off(Oid relid, const FenceTrigger *trigger, bool in_session)
{
	char	   *table = fencing_qualified_relid_name(relid);

	if (MyBackendType != B_BACKEND)
		return;
	ereport(WARNING,
			(errcode(ERRCODE_WARNING),
			 errmsg("fence trigger \"%s\" of protected table %s does not fire %s",
					trigger->name, table,
					in_session ? "in this session" : "for ordinary sessions"),
			 trigger->enabled == TRIGGER_DISABLED ?
			 errdetail("The trigger is disabled: writes to the table are not checked against fence tokens, and TRUNCATE is not refused.") :
			 trigger->enabled == TRIGGER_FIRES_ON_REPLICA ?
			 errdetail("The trigger fires only while session_replication_role is replica, as in a logical replication apply worker: other writes to the table are not checked against fence tokens.") :
			 errdetail("session_replication_role is replica and the trigger fires only for ordinary sessions: this session's writes to the table are not checked against fence tokens, and TRUNCATE is not refused."),
			 trigger->enabled == TRIGGER_FIRES_ON_ORIGIN ?
			 errhint("Reset session_replication_role, or make the trigger fire in every session with ALTER TABLE %s ENABLE ALWAYS TRIGGER %s.",
					 table, quote_identifier(trigger->name)) :
			 errhint("Run ALTER TABLE %s ENABLE TRIGGER %s, or fencing.protect() again.",
					 table, quote_identifier(trigger->name))));
}

/*
 * A statement of this session writes the tables in relids (with their
 * partitions and inheritance children): warn for each protected one that
 * holds rows (not a partitioned table: its partitions are named) whose
 * fence triggers do not fire here.  Only called while
 * session_replication_role is replica, when ORIGIN triggers are silent.
 */
static void
fence_warn_unfenced_writes(List *relids)
{
	List	   *tables = NIL;
	ListCell   *lc;

	foreach(lc, relids)
		tables = list_concat_unique_oid(tables,
										find_all_inheritors(lfirst_oid(lc), NoLock, NULL));
	foreach(lc, tables)
	{
		List	   *fences = fencing_fence_triggers(lfirst_oid(lc));
		ListCell   *lc2;

		if (fences == NIL || get_rel_relkind(lfirst_oid(lc)) == RELKIND_PARTITIONED_TABLE)
			continue;
		foreach(lc2, fences)
		{
			if (fencing_trigger_fires_here((FenceTrigger *) lfirst(lc2)))
				break;
		}
		if (lc2 == NULL)
			fence_warn_off(lfirst_oid(lc), (FenceTrigger *) linitial(fences), true);
	}
}

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

		if (!TRIGGER_FOR_DELETE(trigger->type))
			continue;
		if (!fencing_trigger_fires_here(trigger))
		{
			fence_warn_off(relid, trigger, true);
			continue;
		}
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
 * Object access hook (the module layer's): TRUNCATE of a table and triggers
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
 * ALTER VIEW (or ALTER TABLE) ... ALTER COLUMN ... SET DEFAULT on a view:
 * refuse a default that would stand in for a protected table's token.
 * Any role may create a view, a temporary one too, on a table it may
 * write, so this is checked for every role.
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
			fencing_refuse_view_default(viewid, attnum, "cannot have");
	}
}

/*
 * A statement that writes is about to run: refuse it when a view in its
 * range table has a default on a column that writes a protected table's
 * fence column (fencing_refuse_view_defaults_in).  While
 * session_replication_role is replica, say which protected tables it
 * writes unfenced.
 */
void
fencing_fence_check_plan(PlannedStmt *plan)
{
	ListCell   *lc;

	fencing_refuse_view_defaults_in(plan);

	if (unlikely(SessionReplicationRole == SESSION_REPLICATION_ROLE_REPLICA))
	{
		List	   *relids = NIL;

		foreach(lc, plan->resultRelations)
			relids = lappend_oid(relids, rt_fetch(lfirst_int(lc), plan->rtable)->relid);
		fence_warn_unfenced_writes(relids);
	}
}

/*
 * ALTER TABLE ... ATTACH PARTITION of a table protected on its own (or
 * with a partition that is) to a protected table: PostgreSQL would fail
 * to clone the parent's fence trigger onto it with a bare "trigger
 * already exists".  Say why, and what to do, before it runs.
 * Names are resolved as PostgreSQL will, without a lock.
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
 * a rename of the fence trigger, COPY FROM while session_replication_role
 * keeps fence triggers from firing.
 */
void
fencing_fence_utility_before(PlannedStmt *pstmt)
{
	Node	   *stmt = pstmt->utilityStmt;

	if (IsA(stmt, AlterTableStmt))
	{
		fence_check_alter_table((AlterTableStmt *) stmt);
		fence_check_alter_view((AlterTableStmt *) stmt);
		fence_check_attach_partition((AlterTableStmt *) stmt);
	}
	else if (IsA(stmt, RenameStmt))
		fence_check_rename_trigger((RenameStmt *) stmt);
	else if (IsA(stmt, CopyStmt) &&
			 SessionReplicationRole == SESSION_REPLICATION_ROLE_REPLICA &&
			 ((CopyStmt *) stmt)->is_from && ((CopyStmt *) stmt)->relation != NULL)
	{
		Oid			relid = RangeVarGetRelid(((CopyStmt *) stmt)->relation, NoLock, true);

		if (OidIsValid(relid))
			fence_warn_unfenced_writes(list_make1_oid(relid));
	}
}

/*
 * Whether an ALTER TABLE command switches triggers on or off, and which:
 * *name is the trigger, or NULL for ALL and USER.
 */
static bool
fence_trigger_switch(AlterTableCmd *cmd, const char **name, bool *enables)
{
	*name = cmd->name;
	*enables = true;
	switch (cmd->subtype)
	{
		case AT_DisableTrig:
			*enables = false;
			/* FALLTHROUGH */
		case AT_EnableTrig:
		case AT_EnableAlwaysTrig:
		case AT_EnableReplicaTrig:
			return true;
		case AT_DisableTrigAll:
		case AT_DisableTrigUser:
			*enables = false;
			/* FALLTHROUGH */
		case AT_EnableTrigAll:
		case AT_EnableTrigUser:
			*name = NULL;
			return true;
		default:
			return false;
	}
}

/*
 * Whether relid has a BEFORE ROW INSERT or UPDATE trigger named name (any,
 * for NULL) that is not a fence trigger: one that may change the fence.
 */
static bool
fence_has_other_row_trigger(Oid relid, const char *name)
{
	Oid			funcid = fencing_reject_stale_function();
	Relation	rel = relation_open(relid, AccessShareLock);
	TriggerDesc *trigdesc = rel->trigdesc;
	bool		found = false;
	int			i;

	for (i = 0; trigdesc != NULL && i < trigdesc->numtriggers && !found; i++)
	{
		Trigger    *trigger = &trigdesc->triggers[i];

		found = trigger->tgfoid != funcid &&
			(name == NULL || strcmp(trigger->tgname, name) == 0) &&
			TRIGGER_FOR_ROW(trigger->tgtype) && TRIGGER_FOR_BEFORE(trigger->tgtype) &&
			(TRIGGER_FOR_INSERT(trigger->tgtype) || TRIGGER_FOR_UPDATE(trigger->tgtype));
	}
	relation_close(rel, AccessShareLock);
	return found;
}

/*
 * ALTER TABLE ... ENABLE or DISABLE TRIGGER has run: for each protected
 * table it reached, warn when a fence trigger it switched no longer fires
 * for ordinary sessions (disabled, or REPLICA), and name the BEFORE ROW
 * triggers when it switched one on that may change the fence.  ENABLE
 * ALWAYS of the fence trigger fences replication's writes too: nothing to
 * say.
 */
static void
fence_warn_trigger_switches(AlterTableStmt *stmt)
{
	List	   *switches = NIL;
	bool		enables_other = false;
	Oid			relid;
	ListCell   *lc;

	foreach(lc, stmt->cmds)
	{
		const char *name;
		bool		enables;

		if (fence_trigger_switch((AlterTableCmd *) lfirst(lc), &name, &enables))
			switches = lappend(switches, lfirst(lc));
	}
	if (switches == NIL)
		return;
	relid = RangeVarGetRelid(stmt->relation, NoLock, true);
	if (!OidIsValid(relid))
		return;

	CommandCounterIncrement();
	foreach(lc, stmt->relation->inh ? find_all_inheritors(relid, NoLock, NULL)
			: list_make1_oid(relid))
	{
		Oid			tableid = lfirst_oid(lc);
		List	   *fences = fencing_fence_triggers(tableid);
		ListCell   *lc2;
		ListCell   *lc3;

		if (fences == NIL)
			continue;
		enables_other = false;
		foreach(lc2, switches)
		{
			const char *name;
			bool		enables;

			fence_trigger_switch((AlterTableCmd *) lfirst(lc2), &name, &enables);
			foreach(lc3, fences)
			{
				FenceTrigger *fence = (FenceTrigger *) lfirst(lc3);

				if ((name == NULL || strcmp(name, fence->name) == 0) &&
					(fence->enabled == TRIGGER_DISABLED ||
					 fence->enabled == TRIGGER_FIRES_ON_REPLICA))
				{
					fence_warn_off(tableid, fence, false);
					fence->enabled = TRIGGER_FIRES_ON_ORIGIN;	/* said once */
				}
			}
			if (enables && !enables_other)
				enables_other = fence_has_other_row_trigger(tableid, name);
		}
		if (enables_other)
			fencing_warn_other_row_triggers(tableid, "fencing");
	}
}

/*
 * Why the trigger protect() installs, as CREATE OR REPLACE TRIGGER
 * redefined it by hand, checks only some writes, or NULL when it checks
 * them all.  Fence triggers a DBA writes under other names are the DBA's
 * design (and misused ones fail when they fire).
 */
static const char *
fence_partial_trigger(CreateTrigStmt *stmt)
{
	int16		all = TRIGGER_TYPE_INSERT | TRIGGER_TYPE_UPDATE | TRIGGER_TYPE_DELETE;

	if (strcmp(stmt->trigname, FENCE_TRIGGER_NAME) != 0)
		return NULL;
	if (stmt->whenClause != NULL)
		return "Its WHEN clause decides which rows are checked.";
	if (stmt->columns != NIL)
		return "It fires for an UPDATE only when the statement assigns one of the columns it names.";
	if ((stmt->events & all) != all)
		return "It does not fire for each of INSERT, UPDATE and DELETE.";
	return NULL;
}

/*
 * CREATE [OR REPLACE] TRIGGER has run on relid, or on a partitioned table
 * whose partitions got clones: when the table is protected, warn about a
 * fence trigger that checks only some writes, and name the BEFORE ROW
 * triggers when the new one is such a trigger, which may change the
 * fence.  A non-owner cannot get here (fence_check_new_trigger).
 */
static void
fence_warn_new_trigger(CreateTrigStmt *stmt)
{
	Oid			relid;
	List	   *tables;
	ListCell   *lc;

	if (!stmt->row)
		return;
	relid = RangeVarGetRelid(stmt->relation, NoLock, true);
	if (!OidIsValid(relid))
		return;
	CommandCounterIncrement();
	tables = fencing_fence_triggers(relid) != NIL ||
		get_rel_relkind(relid) != RELKIND_PARTITIONED_TABLE ?
		list_make1_oid(relid) : find_all_inheritors(relid, NoLock, NULL);

	foreach(lc, tables)
	{
		Oid			tableid = lfirst_oid(lc);
		List	   *fences = fencing_fence_triggers(tableid);
		ListCell   *lc2;
		const char *partial = fence_partial_trigger(stmt);

		foreach(lc2, fences)
		{
			FenceTrigger *fence = (FenceTrigger *) lfirst(lc2);

			if (strcmp(fence->name, stmt->trigname) != 0)
				continue;
			if (partial != NULL)
				ereport(WARNING,
						(errcode(ERRCODE_WARNING),
						 errmsg("fence trigger \"%s\" on table %s checks only some writes",
								fence->name, fencing_qualified_relid_name(tableid)),
						 errdetail_internal("%s", partial),
						 errhint("Run fencing.protect() again to put back the trigger that checks every write.")));
			break;
		}
		if (fences != NIL && lc2 == NULL &&
			fence_has_other_row_trigger(tableid, stmt->trigname))
			fencing_warn_other_row_triggers(tableid, "fencing");
	}
}


/*
 * The tables a statement may have given children (CREATE TABLE ...
 * INHERITS or PARTITION OF, ALTER TABLE ... INHERIT or ATTACH PARTITION),
 * as the statement names them, and the partitions ATTACH PARTITION named
 * in *attached.  False for a statement that gives none.
 */
static bool
fence_new_parents(Node *stmt, List **parents, List **attached)
{
	ListCell   *lc;

	*parents = NIL;
	*attached = NIL;
	switch (nodeTag(stmt))
	{
		case T_CreateStmt:
			*parents = ((CreateStmt *) stmt)->inhRelations;
			break;
		case T_CreateForeignTableStmt:
			*parents = ((CreateForeignTableStmt *) stmt)->base.inhRelations;
			break;
		case T_AlterTableStmt:
			foreach(lc, ((AlterTableStmt *) stmt)->cmds)
			{
				AlterTableCmd *cmd = (AlterTableCmd *) lfirst(lc);

				if (cmd->subtype == AT_AddInherit)
					*parents = lappend(*parents, cmd->def);
				else if (cmd->subtype == AT_AttachPartition)
				{
					*parents = lappend(*parents, ((AlterTableStmt *) stmt)->relation);
					*attached = lappend(*attached, ((PartitionCmd *) cmd->def)->name);
				}
			}
			break;
		default:
			break;
	}
	return *parents != NIL;
}

/*
 * ATTACH PARTITION under a parent that is not protected: a protected
 * table attached gets clones of the parent's row triggers, named in a
 * WARNING; a protected parent's new partitions are told by
 * fencing_follow_new_children.
 */
static void
fence_warn_attached(AlterTableStmt *stmt, List *attached)
{
	ListCell   *lc;

	foreach(lc, attached)
	{
		Oid			parentid = RangeVarGetRelid(stmt->relation, NoLock, true);
		Oid			partid = RangeVarGetRelid((RangeVar *) lfirst(lc), NoLock, true);
		ListCell   *lc2;

		if (!OidIsValid(parentid) || !OidIsValid(partid) ||
			fencing_protect_trigger(parentid) != NULL)
			continue;
		foreach(lc2, find_all_inheritors(partid, AccessShareLock, NULL))
			fencing_warn_other_row_triggers(lfirst_oid(lc2), "fencing");
	}
}

/*
 * After a utility statement ran: triggers it switched or created on
 * protected tables, and the parents it may have given children, resolved
 * as the statement resolved them (inside CREATE SCHEMA, with the new
 * schema first in the path, as the statement saw it).  Every other
 * statement, a SET LOCAL fencing.token among them, costs a tag test.
 */
void
fencing_fence_utility_after(PlannedStmt *pstmt)
{
	Node	   *stmt = pstmt->utilityStmt;
	List	   *parents;
	List	   *attached;
	ListCell   *lc;

	if (IsA(stmt, AlterTableStmt))
		fence_warn_trigger_switches((AlterTableStmt *) stmt);
	else if (IsA(stmt, CreateTrigStmt))
		fence_warn_new_trigger((CreateTrigStmt *) stmt);

	if (!fence_new_parents(stmt, &parents, &attached))
		return;

	/* make the statement's pg_inherits rows visible to the catalog scans */
	CommandCounterIncrement();
	foreach(lc, parents)
	{
		Oid			parentid = RangeVarGetRelid((RangeVar *) lfirst(lc), NoLock, true);

		if (OidIsValid(parentid))
			fencing_follow_new_children(parentid);
	}
	if (attached != NIL)
		fence_warn_attached((AlterTableStmt *) stmt, attached);
}
