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

#include "executor/executor.h"
#include "storage/proc.h"

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

#endif							/* FENCING_COMPAT_H */
