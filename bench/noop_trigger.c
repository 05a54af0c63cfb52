/*-------------------------------------------------------------------------
 *
 * noop_trigger.c
 *		bench_noop_trigger(): a C row trigger that does nothing but hand
 *		the row back, the floor of any BEFORE ROW trigger.
 *
 * bench/run.sh builds it into its scratch directory and creates the
 * function from there, so that a protected INSERT can be compared with the
 * same INSERT through a trigger that costs only what the executor pays to
 * call one (the row materialised as a heap tuple, the function manager
 * call).  Not part of the extension.
 *
 * Copyright (c) 2026, the fencing developers
 *
 * IDENTIFICATION
 *		bench/noop_trigger.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "commands/trigger.h"
#include "fmgr.h"

PG_MODULE_MAGIC;

PG_FUNCTION_INFO_V1(bench_noop_trigger);

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
