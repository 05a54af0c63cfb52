/*-------------------------------------------------------------------------
 *
 * views.c
 *		What a DBA reads of every layer: fencing.status() and the rows of
 *		the view fencing.locks.
 *
 * status() sums up the token layer (the counter, the durable limit, the
 * clock floor, the state file) and the lock registry; fencing.locks shows
 * the registry's slots and the lock-delays in force.  Both read the lower
 * layers through what each of them exports, and change nothing.
 *
 * Copyright (c) 2026, the fencing developers
 *
 * IDENTIFICATION
 *		src/module/views.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_type.h"
#include "commands/dbcommands.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "module/module.h"

PG_FUNCTION_INFO_V1(fencing_status);
PG_FUNCTION_INFO_V1(fencing_lock_rows);

/*
 * SQL: fencing.status(), a one-row summary for a DBA: where the counter is,
 * how far the durable reservation reaches, what the clock floor is now and
 * how far tokens are ahead of it (more than the lead bound only after a
 * clock stepped back or advance_token far ahead), the clock tolerance,
 * whether the next reservation makes a fresh start, whether redo could not
 * write the state file, and how full the lock tracking table is.
 */
Datum
fencing_status(PG_FUNCTION_ARGS)
{
	TupleDesc	tupdesc;
	Datum		values[11];
	bool		nulls[11] = {0};
	FencingTokenWalStatus wal;
	int64		latest = fencing_read_latest_token();
	Interval   *tolerance;

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");

	fencing_token_wal_status(&wal);
	tolerance = (Interval *) palloc0(sizeof(Interval));
	tolerance->time = (TimeOffset) wal.clock_tolerance_ms * INT64CONST(1000);

	values[0] = Int64GetDatum(latest);
	values[1] = Int64GetDatum(fencing_read_reserved_limit());
	values[2] = Int64GetDatum(wal.clock_floor);
	values[3] = Int32GetDatum(fencing_lock_registry_count());
	values[4] = Int32GetDatum(fencing_lock_registry_capacity());
	values[5] = Int64GetDatum(fencing_lock_registry_untracked());
	values[6] = CStringGetTextDatum(fencing_state_file_path());
	values[7] = Int64GetDatum(latest > wal.clock_floor ? latest - wal.clock_floor : 0);
	values[8] = IntervalPGetDatum(tolerance);
	values[9] = BoolGetDatum(wal.fresh_start_pending);
	values[10] = BoolGetDatum(wal.state_file_behind);

	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}

/*
 * The view's "mode" of a slot: exclusive, shared, or "permit n of m".
 */
static text *
slot_mode_text(const FencingLockSlotData *copy)
{
	switch ((FencingLockMode) copy->mode)
	{
		case FENCING_LOCK_SHARED:
			return cstring_to_text("shared");
		case FENCING_LOCK_PERMIT:
			if (copy->permit == 0)	/* waiting, or trying */
				return cstring_to_text(psprintf("permit ? of %d",
												(int) copy->permits));
			return cstring_to_text(psprintf("permit %d of %d",
											(int) copy->permit,
											(int) copy->permits));
		case FENCING_LOCK_LEASE:
			return cstring_to_text("lease");
		case FENCING_LOCK_EXCLUSIVE:
			break;
	}
	return cstring_to_text("exclusive");
}

/*
 * One row of fencing.lock_rows().  delayed_until is 0 for a slot's row;
 * a delay's row is not granted, names the lost holder's pid and mode, and
 * says since when and until when the lock is delayed.
 */
#define LOCK_ROWS_MAX_COLUMNS	9

typedef struct LockViewRows
{
	ReturnSetInfo *rsinfo;
	bool		has_mode;
	bool		has_delayed_until;
	bool		sees_all;		/* the caller has pg_read_all_stats */
	Oid			cached_dboid;
	char	   *cached_dbname;
} LockViewRows;

/*
 * Whether the caller may see which name a row is about and which backend
 * holds it: as pg_stat_activity shows a session's query, to members of
 * pg_read_all_stats and to roles with the privileges of the holder's role.
 * The lost holder of a delay is not recorded, so only the former see a
 * delay's name.  Everyone else sees that a lock is held, and where, how and
 * since when, but neither its name nor its key (a hash of the name that
 * would let a caller test guesses) nor its pid.
 */
static bool
row_is_visible(const LockViewRows *state, const FencingLockSlotData *copy,
			   TimestampTz delayed_until)
{
	if (state->sees_all)
		return true;
	if (delayed_until != 0)
		return false;
	return has_privs_of_role(GetUserId(), copy->roleid);
}

static void
lock_row_put(LockViewRows *state, const FencingLockSlotData *copy,
			 TimestampTz delayed_until)
{
	Datum		values[LOCK_ROWS_MAX_COLUMNS];
	bool		nulls[LOCK_ROWS_MAX_COLUMNS];
	bool		granted = (copy->state == LOCK_SLOT_GRANTED);
	bool		visible = row_is_visible(state, copy, delayed_until);
	bool		lease = (copy->mode == FENCING_LOCK_LEASE);

	memset(values, 0, sizeof(values));
	memset(nulls, true, sizeof(nulls));

	if (copy->dboid != state->cached_dboid)
	{
		state->cached_dboid = copy->dboid;
		state->cached_dbname = get_database_name(copy->dboid);
	}
	if (state->cached_dbname != NULL)
	{
		Name		dbname = (Name) palloc0(NAMEDATALEN);

		namestrcpy(dbname, state->cached_dbname);
		values[0] = NameGetDatum(dbname);
		nulls[0] = false;
	}

	if (visible)
	{
		values[1] = PointerGetDatum(cstring_to_text_with_len(copy->name,
															 copy->namelen));
		nulls[1] = false;
		values[2] = Int64GetDatum(copy->key);
		nulls[2] = false;
		/* a lease has no backend */
		if (!lease)
		{
			values[4] = Int32GetDatum(copy->pid);
			nulls[4] = false;
		}
	}
	/* a lease's token renews and releases it: only for those who see it */
	if (granted && (visible || !lease))
	{
		values[3] = Int64GetDatum(copy->token);
		nulls[3] = false;
	}
	values[5] = TimestampTzGetDatum(copy->since);
	nulls[5] = false;
	values[6] = BoolGetDatum(granted);
	nulls[6] = false;
	/* values[7] is 1.1's "mode", or 1.0's "untracked", which stays NULL */
	if (state->has_mode)
	{
		values[7] = PointerGetDatum(slot_mode_text(copy));
		nulls[7] = false;
	}
	if (state->has_delayed_until && delayed_until != 0)
	{
		values[8] = TimestampTzGetDatum(delayed_until);
		nulls[8] = false;
	}

	tuplestore_putvalues(state->rsinfo->setResult, state->rsinfo->setDesc,
						 values, nulls);
}

/* One row per registry slot in use (fencing_lock_registry_rows). */
static void
slot_row_put(const FencingLockSlotData *copy, void *arg)
{
	lock_row_put((LockViewRows *) arg, copy, 0);
}

/*
 * The rows of the leases that outlive a transaction (locks/leases.c): mode
 * "lease", no pid, granted while held, else under the lock-delay the
 * lapse or break started.  Seen as the locks are (row_is_visible), with
 * the role that acquired the lease as the holder's.
 */
static void
lease_rows_put(LockViewRows *state)
{
	FencingLeaseRow *leases;
	int			nleases;
	int			i;

	leases = fencing_lease_snapshot(&nleases);
	for (i = 0; i < nleases; i++)
	{
		FencingLockSlotData copy;

		memset(&copy, 0, sizeof(copy));
		copy.mode = FENCING_LOCK_LEASE;
		copy.dboid = leases[i].dboid;
		if (leases[i].delayed_until == 0)
		{
			copy.state = LOCK_SLOT_GRANTED;
			copy.since = leases[i].acquired_at;
		}
		else
		{
			copy.state = LOCK_SLOT_FREE;
			copy.since = leases[i].expires_at;
		}
		copy.roleid = leases[i].roleid;
		copy.namelen = leases[i].namelen;
		memcpy(copy.name, leases[i].name, copy.namelen);
		copy.key = leases[i].key;
		copy.token = leases[i].token;
		lock_row_put(state, &copy, leases[i].delayed_until);
	}
}

/*
 * One row per lock-delay in force: not granted, with the lost holder's pid
 * and mode, since when and until when the lock is delayed.
 */
static void
delay_rows_put(LockViewRows *state)
{
	FencingLockDelay *delayed;
	int			ndelayed;
	int			i;

	delayed = fencing_lock_delay_snapshot(&ndelayed);
	for (i = 0; i < ndelayed; i++)
	{
		FencingLockSlotData copy;

		memset(&copy, 0, sizeof(copy));
		copy.state = LOCK_SLOT_FREE;
		copy.namelen = delayed[i].namelen;
		copy.mode = delayed[i].mode;
		copy.permit = delayed[i].permit;
		copy.permits = delayed[i].permits;
		copy.dboid = delayed[i].dboid;
		copy.pid = delayed[i].pid;
		copy.key = delayed[i].key;
		copy.since = delayed[i].since;
		memcpy(copy.name, delayed[i].name, copy.namelen);
		lock_row_put(state, &copy, delayed[i].until);
	}
}

/*
 * SQL: fencing.lock_rows(), the set behind the view fencing.locks: one row
 * per slot in use, then one per lease, then one per lock delay in force.
 * A database still at version 1.0 of the extension declares an eighth
 * column, "untracked" (boolean); it is NULL now that every lock has a
 * slot, and such a database sees no delays nor leases (it has no column to
 * say until when).  Since 1.1 the eighth column is "mode" (text) and the
 * ninth "delayed_until".  The name, key and pid of a row the caller may not
 * see are NULL (row_is_visible), and so is a lease's token.
 */
Datum
fencing_lock_rows(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	LockViewRows state;

	InitMaterializedSRF(fcinfo, 0);
	if (rsinfo->setDesc->natts > LOCK_ROWS_MAX_COLUMNS)
		elog(ERROR, "fencing.lock_rows() is declared with %d columns, expected at most %d",
			 rsinfo->setDesc->natts, LOCK_ROWS_MAX_COLUMNS);
	state.rsinfo = rsinfo;
	state.has_mode = rsinfo->setDesc->natts > 7 &&
		TupleDescAttr(rsinfo->setDesc, 7)->atttypid == TEXTOID;
	state.has_delayed_until = rsinfo->setDesc->natts > 8;
	state.sees_all = has_privs_of_role(GetUserId(), ROLE_PG_READ_ALL_STATS);
	state.cached_dboid = InvalidOid;
	state.cached_dbname = NULL;

	fencing_lock_registry_rows(slot_row_put, &state);

	if (!state.has_delayed_until)
		return (Datum) 0;
	lease_rows_put(&state);
	delay_rows_put(&state);
	return (Datum) 0;
}
