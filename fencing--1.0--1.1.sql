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
-- The views fencing.locks and fencing.stats and the function
-- fencing.status() change their columns, so the update drops them and
-- creates them again (below).  A view or function of the database's own
-- that uses one of them would stop it at the DROP, with a message naming
-- the 1.0 object under the name it is renamed to meanwhile; say it here,
-- with the database's own names.
------------------------------------------------------------------------

DO $refuse_dependents$
DECLARE
	dependents	text;
BEGIN
	SELECT pg_catalog.string_agg(DISTINCT dep.dependent, ', ')
	  INTO dependents
	  FROM (SELECT CASE WHEN r.oid IS NOT NULL
						THEN pg_catalog.pg_describe_object('pg_catalog.pg_class'::pg_catalog.regclass,
														   r.ev_class, 0)
						ELSE pg_catalog.pg_describe_object(d.classid, d.objid, 0) END AS dependent,
				   r.ev_class
			  FROM pg_catalog.pg_depend d
			  LEFT JOIN pg_catalog.pg_rewrite r
					 ON d.classid = 'pg_catalog.pg_rewrite'::pg_catalog.regclass AND r.oid = d.objid
			 WHERE d.deptype = 'n'
			   AND ((d.refclassid = 'pg_catalog.pg_class'::pg_catalog.regclass
					 AND d.refobjid IN ('fencing.locks'::pg_catalog.regclass,
										'fencing.stats'::pg_catalog.regclass))
					OR (d.refclassid = 'pg_catalog.pg_proc'::pg_catalog.regclass
						AND d.refobjid IN ('fencing.lock_rows()'::pg_catalog.regprocedure,
										   'fencing.stat_rows()'::pg_catalog.regprocedure,
										   'fencing.status()'::pg_catalog.regprocedure,
										   'fencing.lease(text,interval)'::pg_catalog.regprocedure)))) dep
	 -- the extension's own views use the functions behind them
	 WHERE dep.ev_class IS NULL
		OR dep.ev_class NOT IN ('fencing.locks'::pg_catalog.regclass,
								'fencing.stats'::pg_catalog.regclass);

	IF dependents IS NOT NULL THEN
		RAISE EXCEPTION USING
			ERRCODE = 'dependent_objects_still_exist',
			MESSAGE = 'cannot update extension fencing: other objects use views or functions whose columns change',
			DETAIL = pg_catalog.format('The update drops and creates again fencing.locks, fencing.stats, fencing.status() and fencing.lease(text, interval), which are used by: %s.',
									   dependents),
			HINT = 'Drop those objects, run ALTER EXTENSION fencing UPDATE, and create them again for the new columns.';
	END IF;
END
$refuse_dependents$;

------------------------------------------------------------------------
-- Named locks (src/locks/)
------------------------------------------------------------------------

-- Every lock has an entry in the tracking table now (a lock that finds none
-- is refused), so fencing.locks loses its "untracked" column, and it gains
-- "mode" (exclusive, shared, or a semaphore's "permit n of m") and
-- "delayed_until" (the end of a lock-delay, fencing.lock_delay, whose rows
-- show the locks of lost holders; src/locks/delay.c).  A view's
-- column cannot be dropped: the view and the function behind it are made
-- anew, with the view's grant.  The 1.0 ones are renamed, not dropped, until
-- the privileges users gave or took on them are carried over (at the end).
ALTER VIEW fencing.locks RENAME TO locks_1_0;
ALTER FUNCTION fencing.lock_rows() RENAME TO lock_rows_1_0;

CREATE FUNCTION fencing.lock_rows(
	OUT database name,
	OUT name text,
	OUT key bigint,
	OUT token bigint,
	OUT pid integer,
	OUT since timestamptz,
	OUT granted boolean,
	OUT mode text,
	OUT delayed_until timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'fencing_lock_rows'
LANGUAGE C VOLATILE STRICT PARALLEL SAFE;

CREATE VIEW fencing.locks AS
	SELECT database, name, key, mode, token, pid, since, granted,
		   delayed_until
	FROM fencing.lock_rows();

COMMENT ON VIEW fencing.locks IS
'every fencing lock held or awaited in the cluster, and every lock under a lock-delay (fencing.lock_delay) with the time it ends';

COMMENT ON FUNCTION fencing.lock_rows() IS
'the rows of the view fencing.locks; query the view.  PUBLIC may execute it because the view calls it as the querying role; it is not an interface of its own and may change with the view';

GRANT SELECT ON fencing.locks TO PUBLIC;

------------------------------------------------------------------------
-- Fence tokens: fencing.status() reports the lead over the clock, the
-- clock tolerance, a pending fresh start and a state file behind redo
-- (src/module/views.c, src/tokens/token_wal.c).  Its OUT columns change, so it is
-- made anew (the 1.0 one is renamed until its privileges are carried over).
------------------------------------------------------------------------

ALTER FUNCTION fencing.status() RENAME TO status_1_0;

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
-- Lock groups: all names or none, one token (src/locks/groups.c)
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
-- Shared locks: the same lock in ShareLock mode (src/locks/single.c)
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
-- Counting semaphores: permits are locks of their own (src/locks/semaphores.c)
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
-- A lease's hard ceiling: lease() gains max_hold (src/locks/lease_ceiling.c).
-- The two-argument function is replaced by one with a third, defaulted
-- argument, so lease(name, ttl) calls keep working; the library serves
-- both (the 1.0 one until this update runs).
------------------------------------------------------------------------

ALTER FUNCTION fencing.lease(text, interval) RENAME TO lease_1_0;

CREATE FUNCTION fencing.lease(name text, ttl interval,
							  max_hold interval DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'fencing_lease'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION fencing.lease(text, interval, interval) IS
'try_lock plus a server-enforced lease: a session idle in the transaction longer than ttl is ended, and with max_hold its transaction ends max_hold after the call, busy or idle';

------------------------------------------------------------------------
-- Statistics: counters of the 1.1 lock kinds, of lease ceilings and of
-- lock-delays (src/base/stats.c).  The view's columns change, so it is made anew
-- with its grant (the 1.0 one and its function are renamed until their
-- privileges are carried over).
------------------------------------------------------------------------

ALTER VIEW fencing.stats RENAME TO stats_1_0;
ALTER FUNCTION fencing.stat_rows() RENAME TO stat_rows_1_0;

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
	OUT permits_granted bigint,
	OUT leases_ceiling_ended bigint,
	OUT delays_started bigint,
	OUT delayed_refusals bigint)
RETURNS record
AS 'MODULE_PATHNAME', 'fencing_stat_rows'
LANGUAGE C VOLATILE STRICT PARALLEL SAFE;

CREATE VIEW fencing.stats AS
	SELECT tokens_issued, reservations, reservation_time_ms,
		   locks_granted, locks_busy, locks_timed_out,
		   lock_groups_granted, shared_locks_granted, permits_granted,
		   delays_started, delayed_refusals,
		   leases_granted, leases_expired, leases_ceiling_ended,
		   stale_writes_rejected,
		   stats_reset
	FROM fencing.stat_rows();

COMMENT ON VIEW fencing.stats IS
'cluster-wide counters since the last fencing.stats_reset()';

GRANT SELECT ON fencing.stats TO PUBLIC;

------------------------------------------------------------------------
-- fencing.protect(): a fence column or on_stale not given (NULL, now the
-- defaults) keeps what the table is protected with, instead of turning a
-- table protected with on_stale => 'skip' back to 'error'.
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
-- say what they are: PUBLIC executes them through the views.
------------------------------------------------------------------------

COMMENT ON FUNCTION fencing.stat_rows() IS
'the row of the view fencing.stats; query the view.  PUBLIC may execute it because the view calls it as the querying role; it is not an interface of its own and may change with the view';


------------------------------------------------------------------------
-- Privileges on the views and functions made anew above.  A 1.0
-- administrator may have granted them to a monitoring role, or taken
-- fencing.locks or fencing.status() away from PUBLIC; dropping the 1.0
-- objects would silently undo that (PUBLIC could read every lock name
-- again).  What the database's privileges on each 1.0 object differ by from
-- what the 1.0 script gave it (pg_init_privs, or the default when the script
-- gave nothing) is done again on its 1.1 successor: the grants, with their
-- grant option, and the revocations.  The owner's own privileges stay as
-- the script makes them.  Then the 1.0 objects go.  An object of 1.0 made
-- anew by a later change of this script is renamed likewise and added to
-- the list of successors.
------------------------------------------------------------------------

DO $carry_privileges$
DECLARE
	renamed		record;
	change		record;
BEGIN
	FOR renamed IN
		WITH successor (catalog, old_oid, new_object) AS (
			VALUES ('pg_catalog.pg_class'::pg_catalog.regclass,
					'fencing.locks_1_0'::pg_catalog.regclass::pg_catalog.oid,
					'TABLE fencing.locks'),
				   ('pg_catalog.pg_class', 'fencing.stats_1_0'::pg_catalog.regclass,
					'TABLE fencing.stats'),
				   ('pg_catalog.pg_proc', 'fencing.lock_rows_1_0()'::pg_catalog.regprocedure,
					'FUNCTION fencing.lock_rows()'),
				   ('pg_catalog.pg_proc', 'fencing.stat_rows_1_0()'::pg_catalog.regprocedure,
					'FUNCTION fencing.stat_rows()'),
				   ('pg_catalog.pg_proc', 'fencing.status_1_0()'::pg_catalog.regprocedure,
					'FUNCTION fencing.status()'),
				   ('pg_catalog.pg_proc', 'fencing.lease_1_0(text,interval)'::pg_catalog.regprocedure,
					'FUNCTION fencing.lease(text,interval,interval)'))
		SELECT s.new_object, o.owner,
			   COALESCE(o.acl, pg_catalog.acldefault(o.kind, o.owner)) AS acl,
			   COALESCE((SELECT i.initprivs FROM pg_catalog.pg_init_privs i
						  WHERE i.objoid = s.old_oid AND i.classoid = s.catalog AND i.objsubid = 0),
						pg_catalog.acldefault(o.kind, o.owner)) AS initial
		  FROM successor s
		  CROSS JOIN LATERAL (SELECT 'r'::"char" AS kind, c.relacl AS acl, c.relowner AS owner
								FROM pg_catalog.pg_class c
							   WHERE s.catalog = 'pg_catalog.pg_class'::pg_catalog.regclass
								 AND c.oid = s.old_oid
							  UNION ALL
							  SELECT 'f', p.proacl, p.proowner
								FROM pg_catalog.pg_proc p
							   WHERE s.catalog = 'pg_catalog.pg_proc'::pg_catalog.regclass
								 AND p.oid = s.old_oid) o
	LOOP
		-- revocations first, so that a grant option changed either way ends
		-- as it was
		FOR change IN
			SELECT 'REVOKE ' ||
				   CASE WHEN gone.is_grantable AND EXISTS
							(SELECT FROM pg_catalog.aclexplode(renamed.acl) kept
							  WHERE kept.grantee = gone.grantee
								AND kept.privilege_type = gone.privilege_type)
						THEN 'GRANT OPTION FOR ' ELSE '' END ||
				   gone.privilege_type || ' ON ' || renamed.new_object || ' FROM ' ||
				   CASE gone.grantee WHEN 0 THEN 'PUBLIC'
						ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(gone.grantee)) END AS sql
			  FROM (SELECT grantee, privilege_type, is_grantable FROM pg_catalog.aclexplode(renamed.initial)
					EXCEPT
					SELECT grantee, privilege_type, is_grantable FROM pg_catalog.aclexplode(renamed.acl)) gone
			 WHERE gone.grantee <> renamed.owner
			UNION ALL
			SELECT 'GRANT ' || added.privilege_type || ' ON ' || renamed.new_object || ' TO ' ||
				   CASE added.grantee WHEN 0 THEN 'PUBLIC'
						ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(added.grantee)) END ||
				   CASE WHEN added.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END
			  FROM (SELECT grantee, privilege_type, is_grantable FROM pg_catalog.aclexplode(renamed.acl)
					EXCEPT
					SELECT grantee, privilege_type, is_grantable FROM pg_catalog.aclexplode(renamed.initial)) added
			 WHERE added.grantee <> renamed.owner
		LOOP
			EXECUTE change.sql;
		END LOOP;
	END LOOP;
END
$carry_privileges$;

DROP VIEW fencing.locks_1_0;
DROP FUNCTION fencing.lock_rows_1_0();
DROP VIEW fencing.stats_1_0;
DROP FUNCTION fencing.stat_rows_1_0();
DROP FUNCTION fencing.status_1_0();
DROP FUNCTION fencing.lease_1_0(text, interval);

------------------------------------------------------------------------
-- Inheritance children (DESIGN.md F7).  A write through a parent reaches
-- its inheritance children's rows and fires only their own row triggers.
-- 1.0's protect() put the trigger on the table it was given (partitions got
-- PostgreSQL's clone), never on its inheritance children: a stale write
-- to a child, directly or through the parent, went through.  1.1's
-- protect() fences the whole tree, so each child of a protected table that
-- has no fence trigger is protected here with its parent's fence column
-- and mode, by protect() itself: it checks the child as it would check a
-- child added under 1.1, protects the child's own children with it, and
-- fails the update, naming the table, when the child cannot be fenced
-- (a foreign table, a fence column with a default).  Children protected
-- under 1.0 with their own fence keep it.
------------------------------------------------------------------------

-- pg_trigger.tgargs holds the arguments one after another, each ended by
-- a zero byte: here 'column\0mode\0'.
SELECT fencing.protect(child.inhrelid::pg_catalog.regclass,
					   pg_catalog.convert_from(SUBSTRING(parent.tgargs FROM 1 FOR fence.column_end - 1),
											   pg_catalog.getdatabaseencoding())::pg_catalog.name,
					   pg_catalog.convert_from(SUBSTRING(parent.tgargs FROM fence.column_end + 1
														 FOR pg_catalog.length(parent.tgargs) - fence.column_end - 1),
											   pg_catalog.getdatabaseencoding()))
  FROM pg_catalog.pg_inherits child
  JOIN pg_catalog.pg_class c ON c.oid = child.inhrelid
  JOIN pg_catalog.pg_trigger parent ON parent.tgrelid = child.inhparent
  CROSS JOIN LATERAL (SELECT POSITION(pg_catalog.decode('00', 'hex') IN parent.tgargs) AS column_end) fence
 WHERE parent.tgname = 'fencing_reject_stale'
   AND parent.tgfoid = 'fencing.reject_stale()'::pg_catalog.regprocedure
   AND parent.tgnargs = 2		-- 1.0's protect() always passed both
   AND NOT c.relispartition		-- partitions carry PostgreSQL's clone
   AND NOT EXISTS (SELECT FROM pg_catalog.pg_trigger t
					WHERE t.tgrelid = child.inhrelid AND t.tgname = 'fencing_reject_stale')
 ORDER BY child.inhrelid;
