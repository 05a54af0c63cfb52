/*-------------------------------------------------------------------------
 *
 * standby.c
 *		The primary-only guard: tokens and locks are served by the primary.
 *
 * A token handed out on a hot standby could repeat one the primary hands
 * out, and a lock taken there excludes nobody on the primary, so every
 * function that hands out a token or takes a lock asks here first.
 *
 * Copyright (c) 2026, the fencing developers
 *
 * IDENTIFICATION
 *		src/base/standby.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xlog.h"

#include "base/base.h"

/*
 * Tokens and locks taken on a hot standby would exclude nobody and would
 * not be durable, so every such function calls this first.  The check is a
 * backend-local flag once recovery has ended, cheap enough for the hot path.
 */
void
fencing_error_if_standby(const char *what)
{
	if (unlikely(RecoveryInProgress()))
		ereport(ERROR,
				(errcode(ERRCODE_READ_ONLY_SQL_TRANSACTION),
				 errmsg("cannot call %s on a hot standby", what),
				 errdetail("Fence tokens and fencing locks are served only by the primary; a lock taken on a replica excludes nobody."),
				 errhint("Connect to the primary server.")));
}
