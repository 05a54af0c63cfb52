--
-- tokens: the SQL-level contract of fence tokens (DESIGN.md T1, T5, T6
-- marks, and the rules of fencing.advance_token).
--
-- Token values depend on the clock and on earlier tests, so this file
-- prints comparisons (t/f), never a raw token.
--

-- next_token() increases from call to call
SELECT fencing.next_token() AS t1 \gset
SELECT fencing.next_token() AS t2 \gset
SELECT :t2 > :t1 AS second_call_greater;

-- ... and row by row within one statement
SELECT bool_and(token > previous) AS strictly_increasing,
       count(*) AS pairs,
       count(DISTINCT token) AS distinct_tokens
FROM (SELECT token, lag(token) OVER (ORDER BY n) AS previous
      FROM (SELECT n, fencing.next_token() AS token
            FROM generate_series(1, 10000) AS n) AS drawn) AS pairs
WHERE previous IS NOT NULL;

-- latest_token() covers the last token handed out and has no side effect
SELECT fencing.next_token() AS t3 \gset
SELECT fencing.latest_token() >= :t3 AS latest_covers_last;
SELECT tokens_issued AS issued_before FROM fencing.stats \gset
SELECT fencing.latest_token() AS l1 \gset
SELECT fencing.latest_token() AS l2 \gset
SELECT :l1 = :l2 AS latest_is_stable,
       fencing.latest_token() = fencing.latest_token() AS same_in_one_statement;
SELECT tokens_issued = :issued_before AS latest_issues_nothing FROM fencing.stats;
SELECT fencing.next_token() > :l2 AS next_above_latest;

-- tokens are cluster-wide: a token drawn in another database is below the
-- next one drawn here
\set suite_db :DBNAME
CREATE DATABASE regress_fencing_other;
\c regress_fencing_other
CREATE EXTENSION fencing;
SELECT fencing.next_token() AS other_db_token \gset
\c :suite_db
SELECT fencing.next_token() > :other_db_token AS above_other_database;
DROP DATABASE regress_fencing_other;

-- fencing.stats counts every token and every reservation
SELECT tokens_issued AS issued0, reservations AS reservations0
FROM fencing.stats \gset
SELECT count(fencing.next_token()) FROM generate_series(1, 1000);
SELECT tokens_issued - :issued0 AS issued_delta FROM fencing.stats;

-- advance_token moves every later token above its target.  The target is
-- 3 ms ahead, past any reservation (which reaches at most 2 ms past the
-- clock), so the call waits for the clock and the lead bound holds: this
-- suite runs on servers people care about (make installcheck) and moves
-- the cluster-wide counter no further than the clock.  Far targets, which
-- leave tokens ahead of the clock for as long as the distance, are in
-- test/t/018_tokens_advance_far.pl on a throwaway server.
SELECT fencing.latest_token() + 3000000 AS ahead \gset
SELECT fencing.advance_token(:ahead) >= :ahead AS advance_returns_at_least;
SELECT fencing.latest_token() >= :ahead AS latest_moved;
SELECT fencing.next_token() > :ahead AS next_above_target;
SELECT reservations > :reservations0 AS reservation_made FROM fencing.stats;
SELECT tokens_ahead_of_clock <= 2000000 AS within_lead_bound FROM fencing.status();

-- ... and never moves back
SELECT fencing.latest_token() AS before_back \gset
SELECT fencing.advance_token(:before_back - 1000) >= :before_back AS no_move_back;
SELECT fencing.advance_token(0) >= :before_back AS zero_is_noop;
SELECT fencing.latest_token() = :before_back AS latest_unchanged;
SELECT fencing.next_token() > :before_back AS next_still_above;

-- bad arguments raise errors with their SQLSTATE
SELECT fencing.advance_token(NULL);
SELECT :'LAST_ERROR_SQLSTATE' AS sqlstate;
SELECT fencing.advance_token(-1);
SELECT :'LAST_ERROR_SQLSTATE' AS sqlstate;
SELECT fencing.advance_token(9223372036854775807);
SELECT :'LAST_ERROR_SQLSTATE' AS sqlstate;
-- a target whose reservation would not fit in a bigint fails before
-- anything moves
SELECT fencing.advance_token(9223372036854000000);
SELECT :'LAST_ERROR_SQLSTATE' AS sqlstate;
-- none of them moved the counter: tokens and locks work as before
SELECT fencing.latest_token() < 9000000000000000000 AS counter_not_moved;
SELECT fencing.next_token() BETWEEN :before_back AND 9000000000000000000 AS next_token_works;
BEGIN;
SELECT fencing.try_lock('regress advance overflow') BETWEEN :before_back AND 9000000000000000000 AS try_lock_works;
COMMIT;

-- advance_token is revoked from PUBLIC; next_token is for everyone, with
-- no grant needed
CREATE ROLE regress_fencing_plain;
SET ROLE regress_fencing_plain;
SELECT fencing.advance_token(1);
SELECT :'LAST_ERROR_SQLSTATE' AS sqlstate;
SELECT fencing.next_token() > :before_back AS plain_role_draws;
RESET ROLE;
SELECT has_function_privilege('regress_fencing_plain',
                              'fencing.advance_token(bigint)', 'EXECUTE') AS plain_may_advance,
       has_function_privilege('regress_fencing_plain',
                              'fencing.next_token()', 'EXECUTE') AS plain_may_draw,
       has_function_privilege('regress_fencing_plain',
                              'fencing.latest_token()', 'EXECUTE') AS plain_may_read;
DROP ROLE regress_fencing_plain;

-- fencing.status(): the durable limit covers a token just returned; the
-- clock floor is this server's clock in nanoseconds since 2000; tokens are
-- at most the lead bound (2 ms) ahead of it; the tolerance is the setting's
SELECT fencing.next_token() AS status_token \gset
SELECT latest_token >= :status_token AS latest_covers_returned,
       reserved_limit >= :status_token AS limit_covers_returned,
       abs(clock_floor - (extract(epoch FROM clock_timestamp()
                                  - timestamptz '2000-01-01 00:00:00+00')
                          * 1000000000)::bigint) < 10000000000 AS clock_floor_is_now,
       tokens_ahead_of_clock <= 2000000 AS within_lead_bound,
       latest_token <= clock_floor + 2000000 AS latest_within_lead_bound,
       clock_tolerance = current_setting('fencing.clock_tolerance')::interval
           AS tolerance_is_setting,
       fresh_start_pending,
       state_file_behind,
       state_file
FROM fencing.status();

-- no transaction id, however many tokens and reservations (T5)
SELECT reservations AS reservations1 FROM fencing.stats \gset
BEGIN ISOLATION LEVEL READ COMMITTED;
SELECT count(DISTINCT fencing.next_token()) FROM generate_series(1, 2100000);
SELECT fencing.advance_token(fencing.latest_token() + 3000000) > 0 AS advanced;
SELECT count(fencing.next_token()) FROM generate_series(1, 10);
SELECT pg_current_xact_id_if_assigned() IS NULL AS no_xid;
SELECT reservations - :reservations1 >= 3 AS crossed_reservations FROM fencing.stats;
COMMIT;

-- tokens work in a READ ONLY transaction, reservations included: a token
-- changes no table, and the reservation is WAL of the extension's own, like
-- a sequence's (documented in doc/reference.md)
SELECT reservations AS reservations2 FROM fencing.stats \gset
BEGIN READ ONLY;
SELECT count(fencing.next_token()) FROM generate_series(1, 1000001);
SELECT pg_current_xact_id_if_assigned() IS NULL AS no_xid;
COMMIT;
SELECT reservations > :reservations2 AS reserved_while_read_only FROM fencing.stats;

-- volatility and parallel marks: next_token and advance_token change shared
-- state, so they are VOLATILE and PARALLEL UNSAFE
SELECT p.proname, p.provolatile, p.proparallel, p.proisstrict
FROM pg_proc AS p
WHERE p.pronamespace = 'fencing'::regnamespace
  AND p.proname IN ('next_token', 'latest_token', 'advance_token')
ORDER BY p.proname;
