/*-------------------------------------------------------------------------
 *
 * locks.c
 *		Named locks: transaction-scoped advisory locks on hashed, normalised
 *		names, each grant handing out a fence token.
 *
 * A fencing lock IS the core advisory lock that
 * pg_try_advisory_xact_lock(fencing.lock_key(name)) takes: the same lock
 * tag, the same mode, owned by the transaction.  So code that uses the raw
 * advisory functions on the same key excludes and is excluded by ours (L2),
 * and the lock ends with its transaction, subtransaction rollback or
 * backend exit exactly as core advisory locks do (L3); nothing of ours has
 * to be cleaned up for the lock itself to go away.
 *
 * On top of the core lock this file keeps, per backend, a small table from
 * key to the token handed out in this transaction, so that taking the lock
 * again returns the same token (L5).  The table follows core's
 * subtransaction semantics: a lock first taken in a subtransaction that
 * rolls back is released by core, and its entry goes too; on subtransaction
 * commit core hands the lock to the parent, and so do we.  Entries are kept
 * in acquisition order, so the entries of the innermost subtransaction are
 * always the tail of the array.
 *
 * Waiting (fencing.lock) uses core's own lock wait: the queue is fair, the
 * deadlock detector sees us, and lock_timeout, statement_timeout and query
 * cancel interrupt the wait as for any lock.  A wait with a timeout runs
 * inside an internal subtransaction with lock_timeout lowered to the
 * timeout; only the resulting "lock timeout" error is turned into NULL, and
 * the subtransaction's rollback undoes the wait cleanly (including a grant
 * that raced with the timeout).
 *
 * Copyright (c) 2026, the fencing developers
 *
 * IDENTIFICATION
 *		src/locks.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "access/xact.h"
#include "common/hashfn.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lock.h"
#include "storage/proc.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/timestamp.h"

#include "fencing.h"

PG_FUNCTION_INFO_V1(fencing_try_lock);
PG_FUNCTION_INFO_V1(fencing_lock);
PG_FUNCTION_INFO_V1(fencing_lease);
PG_FUNCTION_INFO_V1(fencing_held_token);

/* A lock this transaction holds, and the token it was granted with. */
typedef struct HeldLock
{
	int64		key;
	int64		token;
	SubTransactionId subid;		/* (sub)transaction that owns the lock */
	int			slot;			/* registry slot, -1 when untracked */
	uint32		bucket;			/* position in held_index */
} HeldLock;

/*
 * The backend-local table, allocated once in TopMemoryContext and grown by
 * doubling: held[] in acquisition order, held_index[] an open-addressing
 * index over it (entry number + 1, 0 = empty) twice its size.  Removing
 * entries only from the tail, in reverse order of insertion, keeps linear
 * probing correct without tombstones.
 */
static HeldLock *held = NULL;
static uint32 *held_index = NULL;
static int	held_count = 0;
static int	held_capacity = 0;
static uint32 held_index_mask = 0;

#define HELD_INITIAL_CAPACITY	64

/* The registry slot of a fencing.lock() wait in progress, if any. */
static bool waiting = false;
static int	waiting_slot = -1;

static bool exit_callback_registered = false;

/*
 * Whether this transaction took a lease; the log hook uses it to count
 * sessions the server ended because a lease holder sat idle too long.
 */
static bool lease_in_force = false;

static emit_log_hook_type prev_emit_log_hook = NULL;

/* A lock name, canonicalised once per call. */
typedef struct LockRequest
{
	char		name[FENCING_NAME_MAX_BYTES + 1];
	int			namelen;
	int64		key;
	LOCKTAG		tag;
} LockRequest;

static void locks_xact_callback(XactEvent event, void *arg);
static void locks_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
								   SubTransactionId parentSubid, void *arg);
static void locks_shmem_exit(int code, Datum arg);
static void locks_emit_log(ErrorData *edata);

/*
 * Register the end-of-transaction callbacks; called from _PG_init, so every
 * backend inherits them.  They cost one comparison when no lock is held.
 */
void
fencing_locks_init(void)
{
	RegisterXactCallback(locks_xact_callback, NULL);
	RegisterSubXactCallback(locks_subxact_callback, NULL);
	prev_emit_log_hook = emit_log_hook;
	emit_log_hook = locks_emit_log;
}

/*
 * The idle-in-transaction timeout that enforces a lease ends the session
 * with a FATAL report and no code of ours in between; this hook sees that
 * report before the backend exits, which is the one place to count an
 * expired lease (fencing.stats.leases_expired).
 */
static void
locks_emit_log(ErrorData *edata)
{
	if (lease_in_force &&
		edata->elevel == FATAL &&
		edata->sqlerrcode == ERRCODE_IDLE_IN_TRANSACTION_SESSION_TIMEOUT)
	{
		fencing_stat_add(FENCING_STAT_LEASES_EXPIRED, 1);
		lease_in_force = false;
	}
	if (prev_emit_log_hook)
		prev_emit_log_hook(edata);
}

/*
 * Where a key starts probing.  Keys are already hashes of names, but raw
 * advisory keys need not be, so mix once more.
 */
static inline uint32
held_hash(int64 key)
{
	return murmurhash32((uint32) ((uint64) key ^ ((uint64) key >> 32)));
}

/*
 * Make room for one more entry before anything is changed, so that running
 * out of memory leaves the table and the registry consistent.  The first
 * call also arranges for slots to be freed if the backend exits in a way
 * that skips the transaction callbacks.
 */
static void
held_reserve(void)
{
	HeldLock   *new_held;
	uint32	   *new_index;
	int			new_capacity;
	uint32		new_mask;
	int			i;

	if (likely(held_count < held_capacity))
		return;

	if (!exit_callback_registered)
	{
		before_shmem_exit(locks_shmem_exit, (Datum) 0);
		exit_callback_registered = true;
	}

	new_capacity = held_capacity > 0 ? held_capacity * 2 : HELD_INITIAL_CAPACITY;
	new_mask = (uint32) new_capacity * 2 - 1;
	new_held = MemoryContextAlloc(TopMemoryContext,
								  sizeof(HeldLock) * new_capacity);
	new_index = MemoryContextAllocZero(TopMemoryContext,
									   sizeof(uint32) * (new_mask + 1));

	/* re-insert in acquisition order, so tail removal stays exact */
	for (i = 0; i < held_count; i++)
	{
		uint32		b = held_hash(held[i].key) & new_mask;

		while (new_index[b] != 0)
			b = (b + 1) & new_mask;
		new_held[i] = held[i];
		new_held[i].bucket = b;
		new_index[b] = (uint32) i + 1;
	}

	if (held)
		pfree(held);
	if (held_index)
		pfree(held_index);
	held = new_held;
	held_index = new_index;
	held_capacity = new_capacity;
	held_index_mask = new_mask;
}

/*
 * The entry for a key this transaction took through us, or NULL.
 */
static HeldLock *
held_find(int64 key)
{
	uint32		b;
	uint32		e;

	if (held_count == 0)
		return NULL;

	b = held_hash(key) & held_index_mask;
	while ((e = held_index[b]) != 0)
	{
		if (held[e - 1].key == key)
			return &held[e - 1];
		b = (b + 1) & held_index_mask;
	}
	return NULL;
}

/*
 * Remember a grant.  held_reserve() must have made room.
 */
static void
held_insert(int64 key, int64 token, int slot)
{
	uint32		b = held_hash(key) & held_index_mask;
	HeldLock   *h;

	Assert(held_count < held_capacity);
	while (held_index[b] != 0)
		b = (b + 1) & held_index_mask;

	h = &held[held_count];
	h->key = key;
	h->token = token;
	h->subid = GetCurrentSubTransactionId();
	h->slot = slot;
	h->bucket = b;
	held_index[b] = (uint32) held_count + 1;
	held_count++;
}

/*
 * Forget the most recent grant and free its registry slot.
 */
static void
held_pop(void)
{
	HeldLock   *h = &held[held_count - 1];

	fencing_lock_registry_release(h->slot);
	held_index[h->bucket] = 0;
	held_count--;
}

/*
 * Free the registry slot of an abandoned wait.
 */
static void
release_waiting(void)
{
	if (waiting)
	{
		waiting = false;
		fencing_lock_registry_release(waiting_slot);
		waiting_slot = -1;
	}
}

/*
 * The transaction ended: core has released (or is about to release) every
 * lock, so forget them all and free their slots.
 */
static void
release_all(void)
{
	release_waiting();
	while (held_count > 0)
		held_pop();
}

/*
 * Transaction end.  PREPARE is refused while fencing locks are held: the
 * prepared transaction would keep the lock with no session to renew a
 * lease or to end it, and the view could not say who holds it.
 */
static void
locks_xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_PRE_PREPARE:
			if (held_count > 0)
				ereport(ERROR,
						(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						 errmsg("cannot PREPARE a transaction that holds fencing locks"),
						 errdetail("A prepared transaction would keep the lock with no session to renew or end it."),
						 errhint("Commit or roll back instead, or take the lock in a transaction that is not prepared.")));
			break;
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
		case XACT_EVENT_PREPARE:
			lease_in_force = false;
			if (held_count > 0 || waiting)
				release_all();
			break;
		default:
			break;
	}
}

/*
 * Subtransaction end, mirroring core: on commit the subtransaction's locks
 * pass to the parent; on rollback core releases the locks it took (those
 * the parent already held stay), and any wait in progress is abandoned.
 * The subtransaction's entries are the tail of held[].
 */
static void
locks_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
					   SubTransactionId parentSubid, void *arg)
{
	int			i;

	switch (event)
	{
		case SUBXACT_EVENT_COMMIT_SUB:
			for (i = held_count - 1; i >= 0 && held[i].subid == mySubid; i--)
				held[i].subid = parentSubid;
			break;
		case SUBXACT_EVENT_ABORT_SUB:
			release_waiting();
			while (held_count > 0 && held[held_count - 1].subid == mySubid)
				held_pop();
			break;
		default:
			break;
	}
}

/*
 * Backend exit: proc exit normally aborts the open transaction first, which
 * frees everything through locks_xact_callback; this is the safety net for
 * an exit that skips it, so that no slot stays claimed by a dead backend.
 */
static void
locks_shmem_exit(int code, Datum arg)
{
	release_all();
}

/*
 * Canonicalise the name and build the advisory lock tag exactly as
 * pg_try_advisory_xact_lock(bigint) does for the same key.
 */
static void
prepare_request(LockRequest *req, Datum name)
{
	req->namelen = fencing_canonical_name(name, req->name);
	req->key = fencing_key_of_canonical(req->name, req->namelen);
	SET_LOCKTAG_ADVISORY(req->tag, MyDatabaseId,
						 (uint32) ((uint64) req->key >> 32),
						 (uint32) req->key, 1);
}

/*
 * The lock on this key is already ours under another canonical name: the
 * two names collide (L6), and answering with the other name's token would
 * let two holders believe they hold two different locks.
 */
static void
check_own_name(const HeldLock *h, const LockRequest *req)
{
	int			other_len;
	const char *other = fencing_lock_registry_own_name(h->slot, &other_len);

	if (other == NULL)
		return;					/* untracked: the name was not kept */
	if (other_len == req->namelen && memcmp(other, req->name, other_len) == 0)
		return;

	ereport(ERROR,
			(errcode(ERRCODE_FENCING_KEY_COLLISION),
			 errmsg("lock name \"%s\" collides with \"%.*s\"",
					req->name, other_len, other),
			 errdetail("Both names share the lock key %lld, which this transaction already holds under the other name.",
					   (long long) req->key),
			 errhint("Rename one of the two locks.")));
}

/*
 * The lock was granted (or was already ours): return the token of this
 * transaction's grant, or draw a fresh one and record it.  If a
 * fencing.lock() wait is in progress its registry slot becomes the grant's.
 */
static int64
remember_grant(LockRequest *req, LockAcquireResult res)
{
	int64		token;
	int			slot;

	if (res == LOCKACQUIRE_ALREADY_HELD || res == LOCKACQUIRE_ALREADY_CLEAR)
	{
		HeldLock   *h = held_find(req->key);

		if (h != NULL)
		{
			check_own_name(h, req);
			release_waiting();
			return h->token;
		}
		/* held, but taken by the raw advisory functions: give it a token */
	}

	token = fencing_issue_token();
	held_reserve();
	if (waiting)
	{
		slot = waiting_slot;
		fencing_lock_registry_grant(slot, token);
	}
	else
		slot = fencing_lock_registry_claim(req->key, req->name, req->namelen,
										   token, true);
	held_insert(req->key, token, slot);
	waiting = false;
	waiting_slot = -1;
	return token;
}

/*
 * One attempt without waiting.  True with the token when granted.
 */
static bool
try_acquire(LockRequest *req, int64 *token)
{
	LockAcquireResult res;

	res = LockAcquire(&req->tag, ExclusiveLock, false, true);
	if (res == LOCKACQUIRE_NOT_AVAIL)
		return false;
	*token = remember_grant(req, res);
	return true;
}

/*
 * Show the wait in fencing.locks before it starts.
 */
static void
begin_wait(LockRequest *req)
{
	if (!exit_callback_registered)
	{
		before_shmem_exit(locks_shmem_exit, (Datum) 0);
		exit_callback_registered = true;
	}
	waiting_slot = fencing_lock_registry_claim(req->key, req->name,
											   req->namelen, 0, false);
	waiting = true;
}

/*
 * Wait in core's lock queue for at most timeout_ms.  lock_timeout is
 * lowered to the timeout for the duration of the wait (unless the session's
 * own lock_timeout is shorter, which then wins and raises its usual error),
 * and the wait runs in an internal subtransaction so that the timeout's
 * error can be caught safely: the rollback removes us from the queue and
 * releases a grant that raced with the timeout.  Every other error (query
 * cancel, statement_timeout, deadlock, the session's lock_timeout) is
 * re-thrown.  Returns whether the lock was granted.
 */
static bool
wait_with_timeout(LockRequest *req, int timeout_ms, LockAcquireResult *res)
{
	MemoryContext oldcontext = CurrentMemoryContext;
	ResourceOwner oldowner = CurrentResourceOwner;
	int			session_lock_timeout = LockTimeout;
	bool		ours = (session_lock_timeout <= 0 ||
						timeout_ms <= session_lock_timeout);
	volatile bool granted = false;

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(oldcontext);

	PG_TRY();
	{
		if (ours)
			LockTimeout = timeout_ms;
		*res = LockAcquire(&req->tag, ExclusiveLock, false, false);

		/*
		 * A lock timeout that fired just as the lock was granted is still
		 * pending as a cancel; take it here, where it can be told apart,
		 * rather than let it cancel the caller's statement later.
		 */
		CHECK_FOR_INTERRUPTS();

		LockTimeout = session_lock_timeout;
		ReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(oldcontext);
		CurrentResourceOwner = oldowner;
		granted = true;
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		LockTimeout = session_lock_timeout;
		MemoryContextSwitchTo(oldcontext);
		edata = CopyErrorData();
		FlushErrorState();

		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(oldcontext);
		CurrentResourceOwner = oldowner;

		if (!ours || edata->sqlerrcode != ERRCODE_LOCK_NOT_AVAILABLE)
			ReThrowError(edata);
		FreeErrorData(edata);
	}
	PG_END_TRY();

	return granted;
}

/*
 * An interval as microseconds, as a double so that months and days cannot
 * overflow; a month counts as 30 days, as in interval comparison.
 */
static double
interval_usecs(const Interval *span)
{
	return (double) span->time +
		(double) span->day * USECS_PER_DAY +
		(double) span->month * DAYS_PER_MONTH * USECS_PER_DAY;
}

/*
 * A NULL lock name would silently mean "no lock"; say so instead.
 */
static void
error_if_null_name(FunctionCallInfo fcinfo)
{
	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("lock name must not be null")));
}

/*
 * SQL: fencing.try_lock(name).  The token when granted, NULL when another
 * transaction holds the lock.
 */
Datum
fencing_try_lock(PG_FUNCTION_ARGS)
{
	LockRequest req;
	int64		token;

	fencing_error_if_standby("fencing.try_lock()");
	error_if_null_name(fcinfo);
	prepare_request(&req, PG_GETARG_DATUM(0));

	if (try_acquire(&req, &token))
	{
		fencing_stat_add(FENCING_STAT_LOCKS_GRANTED, 1);
		PG_RETURN_INT64(token);
	}

	fencing_lock_registry_check_collision(req.key, req.name, req.namelen);
	fencing_stat_add(FENCING_STAT_LOCKS_BUSY, 1);
	PG_RETURN_NULL();
}

/*
 * SQL: fencing.lock(name, timeout).  Waits in core's lock queue: NULL
 * timeout waits until granted (or until lock_timeout, statement_timeout,
 * a deadlock or a cancel ends the statement with an error); a zero timeout
 * tries once; otherwise NULL when the timeout passes.  Timeouts are
 * rounded up to whole milliseconds and capped at INT_MAX milliseconds,
 * lock_timeout's own range.
 */
Datum
fencing_lock(PG_FUNCTION_ARGS)
{
	LockRequest req;
	int64		token;
	bool		has_timeout = !PG_ARGISNULL(1);
	int			timeout_ms = 0;
	LockAcquireResult res;

	fencing_error_if_standby("fencing.lock()");
	error_if_null_name(fcinfo);

	if (has_timeout)
	{
		double		usecs = interval_usecs(PG_GETARG_INTERVAL_P(1));

		if (usecs < 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("lock timeout must not be negative"),
					 errhint("Pass NULL to wait without a timeout, or zero to try once.")));
		timeout_ms = (int) Min(ceil(usecs / 1000.0), (double) INT_MAX);
	}

	prepare_request(&req, PG_GETARG_DATUM(0));

	if (try_acquire(&req, &token))
	{
		fencing_stat_add(FENCING_STAT_LOCKS_GRANTED, 1);
		PG_RETURN_INT64(token);
	}

	fencing_lock_registry_check_collision(req.key, req.name, req.namelen);

	if (has_timeout && timeout_ms == 0)
	{
		fencing_stat_add(FENCING_STAT_LOCKS_TIMED_OUT, 1);
		PG_RETURN_NULL();
	}

	begin_wait(&req);
	if (!has_timeout)
		res = LockAcquire(&req.tag, ExclusiveLock, false, false);
	else if (!wait_with_timeout(&req, timeout_ms, &res))
	{
		/* the subtransaction's rollback has already freed the wait's slot */
		release_waiting();
		fencing_stat_add(FENCING_STAT_LOCKS_TIMED_OUT, 1);
		PG_RETURN_NULL();
	}

	token = remember_grant(&req, res);
	fencing_stat_add(FENCING_STAT_LOCKS_GRANTED, 1);
	PG_RETURN_INT64(token);
}

/*
 * SQL: fencing.lease(name, ttl).  try_lock, plus a server-enforced lease:
 * for the rest of the transaction idle_in_transaction_session_timeout is at
 * most ttl (like SET LOCAL), so a holder that stalls between statements for
 * longer than ttl has its session ended by the server and the lock freed.
 * Any statement, such as fencing.held_token(), restarts the idle clock.  The
 * ttl is validated before the lock is tried, and rounded down to whole
 * milliseconds (a lease never lasts longer than asked).
 */
Datum
fencing_lease(PG_FUNCTION_ARGS)
{
	LockRequest req;
	int64		token;
	double		usecs;
	int			ttl_ms;
	int			current;

	fencing_error_if_standby("fencing.lease()");
	error_if_null_name(fcinfo);

	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("lease ttl must not be null"),
				 errhint("Use fencing.try_lock() for a lock without a lease.")));
	usecs = interval_usecs(PG_GETARG_INTERVAL_P(1));
	if (usecs <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("lease ttl must be positive")));
	if (usecs < 1000.0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("lease ttl must be at least 1 millisecond")));
	if (usecs / 1000.0 > (double) INT_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("lease ttl must be at most %d milliseconds", INT_MAX)));
	ttl_ms = (int) floor(usecs / 1000.0);

	prepare_request(&req, PG_GETARG_DATUM(0));

	if (!try_acquire(&req, &token))
	{
		fencing_lock_registry_check_collision(req.key, req.name, req.namelen);
		fencing_stat_add(FENCING_STAT_LOCKS_BUSY, 1);
		PG_RETURN_NULL();
	}

	/*
	 * Never lengthen an idle limit already in force (an earlier, shorter
	 * lease in this transaction, or the session's own setting): the server
	 * would end the session then anyway.
	 */
	current = IdleInTransactionSessionTimeout;
	if (current <= 0 || ttl_ms < current)
	{
		char		value[32];

		snprintf(value, sizeof(value), "%d", ttl_ms);
		(void) set_config_option("idle_in_transaction_session_timeout", value,
								 PGC_USERSET, PGC_S_SESSION,
								 GUC_ACTION_LOCAL, true, 0, false);
	}

	lease_in_force = true;
	fencing_stat_add(FENCING_STAT_LOCKS_GRANTED, 1);
	fencing_stat_add(FENCING_STAT_LEASES_GRANTED, 1);
	PG_RETURN_INT64(token);
}

/*
 * SQL: fencing.held_token(name).  The token of this transaction's grant of
 * the lock, or NULL when this transaction does not hold it through
 * fencing: the check a holder makes before each side effect.
 */
Datum
fencing_held_token(PG_FUNCTION_ARGS)
{
	LockRequest req;
	HeldLock   *h;

	fencing_error_if_standby("fencing.held_token()");
	prepare_request(&req, PG_GETARG_DATUM(0));

	h = held_find(req.key);
	if (h == NULL)
		PG_RETURN_NULL();
	check_own_name(h, &req);
	PG_RETURN_INT64(h->token);
}
