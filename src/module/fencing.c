/*-------------------------------------------------------------------------
 *
 * fencing.c
 *		Module load: refuse to run unless preloaded, then let each part of
 *		the extension register its settings, hooks and shared memory.
 *
 * Fence tokens live in shared memory and their durability depends on a
 * custom WAL resource manager; both can only be set up while the postmaster
 * starts.  A library loaded later (by CREATE EXTENSION or a function call)
 * would serve tokens from backend-local memory and break every guarantee,
 * so _PG_init raises an error instead, as pg_cron does.  The failed load is
 * not remembered by the dynamic loader, so every later use raises the same
 * error until the server is restarted with the setting.
 *
 * Copyright (c) 2026, the fencing developers
 *
 * IDENTIFICATION
 *		src/module/fencing.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"

#include "module/module.h"

PG_MODULE_MAGIC;

void		_PG_init(void);

/*
 * Module load callback.  Everything the extension does depends on shared
 * memory and the WAL resource manager, so anything but a preload is an
 * error that says how to fix it.
 */
void
_PG_init(void)
{
	if (!process_shared_preload_libraries_in_progress)
		ereport(ERROR,
				(errcode(ERRCODE_FENCING_NOT_PRELOADED),
				 errmsg("fencing must be loaded via shared_preload_libraries"),
				 errdetail("Fence tokens and lock tracking live in shared memory that is set up only when the server starts."),
				 errhint("Add 'fencing' to shared_preload_libraries in postgresql.conf and restart the server.")));

	/* base */
	fencing_stats_init();
	/* tokens */
	fencing_token_wal_init();
	/* locks */
	fencing_lock_registry_init();
	fencing_lock_delay_init();
	fencing_locks_init();
	fencing_lease_ceiling_init();
	fencing_leases_init();
	/* fences */
	fencing_fence_init();
	/* this layer */
	fencing_hooks_init();
}
