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
-- for the others).
COMMENT ON VIEW fencing.locks IS
'every fencing lock held or awaited in the cluster, and every lock under a lock-delay (fencing.lock_delay) with the time it ends; the name, key and pid of another role''s lock only to members of pg_read_all_stats, as pg_stat_activity shows queries';
