/* fencing--1.1--1.2.sql */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "ALTER EXTENSION fencing UPDATE TO '1.2'" to load this file. \quit

/*
 * 1.1 to 1.2.  Every change here is also in fencing--1.2.sql, so that a
 * database updated from 1.0 or 1.1 and one created at 1.2 hold the same
 * objects (test/t/053_upgrade_script.pl compares them).  Calls are
 * schema-qualified, as in the install script.
 */

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
