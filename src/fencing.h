/*-------------------------------------------------------------------------
 *
 * fencing.h
 *		Declarations shared by the source files of the fencing extension.
 *
 * Each .c file under src/ owns one concern: fencing.c loads the module,
 * tokens.c serves fence tokens from shared memory, token_wal.c makes their
 * reservations durable, normalize.c canonicalises lock names, locks.c and
 * lock_registry.c take and show named locks, lock_delay.c keeps the locks
 * of lost holders ungrantable for a while, fence_trigger.c and
 * check_fence.c reject stale writes (fence_protect.c installs the trigger,
 * fence_ddl.c watches DDL on protected tables), statement_hooks.c knows
 * where in a statement the backend is, lease_ceiling.c ends a lease's
 * transaction at its max_hold, stats.c counts; compat.h holds what
 * differs between server versions.
 *
 * Copyright (c) 2026, the fencing developers
 *
 * IDENTIFICATION
 *		src/fencing.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef FENCING_H
#define FENCING_H

#include "postgres.h"

#include "catalog/objectaccess.h"
#include "catalog/pg_attribute.h"
#include "fmgr.h"
#include "nodes/pg_list.h"
#include "nodes/plannodes.h"
#include "port/atomics.h"
#include "storage/condition_variable.h"
#include "utils/relcache.h"
#include "utils/timestamp.h"

/*
 * SQLSTATEs of our own, class FN ("fencing").  A stale holder must stop, not
 * retry, so none of them is in class 40 (which frameworks retry) or P0001.
 */
#define ERRCODE_FENCING_STALE_TOKEN		MAKE_SQLSTATE('F','N','0','0','1')
#define ERRCODE_FENCING_KEY_COLLISION	MAKE_SQLSTATE('F','N','0','0','2')
#define ERRCODE_FENCING_NOT_PRELOADED	MAKE_SQLSTATE('F','N','0','0','3')

/*
 * Lock names: a canonical name is at most FENCING_NAME_MAX_BYTES bytes of
 * UTF-8.  Input longer than FENCING_NAME_MAX_INPUT_BYTES is refused before
 * any normalisation work (or detoasting) is done.
 */
#define FENCING_NAME_MAX_BYTES			200
#define FENCING_NAME_MAX_INPUT_BYTES	4096

/* fencing.c */
extern void fencing_error_if_standby(const char *what);

/* tokens.c */
extern void fencing_tokens_init(void);
extern int64 fencing_issue_token(void);
extern int64 fencing_read_latest_token(void);
extern int64 fencing_read_reserved_limit(void);

/* token_wal.c */
struct FencingTokenState;

/* What fencing.status() shows about reservations. */
typedef struct FencingTokenWalStatus
{
	int64		clock_floor;
	int			clock_tolerance_ms;
	bool		fresh_start_pending;
	bool		state_file_behind;
} FencingTokenWalStatus;

extern void fencing_token_wal_init(void);
extern void fencing_reserve_tokens(uint64 needed);
extern void fencing_state_file_load(struct FencingTokenState *state);
extern int64 fencing_clock_floor(void);
extern const char *fencing_state_file_path(void);
extern void fencing_token_wal_status(FencingTokenWalStatus *status);

/* normalize.c */
extern int	fencing_canonical_name(Datum name, char *buf);
extern int	fencing_canonical_name_of(Datum name, char *buf, const char *noun);
extern text *fencing_canonical_text(Datum name, const char *noun);
extern int64 fencing_key_of_canonical(const char *buf, int len);

/* locks.c */
extern void fencing_locks_init(void);
extern int	fencing_lease_ttl_in_force(void);

/* lock_registry.c */

/* How a registry entry holds its name, for the view's "mode" column. */
typedef enum FencingLockMode
{
	FENCING_LOCK_EXCLUSIVE = 0,
	FENCING_LOCK_SHARED,
	FENCING_LOCK_PERMIT			/* a permit of a semaphore */
} FencingLockMode;

extern void fencing_lock_registry_init(void);
extern int	fencing_lock_registry_capacity(void);
extern int	fencing_lock_registry_count(void);
extern int64 fencing_lock_registry_untracked(void);
extern int	fencing_lock_registry_claim(int64 key, const char *name, int namelen,
										FencingLockMode mode, int permit,
										int permits);
extern void fencing_lock_registry_wait(int slotno);
extern void fencing_lock_registry_set_permit(int slotno, int permit);
extern ConditionVariable *fencing_lock_registry_permit_cv(int64 key);
extern void fencing_lock_registry_permit_freed(int64 key);
extern void fencing_lock_registry_grant(int slotno, int64 token, bool after_wait);
extern uint32 fencing_lock_registry_releases(int64 key);
extern void fencing_lock_registry_release(int slotno);
extern void fencing_lock_registry_check_collision(int64 key, const char *name,
												  int namelen);
extern int	fencing_lock_registry_configured_capacity(void);

/* lock_delay.c */

/*
 * A lock whose holder was lost: a name's lock (permit 0) or one permit of a
 * semaphore, refused to everyone until fencing.lock_delay after "since".
 * Also what the registry reports of a lock held when the postmaster lets go
 * of shared memory, or when its holder exits (since is then not yet set).
 *
 * A folded delay (lock_delay.c, when the table is full) stands for delays
 * whose names it no longer lists: it refuses every fencing lock of its
 * database (InvalidOid: of every database) to its role (InvalidOid: to
 * every role).  "until" is filled in only by fencing_lock_delay_snapshot.
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

extern pg_atomic_uint32 *fencing_lock_delay_count;
extern void fencing_lock_delay_init(void);
extern void fencing_lock_delay_start(const FencingLockDelay *held);
extern TimestampTz fencing_lock_delay_until(int64 key, int permit);
extern void fencing_lock_delay_sleep(TimestampTz until, TimestampTz deadline);
extern FencingLockDelay *fencing_lock_delay_snapshot(int *count);
extern void fencing_lock_registry_describe(int slotno, FencingLockDelay *held);
extern void fencing_lock_registry_held_locks(void (*fn) (const FencingLockDelay *held));

/*
 * When the delay in force on a lock ends, or 0 when none is: the check of
 * every grant path.  With no delay anywhere, one atomic read.
 */
static inline TimestampTz
fencing_lock_delay_refuses(int64 key, int permit)
{
	if (likely(pg_atomic_read_u32(fencing_lock_delay_count) == 0))
		return 0;
	return fencing_lock_delay_until(key, permit);
}

/* fence_trigger.c, fence_protect.c, check_fence.c */
extern void fencing_fence_init(void);
extern char *fencing_qualified_relname(Relation rel);
extern void fencing_validate_fence_column(Relation rel, const char *column,
										  const char *caller);
extern void fencing_refuse_filled_fence_column(Relation rel, Form_pg_attribute attr,
											   const char *who);
extern void fencing_fence_run_end(void);
extern void fencing_raise_resource_fence(text *resource, int64 token);

/* The name protect() gives the trigger, so re-running it replaces it. */
#define FENCE_TRIGGER_NAME	"fencing_reject_stale"
/* the trigger's arguments when none are given, and protect()'s for a new table */
#define FENCE_DEFAULT_COLUMN	"fence"
#define FENCE_DEFAULT_MODE		"error"

/*
 * A row trigger that executes fencing.reject_stale(), as pg_trigger stores
 * it: protect() installs one named FENCE_TRIGGER_NAME, partitions carry
 * PostgreSQL's clone of their parent's, and a DBA may have written others.
 */
typedef struct FenceTrigger
{
	Oid			oid;
	char	   *name;
	int16		type;			/* pg_trigger.tgtype */
	char		enabled;		/* pg_trigger.tgenabled */
	bool		is_clone;		/* a partition's copy of its parent's trigger */
	char	   *column;			/* argument 1, default "fence" */
	char	   *mode;			/* argument 2, default "error" */
} FenceTrigger;

/* fence_protect.c */
extern Oid	fencing_reject_stale_function(void);
extern List *fencing_fence_triggers(Oid relid);
extern FenceTrigger *fencing_protect_trigger(Oid relid);
extern bool fencing_trigger_fires_here(const FenceTrigger *trigger);
extern char *fencing_qualified_relid_name(Oid relid);
extern void fencing_follow_new_children(Oid parentid);
extern void fencing_warn_other_row_triggers(Oid relid, const char *caller);

/* statement_hooks.c */
extern void fencing_statement_hooks_init(void);
extern struct QueryDesc *fencing_running_query(void);
extern bool fencing_called_from_top_level(void);
extern bool fencing_outside_transaction_block(void);
extern void fencing_lease_keep_limit(void);
extern int	fencing_statement_depth(void);

/* lease_ceiling.c */
extern void fencing_lease_ceiling_init(void);
extern int	fencing_lease_max_hold_ms(double usecs);
extern void fencing_lease_ceiling_set(const char *name, int namelen,
									  int max_hold_ms);
extern void fencing_lease_ceiling_keep(void);
extern void fencing_lease_idle_prepare(void);
extern void fencing_lease_idle_statement_start(void);
extern void fencing_lease_idle_statement_end(void);
extern void fencing_lease_idle_changed(void);
extern bool fencing_lease_idle_timer_fired(void);

/* fence_ddl.c */
extern void fencing_fence_utility_before(PlannedStmt *pstmt);
extern void fencing_fence_utility_after(PlannedStmt *pstmt);
extern void fencing_fence_object_access(ObjectAccessType access, Oid classId,
										Oid objectId, int subId, void *arg);
extern void fencing_fence_check_plan(PlannedStmt *plan);
extern void fencing_refuse_view_defaults_over(Oid relid);

/* stats.c */
typedef enum FencingStat
{
	FENCING_STAT_TOKENS_ISSUED,
	FENCING_STAT_RESERVATIONS,
	FENCING_STAT_RESERVATION_USEC,
	FENCING_STAT_LOCKS_GRANTED,
	FENCING_STAT_LOCKS_BUSY,
	FENCING_STAT_LOCKS_TIMED_OUT,
	FENCING_STAT_LEASES_GRANTED,
	FENCING_STAT_LEASES_EXPIRED,
	FENCING_STAT_STALE_REJECTED,
	FENCING_STAT_LOCK_GROUPS_GRANTED,
	FENCING_STAT_SHARED_LOCKS_GRANTED,
	FENCING_STAT_PERMITS_GRANTED,
	FENCING_STAT_LEASES_CEILING_ENDED,
	FENCING_STAT_DELAYS_STARTED,
	FENCING_STAT_DELAYED_REFUSALS,
	FENCING_STAT_COUNT
} FencingStat;

extern void fencing_stats_init(void);
extern void fencing_stat_add(FencingStat which, uint64 n);

#endif							/* FENCING_H */
