/*-------------------------------------------------------------------------
 *
 * catalog.c
 *		What a fence is in the catalogs: the fence triggers of a table, a
 *		fence column the server would fill in by itself, and the names of
 *		tables for messages.
 *
 * protect() installs the trigger, the DDL checks look for it, and the
 * trigger itself refuses a column that a default could fill: each reads
 * the catalogs the same way through these.
 *
 * Copyright (c) 2026, the fencing developers
 *
 * IDENTIFICATION
 *		src/fence/catalog.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "catalog/namespace.h"
#include "catalog/partition.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_trigger.h"
#include "commands/trigger.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/syscache.h"

#include "fence/fence.h"

/*
 * "schema.table" for messages, so that a rejection in a log names the
 * table unambiguously.  Only called on error paths.
 */
char *
fencing_qualified_relname(Relation rel)
{
	char	   *nspname = get_namespace_name(RelationGetNamespace(rel));

	return quote_qualified_identifier(nspname, RelationGetRelationName(rel));
}

/*
 * What the server puts into attr on its own: 'g' generated, 'i' identity,
 * 'd' default, '\0' nothing.
 */
static char
fence_column_filler(Form_pg_attribute attr)
{
	if (attr->attgenerated != '\0')
		return 'g';
	if (attr->attidentity != '\0')
		return 'i';
	if (attr->atthasdef)
		return 'd';
	return '\0';
}

/*
 * Raise the error for a fence column that table relid fills in by itself.
 * "partition" is the partition the trigger checks when relid is one of its
 * partitioned ancestors, else NULL.
 */
static void
fence_report_filled_column(const char *who, const char *column, char filler,
						   Oid relid, Relation partition)
{
	char	   *qualified = quote_qualified_identifier(get_namespace_name(get_rel_namespace(relid)),
													   get_rel_name(relid));
	const char *what = filler == 'g' ? "is a generated column" :
		filler == 'i' ? "is an identity column" : "has a default";

	ereport(ERROR,
			(errcode(ERRCODE_INVALID_COLUMN_DEFINITION),
			 errmsg("%s: fence column \"%s\" of table %s %s",
					who, column, qualified, what),
			 partition != NULL ?
			 errdetail("INSERTs routed through %s into partition %s get a fence without a token, and would pass.",
					   qualified, fencing_qualified_relname(partition)) :
			 errdetail("A write that carries no token would get a fence from the server, and would pass."),
			 filler == 'g' ? 0 :
			 errhint("Remove it: ALTER TABLE %s ALTER COLUMN %s DROP %s.",
					 qualified, quote_identifier(column),
					 filler == 'i' ? "IDENTITY" : "DEFAULT")));
}

/*
 * F7: a fence column that the server fills in by itself (a default, an
 * identity, a generation expression) would give a write that carries no
 * token a fence, and it would pass.  For a partition the partitioned tables
 * above it count too, found by the column's name: an INSERT routed through
 * one of them gets that table's default.  Raises an error that begins with
 * "who" (the function or trigger that asks); reads the catalogs for
 * partitions, so it runs when a fence is set up, not per row.
 */
void
fencing_refuse_filled_fence_column(Relation rel, Form_pg_attribute attr,
								   const char *who)
{
	const char *column = NameStr(attr->attname);
	char		filler = fence_column_filler(attr);
	List	   *ancestors;
	ListCell   *lc;

	if (filler != '\0')
		fence_report_filled_column(who, column, filler, RelationGetRelid(rel), NULL);

	if (!rel->rd_rel->relispartition)
		return;

	ancestors = get_partition_ancestors(RelationGetRelid(rel));
	foreach(lc, ancestors)
	{
		Oid			ancestor = lfirst_oid(lc);
		HeapTuple	tuple = SearchSysCacheAttName(ancestor, column);

		if (!HeapTupleIsValid(tuple))
			continue;
		filler = fence_column_filler((Form_pg_attribute) GETSTRUCT(tuple));
		ReleaseSysCache(tuple);
		if (filler != '\0')
			fence_report_filled_column(who, column, filler, ancestor, rel);
	}
	list_free(ancestors);
}

/*
 * The OID of the function fencing.name() without arguments, or InvalidOid
 * when this database's fencing has none (the extension not installed, or
 * not yet updated to the library's version).  Looked up without permission
 * checks (a role without USAGE on schema fencing is still fenced), and by
 * name rather than cached, so DROP EXTENSION and CREATE EXTENSION need no
 * invalidation.
 */
Oid
fencing_function(const char *name)
{
	Oid			nspid = get_namespace_oid("fencing", true);

	if (!OidIsValid(nspid))
		return InvalidOid;
	return GetSysCacheOid3(PROCNAMEARGSNSP, Anum_pg_proc_oid,
						   CStringGetDatum(name),
						   PointerGetDatum(buildoidvector(NULL, 0)),
						   ObjectIdGetDatum(nspid));
}

/* The OID of fencing.reject_stale(), or InvalidOid (see fencing_function). */
Oid
fencing_reject_stale_function(void)
{
	return fencing_function("reject_stale");
}

/*
 * Every row trigger on relid that executes fencing.reject_stale(), read from
 * pg_trigger rather than the relcache, so that it can be called for a
 * relation this backend has not locked (TRUNCATE asks before it locks the
 * tables it names).  The arguments default as the trigger's do.
 */
List *
fencing_fence_triggers(Oid relid)
{
	Oid			funcid = fencing_reject_stale_function();
	List	   *result = NIL;
	Relation	tgrel;
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple	tuple;

	if (!OidIsValid(funcid))
		return NIL;

	tgrel = table_open(TriggerRelationId, AccessShareLock);
	ScanKeyInit(&key, Anum_pg_trigger_tgrelid, BTEqualStrategyNumber, F_OIDEQ,
				ObjectIdGetDatum(relid));
	scan = systable_beginscan(tgrel, TriggerRelidNameIndexId, true, NULL, 1, &key);
	while (HeapTupleIsValid(tuple = systable_getnext(scan)))
	{
		Form_pg_trigger form = (Form_pg_trigger) GETSTRUCT(tuple);
		FenceTrigger *trigger;

		if (form->tgfoid != funcid || !TRIGGER_FOR_ROW(form->tgtype))
			continue;

		trigger = (FenceTrigger *) palloc0(sizeof(FenceTrigger));
		trigger->oid = form->oid;
		trigger->name = pstrdup(NameStr(form->tgname));
		trigger->type = form->tgtype;
		trigger->enabled = form->tgenabled;
		trigger->is_clone = OidIsValid(form->tgparentid);
		trigger->column = FENCE_DEFAULT_COLUMN;
		trigger->mode = FENCE_DEFAULT_MODE;
		if (form->tgnargs > 0)
		{
			bool		isnull;
			Datum		args = heap_getattr(tuple, Anum_pg_trigger_tgargs,
											RelationGetDescr(tgrel), &isnull);

			if (!isnull)
			{
				char	   *arg = VARDATA_ANY(DatumGetByteaPP(args));

				trigger->column = pstrdup(arg);
				if (form->tgnargs > 1)
					trigger->mode = pstrdup(arg + strlen(arg) + 1);
			}
		}
		result = lappend(result, trigger);
	}
	systable_endscan(scan);
	table_close(tgrel, AccessShareLock);
	return result;
}

/*
 * The trigger protect() installed on relid (or PostgreSQL cloned onto a
 * partition from it), or NULL: the one a table's descendants follow.
 */
FenceTrigger *
fencing_protect_trigger(Oid relid)
{
	ListCell   *lc;

	foreach(lc, fencing_fence_triggers(relid))
	{
		FenceTrigger *trigger = (FenceTrigger *) lfirst(lc);

		if (strcmp(trigger->name, FENCE_TRIGGER_NAME) == 0)
			return trigger;
	}
	return NULL;
}

/*
 * Whether a row trigger fires in this session, decided as the trigger
 * manager decides (TriggerEnabled in trigger.c): a disabled trigger never
 * fires, an ORIGIN one not while session_replication_role is replica (as
 * in a logical replication apply worker), a REPLICA one only then.
 */
bool
fencing_trigger_fires_here(const FenceTrigger *trigger)
{
	return fencing_tgenabled_fires_here(trigger->enabled);
}

/* The same, by pg_trigger.tgenabled alone. */
bool
fencing_tgenabled_fires_here(char enabled)
{
	if (enabled == TRIGGER_FIRES_ALWAYS)
		return true;
	if (SessionReplicationRole == SESSION_REPLICATION_ROLE_REPLICA)
		return enabled == TRIGGER_FIRES_ON_REPLICA;
	return enabled == TRIGGER_FIRES_ON_ORIGIN;
}

/*
 * "schema.table" for a relation that is not open, for messages.
 */
char *
fencing_qualified_relid_name(Oid relid)
{
	return quote_qualified_identifier(get_namespace_name(get_rel_namespace(relid)),
									  get_rel_name(relid));
}
