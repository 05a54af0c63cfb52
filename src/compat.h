/*-------------------------------------------------------------------------
 *
 * compat.h
 *		The differences between the server versions fencing builds against
 *		(PostgreSQL 15 to 18), in one place.
 *
 * Each macro below names what the code needs, not the version that changed
 * it, so that the .c files read the same on every version and a new server
 * release means editing this file only.
 *
 * Copyright (c) 2026, the fencing developers
 *
 * IDENTIFICATION
 *		src/compat.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef FENCING_COMPAT_H
#define FENCING_COMPAT_H

#include <unistd.h>

#include "catalog/pg_class.h"
#include "executor/executor.h"
#include "storage/proc.h"
#include "utils/acl.h"
#include "utils/guc.h"

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

#endif							/* FENCING_COMPAT_H */
