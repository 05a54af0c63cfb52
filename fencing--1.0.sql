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
-- Fences at the resource (src/fence/trigger.c, src/fence/check_fence.c)
------------------------------------------------------------------------

CREATE FUNCTION fencing.reject_stale()
RETURNS trigger
AS 'MODULE_PATHNAME', 'fencing_reject_stale'
LANGUAGE C;

COMMENT ON FUNCTION fencing.reject_stale() IS
'BEFORE ROW trigger (args: fence column, ''error''|''skip''): rejects writes whose fence is below the row''s; stamps fencing.token';

CREATE FUNCTION fencing.protect(tbl regclass,
								fence_column name DEFAULT 'fence',
								on_stale text DEFAULT 'error')
RETURNS void
AS 'MODULE_PATHNAME', 'fencing_protect'
LANGUAGE C VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION fencing.protect(regclass, name, text) IS
'validate the table and install (or replace) the fencing_reject_stale trigger; table owner only';

CREATE FUNCTION fencing.unprotect(tbl regclass)
RETURNS void
AS 'MODULE_PATHNAME', 'fencing_unprotect'
LANGUAGE C VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION fencing.unprotect(regclass) IS
'remove the trigger fencing.protect() installed; table owner only';

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

CREATE FUNCTION fencing.check_fence(resource text, token bigint)
RETURNS bigint
AS 'MODULE_PATHNAME', 'fencing_check_fence'
LANGUAGE C VOLATILE PARALLEL UNSAFE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION fencing.check_fence(text, bigint) IS
'raise the resource''s fence watermark to token, or reject a stale token (SQLSTATE FN001); returns token';

-- Application roles call the lock, token and fence functions; what each one
-- may do is decided by its own grants above (advance_token and stats_reset
-- are revoked from PUBLIC, resource_fences is read-only).
GRANT USAGE ON SCHEMA fencing TO PUBLIC;

-- Like pg_locks and pg_stat_*, the monitoring views are readable by everyone.
GRANT SELECT ON fencing.locks, fencing.stats TO PUBLIC;
