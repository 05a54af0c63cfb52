/*-------------------------------------------------------------------------
 *
 * noop_trigger.c
 *		bench_noop_trigger(): a C row trigger that does nothing but hand
 *		the row back, the floor of any BEFORE ROW trigger; and
 *		bench_stamp_trigger(), which puts 1000 into the column "fence" of
 *		a row that has none, the floor of a row trigger that fills in a
 *		column.
 *
 * bench/run.sh builds it into its scratch directory and creates the
 * functions from there, so that a protected INSERT can be compared with
 * the same INSERT through a trigger that costs only what the executor pays
 * to call one (the row materialised as a heap tuple, the function manager
 * call), and with one that also pays for a new row (as fencing does when
 * it stamps fencing.token into a row).  Not part of the extension.
 *
 * Copyright (c) 2026, the fencing developers
 *
 * IDENTIFICATION
 *		bench/noop_trigger.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "commands/trigger.h"
#include "executor/spi.h"
#include "fmgr.h"

PG_MODULE_MAGIC;

PG_FUNCTION_INFO_V1(bench_noop_trigger);
PG_FUNCTION_INFO_V1(bench_stamp_trigger);

/*
 * The row the write would store, unchanged: the new row of an UPDATE, the
 * row of an INSERT or DELETE.
 */
Datum
bench_noop_trigger(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;

	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("bench_noop_trigger() was not called by the trigger manager")));
	if (TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event))
		return PointerGetDatum(trigdata->tg_newtuple);
	return PointerGetDatum(trigdata->tg_trigtuple);
}

/*
 * An INSERT's row with 1000 in its column "fence" when that is NULL, made
 * the way fencing.reject_stale() makes it (heap_modify_tuple_by_cols); any
 * other row unchanged.
 */
Datum
bench_stamp_trigger(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	TupleDesc	tupdesc;
	int			attnum;
	bool		isnull;
	Datum		value = Int64GetDatum(1000);

	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("bench_stamp_trigger() was not called by the trigger manager")));
	if (!TRIGGER_FIRED_BY_INSERT(trigdata->tg_event))
		return bench_noop_trigger(fcinfo);
	tupdesc = RelationGetDescr(trigdata->tg_relation);
	attnum = SPI_fnumber(tupdesc, "fence");
	if (attnum <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_COLUMN),
				 errmsg("bench_stamp_trigger(): table \"%s\" has no column \"fence\"",
						RelationGetRelationName(trigdata->tg_relation))));
	(void) heap_getattr(trigdata->tg_trigtuple, attnum, tupdesc, &isnull);
	if (!isnull)
		return PointerGetDatum(trigdata->tg_trigtuple);
	isnull = false;
	return PointerGetDatum(heap_modify_tuple_by_cols(trigdata->tg_trigtuple, tupdesc,
													 1, &attnum, &value, &isnull));
}
