--
-- Named locks within one session: fencing.try_lock, fencing.lock,
-- fencing.lease, fencing.held_token and the view fencing.locks (DESIGN.md
-- lock contract L2, L3, L5, L6 and the API rows).  Contention between
-- sessions is in test/isolation/specs/locks_*.spec, races and leases in
-- test/t/03*.pl.
--
-- Token values, pids and times differ from run to run, so the output shows
-- comparisons only.  Errors are followed by their SQLSTATE.
--

-- Argument errors, checked before any lock is taken.
SELECT fencing.try_lock(NULL);
\echo sqlstate: :LAST_ERROR_SQLSTATE
SELECT fencing.lock(NULL);
\echo sqlstate: :LAST_ERROR_SQLSTATE
SELECT fencing.lease(NULL, '1 minute');
\echo sqlstate: :LAST_ERROR_SQLSTATE
SELECT fencing.try_lock('');
\echo sqlstate: :LAST_ERROR_SQLSTATE
SELECT fencing.try_lock(E' \t\n ');
\echo sqlstate: :LAST_ERROR_SQLSTATE
SELECT fencing.try_lock(repeat('x', 201));
\echo sqlstate: :LAST_ERROR_SQLSTATE
SELECT fencing.lock(repeat('x', 5000));
\echo sqlstate: :LAST_ERROR_SQLSTATE
SELECT fencing.lock('job', '-1 second');
\echo sqlstate: :LAST_ERROR_SQLSTATE
SELECT fencing.lock('job', '1 day -25 hours');
\echo sqlstate: :LAST_ERROR_SQLSTATE
SELECT fencing.lease('job', NULL);
\echo sqlstate: :LAST_ERROR_SQLSTATE
SELECT fencing.lease('job', '0');
\echo sqlstate: :LAST_ERROR_SQLSTATE
SELECT fencing.lease('job', '-5 seconds');
\echo sqlstate: :LAST_ERROR_SQLSTATE
SELECT fencing.lease('job', '0.5 milliseconds');
\echo sqlstate: :LAST_ERROR_SQLSTATE
SELECT fencing.lease('job', '30 days');
\echo sqlstate: :LAST_ERROR_SQLSTATE
-- held_token is strict: no name, no lock.
SELECT fencing.held_token(NULL) IS NULL AS null_name_holds_nothing;
-- None of the failed calls left a lock behind.
SELECT count(*) AS rows_in_view FROM fencing.locks WHERE pid = pg_backend_pid();

-- A grant hands out a fresh token, above every earlier one.
SELECT fencing.latest_token() AS before \gset
BEGIN;
SELECT fencing.try_lock('Invoice-Run:2026-10') AS t1 \gset
SELECT :t1 > :before AS fresh_token;

-- L5: taking the lock again in the same transaction, under any spelling of
-- the name and through any of the functions, returns the same token.
SELECT fencing.try_lock('Invoice-Run:2026-10') = :t1 AS try_lock_again,
	   fencing.try_lock(E'  INVOICE-RUN:2026-10\t') = :t1 AS other_spelling,
	   fencing.lock('invoice-run:2026-10') = :t1 AS lock_again,
	   fencing.lock('invoice-run:2026-10', '0') = :t1 AS lock_zero_timeout,
	   fencing.lock('invoice-run:2026-10', '1 second') = :t1 AS lock_timeout,
	   fencing.held_token('INVOICE-RUN:2026-10') = :t1 AS held_token;

-- L2: it is the core advisory lock on fencing.lock_key(name), which is
-- hashtextextended of the canonical name, in transaction scope.
SELECT fencing.lock_key('Invoice-Run:2026-10') =
	   hashtextextended('invoice-run:2026-10', 0) AS key_is_raw_hash;
SELECT locktype, mode, granted, objsubid,
	   (classid::bigint << 32) | objid::bigint =
	   hashtextextended('invoice-run:2026-10', 0) AS same_key
FROM pg_locks
WHERE locktype = 'advisory' AND pid = pg_backend_pid();
-- The raw function sees the lock as already ours, and takes no second one.
SELECT pg_try_advisory_xact_lock(hashtextextended('invoice-run:2026-10', 0))
	   AS raw_reentrant;
SELECT count(*) AS advisory_locks FROM pg_locks
WHERE locktype = 'advisory' AND pid = pg_backend_pid();

-- The view names the lock with this session's own data.
SELECT database = current_database() AS this_database,
	   name,
	   key = fencing.lock_key('Invoice-Run:2026-10') AS right_key,
	   token = :t1 AS right_token,
	   pid = pg_backend_pid() AS this_backend,
	   since BETWEEN now() AND clock_timestamp() AS since_this_transaction,
	   granted
FROM fencing.locks WHERE pid = pg_backend_pid();
COMMIT;

-- L3: released at commit.
SELECT fencing.held_token('Invoice-Run:2026-10') IS NULL AS not_held_after_commit;
SELECT count(*) AS rows_in_view FROM fencing.locks WHERE pid = pg_backend_pid();
SELECT count(*) AS advisory_locks FROM pg_locks
WHERE locktype = 'advisory' AND pid = pg_backend_pid();

-- L5 with many names held at once (more than the first sizes of the
-- transaction's index of held locks, so that some names share a bucket):
-- each name taken again returns its first token, through each function.
BEGIN;
CREATE TEMP TABLE first_grants ON COMMIT DROP AS
SELECT i, fencing.try_lock('many names ' || i) AS token
FROM generate_series(1, 300) i;
SELECT count(*) AS names, count(DISTINCT token) AS distinct_tokens
FROM first_grants;
SELECT count(*) FILTER (WHERE fencing.held_token('many names ' || i) = token)
		 AS held_token_same,
	   count(*) FILTER (WHERE fencing.try_lock('Many  Names ' || i) = token)
		 AS try_lock_same,
	   count(*) FILTER (WHERE fencing.lock('MANY NAMES ' || i) = token)
		 AS lock_same,
	   count(*) FILTER (WHERE fencing.lock('many names ' || i, '1 second') = token)
		 AS lock_timeout_same
FROM first_grants;
SELECT count(*) AS advisory_locks FROM pg_locks
WHERE locktype = 'advisory' AND pid = pg_backend_pid();
COMMIT;

-- The next transaction gets a new, higher token.
BEGIN;
SELECT fencing.try_lock('Invoice-Run:2026-10') > :t1 AS higher_token;
ROLLBACK;

-- L3: released at rollback.
SELECT fencing.held_token('Invoice-Run:2026-10') IS NULL AS not_held_after_rollback;
SELECT count(*) AS rows_in_view FROM fencing.locks WHERE pid = pg_backend_pid();
SELECT count(*) AS advisory_locks FROM pg_locks
WHERE locktype = 'advisory' AND pid = pg_backend_pid();

-- A lock the transaction took with the raw function gets a token when it is
-- taken through fencing too, and keeps it.
BEGIN;
SELECT pg_try_advisory_xact_lock(hashtextextended('raw first', 0)) AS raw_granted;
SELECT fencing.held_token('raw first') IS NULL AS no_token_yet;
SELECT fencing.try_lock('Raw First') AS t_raw \gset
SELECT :t_raw > :t1 AS token_granted,
	   fencing.try_lock('raw first') = :t_raw AS same_token_again;
SELECT count(*) AS advisory_locks FROM pg_locks
WHERE locktype = 'advisory' AND pid = pg_backend_pid();
COMMIT;

-- Subtransactions follow core: a lock first taken in a subtransaction that
-- rolls back is released with it; a lock the parent already held survives
-- with its token; a released subtransaction passes its locks to the parent.
BEGIN;
SELECT fencing.try_lock('outer') AS t_outer \gset
SAVEPOINT sp;
SELECT fencing.try_lock('inner') IS NOT NULL AS inner_granted,
	   fencing.try_lock('outer') = :t_outer AS outer_same_token;
ROLLBACK TO sp;
SELECT fencing.held_token('inner') IS NULL AS inner_released,
	   fencing.held_token('outer') = :t_outer AS outer_kept;
SELECT name FROM fencing.locks WHERE pid = pg_backend_pid() ORDER BY name;
SELECT count(*) AS advisory_locks FROM pg_locks
WHERE locktype = 'advisory' AND pid = pg_backend_pid();
SAVEPOINT sp2;
SELECT fencing.try_lock('kept') AS t_kept \gset
RELEASE sp2;
SELECT fencing.held_token('kept') = :t_kept AS kept_after_release;
SAVEPOINT sp3;
SELECT fencing.try_lock('kept') = :t_kept AS same_in_new_subtransaction;
ROLLBACK TO sp3;
SELECT fencing.held_token('kept') = :t_kept AS still_kept;
SELECT name FROM fencing.locks WHERE pid = pg_backend_pid() ORDER BY name;
-- An error in a subtransaction (as in a PL/pgSQL exception block) releases
-- what it took.
DO $$
BEGIN
	PERFORM fencing.try_lock('in failed block');
	PERFORM 1 / 0;
EXCEPTION WHEN division_by_zero THEN
	NULL;
END
$$;
SELECT fencing.held_token('in failed block') IS NULL AS released_with_block;
SELECT name FROM fencing.locks WHERE pid = pg_backend_pid() ORDER BY name;
COMMIT;
SELECT count(*) AS rows_in_view FROM fencing.locks WHERE pid = pg_backend_pid();

-- fencing.lock() on a free name, with and without a timeout.
BEGIN;
SELECT fencing.lock('free') IS NOT NULL AS no_timeout,
	   fencing.lock('free too', '10 milliseconds') IS NOT NULL AS with_timeout,
	   fencing.lock('free three', '0') IS NOT NULL AS zero_timeout;
COMMIT;

-- A lease is a lock plus an idle-in-transaction limit for the rest of the
-- transaction; a later, longer lease does not lengthen it, and the
-- session's setting returns at the end of the transaction.
SHOW idle_in_transaction_session_timeout;
BEGIN;
SELECT fencing.lease('job', '2 minutes') AS t_job \gset
SHOW idle_in_transaction_session_timeout;
SELECT fencing.lease('job', '1 hour') = :t_job AS same_token;
SELECT fencing.lease('other job', '1 hour') IS NOT NULL AS granted;
SHOW idle_in_transaction_session_timeout;
SELECT fencing.lease('third job', '1.5 seconds') IS NOT NULL AS granted;
SHOW idle_in_transaction_session_timeout;
SELECT fencing.held_token('job') = :t_job AS held;
COMMIT;
SHOW idle_in_transaction_session_timeout;
-- A session limit shorter than the ttl stays in force.
SET idle_in_transaction_session_timeout = '10s';
BEGIN;
SELECT fencing.lease('job', '1 minute') IS NOT NULL AS granted;
SHOW idle_in_transaction_session_timeout;
COMMIT;
RESET idle_in_transaction_session_timeout;

-- A transaction holding fencing locks cannot be prepared.
BEGIN;
SELECT fencing.try_lock('two phase') IS NOT NULL AS granted;
PREPARE TRANSACTION 'fencing_locks_test';
\echo sqlstate: :LAST_ERROR_SQLSTATE
SELECT count(*) AS rows_in_view FROM fencing.locks WHERE pid = pg_backend_pid();
SELECT count(*) AS prepared FROM pg_prepared_xacts WHERE gid = 'fencing_locks_test';

-- Counters: each call that returns a token counts as granted.
SELECT locks_granted AS g0, leases_granted AS l0 FROM fencing.stats \gset
BEGIN;
SELECT fencing.try_lock('counted') IS NOT NULL, fencing.lock('counted') IS NOT NULL,
	   fencing.lease('counted lease', '1 minute') IS NOT NULL;
COMMIT;
SELECT locks_granted - :g0 AS locks_granted, leases_granted - :l0 AS leases_granted
FROM fencing.stats;

-- Outside a transaction block a lock lasts only as long as the statement
-- that took it, so the token it returns guards nothing: a WARNING (SQLSTATE
-- 25P01, as for SET LOCAL) says so, once per statement, from try_lock, lock
-- and lease alike.  A busy name takes no lock and gets no warning.
SELECT fencing.try_lock('autocommit') IS NOT NULL AS granted;
SELECT fencing.lock('autocommit', '1 second') IS NOT NULL AS granted;
SELECT fencing.lease('autocommit', '1 minute') IS NOT NULL AS granted;
SELECT fencing.held_token('autocommit') IS NULL AS released_already;
SELECT count(fencing.try_lock('autocommit ' || i)) AS granted
FROM generate_series(1, 3) i;
\set VERBOSITY sqlstate
SELECT fencing.lock('autocommit') IS NOT NULL AS granted;
\set VERBOSITY default
-- None inside a transaction block, nor in an implicit one (several
-- statements in one query message share a transaction, and the lock lasts
-- until its end) ...
BEGIN;
SELECT fencing.try_lock('in block') IS NOT NULL AS granted,
	   fencing.lock('in block 2') IS NOT NULL AS lock_granted,
	   fencing.lease('in block 3', '1 minute') IS NOT NULL AS lease_granted;
COMMIT;
SELECT fencing.try_lock('implicit block') IS NOT NULL AS granted \; SELECT fencing.held_token('implicit block') IS NOT NULL AS still_held;
SELECT fencing.held_token('implicit block') IS NULL AS released_at_the_end;
-- A one-line SQL function is inlined into the calling query, so it is the
-- top-level statement itself: it warns.
CREATE FUNCTION pg_temp.inlined_lock(n text) RETURNS bigint LANGUAGE sql
AS $$ SELECT fencing.try_lock(n) $$;
SELECT pg_temp.inlined_lock('inlined') IS NOT NULL AS granted;
-- ... nor inside a function, a procedure or a DO block, which may use the
-- lock within the same statement.
-- (PL/pgSQL runs "RETURN f()" and "x := f()" without the executor, and
-- "PERFORM f()" through it: both ways are tried.)
CREATE FUNCTION pg_temp.take_lock(n text) RETURNS bigint LANGUAGE plpgsql
AS $$ BEGIN RETURN fencing.try_lock(n); END $$;
SELECT pg_temp.take_lock('in function') IS NOT NULL AS granted;
CREATE FUNCTION pg_temp.take_lock_sql(n text) RETURNS bigint LANGUAGE sql
AS $$ SELECT 1; SELECT fencing.lock(n) $$;
SELECT pg_temp.take_lock_sql('in sql function') IS NOT NULL AS granted;
CREATE PROCEDURE pg_temp.take_locks(n text) LANGUAGE plpgsql
AS $$
DECLARE
	t bigint;
BEGIN
	t := fencing.try_lock(n);
	PERFORM fencing.lock(n || ' 2');
	t := fencing.lease(n || ' 3', '1 minute');
END
$$;
CALL pg_temp.take_locks('in procedure');
DO $$
DECLARE
	t bigint;
BEGIN
	PERFORM fencing.try_lock('in do');
	t := fencing.lock('in do 2', '1 second');
	PERFORM fencing.lease('in do 3', '1 minute');
END
$$;
SELECT count(*) AS rows_in_view FROM fencing.locks WHERE pid = pg_backend_pid();
