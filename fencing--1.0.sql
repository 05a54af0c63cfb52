/* fencing--1.0.sql */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION fencing" to load this file. \quit

/*
 * Every object lives in schema fencing (the control file names it and the
 * extension is not relocatable).  Calls inside this script are
 * schema-qualified, and functions not written in C pin search_path, so a
 * caller's search_path cannot redirect them.
 */

------------------------------------------------------------------------
-- Fence tokens (src/tokens.c, src/token_wal.c)
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
-- Lock names (src/normalize.c)
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
-- Named locks (src/locks.c, src/lock_registry.c)
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

CREATE FUNCTION fencing.lease(name text, ttl interval)
RETURNS bigint
AS 'MODULE_PATHNAME', 'fencing_lease'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION fencing.lease(text, interval) IS
'try_lock plus a server-enforced lease: a session idle in the transaction longer than ttl is ended';

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
	OUT untracked bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'fencing_lock_rows'
LANGUAGE C VOLATILE STRICT PARALLEL SAFE;

CREATE VIEW fencing.locks AS
	SELECT database, name, key, token, pid, since, granted, untracked
	FROM fencing.lock_rows();

COMMENT ON VIEW fencing.locks IS
'every fencing lock held or awaited in the cluster; a row with NULL name counts locks the tracking table had no room for';

------------------------------------------------------------------------
-- Statistics (src/stats.c)
------------------------------------------------------------------------

CREATE FUNCTION fencing.stat_rows(
	OUT tokens_issued bigint,
	OUT reservations bigint,
	OUT reservation_time_ms double precision,
	OUT locks_granted bigint,
	OUT locks_busy bigint,
	OUT locks_timed_out bigint,
	OUT leases_granted bigint,
	OUT stale_writes_rejected bigint,
	OUT stats_reset timestamptz)
RETURNS record
AS 'MODULE_PATHNAME', 'fencing_stat_rows'
LANGUAGE C VOLATILE STRICT PARALLEL SAFE;

CREATE VIEW fencing.stats AS
	SELECT * FROM fencing.stat_rows();

COMMENT ON VIEW fencing.stats IS
'cluster-wide counters since the last fencing.stats_reset()';

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
	OUT state_file text)
RETURNS record
AS 'MODULE_PATHNAME', 'fencing_status'
LANGUAGE C VOLATILE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION fencing.status() IS
'one-row summary: latest token, durable reservation limit, clock floor, lock tracking capacity';

------------------------------------------------------------------------
-- Fences at the resource (src/fence_trigger.c, src/check_fence.c)
------------------------------------------------------------------------
-- FENCE SECTION: owned by the fence helper
