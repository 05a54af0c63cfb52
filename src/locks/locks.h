/*-------------------------------------------------------------------------
 *
 * locks.h
 *		The lock layer: named locks, each grant handing out a fence token.
 *
 * Above the token layer, below the fence layer.  Lowest first:
 *
 *	registry.c		the shared registry that names every lock held or
 *					awaited (fencing.locks, key collisions)
 *	delay.c			fencing.lock_delay: the locks of lost holders stay
 *					ungrantable for a while
 *	lease_ceiling.c	the timers of a lease: its max_hold, and its ttl where
 *					core's idle timeout does not reach
 *	held.c			what this transaction holds: its locks, which of them
 *					carry a lease, and the idle limit of those leases;
 *					the transaction, subtransaction and resource-owner
 *					callbacks that follow core's locks
 *	args.c			the arguments of the lock functions
 *	wait.c			a wait in core's lock queue bounded by a timeout
 *	lease_table.c	the shared table of the leases that outlive a
 *					transaction, its filter and its waiters' variables
 *	lease_store.c	their WAL records, redo, the state file, the keeper
 *					and the start of service
 *	leases.c		acquire_lease, renew_lease, release_lease,
 *					break_lease, the view fencing.leases, and the check
 *					every grant path makes
 *	grant.c			the grant machinery every lock function shares
 *	single.c		try_lock, lock, their shared forms, held_token
 *	groups.c		try_lock_all, lock_all
 *	semaphores.c	try_acquire, acquire
 *	tx_lease.c		lease(name, ttl, max_hold) and its idle limit
 *
 * The grant path is the hot one: what it needs from held.c and grant.c is
 * inline below, so that splitting the files added no call to it.
 *
 * Copyright (c) 2026, the fencing developers
 *
 * IDENTIFICATION
 *		src/locks/locks.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef FENCING_LOCKS_H
#define FENCING_LOCKS_H

#include "tokens/tokens.h"

#include "access/xact.h"
#include "access/xlogdefs.h"
#include "common/hashfn.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/condition_variable.h"
#include "storage/latch.h"
#include "storage/lock.h"
#include "storage/lwlock.h"
#include "utils/resowner.h"
#include "utils/timestamp.h"

/* ---------------------------------------------------------------------
 * registry.c
 * ---------------------------------------------------------------------
 */

/* How a registry entry holds its name, for the view's "mode" column. */
typedef enum FencingLockMode
{
	FENCING_LOCK_EXCLUSIVE = 0,
	FENCING_LOCK_SHARED,
	FENCING_LOCK_PERMIT,		/* a permit of a semaphore */
	FENCING_LOCK_LEASE			/* a lease that outlives a transaction */
} FencingLockMode;

/* What a registry slot stands for; FREE slots are not shown anywhere. */
typedef enum FencingLockSlotState
{
	LOCK_SLOT_FREE = 0,
	LOCK_SLOT_ACQUIRING,		/* LockAcquire running, or token being drawn */
	LOCK_SLOT_WAITING,			/* in core's lock queue (fencing.lock) */
	LOCK_SLOT_GRANTED
} FencingLockSlotState;

/*
 * The fields a slot's owner publishes; readers copy them as a whole (the
 * view builds its rows from such copies).
 */
typedef struct FencingLockSlotData
{
	uint8		state;			/* a FencingLockSlotState */
	uint8		namelen;
	uint8		mode;			/* a FencingLockMode */
	uint16		permit;			/* FENCING_LOCK_PERMIT: which permit, 1.. */
	uint16		permits;		/* and of how many */
	Oid			dboid;
	Oid			roleid;			/* the holder's session user */
	int			pid;
	int64		key;
	int64		token;			/* meaningful only when granted */
	TimestampTz since;
	char		name[FENCING_NAME_MAX_BYTES];
} FencingLockSlotData;

/*
 * A lock whose holder was lost: a name's lock (permit 0) or one permit of a
 * semaphore, refused to everyone until fencing.lock_delay after "since".
 * Also what the registry reports of a lock held when the postmaster lets go
 * of shared memory, or when its holder exits (since is then not yet set).
 *
 * A folded delay (delay.c, when the table is full) stands for delays whose
 * names it no longer lists: it refuses every fencing lock of its database
 * (InvalidOid: of every database) to its role (InvalidOid: to every role).
 * "until" is filled in only by fencing_lock_delay_snapshot.
 */
typedef struct FencingLockDelay
{
	Oid			dboid;
	Oid			roleid;			/* the lost holder's session user */
	int			pid;			/* of the lost holder */
	int64		key;
	TimestampTz since;			/* when the holder was lost */
	TimestampTz until;			/* when the delay ends (snapshots only) */
	uint16		permit;
	uint16		permits;
	uint8		mode;			/* a FencingLockMode */
	uint8		namelen;
	bool		folded;
	char		name[FENCING_NAME_MAX_BYTES];
} FencingLockDelay;

extern void fencing_lock_registry_init(void);
extern int	fencing_lock_registry_capacity(void);
extern int	fencing_lock_registry_configured_capacity(void);
extern int	fencing_lock_registry_count(void);
extern int64 fencing_lock_registry_untracked(void);
extern int	fencing_lock_registry_claim(int64 key, const char *name, int namelen,
										FencingLockMode mode, int permit,
										int permits);
extern void fencing_lock_registry_wait(int slotno);
extern void fencing_lock_registry_set_permit(int slotno, int permit);
extern int	fencing_lock_registry_permits_taken(int64 key, int permits,
												bool *taken);
extern void fencing_lock_registry_permit_waiting(int one);
extern void fencing_lock_registry_permit_freed(int64 key);
extern void fencing_lock_registry_grant(int slotno, int64 token, bool after_wait);
extern uint32 fencing_lock_registry_releases(int64 key);
extern void fencing_lock_registry_release(int slotno);
extern void fencing_lock_registry_check_collision(int64 key, const char *name,
												  int namelen);
extern void fencing_lock_registry_describe(int slotno, FencingLockDelay *held);
extern void fencing_lock_registry_held_locks(void (*fn) (const FencingLockDelay *held));
extern void fencing_lock_registry_rows(void (*fn) (const FencingLockSlotData *copy,
												   void *arg),
									   void *arg);

/* ---------------------------------------------------------------------
 * delay.c
 *
 * The layout of the shared table of lock delays is here for delay.c and
 * for the test module that damages it on purpose
 * (test/tools/lock_delay_poke.c).
 * ---------------------------------------------------------------------
 */

/* The name under which the table lives in shared memory. */
#define LOCK_DELAY_SHMEM_NAME	"fencing lock delays"

/*
 * The shared table: entries[0 .. count - 1] are in use, kept dense (a
 * removed entry is replaced by the last one).  The lock protects the
 * entries; count is also an atomic so that the grant paths can see "no
 * delay" without taking it.  delay_ms is fencing.lock_delay as the
 * postmaster last read it, the value every backend applies (a backend's own
 * copy waits for its next command to follow a reload).  The entries are
 * followed by capacity role OIDs, scratch space for whoever holds the lock
 * exclusively (delay.c counts the delays of each role in it), then by the
 * filter: counters that every delay of a name (not folded) adds one to at
 * LOCK_DELAY_FILTER_PROBES places chosen by its database, key and permit,
 * so that a grant whose places all read 0, while no delay is folded
 * (folds), knows without the lock that no delay concerns it.  A folded
 * delay counts in fold_filter at the place of its (database, role), either
 * of them InvalidOid for "every", so that while folds exist a grant looks
 * at the table only when one may concern its own database and role.
 * Counters and folds change only under the lock held exclusively.
 */
#define LOCK_DELAY_FOLD_FILTER_SIZE	64

typedef struct LockDelayTable
{
	LWLock	   *lock;
	int			capacity;
	pg_atomic_uint32 count;
	pg_atomic_uint32 delay_ms;
	pg_atomic_uint32 folds;		/* entries that are folded */
	pg_atomic_uint32 fold_filter[LOCK_DELAY_FOLD_FILTER_SIZE];
	FencingLockDelay entries[FLEXIBLE_ARRAY_MEMBER];
} LockDelayTable;

/* Filter counters per entry of the table, and the places of each delay. */
#define LOCK_DELAY_FILTER_PER_ENTRY	16
#define LOCK_DELAY_FILTER_PROBES	3
#define LOCK_DELAY_FILTER_MAX		(1 << 22)

/* The number of filter counters: a power of two. */
static inline uint32
lock_delay_filter_size(int capacity)
{
	uint32		size = 1024;

	while (size < LOCK_DELAY_FILTER_MAX &&
		   size < (uint64) capacity * LOCK_DELAY_FILTER_PER_ENTRY)
		size <<= 1;
	return size;
}

/* The bytes before the filter: header, entries and scratch space. */
static inline Size
lock_delay_table_filter_offset(int capacity)
{
	Size		size = offsetof(LockDelayTable, entries);

	size = add_size(size, mul_size(capacity, sizeof(FencingLockDelay)));
	size = add_size(size, mul_size(capacity, sizeof(Oid)));
	return CACHELINEALIGN(size);
}

/* Bytes of shared memory the table takes for this many entries. */
static inline Size
lock_delay_table_size(int capacity)
{
	return add_size(lock_delay_table_filter_offset(capacity),
					mul_size(lock_delay_filter_size(capacity),
							 sizeof(pg_atomic_uint32)));
}

/* The scratch space after the entries. */
static inline Oid *
lock_delay_table_scratch(LockDelayTable *table, int capacity)
{
	return (Oid *) &table->entries[capacity];
}

/* The filter after the scratch space. */
static inline pg_atomic_uint32 *
lock_delay_table_filter(LockDelayTable *table, int capacity)
{
	return (pg_atomic_uint32 *) ((char *) table +
								 lock_delay_table_filter_offset(capacity));
}

/*
 * The filter's places of a delay of (database, key, permit): bits of one
 * 64-bit mix (splitmix64's finaliser), each place its own slice.
 */
static inline uint64
lock_delay_filter_hash(Oid dboid, int64 key, int permit)
{
	uint64		x = (uint64) key ^
		((uint64) dboid * UINT64CONST(0x9E3779B97F4A7C15)) ^
		((uint64) permit << 48);

	x ^= x >> 30;
	x *= UINT64CONST(0xBF58476D1CE4E5B9);
	x ^= x >> 27;
	x *= UINT64CONST(0x94D049BB133111EB);
	x ^= x >> 31;
	return x;
}

static inline uint32
lock_delay_filter_place(uint64 hash, int probe, uint32 size)
{
	return (uint32) (hash >> (probe * 21)) & (size - 1);
}

/* The fold filter's place of a folded delay of (database, role). */
static inline uint32
lock_delay_fold_place(Oid dboid, Oid roleid)
{
	return (uint32) (lock_delay_filter_hash(dboid, (int64) roleid, 0) %
					 LOCK_DELAY_FOLD_FILTER_SIZE);
}

extern pg_atomic_uint32 *fencing_lock_delay_folds;
extern pg_atomic_uint32 *fencing_lock_delay_fold_filter;
extern pg_atomic_uint32 *fencing_lock_delay_filter;
extern uint32 fencing_lock_delay_filter_count;
extern pg_atomic_uint32 *fencing_lock_delay_count;
extern void fencing_lock_delay_init(void);
extern void fencing_lock_delay_refuse_set(Node *stmt);
extern void fencing_lock_delay_start(const FencingLockDelay *held);
extern TimestampTz fencing_lock_delay_until(int64 key, int permit);
extern void fencing_lock_delay_sleep(TimestampTz until, TimestampTz deadline);
extern FencingLockDelay *fencing_lock_delay_snapshot(int *count);
extern int	fencing_lock_delay_ms(void);
extern void fencing_lock_delay_also_clear(int (*clear) (bool every, int64 key));

/*
 * Whether no folded delay concerns this database and this session's role:
 * none of (database, role), (database, every role), (every database,
 * role), (every database, every role) counts one.
 */
static inline bool
fencing_lock_delay_folds_clear(void)
{
	Oid			roleid = GetSessionUserId();

	return pg_atomic_read_u32(&fencing_lock_delay_fold_filter[lock_delay_fold_place(MyDatabaseId, roleid)]) == 0 &&
		pg_atomic_read_u32(&fencing_lock_delay_fold_filter[lock_delay_fold_place(MyDatabaseId, InvalidOid)]) == 0 &&
		pg_atomic_read_u32(&fencing_lock_delay_fold_filter[lock_delay_fold_place(InvalidOid, roleid)]) == 0 &&
		pg_atomic_read_u32(&fencing_lock_delay_fold_filter[lock_delay_fold_place(InvalidOid, InvalidOid)]) == 0;
}

/*
 * Whether the filter says that no delay concerns (key, permit) in this
 * database: no folded delay of this database and role, and a 0 at one of
 * its places.
 */
static inline bool
fencing_lock_delay_filter_clear(int64 key, int permit)
{
	uint64		hash;
	int			probe;

	pg_read_barrier();
	if (unlikely(pg_atomic_read_u32(fencing_lock_delay_folds) != 0) &&
		!fencing_lock_delay_folds_clear())
		return false;
	hash = lock_delay_filter_hash(MyDatabaseId, key, permit);
	for (probe = 0; probe < LOCK_DELAY_FILTER_PROBES; probe++)
	{
		uint32		place = lock_delay_filter_place(hash, probe,
													fencing_lock_delay_filter_count);

		if (pg_atomic_read_u32(&fencing_lock_delay_filter[place]) == 0)
			return true;
	}
	return false;
}

/*
 * When the delay in force on a lock ends, or 0 when none is: the check of
 * every grant path.  With no delay anywhere, one atomic read; with delays
 * of other names or databases only, a few more, and no lock.
 */
static inline TimestampTz
fencing_lock_delay_refuses(int64 key, int permit)
{
	if (likely(pg_atomic_read_u32(fencing_lock_delay_count) == 0))
		return 0;
	if (likely(fencing_lock_delay_filter_clear(key, permit)))
		return 0;
	return fencing_lock_delay_until(key, permit);
}

/* ---------------------------------------------------------------------
 * lease_ceiling.c
 * ---------------------------------------------------------------------
 */
extern void fencing_lease_ceiling_init(void);
extern void fencing_lease_idle_ttl_source(int (*ttl_in_force) (void));
extern int	fencing_lease_max_hold_ms(double usecs);
extern void fencing_lease_ceiling_set(const char *name, int namelen,
									  int max_hold_ms);
extern void fencing_lease_ceiling_keep(void);
extern void fencing_lease_idle_prepare(void);
extern void fencing_lease_idle_statement_start(void);
extern void fencing_lease_idle_statement_end(void);
extern void fencing_lease_idle_changed(void);
extern bool fencing_lease_idle_timer_fired(void);

/* ---------------------------------------------------------------------
 * held.c
 * ---------------------------------------------------------------------
 */

/* A lock name, canonicalised once per call (grant.c). */
typedef struct LockRequest
{
	char		name[FENCING_NAME_MAX_BYTES + 1];
	int			namelen;
	int64		key;
	LOCKTAG		tag;
	LOCKMODE	lockmode;		/* ExclusiveLock or ShareLock */
	uint16		permit;			/* a semaphore's permit number, or 0 */
} LockRequest;

/* A lock this transaction holds, and the token it was granted with. */
typedef struct HeldLock
{
	int64		key;
	int64		token;
	ResourceOwner owner;		/* the one holding core's lock */
	SubTransactionId lease_subid;	/* outermost one that took a lease on
									 * it, or InvalidSubTransactionId */
	LOCKMODE	lockmode;		/* ExclusiveLock or ShareLock */
	uint16		permit;			/* a semaphore's permit number, or 0 */
	int			slot;			/* registry slot */
	uint32		bucket;			/* position in the index */
	int			namelen;
	char		name[FENCING_NAME_MAX_BYTES];	/* canonical, not terminated */
} HeldLock;

/*
 * The backend-local table, allocated in TopMemoryContext and grown by
 * doubling: locks[] in acquisition order, index[] an open-addressing
 * index over it (entry number + 1, 0 = empty) twice its size.  Removing
 * entries only from the tail, in reverse order of insertion, keeps linear
 * probing correct without tombstones.  Entries [0, settled) belong to
 * TopTransactionResourceOwner, whose locks go only at the end of the
 * transaction: the release of any other owner need not look at them.
 * held.c changes it; the grant paths read it.
 */
typedef struct FencingHeldTable
{
	HeldLock   *locks;
	uint32	   *index;
	int			count;
	int			capacity;
	uint32		mask;
	int			settled;
} FencingHeldTable;

/*
 * The registry slot of a lock being taken or awaited, claimed before
 * LockAcquire and not yet in the table, and the subtransaction that
 * claimed it: the grant paths set it, held.c frees it when that
 * (sub)transaction aborts.  permit_key is set while the pending slot is a
 * semaphore's, from the grant of a permit's lock until its entry is in the
 * table: an abort in between frees the permit, and its waiters must hear
 * of it.
 */
typedef struct FencingPendingLock
{
	int			slot;			/* -1: none */
	SubTransactionId subid;
	bool		permit_key_set;
	int64		permit_key;
} FencingPendingLock;

extern FencingHeldTable fencing_held;
extern FencingPendingLock fencing_pending;

extern void fencing_locks_init(void);
extern void fencing_held_grow(void);
extern HeldLock *fencing_held_find(int64 key, bool permit);
extern HeldLock *fencing_held_insert(const LockRequest *req, int64 token,
									 int slot);
extern void fencing_held_pop(void);
extern void fencing_release_pending(void);
extern void fencing_held_take_lease(HeldLock *h);
extern void fencing_lease_limit_reserve(void);
extern void fencing_lease_limit_push(int ttl_ms, bool by_use);
extern int	fencing_lease_ttl_in_force(void);

/*
 * Make room for one more entry before anything is changed, so that running
 * out of memory leaves the table and the registry consistent.
 */
static inline void
fencing_held_reserve(void)
{
	if (likely(fencing_held.count < fencing_held.capacity))
		return;
	fencing_held_grow();
}

/*
 * The pending lock was granted: remember it under this token (0 while a
 * group is still being taken; its registry slot then stays "acquiring").
 * From here on the entry, not the pending slot, owns the slot.
 */
static inline HeldLock *
fencing_hold_pending(const LockRequest *req, int64 token)
{
	HeldLock   *h = fencing_held_insert(req, token, fencing_pending.slot);

	fencing_pending.slot = -1;
	fencing_pending.subid = InvalidSubTransactionId;
	return h;
}

/* ---------------------------------------------------------------------
 * args.c
 * ---------------------------------------------------------------------
 */
extern void fencing_report_null_name(void);
extern bool fencing_timeout_arg(FunctionCallInfo fcinfo, int argno,
								int64 *timeout_ms);
extern int	fencing_ttl_arg_ms(const Interval *ttl);

/*
 * An interval as microseconds, as a double so that months and days cannot
 * overflow; a month counts as 30 days, as in interval comparison.
 */
static inline double
fencing_interval_usecs(const Interval *span)
{
	return (double) span->time +
		(double) span->day * USECS_PER_DAY +
		(double) span->month * DAYS_PER_MONTH * USECS_PER_DAY;
}

/* A NULL lock name would silently mean "no lock"; say so instead. */
static inline void
fencing_error_if_null_name(FunctionCallInfo fcinfo)
{
	if (unlikely(PG_ARGISNULL(0)))
		fencing_report_null_name();
}

/* ---------------------------------------------------------------------
 * wait.c
 * ---------------------------------------------------------------------
 */
extern bool fencing_lock_wait_with_timeout(const LOCKTAG *tag,
										   LOCKMODE lockmode, int timeout_ms);

/* ---------------------------------------------------------------------
 * lease_table.c
 *
 * The leases that outlive a transaction.  A lease is an entry of one
 * shared table keyed by (database, lock key); lease_table.c owns the
 * table, lease_store.c makes it durable, leases.c has the SQL functions
 * and the check of the grant paths.
 * ---------------------------------------------------------------------
 */

/* The name of the table in shared memory and of its LWLock tranche. */
#define LEASE_TABLE_SHMEM_NAME		"fencing leases"

/* The bound on a lease's holder text, in bytes of UTF-8. */
#define FENCING_LEASE_HOLDER_MAX_BYTES	256

/*
 * The buckets of (database, key) that the waiters' condition variables and
 * the record of each bucket's last change go by.  A power of two.
 */
#define FENCING_LEASE_FILTER_SIZE	4096

/*
 * The filter of the grant paths: counters that every entry adds one to at
 * LEASE_GRANT_FILTER_PROBES places chosen by its database and key, so
 * that a grant whose places are not all non-zero knows without the lock
 * that no lease holds its name.  LEASE_GRANT_FILTER_PER_ENTRY counters per
 * entry of the table, at least LEASE_GRANT_FILTER_MIN: at a full table
 * about one grant in 300 looks at the table.
 */
#define LEASE_GRANT_FILTER_PER_ENTRY	16
#define LEASE_GRANT_FILTER_MIN			4096
#define LEASE_GRANT_FILTER_PROBES		3

/*
 * Waiters for a leased name sleep on one of these, chosen by the name's
 * filter bucket; a release or a break wakes every sleeper of its variable.
 */
#define LEASE_CV_COUNT		1024

StaticAssertDecl(FENCING_LEASE_FILTER_SIZE % LEASE_CV_COUNT == 0,
				 "every filter bucket maps to one condition variable");

/* LeaseData.flags */
#define LEASE_FLAG_BROKEN	0x01	/* broken by an operator */
#define LEASE_FLAG_ENDED	0x02	/* its end was decided: never held again */
#define LEASE_FLAGS_KNOWN	(LEASE_FLAG_BROKEN | LEASE_FLAG_ENDED)

/*
 * What a lease is, as WAL records and the state file carry it.  An ended
 * lease (lapsed, or broken: then expires_at is the moment of the break)
 * keeps its entry for as long as the lock-delay keeps its name from
 * everyone.
 */
typedef struct LeaseData
{
	Oid			dboid;
	Oid			roleid;			/* who acquired it: it renews, uses, releases */
	int64		key;
	int64		token;
	int32		ttl_ms;			/* the ttl it was taken with: renew's default */
	int32		span_ms;		/* the ttl of its last acquisition or renewal */
	TimestampTz acquired_at;
	TimestampTz renewed_at;
	TimestampTz expires_at;
	uint8		flags;
	uint8		namelen;
	int16		holderlen;		/* -1: no holder given */
	char		name[FENCING_NAME_MAX_BYTES];	/* canonical, not terminated */
	char		holder[FENCING_LEASE_HOLDER_MAX_BYTES];
} LeaseData;

/* Which of the table's two heaps holds an entry. */
#define LEASE_HEAP_LIVE		0	/* not ended: by expiry, for the lapses */
#define LEASE_HEAP_ENDED	1	/* ended: by end, for the drops */

/*
 * An entry of the table.  Its number never changes while it is in use:
 * it is also its slot in the state file.  changecount is odd while the
 * entry is being written, so that the postmaster, which copies entries
 * without the lock when it lets go of shared memory, can skip one a dying
 * backend left half written.  seq is the number of its last change.
 */
typedef struct Lease
{
	uint32		changecount;
	bool		in_use;
	bool		dirty;			/* waits in the dirty ring for the file */
	uint8		heap;			/* LEASE_HEAP_LIVE or LEASE_HEAP_ENDED */
	int32		heap_pos;
	uint64		seq;
	LeaseData	data;
} Lease;

/*
 * The table.  entries[capacity] with a stack of the free ones, an
 * open-addressing index over the entries in use (entry number + 1, 0 =
 * empty) of index_mask + 1 slots, at least twice the capacity, two binary
 * heaps of the entries in use (live ones by expires_at, ended ones by the
 * moment they ended), the dirty ring (entries changed since the keeper
 * last wrote them to the file, each once, oldest first) and a count of
 * the entries of each role (role_counts, a shared hash table).  lock
 * protects all of that and count, seq, last_known, serving, last_lsn and
 * the buckets' last changes.
 *
 * seq numbers the changes; every change is a WAL record that carries its
 * number, and the entry and its file slot carry the number of their last
 * change, so that redo never takes an entry back to an older state; redo
 * skips the records up to file_covered altogether, the changes the file
 * read at start already held (a name released since would otherwise come
 * back for a while and need an entry).
 * bucket_seq[b] and bucket_lsn[b] are the number and the record of the
 * last change of an entry of filter bucket b: what must be on disk before
 * a caller is told that a lease of that bucket ended.  file_seq says that
 * every change up to it is in the file on disk; flushing is the pid of the
 * process writing the file, 0 when none, and flushed wakes those waiting
 * for it.  last_known is the last moment at which the state is known to
 * have held (the file's moment, the newest record's), used when the
 * server starts serving; serving is set once it has.
 *
 * The grant filter (fencing_lease_filter, after the table's arrays) is
 * changed only under the lock and read without it: a grant on a name no
 * lease holds costs one atomic read, or a few.
 */
typedef struct LeaseTable
{
	LWLock	   *lock;
	int			capacity;
	uint32		index_mask;
	int			count;
	int			nfree;
	int			heap_count[2];
	int			dirty_head;
	int			dirty_count;
	bool		serving;
	uint64		seq;
	uint64		file_covered;	/* every change up to it was in the file at start */
	TimestampTz last_known;
	XLogRecPtr	last_lsn;		/* of the newest record */
	Latch	   *keeper_latch;
	pg_atomic_uint32 keeper_wanted; /* a change needs no latch to be written */
	pg_atomic_uint64 file_seq;
	pg_atomic_uint32 flushing;
	ConditionVariable flushed;
	uint64		bucket_seq[FENCING_LEASE_FILTER_SIZE];
	XLogRecPtr	bucket_lsn[FENCING_LEASE_FILTER_SIZE];
	ConditionVariable cvs[LEASE_CV_COUNT];
} LeaseTable;

/* Where an entry stands at a given moment. */
typedef enum LeaseState
{
	LEASE_LIVE,					/* held until expires_at */
	LEASE_DELAYED,				/* ended, under its lock-delay */
	LEASE_GONE					/* nothing left: the entry is garbage */
} LeaseState;

extern LeaseTable *fencing_lease_table;
extern Lease *fencing_lease_entries;
extern pg_atomic_uint32 *fencing_lease_filter;
extern uint32 fencing_lease_filter_mask;

extern Size fencing_lease_table_size(int capacity);
extern bool fencing_lease_table_attach(int capacity);
extern int	fencing_lease_find(Oid dboid, int64 key);
extern int	fencing_lease_put(int entry, const LeaseData *data, uint64 seq);
extern void fencing_lease_remove(int entry, uint64 seq);
extern int	fencing_lease_heap_top(int heap);
extern int	fencing_lease_heap_entry(int heap, int pos);
extern int	fencing_lease_dirty_pop(void);
extern void fencing_lease_dirty_again(int entry);
extern void fencing_lease_load_at(int entry, const LeaseData *data, uint64 seq);
extern void fencing_lease_loaded(void);
extern int	fencing_lease_role_count(Oid roleid);
extern LeaseState fencing_lease_state(const Lease *lease, TimestampTz now,
									  TimestampTz *until);

/* Where a (database, key) lies in the filter and the table's index. */
static inline uint32
fencing_lease_hash(Oid dboid, int64 key)
{
	return hash_combine(murmurhash32((uint32) dboid),
						murmurhash32((uint32) ((uint64) key ^ ((uint64) key >> 32))));
}

/* The filter bucket of (database, key). */
static inline uint32
fencing_lease_bucket(Oid dboid, int64 key)
{
	return fencing_lease_hash(dboid, key) & (FENCING_LEASE_FILTER_SIZE - 1);
}

/*
 * The grant filter's places of (database, key): slices of one 64-bit mix
 * (splitmix64's finaliser).
 */
static inline uint64
fencing_lease_filter_hash(Oid dboid, int64 key)
{
	uint64		x = (uint64) key ^ ((uint64) dboid * UINT64CONST(0x9E3779B97F4A7C15));

	x ^= x >> 30;
	x *= UINT64CONST(0xBF58476D1CE4E5B9);
	x ^= x >> 27;
	x *= UINT64CONST(0x94D049BB133111EB);
	x ^= x >> 31;
	return x;
}

static inline uint32
fencing_lease_filter_place(uint64 hash, int probe)
{
	return (uint32) (hash >> (probe * 21)) & fencing_lease_filter_mask;
}

/* The condition variable the waiters for (database, key) sleep on. */
static inline ConditionVariable *
fencing_lease_cv(Oid dboid, int64 key)
{
	return &fencing_lease_table->cvs[fencing_lease_bucket(dboid, key) %
									 LEASE_CV_COUNT];
}

/* Is the lease's end decided (lapsed or broken, and noted)? */
static inline bool
fencing_lease_ended(const LeaseData *d)
{
	return (d->flags & LEASE_FLAG_ENDED) != 0;
}

/* ---------------------------------------------------------------------
 * lease_store.c
 * ---------------------------------------------------------------------
 */

/* The info codes of the lease records under fencing's resource manager. */
#define XLOG_FENCING_LEASE_PUT		0x10
#define XLOG_FENCING_LEASE_DROP		0x20

/* What a change must make durable before its caller may tell anyone. */
typedef struct LeaseDurable
{
	uint64		seq;			/* every change up to it in the file */
	XLogRecPtr	lsn;			/* every record up to it flushed, confirmed */
} LeaseDurable;

extern void fencing_lease_store_init(void);
extern Size fencing_lease_store_shmem_size(int capacity);
extern void fencing_lease_store_startup(void);
extern uint64 fencing_lease_log(uint8 info, const LeaseData *data,
								TimestampTz at);
extern void fencing_lease_changed(void);
extern void fencing_lease_durable_of(Oid dboid, int64 key, LeaseDurable *d);
extern void fencing_lease_make_durable(const LeaseDurable *d);
extern void fencing_lease_note_end(int entry, TimestampTz now);
extern int	fencing_lease_lapse_due(TimestampTz now, int limit);
extern TimestampTz fencing_lease_next_event(TimestampTz now);
extern void fencing_lease_ensure_serving(void);

/* ---------------------------------------------------------------------
 * leases.c
 * ---------------------------------------------------------------------
 */

/* A lease as the views show it (fencing_lease_snapshot). */
typedef struct FencingLeaseRow
{
	Oid			dboid;
	Oid			roleid;			/* the session user that acquired it */
	bool		visible;		/* name, token and holder may be shown */
	int64		key;
	int64		token;
	TimestampTz acquired_at;
	TimestampTz renewed_at;
	TimestampTz expires_at;
	TimestampTz delayed_until;	/* 0 while the lease is held */
	uint8		namelen;
	int16		holderlen;		/* -1: none */
	char		name[FENCING_NAME_MAX_BYTES];
	char		holder[FENCING_LEASE_HOLDER_MAX_BYTES];
} FencingLeaseRow;

extern void fencing_leases_init(void);
extern TimestampTz fencing_lease_until(int64 key, const char *name, int namelen);
extern void fencing_lease_sleep(int64 key, const char *name, int namelen,
								TimestampTz deadline);
extern int	fencing_lease_check_for_use(FunctionCallInfo fcinfo, int64 *token);
extern void fencing_lease_renew_for_use(FunctionCallInfo fcinfo);
extern FencingLeaseRow *fencing_lease_snapshot(int *count);

/*
 * When the lease on a name of this database, or the lock-delay it left,
 * ends, or 0 when there is none: the check of every grant path, made while
 * holding the name's core lock.  Raises FN002 when the key is leased under
 * another name.  With no lease anywhere, one atomic read; with many, a few.
 */
static inline TimestampTz
fencing_lease_refuses(int64 key, const char *name, int namelen)
{
	uint64		hash = fencing_lease_filter_hash(MyDatabaseId, key);
	int			probe;

	for (probe = 0; probe < LEASE_GRANT_FILTER_PROBES; probe++)
		if (likely(pg_atomic_read_u32(&fencing_lease_filter[fencing_lease_filter_place(hash, probe)]) == 0))
			return 0;
	return fencing_lease_until(key, name, namelen);
}

/* ---------------------------------------------------------------------
 * grant.c
 * ---------------------------------------------------------------------
 */
extern void fencing_report_name_collision(const HeldLock *h,
										  const LockRequest *req);
extern HeldLock *fencing_held_again(const LockRequest *req);
extern bool fencing_attempt(const LockRequest *req);
extern bool fencing_wait_for_grant(const LockRequest *req, bool has_timeout,
								   TimestampTz deadline);
extern void fencing_warn_if_autocommit(const LockRequest *reqs, int nreqs,
									   const char *function);
extern HeldLock *fencing_take_without_waiting(const LockRequest *req,
											  const char *function);

/*
 * The advisory lock tag of a key, exactly as pg_try_advisory_xact_lock
 * (bigint) and pg_try_advisory_xact_lock_shared(bigint) build it for the
 * same key; they differ only in the lock mode.
 */
static inline void
fencing_set_advisory_tag(LOCKTAG *tag, int64 key)
{
	SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId,
						 (uint32) ((uint64) key >> 32),
						 (uint32) key, 1);
}

/* Canonicalise the name and build its advisory lock tag. */
static inline void
fencing_prepare_request(LockRequest *req, Datum name, LOCKMODE lockmode)
{
	req->namelen = fencing_canonical_name(name, req->name);
	req->key = fencing_key_of_canonical(req->name, req->namelen);
	fencing_set_advisory_tag(&req->tag, req->key);
	req->lockmode = lockmode;
	req->permit = 0;
}

/*
 * The lock on this key is already ours under another canonical name: the
 * two names collide (L6), and answering with the other name's token would
 * let two holders believe they hold two different locks.
 */
static inline void
fencing_check_own_name(const HeldLock *h, const LockRequest *req)
{
	if (likely(h->namelen == req->namelen &&
			   memcmp(h->name, req->name, h->namelen) == 0))
		return;
	fencing_report_name_collision(h, req);
}

/*
 * When the lock-delay in force on a lock ends, or 0 when none is: what
 * every grant path asks.
 */
static inline TimestampTz
fencing_delay_in_force(int64 key, int permit)
{
	return fencing_lock_delay_refuses(key, permit);
}

/*
 * Core has just granted the lock: give it back when a lock-delay is in
 * force on it (its last holder was lost, delay.c), and count the refusal.
 * Returns when the delay ends, or 0 when the grant stands; with no delay
 * anywhere that costs one atomic read.  Checked after the grant, not
 * before, so that a holder lost while we were taking the lock (whose delay
 * starts before core releases its lock) is always seen.
 */
static inline TimestampTz
fencing_give_back_if_delayed(const LOCKTAG *tag, LOCKMODE lockmode,
							 int64 key, int permit)
{
	TimestampTz until = fencing_delay_in_force(key, permit);

	if (unlikely(until != 0))
	{
		LockRelease(tag, lockmode, false);
		fencing_stat_add(FENCING_STAT_DELAYED_REFUSALS, 1);
	}
	return until;
}

/*
 * Core has just granted the name's lock: give it back when a lease that
 * outlives its transaction holds the name, or the lock-delay of a lapsed
 * or broken one is in force (leases.c).  With no lease in the name's
 * bucket that costs one atomic read.  FN002 when the key is leased under
 * another name.
 */
static inline bool
fencing_give_back_if_leased(const LockRequest *req)
{
	if (likely(fencing_lease_refuses(req->key, req->name, req->namelen) == 0))
		return false;
	LockRelease(&req->tag, req->lockmode, false);
	return true;
}

/*
 * The pending lock was granted: draw its token, publish it and remember the
 * grant.  If drawing the token fails, the lock and the pending slot go with
 * the (sub)transaction's abort.
 */
static inline HeldLock *
fencing_grant(const LockRequest *req, bool after_wait)
{
	int64		token = fencing_issue_token();

	fencing_lock_registry_grant(fencing_pending.slot, token, after_wait);
	return fencing_hold_pending(req, token);
}

/* ---------------------------------------------------------------------
 * tx_lease.c
 * ---------------------------------------------------------------------
 */
extern void fencing_lease_keep_limit(void);
extern void fencing_lease_idle_limit_for_use(int ttl_ms);

#endif							/* FENCING_LOCKS_H */
