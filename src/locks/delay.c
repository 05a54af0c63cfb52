/*-------------------------------------------------------------------------
 *
 * delay.c
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
 * moment the holder was lost and its role.  A delay ends fencing.lock_delay
 * after that moment, by the setting in force now: lowering the setting
 * shortens the delays running, 0 ends them all, raising it lengthens them.
 * The postmaster publishes the setting in the table whenever it reads the
 * configuration, and every backend applies that value, not its own copy
 * (which follows a reload only at the backend's next command: a holder
 * idle in its transaction would start the delay of a setting long gone).
 * Three ways to start one:
 *
 *	- a backend that exits with locks (held.c, a before_shmem_exit
 *	  callback that runs before ShutdownPostgres aborts the transaction,
 *	  while the backend still knows what it holds) records each of them,
 *	  lost now;
 *	- a backend crash: the postmaster runs shmem_exit(1) before it creates
 *	  shared memory anew (PostmasterStateMachine, in 15, 17 and 18 alike),
 *	  so an on_shmem_exit callback registered by the postmaster after the
 *	  segment was created runs while the old segment is still attached.  It
 *	  copies the live delays and every granted lock of the registry
 *	  (registry.c), reading without locks (a dead backend may hold
 *	  them, and trusting none of its counts or times), into
 *	  postmaster-local memory; the next shared-memory startup turns them
 *	  into delays (a lock held at the crash is lost at the time of the
 *	  reinitialisation);
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
 * When the table is full, no delay is dropped: delays are folded into one
 * delay of every fencing lock that their role takes in their database,
 * with a WARNING, and the role whose delay does not fit pays first (see
 * delay_make_room).  Any role that may take locks can fill the table (lose
 * holders of many names), and what it costs falls on that role: its own
 * sessions are refused their locks until the fold ends, while every other
 * role keeps its delays and its locks, and other databases are not
 * touched.  The folded names themselves are no longer refused to other
 * roles.  Only when every delay belongs to a role of its own are two of
 * them folded into a delay of every lock of their database.
 * fencing.clear_lock_delays() lets the extension's owner end the delays of
 * a name, or of a database, at once.
 *
 * Copyright (c) 2026, the fencing developers
 *
 * IDENTIFICATION
 *		src/locks/delay.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "pgstat.h"
#include "port/atomics.h"
#include "port/pg_crc32c.h"
#include "storage/fd.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "locks/locks.h"

PG_FUNCTION_INFO_V1(fencing_clear_lock_delays);

#define LOCK_DELAY_FILE		"fencing.lock_delays"
#define LOCK_DELAY_TMP		"fencing.lock_delays.tmp"
#define LOCK_DELAY_MAGIC	0x464E4C44	/* "FNLD" */
#define LOCK_DELAY_VERSION	2

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

/*
 * What the grant paths read without the lock: the entry count, the number
 * of folded entries and the filter (locks.h); point into shared memory.
 */
pg_atomic_uint32 *fencing_lock_delay_count = NULL;
pg_atomic_uint32 *fencing_lock_delay_folds = NULL;
pg_atomic_uint32 *fencing_lock_delay_fold_filter = NULL;
pg_atomic_uint32 *fencing_lock_delay_filter = NULL;
uint32		fencing_lock_delay_filter_count = 0;

/* how a module above ends the delays its entries keep (leases.c) */
static int	(*also_clear) (bool every, int64 key) = NULL;

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
 * Whether a delay refuses a grant of (key, permit) in this database to a
 * session of this role.
 */
static inline bool
delay_refuses(const FencingLockDelay *e, int64 key, int permit, Oid roleid)
{
	if (!e->folded)
		return e->key == key && e->permit == permit &&
			e->dboid == MyDatabaseId;
	return (e->dboid == InvalidOid || e->dboid == MyDatabaseId) &&
		(e->roleid == InvalidOid || e->roleid == roleid);
}

/* Whether a delay refuses any grant in the database dboid. */
static inline bool
delay_in_database(const FencingLockDelay *e, Oid dboid)
{
	return e->dboid == dboid || (e->folded && e->dboid == InvalidOid);
}

/*
 * Count a delay in (one) or out (-1) of what the grant paths read without
 * the lock: the filter for a name's delay, the folds for a folded one.
 * The caller holds the lock exclusively (or is the postmaster filling a
 * new table).
 */
static void
delay_filter_count(const FencingLockDelay *e, int one)
{
	uint64		hash;
	int			probe;

	if (e->folded)
	{
		pg_atomic_fetch_add_u32(&fencing_lock_delay_fold_filter[lock_delay_fold_place(e->dboid, e->roleid)],
								one);
		pg_atomic_fetch_add_u32(fencing_lock_delay_folds, one);
		return;
	}
	hash = lock_delay_filter_hash(e->dboid, e->key, e->permit);
	for (probe = 0; probe < LOCK_DELAY_FILTER_PROBES; probe++)
		pg_atomic_fetch_add_u32(&fencing_lock_delay_filter[lock_delay_filter_place(hash, probe,
																				   fencing_lock_delay_filter_count)],
								one);
}

/*
 * Remove entry i, replacing it with the last one.  The caller holds the
 * lock exclusively (or is the postmaster filling a new table).
 */
static void
delay_remove(uint32 i)
{
	uint32		count = delay_count();

	delay_filter_count(&delays->entries[i], -1);
	delays->entries[i] = delays->entries[count - 1];
	pg_atomic_write_u32(&delays->count, count - 1);
}

/*
 * Fold the delay "from" into the entry "into", which becomes (or stays) a
 * folded delay: of one database and one role when both had the same, else
 * of every database or every role, and ending no sooner than either.
 */
static void
delay_fold_into(FencingLockDelay *into, const FencingLockDelay *from)
{
	FencingLockDelay folded = *into;

	if (!folded.folded)
	{
		folded.folded = true;
		folded.key = 0;
		folded.permit = 0;
		folded.permits = 0;
		folded.mode = FENCING_LOCK_EXCLUSIVE;
		folded.namelen = 0;
	}
	if (folded.dboid != from->dboid)
		folded.dboid = InvalidOid;
	if (folded.roleid != from->roleid)
		folded.roleid = InvalidOid;
	if (from->since > folded.since)
	{
		folded.since = from->since;
		folded.pid = from->pid;
	}
	/*
	 * Counted in as it becomes before out as it was: a grant that reads the
	 * filters without the lock meanwhile sees it in one of them at least.
	 */
	delay_filter_count(&folded, 1);
	delay_filter_count(into, -1);
	*into = folded;
}

/*
 * The role with the most delays, and how many it has: the scratch space
 * sorted.
 */
static Oid
most_delayed_role(int *most)
{
	Oid		   *roles = lock_delay_table_scratch(delays, table_capacity);
	uint32		count = delay_count();
	Oid			best = InvalidOid;
	uint32		i;
	int			run = 0;

	*most = 0;
	for (i = 0; i < count; i++)
		roles[i] = delays->entries[i].roleid;
	qsort(roles, count, sizeof(Oid), oid_cmp);
	for (i = 0; i < count; i++)
	{
		run = (i > 0 && roles[i] == roles[i - 1]) ? run + 1 : 1;
		if (run > *most)
		{
			*most = run;
			best = roles[i];
		}
	}
	return best;
}

/*
 * The entry of role roleid that ends soonest, folded or not as asked, other
 * than entry "except"; -1 when there is none.
 */
static int
soonest_of_role(Oid roleid, bool folded, int except)
{
	uint32		count = delay_count();
	int			soonest = -1;
	uint32		i;

	for (i = 0; i < count; i++)
	{
		FencingLockDelay *e = &delays->entries[i];

		if (e->roleid != roleid || e->folded != folded || (int) i == except)
			continue;
		if (soonest < 0 || e->since < delays->entries[soonest].since)
			soonest = i;
	}
	return soonest;
}

/* A folded delay of role roleid that covers the database dboid, or -1. */
static int
fold_of_role(Oid roleid, Oid dboid)
{
	uint32		count = delay_count();
	uint32		i;

	for (i = 0; i < count; i++)
	{
		FencingLockDelay *e = &delays->entries[i];

		if (e->folded && e->roleid == roleid &&
			(e->dboid == dboid || e->dboid == InvalidOid))
			return i;
	}
	return -1;
}

/*
 * Free up to "need" entries by folding the soonest delays of one role into
 * a folded delay of that role: into the one of the delay's database, made
 * from the delay itself when there is none yet (which frees nothing by
 * itself), and folds of different databases into one of every database
 * when only folds are left.  Returns how many entries it freed, and in
 * *dboid the database of the last fold it made.
 */
static int
fold_within_role(Oid roleid, int need, Oid *dboid)
{
	int			freed = 0;

	while (freed < need)
	{
		int			e = soonest_of_role(roleid, false, -1);
		int			f;

		if (e >= 0)
		{
			f = fold_of_role(roleid, delays->entries[e].dboid);
			if (f < 0)
			{
				delay_fold_into(&delays->entries[e], &delays->entries[e]);
				continue;
			}
		}
		else
		{
			f = soonest_of_role(roleid, true, -1);
			e = f < 0 ? -1 : soonest_of_role(roleid, true, f);
			if (e < 0)
				break;
		}
		delay_fold_into(&delays->entries[f], &delays->entries[e]);
		*dboid = delays->entries[f].dboid;
		delay_remove(e);
		freed++;
	}
	return freed;
}

/*
 * Every entry belongs to a role of its own: fold the two that end soonest
 * into a delay of every fencing lock of their database (or of every
 * database), refused to everyone.  Returns the folded delay's database.
 */
static Oid
fold_two_soonest(void)
{
	uint32		count = delay_count();
	int			a = -1;
	int			b = -1;
	uint32		i;
	Oid			dboid;

	for (i = 0; i < count; i++)
	{
		TimestampTz since = delays->entries[i].since;

		if (a < 0 || since < delays->entries[a].since)
		{
			b = a;
			a = i;
		}
		else if (b < 0 || since < delays->entries[b].since)
			b = i;
	}
	delay_fold_into(&delays->entries[a], &delays->entries[b]);
	if (OidIsValid(delays->entries[a].roleid))
	{
		FencingLockDelay every_role = delays->entries[a];

		every_role.roleid = InvalidOid;
		delay_filter_count(&every_role, 1);
		delay_filter_count(&delays->entries[a], -1);
		delays->entries[a] = every_role;
	}
	dboid = delays->entries[a].dboid;
	delay_remove(b);
	return dboid;
}

/*
 * What the last fold did, for the WARNING that its caller reports once it
 * has let go of the lock (a report can block on a client that does not
 * read, and every grant path may need the lock meanwhile).
 */
typedef struct FoldReport
{
	bool		pending;
	bool		every_role;		/* a fold refused to every role */
	Oid			roleid;
	Oid			dboid;
} FoldReport;

static FoldReport fold_report;

static void
fold_reported(bool every_role, Oid roleid, Oid dboid)
{
	fold_report.pending = true;
	fold_report.every_role = every_role;
	fold_report.roleid = roleid;
	fold_report.dboid = dboid;
}

/* The entries of role roleid: how many, and one of them in *one. */
static int
role_entries(Oid roleid, int *one)
{
	uint32		count = delay_count();
	int			n = 0;
	uint32		i;

	for (i = 0; i < count; i++)
	{
		if (delays->entries[i].roleid == roleid)
		{
			*one = i;
			n++;
		}
	}
	return n;
}

/*
 * Make room in a full table for "delay" without ending any delay early (a
 * lost holder's name granted early is what the delay exists to prevent).
 * The role of the delay pays first: with two or more delays in the table
 * its soonest ones are folded, a sixteenth of the table at a time so that
 * a session that ends with many locks does not scan the table once per
 * lock; with one, the new delay is folded into it, and there is nothing
 * to add.  Only a role with no delay in the table yet makes room at
 * another's expense: one entry, from the role with the most delays (or,
 * when every delay belongs to a role of its own, from the two soonest,
 * folded for every role).  So a role that loses holders of many names
 * folds its own delays, and costs another role at most the two delays
 * folded to make its first entry.  Returns whether the delay is still to
 * be added.  The caller holds the lock exclusively (or is the postmaster
 * filling a new table), and reports the fold afterwards (report_fold).
 */
static bool
delay_make_room(const FencingLockDelay *delay)
{
	int			one = -1;
	int			own = role_entries(delay->roleid, &one);
	int			most;
	Oid			roleid;
	Oid			dboid = InvalidOid;

	if (own >= 2 &&
		fold_within_role(delay->roleid,
						 Min(Max(table_capacity / 16, 1), own - 1), &dboid) > 0)
	{
		fold_reported(false, delay->roleid, dboid);
		return true;
	}
	if (own >= 1)
	{
		delay_fold_into(&delays->entries[one], delay);
		fold_reported(false, delay->roleid, delays->entries[one].dboid);
		return false;
	}
	roleid = most_delayed_role(&most);
	if (most >= 2 && fold_within_role(roleid, 1, &dboid) > 0)
	{
		fold_reported(false, roleid, dboid);
		return true;
	}
	fold_reported(true, InvalidOid, fold_two_soonest());
	return true;
}

/*
 * The WARNING for the last fold, if one is still to be reported; called
 * without the lock.
 */
static void
report_fold(void)
{
	FoldReport	r = fold_report;

	if (!r.pending)
		return;
	fold_report.pending = false;
	if (r.every_role)
		ereport(WARNING,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("the table of fencing lock delays is full"),
				 OidIsValid(r.dboid) ?
				 errdetail("Every delay belongs to a different role; the two soonest are folded into one delay of every fencing lock in the database with OID %u, which nobody is granted until it ends.",
						   r.dboid) :
				 errdetail("Every delay belongs to a different role; the two soonest are folded into one delay of every fencing lock in every database, which nobody is granted until it ends."),
				 errhint("Raise fencing.max_tracked_locks (it takes effect at server restart), or end the delays with fencing.clear_lock_delays().")));
	else
		ereport(WARNING,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("the table of fencing lock delays is full"),
				 OidIsValid(r.dboid) ?
				 errdetail("Delays of the role with OID %u are folded into one delay of every fencing lock that role takes in the database with OID %u; until it ends, that role is granted none there, and other roles keep their delays.",
						   r.roleid, r.dboid) :
				 errdetail("Delays of the role with OID %u are folded into one delay of every fencing lock that role takes in any database; until it ends, that role is granted none, and other roles keep their delays.",
						   r.roleid),
				 errhint("Raise fencing.max_tracked_locks (it takes effect at server restart), or end the delays with fencing.clear_lock_delays().")));
}

/*
 * Add a delay, or lengthen the one the lock (or, for a folded delay, its
 * database and role) already has; in a full table it may be folded
 * instead (delay_make_room).  The caller holds the lock exclusively (or is
 * the postmaster filling a new table), and calls report_fold() once it
 * has let go.
 */
static void
delay_put(const FencingLockDelay *delay)
{
	uint32		count = delay_count();
	uint32		i;

	for (i = 0; i < count; i++)
	{
		FencingLockDelay *e = &delays->entries[i];

		if (e->folded != delay->folded || e->dboid != delay->dboid)
			continue;
		if (delay->folded ? e->roleid == delay->roleid :
			(e->key == delay->key && e->permit == delay->permit))
		{
			if (delay->since > e->since)
			{
				e->since = delay->since;
				e->pid = delay->pid;
				e->roleid = delay->roleid;
			}
			return;
		}
	}
	if (count >= (uint32) table_capacity && !delay_make_room(delay))
		return;
	count = delay_count();
	delays->entries[count] = *delay;
	delay_filter_count(delay, 1);
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
	uint32		i = 0;

	while (i < delay_count())
	{
		if (delay_end(&delays->entries[i], ms) <= now)
			delay_remove(i);
		else
			i++;
	}
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
	d->folded = (d->folded != 0);
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
		uint32		i;

		delays->lock = &(GetNamedLWLockTranche("fencing lock delays"))->lock;
		delays->capacity = table_capacity;
		pg_atomic_init_u32(&delays->count, 0);
		pg_atomic_init_u32(&delays->delay_ms, (uint32) lock_delay_ms);
		pg_atomic_init_u32(&delays->folds, 0);
		for (i = 0; i < LOCK_DELAY_FOLD_FILTER_SIZE; i++)
			pg_atomic_init_u32(&delays->fold_filter[i], 0);
		for (i = 0; i < lock_delay_filter_size(table_capacity); i++)
			pg_atomic_init_u32(&lock_delay_table_filter(delays, table_capacity)[i], 0);
	}
	fencing_lock_delay_count = &delays->count;
	fencing_lock_delay_folds = &delays->folds;
	fencing_lock_delay_fold_filter = delays->fold_filter;
	fencing_lock_delay_filter = lock_delay_table_filter(delays, table_capacity);
	fencing_lock_delay_filter_count = lock_delay_filter_size(table_capacity);
	LWLockRelease(AddinShmemInitLock);

	if (!IsUnderPostmaster)
	{
		TimestampTz now = GetCurrentTimestamp();
		int			restored = 0;
		int			i;

		if (!carried_valid)
			lock_delay_file_read();
		for (i = 0; i < carried_count; i++)
		{
			if (!delay_sanitize(&carried[i], now))
				continue;
			delay_put(&carried[i]);
			report_fold();
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
	delay.folded = false;
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
	fencing_lock_registry_held_locks(carry_held);
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
 * Whether the header of the file (of st_size bytes) is one this server
 * writes, announcing as many entries as the file holds; a damaged one is
 * reported.  Checked before anything is allocated, so that a damaged count
 * cannot ask the postmaster for a gigabyte.
 */
static bool
lock_delay_file_header_ok(const LockDelayFileHeader *header, off_t st_size)
{
	if (header->magic != LOCK_DELAY_MAGIC || header->version != LOCK_DELAY_VERSION ||
		header->entry_size != sizeof(FencingLockDelay) ||
		header->count > LOCK_DELAY_FILE_MAX_ENTRIES)
	{
		report_damaged_file(psprintf("Its header (magic 0x%08X, version %u, %u entries of %u bytes) is not one this server writes.",
									 header->magic, header->version,
									 header->count, header->entry_size));
		return false;
	}
	if ((Size) st_size != sizeof(*header) + mul_size(header->count, sizeof(FencingLockDelay)))
	{
		report_damaged_file(psprintf("Its header announces %u entries, but the file has %lld bytes.",
									 header->count, (long long) st_size));
		return false;
	}
	return true;
}

/*
 * The entries of the open file fd after its checked header, or NULL (the
 * damage reported) when they are short or their checksum does not match.
 */
static FencingLockDelay *
lock_delay_file_entries(int fd, const LockDelayFileHeader *header)
{
	Size		size = mul_size(header->count, sizeof(FencingLockDelay));
	FencingLockDelay *entries = palloc(Max(size, 1));
	pg_crc32c	crc;

	if (read(fd, entries, size) != (ssize_t) size)
	{
		report_damaged_file("The file is shorter than its entries.");
		return NULL;
	}
	INIT_CRC32C(crc);
	COMP_CRC32C(crc, entries, size);
	COMP_CRC32C(crc, header, offsetof(LockDelayFileHeader, crc));
	FIN_CRC32C(crc);
	if (!EQ_CRC32C(crc, header->crc))
	{
		report_damaged_file("Its checksum does not match its content.");
		return NULL;
	}
	return entries;
}

/*
 * Read the file written at the last shutdown into the carried delays.
 */
static void
lock_delay_file_read(void)
{
	LockDelayFileHeader header;
	FencingLockDelay *entries = NULL;
	struct stat st;
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
		report_damaged_file("The file is shorter than its header.");
	else if (lock_delay_file_header_ok(&header, st.st_size))
		entries = lock_delay_file_entries(fd, &header);
	CloseTransientFile(fd);
	if (entries == NULL)
		return;
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
	delay.folded = false;
	delay.since = GetCurrentTimestamp();
	if (!OidIsValid(delay.roleid))
		delay.roleid = GetSessionUserId();

	LWLockAcquire(delays->lock, LW_EXCLUSIVE);
	delay_put(&delay);
	LWLockRelease(delays->lock);
	report_fold();
	fencing_stat_add(FENCING_STAT_DELAYS_STARTED, 1);
}

/*
 * When the delay of a lock of this database ends, or 0 when none is in
 * force: a name's lock (permit 0) or permit n of a semaphore, or every
 * lock of this session's role.  Takes the lock shared; ended delays it
 * meets are dropped afterwards.  Called only when the table is not empty
 * (fencing_lock_delay_refuses).  A lookup, not a refusal: the grant path
 * that gives a lock back counts it.
 */
TimestampTz
fencing_lock_delay_until(int64 key, int permit)
{
	TimestampTz now = GetCurrentTimestamp();
	int			ms = delay_ms_in_force();
	Oid			roleid = GetSessionUserId();
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
		else if (delay_refuses(e, key, permit, roleid))
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
 * The view's name for a folded delay: the names it stands for are gone.
 */
static void
name_fold(FencingLockDelay *e)
{
	char	   *text;

	if (OidIsValid(e->roleid))
	{
		char	   *role = GetUserNameFromId(e->roleid, true);

		text = role != NULL ?
			psprintf("(every fencing lock of role %s)", role) :
			psprintf("(every fencing lock of role %u)", e->roleid);
	}
	else
		text = pstrdup("(every fencing lock)");
	e->namelen = Min(strlen(text), FENCING_NAME_MAX_BYTES);
	memcpy(e->name, text, e->namelen);
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
	for (i = 0; i < (uint32) *count; i++)
		if (copy[i].folded)
			name_fold(&copy[i]);
	return copy;
}

/*
 * SQL: fencing.clear_lock_delays(name text DEFAULT NULL) returns integer
 *
 * For an operator who knows a lost holder is gone for good: end the delays
 * of name (its lock, and every permit of a semaphore of that name) in this
 * database at once, or with NULL every delay that refuses a lock in this
 * database, folded delays included (one that also covers other databases
 * ends there too).  A name's delay that was folded ends only with its fold.
 * The delays that lapsed or broken leases left on those names end too
 * (fencing_lock_delay_also_clear).  Returns how many delays ended.
 * Revoked from PUBLIC: ending a delay early is what it exists to prevent.
 */
Datum
fencing_clear_lock_delays(PG_FUNCTION_ARGS)
{
	bool		every = PG_ARGISNULL(0);
	char		name[FENCING_NAME_MAX_BYTES + 1];
	int64		key = 0;
	int			cleared = 0;
	uint32		i = 0;

	if (!every)
	{
		int			len = fencing_canonical_name(PG_GETARG_DATUM(0), name);

		key = fencing_key_of_canonical(name, len);
	}
	if (delays == NULL)
		PG_RETURN_INT32(0);

	LWLockAcquire(delays->lock, LW_EXCLUSIVE);
	delay_purge(GetCurrentTimestamp(), delay_ms_in_force());
	while (i < delay_count())
	{
		FencingLockDelay *e = &delays->entries[i];

		if (every ? delay_in_database(e, MyDatabaseId) :
			(!e->folded && e->dboid == MyDatabaseId && e->key == key))
		{
			delay_remove(i);
			cleared++;
		}
		else
			i++;
	}
	LWLockRelease(delays->lock);
	if (also_clear != NULL)
		cleared += also_clear(every, key);
	PG_RETURN_INT32(cleared);
}

/*
 * SET, SET LOCAL, RESET, ALTER ROLE ... SET and ALTER DATABASE ... SET of
 * fencing.lock_delay: PostgreSQL refuses them with a bare "cannot be
 * changed now"; refuse them first with the same SQLSTATE and say where
 * the setting is changed.  set_config() does not come through here and
 * keeps PostgreSQL's message.
 */
void
fencing_lock_delay_refuse_set(Node *stmt)
{
	VariableSetStmt *set = NULL;

	if (IsA(stmt, VariableSetStmt))
		set = (VariableSetStmt *) stmt;
	else if (IsA(stmt, AlterRoleSetStmt))
		set = ((AlterRoleSetStmt *) stmt)->setstmt;
	else if (IsA(stmt, AlterDatabaseSetStmt))
		set = ((AlterDatabaseSetStmt *) stmt)->setstmt;

	if (set == NULL || set->name == NULL ||
		pg_strcasecmp(set->name, "fencing.lock_delay") != 0 ||
		set->kind == VAR_RESET_ALL)
		return;

	ereport(ERROR,
			(errcode(ERRCODE_CANT_CHANGE_RUNTIME_PARAM),
			 errmsg("parameter \"fencing.lock_delay\" cannot be changed now"),
			 errdetail("The delay is the same for every session, so that a holder cannot switch off the delay its own loss would start."),
			 errhint("Set fencing.lock_delay in postgresql.conf or with ALTER SYSTEM, then reload the configuration (SELECT pg_reload_conf()).")));
}

/*
 * A module above whose entries also keep names under a lock-delay (the
 * leases of leases.c) registers here, from _PG_init, how to end them:
 * fencing.clear_lock_delays() then ends those too.
 */
void
fencing_lock_delay_also_clear(int (*clear) (bool every, int64 key))
{
	also_clear = clear;
}

/*
 * fencing.lock_delay in force (as the postmaster published it), in
 * milliseconds, for the lock-delay a lapsed or broken lease leaves on its
 * name.
 */
int
fencing_lock_delay_ms(void)
{
	return delays != NULL ? delay_ms_in_force() : 0;
}
