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
