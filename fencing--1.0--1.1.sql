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
-- is refused), so fencing.locks loses its "untracked" column.  A view's
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
	OUT granted boolean)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'fencing_lock_rows'
LANGUAGE C VOLATILE STRICT PARALLEL SAFE;

CREATE VIEW fencing.locks AS
	SELECT database, name, key, token, pid, since, granted
	FROM fencing.lock_rows();

COMMENT ON VIEW fencing.locks IS
'every fencing lock held or awaited in the cluster';

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
