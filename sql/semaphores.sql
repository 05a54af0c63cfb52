--
-- Counting semaphores within one session: fencing.try_acquire and
-- fencing.acquire.  Many holders at once, waiting without polling and
-- timeouts between sessions are in test/t/037_semaphores.pl.
--
-- Token values and pids differ from run to run, so the output shows
-- comparisons only.  Errors are followed by their SQLSTATE.
--

-- Argument errors, checked before anything is taken: permits must be
-- between 1 and 1000.
SELECT fencing.try_acquire(NULL, 3);
\echo sqlstate: :LAST_ERROR_SQLSTATE
SELECT fencing.try_acquire('api', NULL);
\echo sqlstate: :LAST_ERROR_SQLSTATE
SELECT fencing.try_acquire('api', 0);
\echo sqlstate: :LAST_ERROR_SQLSTATE
SELECT fencing.acquire('api', -1);
\echo sqlstate: :LAST_ERROR_SQLSTATE
SELECT fencing.acquire('api', 1001);
\echo sqlstate: :LAST_ERROR_SQLSTATE
SELECT fencing.acquire('api', 3, '-1 second');
\echo sqlstate: :LAST_ERROR_SQLSTATE
SELECT fencing.try_acquire('', 3);
\echo sqlstate: :LAST_ERROR_SQLSTATE
SELECT count(*) AS rows_in_view FROM fencing.locks WHERE pid = pg_backend_pid();
-- Both bounds are allowed.
BEGIN;
SELECT fencing.try_acquire('one permit', 1) IS NOT NULL AS granted_1,
	   fencing.acquire('most permits', 1000, '0') IS NOT NULL AS granted_1000;
SELECT name, mode FROM fencing.locks WHERE pid = pg_backend_pid() ORDER BY name;
COMMIT;

-- A permit is a fresh token of its own; the view shows which permit.
SELECT fencing.latest_token() AS before \gset
BEGIN;
SELECT fencing.try_acquire('Rate-Limited API', 3) AS t \gset
SELECT :t > :before AS fresh_token;
SELECT name, mode, token = :t AS same_token, granted
FROM fencing.locks WHERE pid = pg_backend_pid();
-- Reentry in one transaction returns the same token, whatever the call.
SELECT fencing.try_acquire('rate-limited api', 3) = :t AS try_again,
	   fencing.acquire(' RATE-LIMITED API ', 3) = :t AS acquire_again,
	   fencing.acquire('rate-limited api', 3, '0') = :t AS zero_timeout,
	   fencing.held_token('rate-limited api') = :t AS held_token;
-- The permits of a name are apart from the name's lock: both can be held,
-- each with its own token.
SELECT fencing.try_lock('rate-limited api') AS l \gset
SELECT :l > :t AS own_token,
	   fencing.held_token('rate-limited api') = :l AS held_token_is_the_lock;
-- Permit 1 is a core advisory lock of its own (objsubid 16385), not one the
-- raw advisory functions can take.
SELECT objsubid, mode, granted FROM pg_locks
WHERE pid = pg_backend_pid() AND locktype = 'advisory' ORDER BY objsubid;
COMMIT;
SELECT count(*) AS rows_after_commit FROM fencing.locks WHERE pid = pg_backend_pid();

-- A permit taken in a savepoint that rolls back is released with it.
BEGIN;
SAVEPOINT s;
SELECT fencing.try_acquire('api', 1) IS NOT NULL AS granted;
ROLLBACK TO SAVEPOINT s;
SELECT count(*) AS rows_after_savepoint_rollback FROM fencing.locks WHERE pid = pg_backend_pid();
SELECT fencing.try_acquire('api', 1) IS NOT NULL AS granted_again;
COMMIT;

-- Statistics: a permit counts as a lock granted and as a permit.
SELECT locks_granted AS g0, permits_granted AS p0 FROM fencing.stats \gset
BEGIN;
SELECT fencing.try_acquire('count permits', 2) IS NOT NULL AS granted,
	   fencing.acquire('count permits 2', 2) IS NOT NULL AS granted_wait;
COMMIT;
SELECT locks_granted - :g0 AS locks_granted, permits_granted - :p0 AS permits_granted
FROM fencing.stats;

-- Outside a transaction block: the autocommit WARNING (25P01).
\set VERBOSITY sqlstate
SELECT fencing.try_acquire('autocommit permit', 2) IS NOT NULL AS granted;
SELECT fencing.acquire('autocommit permit', 2) IS NOT NULL AS granted;
\set VERBOSITY default
