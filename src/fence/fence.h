/*-------------------------------------------------------------------------
 *
 * fence.h
 *		The fence layer: stale writes rejected where the data lives.
 *
 * Above the lock layer (a fence checks tokens that locks hand out), below
 * the module layer, whose hooks call down into ddl.c and trigger.c.
 * Lowest first:
 *
 *	catalog.c		what a fence is in the catalogs: a table's fence
 *					triggers, its fence column, names for messages
 *	view_defaults.c	view defaults that would stand in for a writer's token
 *	protect.c		fencing.protect() and unprotect(), and the descendants
 *					that follow a protected table's fence
 *	ddl.c			DDL that would open a protected table to unfenced
 *					writes, seen by the module layer's hooks
 *	token_setting.c	the fencing.token setting, fencing.set_token() and
 *					fencing.token_in_force()
 *	stamp.c			INSERTs that leave the fence column out get
 *					token_in_force() there, so the trigger stamps nothing
 *	reports.c		the trigger's errors
 *	resolve.c		the trigger's per-trigger cache: column and mode
 *	nodes.c			which ModifyTable node of the running query fired
 *	trigger.c		the trigger reject_stale() and its rules per operation
 *	check_fence.c	fences for resources that are not one row
 *	use_lease.c		use_lease(): a lease's renewal, its resource fence
 *					and its fencing.token in one call
 *
 * The trigger's per-row path runs in trigger.c alone: what it needs from
 * token_setting.c and resolve.c is inline below.
 *
 * Copyright (c) 2026, the fencing developers
 *
 * IDENTIFICATION
 *		src/fence/fence.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef FENCING_FENCE_H
#define FENCING_FENCE_H

#include "locks/locks.h"

#include "catalog/objectaccess.h"
#include "catalog/pg_attribute.h"
#include "commands/trigger.h"
#include "executor/execdesc.h"
#include "nodes/execnodes.h"
#include "nodes/pg_list.h"
#include "nodes/plannodes.h"
#include "utils/relcache.h"

/* ---------------------------------------------------------------------
 * catalog.c
 * ---------------------------------------------------------------------
 */

/* The name protect() gives the trigger, so re-running it replaces it. */
#define FENCE_TRIGGER_NAME	"fencing_reject_stale"
/* the trigger's arguments when none are given, and protect()'s for a new table */
#define FENCE_DEFAULT_COLUMN	"fence"
#define FENCE_DEFAULT_MODE		"error"

/*
 * A row trigger that executes fencing.reject_stale(), as pg_trigger stores
 * it: protect() installs one named FENCE_TRIGGER_NAME, partitions carry
 * PostgreSQL's clone of their parent's, and a DBA may have written others.
 */
typedef struct FenceTrigger
{
	Oid			oid;
	char	   *name;
	int16		type;			/* pg_trigger.tgtype */
	char		enabled;		/* pg_trigger.tgenabled */
	bool		is_clone;		/* a partition's copy of its parent's trigger */
	char	   *column;			/* argument 1, default "fence" */
	char	   *mode;			/* argument 2, default "error" */
} FenceTrigger;

extern char *fencing_qualified_relname(Relation rel);
extern char *fencing_qualified_relid_name(Oid relid);
extern void fencing_refuse_filled_fence_column(Relation rel, Form_pg_attribute attr,
											   const char *who);
extern Oid	fencing_function(const char *name);
extern Oid	fencing_reject_stale_function(void);
extern List *fencing_fence_triggers(Oid relid);
extern FenceTrigger *fencing_protect_trigger(Oid relid);
extern bool fencing_trigger_fires_here(const FenceTrigger *trigger);
extern bool fencing_tgenabled_fires_here(char enabled);

/* ---------------------------------------------------------------------
 * view_defaults.c
 * ---------------------------------------------------------------------
 */
extern void fencing_refuse_view_default(Oid viewid, AttrNumber attnum,
										const char *what);
extern void fencing_refuse_view_defaults_in(PlannedStmt *plan);
extern void fencing_refuse_view_defaults_over(Oid relid);

/* ---------------------------------------------------------------------
 * protect.c
 * ---------------------------------------------------------------------
 */
extern void fencing_validate_fence_column(Relation rel, const char *column,
										  const char *caller);
extern void fencing_follow_new_children(Oid parentid);
extern void fencing_warn_other_row_triggers(Oid relid, const char *caller);

/* ---------------------------------------------------------------------
 * ddl.c
 * ---------------------------------------------------------------------
 */
extern void fencing_fence_utility_before(PlannedStmt *pstmt);
extern void fencing_fence_utility_after(PlannedStmt *pstmt);
extern void fencing_fence_object_access(ObjectAccessType access, Oid classId,
										Oid objectId, int subId, void *arg);
extern void fencing_fence_check_plan(PlannedStmt *plan);

/* ---------------------------------------------------------------------
 * token_setting.c
 * ---------------------------------------------------------------------
 */

/*
 * fencing.token as the check hook parsed it, with the local transaction id
 * of the transaction that set it: the value counts only while that
 * transaction runs (F6).  GUC keeps one with each value (the check hook's
 * "extra"), so a value that ROLLBACK TO or the end of a SET LOCAL brings
 * back comes with the transaction id of its own SET; the assign hook
 * copies the one in force into fencing_token_setting, so that rows need no
 * parsing.
 */
typedef struct FenceTokenSetting
{
	bool		is_set;
	int64		value;
	LocalTransactionId lxid;
} FenceTokenSetting;

extern FenceTokenSetting fencing_token_setting;

extern void fencing_token_setting_init(void);
extern PGDLLEXPORT Datum fencing_set_token(PG_FUNCTION_ARGS);
extern PGDLLEXPORT Datum fencing_token_in_force(PG_FUNCTION_ARGS);

/*
 * F6: fencing.token is the writer's token only in the transaction that set
 * it.  A value left from an earlier transaction (a session-level SET, one
 * that ROLLBACK TO brought back, another client's behind a pooler) does not
 * count.  Local transaction ids are never 0 inside a transaction.
 */
static inline bool
fencing_token_counts(void)
{
	return fencing_token_setting.is_set &&
		fencing_token_setting.lxid == FENCING_MY_LXID;
}

/* ---------------------------------------------------------------------
 * stamp.c
 * ---------------------------------------------------------------------
 */

extern void fencing_fence_add_token_column(Query *query);

/* ---------------------------------------------------------------------
 * reports.c
 * ---------------------------------------------------------------------
 */

/* What a stale write does: fail the statement, or silently touch no row. */
typedef enum FenceStaleMode
{
	FENCE_STALE_ERROR,
	FENCE_STALE_SKIP
} FenceStaleMode;

/* Why a write carries no token, for the message. */
typedef enum FenceMissingKind
{
	FENCE_MISSING_WRITE,		/* INSERT or UPDATE gives no fence */
	FENCE_MISSING_NULL,			/* UPDATE sets the fence to NULL */
	FENCE_MISSING_DELETE,		/* DELETE without fencing.token */
	FENCE_MISSING_MERGE			/* UPDATE action of a MERGE without it */
} FenceMissingKind;

FENCING_NORETURN extern void fencing_fence_report_missing(Relation rel,
														  const char *column,
														  FenceMissingKind kind,
														  FenceStaleMode mode);
FENCING_NORETURN extern void fencing_fence_report_two_tokens(Relation rel,
															 const char *column,
															 int64 given);
FENCING_NORETURN extern void fencing_fence_report_not_issued(Relation rel,
															 const char *column,
															 int64 token,
															 int64 latest);
FENCING_NORETURN extern void fencing_fence_report_stale(Relation rel,
														const char *column,
														int64 stale,
														int64 current);
FENCING_NORETURN extern void fencing_fence_report_unclaimed_move(Oid relid,
																 const char *column);

/* ---------------------------------------------------------------------
 * resolve.c
 * ---------------------------------------------------------------------
 */

/* The most partitioned ancestors an entry lists; deeper trees forget theirs at every invalidation. */
#define FENCE_CACHE_ANCESTORS	8

/*
 * Per-trigger state: the fence column's number and the mode, resolved once
 * per trigger and row layout (resolve.c says where the entries live and
 * when they are forgotten).  The trigger's fn_extra points at its entry,
 * and the entry's key (trigger, relation, descriptor) is checked on every
 * call.
 */
typedef struct FenceTriggerCache
{
	Oid			key;			/* the trigger's OID: the hash key */
	Oid			trigger_oid;	/* the same; InvalidOid once forgotten */
	Oid			relid;
	TupleDesc	tupdesc;
	int			natts;
	AttrNumber	fence_attnum;
	FenceStaleMode mode;
	int			nancestors;		/* -1: more than FENCE_CACHE_ANCESTORS */
	Oid			ancestors[FENCE_CACHE_ANCESTORS];	/* partitioned, above relid */
} FenceTriggerCache;

extern void fencing_fence_cache_init(void);
extern FenceTriggerCache *fencing_fence_resolve(FunctionCallInfo fcinfo,
												TriggerData *trigdata);

/* Whether the entry was resolved for this trigger, relation and layout. */
static inline bool
fencing_fence_cache_matches(const FenceTriggerCache *cache,
							TriggerData *trigdata)
{
	Relation	rel = trigdata->tg_relation;
	TupleDesc	tupdesc = RelationGetDescr(rel);

	return cache->trigger_oid == trigdata->tg_trigger->tgoid &&
		cache->relid == RelationGetRelid(rel) &&
		cache->tupdesc == tupdesc &&
		cache->natts == tupdesc->natts;
}

/*
 * The trigger's entry: the one fn_extra points at when its key still
 * matches (every row after the first), else the table's (resolve.c).
 */
static inline FenceTriggerCache *
fencing_fence_cached(FunctionCallInfo fcinfo, TriggerData *trigdata)
{
	FenceTriggerCache *cache = (FenceTriggerCache *) fcinfo->flinfo->fn_extra;

	if (likely(cache != NULL && fencing_fence_cache_matches(cache, trigdata)))
		return cache;
	return fencing_fence_resolve(fcinfo, trigdata);
}

/* ---------------------------------------------------------------------
 * nodes.c
 * ---------------------------------------------------------------------
 */
extern ModifyTableState *fencing_fence_query_node(QueryDesc *query, int n);
extern ModifyTableState *fencing_fence_firing_node(Trigger *trigger);

/* ---------------------------------------------------------------------
 * trigger.c
 * ---------------------------------------------------------------------
 */
extern void fencing_fence_init(void);
extern void fencing_fence_run_end(void);

/* ---------------------------------------------------------------------
 * check_fence.c
 * ---------------------------------------------------------------------
 */
extern void fencing_raise_resource_fence(text *resource, int64 token);

#endif							/* FENCING_FENCE_H */
