/* fencing--1.1--1.2.sql */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "ALTER EXTENSION fencing UPDATE TO '1.2'" to load this file. \quit

/*
 * 1.1 to 1.2.  Every change here is also in fencing--1.2.sql, so that a
 * database updated from 1.0 or 1.1 and one created at 1.2 hold the same
 * objects (test/t/053_upgrade_script.pl compares them).  Calls are
 * schema-qualified, as in the install script.
 */

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
