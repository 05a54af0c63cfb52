/* fencing--1.1--1.2.sql */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "ALTER EXTENSION fencing UPDATE TO '1.2'" to load this file. \quit

/*
 * 1.1 to 1.2.  Every change here is also in fencing--1.2.sql, so that a
 * database updated from 1.0 or 1.1 and one created at 1.2 hold the same
 * objects (test/t/053_upgrade_script.pl compares them).  Calls are
 * schema-qualified, as in the install script.
 */

-- fencing.locks names another role's locks only to members of
-- pg_read_all_stats (fencing.lock_rows() leaves the name, key and pid NULL
-- for the others).
COMMENT ON VIEW fencing.locks IS
'every fencing lock held or awaited in the cluster, and every lock under a lock-delay (fencing.lock_delay) with the time it ends; the name, key and pid of another role''s lock only to members of pg_read_all_stats, as pg_stat_activity shows queries';
