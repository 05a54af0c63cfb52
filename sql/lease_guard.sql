--
-- A lease is only as good as the idle limit behind it: while a lease is in
-- force, idle_in_transaction_session_timeout cannot be lengthened or
-- switched off by the holder's own session (SET, RESET, set_config, from a
-- DO block); it is put back to the lease's ttl after the statement, with a
-- WARNING.  A shorter limit stays.  The session's own value returns when
-- the transaction ends.
--
SET idle_in_transaction_session_timeout = 0;
BEGIN;
SELECT fencing.lease('lease-guard', '30 seconds') IS NOT NULL AS granted;
SHOW idle_in_transaction_session_timeout;
SET idle_in_transaction_session_timeout = 0;
SHOW idle_in_transaction_session_timeout;
RESET idle_in_transaction_session_timeout;
SHOW idle_in_transaction_session_timeout;
SELECT set_config('idle_in_transaction_session_timeout', '1h', true) AS in_the_statement;
SHOW idle_in_transaction_session_timeout;
DO $$ BEGIN PERFORM set_config('idle_in_transaction_session_timeout', '0', false); END $$;
SHOW idle_in_transaction_session_timeout;
-- shorter than the lease: allowed, silently
SET LOCAL idle_in_transaction_session_timeout = '20s';
SHOW idle_in_transaction_session_timeout;
-- a second, shorter lease on another name: the shortest ttl is kept
SELECT fencing.lease('lease-guard-2', '10 seconds') IS NOT NULL AS granted;
SET LOCAL idle_in_transaction_session_timeout = '25s';
SHOW idle_in_transaction_session_timeout;
COMMIT;
-- the session's own value is back, and changing it warns no more
SHOW idle_in_transaction_session_timeout;
SET idle_in_transaction_session_timeout = '1h';
SHOW idle_in_transaction_session_timeout;

-- a lease rolled back with its savepoint no longer holds the limit
BEGIN;
SAVEPOINT s;
SELECT fencing.lease('lease-guard', '30 seconds') IS NOT NULL AS granted;
ROLLBACK TO SAVEPOINT s;
SET LOCAL idle_in_transaction_session_timeout = 0;
SHOW idle_in_transaction_session_timeout;
COMMIT;

-- leasing a held name again: the shorter ttl counts, whichever comes first
BEGIN;
SELECT fencing.lease('lease-again', '30 seconds') IS NOT NULL AS granted;
SELECT fencing.lease('lease-again', '10 seconds') IS NOT NULL AS granted;
SET LOCAL idle_in_transaction_session_timeout = 0;
SHOW idle_in_transaction_session_timeout;
COMMIT;
BEGIN;
SELECT fencing.lease('lease-again', '10 seconds') IS NOT NULL AS granted;
SELECT fencing.lease('lease-again', '30 seconds') IS NOT NULL AS granted;
SET LOCAL idle_in_transaction_session_timeout = 0;
SHOW idle_in_transaction_session_timeout;
COMMIT;

-- a shorter ttl taken in a savepoint goes with its rollback: the ttl in
-- force before it is back, silently, and is the one kept afterwards; one
-- taken in a released savepoint stays
BEGIN;
SELECT fencing.lease('lease-again', '30 seconds') IS NOT NULL AS granted;
SAVEPOINT s;
SELECT fencing.lease('lease-again', '2 seconds') IS NOT NULL AS granted;
SHOW idle_in_transaction_session_timeout;
ROLLBACK TO SAVEPOINT s;
SHOW idle_in_transaction_session_timeout;
SET LOCAL idle_in_transaction_session_timeout = 0;
SHOW idle_in_transaction_session_timeout;
SAVEPOINT s2;
SELECT fencing.lease('lease-again', '5 seconds') IS NOT NULL AS granted;
RELEASE SAVEPOINT s2;
SET LOCAL idle_in_transaction_session_timeout = 0;
SHOW idle_in_transaction_session_timeout;
COMMIT;

-- a lease taken by a cursor that fails in a savepoint goes with its
-- rollback, lock and ttl alike: a later, longer lease is the limit
BEGIN;
DECLARE c CURSOR FOR SELECT fencing.lease('cursor lease', '1 second') IS NOT NULL AS granted,
	1 / (2 - i) AS fails_on_row_2 FROM generate_series(1, 2) i;
SAVEPOINT s;
FETCH 2 FROM c;
ROLLBACK TO SAVEPOINT s;
SELECT fencing.held_token('cursor lease') IS NULL AS released;
SELECT fencing.lease('after the cursor', '30 seconds') IS NOT NULL AS granted;
SHOW idle_in_transaction_session_timeout;
SET LOCAL idle_in_transaction_session_timeout = 0;
SHOW idle_in_transaction_session_timeout;
COMMIT;

-- a plain lock is no lease: nothing is kept
BEGIN;
SELECT fencing.try_lock('lease-guard') IS NOT NULL AS granted;
SET LOCAL idle_in_transaction_session_timeout = 0;
SHOW idle_in_transaction_session_timeout;
COMMIT;
RESET idle_in_transaction_session_timeout;
