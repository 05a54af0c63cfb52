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
 * Entries live in a small static array, not in fn_mcxt: when COPY fires a
 * trigger for the first time the FmgrInfo's context is the per-tuple
 * context, which is reset after every row.  The trigger's fn_extra points
 * at its entry, and the entry's key (trigger, relation, descriptor) is
 * checked on every call; partitions have their own cloned trigger and
 * their own descriptor, so a partition whose columns are in another order
 * gets its own entry.  Every relcache invalidation (ALTER TABLE, CREATE
 * OR REPLACE TRIGGER, DROP TRIGGER, a default set on a partitioned parent)
 * clears all entries, so a descriptor rebuilt at the same address is never
 * mistaken for the old one.
 *
 * Copyright (c) 2026, the fencing developers
 *
 * IDENTIFICATION
 *		src/fence/resolve.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/rel.h"

#include "fence/fence.h"

#define FENCE_CACHE_SIZE	64

static FenceTriggerCache fence_cache[FENCE_CACHE_SIZE];
static int	fence_cache_next = 0;

/*
 * Relcache invalidation: some relation's columns, defaults or triggers may
 * have changed, so forget everything that was resolved.  Every entry, not
 * only the relation's own: a partition's entry depends on its partitioned
 * ancestors' defaults (fencing_refuse_filled_fence_column), and their
 * invalidation does not name the partition.  Entries are rebuilt from the
 * relcache, so this costs one resolve per trigger after DDL.
 */
static void
fence_cache_invalidate(Datum arg, Oid relid)
{
	int			i;

	for (i = 0; i < FENCE_CACHE_SIZE; i++)
		fence_cache[i].trigger_oid = InvalidOid;
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

/* This trigger's entry if it has one, else the next in turn. */
static FenceTriggerCache *
cache_entry_for(Oid trigger_oid)
{
	FenceTriggerCache *cache;
	int			i;

	for (i = 0; i < FENCE_CACHE_SIZE; i++)
	{
		if (fence_cache[i].trigger_oid == trigger_oid)
			return &fence_cache[i];
	}
	cache = &fence_cache[fence_cache_next];
	fence_cache_next = (fence_cache_next + 1) % FENCE_CACHE_SIZE;
	return cache;
}

/*
 * Find the fence column and the mode from the trigger's arguments, once per
 * trigger and row layout (and again after any relcache invalidation), and
 * keep them in the trigger's entry.
 */
FenceTriggerCache *
fencing_fence_resolve(FunctionCallInfo fcinfo, TriggerData *trigdata)
{
	Trigger    *trigger = trigdata->tg_trigger;
	Relation	rel = trigdata->tg_relation;
	TupleDesc	tupdesc = RelationGetDescr(rel);
	FenceStaleMode mode;
	const char *column = resolve_arguments(trigger, rel, &mode);
	AttrNumber	attnum = resolve_column(trigger, rel, column);
	FenceTriggerCache *cache = cache_entry_for(trigger->tgoid);

	cache->trigger_oid = trigger->tgoid;
	cache->relid = RelationGetRelid(rel);
	cache->tupdesc = tupdesc;
	cache->natts = tupdesc->natts;
	cache->fence_attnum = attnum;
	cache->mode = mode;
	fcinfo->flinfo->fn_extra = cache;
	return cache;
}
