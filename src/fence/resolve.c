/*-------------------------------------------------------------------------
 *
 * resolve.c
 *		The per-trigger cache of reject_stale(): which column is the fence
 *		and what a stale write does, resolved once per trigger and row
 *		layout.
 *
 * The trigger's arguments are the fence column (default 'fence') and the
 * mode, 'error' or 'skip'.  They are read, and the column checked (an
 * existing bigint that the server never fills in by itself), the first
 * time a trigger fires, and again after any relcache invalidation; every
 * other row takes the entry fencing_fence_cached() (fence.h) finds.
 *
 * Entries live in a hash table keyed by the trigger's OID in
 * TopMemoryContext, not in fn_mcxt: when COPY fires a trigger for the first
 * time the FmgrInfo's context is the per-tuple context, which is reset after
 * every row.  The trigger's fn_extra points at its entry, and the entry's
 * key (trigger, relation, descriptor) is checked on every call; partitions
 * have their own cloned trigger and their own descriptor, so a partition
 * whose columns are in another order gets its own entry, and a statement
 * that routes rows to many partitions resolves each partition's trigger
 * once, however many there are.
 *
 * A relcache invalidation of a relation (ALTER TABLE, CREATE OR REPLACE
 * TRIGGER, DROP TRIGGER, ATTACH and DETACH PARTITION, a default set on a
 * partitioned ancestor) forgets the entries that depend on it: those of
 * its own triggers, and those of partitions below it, whose fence column
 * must not be filled in by an ancestor either.  Each entry keeps the
 * partitioned tables above its relation; a change to that chain changes
 * the relation at its top, which is one of them or the relation itself.
 * An invalidation of every relation (a full reset) forgets them all.
 * Forgotten entries leave the table, but dynahash keeps their memory on
 * its free list, so an fn_extra that still points at one reads an entry
 * whose trigger is not its own (InvalidOid or another trigger's) and
 * resolves anew.
 *
 * Copyright (c) 2026, the fencing developers
 *
 * IDENTIFICATION
 *		src/fence/resolve.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/partition.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/memutils.h"
#include "utils/rel.h"

#include "fence/fence.h"

static HTAB *fence_cache = NULL;

/* Counts the invalidations seen, so a resolve knows one came during it. */
static uint64 fence_cache_invalidations = 0;

/* Whether the entry depends on the relation relid. */
static bool
fence_cache_depends_on(const FenceTriggerCache *cache, Oid relid)
{
	int			i;

	if (cache->relid == relid || cache->nancestors < 0)
		return true;
	for (i = 0; i < cache->nancestors; i++)
	{
		if (cache->ancestors[i] == relid)
			return true;
	}
	return false;
}

/*
 * Relcache invalidation of relid (InvalidOid: of every relation): its
 * columns, defaults, triggers or place in a partition tree may have
 * changed, so forget the entries that were resolved from it.  Runs in
 * invalidation processing: no catalog access, no allocation.
 */
static void
fence_cache_invalidate(Datum arg, Oid relid)
{
	HASH_SEQ_STATUS status;
	FenceTriggerCache *cache;

	fence_cache_invalidations++;
	if (fence_cache == NULL)
		return;
	hash_seq_init(&status, fence_cache);
	while ((cache = (FenceTriggerCache *) hash_seq_search(&status)) != NULL)
	{
		if (OidIsValid(relid) && !fence_cache_depends_on(cache, relid))
			continue;
		cache->trigger_oid = InvalidOid;
		(void) hash_search(fence_cache, &cache->key, HASH_REMOVE, NULL);
	}
}

/*
 * Register the invalidation callback; called from _PG_init.
 */
void
fencing_fence_cache_init(void)
{
	CacheRegisterRelcacheCallback(fence_cache_invalidate, (Datum) 0);
}

/*
 * The trigger's arguments: the fence column's name (default 'fence') and
 * the mode (default 'error').
 */
static const char *
resolve_arguments(Trigger *trigger, Relation rel, FenceStaleMode *mode)
{
	const char *modearg;

	*mode = FENCE_STALE_ERROR;
	if (trigger->tgnargs > 2)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("trigger \"%s\" on table \"%s\": fencing.reject_stale() takes at most 2 arguments, got %d",
						trigger->tgname, RelationGetRelationName(rel),
						trigger->tgnargs),
				 errhint("Arguments are the fence column (default 'fence') and the mode, 'error' or 'skip'.")));
	if (trigger->tgnargs < 2)
		return trigger->tgnargs >= 1 ? trigger->tgargs[0] : FENCE_DEFAULT_COLUMN;

	modearg = trigger->tgargs[1];
	if (strcmp(modearg, "error") == 0)
		*mode = FENCE_STALE_ERROR;
	else if (strcmp(modearg, "skip") == 0)
		*mode = FENCE_STALE_SKIP;
	else
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("trigger \"%s\" on table \"%s\": invalid mode \"%s\" for fencing.reject_stale()",
						trigger->tgname, RelationGetRelationName(rel),
						modearg),
				 errhint("The mode is 'error' (stale writes fail) or 'skip' (stale writes touch no row).")));
	return trigger->tgargs[0];
}

/*
 * The fence column's number in rel's own descriptor (a partition resolves
 * the column in its own order), after checking that it can be a fence: a
 * bigint that the server never fills in by itself (for a partition, also
 * not through its ancestors).
 */
static AttrNumber
resolve_column(Trigger *trigger, Relation rel, const char *column)
{
	TupleDesc	tupdesc = RelationGetDescr(rel);
	AttrNumber	attnum = InvalidAttrNumber;
	Form_pg_attribute attr;
	int			i;

	for (i = 0; i < tupdesc->natts; i++)
	{
		attr = TupleDescAttr(tupdesc, i);
		if (!attr->attisdropped && strcmp(NameStr(attr->attname), column) == 0)
		{
			attnum = attr->attnum;
			break;
		}
	}
	if (attnum == InvalidAttrNumber)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_COLUMN),
				 errmsg("trigger \"%s\" on table \"%s\": fence column \"%s\" does not exist",
						trigger->tgname, RelationGetRelationName(rel), column),
				 errhint("Pass the fence column's name as the trigger's first argument, or re-run fencing.protect(table, column).")));

	attr = TupleDescAttr(tupdesc, attnum - 1);
	if (attr->atttypid != INT8OID)
		ereport(ERROR,
				(errcode(ERRCODE_DATATYPE_MISMATCH),
				 errmsg("trigger \"%s\" on table \"%s\": fence column \"%s\" must be of type bigint, not %s",
						trigger->tgname, RelationGetRelationName(rel), column,
						format_type_be(attr->atttypid))));
	fencing_refuse_filled_fence_column(rel, attr,
									   psprintf("trigger \"%s\" on table \"%s\"",
												trigger->tgname,
												RelationGetRelationName(rel)));
	return attnum;
}

/*
 * The partitioned tables above rel, into the entry: at most
 * FENCE_CACHE_ANCESTORS, else nancestors -1 (every invalidation forgets
 * the entry).
 */
static void
resolve_ancestors(Relation rel, FenceTriggerCache *cache)
{
	List	   *ancestors;
	ListCell   *lc;

	cache->nancestors = 0;
	if (!rel->rd_rel->relispartition)
		return;
	ancestors = get_partition_ancestors(RelationGetRelid(rel));
	if (list_length(ancestors) > FENCE_CACHE_ANCESTORS)
		cache->nancestors = -1;
	else
	{
		foreach(lc, ancestors)
			cache->ancestors[cache->nancestors++] = lfirst_oid(lc);
	}
	list_free(ancestors);
}

/*
 * The trigger's entry: the one in the table when it was resolved for this
 * relation and layout and nothing it depends on changed since, else found
 * from the trigger's arguments and the catalogs, and kept.  fn_extra then
 * points at it.
 */
FenceTriggerCache *
fencing_fence_resolve(FunctionCallInfo fcinfo, TriggerData *trigdata)
{
	Trigger    *trigger = trigdata->tg_trigger;
	Relation	rel = trigdata->tg_relation;
	TupleDesc	tupdesc = RelationGetDescr(rel);
	FenceStaleMode mode;
	const char *column;
	FenceTriggerCache resolved;
	FenceTriggerCache *cache;
	uint64		invalidations;

	if (fence_cache == NULL)
	{
		HASHCTL		ctl;

		ctl.keysize = sizeof(Oid);
		ctl.entrysize = sizeof(FenceTriggerCache);
		ctl.hcxt = TopMemoryContext;
		fence_cache = hash_create("fencing trigger cache", 64, &ctl,
								  HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	}
	cache = hash_search(fence_cache, &trigger->tgoid, HASH_FIND, NULL);
	if (cache != NULL && fencing_fence_cache_matches(cache, trigdata))
	{
		fcinfo->flinfo->fn_extra = cache;
		return cache;
	}

	/*
	 * Everything from the catalogs first, into a local entry: reading them
	 * may raise an error (the table then gets no entry for this trigger)
	 * or process invalidations, whose callback walks the table, so the
	 * table's entry is made only once nothing else runs before it is
	 * whole.  An invalidation during the reads may have come after some of
	 * them: the entry then serves this row only.
	 */
	invalidations = fence_cache_invalidations;
	column = resolve_arguments(trigger, rel, &mode);
	resolved.fence_attnum = resolve_column(trigger, rel, column);
	resolve_ancestors(rel, &resolved);
	resolved.relid = RelationGetRelid(rel);
	resolved.tupdesc = tupdesc;
	resolved.natts = tupdesc->natts;
	resolved.mode = mode;
	resolved.trigger_oid = invalidations == fence_cache_invalidations ?
		trigger->tgoid : InvalidOid;
	resolved.key = trigger->tgoid;

	cache = hash_search(fence_cache, &trigger->tgoid, HASH_ENTER, NULL);
	*cache = resolved;
	fcinfo->flinfo->fn_extra = cache;
	return cache;
}
