/*-------------------------------------------------------------------------
 *
 * accept_all_trigger.c
 *		A deliberately broken fencing.reject_stale(), for the chaos test's
 *		proof that its checker can fail (CHAOS_BREAK=accept-all).
 *
 * This file is never part of the extension.  test/chaos/run.sh copies the
 * tree, drops this file into the copy's src/, and builds the copy with
 * -Dfencing_reject_stale=fencing_reject_stale_replaced, which renames the
 * real trigger function out of the way; the build goes into the run's
 * private server tree only (the system's fencing.so is not touched).
 *
 * It behaves like the real trigger in everything but refusing: it stamps
 * fencing.token into rows whose statement does not assign the fence column,
 * and lets every write through, however stale its token.
 *
 * Copyright (c) 2026, the fencing developers
 *
 * IDENTIFICATION
 *		test/chaos/accept_all_trigger.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <stdlib.h>

#include "access/htup_details.h"
#include "access/sysattr.h"
#include "commands/trigger.h"
#include "fmgr.h"
#include "nodes/bitmapset.h"
#include "utils/guc.h"
#include "utils/rel.h"

/* the -D that renamed the real function must not rename this one */
#undef fencing_reject_stale

PG_FUNCTION_INFO_V1(fencing_reject_stale);

/*
 * The fence column's number, by the name the trigger was created with.
 */
static AttrNumber
accept_all_fence_column(TriggerData *trigdata)
{
	TupleDesc	tupdesc = RelationGetDescr(trigdata->tg_relation);
	const char *column = "fence";
	int			i;

	if (trigdata->tg_trigger->tgnargs >= 1)
		column = trigdata->tg_trigger->tgargs[0];
	for (i = 0; i < tupdesc->natts; i++)
	{
		Form_pg_attribute attr = TupleDescAttr(tupdesc, i);

		if (!attr->attisdropped && strcmp(NameStr(attr->attname), column) == 0)
			return attr->attnum;
	}
	elog(ERROR, "accept-all trigger: no column \"%s\"", column);
	return InvalidAttrNumber;
}

/*
 * Return the row to write: stamped with fencing.token where the real
 * trigger would stamp it, never refused.
 */
Datum
fencing_reject_stale(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	TupleDesc	tupdesc;
	AttrNumber	attnum;
	HeapTuple	tuple;
	const char *setting;
	bool		stamp = false;
	bool		isnull;
	Datum		value;
	int			col;

	if (!CALLED_AS_TRIGGER(fcinfo))
		elog(ERROR, "accept-all trigger: not called as a trigger");
	if (TRIGGER_FIRED_BY_DELETE(trigdata->tg_event))
		return PointerGetDatum(trigdata->tg_trigtuple);

	tupdesc = RelationGetDescr(trigdata->tg_relation);
	attnum = accept_all_fence_column(trigdata);
	if (TRIGGER_FIRED_BY_INSERT(trigdata->tg_event))
	{
		tuple = trigdata->tg_trigtuple;
		(void) heap_getattr(tuple, attnum, tupdesc, &isnull);
		stamp = isnull;
	}
	else
	{
		tuple = trigdata->tg_newtuple;
		stamp = !bms_is_member(attnum - FirstLowInvalidHeapAttributeNumber,
							   trigdata->tg_updatedcols);
	}

	setting = GetConfigOption("fencing.token", true, false);
	if (!stamp || setting == NULL || setting[0] == '\0')
		return PointerGetDatum(tuple);

	col = attnum;
	value = Int64GetDatum(strtoll(setting, NULL, 10));
	isnull = false;
	return PointerGetDatum(heap_modify_tuple_by_cols(tuple, tupdesc, 1, &col,
													 &value, &isnull));
}
