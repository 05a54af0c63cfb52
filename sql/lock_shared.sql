--
-- Shared locks within one session: fencing.try_lock_shared and
-- fencing.lock_shared, and the view's mode column.  Shared holders in
-- several sessions, exclusive waiters and the queue rule are in
-- test/isolation/specs/locks_shared.spec.
--
-- Token values and pids differ from run to run, so the output shows
-- comparisons only.  Errors are followed by their SQLSTATE.
--

SELECT fencing.try_lock_shared(NULL);
\echo sqlstate: :LAST_ERROR_SQLSTATE
SELECT fencing.lock_shared(NULL);
\echo sqlstate: :LAST_ERROR_SQLSTATE
SELECT fencing.lock_shared('x', '-1 second');
\echo sqlstate: :LAST_ERROR_SQLSTATE
SELECT fencing.try_lock_shared('');
\echo sqlstate: :LAST_ERROR_SQLSTATE

-- A shared grant is a fresh token; it is core's ShareLock on lock_key(name)
-- (the lock pg_advisory_xact_lock_shared takes), shown as "shared".
SELECT fencing.latest_token() AS before \gset
BEGIN;
SELECT fencing.try_lock_shared('Maintenance') AS t \gset
SELECT :t > :before AS fresh_token;
SELECT name, mode, token = :t AS same_token, granted
FROM fencing.locks WHERE pid = pg_backend_pid();
SELECT l.mode, l.granted FROM pg_locks l
WHERE l.pid = pg_backend_pid() AND l.locktype = 'advisory' AND l.objsubid = 1
  AND l.classid::bigint = (fencing.lock_key('maintenance') >> 32) & 4294967295
  AND l.objid::bigint = fencing.lock_key('maintenance') & 4294967295;
-- L5: taking it again, shared, returns the same token, as does held_token.
SELECT fencing.try_lock_shared('MAINTENANCE') = :t AS try_again,
	   fencing.lock_shared('maintenance', '1 second') = :t AS lock_again,
	   fencing.held_token('maintenance') = :t AS held_token;
-- A shared lock is not made exclusive (two shared holders doing so would
-- wait for each other): try_lock (as lock and lease) and a group refuse.
SELECT fencing.try_lock('maintenance');
\echo sqlstate: :LAST_ERROR_SQLSTATE
ROLLBACK;
BEGIN;
SELECT fencing.lock_shared('maintenance') IS NOT NULL AS granted;
SELECT fencing.lock_all(ARRAY['maintenance', 'other']);
\echo sqlstate: :LAST_ERROR_SQLSTATE
ROLLBACK;
-- An exclusive lock covers a shared request: the same token.
BEGIN;
SELECT fencing.try_lock('migration') AS x \gset
SELECT fencing.try_lock_shared('migration') = :x AS covered,
	   fencing.lock_shared('migration') = :x AS covered_wait;
SELECT mode FROM fencing.locks WHERE pid = pg_backend_pid();
COMMIT;
SELECT count(*) AS rows_after_commit FROM fencing.locks WHERE pid = pg_backend_pid();

-- Statistics: a shared grant counts as a lock granted and as a shared one.
SELECT locks_granted AS g0, shared_locks_granted AS s0 FROM fencing.stats \gset
BEGIN;
SELECT fencing.try_lock_shared('count shared') IS NOT NULL AS granted,
	   fencing.lock_shared('count shared 2') IS NOT NULL AS granted_wait;
COMMIT;
SELECT locks_granted - :g0 AS locks_granted,
	   shared_locks_granted - :s0 AS shared_locks_granted
FROM fencing.stats;

-- Outside a transaction block: the autocommit WARNING (25P01).
\set VERBOSITY sqlstate
SELECT fencing.try_lock_shared('autocommit shared') IS NOT NULL AS granted;
SELECT fencing.lock_shared('autocommit shared') IS NOT NULL AS granted;
\set VERBOSITY default
