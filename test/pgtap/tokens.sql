-- test/pgtap/tokens.sql -- API shape of fence tokens and the views that
-- report on them (DESIGN.md "Public SQL API"), and for each part of that
-- shape the behaviour a single session can see: privileges enforced,
-- advance_token's floor, the counters and the lock view moving as they
-- should.  Concurrency, crashes and standbys are in the TAP tests
-- test/t/01x_tokens_*.pl.
\set ON_ERROR_STOP 1
\pset format unaligned
\pset tuples_only true
\pset pager off

BEGIN;
SELECT plan(66);

-- the schema and the functions, with their signatures
SELECT has_schema('fencing');
SELECT has_function('fencing', 'next_token', ARRAY[]::name[]);
SELECT has_function('fencing', 'latest_token', ARRAY[]::name[]);
SELECT has_function('fencing', 'advance_token', ARRAY['bigint']);
SELECT function_returns('fencing', 'next_token', ARRAY[]::name[], 'bigint');
SELECT function_returns('fencing', 'latest_token', ARRAY[]::name[], 'bigint');
SELECT function_returns('fencing', 'advance_token', ARRAY['bigint'], 'bigint');
SELECT function_lang_is('fencing', 'next_token', ARRAY[]::name[], 'c');
SELECT function_lang_is('fencing', 'advance_token', ARRAY['bigint'], 'c');

-- a token is a side effect: never folded, cached or run in a worker
SELECT volatility_is('fencing', 'next_token', ARRAY[]::name[], 'volatile');
SELECT volatility_is('fencing', 'latest_token', ARRAY[]::name[], 'volatile');
SELECT volatility_is('fencing', 'advance_token', ARRAY['bigint'], 'volatile');
SELECT is((SELECT proparallel::text FROM pg_proc
           WHERE oid = 'fencing.next_token()'::regprocedure), 'u',
          'fencing.next_token() is PARALLEL UNSAFE');
SELECT is((SELECT proparallel::text FROM pg_proc
           WHERE oid = 'fencing.advance_token(bigint)'::regprocedure), 'u',
          'fencing.advance_token(bigint) is PARALLEL UNSAFE');
SELECT isnt_definer('fencing', 'next_token', ARRAY[]::name[]);
SELECT isnt_definer('fencing', 'advance_token', ARRAY['bigint']);

-- privileges: advance_token is for the owner and superusers only
CREATE ROLE tap_fencing_plain;
SELECT function_privs_are('fencing', 'advance_token', ARRAY['bigint'],
                          'tap_fencing_plain', ARRAY[]::name[]);
SELECT function_privs_are('fencing', 'next_token', ARRAY[]::name[],
                          'tap_fencing_plain', ARRAY['EXECUTE']);
SELECT function_privs_are('fencing', 'latest_token', ARRAY[]::name[],
                          'tap_fencing_plain', ARRAY['EXECUTE']);
SELECT ok(NOT has_function_privilege('public', 'fencing.advance_token(bigint)', 'EXECUTE'),
          'advance_token is revoked from PUBLIC');
SELECT schema_privs_are('fencing', 'tap_fencing_plain', ARRAY['USAGE'],
                        'every role may use schema fencing');

-- fencing.stats: the counters the contract names
SELECT has_view('fencing', 'stats', 'view fencing.stats exists');
SELECT col_type_is('fencing', 'stats', 'tokens_issued', 'bigint',
                   'fencing.stats.tokens_issued is bigint');
SELECT col_type_is('fencing', 'stats', 'reservations', 'bigint',
                   'fencing.stats.reservations is bigint');
SELECT col_type_is('fencing', 'stats', 'locks_granted', 'bigint',
                   'fencing.stats.locks_granted is bigint');
SELECT col_type_is('fencing', 'stats', 'locks_busy', 'bigint',
                   'fencing.stats.locks_busy is bigint');
SELECT col_type_is('fencing', 'stats', 'locks_timed_out', 'bigint',
                   'fencing.stats.locks_timed_out is bigint');
SELECT col_type_is('fencing', 'stats', 'stale_writes_rejected', 'bigint',
                   'fencing.stats.stale_writes_rejected is bigint');
SELECT is((SELECT count(*)::int FROM fencing.stats), 1, 'fencing.stats has one row');

-- fencing.locks: the columns the contract names
SELECT has_view('fencing', 'locks', 'view fencing.locks exists');
SELECT has_column('fencing', 'locks', 'database', 'fencing.locks has column database');
SELECT has_column('fencing', 'locks', 'name', 'fencing.locks has column name');
SELECT col_type_is('fencing', 'locks', 'key', 'bigint',
                   'fencing.locks.key is bigint');
SELECT col_type_is('fencing', 'locks', 'token', 'bigint',
                   'fencing.locks.token is bigint');
SELECT col_type_is('fencing', 'locks', 'pid', 'integer',
                   'fencing.locks.pid is integer');
SELECT col_type_is('fencing', 'locks', 'since', 'timestamp with time zone',
                   'fencing.locks.since is timestamp with time zone');
SELECT col_type_is('fencing', 'locks', 'granted', 'boolean',
                   'fencing.locks.granted is boolean');

-- fencing.status(): one row; the durable limit covers a token just
-- returned; the lead over the clock, the tolerance (test/regress.conf sets
-- 5 ms), the fresh-start and state-file flags
SELECT has_function('fencing', 'status', ARRAY[]::name[]);
SELECT fencing.next_token() AS status_token \gset
SELECT cmp_ok((SELECT reserved_limit FROM fencing.status()), '>=', :status_token::bigint,
              'reserved_limit covers a token just returned');
SELECT is((SELECT clock_tolerance FROM fencing.status()), interval '5 ms',
          'status() shows fencing.clock_tolerance');
SELECT cmp_ok((SELECT tokens_ahead_of_clock FROM fencing.status()), '<=', 2000000::bigint,
              'tokens are at most the lead bound (2 ms) ahead of the clock');
SELECT is((SELECT fresh_start_pending FROM fencing.status()), false,
          'after a reservation no fresh start is pending');
SELECT is((SELECT state_file_behind FROM fencing.status()), false,
          'the state file is not behind');
SELECT ok((SELECT abs(clock_floor - (extract(epoch FROM clock_timestamp()
                                              - timestamptz '2000-01-01 00:00:00+00')
                                      * 1000000000)::bigint) < 10000000000
           FROM fencing.status()),
          'clock_floor is this server''s clock in nanoseconds since 2000');

-- the calls work and order as documented
SELECT ok((SELECT bool_and(t > p) FROM
           (SELECT t, lag(t) OVER (ORDER BY n) AS p FROM
            (SELECT n, fencing.next_token() AS t
             FROM generate_series(1, 100) AS n) AS drawn) AS pairs
           WHERE p IS NOT NULL),
          'next_token increases row by row');
SELECT max(t) AS last_drawn
FROM (SELECT fencing.next_token() AS t FROM generate_series(1, 100)) AS s \gset
SELECT is(fencing.latest_token(), :last_drawn::bigint,
          'latest_token is the last token drawn (no other session draws)');
SELECT cmp_ok(fencing.next_token(), '>', :last_drawn::bigint,
              'the next token is above the last one drawn');
SELECT throws_ok('SELECT fencing.advance_token(NULL)', '22004', NULL,
                 'advance_token(NULL) raises null_value_not_allowed');

-- advance_token: every later token is above at_least; it never moves back
SELECT fencing.next_token() + 1000 AS target \gset
SELECT cmp_ok(fencing.advance_token(:target::bigint), '>=', :target::bigint,
              'advance_token returns at least at_least');
SELECT cmp_ok(fencing.next_token(), '>', :target::bigint,
              'the token after advance_token(x) is above x');
SELECT fencing.latest_token() AS before_small_advance \gset
SELECT is(fencing.advance_token(1), :before_small_advance::bigint,
          'advance_token below the latest token moves nothing and returns the latest');
SELECT cmp_ok(fencing.next_token(), '>', :before_small_advance::bigint,
              'after advance_token(1) tokens keep increasing');
SELECT throws_ok('SELECT fencing.advance_token(-1)', '22023', NULL,
                 'advance_token of a negative value raises invalid_parameter_value');
SELECT throws_ok('SELECT fencing.advance_token(9223372036854775807)', '22003', NULL,
                 'advance_token beyond what a reservation can cover raises numeric_value_out_of_range');
SELECT is(fencing.latest_token(), fencing.latest_token(),
          'latest_token has no side effect');

-- fencing.stats counts what this session does (no other session runs)
SELECT tokens_issued AS issued_before FROM fencing.stats \gset
SELECT count(fencing.next_token()) FROM generate_series(1, 10) \g /dev/null
SELECT is((SELECT tokens_issued FROM fencing.stats) - :issued_before::bigint, 10::bigint,
          'fencing.stats.tokens_issued rises by one per token');

-- a fencing lock, as the views report it
SELECT locks_granted AS granted_before FROM fencing.stats \gset
SELECT fencing.latest_token() AS before_lock \gset
SELECT fencing.try_lock('  Tap   LOCK ') AS lock_token \gset
SELECT cmp_ok(:lock_token::bigint, '>', :before_lock::bigint,
              'try_lock grants a fresh token');
SELECT is(fencing.try_lock('tap lock'), :lock_token::bigint,
          'taking the same lock again (another spelling) returns the same token');
SELECT is(fencing.held_token('TAP LOCK'), :lock_token::bigint,
          'held_token returns the lock''s token');
SELECT is((SELECT locks_granted FROM fencing.stats) - :granted_before::bigint, 2::bigint,
          'fencing.stats.locks_granted counts both grants');
SELECT results_eq(
    $$SELECT database, name, key, token, pid, granted FROM fencing.locks$$,
    format($$VALUES (current_database()::name, 'tap lock'::text,
                     fencing.lock_key('tap lock'), %s::bigint, pg_backend_pid(), true)$$,
           :lock_token),
    'fencing.locks shows the lock: database, canonical name, key, token, pid, granted');
SELECT cmp_ok((SELECT since FROM fencing.locks), '<=', clock_timestamp(),
              'fencing.locks.since is not in the future');
SELECT is((SELECT count(*)::int FROM pg_locks
           WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted
             AND mode = 'ExclusiveLock'
             AND ((classid::bigint << 32) | objid::bigint)
                 = hashtextextended('tap lock', 0)),
          1, 'the lock is the advisory lock on hashtextextended(canonical name, 0)');

-- privileges, as an ordinary role sees them
SET LOCAL ROLE tap_fencing_plain;
SELECT throws_ok('SELECT fencing.advance_token(1)', '42501', NULL,
                 'an ordinary role may not call advance_token');
SELECT lives_ok('SELECT fencing.next_token()', 'an ordinary role may draw tokens');
SELECT throws_ok('SELECT fencing.stats_reset()', '42501', NULL,
                 'an ordinary role may not reset fencing.stats');
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;
