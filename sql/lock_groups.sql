--
-- Lock groups within one session: fencing.try_lock_all and
-- fencing.lock_all (DESIGN.md "Additions in 1.1").  All names or none, one
-- fresh token for the group, names equal after normalisation counted once,
-- the same core locks as fencing.try_lock.  Contention, deadlock freedom
-- and timeouts between sessions are in test/t/035_lock_groups.pl.
--
-- Token values and pids differ from run to run, so the output shows
-- comparisons only.  Errors are followed by their SQLSTATE.
--

-- Argument errors, checked before any lock is taken.
SELECT fencing.try_lock_all(NULL);
\echo sqlstate: :LAST_ERROR_SQLSTATE
SELECT fencing.try_lock_all('{}');
\echo sqlstate: :LAST_ERROR_SQLSTATE
SELECT fencing.lock_all(ARRAY['a', NULL, 'b']);
\echo sqlstate: :LAST_ERROR_SQLSTATE
SELECT fencing.try_lock_all(ARRAY['a', '']);
\echo sqlstate: :LAST_ERROR_SQLSTATE
SELECT fencing.lock_all(ARRAY['a'], '-1 second');
\echo sqlstate: :LAST_ERROR_SQLSTATE
-- Two names with the same key (a real collision of hashtextextended, see
-- test/isolation/specs/locks_collision.spec) cannot be one group (L6).
SELECT fencing.lock_key('k3572106e45a860d4') = fencing.lock_key('k756635f53ad34c6c') AS same_key;
SELECT fencing.try_lock_all(ARRAY['k3572106e45a860d4', 'x', 'K756635F53AD34C6C']);
\echo sqlstate: :LAST_ERROR_SQLSTATE
-- None of the failed calls left a lock behind.
SELECT count(*) AS rows_in_view FROM fencing.locks WHERE pid = pg_backend_pid();
SELECT count(*) AS advisory_locks FROM pg_locks
WHERE pid = pg_backend_pid() AND locktype = 'advisory';

-- A group gets one fresh token; names equal after normalisation are one
-- lock; held_token() of each name returns the group's token.
SELECT fencing.latest_token() AS before \gset
BEGIN;
SELECT fencing.try_lock_all(ARRAY['Account:1', 'account:2', E' ACCOUNT:1\t']) AS t \gset
SELECT :t > :before AS fresh_token,
	   :t = fencing.latest_token() AS one_token_drawn;
SELECT fencing.held_token('account:1') = :t AS account_1,
	   fencing.held_token('ACCOUNT:2') = :t AS account_2;
SELECT name, token = :t AS group_token, granted
FROM fencing.locks WHERE pid = pg_backend_pid() ORDER BY name;
-- The locks are core's exclusive advisory locks on lock_key(name), as
-- pg_try_advisory_xact_lock takes them (L2).
SELECT n AS name, l.mode, l.granted
FROM unnest(ARRAY['account:1', 'account:2']) n
JOIN pg_locks l ON l.pid = pg_backend_pid() AND l.locktype = 'advisory'
	AND l.objsubid = 1
	AND l.classid::bigint = (fencing.lock_key(n) >> 32) & 4294967295
	AND l.objid::bigint = fencing.lock_key(n) & 4294967295
ORDER BY n;

-- L5 for groups: the same group, in any order and spelling, or any part of
-- it, returns the group's token; so does try_lock of one of its names.
SELECT fencing.try_lock_all(ARRAY['ACCOUNT:2', 'account:1']) = :t AS same_group,
	   fencing.lock_all(ARRAY['account:2']) = :t AS part_of_group,
	   fencing.lock_all(ARRAY['account:1', 'account:2'], '0') = :t AS zero_timeout,
	   fencing.try_lock('account:1') = :t AS single_name;
-- A group that overlaps locks held under other tokens has no one token.
SELECT fencing.try_lock('alone') IS NOT NULL AS alone_granted;
SELECT fencing.try_lock_all(ARRAY['account:1', 'account:3']);
\echo sqlstate: :LAST_ERROR_SQLSTATE
ROLLBACK;
BEGIN;
SELECT fencing.try_lock('alone') IS NOT NULL AS alone_granted;
SELECT fencing.lock_all(ARRAY['alone', 'other']);
\echo sqlstate: :LAST_ERROR_SQLSTATE
ROLLBACK;
-- Nor does a group whose names are all held, each under a token of its own.
BEGIN;
SELECT fencing.try_lock('apart:1') IS NOT NULL AS granted_1,
	   fencing.try_lock('apart:2') IS NOT NULL AS granted_2;
SAVEPOINT s;
SELECT fencing.try_lock_all(ARRAY['apart:1', 'apart:2']);
\echo sqlstate: :LAST_ERROR_SQLSTATE
ROLLBACK TO SAVEPOINT s;
SELECT fencing.lock_all(ARRAY['apart:2', 'apart:1'], '1 second');
\echo sqlstate: :LAST_ERROR_SQLSTATE
ROLLBACK;
SELECT count(*) AS rows_after_rollback FROM fencing.locks WHERE pid = pg_backend_pid();

-- A group taken in a subtransaction that rolls back is released with it;
-- one taken in a subtransaction that commits stays.
BEGIN;
SAVEPOINT s;
SELECT fencing.try_lock_all(ARRAY['sub:1', 'sub:2']) IS NOT NULL AS granted;
ROLLBACK TO SAVEPOINT s;
SELECT count(*) AS rows_after_savepoint_rollback FROM fencing.locks WHERE pid = pg_backend_pid();
SELECT count(*) AS advisory_after_savepoint_rollback FROM pg_locks
WHERE pid = pg_backend_pid() AND locktype = 'advisory';
SAVEPOINT s2;
SELECT fencing.lock_all(ARRAY['sub:1', 'sub:2'], '1 second') AS t2 \gset
RELEASE SAVEPOINT s2;
SELECT fencing.held_token('sub:2') = :t2 AS kept_after_release;
COMMIT;

-- A raw advisory lock the transaction already holds on one of the keys
-- does not stand in the way (it is the same lock).
BEGIN;
SELECT pg_advisory_xact_lock(fencing.lock_key('raw held'));
SELECT fencing.try_lock_all(ARRAY['raw held', 'raw free']) IS NOT NULL AS granted;
COMMIT;

-- Statistics: each name of a group counts as a lock granted, each group
-- once more as a group.
SELECT locks_granted AS g0, lock_groups_granted AS gg0 FROM fencing.stats \gset
BEGIN;
SELECT fencing.try_lock_all(ARRAY['count:1', 'count:2', 'count:3']) IS NOT NULL AS granted;
COMMIT;
SELECT locks_granted - :g0 AS locks_granted,
	   lock_groups_granted - :gg0 AS lock_groups_granted
FROM fencing.stats;

-- Outside a transaction block the group ends with the statement: the
-- autocommit WARNING (SQLSTATE 25P01) names every lock of it.
\set VERBOSITY sqlstate
SELECT fencing.try_lock_all(ARRAY['autocommit:b', 'autocommit:a']) IS NOT NULL AS granted;
\set VERBOSITY default
SELECT fencing.lock_all(ARRAY['autocommit:b', 'autocommit:a']) IS NOT NULL AS granted;
SELECT fencing.held_token('autocommit:a') IS NULL AS released_already;
