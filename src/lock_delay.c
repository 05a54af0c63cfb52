/*-------------------------------------------------------------------------
 *
 * lock_delay.c
 *		fencing.lock_delay: after a holder's session ends abnormally, nobody
 *		is granted its name until the delay has passed (Chubby's and
 *		Consul's lock-delay).
 *
 * A holder whose session ends while its transaction is open (a lease that
 * expired, pg_terminate_backend, any FATAL or exit, a crash) may have left
 * a side effect in flight that cannot check a fence: an e-mail being sent,
 * a payment provider being called.  Core frees its lock at once; this file
 * keeps the next holder out until fencing.lock_delay has passed.  A clean
 * COMMIT or ROLLBACK (of the transaction or to a savepoint) frees the lock
 * at once, as without the setting.
 *
 * Delays live in a fixed-size shared table, one entry per lock the lost
 * holder had (a name's lock, or one permit of a semaphore), with the
 * moment the holder was lost.  A delay ends fencing.lock_delay after that
 * moment, by the setting in force now: lowering the setting shortens the
 * delays running, 0 ends them all, raising it lengthens them.  The
 * postmaster publishes the setting in the table whenever it reads the
 * configuration, and every backend applies that value, not its own copy
 * (which follows a reload only at the backend's next command: a holder
 * idle in its transaction would start the delay of a setting long gone).
 * Three ways to start one:
 *
 *	- a backend that exits with locks (locks.c, a before_shmem_exit
 *	  callback that runs before ShutdownPostgres aborts the transaction,
 *	  while the backend still knows what it holds) records each of them,
 *	  lost now;
 *	- a backend crash: the postmaster runs shmem_exit(1) before it creates
 *	  shared memory anew (PostmasterStateMachine, in 15, 17 and 18 alike),
 *	  so an on_shmem_exit callback registered by the postmaster after the
 *	  segment was created runs while the old segment is still attached.  It
 *	  copies the live delays and every granted lock of the registry
 *	  (lock_registry.c), reading without locks (a dead backend may hold
 *	  them, and trusting none of its counts or times), into
 *	  postmaster-local memory; the next shared-memory startup
 *	  turns them into delays (a lock held at the crash is lost at the time
 *	  of the reinitialisation);
 *	- a server restart: the same callback writes what it copied to the file
 *	  LOCK_DELAY_FILE in the data directory, and the next start reads it
 *	  back, dropping delays that have ended.  A damaged file is a WARNING
 *	  and is ignored.  A postmaster killed with SIGKILL writes nothing, and
 *	  its delays are lost.
 *
 * Every grant path asks fencing_lock_delay_refuses() after core granted
 * the lock (so a delay started by a holder that left while we waited is
 * seen) and gives the lock back when it refuses.  When no delay exists,
 * which is the case unless a holder was lost within the last
 * fencing.lock_delay, that is one atomic read of the number of entries.
 *
 * When the table is full, the delays that end soonest are folded into one
 * delay of every lock (nothing is granted until it ends), never dropped,
 * with a WARNING: a lock refused for a while is better than a lost
 * holder's lock granted early.
 *
 * Copyright (c) 2026, the fencing developers
 *
 * IDENTIFICATION
 *		src/lock_delay.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "miscadmin.h"
#include "pgstat.h"
#include "port/atomics.h"
#include "port/pg_crc32c.h"
#include "storage/fd.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "fencing.h"
#include "lock_delay.h"

#define LOCK_DELAY_FILE		"fencing.lock_delays"
#define LOCK_DELAY_TMP		"fencing.lock_delays.tmp"
#define LOCK_DELAY_MAGIC	0x464E4C44	/* "FNLD" */
#define LOCK_DELAY_VERSION	1

/* The longest delay that can be configured: one hour. */
#define LOCK_DELAY_MAX_MS	(3600 * 1000)

/*
 * The most entries a file can hold: the delays and the held locks of the
 * largest table fencing.max_tracked_locks allows.
 */
#define LOCK_DELAY_FILE_MAX_ENTRIES	(2 * 1000000)

/* The file the postmaster writes at exit: this header, then the entries. */
typedef struct LockDelayFileHeader
{
	uint32		magic;
	uint32		version;
	uint32		count;
	uint32		entry_size;
	pg_crc32c	crc;			/* of the entries, then the header up to crc */
} LockDelayFileHeader;

/* GUC fencing.lock_delay, in milliseconds: this process's copy */
static int	lock_delay_ms = 0;

static LockDelayTable *delays = NULL;

/*
 * The table's capacity as this process computed it from the settings,
 * never as shared memory says: every read of the table is bounded by it.
 */
static int	table_capacity = 0;

/*
 * What the postmaster copied from the old segment at a crash restart,
 * waiting for the new one (postmaster-local memory).
 */
static FencingLockDelay *carried = NULL;
static int	carried_count = 0;
static int	carried_capacity = 0;
static bool carried_valid = false;

/* The entry count the grant paths read; points into shared memory. */
pg_atomic_uint32 *fencing_lock_delay_count = NULL;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

static void assign_lock_delay(int newval, void *extra);
static void lock_delay_shmem_request(void);
static void lock_delay_shmem_startup(void);
static void lock_delay_postmaster_exit(int code, Datum arg);
static void lock_delay_file_write(void);
static void lock_delay_file_read(void);

/*
 * Define the setting and register the shared-memory hooks; called from
 * _PG_init while the postmaster preloads the library.  The setting is
 * PGC_SIGHUP: the same for every session, changed by a superuser in
 * postgresql.conf or with ALTER SYSTEM, so that a holder cannot turn off
 * the delay its own loss would start.
 */
void
fencing_lock_delay_init(void)
{
	DefineCustomIntVariable("fencing.lock_delay",
							"How long a fencing lock stays ungrantable after its holder's session ended abnormally.",
							"A holder lost while holding a lock (lease expiry, termination, crash) may still have a side effect in flight; nobody is granted the lock until this has passed. A clean COMMIT or ROLLBACK frees it at once. Lowering it shortens the delays in force; 0 turns the delay off and ends them.",
							&lock_delay_ms,
							0,
							0,
							LOCK_DELAY_MAX_MS,
							PGC_SIGHUP,
							GUC_UNIT_MS,
							NULL, assign_lock_delay, NULL);

	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = lock_delay_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = lock_delay_shmem_startup;
}

/*
 * The postmaster reads the configuration before it signals the backends to
 * do so: publishing the value from there makes it the one in force at
 * once, for every backend, busy or idle.
 */
static void
assign_lock_delay(int newval, void *extra)
{
	if (!IsUnderPostmaster && delays != NULL)
		pg_atomic_write_u32(&delays->delay_ms, (uint32) newval);
}

/* fencing.lock_delay in force, as the postmaster published it. */
static inline int
delay_ms_in_force(void)
{
	return (int) Min(pg_atomic_read_u32(&delays->delay_ms),
					 (uint32) LOCK_DELAY_MAX_MS);
}

/* When a delay ends under the setting ms. */
static inline TimestampTz
delay_end(const FencingLockDelay *e, int ms)
{
	return TimestampTzPlusMilliseconds(e->since, ms);
}

/* The number of entries in use, never more than the table holds. */
static inline uint32
delay_count(void)
{
	return Min(pg_atomic_read_u32(&delays->count), (uint32) table_capacity);
}

/*
 * Room for as many delays as locks can be tracked at once, and the lock
 * that guards them.
 */
static void
lock_delay_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(lock_delay_table_size(fencing_lock_registry_configured_capacity()));
	RequestNamedLWLockTranche("fencing lock delays", 1);
}

/*
 * The delay that stands for every fencing lock of every database: what a
 * full table folds the delays it cannot keep into.  It is an entry like the
 * others (so the count the grant paths read covers it), with no database,
 * key 0 and this permit number.
 */
#define LOCK_DELAY_EVERY_PERMIT		0xFFFF
#define LOCK_DELAY_EVERY_NAME		"(every fencing lock: the table of lock delays was full)"

static inline bool
delay_is_every(const FencingLockDelay *e)
{
	return e->dboid == InvalidOid && e->permit == LOCK_DELAY_EVERY_PERMIT;
}

/*
 * Make one entry free in a full table without ending any delay early: the
 * delay that ends soonest is folded into the delay of every lock (made in
 * its slot when there is none yet, which frees nothing by itself, so a
 * second one follows).  Losing a delay would hand a lost holder's name to
 * a new holder early, and anyone who may take a lock could fill the table
 * on purpose to do that; refusing every lock for a while is the safe side.
 * Returns false when only the delay of every lock is left.
 */
static bool
delay_make_room(void)
{
	uint32		count = delay_count();
	int			every = -1;
	int			soonest = -1;
	uint32		i;
	FencingLockDelay *s;

	for (i = 0; i < count; i++)
	{
		FencingLockDelay *e = &delays->entries[i];

		if (delay_is_every(e))
			every = i;
		else if (soonest < 0 || e->since < delays->entries[soonest].since)
			soonest = i;
	}
	if (soonest < 0)
		return false;
	s = &delays->entries[soonest];
	ereport(WARNING,
			(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
			 errmsg("the table of fencing lock delays is full: no fencing lock is granted until the delay of \"%.*s\" ends",
					(int) s->namelen, s->name),
			 errdetail("All %d entries are in use; a delay that does not fit is kept as a delay of every lock, so that no lost holder's lock is granted early.",
					   table_capacity),
			 errhint("Raise fencing.max_tracked_locks (it takes effect at server restart).")));
	if (every < 0)
	{
		s->dboid = InvalidOid;
		s->key = 0;
		s->pid = 0;
		s->permit = LOCK_DELAY_EVERY_PERMIT;
		s->permits = 0;
		s->mode = FENCING_LOCK_EXCLUSIVE;
		s->namelen = strlen(LOCK_DELAY_EVERY_NAME);
		memcpy(s->name, LOCK_DELAY_EVERY_NAME, s->namelen);
		return delay_make_room();
	}
	if (s->since > delays->entries[every].since)
		delays->entries[every].since = s->since;
	*s = delays->entries[count - 1];
	pg_atomic_write_u32(&delays->count, count - 1);
	return true;
}

/*
 * Add a delay, or lengthen the one the lock already has.  The caller holds
 * the lock exclusively (or is the postmaster filling a new table).  A full
 * table folds its soonest delays into a delay of every lock
 * (delay_make_room): never does a delay end early.
 */
static void
delay_put(const FencingLockDelay *delay)
{
	uint32		count = delay_count();
	uint32		i;

	for (i = 0; i < count; i++)
	{
		FencingLockDelay *e = &delays->entries[i];

		if (e->dboid == delay->dboid && e->key == delay->key &&
			e->permit == delay->permit)
		{
			if (delay->since > e->since)
				*e = *delay;
			return;
		}
	}
	if (count >= (uint32) table_capacity && !delay_make_room())
	{
		/* only the delay of every lock is left: lengthen it */
		if (delay->since > delays->entries[0].since)
			delays->entries[0].since = delay->since;
		return;
	}
	count = delay_count();
	delays->entries[count] = *delay;
	pg_write_barrier();
	pg_atomic_write_u32(&delays->count, count + 1);
}

/*
 * Drop delays that have ended under the setting ms.  The caller holds the
 * lock exclusively.
 */
static void
delay_purge(TimestampTz now, int ms)
{
	uint32		count = delay_count();
	uint32		i = 0;

	while (i < count)
	{
		if (delay_end(&delays->entries[i], ms) <= now)
		{
			delays->entries[i] = delays->entries[count - 1];
			count--;
		}
		else
			i++;
	}
	pg_atomic_write_u32(&delays->count, count);
}

/*
 * A delay the postmaster read from the old segment or from the file, made
 * safe to keep: every length within its array, a start no later than now
 * (a start ahead of the clock would make the delay outlast the setting).
 * Returns whether it is still in force.
 */
static bool
delay_sanitize(FencingLockDelay *d, TimestampTz now)
{
	d->namelen = Min(d->namelen, FENCING_NAME_MAX_BYTES);
	if (d->mode > FENCING_LOCK_PERMIT)
		d->mode = FENCING_LOCK_EXCLUSIVE;
	if (d->since > now)
		d->since = now;
	return lock_delay_ms > 0 && delay_end(d, lock_delay_ms) > now;
}

/*
 * Create the table at postmaster start and after a crash restart, and in
 * the postmaster fill it with what the last life left: the delays copied
 * at a crash restart, or those of the file written at the last shutdown.
 * The postmaster then arranges to copy them again when this segment goes.
 */
static void
lock_delay_shmem_startup(void)
{
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	table_capacity = fencing_lock_registry_configured_capacity();
	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	delays = ShmemInitStruct(LOCK_DELAY_SHMEM_NAME,
							 lock_delay_table_size(table_capacity), &found);
	if (!found)
	{
		delays->lock = &(GetNamedLWLockTranche("fencing lock delays"))->lock;
		delays->capacity = table_capacity;
		pg_atomic_init_u32(&delays->count, 0);
		pg_atomic_init_u32(&delays->delay_ms, (uint32) lock_delay_ms);
	}
	fencing_lock_delay_count = &delays->count;
	LWLockRelease(AddinShmemInitLock);

	if (!IsUnderPostmaster)
	{
		TimestampTz now = GetCurrentTimestamp();
		int			restored = 0;
		int			i;

#ifdef FENCING_MUTANT_LOCK_DELAY_FILE_IGNORED
		carried_valid = true;
#endif
		if (!carried_valid)
			lock_delay_file_read();
		for (i = 0; i < carried_count; i++)
		{
			if (!delay_sanitize(&carried[i], now))
				continue;
			delay_put(&carried[i]);
			restored++;
		}
		if (restored > 0)
			ereport(LOG,
					(errmsg("fencing: %d lock delays carried over the restart", restored)));
		carried_count = 0;
		carried_valid = false;
		if (unlink(LOCK_DELAY_FILE) != 0 && errno != ENOENT)
			ereport(WARNING,
					(errcode_for_file_access(),
					 errmsg("could not remove file \"%s\": %m", LOCK_DELAY_FILE)));
		on_shmem_exit(lock_delay_postmaster_exit, (Datum) 0);
	}
}

/*
 * The postmaster's copy of one delay, grown as needed in its own memory.
 */
static void
carry(const FencingLockDelay *delay)
{
	if (carried_count >= carried_capacity)
	{
		int			n = carried_capacity > 0 ? carried_capacity * 2 : 64;

		carried = carried == NULL ?
			MemoryContextAlloc(TopMemoryContext, n * sizeof(FencingLockDelay)) :
			repalloc(carried, n * sizeof(FencingLockDelay));
		carried_capacity = n;
	}
	carried[carried_count++] = *delay;
}

/*
 * A lock held by a backend that did not live to record its delay (a
 * crash, or an immediate shutdown): it is lost now.
 */
static void
carry_held(const FencingLockDelay *held)
{
	FencingLockDelay delay = *held;

	if (lock_delay_ms <= 0)
		return;
	delay.since = GetCurrentTimestamp();
	carry(&delay);
}

/*
 * The postmaster lets go of the segment: at a crash restart, and at
 * shutdown.  No backend runs, but one that crashed may have left a lock
 * or a write half done, or written anything anywhere: read without locks,
 * no further than the table this process made, and let delay_sanitize
 * bound what each entry says when it is restored.  Copy the live delays
 * and the locks still held, then write them to the file (the next start
 * reads it; a crash restart uses the copy in memory).
 */
static void
lock_delay_postmaster_exit(int code, Datum arg)
{
	TimestampTz now = GetCurrentTimestamp();
	uint32		count;
	uint32		i;

	carried_count = 0;
	count = delay_count();
	for (i = 0; i < count; i++)
	{
		FencingLockDelay delay = delays->entries[i];

		if (delay_sanitize(&delay, now))
			carry(&delay);
	}
#ifdef FENCING_MUTANT_LOCK_DELAY_CRASH_FORGOTTEN
	(void) carry_held;
#else
	fencing_lock_registry_held_locks(carry_held);
#endif
	carried_valid = true;

	lock_delay_file_write();
}

/*
 * Write the carried delays to the file, or remove it when there are none.
 * Failures are logged: the delays then end with this server.
 */
static void
lock_delay_file_write(void)
{
	LockDelayFileHeader header;
	int			fd;
	Size		size = mul_size(carried_count, sizeof(FencingLockDelay));

	if (carried_count == 0)
	{
		(void) unlink(LOCK_DELAY_FILE);
		return;
	}

	memset(&header, 0, sizeof(header));
	header.magic = LOCK_DELAY_MAGIC;
	header.version = LOCK_DELAY_VERSION;
	header.count = carried_count;
	header.entry_size = sizeof(FencingLockDelay);
	INIT_CRC32C(header.crc);
	COMP_CRC32C(header.crc, carried, size);
	COMP_CRC32C(header.crc, &header, offsetof(LockDelayFileHeader, crc));
	FIN_CRC32C(header.crc);

	fd = OpenTransientFile(LOCK_DELAY_TMP, O_WRONLY | O_CREAT | O_TRUNC | PG_BINARY);
	if (fd < 0 ||
		write(fd, &header, sizeof(header)) != sizeof(header) ||
		write(fd, carried, size) != (ssize_t) size ||
		pg_fsync(fd) != 0)
	{
		ereport(LOG,
				(errcode_for_file_access(),
				 errmsg("could not write file \"%s\": %m", LOCK_DELAY_TMP),
				 errdetail("%d fencing lock delays end with this server.", carried_count)));
		if (fd >= 0)
			CloseTransientFile(fd);
		return;
	}
	CloseTransientFile(fd);
	(void) durable_rename(LOCK_DELAY_TMP, LOCK_DELAY_FILE, LOG);
}

/*
 * A damaged file loses its delays, but must not keep the server from
 * starting.
 */
static void
report_damaged_file(const char *detail)
{
	ereport(WARNING,
			(errcode(ERRCODE_DATA_CORRUPTED),
			 errmsg("fencing lock delay file \"%s\" is damaged; its delays are ignored", LOCK_DELAY_FILE),
			 errdetail("%s", detail),
			 errhint("Locks whose holders were lost before the restart are grantable at once.")));
}

/*
 * Read the file written at the last shutdown into the carried delays.  Its
 * header is checked against the file's size before anything is allocated,
 * so that a damaged count cannot ask the postmaster for a gigabyte.
 */
static void
lock_delay_file_read(void)
{
	LockDelayFileHeader header;
	pg_crc32c	crc;
	FencingLockDelay *entries;
	struct stat st;
	Size		size;
	int			fd;
	uint32		i;

	carried_count = 0;
	fd = OpenTransientFile(LOCK_DELAY_FILE, O_RDONLY | PG_BINARY);
	if (fd < 0)
	{
		if (errno != ENOENT)
			ereport(WARNING,
					(errcode_for_file_access(),
					 errmsg("could not open file \"%s\": %m", LOCK_DELAY_FILE),
					 errdetail("Fencing lock delays from before the restart are ignored.")));
		return;
	}
	if (read(fd, &header, sizeof(header)) != sizeof(header) ||
		fstat(fd, &st) != 0)
	{
		CloseTransientFile(fd);
		report_damaged_file("The file is shorter than its header.");
		return;
	}
	if (header.magic != LOCK_DELAY_MAGIC || header.version != LOCK_DELAY_VERSION ||
		header.entry_size != sizeof(FencingLockDelay) ||
		header.count > LOCK_DELAY_FILE_MAX_ENTRIES)
	{
		CloseTransientFile(fd);
		report_damaged_file(psprintf("Its header (magic 0x%08X, version %u, %u entries of %u bytes) is not one this server writes.",
									 header.magic, header.version,
									 header.count, header.entry_size));
		return;
	}
	size = mul_size(header.count, sizeof(FencingLockDelay));
	if ((Size) st.st_size != sizeof(header) + size)
	{
		CloseTransientFile(fd);
		report_damaged_file(psprintf("Its header announces %u entries, but the file has %lld bytes.",
									 header.count, (long long) st.st_size));
		return;
	}
	entries = palloc(Max(size, 1));
	if (read(fd, entries, size) != (ssize_t) size)
	{
		CloseTransientFile(fd);
		report_damaged_file("The file is shorter than its entries.");
		return;
	}
	CloseTransientFile(fd);
	INIT_CRC32C(crc);
	COMP_CRC32C(crc, entries, size);
	COMP_CRC32C(crc, &header, offsetof(LockDelayFileHeader, crc));
	FIN_CRC32C(crc);
	if (!EQ_CRC32C(crc, header.crc))
	{
		report_damaged_file("Its checksum does not match its content.");
		return;
	}
	for (i = 0; i < header.count; i++)
		carry(&entries[i]);
	pfree(entries);
}

/*
 * This backend is exiting while its transaction holds the lock: start its
 * delay (or lengthen one in force), under the setting in force.  Called
 * from a before_shmem_exit callback, while the transaction is still open,
 * so the lock is still held and nobody can have been granted it yet.
 */
void
fencing_lock_delay_start(const FencingLockDelay *held)
{
	FencingLockDelay delay = *held;

	if (delays == NULL || delay_ms_in_force() <= 0)
		return;
	delay.since = GetCurrentTimestamp();

	LWLockAcquire(delays->lock, LW_EXCLUSIVE);
	delay_put(&delay);
	LWLockRelease(delays->lock);
	fencing_stat_add(FENCING_STAT_DELAYS_STARTED, 1);
}

/*
 * When the delay of a lock of this database ends, or 0 when none is in
 * force: a name's lock (permit 0) or permit n of a semaphore.  Takes the
 * lock shared; ended delays it meets are dropped afterwards.  Called only
 * when the table is not empty (fencing_lock_delay_refuses).  A lookup, not
 * a refusal: the grant path that gives a lock back counts it.
 */
TimestampTz
fencing_lock_delay_until(int64 key, int permit)
{
	TimestampTz now = GetCurrentTimestamp();
	int			ms = delay_ms_in_force();
	TimestampTz until = 0;
	bool		ended = false;
	uint32		count;
	uint32		i;

	LWLockAcquire(delays->lock, LW_SHARED);
	count = delay_count();
	for (i = 0; i < count; i++)
	{
		FencingLockDelay *e = &delays->entries[i];
		TimestampTz end = delay_end(e, ms);

		if (end <= now)
			ended = true;
		else if ((e->key == key && e->permit == permit &&
				  e->dboid == MyDatabaseId) || delay_is_every(e))
			until = Max(until, end);
	}
	LWLockRelease(delays->lock);

	if (ended)
	{
		LWLockAcquire(delays->lock, LW_EXCLUSIVE);
		delay_purge(now, ms);
		LWLockRelease(delays->lock);
	}
	return until;
}

/*
 * Sleep on the latch until the delay ends, or until deadline (0: none),
 * whichever comes first, or until interrupted.  The caller tries again:
 * the lock may be held by then, or a new delay started.
 */
void
fencing_lock_delay_sleep(TimestampTz until, TimestampTz deadline)
{
	TimestampTz end = (deadline != 0 && deadline < until) ? deadline : until;
	long		ms = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), end);

	if (ms > 0)
	{
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 ms, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
	}
	CHECK_FOR_INTERRUPTS();
}

/*
 * A copy of the delays in force, each with the moment it ends, for the
 * view fencing.locks; *count is set.  Every database's, like the
 * registry's rows.  Ended delays it meets are dropped, so that a delay the
 * view no longer shows does not come back when the setting is raised.
 */
FencingLockDelay *
fencing_lock_delay_snapshot(int *count)
{
	TimestampTz now = GetCurrentTimestamp();
	int			ms;
	FencingLockDelay *copy;
	bool		ended = false;
	uint32		n;
	uint32		i;

	*count = 0;
	if (delays == NULL || pg_atomic_read_u32(&delays->count) == 0)
		return NULL;
	ms = delay_ms_in_force();
	LWLockAcquire(delays->lock, LW_SHARED);
	n = delay_count();
	copy = palloc(sizeof(FencingLockDelay) * Max(n, 1));
	for (i = 0; i < n; i++)
	{
		FencingLockDelay *e = &delays->entries[i];

		if (delay_end(e, ms) <= now)
		{
			ended = true;
			continue;
		}
		copy[*count] = *e;
		copy[*count].until = delay_end(e, ms);
		(*count)++;
	}
	LWLockRelease(delays->lock);

	if (ended)
	{
		LWLockAcquire(delays->lock, LW_EXCLUSIVE);
		delay_purge(now, ms);
		LWLockRelease(delays->lock);
	}
	return copy;
}
