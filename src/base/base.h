/*-------------------------------------------------------------------------
 *
 * base.h
 *		The base layer of the fencing extension: what every other layer
 *		uses and nothing of ours is below.
 *
 * src/ is built in layers, each a folder with one header (src/README.md
 * draws them): base, tokens, locks, fence, module.  A file calls only
 * files of its own folder or of folders below, and no two files call each
 * other.  This layer holds the differences between server versions, the
 * extension's SQLSTATEs and name limits, and four small modules:
 *
 *	standby.c	the primary-only guard of every token and lock function
 *	normalize.c	canonical lock and resource names, and their keys
 *	stats.c		the counters behind fencing.stats
 *	statement.c	where in a statement this backend is (the module layer's
 *				hooks keep it; the lock and fence layers read it)
 *
 * Copyright (c) 2026, the fencing developers
 *
 * IDENTIFICATION
 *		src/base/base.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef FENCING_BASE_H
#define FENCING_BASE_H

#include "postgres.h"

#include <unistd.h>

#include "catalog/pg_class.h"
#include "catalog/pg_proc.h"
#include "executor/executor.h"
#include "fmgr.h"
#include "storage/lock.h"
#include "storage/proc.h"
#include "utils/acl.h"
#include "utils/guc.h"
#include "utils/timestamp.h"

/* ---------------------------------------------------------------------
 * Server versions
 *
 * The differences between the server versions fencing builds against
 * (PostgreSQL 15 to 18), in one place.  Each macro below names what the
 * code needs, not the version that changed it, so that the .c files read
 * the same on every version and a new server release means editing this
 * section only.
 * ---------------------------------------------------------------------
 */

/*
 * ExecutorRun lost its execute_once argument in PostgreSQL 18.  Hooks are
 * declared with FENCING_EXECUTOR_RUN_ARGS and call the next one with
 * FENCING_EXECUTOR_RUN_PASS.
 */
#if PG_VERSION_NUM >= 180000
#define FENCING_EXECUTOR_RUN_ARGS \
	QueryDesc *queryDesc, ScanDirection direction, uint64 count
#define FENCING_EXECUTOR_RUN_PASS	queryDesc, direction, count
#else
#define FENCING_EXECUTOR_RUN_ARGS \
	QueryDesc *queryDesc, ScanDirection direction, uint64 count, \
	bool execute_once
#define FENCING_EXECUTOR_RUN_PASS	queryDesc, direction, count, execute_once
#endif

/*
 * This backend's local transaction id: a plain field of PGPROC until
 * PostgreSQL 17 moved it into the virtual transaction id.
 */
#if PG_VERSION_NUM >= 170000
#define FENCING_MY_LXID		(MyProc->vxid.lxid)
#else
#define FENCING_MY_LXID		(MyProc->lxid)
#endif

/*
 * ALTER TABLE ... ALTER COLUMN ... SET EXPRESSION (AT_SetExpression) turns
 * a column into a generated one from PostgreSQL 17 on.
 */
#if PG_VERSION_NUM >= 170000
#define FENCING_HAVE_SET_EXPRESSION 1
#endif

/*
 * The varlena header macros (VARDATA_ANY, VARSIZE_ANY_EXHDR, VARATT_IS_*)
 * moved out of postgres.h into varatt.h in PostgreSQL 16.
 */
#if PG_VERSION_NUM >= 160000
#include "varatt.h"
#endif

/*
 * Is roleid the owner of the relation?  PostgreSQL 16 folded the
 * per-catalog pg_*_ownercheck() functions into object_ownercheck().
 */
#if PG_VERSION_NUM >= 160000
#define fencing_owns_relation(relid, roleid) \
	object_ownercheck(RelationRelationId, (relid), (roleid))
#else
#define fencing_owns_relation(relid, roleid) \
	pg_class_ownercheck((relid), (roleid))
#endif

/*
 * Does this backend hold a lock in exactly this mode?  PostgreSQL 17 gave
 * LockHeldByMe() an "or stronger" argument.
 */
#if PG_VERSION_NUM >= 170000
#define fencing_lock_held_by_me(tag, mode)	LockHeldByMe((tag), (mode), false)
#else
#define fencing_lock_held_by_me(tag, mode)	LockHeldByMe((tag), (mode))
#endif

/*
 * May roleid execute the function?  PostgreSQL 16 folded the per-catalog
 * pg_*_aclcheck() functions into object_aclcheck().
 */
#if PG_VERSION_NUM >= 160000
#define fencing_function_aclcheck(fnoid, roleid) \
	object_aclcheck(ProcedureRelationId, (fnoid), (roleid), ACL_EXECUTE)
#else
#define fencing_function_aclcheck(fnoid, roleid) \
	pg_proc_aclcheck((fnoid), (roleid), ACL_EXECUTE)
#endif

/*
 * This backend's slot in ProcGlobal->allProcs (0 .. the number of PGPROCs
 * - 1), to index per-backend arrays in shared memory.  PostgreSQL 17 took
 * the slot number out of PGPROC and calls it MyProcNumber.
 */
#if PG_VERSION_NUM >= 170000
#define FENCING_MY_PROC_SLOT	MyProcNumber
#else
#define FENCING_MY_PROC_SLOT	(MyProc->pgprocno)
#endif

/*
 * Memory for what a GUC check hook returns in *extra: GUC frees it when the
 * value goes.  Up to 15 it does so with free(); from 16 on with guc_free(),
 * in GUC's own memory context, so the block must come from guc_malloc()
 * (a malloc'd one is "an invalid pointer" to pfree).  NULL when out of
 * memory, like malloc(); guc_malloc(LOG, ...) only logs, never throws.
 */
#if PG_VERSION_NUM >= 160000
#define fencing_guc_extra_alloc(size)	guc_malloc(LOG, (size))
#else
#define fencing_guc_extra_alloc(size)	malloc(size)
#endif

/*
 * Marks a function that never returns, written before the declaration
 * (FENCING_NORETURN static void f(void);).  PostgreSQL 18 replaced the
 * trailing pg_attribute_noreturn() with the leading pg_noreturn (C11
 * _Noreturn); before 18 the attribute works in front as well with the
 * compilers that define it (gcc, clang).
 */
#if PG_VERSION_NUM >= 180000
#define FENCING_NORETURN	pg_noreturn
#else
#define FENCING_NORETURN	pg_attribute_noreturn()
#endif

/*
 * The hard ceiling of a lease (lease_ceiling.c): from PostgreSQL 17 on,
 * core's transaction_timeout ends the holder's transaction (FATAL 25P04),
 * and the extension's own timer, which ends the session as
 * pg_terminate_backend() does (FATAL 57P01), is a backstop a second later
 * for a backend core's timeout cannot reach; before 17 that timer is the
 * ceiling itself, at the deadline.  That timer is a POSIX timer
 * (timer_create): Linux and FreeBSD have them, macOS and Windows do not.
 */
#if !defined(_POSIX_TIMERS) || _POSIX_TIMERS <= 0
#error "fencing needs POSIX timers (timer_create) for the ceiling of a lease"
#endif
#if PG_VERSION_NUM >= 170000
#define FENCING_CEILING_TRANSACTION_TIMEOUT 1
#define FENCING_CEILING_GRACE_MS	1000
#else
#define FENCING_CEILING_GRACE_MS	0
#endif

/* ---------------------------------------------------------------------
 * SQLSTATEs and limits
 * ---------------------------------------------------------------------
 */

/*
 * SQLSTATEs of our own, class FN ("fencing").  A stale holder must stop, not
 * retry, so none of them is in class 40 (which frameworks retry) or P0001.
 */
#define ERRCODE_FENCING_STALE_TOKEN		MAKE_SQLSTATE('F','N','0','0','1')
#define ERRCODE_FENCING_KEY_COLLISION	MAKE_SQLSTATE('F','N','0','0','2')
#define ERRCODE_FENCING_NOT_PRELOADED	MAKE_SQLSTATE('F','N','0','0','3')
#define ERRCODE_FENCING_LEASE_LOST		MAKE_SQLSTATE('F','N','0','0','4')

/*
 * Lock names: a canonical name is at most FENCING_NAME_MAX_BYTES bytes of
 * UTF-8.  Input longer than FENCING_NAME_MAX_INPUT_BYTES is refused before
 * any normalisation work (or detoasting) is done.
 */
#define FENCING_NAME_MAX_BYTES			200
#define FENCING_NAME_MAX_INPUT_BYTES	4096

/* ---------------------------------------------------------------------
 * standby.c
 * ---------------------------------------------------------------------
 */
extern void fencing_error_if_standby(const char *what);

/* ---------------------------------------------------------------------
 * normalize.c
 * ---------------------------------------------------------------------
 */
extern int	fencing_canonical_name(Datum name, char *buf);
extern int	fencing_canonical_name_of(Datum name, char *buf, const char *noun);
extern text *fencing_canonical_text(Datum name, const char *noun);
extern int64 fencing_key_of_canonical(const char *buf, int len);

/* ---------------------------------------------------------------------
 * stats.c
 * ---------------------------------------------------------------------
 */
typedef enum FencingStat
{
	FENCING_STAT_TOKENS_ISSUED,
	FENCING_STAT_RESERVATIONS,
	FENCING_STAT_RESERVATION_USEC,
	FENCING_STAT_LOCKS_GRANTED,
	FENCING_STAT_LOCKS_BUSY,
	FENCING_STAT_LOCKS_TIMED_OUT,
	FENCING_STAT_LEASES_GRANTED,
	FENCING_STAT_LEASES_EXPIRED,
	FENCING_STAT_STALE_REJECTED,
	FENCING_STAT_LOCK_GROUPS_GRANTED,
	FENCING_STAT_SHARED_LOCKS_GRANTED,
	FENCING_STAT_PERMITS_GRANTED,
	FENCING_STAT_LEASES_CEILING_ENDED,
	FENCING_STAT_DELAYS_STARTED,
	FENCING_STAT_DELAYED_REFUSALS,
	FENCING_STAT_LEASES_ACQUIRED,
	FENCING_STAT_LEASES_RENEWED,
	FENCING_STAT_LEASES_RELEASED,
	FENCING_STAT_LEASES_LAPSED,
	FENCING_STAT_LEASES_BROKEN,
	FENCING_STAT_COUNT
} FencingStat;

extern void fencing_stats_init(void);
extern void fencing_stat_add(FencingStat which, uint64 n);

/* ---------------------------------------------------------------------
 * statement.c
 *
 * How deeply statements nest, and which query's executor runs at the
 * innermost level.  The module layer's executor and utility hooks move
 * the state with fencing_statement_enter() and fencing_statement_leave()
 * around each level; the lock and fence layers only read it.
 * ---------------------------------------------------------------------
 */
typedef struct FencingStatementState
{
	int			depth;			/* executor and utility levels running now;
								 * 0 between statements */
	QueryDesc  *query;			/* the query whose executor runs at query_depth */
	int			query_depth;
} FencingStatementState;

extern FencingStatementState fencing_statement;

/*
 * A level begins: save where the backend was into *saved, and count the
 * level.  An executor level (query not NULL) also becomes the running
 * query's; a utility level does not (a trigger fired by COPY has no query).
 */
static inline void
fencing_statement_enter(FencingStatementState *saved, QueryDesc *query)
{
	*saved = fencing_statement;
	fencing_statement.depth++;
	if (query != NULL)
	{
		fencing_statement.query = query;
		fencing_statement.query_depth = fencing_statement.depth;
	}
}

/* The level ended, by error or not: back to where *saved says. */
static inline void
fencing_statement_leave(const FencingStatementState *saved)
{
	fencing_statement = *saved;
}

extern QueryDesc *fencing_running_query(void);
extern bool fencing_called_from_top_level(void);
extern bool fencing_outside_transaction_block(void);
extern int	fencing_statement_depth(void);

#endif							/* FENCING_BASE_H */
