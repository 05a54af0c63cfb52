/* fencing--1.0--1.1.sql */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "ALTER EXTENSION fencing UPDATE TO '1.1'" to load this file. \quit

/*
 * 1.0 to 1.1.  Every change here is also in fencing--1.1.sql, so that a
 * database updated from 1.0 and one created at 1.1 hold the same objects
 * (test/t/053_upgrade_script.pl compares them).
 */

-- Raising a resource's fence fences out its holders, so it needs a right
-- PUBLIC lacks (DESIGN.md F9): the owner grants EXECUTE to the roles that
-- hold the locks and to services that check the tokens clients send them.
REVOKE EXECUTE ON FUNCTION fencing.check_fence(text, bigint) FROM PUBLIC;

------------------------------------------------------------------------
-- Named locks (src/locks.c, src/lock_registry.c)
------------------------------------------------------------------------

-- Every lock has an entry in the tracking table now (a lock that finds none
-- is refused), so fencing.locks loses its "untracked" column, and it gains
-- "mode" (exclusive, shared, or a semaphore's "permit n of m").  A view's
-- column cannot be dropped: drop the view and the function behind it and
-- create both again, with the view's grant.
DROP VIEW fencing.locks;
DROP FUNCTION fencing.lock_rows();

CREATE FUNCTION fencing.lock_rows(
	OUT database name,
	OUT name text,
	OUT key bigint,
	OUT token bigint,
	OUT pid integer,
	OUT since timestamptz,
	OUT granted boolean,
	OUT mode text)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'fencing_lock_rows'
LANGUAGE C VOLATILE STRICT PARALLEL SAFE;

CREATE VIEW fencing.locks AS
	SELECT database, name, key, mode, token, pid, since, granted
	FROM fencing.lock_rows();

COMMENT ON VIEW fencing.locks IS
'every fencing lock held or awaited in the cluster';

COMMENT ON FUNCTION fencing.lock_rows() IS
'the rows of the view fencing.locks; query the view.  PUBLIC may execute it because the view calls it as the querying role; it is not an interface of its own and may change with the view';

GRANT SELECT ON fencing.locks TO PUBLIC;

------------------------------------------------------------------------
-- Fence tokens: fencing.status() reports the lead over the clock, the
-- clock tolerance, a pending fresh start and a state file behind redo
-- (src/stats.c, src/token_wal.c).  Its OUT columns change, so it is
-- dropped and created again.
------------------------------------------------------------------------

DROP FUNCTION fencing.status();

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
-- Lock groups: all names or none, one token (src/locks.c)
------------------------------------------------------------------------

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

------------------------------------------------------------------------
-- Shared locks: the same lock in ShareLock mode (src/locks.c)
------------------------------------------------------------------------

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

------------------------------------------------------------------------
-- Counting semaphores: permits are locks of their own (src/locks.c)
------------------------------------------------------------------------

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

------------------------------------------------------------------------
-- Statistics: counters of the 1.1 lock kinds (src/stats.c).  The view's
-- columns change, so it is dropped and created again with its grant.
------------------------------------------------------------------------

DROP VIEW fencing.stats;
DROP FUNCTION fencing.stat_rows();

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
	OUT permits_granted bigint)
RETURNS record
AS 'MODULE_PATHNAME', 'fencing_stat_rows'
LANGUAGE C VOLATILE STRICT PARALLEL SAFE;

CREATE VIEW fencing.stats AS
	SELECT tokens_issued, reservations, reservation_time_ms,
		   locks_granted, locks_busy, locks_timed_out,
		   lock_groups_granted, shared_locks_granted, permits_granted,
		   leases_granted, leases_expired, stale_writes_rejected,
		   stats_reset
	FROM fencing.stat_rows();

COMMENT ON VIEW fencing.stats IS
'cluster-wide counters since the last fencing.stats_reset()';

GRANT SELECT ON fencing.stats TO PUBLIC;

------------------------------------------------------------------------
-- fencing.protect(): a fence column or on_stale not given (NULL, now the
-- defaults) keeps what the table is protected with, instead of turning a
-- table protected with on_stale => 'skip' back to 'error' (issue 14).
------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION fencing.protect(tbl regclass,
										   fence_column name DEFAULT NULL,
										   on_stale text DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'fencing_protect'
LANGUAGE C VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION fencing.protect(regclass, name, text) IS
'validate the table and install (or replace) the fencing_reject_stale trigger; a column or mode not given keeps the table''s (new tables: ''fence'', ''error''); table owner only';

------------------------------------------------------------------------
-- The functions behind the views fencing.locks (above) and fencing.stats
-- say what they are: PUBLIC executes them through the views (issue 14).
------------------------------------------------------------------------

COMMENT ON FUNCTION fencing.stat_rows() IS
'the row of the view fencing.stats; query the view.  PUBLIC may execute it because the view calls it as the querying role; it is not an interface of its own and may change with the view';
