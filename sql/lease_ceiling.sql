--
-- fencing.lease(name, ttl, max_hold): the hard ceiling's arguments, its
-- signatures, and PREPARE TRANSACTION, within one session.  That the
-- server ends a holder at max_hold, busy or idle, is in
-- test/t/039_lease_ceiling.pl.  Errors are followed by their SQLSTATE.
--

-- lease() takes a third, defaulted argument; lease(name, ttl) still works
SELECT pg_get_function_arguments('fencing.lease'::regproc) AS lease_arguments;
BEGIN;
SELECT fencing.lease('ceiling', '1 minute') IS NOT NULL AS granted_without_max_hold;
SELECT fencing.lease('ceiling-2', '1 minute', NULL) IS NOT NULL AS granted_with_null_max_hold;
SELECT fencing.lease(name => 'ceiling-3', ttl => '1 minute', max_hold => '1 hour') IS NOT NULL AS granted_with_max_hold;
COMMIT;

-- Bad max_hold values, checked before the lock is tried (nothing is held
-- afterwards): zero, negative, longer than transaction_timeout's range.
SELECT fencing.lease('ceiling', '1 minute', '0');
\echo sqlstate: :LAST_ERROR_SQLSTATE
SELECT fencing.lease('ceiling', '1 minute', '-1 second');
\echo sqlstate: :LAST_ERROR_SQLSTATE
SELECT fencing.lease('ceiling', '1 minute', '1 day -25 hours');
\echo sqlstate: :LAST_ERROR_SQLSTATE
SELECT fencing.lease('ceiling', '1 minute', '25 days');
\echo sqlstate: :LAST_ERROR_SQLSTATE
-- a NULL ttl is still the first error
SELECT fencing.lease('ceiling', NULL, '0');
\echo sqlstate: :LAST_ERROR_SQLSTATE
SELECT count(*) AS locks_left FROM fencing.locks WHERE name LIKE 'ceiling%';

-- A max_hold shorter than the ttl is legal (the ceiling simply comes
-- first), and so is the longest one, 24 days and a bit.  (A
-- sub-millisecond one is 1 ms: it would end this session, so it is tried
-- in test/t/039_lease_ceiling.pl.)
BEGIN;
SELECT fencing.lease('ceiling', '1 hour', '10 minutes') IS NOT NULL AS shorter_than_ttl;
SELECT fencing.lease('ceiling-2', '1 minute', '24 days') IS NOT NULL AS longest;
-- reentry with a later ceiling: the same token, the earlier ceiling stays
SELECT fencing.lease('ceiling', '1 hour', '20 minutes') = fencing.held_token('ceiling') AS same_token;
COMMIT;

-- PREPARE TRANSACTION is refused while a lease with max_hold is held: the
-- prepared transaction would keep the lock past the ceiling.
BEGIN;
SELECT fencing.lease('ceiling', '1 minute', '1 hour') IS NOT NULL AS granted;
PREPARE TRANSACTION 'ceiling';
\echo sqlstate: :LAST_ERROR_SQLSTATE
SELECT count(*) AS prepared FROM pg_prepared_xacts WHERE gid = 'ceiling';
SELECT count(*) AS locks_left FROM fencing.locks WHERE name = 'ceiling';

-- ... also when the ceiling came from a savepoint released into the
-- transaction, and not when it was rolled back with its savepoint (the
-- plain lock then still blocks PREPARE, with the message of any lock).
BEGIN;
SAVEPOINT s;
SELECT fencing.lease('ceiling', '1 minute', '1 hour') IS NOT NULL AS granted;
RELEASE SAVEPOINT s;
PREPARE TRANSACTION 'ceiling';
\echo sqlstate: :LAST_ERROR_SQLSTATE
BEGIN;
SELECT fencing.try_lock('ceiling') IS NOT NULL AS granted;
SAVEPOINT s;
SELECT fencing.lease('ceiling', '1 minute', '1 hour') IS NOT NULL AS granted;
ROLLBACK TO SAVEPOINT s;
PREPARE TRANSACTION 'ceiling';
\echo sqlstate: :LAST_ERROR_SQLSTATE

-- fencing.stats has a column for the sessions a ceiling ended (the TAP
-- test checks the count)
SELECT leases_ceiling_ended >= 0 AS has_column FROM fencing.stats;
