/* fencing--1.3.sql */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION fencing" to load this file. \quit

/*
 * Every object lives in schema fencing (the control file names it and the
 * extension is not relocatable).  Calls inside this script are
 * schema-qualified, and functions not written in C pin search_path, so a
 * caller's search_path cannot redirect them.
 */

------------------------------------------------------------------------
-- Fence tokens (src/tokens/)
------------------------------------------------------------------------

CREATE FUNCTION fencing.next_token()
RETURNS bigint
AS 'MODULE_PATHNAME', 'fencing_next_token'
LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;

COMMENT ON FUNCTION fencing.next_token() IS
'a fresh fence token, greater than every token returned before this call began, cluster-wide and durable';

CREATE FUNCTION fencing.latest_token()
RETURNS bigint
AS 'MODULE_PATHNAME', 'fencing_latest_token'
LANGUAGE C VOLATILE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION fencing.latest_token() IS
'the highest fence token issued so far; no side effect';

CREATE FUNCTION fencing.advance_token(at_least bigint)
RETURNS bigint
AS 'MODULE_PATHNAME', 'fencing_advance_token'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION fencing.advance_token(bigint) IS
'make every later token greater than at_least (never moves back); owner or superuser only';

REVOKE ALL ON FUNCTION fencing.advance_token(bigint) FROM PUBLIC;

------------------------------------------------------------------------
-- Lock names (src/base/normalize.c)
------------------------------------------------------------------------

CREATE FUNCTION fencing.normalize_name(name text)
RETURNS text
AS 'MODULE_PATHNAME', 'fencing_normalize_name'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION fencing.normalize_name(text) IS
'canonical lock name: NFKC_Casefold, trimmed, white-space runs collapsed to one space';

CREATE FUNCTION fencing.lock_key(name text)
RETURNS bigint
AS 'MODULE_PATHNAME', 'fencing_lock_key'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION fencing.lock_key(text) IS
'hashtextextended(fencing.normalize_name(name), 0) computed on the UTF-8 bytes: the advisory lock key';

------------------------------------------------------------------------
-- Named locks (src/locks/)
------------------------------------------------------------------------

CREATE FUNCTION fencing.try_lock(name text)
RETURNS bigint
AS 'MODULE_PATHNAME', 'fencing_try_lock'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION fencing.try_lock(text) IS
'take the transaction-scoped advisory lock for name; a fence token if granted, NULL if busy';

CREATE FUNCTION fencing.lock(name text, timeout interval DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'fencing_lock'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION fencing.lock(text, interval) IS
'wait for the transaction-scoped advisory lock for name; a fence token, or NULL when timeout passes';

CREATE FUNCTION fencing.lease(name text, ttl interval,
							  max_hold interval DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'fencing_lease'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION fencing.lease(text, interval, interval) IS
'try_lock plus a server-enforced lease: a session idle in the transaction longer than ttl is ended, and with max_hold its transaction ends max_hold after the call, busy or idle';

CREATE FUNCTION fencing.try_lock_all(names text[])
RETURNS bigint
AS 'MODULE_PATHNAME', 'fencing_try_lock_all'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION fencing.try_lock_all(text[]) IS
'take the locks of all names or of none; one fence token for the group if granted, NULL if any is busy';

CREATE FUNCTION fencing.lock_all(names text[], timeout interval DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'fencing_lock_all'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION fencing.lock_all(text[], interval) IS
'wait for the locks of all names, taken in key order; one fence token for the group, or NULL with none held when timeout passes';

CREATE FUNCTION fencing.try_lock_shared(name text)
RETURNS bigint
AS 'MODULE_PATHNAME', 'fencing_try_lock_shared'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION fencing.try_lock_shared(text) IS
'take the transaction-scoped advisory lock for name in shared mode; a fence token if granted, NULL if busy';

CREATE FUNCTION fencing.lock_shared(name text, timeout interval DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'fencing_lock_shared'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION fencing.lock_shared(text, interval) IS
'wait for the transaction-scoped advisory lock for name in shared mode; a fence token, or NULL when timeout passes';

CREATE FUNCTION fencing.try_acquire(name text, permits integer)
RETURNS bigint
AS 'MODULE_PATHNAME', 'fencing_try_acquire'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION fencing.try_acquire(text, integer) IS
'take one of the permits of the counting semaphore name (at most permits holders); a fence token of its own if granted, NULL if all are held';

CREATE FUNCTION fencing.acquire(name text, permits integer, timeout interval DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'fencing_acquire'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION fencing.acquire(text, integer, interval) IS
'wait for one of the permits of the counting semaphore name; a fence token of its own, or NULL when timeout passes';

CREATE FUNCTION fencing.held_token(name text)
RETURNS bigint
AS 'MODULE_PATHNAME', 'fencing_held_token'
LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;

COMMENT ON FUNCTION fencing.held_token(text) IS
'the token of the lock on name if this transaction holds it, else NULL';

CREATE FUNCTION fencing.lock_rows(
	OUT database name,
	OUT name text,
	OUT key bigint,
	OUT token bigint,
	OUT pid integer,
	OUT since timestamptz,
	OUT granted boolean,
	OUT mode text,
	OUT delayed_until timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'fencing_lock_rows'
LANGUAGE C VOLATILE STRICT PARALLEL SAFE;

CREATE VIEW fencing.locks AS
	SELECT database, name, key, mode, token, pid, since, granted,
		   delayed_until
	FROM fencing.lock_rows();

COMMENT ON VIEW fencing.locks IS
'every fencing lock held or awaited in the cluster, every lease (mode lease), and every lock under a lock-delay (fencing.lock_delay) with the time it ends; the name, key and pid of another role''s lock, and the token of another role''s lease, only to members of pg_read_all_stats, as pg_stat_activity shows queries';

COMMENT ON FUNCTION fencing.lock_rows() IS
'the rows of the view fencing.locks; query the view.  PUBLIC may execute it because the view calls it as the querying role; it is not an interface of its own and may change with the view';

-- Ending a lost holder's delay early is what the delay exists to prevent, so
-- it needs a right PUBLIC lacks: the owner calls it, or grants it to an
-- operator who knows the holder is gone for good.
CREATE FUNCTION fencing.clear_lock_delays(name text DEFAULT NULL)
RETURNS integer
AS 'MODULE_PATHNAME', 'fencing_clear_lock_delays'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION fencing.clear_lock_delays(text) IS
'end the lock-delays (fencing.lock_delay) of name in this database at once, or with NULL every delay that refuses a lock in this database; returns how many ended';

REVOKE EXECUTE ON FUNCTION fencing.clear_lock_delays(text) FROM PUBLIC;

------------------------------------------------------------------------
-- Leases that outlive a transaction (src/locks/leases.c, src/fence/use_lease.c)
------------------------------------------------------------------------

CREATE FUNCTION fencing.acquire_lease(name text, ttl interval,
									  timeout interval DEFAULT NULL,
									  holder text DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'fencing_acquire_lease'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION fencing.acquire_lease(text, interval, interval, text) IS
'take name for ttl, held by the server after COMMIT, ROLLBACK and disconnect until released or not renewed for ttl; a fresh token, or NULL when the name stays busy for timeout (NULL: no wait)';

-- Two functions rather than a default for ttl: a call that leaves out a
-- defaulted argument has it read back from the catalog and parsed at
-- every parse analysis, the most a renewal costs on top of the lock.
CREATE FUNCTION fencing.renew_lease(name text, token bigint)
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'fencing_renew_lease'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION fencing.renew_lease(text, bigint) IS
'extend the lease held with token to now + the ttl it was taken with and return the new expiry; FN004 when it is not held with token';

CREATE FUNCTION fencing.renew_lease(name text, token bigint, ttl interval)
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'fencing_renew_lease'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION fencing.renew_lease(text, bigint, interval) IS
'extend the lease held with token to now + ttl (NULL: the ttl it was taken with) and return the new expiry; FN004 when it is not held with token';

CREATE FUNCTION fencing.release_lease(name text, token bigint)
RETURNS boolean
AS 'MODULE_PATHNAME', 'fencing_release_lease'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION fencing.release_lease(text, bigint) IS
'free the lease held with token; false, freeing nothing, when it is not held with token';

CREATE FUNCTION fencing.use_lease(name text, token bigint)
RETURNS bigint
AS 'MODULE_PATHNAME', 'fencing_use_lease'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION fencing.use_lease(text, bigint) IS
'first statement of each transaction of a lease holder''s work: FN004 unless held with token, raises the resource fence of name to token as check_fence does, sets this transaction''s fencing.token, then renews the lease';

-- use_lease raises the resource fence of the lease's name, which fences out
-- the name's earlier holders: the owner grants it to the roles that run
-- lease jobs.  A holder needs no right to raise the fences of other names.
REVOKE EXECUTE ON FUNCTION fencing.use_lease(text, bigint) FROM PUBLIC;

CREATE FUNCTION fencing.break_lease(name text)
RETURNS bigint
AS 'MODULE_PATHNAME', 'fencing_break_lease'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION fencing.break_lease(text) IS
'an operator frees the lease on name whatever its token and gets that token (NULL: none); starts the name''s lock-delay; confirm the holder is dead first';

-- Breaking a lease lets a second holder in while the first may still work.
REVOKE ALL ON FUNCTION fencing.break_lease(text) FROM PUBLIC;

CREATE FUNCTION fencing.lease_rows(
	OUT name text,
	OUT database name,
	OUT token bigint,
	OUT holder text,
	OUT acquired_at timestamptz,
	OUT renewed_at timestamptz,
	OUT expires_at timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'fencing_lease_rows'
LANGUAGE C VOLATILE STRICT PARALLEL SAFE;

CREATE VIEW fencing.leases AS
	SELECT name, database, token, holder, acquired_at, renewed_at, expires_at
	FROM fencing.lease_rows();

COMMENT ON VIEW fencing.leases IS
'every lease held in the cluster (fencing.acquire_lease); another role''s name, token and holder only for members of pg_read_all_stats';

COMMENT ON FUNCTION fencing.lease_rows() IS
'the rows of the view fencing.leases; query the view.  PUBLIC may execute it because the view calls it as the querying role; it is not an interface of its own and may change with the view';

GRANT SELECT ON fencing.leases TO PUBLIC;

------------------------------------------------------------------------
-- Statistics (src/base/stats.c)
------------------------------------------------------------------------

CREATE FUNCTION fencing.stat_rows(
	OUT tokens_issued bigint,
	OUT reservations bigint,
	OUT reservation_time_ms double precision,
	OUT locks_granted bigint,
	OUT locks_busy bigint,
	OUT locks_timed_out bigint,
	OUT leases_granted bigint,
	OUT leases_expired bigint,
	OUT stale_writes_rejected bigint,
	OUT stats_reset timestamptz,
	OUT lock_groups_granted bigint,
	OUT shared_locks_granted bigint,
	OUT permits_granted bigint,
	OUT leases_ceiling_ended bigint,
	OUT delays_started bigint,
	OUT delayed_refusals bigint)
RETURNS record
AS 'MODULE_PATHNAME', 'fencing_stat_rows'
LANGUAGE C VOLATILE STRICT PARALLEL SAFE;

CREATE FUNCTION fencing.lease_stat_rows(
	OUT leases_acquired bigint,
	OUT leases_renewed bigint,
	OUT leases_released bigint,
	OUT leases_lapsed bigint,
	OUT leases_broken bigint)
RETURNS record
AS 'MODULE_PATHNAME', 'fencing_lease_stat_rows'
LANGUAGE C VOLATILE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION fencing.lease_stat_rows() IS
'the lease columns of the view fencing.stats; query the view.  PUBLIC may execute it because the view calls it as the querying role; it is not an interface of its own and may change with the view';

CREATE VIEW fencing.stats AS
	SELECT s.tokens_issued, s.reservations, s.reservation_time_ms,
		   s.locks_granted, s.locks_busy, s.locks_timed_out,
		   s.lock_groups_granted, s.shared_locks_granted, s.permits_granted,
		   s.delays_started, s.delayed_refusals,
		   s.leases_granted, s.leases_expired, s.leases_ceiling_ended,
		   s.stale_writes_rejected,
		   s.stats_reset,
		   l.leases_acquired, l.leases_renewed, l.leases_released,
		   l.leases_lapsed, l.leases_broken
	FROM fencing.stat_rows() s CROSS JOIN fencing.lease_stat_rows() l;

COMMENT ON VIEW fencing.stats IS
'cluster-wide counters since the last fencing.stats_reset()';

COMMENT ON FUNCTION fencing.stat_rows() IS
'the row of the view fencing.stats; query the view.  PUBLIC may execute it because the view calls it as the querying role; it is not an interface of its own and may change with the view';

CREATE FUNCTION fencing.stats_reset()
RETURNS void
AS 'MODULE_PATHNAME', 'fencing_stats_reset'
LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;

REVOKE ALL ON FUNCTION fencing.stats_reset() FROM PUBLIC;

CREATE FUNCTION fencing.status(
	OUT latest_token bigint,
	OUT reserved_limit bigint,
	OUT clock_floor bigint,
	OUT tracked_locks integer,
	OUT lock_capacity integer,
	OUT untracked_locks bigint,
	OUT state_file text,
	OUT tokens_ahead_of_clock bigint,
	OUT clock_tolerance interval,
	OUT fresh_start_pending boolean,
	OUT state_file_behind boolean)
RETURNS record
AS 'MODULE_PATHNAME', 'fencing_status'
LANGUAGE C VOLATILE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION fencing.status() IS
'one-row summary: latest token, durable reservation limit, clock floor and lead over it, clock tolerance, fresh start, state file, lock tracking capacity';

------------------------------------------------------------------------
-- Fences at the resource (src/fence/trigger.c, src/fence/check_fence.c)
------------------------------------------------------------------------

CREATE FUNCTION fencing.reject_stale()
RETURNS trigger
AS 'MODULE_PATHNAME', 'fencing_reject_stale'
LANGUAGE C;

COMMENT ON FUNCTION fencing.reject_stale() IS
'BEFORE ROW trigger (args: fence column, ''error''|''skip''): rejects writes whose fence is below the row''s; stamps fencing.token';

-- fence_column and on_stale not given (NULL) keep what the table is
-- protected with; a table not protected yet gets 'fence' and 'error'.
CREATE FUNCTION fencing.protect(tbl regclass,
								fence_column name DEFAULT NULL,
								on_stale text DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'fencing_protect'
LANGUAGE C VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION fencing.protect(regclass, name, text) IS
'validate the table and install (or replace) the fencing_reject_stale trigger; a column or mode not given keeps the table''s (new tables: ''fence'', ''error''); table owner only';

CREATE FUNCTION fencing.unprotect(tbl regclass)
RETURNS void
AS 'MODULE_PATHNAME', 'fencing_unprotect'
LANGUAGE C VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION fencing.unprotect(regclass) IS
'remove the trigger fencing.protect() installed; table owner only';

-- The transaction's fencing.token from a bound parameter (SET LOCAL takes
-- none).  Like SET LOCAL, open to every role: the trigger checks the token
-- against each row.  No SET clause: one would undo the setting when the
-- function returns.
CREATE FUNCTION fencing.set_token(token bigint)
RETURNS bigint
AS 'MODULE_PATHNAME', 'fencing_set_token'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION fencing.set_token(bigint) IS
'SET LOCAL fencing.token = token, from a bound parameter; only in a transaction block, only an issued token; returns token';

GRANT EXECUTE ON FUNCTION fencing.set_token(bigint) TO PUBLIC;

-- The token the fence trigger takes for a write of this transaction that
-- carries none, or NULL.  An INSERT into a protected table that leaves the
-- fence column out gets a call to it there (src/fence/stamp.c), so that
-- the row is built with its token.  Open to every role, as the setting is.
-- PARALLEL RESTRICTED: the setting counts only in the leader's transaction.
CREATE FUNCTION fencing.token_in_force()
RETURNS bigint
AS 'MODULE_PATHNAME', 'fencing_token_in_force'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;

COMMENT ON FUNCTION fencing.token_in_force() IS
'the fencing.token that counts in this transaction (SET LOCAL or set_token), else NULL; what the fence trigger stamps';

GRANT EXECUTE ON FUNCTION fencing.token_in_force() TO PUBLIC;

-- Watermarks of resources that are not one row.  Names are canonical
-- (fencing.normalize_name), compared bytewise.  pg_dump keeps the rows, so a
-- restored database still rejects tokens below them.
CREATE TABLE fencing.resource_fences (
	resource	text COLLATE "C" PRIMARY KEY,
	fence		bigint NOT NULL,
	updated_at	timestamptz NOT NULL DEFAULT pg_catalog.now()
);

COMMENT ON TABLE fencing.resource_fences IS
'per-resource fence watermarks raised by fencing.check_fence()';

SELECT pg_catalog.pg_extension_config_dump('fencing.resource_fences', '');

REVOKE ALL ON fencing.resource_fences FROM PUBLIC;
GRANT SELECT ON fencing.resource_fences TO PUBLIC;

-- Only check_fence raises a watermark, and none goes down (F8): the
-- table's owner, members of pg_write_all_data and superusers can write the
-- table, so a trigger holds the rule for every role.  New rows, as
-- pg_restore loads them, need a canonical name and an issued token.
CREATE FUNCTION fencing.guard_resource_fences()
RETURNS trigger
AS 'MODULE_PATHNAME', 'fencing_guard_resource_fences'
LANGUAGE C;

COMMENT ON FUNCTION fencing.guard_resource_fences() IS
'trigger on fencing.resource_fences: a watermark is raised only by check_fence and never lowered; new rows need a canonical name and an issued token; DELETE and TRUNCATE are refused';

REVOKE EXECUTE ON FUNCTION fencing.guard_resource_fences() FROM PUBLIC;

CREATE TRIGGER resource_fences_guard
	BEFORE INSERT OR UPDATE OR DELETE ON fencing.resource_fences
	FOR EACH ROW EXECUTE FUNCTION fencing.guard_resource_fences();

CREATE TRIGGER resource_fences_guard_truncate
	BEFORE TRUNCATE ON fencing.resource_fences
	FOR EACH STATEMENT EXECUTE FUNCTION fencing.guard_resource_fences();

CREATE FUNCTION fencing.check_fence(resource text, token bigint)
RETURNS bigint
AS 'MODULE_PATHNAME', 'fencing_check_fence'
LANGUAGE C VOLATILE PARALLEL UNSAFE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION fencing.check_fence(text, bigint) IS
'raise the resource''s fence watermark to token, or reject a stale token (SQLSTATE FN001); returns token';

-- Raising a resource's fence fences out its holders, so it needs a right
-- PUBLIC lacks (doc/guarantees.md F9): the owner grants EXECUTE to the roles that
-- hold the locks and to services that check the tokens clients send them.
REVOKE EXECUTE ON FUNCTION fencing.check_fence(text, bigint) FROM PUBLIC;

-- Application roles call the lock, token and fence functions; what each one
-- may do is decided by its own grants above (advance_token,
-- clear_lock_delays, stats_reset, check_fence, use_lease and break_lease
-- are revoked from PUBLIC, resource_fences is read-only).
GRANT USAGE ON SCHEMA fencing TO PUBLIC;

-- Like pg_locks and pg_stat_*, the monitoring views are readable by everyone.
GRANT SELECT ON fencing.locks, fencing.stats TO PUBLIC;
