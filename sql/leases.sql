--
-- Leases that outlive a transaction (src/locks/leases.c): fencing.acquire_lease,
-- renew_lease, release_lease, use_lease, break_lease, the view
-- fencing.leases, mode "lease" in fencing.locks, the counters in
-- fencing.stats, and every argument error, within one session.  Races,
-- expiry between sessions, restarts, crashes, promotion and poolers are in
-- test/t/05[6-9]_leases_*.pl.
--
-- Tokens and times differ from run to run, so the output shows
-- comparisons only.  Errors are followed by their SQLSTATE.
--

SELECT leases_acquired AS a0, leases_renewed AS r0, leases_released AS x0,
	   leases_lapsed AS l0, leases_broken AS b0
FROM fencing.stats \gset

-- The SQLSTATE, message, detail and hint of a statement's error, with
-- tokens (N) and timestamps (T) masked, since they differ between runs.
CREATE FUNCTION lease_error(statement text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
	state text;
	message text;
	detail text;
	hint text;
BEGIN
	EXECUTE statement;
	RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
	GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE, message = MESSAGE_TEXT,
		detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
	RETURN state || E'\n' || regexp_replace(message, '\m[0-9]{6,}\M', 'N', 'g')
		|| E'\n' || regexp_replace(detail, '[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9:.+-]+', 'T', 'g')
		|| E'\n' || hint;
END
$$;

-- Argument errors, raised before anything is taken.
SELECT fencing.acquire_lease(NULL, '1 minute');
\echo sqlstate: :LAST_ERROR_SQLSTATE
SELECT fencing.acquire_lease('', '1 minute');
\echo sqlstate: :LAST_ERROR_SQLSTATE
SELECT fencing.acquire_lease(repeat('x', 201), '1 minute');
\echo sqlstate: :LAST_ERROR_SQLSTATE
SELECT fencing.acquire_lease('job', NULL);
\echo sqlstate: :LAST_ERROR_SQLSTATE
SELECT fencing.acquire_lease('job', '0 seconds');
\echo sqlstate: :LAST_ERROR_SQLSTATE
SELECT fencing.acquire_lease('job', '-1 second');
\echo sqlstate: :LAST_ERROR_SQLSTATE
SELECT fencing.acquire_lease('job', '500 microseconds');
\echo sqlstate: :LAST_ERROR_SQLSTATE
SELECT fencing.acquire_lease('job', '30 days');
\echo sqlstate: :LAST_ERROR_SQLSTATE
SELECT fencing.acquire_lease('job', '1 minute', '-1 second');
\echo sqlstate: :LAST_ERROR_SQLSTATE
SELECT fencing.acquire_lease('job', '1 minute', holder => repeat('h', 257));
\echo sqlstate: :LAST_ERROR_SQLSTATE
SELECT fencing.renew_lease('job', NULL);
\echo sqlstate: :LAST_ERROR_SQLSTATE
SELECT fencing.renew_lease(NULL, 1);
\echo sqlstate: :LAST_ERROR_SQLSTATE
SELECT fencing.renew_lease('job', 1, '0 seconds');
\echo sqlstate: :LAST_ERROR_SQLSTATE
SELECT fencing.release_lease('job', NULL);
\echo sqlstate: :LAST_ERROR_SQLSTATE
SELECT fencing.break_lease(NULL);
\echo sqlstate: :LAST_ERROR_SQLSTATE
SELECT count(*) AS leases FROM fencing.leases;

-- A lease is a fresh token, held by the server: it stays after the
-- statement (no autocommit warning: that is the point), with its holder
-- text and its times in the view.
SELECT fencing.latest_token() AS before \gset
SELECT fencing.acquire_lease('Nightly Invoices', '1 minute', holder => 'pod-a pid 42') AS t \gset
SELECT :t > :before AS fresh_token;
SELECT name, database = current_database() AS this_database, token = :t AS same_token,
	   holder, renewed_at = acquired_at AS not_renewed_yet,
	   expires_at - acquired_at AS ttl
FROM fencing.leases;
SELECT name, mode, token = :t AS same_token, pid, granted, delayed_until
FROM fencing.locks;

-- L1: every spelling of the name is the same lease.  While it is held,
-- nobody is granted the name: another lease, and every fencing lock of
-- the name, exclusive or shared, alone or in a group, waiting or not.
-- A semaphore's permits are other locks and stay free.
SELECT fencing.acquire_lease('  NIGHTLY   invoices ', '1 minute') IS NULL AS busy;
SELECT fencing.acquire_lease('nightly invoices', '1 minute', '50 milliseconds') IS NULL AS busy_after_waiting;
BEGIN;
SELECT fencing.try_lock('nightly invoices') IS NULL AS try_lock_busy,
	   fencing.try_lock_shared('nightly invoices') IS NULL AS shared_busy,
	   fencing.lease('nightly invoices', '10 seconds') IS NULL AS lease_busy,
	   fencing.try_lock_all(ARRAY['other name', 'Nightly Invoices']) IS NULL AS group_busy,
	   fencing.lock('nightly invoices', '50 milliseconds') IS NULL AS lock_busy,
	   fencing.lock_shared('nightly invoices', '0') IS NULL AS lock_shared_busy,
	   fencing.lock_all(ARRAY['nightly invoices'], '50 milliseconds') IS NULL AS lock_all_busy,
	   fencing.try_lock('other name') IS NOT NULL AS other_name_free,
	   fencing.try_acquire('nightly invoices', 2) IS NOT NULL AS permit_free;
SELECT name, mode FROM fencing.locks ORDER BY mode, name;
COMMIT;
-- The raw advisory functions are core's and do not see a lease.
BEGIN;
SELECT pg_try_advisory_xact_lock(fencing.lock_key('nightly invoices')) AS raw_granted;
ROLLBACK;

-- Every lease in the table excludes its name, also once another lease's
-- entry has been dropped from the table: of four leases, the second is
-- released, then the first, and each time every lease still held refuses
-- try_lock, lock, lease and acquire_lease of its name.
CREATE TEMP TABLE kept_leases AS
SELECT 'kept ' || i AS name, fencing.acquire_lease('kept ' || i, '1 minute') AS token
FROM generate_series(1, 4) i;
SELECT fencing.release_lease(name, token) AS released FROM kept_leases WHERE name = 'kept 2';
BEGIN;
SELECT name, fencing.try_lock(name) IS NULL AS try_lock_busy,
	   fencing.lock(name, '10 milliseconds') IS NULL AS lock_busy,
	   fencing.lease(name, '10 seconds') IS NULL AS lease_busy
FROM kept_leases WHERE name <> 'kept 2' ORDER BY name;
ROLLBACK;
SELECT name, fencing.acquire_lease(name, '1 minute') IS NULL AS acquire_lease_busy
FROM kept_leases WHERE name <> 'kept 2' ORDER BY name;
SELECT fencing.release_lease(name, token) AS released FROM kept_leases WHERE name = 'kept 1';
BEGIN;
SELECT name, fencing.try_lock(name) IS NULL AS try_lock_busy,
	   fencing.lock(name, '10 milliseconds') IS NULL AS lock_busy,
	   fencing.lease(name, '10 seconds') IS NULL AS lease_busy
FROM kept_leases WHERE name NOT IN ('kept 1', 'kept 2') ORDER BY name;
ROLLBACK;
SELECT name, fencing.acquire_lease(name, '1 minute') IS NULL AS acquire_lease_busy
FROM kept_leases WHERE name NOT IN ('kept 1', 'kept 2') ORDER BY name;
SELECT l.name, l.token = k.token AS same_token
FROM fencing.leases l JOIN kept_leases k USING (name) ORDER BY l.name;
SELECT count(*) FILTER (WHERE fencing.release_lease(name, token)) AS released
FROM kept_leases WHERE name NOT IN ('kept 1', 'kept 2');
DROP TABLE kept_leases;

-- Renewal keeps the token and moves the expiry; with a ttl, by that ttl,
-- without one, by the ttl the lease was taken with.
SELECT fencing.renew_lease('nightly invoices', :t, '2 minutes') - now() > '1 minute 50 seconds' AS renewed_for_two_minutes;
SELECT fencing.renew_lease('NIGHTLY INVOICES', :t) - now() < '1 minute 10 seconds' AS renewed_for_its_ttl;
-- Every way of calling it: positional, named, ttl given, ttl NULL, ttl
-- left out (two functions, no default read back at each call).
SELECT fencing.renew_lease(name => 'nightly invoices', token => :t) - now() < '1 minute 10 seconds' AS named,
	   fencing.renew_lease(token => :t, name => 'nightly invoices', ttl => '3 minutes') - now() > '2 minutes' AS named_ttl,
	   fencing.renew_lease('nightly invoices', :t, NULL) - now() < '1 minute 10 seconds' AS ttl_null;
SELECT p.oid::regprocedure AS function, p.pronargdefaults AS defaults
FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
WHERE n.nspname = 'fencing' AND p.proname = 'renew_lease' ORDER BY 1::text;
SELECT token = :t AS same_token, renewed_at > acquired_at AS renewed FROM fencing.leases
WHERE name = 'nightly invoices';

-- Another token, or a spelling of another name, is not the holder: FN004
-- (lease lost), and nothing changes.
SELECT lease_error(format('SELECT fencing.renew_lease(%L, %s)', 'nightly invoices', :t + 1));
SELECT lease_error(format('SELECT fencing.renew_lease(%L, %s)', 'daily invoices', :t));
SELECT fencing.release_lease('nightly invoices', :t - 1) AS released_with_old_token,
	   fencing.release_lease('daily invoices', :t) AS released_other_name;
SELECT count(*) AS still_held FROM fencing.leases WHERE token = :t;

-- use_lease: the first statement of a batch.  Only in a transaction block
-- (25P01); it raises the resource fence of the name to the token (as
-- check_fence does), sets fencing.token for the transaction and renews
-- the lease.
SELECT fencing.use_lease('nightly invoices', :t);
\echo sqlstate: :LAST_ERROR_SQLSTATE
CREATE TABLE lease_ledger (customer int PRIMARY KEY, amount numeric, fence bigint);
SELECT fencing.protect('lease_ledger');
BEGIN;
SELECT fencing.use_lease('Nightly Invoices', :t) = :t AS used;
SELECT current_setting('fencing.token') = :'t' AS token_set;
SELECT txid_current_if_assigned() IS NOT NULL AS raising_the_fence_is_a_write;
INSERT INTO lease_ledger VALUES (1, 10), (2, 20);
COMMIT;
SELECT current_setting('fencing.token') AS token_after_commit;
SELECT resource, fence = :t AS fence_at_token FROM fencing.resource_fences
WHERE resource = 'nightly invoices';
SELECT count(*) AS rows_stamped FROM lease_ledger WHERE fence = :t;
BEGIN;
\set VERBOSITY sqlstate
SELECT fencing.use_lease('nightly invoices', :t + 1);
\set VERBOSITY default
ROLLBACK;

-- A use_lease that fails leaves the lease as it was: renewing comes last.
-- Here the name's fence is past the lease's token (raised with a newer
-- token, as a newer holder's batch would have), so every batch of this
-- holder fails FN001, and none of them moves the lease's expiry: the name
-- is free again one ttl after the holder's last good renewal.
SELECT renewed_at AS before_failed, expires_at AS expiry_before_failed
FROM fencing.leases WHERE name = 'nightly invoices' \gset
SELECT fencing.check_fence('nightly invoices', fencing.next_token()) > :t AS fence_passed;
BEGIN;
\set VERBOSITY sqlstate
SELECT fencing.use_lease('nightly invoices', :t);
\set VERBOSITY default
ROLLBACK;
BEGIN;
\set VERBOSITY sqlstate
SELECT fencing.use_lease('nightly invoices', :t);
\set VERBOSITY default
ROLLBACK;
SELECT renewed_at = :'before_failed' AS not_renewed,
	   expires_at = :'expiry_before_failed' AS expiry_unchanged
FROM fencing.leases WHERE name = 'nightly invoices';

-- T5: acquiring, renewing and releasing assign no transaction id.
BEGIN;
SELECT fencing.acquire_lease('t5 lease', '1 minute') AS t5 \gset
SELECT fencing.renew_lease('t5 lease', :t5) IS NOT NULL AS renewed;
SELECT fencing.release_lease('t5 lease', :t5) AS released;
SELECT txid_current_if_assigned() IS NULL AS no_xid;
COMMIT;

-- A lease takes effect at once, as nextval does: a ROLLBACK of the
-- transaction that took it does not give it back.
BEGIN;
SELECT fencing.acquire_lease('rolled back', '1 minute') AS rb \gset
ROLLBACK;
SELECT count(*) AS held_after_rollback FROM fencing.leases WHERE token = :rb;
SELECT fencing.release_lease('rolled back', :rb) AS released;

-- A lease is refused, 55006, to a transaction that holds the name's lock
-- itself, through fencing or the raw advisory functions, in either mode.
BEGIN;
SELECT fencing.try_lock('own lock') IS NOT NULL AS locked;
SELECT fencing.acquire_lease('own lock', '1 minute');
\echo sqlstate: :LAST_ERROR_SQLSTATE
ROLLBACK;
BEGIN;
SELECT fencing.try_lock_shared('own lock') IS NOT NULL AS locked_shared;
SELECT fencing.acquire_lease('OWN LOCK', '1 minute');
\echo sqlstate: :LAST_ERROR_SQLSTATE
ROLLBACK;
SELECT pg_advisory_lock(fencing.lock_key('own lock'));
SELECT fencing.acquire_lease('own lock', '1 minute');
\echo sqlstate: :LAST_ERROR_SQLSTATE
SELECT pg_advisory_unlock(fencing.lock_key('own lock'));
SELECT count(*) AS leases_on_own_lock FROM fencing.leases WHERE name = 'own lock';

-- L6: a name whose key is leased under another name is a collision
-- (FN002), not contention.  (A real collision of hashtextextended, as in
-- test/isolation/specs/locks_collision.spec.)
SELECT fencing.lock_key('k3572106e45a860d4') = fencing.lock_key('k756635f53ad34c6c') AS same_key;
SELECT fencing.acquire_lease('k3572106e45a860d4', '1 minute') AS c \gset
SELECT fencing.acquire_lease('k756635f53ad34c6c', '1 minute');
\echo sqlstate: :LAST_ERROR_SQLSTATE
BEGIN;
SELECT fencing.try_lock('k756635f53ad34c6c');
\echo sqlstate: :LAST_ERROR_SQLSTATE
ROLLBACK;
SELECT lease_error(format('SELECT fencing.renew_lease(%L, %s)', 'k756635f53ad34c6c', :c));
SELECT fencing.release_lease('k3572106e45a860d4', :c) AS released;

-- A lease that lapses is gone for its holder: renew, use and release
-- answer as for anyone else, even though nobody took the name since (no
-- resurrection), and the name is free again (fencing.lock_delay is 0).
SELECT fencing.acquire_lease('short lease', '20 milliseconds') AS s \gset
SELECT pg_sleep(0.1);
-- (The detail says that it expired, or, once the keeper dropped the
-- entry, that nobody holds it; only the SQLSTATE is shown.)
\set VERBOSITY sqlstate
SELECT fencing.renew_lease('short lease', :s);
\set VERBOSITY default
SELECT fencing.release_lease('short lease', :s) AS released_after_lapse;
SELECT count(*) AS shown FROM fencing.leases WHERE name = 'short lease';
SELECT fencing.acquire_lease('short lease', '1 minute') > :s AS taken_again_higher;

-- break_lease: revoked from PUBLIC; an operator frees the lease whatever
-- its token and gets that token; NULL when nothing is held.  The holder's
-- next renewal is FN004.
CREATE ROLE regress_lease_worker;
GRANT EXECUTE ON FUNCTION fencing.use_lease(text, bigint) TO regress_lease_worker;
SET SESSION AUTHORIZATION regress_lease_worker;
SELECT fencing.break_lease('nightly invoices');
\echo sqlstate: :LAST_ERROR_SQLSTATE
-- Tokens are not secrets (they count up, and latest_token() is public):
-- the right token does not let another session user renew, use or
-- release a lease.  Only the session user that acquired it, or a
-- superuser, does.
SELECT lease_error(format('SELECT fencing.renew_lease(%L, %s)', 'nightly invoices', :t));
SELECT fencing.release_lease('nightly invoices', :t) AS released_by_another_role;
BEGIN;
SELECT lease_error(format('SELECT fencing.use_lease(%L, %s)', 'nightly invoices', :t));
ROLLBACK;
-- Another session user sees the lease, but not its name, token or holder
-- (the rule of fencing.locks: a lease belongs to the session user that
-- acquired it).
SELECT name, token, holder, database = current_database() AS this_database
FROM fencing.leases ORDER BY expires_at;
SELECT name, key, token, pid, mode FROM fencing.locks ORDER BY since;
-- Its own lease it sees whole; use_lease needs EXECUTE on use_lease, which
-- PUBLIC lacks, and not on check_fence: the role raises the fence of the
-- names it holds a lease on, and of no other.
SELECT fencing.acquire_lease('worker lease', '1 minute', holder => 'worker') AS w \gset
SELECT name, token = :w AS own_token, holder FROM fencing.leases WHERE name IS NOT NULL;
SELECT has_function_privilege('public', 'fencing.use_lease(text, bigint)', 'EXECUTE') AS public_may_use,
	   has_function_privilege('fencing.check_fence(text, bigint)', 'EXECUTE') AS may_check_fence;
BEGIN;
SELECT fencing.use_lease('worker lease', :w) = :w AS used;
COMMIT;
SELECT fencing.check_fence('nightly invoices', fencing.latest_token());
\echo sqlstate: :LAST_ERROR_SQLSTATE
RESET SESSION AUTHORIZATION;
REVOKE EXECUTE ON FUNCTION fencing.use_lease(text, bigint) FROM regress_lease_worker;
SET SESSION AUTHORIZATION regress_lease_worker;
-- Without that right use_lease is refused before it touches the lease.
SELECT renewed_at AS worker_renewed FROM fencing.leases WHERE name = 'worker lease' \gset
BEGIN;
SELECT fencing.use_lease('worker lease', :w);
\echo sqlstate: :LAST_ERROR_SQLSTATE
ROLLBACK;
SELECT renewed_at = :'worker_renewed' AS not_renewed FROM fencing.leases WHERE name = 'worker lease';
-- Where PUBLIC may execute use_lease (granted to PUBLIC, or an extension
-- created before 1.3 and not yet updated), that right says nothing of the
-- role, and use_lease also wants EXECUTE on check_fence; it says which
-- GRANT gives the right.
RESET SESSION AUTHORIZATION;
GRANT EXECUTE ON FUNCTION fencing.use_lease(text, bigint) TO PUBLIC;
SET SESSION AUTHORIZATION regress_lease_worker;
BEGIN;
SELECT fencing.use_lease('worker lease', :w);
\echo sqlstate: :LAST_ERROR_SQLSTATE
ROLLBACK;
SELECT renewed_at = :'worker_renewed' AS not_renewed FROM fencing.leases WHERE name = 'worker lease';
RESET SESSION AUTHORIZATION;
GRANT EXECUTE ON FUNCTION fencing.check_fence(text, bigint) TO regress_lease_worker;
SET SESSION AUTHORIZATION regress_lease_worker;
BEGIN;
SELECT fencing.use_lease('worker lease', :w) = :w AS used_with_check_fence;
COMMIT;
RESET SESSION AUTHORIZATION;
REVOKE EXECUTE ON FUNCTION fencing.use_lease(text, bigint) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION fencing.check_fence(text, bigint) FROM regress_lease_worker;
SET SESSION AUTHORIZATION regress_lease_worker;
SELECT fencing.release_lease('worker lease', :w) AS released;
RESET SESSION AUTHORIZATION;
SELECT count(*) AS still_held FROM fencing.leases
WHERE name = 'nightly invoices' AND token = :t;
SELECT fencing.break_lease('Nightly Invoices') = :t AS broken_token;
SELECT fencing.break_lease('nightly invoices') IS NULL AS nothing_left;
\set VERBOSITY sqlstate
SELECT fencing.renew_lease('nightly invoices', :t);
\set VERBOSITY default
SELECT fencing.acquire_lease('short lease', '1 minute') IS NULL AS second_acquire_refused;
SELECT fencing.break_lease('short lease') IS NOT NULL AS broke_short;

-- The counters of this file's leases.
SELECT leases_acquired - :a0 AS acquired, leases_renewed - :r0 AS renewed,
	   leases_released - :x0 AS released, leases_broken - :b0 AS broken
FROM fencing.stats;

-- fencing.max_leases: a postmaster setting.
SELECT boot_val, context, min_val, max_val FROM pg_settings WHERE name = 'fencing.max_leases';

DROP TABLE lease_ledger;
DROP FUNCTION lease_error(text);
DROP ROLE regress_lease_worker;
SELECT count(*) AS leases_left FROM fencing.leases;
