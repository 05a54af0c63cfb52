/*-------------------------------------------------------------------------
 *
 * protect.c
 *		fencing.protect() and fencing.unprotect(): validate a table and
 *		install or remove the reject_stale trigger (trigger.c).
 *
 * The trigger is only as good as the table it sits on, so the checks that
 * can be made once, when a DBA protects a table, are made here, where a
 * mistake is easy to fix: the table is an ordinary or partitioned table the
 * caller owns, and the fence column is a plain bigint that writers assign.
 *
 * A write through a parent reaches its inheritance children's rows, and
 * fires only the children's own row triggers, so a protected table's fence
 * covers its whole tree: protect() puts the trigger on every inheritance
 * descendant too (partitions get PostgreSQL's clone of the parent's), and
 * ddl.c calls fencing_follow_new_children() when DDL adds children
 * later.  A descendant follows its parent's fence column and mode; protect()
 * and unprotect() are run on the top of the tree.
 *
 * Copyright (c) 2026, the fencing developers
 *
 * IDENTIFICATION
 *		src/fence/protect.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/relation.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/catalog.h"
#include "catalog/namespace.h"
#include "catalog/objectaddress.h"
#include "catalog/pg_class.h"
#include "catalog/pg_inherits.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_trigger.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/syscache.h"

#include "fence/fence.h"

PG_FUNCTION_INFO_V1(fencing_protect);
PG_FUNCTION_INFO_V1(fencing_unprotect);

/*
 * Check that the caller may put a fence on relid and lock it against
 * concurrent DDL until the end of the transaction.  Ownership is checked
 * before the lock is taken, so a role cannot use protect() to block tables
 * it does not own.  Only ordinary and partitioned tables qualify: a view
 * has no rows of its own, a foreign table's rows live elsewhere, and system
 * catalogs are written by the server itself.  Temporary tables are allowed
 * (they are ordinary tables of the session).
 */
static Relation
fence_open_owned_table(Oid relid, const char *caller)
{
	Relation	rel;
	char		relkind;
	char	   *relname;

	if (!OidIsValid(relid))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("%s: table OID 0 does not name a table", caller)));

	relkind = get_rel_relkind(relid);
	relname = get_rel_name(relid);
	if (relkind == '\0' || relname == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("%s: relation with OID %u does not exist", caller, relid)));

	if (IsCatalogRelationOid(relid) ||
		IsCatalogNamespace(get_rel_namespace(relid)) ||
		IsToastNamespace(get_rel_namespace(relid)))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("%s: \"%s\" is a system catalog", caller, relname),
				 errdetail("System catalogs are written by the server, not by lock holders.")));

	if (relkind != RELKIND_RELATION && relkind != RELKIND_PARTITIONED_TABLE)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("%s: \"%s\" is not a table", caller, relname),
				 errdetail_relkind_not_supported(relkind),
				 errhint("Fences are checked on ordinary and partitioned tables; protect the table that stores the rows.")));

	if (!fencing_owns_relation(relid, GetUserId()))
		aclcheck_error(ACLCHECK_NOT_OWNER, get_relkind_objtype(relkind), relname);

	/* the lock CREATE TRIGGER takes; then make sure the table is still there */
	rel = try_relation_open(relid, ShareRowExclusiveLock);
	if (rel == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("%s: relation \"%s\" was dropped concurrently", caller, relname)));
	return rel;
}

/*
 * Run the CREATE OR REPLACE TRIGGER or DROP TRIGGER that protect() and
 * unprotect() built.  Going through SPI keeps the trigger definition in the
 * one readable statement a DBA would type; both callers have checked
 * ownership and quoted every name before.
 */
static void
run_trigger_ddl(const char *sql)
{
	int			rc;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	rc = SPI_execute(sql, false, 0);
	if (rc != SPI_OK_UTILITY)
		elog(ERROR, "SPI_execute of \"%s\" returned %s", sql, SPI_result_code_string(rc));
	SPI_finish();
}

/*
 * Check that "column" of rel can be a fence: an ordinary bigint column that
 * writers assign, and that the server never fills in by itself (no default,
 * no identity, also not on a partitioned table above rel, F7).  protect()
 * calls it for the table it is given, so that a mistake is reported when
 * it is easy to fix, and for every table it puts the trigger on; "caller"
 * names the function in the messages.
 */
void
fencing_validate_fence_column(Relation rel, const char *column, const char *caller)
{
	AttrNumber	attnum;
	Form_pg_attribute attr;

	attnum = get_attnum(RelationGetRelid(rel), column);
	if (attnum == InvalidAttrNumber)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_COLUMN),
				 errmsg("%s: column \"%s\" of table \"%s\" does not exist",
						caller, column, RelationGetRelationName(rel)),
				 errhint("Add a fence column first: ALTER TABLE ... ADD COLUMN %s bigint.",
						 quote_identifier(column))));
	if (attnum < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s: \"%s\" is a system column of table \"%s\"",
						caller, column, RelationGetRelationName(rel)),
				 errdetail("The fence must be an ordinary bigint column that writers assign.")));

	attr = TupleDescAttr(RelationGetDescr(rel), attnum - 1);
	if (attr->atttypid != INT8OID)
		ereport(ERROR,
				(errcode(ERRCODE_DATATYPE_MISMATCH),
				 errmsg("%s: fence column \"%s\" of table \"%s\" must be of type bigint, not %s",
						caller, column, RelationGetRelationName(rel),
						format_type_be(attr->atttypid)),
				 errdetail("Fence tokens are bigint.")));
	if (attr->attgenerated != '\0')
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_COLUMN_DEFINITION),
				 errmsg("%s: fence column \"%s\" of table \"%s\" is a generated column",
						caller, column, RelationGetRelationName(rel)),
				 errdetail("The fence must be written by the lock holder.")));
	fencing_refuse_filled_fence_column(rel, attr, caller);
}

/*
 * The direct parents of relid (its pg_inherits rows), or, with
 * children = true, the direct children of relid whose link this transaction
 * made: those are the tables DDL has just put under relid.
 */
static List *
fence_inheritance_links(Oid relid, bool children)
{
	List	   *result = NIL;
	Relation	inhrel;
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple	tuple;

	inhrel = table_open(InheritsRelationId, AccessShareLock);
	ScanKeyInit(&key,
				children ? Anum_pg_inherits_inhparent : Anum_pg_inherits_inhrelid,
				BTEqualStrategyNumber, F_OIDEQ, ObjectIdGetDatum(relid));
	scan = systable_beginscan(inhrel,
							  children ? InheritsParentIndexId : InheritsRelidSeqnoIndexId,
							  true, NULL, 1, &key);
	while (HeapTupleIsValid(tuple = systable_getnext(scan)))
	{
		Form_pg_inherits form = (Form_pg_inherits) GETSTRUCT(tuple);

		if (!children)
			result = lappend_oid(result, form->inhparent);
		else if (TransactionIdIsCurrentTransactionId(HeapTupleHeaderGetXmin(tuple->t_data)))
			result = lappend_oid(result, form->inhrelid);
	}
	systable_endscan(scan);
	table_close(inhrel, AccessShareLock);
	return result;
}

/*
 * The fence that relid's direct parents give it (and the parent it comes
 * from), or NULL when no parent is protected.  A table can follow one fence
 * only: two protected parents with different columns or modes are an
 * error.
 */
static FenceTrigger *
fence_inherited_fence(Oid relid, Oid *from)
{
	FenceTrigger *result = NULL;
	ListCell   *lc;

	foreach(lc, fence_inheritance_links(relid, false))
	{
		Oid			parentid = lfirst_oid(lc);
		FenceTrigger *fence = fencing_protect_trigger(parentid);

		if (fence == NULL)
			continue;
		if (result == NULL)
		{
			result = fence;
			*from = parentid;
		}
		else if (strcmp(result->column, fence->column) != 0 ||
				 strcmp(result->mode, fence->mode) != 0)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("table %s inherits from protected tables %s and %s, whose fences differ",
							fencing_qualified_relid_name(relid),
							fencing_qualified_relid_name(*from),
							fencing_qualified_relid_name(parentid)),
					 errdetail("Table %s is protected with fence column \"%s\" and on_stale '%s', table %s with fence column \"%s\" and on_stale '%s'.",
							   fencing_qualified_relid_name(*from), result->column, result->mode,
							   fencing_qualified_relid_name(parentid), fence->column, fence->mode),
					 errhint("Protect both parents with the same fence column and mode.")));
	}
	return result;
}

/*
 * Refuse protect() and unprotect() on a table that follows the fence of a
 * protected parent: the parent decides for its whole tree.  protect() with
 * the fence the table follows anyway is allowed (scripts protect every
 * table they create, and a child attached before fencing 1.1 may still
 * lack the trigger).
 */
static void
fence_refuse_if_following(Relation rel, const char *column, const char *mode,
						  const char *caller)
{
	Oid			parentid = InvalidOid;
	FenceTrigger *fence = fence_inherited_fence(RelationGetRelid(rel), &parentid);

	if (fence == NULL)
		return;
	if (column != NULL &&
		strcmp(fence->column, column) == 0 && strcmp(fence->mode, mode) == 0)
		return;
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("%s: table %s follows the fence of protected table %s",
					caller, fencing_qualified_relname(rel),
					fencing_qualified_relid_name(parentid)),
			 errdetail("Partitions and inheritance children of a protected table carry its fence column \"%s\" and on_stale '%s'.",
					   fence->column, fence->mode),
			 errhint("Run fencing.protect() or fencing.unprotect() on table %s.",
					 fencing_qualified_relid_name(parentid))));
}

/* What fence_descendant_error_context() names when a descendant fails. */
typedef struct FenceDescendantContext
{
	const char *descendant;
	const char *ancestor;
} FenceDescendantContext;

/*
 * Error context for a descendant that cannot follow its ancestor's fence:
 * the message names the descendant, this line says why it matters.
 */
static void
fence_descendant_error_context(void *arg)
{
	FenceDescendantContext *context = (FenceDescendantContext *) arg;

	errcontext("table %s is a partition or inheritance child of protected table %s",
			   context->descendant, context->ancestor);
}

/*
 * Check that rel, a descendant of protected table ancestorid, can carry its
 * fence: an ordinary or partitioned table (a foreign table's rows live on
 * another server, where nothing checks them) whose fence column is valid,
 * owned by the caller when the trigger is to be installed on it (partitions
 * get PostgreSQL's clone, which needs no more than the parent).
 */
static void
fence_check_descendant(Relation rel, Oid ancestorid, const char *column,
					   const char *caller)
{
	FenceDescendantContext context;
	ErrorContextCallback callback;
	char		relkind = rel->rd_rel->relkind;

	context.descendant = fencing_qualified_relname(rel);
	context.ancestor = fencing_qualified_relid_name(ancestorid);
	callback.callback = fence_descendant_error_context;
	callback.arg = &context;
	callback.previous = error_context_stack;
	error_context_stack = &callback;

	if (relkind != RELKIND_RELATION && relkind != RELKIND_PARTITIONED_TABLE)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("%s: \"%s\" is not an ordinary or partitioned table, so it cannot be fenced",
						caller, RelationGetRelationName(rel)),
				 errdetail_relkind_not_supported(relkind),
				 errhint("A foreign table's rows live on another server, where the fence cannot check writes; keep it out of a protected table's partitions and inheritance children.")));

	if (!rel->rd_rel->relispartition &&
		!fencing_owns_relation(RelationGetRelid(rel), GetUserId()))
		aclcheck_error(ACLCHECK_NOT_OWNER, OBJECT_TABLE, RelationGetRelationName(rel));

	fencing_validate_fence_column(rel, column, caller);

	error_context_stack = callback.previous;
}

/*
 * Put protect()'s trigger on rel, replacing the one it has.  CREATE OR
 * REPLACE also repairs a trigger someone disabled or redefined by hand.  A
 * change of column or mode is said in a NOTICE: a table protected with
 * on_stale => 'skip' silently turning to 'error' (or back) would surprise.
 * A partition's clone is left to PostgreSQL, which replaces it with its
 * parent's trigger.
 */
static void
fence_install(Relation rel, const char *column, const char *mode,
			  const char *caller)
{
	FenceTrigger *old = fencing_protect_trigger(RelationGetRelid(rel));
	char	   *qualified = fencing_qualified_relname(rel);
	StringInfoData sql;

	if (old != NULL && old->is_clone)
		return;
	if (old != NULL &&
		(strcmp(old->column, column) != 0 || strcmp(old->mode, mode) != 0))
		ereport(NOTICE,
				(errcode(ERRCODE_SUCCESSFUL_COMPLETION),
				 errmsg("%s: table %s changes from fence column \"%s\", on_stale '%s' to fence column \"%s\", on_stale '%s'",
						caller, qualified, old->column, old->mode, column, mode)));

	initStringInfo(&sql);
	appendStringInfo(&sql,
					 "CREATE OR REPLACE TRIGGER " FENCE_TRIGGER_NAME
					 " BEFORE INSERT OR UPDATE OR DELETE ON %s"
					 " FOR EACH ROW EXECUTE FUNCTION fencing.reject_stale(%s, %s)",
					 qualified, quote_literal_cstr(column), quote_literal_cstr(mode));
	run_trigger_ddl(sql.data);
	CommandCounterIncrement();
}

/*
 * Make one descendant follow its parents' fence: check it, and install the
 * trigger on it unless it is a partition (PostgreSQL cloned the parent's).
 * Descendants are visited parents first, so each finds its parents done.
 */
static void
fence_follow_parents(Oid relid, const char *caller)
{
	Oid			parentid = InvalidOid;
	FenceTrigger *fence = fence_inherited_fence(relid, &parentid);
	Relation	rel;

	if (fence == NULL)
		return;

	rel = relation_open(relid, AccessShareLock);
	fence_check_descendant(rel, parentid, fence->column, caller);
	if (!rel->rd_rel->relispartition)
		fence_install(rel, fence->column, fence->mode, caller);
	relation_close(rel, NoLock);
}

/*
 * Row triggers fire in name order, so another BEFORE ROW
 * INSERT or UPDATE trigger on a fenced table runs before the fence check
 * (and can fill in a token the writer does not hold) or after it (and can
 * change the fence it checked).  Once a table is protected only its owner
 * may add triggers (ddl.c), but a trigger made before, or cloned
 * from a parent by ATTACH PARTITION, was made by whoever had the TRIGGER
 * privilege then, and triggers have no owner to tell.  Such triggers are
 * common and harmless (an updated_at stamp), so they are named in a
 * WARNING, not refused: the owner checks that none assigns the fence.
 * Disabled triggers are left out; nothing is said for a table that
 * carries no fence trigger.
 */
void
fencing_warn_other_row_triggers(Oid relid, const char *caller)
{
	Oid			funcid = fencing_reject_stale_function();
	List	   *fences = fencing_fence_triggers(relid);
	StringInfoData before;
	StringInfoData after;
	Relation	rel;
	TriggerDesc *trigdesc;
	int			i;

	if (fences == NIL)
		return;

	initStringInfo(&before);
	initStringInfo(&after);
	rel = relation_open(relid, AccessShareLock);
	trigdesc = rel->trigdesc;
	for (i = 0; trigdesc != NULL && i < trigdesc->numtriggers; i++)
	{
		Trigger    *trigger = &trigdesc->triggers[i];
		StringInfo	list;

		if (trigger->tgfoid == funcid || trigger->tgenabled == TRIGGER_DISABLED ||
			!TRIGGER_FOR_ROW(trigger->tgtype) || !TRIGGER_FOR_BEFORE(trigger->tgtype) ||
			!(TRIGGER_FOR_INSERT(trigger->tgtype) || TRIGGER_FOR_UPDATE(trigger->tgtype)))
			continue;
		list = strcmp(trigger->tgname, FENCE_TRIGGER_NAME) < 0 ? &before : &after;
		appendStringInfo(list, "%s%s", list->len > 0 ? ", " : "",
						 quote_identifier(trigger->tgname));
	}
	relation_close(rel, AccessShareLock);

	if (before.len == 0 && after.len == 0)
		return;
	ereport(WARNING,
			(errcode(ERRCODE_WARNING),
			 errmsg("%s: protected table %s has other BEFORE ROW INSERT or UPDATE triggers, which may change fence column \"%s\"",
					caller, fencing_qualified_relid_name(relid),
					((FenceTrigger *) linitial(fences))->column),
			 before.len > 0 && after.len > 0 ?
			 errdetail("Row triggers fire in name order: %s before the fence check (it could supply a token the writer does not hold), %s after it (it could change the fence that was checked).",
					   before.data, after.data) :
			 before.len > 0 ?
			 errdetail("Row triggers fire in name order: %s before the fence check (it could supply a token the writer does not hold).",
					   before.data) :
			 errdetail("Row triggers fire in name order: %s after the fence check (it could change the fence that was checked).",
					   after.data),
			 errhint("Make sure none of them assigns column \"%s\", or drop them; once a table is protected, only its owner may add triggers.",
					 ((FenceTrigger *) linitial(fences))->column)));
}

/*
 * DDL has run that may have put tables under parentid (CREATE TABLE ...
 * INHERITS or PARTITION OF, ALTER TABLE ... INHERIT or ATTACH PARTITION):
 * if parentid is protected, each table this transaction linked to it, and
 * everything below that table, follows its fence, or the DDL fails, and
 * is told about the other row triggers it has.
 */
void
fencing_follow_new_children(Oid parentid)
{
	const char *caller = "fencing";
	ListCell   *lc;

	if (fencing_protect_trigger(parentid) == NULL)
		return;

	foreach(lc, fence_inheritance_links(parentid, true))
	{
		ListCell   *lc2;

		foreach(lc2, find_all_inheritors(lfirst_oid(lc), AccessShareLock, NULL))
		{
			fence_follow_parents(lfirst_oid(lc2), caller);
			fencing_warn_other_row_triggers(lfirst_oid(lc2), caller);
		}
	}
}

/*
 * protect()'s fence column and mode.  A column or mode not given (NULL,
 * the defaults) keeps what the table is protected with, so that re-running
 * protect('t') on a table protected with on_stale => 'skip' does not turn
 * it to 'error'; a table not protected yet gets 'fence' and 'error'.
 */
static void
protect_arguments(FunctionCallInfo fcinfo, Oid relid, const char **column,
				  char **mode)
{
	FenceTrigger *current = NULL;

	if (PG_ARGISNULL(1) || PG_ARGISNULL(2))
		current = fencing_protect_trigger(relid);
	*column = !PG_ARGISNULL(1) ? NameStr(*PG_GETARG_NAME(1)) :
		current != NULL ? current->column : FENCE_DEFAULT_COLUMN;
	*mode = !PG_ARGISNULL(2) ? text_to_cstring(PG_GETARG_TEXT_PP(2)) :
		pstrdup(current != NULL ? current->mode : FENCE_DEFAULT_MODE);

	if (strcmp(*mode, "error") != 0 && strcmp(*mode, "skip") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("fencing.protect(): invalid on_stale value \"%s\"", *mode),
				 errhint("Use 'error' (stale writes fail) or 'skip' (stale writes touch no row).")));
}

/*
 * fencing.protect(tbl regclass, fence_column name, on_stale text): validate
 * the table, the column and every partition and inheritance child up front,
 * where a mistake is easy to fix, then install (or replace) the trigger
 * under a fixed name on the table and its inheritance descendants, so that
 * running it again, perhaps with another column or mode, is harmless.  The
 * statements are built from quoted identifiers and literals and name every
 * object with its schema, so the caller's search_path cannot change them.
 */
Datum
fencing_protect(PG_FUNCTION_ARGS)
{
	const char *caller = "fencing.protect()";
	Oid			relid;
	const char *column;
	char	   *mode;
	Relation	rel;
	List	   *descendants;
	ListCell   *lc;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("fencing.protect(): the table must not be null")));
	relid = PG_GETARG_OID(0);
	protect_arguments(fcinfo, relid, &column, &mode);

	rel = fence_open_owned_table(relid, caller);
	fence_refuse_if_following(rel, column, mode, caller);
	fencing_validate_fence_column(rel, column, caller);

	/* the lock CREATE TRIGGER takes on each; the list starts with relid */
	descendants = list_delete_first(find_all_inheritors(relid, ShareRowExclusiveLock, NULL));
	foreach(lc, descendants)
	{
		Relation	child = relation_open(lfirst_oid(lc), NoLock);

		fence_check_descendant(child, relid, column, caller);
		relation_close(child, NoLock);
	}

	fence_install(rel, column, mode, caller);
	foreach(lc, descendants)
		fence_follow_parents(lfirst_oid(lc), caller);
	fencing_refuse_view_defaults_over(relid);
	fencing_warn_other_row_triggers(relid, caller);
	foreach(lc, descendants)
		fencing_warn_other_row_triggers(lfirst_oid(lc), caller);

	relation_close(rel, NoLock);
	PG_RETURN_VOID();
}

/*
 * fencing.unprotect(tbl regclass): remove the trigger protect() installed,
 * from the table and its inheritance descendants (partitions lose
 * PostgreSQL's clone with the parent's trigger).  Removing a fence is as
 * sensitive as installing one, so the same checks apply; a table that is
 * not protected is left as it is.
 */
Datum
fencing_unprotect(PG_FUNCTION_ARGS)
{
	const char *caller = "fencing.unprotect()";
	Relation	rel;
	ListCell   *lc;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("fencing.unprotect(): the table must not be null")));

	rel = fence_open_owned_table(PG_GETARG_OID(0), caller);
	fence_refuse_if_following(rel, NULL, NULL, caller);

	foreach(lc, find_all_inheritors(RelationGetRelid(rel), ShareRowExclusiveLock, NULL))
	{
		Oid			relid = lfirst_oid(lc);
		FenceTrigger *fence = fencing_protect_trigger(relid);
		StringInfoData sql;

		/* a partition's clone goes with the trigger it was cloned from */
		if (fence == NULL || fence->is_clone)
			continue;
		initStringInfo(&sql);
		appendStringInfo(&sql, "DROP TRIGGER " FENCE_TRIGGER_NAME " ON %s",
						 fencing_qualified_relid_name(relid));
		run_trigger_ddl(sql.data);
		CommandCounterIncrement();
	}

	relation_close(rel, NoLock);
	PG_RETURN_VOID();
}
