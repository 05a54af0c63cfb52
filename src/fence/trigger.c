/*-------------------------------------------------------------------------
 *
 * trigger.c
 *		Stale-write rejection at the resource: the reject_stale row trigger,
 *		its rules for each operation, and the rows that move between
 *		partitions (protect.c installs and removes the trigger).
 *
 * A lease can expire while its holder is paused; when the holder wakes it
 * still believes it owns the lock.  The guide's answer is a fence: every
 * write carries the holder's token and the resource refuses a token lower
 * than the highest it has seen.  reject_stale() is that check as a BEFORE
 * ROW trigger, so it runs inside the database that holds the data, for
 * every statement, whichever client sent it (DESIGN.md F1-F8).
 *
 * Each row write has one writer's token W.  T is fencing.token, and it
 * counts only in the transaction that set it (F6):
 *
 *	with T		INSERT	NEW.fence NULL: stamp T; NEW.fence = T: fine; any other
 *						value is a second token: rejected.
 *				UPDATE	NEW.fence NULL, equal to OLD.fence (left alone or
 *						copied) or equal to T: stamp T; any other value is a
 *						second token: rejected.  T must not be below OLD.fence.
 *				DELETE	T must not be below OLD.fence.
 *	without T	INSERT	NEW.fence must not be NULL.
 *				UPDATE	the statement must assign the fence column a value not
 *						below OLD.fence (equal: the same holder writing again).
 *						Not in a MERGE: PostgreSQL tells a row trigger the
 *						union of the columns of all the MERGE's UPDATE actions,
 *						so an action that leaves the fence alone would look like
 *						one that assigns the row's own fence.
 *				DELETE	rejected, except the DELETE half of a row that such
 *						an UPDATE moves to another partition, when the move's
 *						own INSERT half lands in a partition fenced with the
 *						same column (the row stays fenced).
 *
 * Every W must be a token this cluster has issued, 1 <= W <= latest_token()
 * (F8), so that no write can lift a row's fence above every future holder.
 * A row whose fence is NULL has never been fenced and takes any valid W.
 * A write without a token, or with two, is rejected; a stale one raises
 * ERRCODE_FENCING_STALE_TOKEN or, in 'skip' mode, touches no row, as the
 * guide's "WHERE fence < $2" does.
 *
 * The per-row path reads two attributes, two backend-local variables and
 * the token counter (two atomic reads), and compares them: no catalog
 * access, no allocation unless T is stamped into the row.  The column
 * number and the mode are resolved the first time a trigger fires and
 * cached until the next relcache invalidation (resolve.c), and
 * fencing.token is parsed once when it is set, not per row
 * (token_setting.c).  The whole per-row path is in this file, so that each
 * rule is a function of its own at no cost per row.  Without T, an UPDATE also looks at
 * the running query's ModifyTable nodes (one or a few) for a MERGE, and a
 * row moving to another partition has the nodes' result relations
 * searched for the one that fired, in memory.
 *
 * Copyright (c) 2026, the fencing developers
 *
 * IDENTIFICATION
 *		src/fence/trigger.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/sysattr.h"
#include "access/xact.h"
#include "commands/trigger.h"
#include "executor/executor.h"
#include "executor/execdesc.h"
#include "nodes/bitmapset.h"
#include "nodes/execnodes.h"
#include "utils/builtins.h"
#include "utils/rel.h"

#include "fence/fence.h"

PG_FUNCTION_INFO_V1(fencing_reject_stale);

/*
 * A row that moves to another partition is deleted from its partition and
 * inserted through the partitioned table the UPDATE named, by the same
 * ModifyTable node (ExecCrossPartitionUpdate): the source partition's
 * DELETE triggers fire, then the destination's INSERT triggers.  With
 * fencing.token, both halves are checked on their own, as any DELETE and
 * INSERT, and the DELETE passes exactly when the UPDATE did.  Without it,
 * the DELETE half would be refused, so reject_stale() recognises it:
 *
 *	- fence_last_update is the last UPDATE without fencing.token that this
 *	  trigger let through, with the Trigger the trigger manager passed: it
 *	  belongs to the ResultRelInfo of one ModifyTable node, so no DELETE of
 *	  another node (another CTE, a function) matches it.  A DELETE that
 *	  matches, fired by a node that is an UPDATE (which deletes only to move
 *	  a row, once its BEFORE ROW UPDATE triggers have all let the row
 *	  through), is that move's DELETE half.
 *	- fence_moving_row is that move from then on: leaving the fence is a
 *	  DELETE, which needs fencing.token, unless the row lands in a partition
 *	  that fences it with the same column.  Only an INSERT by the same node
 *	  (its own result relations, or the partitions it routes to), fired
 *	  while that node still works on the moving row, claims the row: the
 *	  node resets its per-tuple memory before each row it fetches, and a
 *	  callback on that reset ends the claim, so another row the same UPDATE
 *	  moves into a fenced partition is never taken for the move's INSERT
 *	  half.  A move nobody claimed by the next move of the statement, or by
 *	  the end of the ExecutorRun or ExecutorFinish it ran in
 *	  (fencing_fence_run_end), went to an unfenced partition, and the
 *	  statement fails.
 *
 * A subtransaction that rolls back undoes what was done in it, but not the
 * command id: each is forgotten when the subtransaction it was recorded in
 * (or one around that) rolls back, and at the end of every transaction.
 * One that a trigger or function starts and rolls back while the row
 * moves (an exception block that caught an error) undoes neither the
 * UPDATE nor the move, and forgets neither.  The pointers are compared
 * only with the nodes of the query running at the same level in the same
 * transaction, never dereferenced.
 */
static struct
{
	LocalTransactionId lxid;
	CommandId	cid;
	int			depth;			/* fencing_statement_depth() of the UPDATE */
	SubTransactionId subid;		/* where it was let through */
	Trigger    *trigger;		/* NULL: none */
	ItemPointerData tid;
	int64		fence;			/* the fence the row was updated with */
} fence_last_update;

static struct
{
	bool		pending;
	LocalTransactionId lxid;
	int			depth;			/* fencing_statement_depth() of the UPDATE */
	SubTransactionId subid;		/* where the row left its partition */
	ModifyTableState *node;		/* the UPDATE that moves the row */
	Oid			relid;			/* the partition the row left */
	int64		fence;
	NameData	column;
	uint32		generation;		/* which move the reset callback is for */
	bool		row_done;		/* the node went on to another row */
} fence_moving_row;

static void fence_xact_callback(XactEvent event, void *arg);
static void fence_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
								   SubTransactionId parentSubid, void *arg);

/*
 * Define fencing.token (token_setting.c), and register the callbacks of the
 * trigger's cache (resolve.c) and of the moving rows below; called from
 * _PG_init.
 */
void
fencing_fence_init(void)
{
	fencing_token_setting_init();
	fencing_fence_cache_init();
	RegisterXactCallback(fence_xact_callback, NULL);
	RegisterSubXactCallback(fence_subxact_callback, NULL);
}

/*
 * Forget the last UPDATE let through: see fence_last_update.
 */
static void
fence_forget_last_update(void)
{
	fence_last_update.trigger = NULL;
	fence_last_update.lxid = InvalidLocalTransactionId;
	fence_moving_row.pending = false;
}

/*
 * Every end of a transaction (commit, abort, prepare) ends the window in
 * which the DELETE half of a partition move can follow its UPDATE, and the
 * move.
 */
static void
fence_xact_callback(XactEvent event, void *arg)
{
	fence_forget_last_update();
}

/*
 * A subtransaction that rolls back undoes the UPDATE it let through and
 * the move it began, but not the command id: forget them, so that a DELETE
 * of the same row in the same command is checked on its own.  Those
 * recorded before it began stand: subtransaction ids grow, so everything
 * recorded in mySubid or in one nested in it has an id at least mySubid.
 */
static void
fence_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
					   SubTransactionId parentSubid, void *arg)
{
	if (event != SUBXACT_EVENT_ABORT_SUB)
		return;
	if (fence_last_update.subid >= mySubid)
	{
		fence_last_update.trigger = NULL;
		fence_last_update.lxid = InvalidLocalTransactionId;
	}
	if (fence_moving_row.subid >= mySubid)
		fence_moving_row.pending = false;
}

/*
 * F5 protocol checks that depend only on how the trigger fired.  They are
 * bit tests, cheap enough to run for every row, so that no cached state can
 * ever hide a misuse.
 */
static void
fence_check_trigger_protocol(FunctionCallInfo fcinfo)
{
	TriggerData *trigdata;
	const char *tgname;
	const char *relname;

	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("fencing.reject_stale() was not called by the trigger manager"),
				 errhint("Install it with fencing.protect(table).")));

	trigdata = (TriggerData *) fcinfo->context;
	tgname = trigdata->tg_trigger->tgname;
	relname = RelationGetRelationName(trigdata->tg_relation);

	if (TRIGGER_FIRED_BY_TRUNCATE(trigdata->tg_event))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("trigger \"%s\" on table \"%s\": fencing.reject_stale() cannot be fired by TRUNCATE",
						tgname, relname),
				 errdetail("TRUNCATE has no rows to compare fences with."),
				 errhint("Use fencing.protect(table), which installs BEFORE INSERT OR UPDATE OR DELETE ... FOR EACH ROW.")));

	if (!TRIGGER_FIRED_FOR_ROW(trigdata->tg_event))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("trigger \"%s\" on table \"%s\": fencing.reject_stale() must be fired FOR EACH ROW",
						tgname, relname),
				 errhint("Use fencing.protect(table), which installs BEFORE INSERT OR UPDATE OR DELETE ... FOR EACH ROW.")));

	if (TRIGGER_FIRED_INSTEAD(trigdata->tg_event))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("trigger \"%s\" on \"%s\": fencing.reject_stale() cannot be an INSTEAD OF trigger",
						tgname, relname),
				 errdetail("Fences are checked on the table that stores the rows, not on a view."),
				 errhint("Protect the underlying table with fencing.protect(table).")));

	if (!TRIGGER_FIRED_BEFORE(trigdata->tg_event))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("trigger \"%s\" on table \"%s\": fencing.reject_stale() must be fired BEFORE the write",
						tgname, relname),
				 errdetail("An AFTER trigger runs once the row is written; it could not stamp the token, and skip mode could not skip."),
				 errhint("Use fencing.protect(table), which installs BEFORE INSERT OR UPDATE OR DELETE ... FOR EACH ROW.")));
}

/* The name of the fence column, for messages. */
static inline const char *
fence_column(Relation rel, AttrNumber attnum)
{
	return NameStr(TupleDescAttr(RelationGetDescr(rel), attnum - 1)->attname);
}

/*
 * F8: the writer's token must be one this cluster has issued.  The counter
 * only grows, so one pair of atomic reads per row settles it.
 */
static inline void
fence_check_issued(Relation rel, AttrNumber attnum, int64 token)
{
	int64		latest = 0;

	if (likely(token >= 1))
	{
		latest = fencing_read_latest_token();
		if (likely(token <= latest))
			return;
	}
	fencing_fence_report_not_issued(rel, fence_column(rel, attnum), token,
									latest);
}

/*
 * The row with the writer's token in the fence column (allocates: only
 * when the statement did not already put it there).
 */
static HeapTuple
fence_stamp(HeapTuple tuple, TupleDesc tupdesc, AttrNumber attnum, int64 token)
{
	int			col = attnum;
	Datum		value = Int64GetDatum(token);
	bool		isnull = false;

	return heap_modify_tuple_by_cols(tuple, tupdesc, 1, &col, &value, &isnull);
}

/*
 * Whether an UPDATE that fired trigger is an action of a MERGE, whose
 * tg_updatedcols is the union over all its UPDATE actions.  Costs a
 * comparison unless the running query has a MERGE (the statement itself,
 * or a writable CTE); then the node that fired is looked up, and not
 * finding it counts as a MERGE.  A statement run by a function that a
 * MERGE calls is not part of the MERGE.
 */
static bool
fence_fired_by_merge(Trigger *trigger)
{
	QueryDesc  *query = fencing_running_query();
	ModifyTableState *node;
	bool		merges = false;
	int			n;

	if (query == NULL || query->estate == NULL)
		return false;
	for (n = 0; (node = fencing_fence_query_node(query, n)) != NULL; n++)
		merges |= node->operation == CMD_MERGE;
	if (!merges)
		return false;
	node = fencing_fence_firing_node(trigger);
	return node == NULL || node->operation == CMD_MERGE;
}

/*
 * F3/F7: the moving row was not claimed by a fenced partition: it left the
 * fence as by a DELETE, which needs fencing.token (reports.c says so).
 */
static void
fence_refuse_unclaimed_move(void)
{
	fence_moving_row.pending = false;
	fencing_fence_report_unclaimed_move(fence_moving_row.relid,
										NameStr(fence_moving_row.column));
}

/*
 * The end of a statement's ExecutorRun or ExecutorFinish
 * (the module layer's hooks): a row this statement moved out of a protected
 * partition must have landed under a fence.  A statement nested inside
 * the move (run by another trigger) leaves it be.
 */
void
fencing_fence_run_end(void)
{
	if (unlikely(fence_moving_row.pending) &&
		fence_moving_row.depth == fencing_statement_depth())
		fence_refuse_unclaimed_move();
}

/*
 * The moving UPDATE's node reset its per-tuple memory to fetch its next
 * row: from now on no INSERT is the INSERT half of the move this callback
 * was registered for.
 */
static void
fence_moving_row_done(void *arg)
{
	if (fence_moving_row.generation == (uint32) (uintptr_t) arg)
		fence_moving_row.row_done = true;
}

/*
 * Be told when node goes on to its next row (see fence_moving_row_done).
 * The callback lives in the memory it watches, which is reset with it.
 */
static void
fence_watch_moving_row(ModifyTableState *node)
{
	MemoryContext cxt = GetPerTupleMemoryContext(node->ps.state);
	MemoryContextCallback *cb;

	cb = MemoryContextAlloc(cxt, sizeof(MemoryContextCallback));
	cb->func = fence_moving_row_done;
	cb->arg = (void *) (uintptr_t) fence_moving_row.generation;
	MemoryContextRegisterResetCallback(cxt, cb);
}

/*
 * A DELETE without fencing.token fires this trigger on a partition: when
 * it is the DELETE half of a row that the last UPDATE let through is
 * moving (same transaction, command, level and result relation, same row,
 * and the node that fired it is an UPDATE), the row becomes the moving row,
 * and true is returned.
 */
static bool
fence_start_move(TriggerData *trigdata, const char *column)
{
	ModifyTableState *node;

	if (fence_last_update.trigger != trigdata->tg_trigger ||
		fence_last_update.lxid != FENCING_MY_LXID ||
		fence_last_update.cid != GetCurrentCommandId(false) ||
		fence_last_update.depth != fencing_statement_depth() ||
		!ItemPointerEquals(&fence_last_update.tid, &trigdata->tg_trigtuple->t_self))
		return false;
	node = fencing_fence_firing_node(trigdata->tg_trigger);
	if (node == NULL || node->operation != CMD_UPDATE)
		return false;

	/* the previous move was not claimed (or, nested, not yet: refuse) */
	if (fence_moving_row.pending)
		fence_refuse_unclaimed_move();
	fence_moving_row.pending = true;
	fence_moving_row.lxid = FENCING_MY_LXID;
	fence_moving_row.depth = fencing_statement_depth();
	fence_moving_row.subid = GetCurrentSubTransactionId();
	fence_moving_row.node = node;
	fence_moving_row.relid = RelationGetRelid(trigdata->tg_relation);
	fence_moving_row.fence = fence_last_update.fence;
	namestrcpy(&fence_moving_row.column, column);
	fence_moving_row.generation++;
	fence_moving_row.row_done = false;
	fence_watch_moving_row(node);
	fence_last_update.trigger = NULL;
	return true;
}

/*
 * An INSERT fires this trigger while a row is moving out of a protected
 * partition: when it is the INSERT half of that move (same transaction and
 * level, fired by the moving UPDATE's own node before it went on to
 * another row, with the fence the UPDATE gave the row, into a fence column
 * of the same name, as partitions map columns by name), the row stays
 * fenced and the move is settled.
 */
static void
fence_claim_moving_row(Trigger *trigger, bool isnull, Datum value,
					   const char *column)
{
	if (fence_moving_row.lxid == FENCING_MY_LXID &&
		!fence_moving_row.row_done &&
		fence_moving_row.depth == fencing_statement_depth() &&
		!isnull && DatumGetInt64(value) == fence_moving_row.fence &&
		strcmp(NameStr(fence_moving_row.column), column) == 0 &&
		fencing_fence_firing_node(trigger) == fence_moving_row.node)
		fence_moving_row.pending = false;
}

/*
 * Remember an UPDATE without fencing.token that this trigger let through,
 * so that the DELETE half of a partition move can be recognised (see
 * fence_last_update); with fencing.token, a move's DELETE half is checked
 * on its own.
 */
static inline void
fence_note_update(TriggerData *trigdata, bool has_token, int64 writer)
{
	fence_last_update.trigger = has_token ? NULL : trigdata->tg_trigger;
	fence_last_update.lxid = FENCING_MY_LXID;
	fence_last_update.cid = GetCurrentCommandId(false);
	fence_last_update.depth = fencing_statement_depth();
	fence_last_update.subid = GetCurrentSubTransactionId();
	fence_last_update.tid = trigdata->tg_trigtuple->t_self;
	fence_last_update.fence = writer;
}

/*
 * A stale write (a token below the row's fence): counted, then skipped in
 * 'skip' mode (NULL: the row is not written), else an error.
 */
static Datum
fence_stale(Relation rel, const FenceTriggerCache *cache, int64 writer,
			int64 old_fence)
{
	fencing_stat_add(FENCING_STAT_STALE_REJECTED, 1);
	if (cache->mode == FENCE_STALE_SKIP)
		return PointerGetDatum(NULL);
	fencing_fence_report_stale(rel, fence_column(rel, cache->fence_attnum),
							   writer, old_fence);
}

/*
 * The row's own fence, from its old version; a row whose fence is NULL was
 * never fenced, and any token may write it (PG_INT64_MIN).
 */
static inline int64
fence_old_fence(TriggerData *trigdata, const FenceTriggerCache *cache,
				bool *old_isnull)
{
	Datum		value = heap_getattr(trigdata->tg_trigtuple, cache->fence_attnum,
									 RelationGetDescr(trigdata->tg_relation),
									 old_isnull);

	return *old_isnull ? PG_INT64_MIN : DatumGetInt64(value);
}

/*
 * INSERT: with fencing.token, the new row's fence is NULL (the token is
 * stamped in) or the token itself; without it, the new row carries its
 * writer's token.  Either way the token must have been issued.
 */
static Datum
fence_on_insert(TriggerData *trigdata, const FenceTriggerCache *cache)
{
	Relation	rel = trigdata->tg_relation;
	TupleDesc	tupdesc = RelationGetDescr(rel);
	AttrNumber	attnum = cache->fence_attnum;
	HeapTuple	newtuple = trigdata->tg_trigtuple;
	bool		isnull;
	Datum		value = heap_getattr(newtuple, attnum, tupdesc, &isnull);
	int64		writer;

	if (unlikely(fence_moving_row.pending))
		fence_claim_moving_row(trigdata->tg_trigger, isnull, value,
							   fence_column(rel, attnum));
	if (fencing_token_counts())
	{
		if (!isnull && DatumGetInt64(value) != fencing_token_setting.value)
			fencing_fence_report_two_tokens(rel, fence_column(rel, attnum),
											DatumGetInt64(value));
		writer = fencing_token_setting.value;
	}
	else
	{
		if (isnull)
			fencing_fence_report_missing(rel, fence_column(rel, attnum),
										 FENCE_MISSING_WRITE, cache->mode);
		writer = DatumGetInt64(value);
	}
	fence_check_issued(rel, attnum, writer);

	if (isnull)
		return PointerGetDatum(fence_stamp(newtuple, tupdesc, attnum, writer));
	return PointerGetDatum(newtuple);
}

/*
 * The writer's token of an UPDATE whose new fence is value (isnull).  With
 * fencing.token, the fence column may hold NULL, the row's own fence (left
 * alone or copied back) or the token itself, anything else is a second
 * token; *stamp says whether the token must be written into the row.
 * Without it, the statement must assign the fence column a value, and not
 * in a MERGE (whose row triggers cannot tell which action fired).
 */
static int64
fence_update_writer(TriggerData *trigdata, const FenceTriggerCache *cache,
					Datum value, bool isnull, bool old_isnull,
					int64 old_fence, bool *stamp)
{
	Relation	rel = trigdata->tg_relation;
	AttrNumber	attnum = cache->fence_attnum;

	*stamp = false;
	if (fencing_token_counts())
	{
		int64		token = fencing_token_setting.value;

		if (!isnull && DatumGetInt64(value) != token &&
			(old_isnull || DatumGetInt64(value) != old_fence))
			fencing_fence_report_two_tokens(rel, fence_column(rel, attnum),
											DatumGetInt64(value));
		*stamp = isnull || DatumGetInt64(value) != token;
		return token;
	}
	if (fence_fired_by_merge(trigdata->tg_trigger))
		fencing_fence_report_missing(rel, fence_column(rel, attnum),
									 FENCE_MISSING_MERGE, cache->mode);
	if (!bms_is_member(attnum - FirstLowInvalidHeapAttributeNumber,
					   trigdata->tg_updatedcols))
		fencing_fence_report_missing(rel, fence_column(rel, attnum),
									 FENCE_MISSING_WRITE, cache->mode);
	if (isnull)
		fencing_fence_report_missing(rel, fence_column(rel, attnum),
									 FENCE_MISSING_NULL, cache->mode);
	return DatumGetInt64(value);
}

/*
 * UPDATE: the writer's token (fence_update_writer) must have been issued
 * and must not be below the row's fence.  One that passes without
 * fencing.token is remembered: its row may be moving to another partition.
 */
static Datum
fence_on_update(TriggerData *trigdata, const FenceTriggerCache *cache)
{
	Relation	rel = trigdata->tg_relation;
	TupleDesc	tupdesc = RelationGetDescr(rel);
	AttrNumber	attnum = cache->fence_attnum;
	HeapTuple	newtuple = trigdata->tg_newtuple;
	bool		old_isnull;
	int64		old_fence = fence_old_fence(trigdata, cache, &old_isnull);
	bool		isnull;
	Datum		value = heap_getattr(newtuple, attnum, tupdesc, &isnull);
	bool		has_token = fencing_token_counts();
	bool		stamp;
	int64		writer;

	writer = fence_update_writer(trigdata, cache, value, isnull, old_isnull,
								 old_fence, &stamp);
	fence_check_issued(rel, attnum, writer);

	if (writer < old_fence)
		return fence_stale(rel, cache, writer, old_fence);

	fence_note_update(trigdata, has_token, writer);
	if (stamp)
		return PointerGetDatum(fence_stamp(newtuple, tupdesc, attnum, writer));
	return PointerGetDatum(newtuple);
}

/*
 * DELETE: only with fencing.token, which must have been issued and must
 * not be below the row's fence; without it, only the DELETE half of a row
 * that an UPDATE let through is moving to another partition
 * (fence_moving_row).
 */
static Datum
fence_on_delete(TriggerData *trigdata, const FenceTriggerCache *cache)
{
	Relation	rel = trigdata->tg_relation;
	AttrNumber	attnum = cache->fence_attnum;
	HeapTuple	oldtuple = trigdata->tg_trigtuple;
	bool		old_isnull;
	int64		old_fence = fence_old_fence(trigdata, cache, &old_isnull);
	bool		has_token = fencing_token_counts();
	int64		writer;

	if (!has_token && rel->rd_rel->relispartition &&
		fence_start_move(trigdata, fence_column(rel, attnum)))
		return PointerGetDatum(oldtuple);

	if (!has_token)
		fencing_fence_report_missing(rel, fence_column(rel, attnum),
									 FENCE_MISSING_DELETE, cache->mode);
	writer = fencing_token_setting.value;
	fence_check_issued(rel, attnum, writer);
	if (writer < old_fence)
		return fence_stale(rel, cache, writer, old_fence);
	return PointerGetDatum(oldtuple);
}

/*
 * The trigger itself (BEFORE INSERT OR UPDATE OR DELETE, FOR EACH ROW;
 * arguments: fence column, mode).  Returns the row to write, the row with
 * fencing.token stamped into the fence column, or NULL to skip a stale
 * write in 'skip' mode.  The rules are in the file header, one function
 * per operation.
 */
Datum
fencing_reject_stale(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata;
	FenceTriggerCache *cache;

	fence_check_trigger_protocol(fcinfo);

	trigdata = (TriggerData *) fcinfo->context;
	cache = fencing_fence_cached(fcinfo, trigdata);

	if (TRIGGER_FIRED_BY_INSERT(trigdata->tg_event))
		return fence_on_insert(trigdata, cache);
	if (TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event))
		return fence_on_update(trigdata, cache);
	Assert(TRIGGER_FIRED_BY_DELETE(trigdata->tg_event));
	return fence_on_delete(trigdata, cache);
}
