/*-------------------------------------------------------------------------
 *
 * lwlock_gate.c
 *		A test module that holds an LWLock of a named tranche until the test
 *		opens the gate: for the TAP tests that put the instant a lease
 *		changes hands under their control (test/t/061_leases_handover.pl).
 *
 * While the gate holds the lease table's lock in shared mode, a session
 * that wants it exclusively (a renewal, an acquisition storing its entry,
 * the keeper's sweep) queues, and new shared lockers (the look of a grant
 * path, of an acquisition) still get it: the test lines the sessions up in
 * the order it wants, sees each one wait (pg_stat_activity), then opens
 * the gate and they run in that order.
 *
 * Not part of the build; the test compiles it into its own directory:
 *
 *	gcc -shared -fPIC -I$(pg_config --includedir-server) \
 *		test/tools/lwlock_gate.c -o lwlock_gate.so
 *
 * and creates test_lwlock_gate(tranche text, exclusive bool, gate text,
 * seconds float8) returns bool from it.
 *
 * Copyright (c) 2026, the fencing developers
 *
 * IDENTIFICATION
 *		test/tools/lwlock_gate.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>

#include "fmgr.h"
#include "storage/lwlock.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

PG_MODULE_MAGIC;

PG_FUNCTION_INFO_V1(test_lwlock_gate);

/*
 * test_lwlock_gate(tranche text, exclusive bool, gate text, seconds
 * float8) returns bool: take the first LWLock of the named tranche in the
 * given mode, create the file gate || '.held', then hold the lock until
 * the file gate exists or seconds pass, and let go.  True when the gate
 * was opened, false when the time ran out.  Interrupts wait while the
 * lock is held, as they do for every LWLock holder.
 */
Datum
test_lwlock_gate(PG_FUNCTION_ARGS)
{
	char	   *tranche = text_to_cstring(PG_GETARG_TEXT_PP(0));
	bool		exclusive = PG_GETARG_BOOL(1);
	char	   *gate = text_to_cstring(PG_GETARG_TEXT_PP(2));
	double		seconds = PG_GETARG_FLOAT8(3);
	char	   *held = psprintf("%s.held", gate);
	LWLock	   *lock = &(GetNamedLWLockTranche(tranche))->lock;
	TimestampTz end = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
												  (int) (seconds * 1000));
	struct stat st;
	bool		opened = false;
	int			fd;

	LWLockAcquire(lock, exclusive ? LW_EXCLUSIVE : LW_SHARED);
	fd = open(held, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd >= 0)
		close(fd);
	while (GetCurrentTimestamp() < end)
	{
		if (stat(gate, &st) == 0)
		{
			opened = true;
			break;
		}
		pg_usleep(1000L);
	}
	LWLockRelease(lock);
	PG_RETURN_BOOL(opened);
}
