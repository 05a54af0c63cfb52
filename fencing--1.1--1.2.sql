/* fencing--1.1--1.2.sql */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "ALTER EXTENSION fencing UPDATE TO '1.2'" to load this file. \quit

/*
 * 1.1 to 1.2.  Every change here is also in fencing--1.2.sql, so that a
 * database updated from 1.0 or 1.1 and one created at 1.2 hold the same
 * objects (test/t/053_upgrade_script.pl compares them).  Calls are
 * schema-qualified, as in the install script.
 */

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

-- fencing.locks names another role's locks only to members of
-- pg_read_all_stats (fencing.lock_rows() leaves the name, key and pid NULL
-- for the others), and shows leases too (mode lease), with their tokens
-- under the same rule.
COMMENT ON VIEW fencing.locks IS
'every fencing lock held or awaited in the cluster, every lease (mode lease), and every lock under a lock-delay (fencing.lock_delay) with the time it ends; the name, key and pid of another role''s lock, and the token of another role''s lease, only to members of pg_read_all_stats, as pg_stat_activity shows queries';

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

CREATE FUNCTION fencing.renew_lease(name text, token bigint,
									ttl interval DEFAULT NULL)
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
'first statement of each transaction of a lease holder''s work: FN004 unless held with token, renews it, raises the resource fence of name to token as check_fence does, and sets this transaction''s fencing.token';

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
-- Statistics (src/base/stats.c): the lease counters join fencing.stats at its
-- end, from a function of their own, so the view is replaced in place
-- (its grants and the objects that use it stay).
------------------------------------------------------------------------

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

CREATE OR REPLACE VIEW fencing.stats AS
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
