/*-------------------------------------------------------------------------
 *
 * fence_ddl.c
 *		DDL that would open a protected table to unfenced writes: seen by
 *		the utility hook of statement_hooks.c before and after it runs.
 *
 * Row triggers see every row change except those that DDL makes: TRUNCATE
 * empties a table without firing them, and a table attached to a protected
 * table by inheritance is written through its parent without its parent's
 * triggers.
 *
 * Copyright (c) 2026, the fencing developers
 *
 * IDENTIFICATION
 *		src/fence_ddl.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fencing.h"

/*
 * Before a utility statement runs.
 */
void
fencing_fence_utility_before(PlannedStmt *pstmt)
{
}

/*
 * After a utility statement ran.
 */
void
fencing_fence_utility_after(PlannedStmt *pstmt)
{
}
