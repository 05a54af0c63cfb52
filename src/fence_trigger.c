/*-------------------------------------------------------------------------
 *
 * fence_trigger.c
 *		Stale-write rejection at the resource: the reject_stale row trigger
 *		and the fencing.token setting it falls back on (fence_protect.c
 *		installs and removes the trigger).
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
 * cached until the next relcache invalidation, and fencing.token is parsed
 * once when it is set, not per row.  Without T, an UPDATE also looks at
 * the running query's ModifyTable nodes (one or a few) for a MERGE, and a
 * row moving to another partition has the nodes' result relations
 * searched for the one that fired, in memory.
 *
 * Copyright (c) 2026, the fencing developers
 *
 * IDENTIFICATION
 *		src/fence_trigger.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>

#include "access/htup_details.h"
#include "access/sysattr.h"
#include "access/xact.h"
#include "catalog/partition.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "executor/execdesc.h"
#include "miscadmin.h"
#include "nodes/bitmapset.h"
#include "nodes/execnodes.h"
#include "storage/proc.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/syscache.h"

#include "compat.h"
#include "fencing.h"

PG_FUNCTION_INFO_V1(fencing_reject_stale);

/* fencing.token: the raw string the GUC machinery owns ... */
static char *fence_token_string = NULL;

/*
 * ... its parsed value, set by the assign hook so rows need no parsing, and
 * the local transaction id of the transaction that set it: the value counts
 * only while that transaction runs (F6).
 */
static bool fence_token_is_set = false;
static int64 fence_token_value = 0;
static LocalTransactionId fence_token_lxid = InvalidLocalTransactionId;

/*
 * What the check hook hands to the assign hook (GUC frees it, so it comes
 * from fencing_guc_extra_alloc, see compat.h).
 * GUC keeps it with the value, so a value that ROLLBACK TO or the end of a
 * SET LOCAL brings back comes with the transaction id of its own SET.
 */
typedef struct FenceTokenSetting
{
	bool		is_set;
	int64		value;
	LocalTransactionId lxid;
} FenceTokenSetting;

/* What a stale write does: fail the statement, or silently touch no row. */
typedef enum FenceStaleMode
{
	FENCE_STALE_ERROR,
	FENCE_STALE_SKIP
} FenceStaleMode;

/*
 * Per-trigger state: the fence column's number and the mode, resolved once.
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
 */
typedef struct FenceTriggerCache
{
	Oid			trigger_oid;	/* InvalidOid: free */
	Oid			relid;
	TupleDesc	tupdesc;
	int			natts;
	AttrNumber	fence_attnum;
	FenceStaleMode mode;
} FenceTriggerCache;

#define FENCE_CACHE_SIZE	64

static FenceTriggerCache fence_cache[FENCE_CACHE_SIZE];
static int	fence_cache_next = 0;

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
 *	  (its own result relations, or the partitions it routes to) claims the
 *	  row.  A move nobody claimed by the next move of the statement, or by
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
} fence_moving_row;

/* Why a write carries no token, for the message. */
typedef enum FenceMissingKind
{
	FENCE_MISSING_WRITE,		/* INSERT or UPDATE gives no fence */
	FENCE_MISSING_NULL,			/* UPDATE sets the fence to NULL */
	FENCE_MISSING_DELETE,		/* DELETE without fencing.token */
	FENCE_MISSING_MERGE			/* UPDATE action of a MERGE without it */
} FenceMissingKind;

static bool fence_token_check_hook(char **newval, void **extra, GucSource source);
static void fence_token_assign_hook(const char *newval, void *extra);
static FenceTriggerCache *fence_trigger_resolve(FunctionCallInfo fcinfo,
												TriggerData *trigdata);
static void fence_check_trigger_protocol(FunctionCallInfo fcinfo);
static void fence_report_missing(Relation rel, const char *column,
								 FenceMissingKind kind, FenceStaleMode mode);
static void fence_report_two_tokens(Relation rel, const char *column,
									int64 given);
static void fence_report_not_issued(Relation rel, const char *column,
									int64 token, int64 latest);
static void fence_report_stale(Relation rel, const char *column,
							   int64 stale, int64 current);
static void fence_cache_invalidate(Datum arg, Oid relid);
static void fence_xact_callback(XactEvent event, void *arg);
static void fence_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
								   SubTransactionId parentSubid, void *arg);

/*
 * Define fencing.token; called from _PG_init.  The setting is meant for SET
 * LOCAL, and any role may set it: it only tells the trigger which token
 * the caller claims, and a claim is checked against the row like any other.
 * It counts only in the transaction that set it, and the check hook
 * refuses every source but SET itself (F6): a token from postgresql.conf,
 * a role, a database, a function or a connection would stand in for the
 * token of writes that carry none, and turn F2 off.
 */
void
fencing_fence_init(void)
{
	DefineCustomStringVariable("fencing.token",
							   "Fence token that reject_stale() uses for writes that do not assign the fence column.",
							   "Counts only in the transaction that set it. Empty means unset: such writes, "
							   "and every DELETE on a protected table, are rejected. "
							   "Use SET LOCAL in the transaction that writes.",
							   &fence_token_string,
							   "",
							   PGC_USERSET,
							   GUC_NOT_IN_SAMPLE | GUC_DISALLOW_IN_FILE,
							   fence_token_check_hook,
							   fence_token_assign_hook,
							   NULL);

	CacheRegisterRelcacheCallback(fence_cache_invalidate, (Datum) 0);
	RegisterXactCallback(fence_xact_callback, NULL);
	RegisterSubXactCallback(fence_subxact_callback, NULL);
}

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
 * Where a refused fencing.token came from, for the check hook's message.
 */
static const char *
fence_token_source_name(GucSource source)
{
	switch (source)
	{
		case PGC_S_FILE:
			return "the configuration file";
		case PGC_S_ARGV:
			return "the server's command line";
		case PGC_S_ENV_VAR:
			return "the server's environment";
		case PGC_S_GLOBAL:
		case PGC_S_DATABASE:
		case PGC_S_USER:
		case PGC_S_DATABASE_USER:
			return "ALTER ROLE or ALTER DATABASE ... SET";
		case PGC_S_CLIENT:
			return "the connection's options";
		case PGC_S_TEST:
			return "ALTER ROLE, ALTER DATABASE or a function's SET clause";
		default:
			return "a setting that outlives the transaction";
	}
}

/*
 * Accept an empty string (unset) or a non-negative bigint, and hand the
 * parsed value to the assign hook, so that a bad value fails at SET time
 * with a clear message rather than at some later row.  A token is taken
 * only from SET, set_config() and their like (PGC_S_SESSION), and remembers
 * the transaction that set it; from any other source it is refused (an
 * error for ALTER ROLE/DATABASE/FUNCTION ... SET and connection options; a
 * WARNING or LOG line, and the value ignored, for stored settings and
 * postgresql.conf).  Unsetting is allowed from everywhere.
 */
static bool
fence_token_check_hook(char **newval, void **extra, GucSource source)
{
	FenceTokenSetting *setting;
	const char *str = *newval;
	int64		value = 0;
	bool		is_set = false;

	if (str != NULL)
	{
		while (isspace((unsigned char) *str))
			str++;
	}

	if (str != NULL && *str != '\0')
	{
		char	   *end;

		errno = 0;
		value = strtoi64(str, &end, 10);
		while (isspace((unsigned char) *end))
			end++;

		if (end == str || *end != '\0' || !isdigit((unsigned char) *str))
		{
			GUC_check_errcode(ERRCODE_INVALID_PARAMETER_VALUE);
			GUC_check_errdetail("fencing.token must be a non-negative integer (a fence token from fencing.next_token() or a lock function), or empty to unset it.");
			return false;
		}
		if (errno == ERANGE)
		{
			GUC_check_errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE);
			GUC_check_errdetail("fencing.token must fit in a bigint.");
			return false;
		}
		is_set = true;
	}

#ifdef FENCING_MUTANT_TOKEN_FROM_ANY_SOURCE
	if (false)
#else
	if (is_set && source != PGC_S_SESSION)
#endif
	{
		GUC_check_errcode(ERRCODE_CANT_CHANGE_RUNTIME_PARAM);
		GUC_check_errmsg("fencing.token can only be set in the transaction that writes");
		GUC_check_errdetail("A value from %s would outlive that transaction and stand in for the token of later writes.",
							fence_token_source_name(source));
		GUC_check_errhint("Run SET LOCAL fencing.token = <token of the lock you hold> in the transaction that writes.");
		return false;
	}

	setting = (FenceTokenSetting *) fencing_guc_extra_alloc(sizeof(FenceTokenSetting));
	if (setting == NULL)
	{
		GUC_check_errcode(ERRCODE_OUT_OF_MEMORY);
		return false;
	}
	setting->is_set = is_set;
	setting->value = value;
	/* the postmaster defines the setting before it has a PGPROC */
	setting->lxid = MyProc != NULL ? FENCING_MY_LXID : InvalidLocalTransactionId;
	*extra = setting;
	return true;
}

/*
 * Keep the parsed token in plain variables: the trigger reads statics per
 * row instead of parsing a string.
 */
static void
fence_token_assign_hook(const char *newval, void *extra)
{
	FenceTokenSetting *setting = (FenceTokenSetting *) extra;

	if (setting == NULL)
	{
		fence_token_is_set = false;
		fence_token_value = 0;
		fence_token_lxid = InvalidLocalTransactionId;
		return;
	}
	fence_token_is_set = setting->is_set;
	fence_token_value = setting->value;
	fence_token_lxid = setting->lxid;
}

/*
 * F6: fencing.token is the writer's token only in the transaction that set
 * it.  A value left from an earlier transaction (a session-level SET, one
 * that ROLLBACK TO brought back, another client's behind a pooler) does not
 * count.  Local transaction ids are never 0 inside a transaction.
 */
static inline bool
fence_token_counts(void)
{
#ifdef FENCING_MUTANT_SESSION_TOKEN_COUNTS
	return fence_token_is_set;
#else
	return fence_token_is_set && fence_token_lxid == FENCING_MY_LXID;
#endif
}

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
 * F2: a write that claims no token cannot be ordered against the row's
 * fence, so it is refused with the same SQLSTATE as a stale one: the
 * caller has a bug or lost its lock, and retrying will not help.  When
 * fencing.token holds a value from an earlier transaction, say so: that
 * caller relied on a session-level SET (F6).
 */
static void
fence_report_missing(Relation rel, const char *column, FenceMissingKind kind,
					 FenceStaleMode mode)
{
	/*
	 * In 'skip' mode a caller may expect every unwanted write to be skipped;
	 * only stale ones are (a write without a token cannot be ordered), so
	 * the detail says so.
	 */
	const char *skip_note = mode == FENCE_STALE_SKIP ?
		" The table skips stale writes (on_stale 'skip'); a write without a token is an error in every mode." : "";

	ereport(ERROR,
			(errcode(ERRCODE_FENCING_STALE_TOKEN),
			 errmsg("missing fence token for %s on table %s",
					kind == FENCE_MISSING_DELETE ? "DELETE" : "write",
					fencing_qualified_relname(rel)),
			 fence_token_is_set ?
			 errdetail("fencing.token was set in an earlier transaction; it counts only in the transaction that set it.%s",
					   skip_note) :
			 kind == FENCE_MISSING_DELETE ?
			 errdetail("A DELETE on a fenced table is checked against fencing.token, which is not set.%s",
					   skip_note) :
			 kind == FENCE_MISSING_MERGE ?
			 errdetail("A MERGE on a protected table needs SET LOCAL fencing.token: PostgreSQL gives a row trigger the union of the columns of all the MERGE's UPDATE actions, so the trigger cannot tell which action fired.%s",
					   skip_note) :
			 kind == FENCE_MISSING_NULL ?
			 errdetail("The statement sets fence column \"%s\" to NULL and fencing.token is not set.%s",
					   column, skip_note) :
			 errdetail("The statement gives no value for fence column \"%s\" and fencing.token is not set.%s",
					   column, skip_note),
			 fence_token_is_set ?
			 errhint("Run SET LOCAL fencing.token = <token of the lock you hold> in the transaction that writes.") :
			 kind == FENCE_MISSING_DELETE ?
			 errhint("Run SET LOCAL fencing.token = <token of the lock you hold> in the transaction that deletes.") :
			 kind == FENCE_MISSING_MERGE ?
			 errhint("Run SET LOCAL fencing.token = <token of the lock you hold> before the MERGE.") :
			 errhint("Run SET LOCAL fencing.token = <token of the lock you hold>, or assign the token to column \"%s\".",
					 column),
			 errtable(rel)));
}

/*
 * A write whose fence column holds another value than fencing.token claims
 * two tokens, and only one of them could be checked against the row: refuse
 * it rather than guess which one the writer holds.
 */
static void
fence_report_two_tokens(Relation rel, const char *column, int64 given)
{
	ereport(ERROR,
			(errcode(ERRCODE_FENCING_STALE_TOKEN),
			 errmsg("two fence tokens for one write on table %s",
					fencing_qualified_relname(rel)),
			 errdetail("fencing.token is " INT64_FORMAT " but the statement sets fence column \"%s\" to " INT64_FORMAT "; a write carries one token.",
					   fence_token_value, column, given),
			 errhint("Leave column \"%s\" out of the statement (the trigger stamps fencing.token into it), or set it to the same token.",
					 column),
			 errtable(rel)));
}

/*
 * F8: a fence above every token issued so far (or below the first) was not
 * handed out by a lock; written into a row it would make the row
 * unwritable for every later holder.  Same SQLSTATE and wording as
 * check_fence() uses for the resource fence.
 */
static void
fence_report_not_issued(Relation rel, const char *column, int64 token, int64 latest)
{
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("fence token " INT64_FORMAT " for table %s has not been issued",
					token, fencing_qualified_relname(rel)),
			 token < 1 ?
			 errdetail("Fence tokens start at 1.") :
			 errdetail("The highest token issued so far is " INT64_FORMAT ".", latest),
			 errhint("Write the token your lock call returned into column \"%s\"; an invented token would lock every later holder out of the row.",
					 column),
			 errtable(rel)));
}

/*
 * F1/F4: a holder whose token is below the row's fence has been superseded
 * (its lease ended and someone else wrote since).  Name the table and both
 * tokens, and say plainly that the job must stop: the SQLSTATE is not in a
 * class that frameworks retry.
 */
static void
fence_report_stale(Relation rel, const char *column, int64 stale, int64 current)
{
	ereport(ERROR,
#ifdef FENCING_MUTANT_STALE_SQLSTATE_P0001
			(errcode(ERRCODE_RAISE_EXCEPTION),
#else
			(errcode(ERRCODE_FENCING_STALE_TOKEN),
#endif
			 errmsg("stale fence token " INT64_FORMAT " for table %s",
					stale, fencing_qualified_relname(rel)),
			 errdetail("The row's fence column \"%s\" is already " INT64_FORMAT ", above the writer's token " INT64_FORMAT ".",
					   column, current, stale),
			 errhint("A newer holder exists; stop this job, do not retry."),
			 errtable(rel)));
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

#ifdef FENCING_MUTANT_AFTER_TRIGGER_ALLOWED
	if (false)
#else
	if (!TRIGGER_FIRED_BEFORE(trigdata->tg_event))
#endif
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("trigger \"%s\" on table \"%s\": fencing.reject_stale() must be fired BEFORE the write",
						tgname, relname),
				 errdetail("An AFTER trigger runs once the row is written; it could not stamp the token, and skip mode could not skip."),
				 errhint("Use fencing.protect(table), which installs BEFORE INSERT OR UPDATE OR DELETE ... FOR EACH ROW.")));
}

/*
 * Find the fence column and the mode from the trigger's arguments, once per
 * trigger and row layout (and again after any relcache invalidation).  This
 * walks the relation's own descriptor, so a partition resolves the column
 * in its own order; for a partition it also reads its ancestors' columns
 * (fencing_refuse_filled_fence_column).
 */
static FenceTriggerCache *
fence_trigger_resolve(FunctionCallInfo fcinfo, TriggerData *trigdata)
{
	FenceTriggerCache *cache = (FenceTriggerCache *) fcinfo->flinfo->fn_extra;
	Trigger    *trigger = trigdata->tg_trigger;
	Relation	rel = trigdata->tg_relation;
	TupleDesc	tupdesc = RelationGetDescr(rel);
	Oid			relid = RelationGetRelid(rel);
	const char *column = FENCE_DEFAULT_COLUMN;
	FenceStaleMode mode = FENCE_STALE_ERROR;
	AttrNumber	attnum = InvalidAttrNumber;
	Form_pg_attribute attr;
	int			i;

	if (likely(cache != NULL &&
			   cache->trigger_oid == trigger->tgoid &&
			   cache->relid == relid &&
			   cache->tupdesc == tupdesc &&
			   cache->natts == tupdesc->natts))
		return cache;

	if (trigger->tgnargs > 2)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("trigger \"%s\" on table \"%s\": fencing.reject_stale() takes at most 2 arguments, got %d",
						trigger->tgname, RelationGetRelationName(rel),
						trigger->tgnargs),
				 errhint("Arguments are the fence column (default 'fence') and the mode, 'error' or 'skip'.")));
	if (trigger->tgnargs >= 1)
		column = trigger->tgargs[0];
	if (trigger->tgnargs >= 2)
	{
		const char *modearg = trigger->tgargs[1];

		if (strcmp(modearg, "error") == 0)
			mode = FENCE_STALE_ERROR;
		else if (strcmp(modearg, "skip") == 0)
			mode = FENCE_STALE_SKIP;
		else
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("trigger \"%s\" on table \"%s\": invalid mode \"%s\" for fencing.reject_stale()",
							trigger->tgname, RelationGetRelationName(rel),
							modearg),
					 errhint("The mode is 'error' (stale writes fail) or 'skip' (stale writes touch no row).")));
	}

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

	/* reuse this trigger's entry if it has one, else take the next in turn */
	cache = NULL;
	for (i = 0; i < FENCE_CACHE_SIZE; i++)
	{
		if (fence_cache[i].trigger_oid == trigger->tgoid)
		{
			cache = &fence_cache[i];
			break;
		}
	}
	if (cache == NULL)
	{
		cache = &fence_cache[fence_cache_next];
		fence_cache_next = (fence_cache_next + 1) % FENCE_CACHE_SIZE;
	}
	cache->trigger_oid = trigger->tgoid;
	cache->relid = relid;
	cache->tupdesc = tupdesc;
	cache->natts = tupdesc->natts;
	cache->fence_attnum = attnum;
	cache->mode = mode;
	fcinfo->flinfo->fn_extra = cache;
	return cache;
}

/*
 * F8: the writer's token must be one this cluster has issued.  The counter
 * only grows, so one pair of atomic reads per row settles it.
 */
static inline void
fence_check_issued(Relation rel, AttrNumber attnum, int64 token)
{
	int64		latest = 0;

#ifdef FENCING_MUTANT_UNISSUED_FENCE_ALLOWED
	return;
#endif
	if (likely(token >= 1))
	{
		latest = fencing_read_latest_token();
		if (likely(token <= latest))
			return;
	}
	fence_report_not_issued(rel, NameStr(TupleDescAttr(RelationGetDescr(rel), attnum - 1)->attname),
							token, latest);
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
 * Whether the trigger manager fired trigger for result relation rri: it
 * passes a pointer into the ResultRelInfo's own copy of the relation's
 * triggers.
 */
static bool
fence_fired_for(ResultRelInfo *rri, Trigger *trigger)
{
	TriggerDesc *trigdesc = rri->ri_TrigDesc;
	int			i;

	for (i = 0; trigdesc != NULL && i < trigdesc->numtriggers; i++)
	{
		if (&trigdesc->triggers[i] == trigger)
			return true;
	}
	return false;
}

/*
 * Whether trigger was fired for one of node's own result relations.
 */
static bool
fence_fired_by_node(ModifyTableState *node, Trigger *trigger)
{
	int			i;

	for (i = 0; i < node->mt_nrels; i++)
	{
		if (fence_fired_for(&node->resultRelInfo[i], trigger))
			return true;
	}
	return false;
}

/*
 * The n-th ModifyTable node of query, or NULL past the last: its main node
 * (a query with writable CTEs may have none) and those of its writable
 * CTEs.
 */
static ModifyTableState *
fence_query_node(QueryDesc *query, int n)
{
	List	   *ctes = query->estate->es_auxmodifytables;

	if (query->planstate != NULL && IsA(query->planstate, ModifyTableState))
	{
		if (n == 0)
			return (ModifyTableState *) query->planstate;
		n--;
	}
	return n < list_length(ctes) ? (ModifyTableState *) list_nth(ctes, n) : NULL;
}

/*
 * The ModifyTable node of the running query that fired trigger, or NULL
 * when none did (a utility statement's trigger, such as COPY's).  A node
 * writes its own result relations, and the partitions it routes rows to,
 * whose ResultRelInfo names the node's root one.  Not for every row: it
 * walks the query's result relations.
 */
static ModifyTableState *
fence_firing_node(Trigger *trigger)
{
	QueryDesc  *query = fencing_running_query();
	ModifyTableState *node;
	ListCell   *lc;
	int			n;

	if (query == NULL || query->estate == NULL)
		return NULL;
	for (n = 0; (node = fence_query_node(query, n)) != NULL; n++)
	{
		if (fence_fired_by_node(node, trigger))
			return node;
	}
	foreach(lc, query->estate->es_tuple_routing_result_relations)
	{
		ResultRelInfo *rri = (ResultRelInfo *) lfirst(lc);

		if (!fence_fired_for(rri, trigger))
			continue;
		for (n = 0; (node = fence_query_node(query, n)) != NULL; n++)
		{
			if (rri->ri_RootResultRelInfo == node->rootResultRelInfo)
				return node;
		}
	}
	return NULL;
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
	for (n = 0; (node = fence_query_node(query, n)) != NULL; n++)
		merges |= node->operation == CMD_MERGE;
	if (!merges)
		return false;
	node = fence_firing_node(trigger);
	return node == NULL || node->operation == CMD_MERGE;
}

/*
 * F3/F7: a row left a protected partition, by an UPDATE without
 * fencing.token, for a partition whose trigger did not claim it: the row
 * left the fence as by a DELETE, which needs fencing.token.  Missing-token
 * errors are raised in skip mode too.
 */
static void
fence_report_unclaimed_move(void)
{
	Oid			relid = fence_moving_row.relid;

	fence_moving_row.pending = false;
	ereport(ERROR,
			(errcode(ERRCODE_FENCING_STALE_TOKEN),
			 errmsg("missing fence token for a row moved out of table %s",
					fencing_qualified_relid_name(relid)),
			 errdetail("The UPDATE moved a row to a partition that is not protected with fence column \"%s\"; a row leaving the fence is checked as a DELETE, against fencing.token, which is not set.",
					   NameStr(fence_moving_row.column)),
			 errhint("Run SET LOCAL fencing.token = <token of the lock you hold> in the transaction that moves the row, or protect the partitioned table above both partitions.")));
}

/*
 * The end of a statement's ExecutorRun or ExecutorFinish
 * (statement_hooks.c): a row this statement moved out of a protected
 * partition must have landed under a fence.  A statement nested inside
 * the move (run by another trigger) leaves it be.
 */
void
fencing_fence_run_end(void)
{
	if (unlikely(fence_moving_row.pending) &&
		fence_moving_row.depth == fencing_statement_depth())
		fence_report_unclaimed_move();
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
	node = fence_firing_node(trigdata->tg_trigger);
	if (node == NULL || node->operation != CMD_UPDATE)
		return false;

	/* the previous move was not claimed (or, nested, not yet: refuse) */
	if (fence_moving_row.pending)
		fence_report_unclaimed_move();
	fence_moving_row.pending = true;
	fence_moving_row.lxid = FENCING_MY_LXID;
	fence_moving_row.depth = fencing_statement_depth();
	fence_moving_row.subid = GetCurrentSubTransactionId();
	fence_moving_row.node = node;
	fence_moving_row.relid = RelationGetRelid(trigdata->tg_relation);
	fence_moving_row.fence = fence_last_update.fence;
	namestrcpy(&fence_moving_row.column, column);
	fence_last_update.trigger = NULL;
	return true;
}

/*
 * An INSERT fires this trigger while a row is moving out of a protected
 * partition: when it is the INSERT half of that move (same transaction and
 * level, fired by the moving UPDATE's own node, with the fence the UPDATE
 * gave the row, into a fence column of the same name, as partitions map
 * columns by name), the row stays fenced and the move is settled.
 */
static void
fence_claim_moving_row(Trigger *trigger, bool isnull, Datum value,
					   const char *column)
{
	if (fence_moving_row.lxid == FENCING_MY_LXID &&
		fence_moving_row.depth == fencing_statement_depth() &&
		!isnull && DatumGetInt64(value) == fence_moving_row.fence &&
		strcmp(NameStr(fence_moving_row.column), column) == 0 &&
		fence_firing_node(trigger) == fence_moving_row.node)
		fence_moving_row.pending = false;
}

/*
 * The trigger itself (BEFORE INSERT OR UPDATE OR DELETE, FOR EACH ROW;
 * arguments: fence column, mode).  Returns the row to write, the row with
 * fencing.token stamped into the fence column, or NULL to skip a stale
 * write in 'skip' mode.  The rules are in the file header.
 */
Datum
fencing_reject_stale(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata;
	FenceTriggerCache *cache;
	Relation	rel;
	TupleDesc	tupdesc;
	AttrNumber	attnum;
	TriggerEvent event;
	HeapTuple	oldtuple;
	Datum		value;
	bool		isnull;
	bool		old_isnull;
	bool		has_token;
	int64		old_fence;
	int64		writer;

	fence_check_trigger_protocol(fcinfo);

	trigdata = (TriggerData *) fcinfo->context;
	cache = fence_trigger_resolve(fcinfo, trigdata);
	rel = trigdata->tg_relation;
	tupdesc = RelationGetDescr(rel);
	attnum = cache->fence_attnum;
	event = trigdata->tg_event;
	has_token = fence_token_counts();

#define FENCE_COLUMN_NAME	NameStr(TupleDescAttr(tupdesc, attnum - 1)->attname)

	if (TRIGGER_FIRED_BY_INSERT(event))
	{
		HeapTuple	newtuple = trigdata->tg_trigtuple;

		value = heap_getattr(newtuple, attnum, tupdesc, &isnull);
		if (unlikely(fence_moving_row.pending))
			fence_claim_moving_row(trigdata->tg_trigger, isnull, value,
								   FENCE_COLUMN_NAME);
		if (has_token)
		{
			if (!isnull && DatumGetInt64(value) != fence_token_value)
				fence_report_two_tokens(rel, FENCE_COLUMN_NAME, DatumGetInt64(value));
			writer = fence_token_value;
		}
		else
		{
			if (isnull)
#ifdef FENCING_MUTANT_MISSING_TOKEN_ALLOWED
				return PointerGetDatum(newtuple);
#else
				fence_report_missing(rel, FENCE_COLUMN_NAME, FENCE_MISSING_WRITE,
									 cache->mode);
#endif
			writer = DatumGetInt64(value);
		}
		fence_check_issued(rel, attnum, writer);

		if (isnull)
			return PointerGetDatum(fence_stamp(newtuple, tupdesc, attnum, writer));
		return PointerGetDatum(newtuple);
	}

	oldtuple = trigdata->tg_trigtuple;
	value = heap_getattr(oldtuple, attnum, tupdesc, &old_isnull);
	/* a row whose fence is NULL was never fenced: any token may write it */
	old_fence = old_isnull ? PG_INT64_MIN : DatumGetInt64(value);

	if (TRIGGER_FIRED_BY_UPDATE(event))
	{
		HeapTuple	newtuple = trigdata->tg_newtuple;
		bool		stamp = false;

		value = heap_getattr(newtuple, attnum, tupdesc, &isnull);
		if (has_token)
		{
			/*
			 * The fence column may hold NULL, the row's own fence (left alone
			 * or copied back) or T itself; anything else is a second token.
			 */
			if (!isnull &&
				DatumGetInt64(value) != fence_token_value &&
				(old_isnull || DatumGetInt64(value) != old_fence))
				fence_report_two_tokens(rel, FENCE_COLUMN_NAME, DatumGetInt64(value));
			writer = fence_token_value;
			stamp = isnull || DatumGetInt64(value) != writer;
		}
		else
		{
			if (fence_fired_by_merge(trigdata->tg_trigger))
				fence_report_missing(rel, FENCE_COLUMN_NAME, FENCE_MISSING_MERGE,
									 cache->mode);
			if (!bms_is_member(attnum - FirstLowInvalidHeapAttributeNumber,
							   trigdata->tg_updatedcols))
				fence_report_missing(rel, FENCE_COLUMN_NAME, FENCE_MISSING_WRITE,
									 cache->mode);
			if (isnull)
				fence_report_missing(rel, FENCE_COLUMN_NAME, FENCE_MISSING_NULL,
									 cache->mode);
			writer = DatumGetInt64(value);
		}
		fence_check_issued(rel, attnum, writer);

#if defined(FENCING_MUTANT_TRIGGER_REJECTS_EQUAL)
		if (writer <= old_fence)
#elif defined(FENCING_MUTANT_TRIGGER_ALLOWS_STALE_UPDATE)
		if (false)
#else
		if (writer < old_fence)
#endif
		{
			fencing_stat_add(FENCING_STAT_STALE_REJECTED, 1);
			if (cache->mode == FENCE_STALE_SKIP)
				return PointerGetDatum(NULL);
			fence_report_stale(rel, FENCE_COLUMN_NAME, writer, old_fence);
		}

		/* with fencing.token, a move's DELETE half is checked on its own */
		fence_last_update.trigger = has_token ? NULL : trigdata->tg_trigger;
		fence_last_update.lxid = FENCING_MY_LXID;
		fence_last_update.cid = GetCurrentCommandId(false);
		fence_last_update.depth = fencing_statement_depth();
		fence_last_update.subid = GetCurrentSubTransactionId();
		fence_last_update.tid = oldtuple->t_self;
		fence_last_update.fence = writer;

		if (stamp)
			return PointerGetDatum(fence_stamp(newtuple, tupdesc, attnum, writer));
		return PointerGetDatum(newtuple);
	}

	/* DELETE */
	Assert(TRIGGER_FIRED_BY_DELETE(event));
#ifdef FENCING_MUTANT_DELETE_UNCHECKED
	return PointerGetDatum(oldtuple);
#endif

	/* without fencing.token, only a move's DELETE half: fence_moving_row */
	if (!has_token && rel->rd_rel->relispartition &&
		fence_start_move(trigdata, FENCE_COLUMN_NAME))
		return PointerGetDatum(oldtuple);

	if (!has_token)
		fence_report_missing(rel, FENCE_COLUMN_NAME, FENCE_MISSING_DELETE,
							 cache->mode);
	writer = fence_token_value;
	fence_check_issued(rel, attnum, writer);
	if (writer < old_fence)
	{
		fencing_stat_add(FENCING_STAT_STALE_REJECTED, 1);
		if (cache->mode == FENCE_STALE_SKIP)
			return PointerGetDatum(NULL);
		fence_report_stale(rel, FENCE_COLUMN_NAME, writer, old_fence);
	}
	return PointerGetDatum(oldtuple);

#undef FENCE_COLUMN_NAME
}
