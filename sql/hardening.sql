--
-- hardening: bad input into every function of the extension.
--
-- Each bad call either returns NULL or fails with a clear error and a
-- documented SQLSTATE; the server stays up through all of them (the last
-- statement of the file still runs on the same connection).
--
-- err(sql) runs one statement and returns its SQLSTATE ('ok' when it
-- succeeds), so that token values, OIDs and pids never reach the output.
-- A few errors are also shown in full (terse) to check their wording.
--
\set VERBOSITY terse
\set SHOW_CONTEXT never

CREATE FUNCTION err(cmd text) RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
	EXECUTE cmd;
	RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
	RETURN SQLSTATE;
END
$$;

SELECT fencing.latest_token() AS start_token \gset

------------------------------------------------------------------------
-- NULL into every function: NULL out (STRICT) or 22004
------------------------------------------------------------------------
SELECT fencing.normalize_name(NULL) IS NULL AS normalize_null,
       fencing.lock_key(NULL) IS NULL AS lock_key_null,
       fencing.held_token(NULL) IS NULL AS held_token_null;
SELECT 'advance_token(NULL)' AS call, err('SELECT fencing.advance_token(NULL)')
UNION ALL SELECT 'try_lock(NULL)', err('SELECT fencing.try_lock(NULL)')
UNION ALL SELECT 'lock(NULL)', err('SELECT fencing.lock(NULL)')
UNION ALL SELECT 'lock(NULL, 1s)', err('SELECT fencing.lock(NULL, ''1s'')')
UNION ALL SELECT 'lease(NULL, 1s)', err('SELECT fencing.lease(NULL, ''1s'')')
UNION ALL SELECT 'lease(x, NULL)', err('SELECT fencing.lease(''x'', NULL)')
UNION ALL SELECT 'lease(NULL, NULL)', err('SELECT fencing.lease(NULL, NULL)')
UNION ALL SELECT 'protect(NULL)', err('SELECT fencing.protect(NULL)')
UNION ALL SELECT 'protect(NULL, f, m)', err('SELECT fencing.protect(NULL, ''fence'', ''error'')')
UNION ALL SELECT 'unprotect(NULL)', err('SELECT fencing.unprotect(NULL)')
UNION ALL SELECT 'check_fence(NULL, 1)', err('SELECT fencing.check_fence(NULL, 1)')
UNION ALL SELECT 'check_fence(r, NULL)', err('SELECT fencing.check_fence(''r'', NULL)')
UNION ALL SELECT 'check_fence(NULL, NULL)', err('SELECT fencing.check_fence(NULL, NULL)');
-- the messages say which argument
SELECT fencing.try_lock(NULL);
SELECT fencing.lease('x', NULL);
SELECT fencing.protect(NULL, 'fence', 'error');
SELECT fencing.check_fence('r', NULL);
SELECT fencing.advance_token(NULL);
-- lock(name, NULL) means "no timeout": on a free name it is granted
BEGIN;
SELECT fencing.lock('null timeout', NULL) > :start_token AS granted_without_timeout;
ROLLBACK;
-- a trigger function called directly is refused by the server
SELECT err('SELECT fencing.reject_stale()') AS reject_stale_direct;
-- functions without arguments ignore nothing and return one row
SELECT count(*) AS status_rows FROM fencing.status();
SELECT count(*) AS stats_rows FROM fencing.stats;

------------------------------------------------------------------------
-- Empty and blank names: 22023, whichever function gets them
------------------------------------------------------------------------
SELECT label, err(format('SELECT fencing.normalize_name(%L)', name)) AS normalize_name,
       err(format('SELECT fencing.lock_key(%L)', name)) AS lock_key,
       err(format('SELECT fencing.try_lock(%L)', name)) AS try_lock,
       err(format('SELECT fencing.lock(%L, ''0'')', name)) AS lock,
       err(format('SELECT fencing.lease(%L, ''1s'')', name)) AS lease,
       err(format('SELECT fencing.held_token(%L)', name)) AS held_token,
       err(format('SELECT fencing.check_fence(%L, 1)', name)) AS check_fence
FROM (VALUES ('empty', ''),
             ('spaces', '   '),
             ('ascii white space', E'\t\n\r\f ' || chr(11)),
             ('NBSP and ideographic space', U&'\00A0\3000\2028'),
             ('only ignorables', U&'\200B\200D\00AD\FEFF'),
             ('ignorables and spaces', U&' \200B \2060 ')) AS v(label, name);
SELECT fencing.normalize_name('   ');
-- ... while a name with one visible character among them is fine
SELECT fencing.normalize_name(U&' \200B x\3000\3000Y ') AS canonical;

------------------------------------------------------------------------
-- Long names: a 10 MB name is refused before it is normalised (42622)
------------------------------------------------------------------------
DO $$
DECLARE
	huge_ascii text := repeat('x', 10 * 1024 * 1024);
	huge_other text := repeat(U&'\00E9', 5 * 1024 * 1024);	-- 10 MB of UTF-8
	fn text;
	arg text;
	started timestamptz;
	state text;
	detail text;
BEGIN
	FOREACH fn IN ARRAY ARRAY['normalize_name', 'lock_key', 'try_lock', 'held_token',
							  'lock', 'lease', 'check_fence']
	LOOP
		FOREACH arg IN ARRAY ARRAY['ascii', 'other']
		LOOP
			started := clock_timestamp();
			BEGIN
				EXECUTE format('SELECT fencing.%I($1%s)', fn,
							   CASE fn WHEN 'lock' THEN ', ''0''::interval'
									   WHEN 'lease' THEN ', ''1s''::interval'
									   WHEN 'check_fence' THEN ', 1::bigint'
									   ELSE '' END)
					USING CASE arg WHEN 'ascii' THEN huge_ascii ELSE huge_other END;
				state := 'ok';
			EXCEPTION WHEN OTHERS THEN
				GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE,
										detail = PG_EXCEPTION_DETAIL;
			END;
			RAISE NOTICE '% of 10 MB %: % (refused before normalising: %, under 2 s: %)',
				fn, arg, state,
				coalesce(detail LIKE '%refused before normalising%', false),
				clock_timestamp() - started < interval '2 s';
		END LOOP;
	END LOOP;
END
$$;
-- the limits themselves: 4096 input bytes, 200 canonical bytes
SELECT err(format('SELECT fencing.lock_key(%L)', repeat('a', 200))) AS canonical_200,
       err(format('SELECT fencing.lock_key(%L)', repeat('a', 201))) AS canonical_201,
       err(format('SELECT fencing.lock_key(%L)', repeat(U&'\00E9', 100))) AS canonical_200_bytes_utf8,
       err(format('SELECT fencing.lock_key(%L)', repeat(U&'\00E9', 100) || 'a')) AS canonical_201_bytes_utf8,
       err(format('SELECT fencing.lock_key(%L)', repeat(' ', 4095) || 'a')) AS input_4096,
       err(format('SELECT fencing.lock_key(%L)', repeat(' ', 4096) || 'a')) AS input_4097;
-- a name that expands under NFKC past the limit (U+FDFA is 18 characters)
SELECT err(format('SELECT fencing.lock_key(%L)', repeat(U&'\FDFA', 10))) AS expands_past_limit,
       length(fencing.normalize_name(repeat(U&'\FDFA', 5))) AS expanded_chars;
SELECT fencing.lock_key(repeat('a', 201));

------------------------------------------------------------------------
-- Intervals
------------------------------------------------------------------------
SELECT 'lock timeout -1s' AS call, err('SELECT fencing.lock(''iv'', ''-1s'')')
UNION ALL SELECT 'lock timeout -1 month +31 days', err('SELECT fencing.lock(''iv'', ''-1 month 31 days'')')
UNION ALL SELECT 'lock timeout 0 (try once)', err('SELECT fencing.lock(''iv'', ''0'')')
UNION ALL SELECT 'lock timeout 100 years (capped)', err('SELECT fencing.lock(''iv'', ''100 years'')')
UNION ALL SELECT 'lease ttl 0', err('SELECT fencing.lease(''iv'', ''0'')')
UNION ALL SELECT 'lease ttl -1s', err('SELECT fencing.lease(''iv'', ''-1s'')')
UNION ALL SELECT 'lease ttl 1 month -30 days', err('SELECT fencing.lease(''iv'', ''1 month -30 days'')')
UNION ALL SELECT 'lease ttl 0.5 ms', err('SELECT fencing.lease(''iv'', ''0.5 ms'')')
UNION ALL SELECT 'lease ttl 100 years', err('SELECT fencing.lease(''iv'', ''100 years'')')
UNION ALL SELECT 'lease ttl 1 ms', err('SELECT fencing.lease(''iv'', ''1 ms'')')
UNION ALL SELECT 'lease ttl NULL', err('SELECT fencing.lease(''iv'', NULL)');
SELECT fencing.lock('iv', '-1s');
SELECT fencing.lease('iv', '0');
SELECT fencing.lease('iv', '-5 min');
-- a refused lease takes no lock and leaves idle_in_transaction_session_timeout alone
BEGIN;
SELECT err('SELECT fencing.lease(''iv'', ''-1s'')') AS refused;
SELECT fencing.held_token('iv') IS NULL AS no_lock,
       current_setting('idle_in_transaction_session_timeout') AS idle_timeout;
ROLLBACK;

------------------------------------------------------------------------
-- advance_token: negative, NULL, the largest bigint; never moves back
------------------------------------------------------------------------
SELECT err('SELECT fencing.advance_token(-1)') AS negative,
       err('SELECT fencing.advance_token(-9223372036854775808)') AS min_bigint,
       err('SELECT fencing.advance_token(NULL)') AS null_arg,
       err('SELECT fencing.advance_token(9223372036854775807)') AS max_bigint;
SELECT fencing.advance_token(-1);
SELECT fencing.latest_token() AS before_advance \gset
SELECT fencing.advance_token(0) >= :before_advance AS zero_does_not_move_back,
       fencing.next_token() > :before_advance AS next_still_above;

------------------------------------------------------------------------
-- check_fence: negative and never-issued tokens
------------------------------------------------------------------------
SELECT err('SELECT fencing.check_fence(''hard'', -1)') AS negative,
       err(format('SELECT fencing.check_fence(''hard'', %s)',
                  fencing.latest_token() + 1000000)) AS not_issued,
       err('SELECT fencing.check_fence(''hard'', 0)') AS zero;
SELECT fencing.check_fence('hard', -1);

------------------------------------------------------------------------
-- fencing.token: only a non-negative bigint, or empty to unset
------------------------------------------------------------------------
SELECT v AS value, err(format('SET fencing.token = %L', v)) AS set_result
FROM unnest(ARRAY['abc', '-1', '1e3', '0x10', '12abc', '  ', '', ' 42 ', '0',
                  '9223372036854775807', '9223372036854775808',
                  '99999999999999999999999']) AS v;
SET fencing.token = 'abc';
SET fencing.token = '9223372036854775808';
SET fencing.token = ' 42 ';
SHOW fencing.token;
-- a failed SET leaves the previous value
SET fencing.token = '-1';
SHOW fencing.token;
RESET fencing.token;

------------------------------------------------------------------------
-- protect(): only ordinary and partitioned tables
------------------------------------------------------------------------
CREATE TABLE hard_t (id int PRIMARY KEY, v int, fence bigint);
CREATE VIEW hard_v AS SELECT * FROM hard_t;
CREATE MATERIALIZED VIEW hard_mv AS SELECT * FROM hard_t;
CREATE SEQUENCE hard_seq;
CREATE TYPE hard_type AS (a int, fence bigint);
CREATE FOREIGN DATA WRAPPER hard_dummy;
CREATE SERVER hard_server FOREIGN DATA WRAPPER hard_dummy;
CREATE FOREIGN TABLE hard_ft (id int, fence bigint) SERVER hard_server;
CREATE TEMP TABLE hard_temp (id int PRIMARY KEY, v int, fence bigint);
SELECT count(*) AS triggers_before FROM pg_trigger
WHERE tgfoid = 'fencing.reject_stale'::regproc \gset
SELECT what, err(format('SELECT fencing.protect(%s)', arg)) AS protect,
       err(format('SELECT fencing.unprotect(%s)', arg)) AS unprotect
FROM (VALUES ('catalog pg_class', '''pg_class'''),
             ('catalog pg_proc', '''pg_catalog.pg_proc'''),
             ('toast table of pg_proc', '''pg_toast.pg_toast_1255'''),
             ('view', '''hard_v'''),
             ('materialized view', '''hard_mv'''),
             ('sequence', '''hard_seq'''),
             ('index', '''hard_t_pkey'''),
             ('composite type', '''hard_type'''),
             ('foreign table', '''hard_ft'''),
             ('OID 0', '0'),
             ('OID of nothing', '4294967295'),
             ('name of nothing', '''no_such_table''')) AS v(what, arg);
-- the wording of each refusal
SELECT fencing.protect('pg_class');
SELECT fencing.protect('hard_v');
SELECT fencing.protect('hard_ft');
SELECT fencing.protect(0);
SELECT fencing.protect('hard_t', 'fence', 'ignore');
SELECT fencing.protect('hard_t', 'ctid');
SELECT fencing.protect('hard_t', 'v');
-- no trigger was left behind by any refusal
SELECT count(*) - :triggers_before AS new_fencing_triggers FROM pg_trigger
WHERE tgfoid = 'fencing.reject_stale'::regproc;
-- a temporary table is an ordinary table of the session: allowed, and fenced
SELECT fencing.protect('hard_temp');
INSERT INTO hard_temp VALUES (1, 0, 10);
SELECT err('UPDATE hard_temp SET v = 1, fence = 9 WHERE id = 1') AS stale_update;
UPDATE hard_temp SET v = 2, fence = 11 WHERE id = 1;
-- the trigger stamps the value SET in the same transaction (white space
-- allowed around it)
BEGIN;
SET LOCAL fencing.token = ' 12 ';
INSERT INTO hard_temp (id, v) VALUES (2, 0);
COMMIT;
SELECT err('INSERT INTO hard_temp (id, v) VALUES (3, 0)') AS insert_without_token;
SELECT id, v, fence FROM hard_temp ORDER BY id;
SELECT fencing.unprotect('hard_temp');
UPDATE hard_temp SET v = 3, fence = 1 WHERE id = 1;
SELECT id, v, fence FROM hard_temp WHERE id = 1;

------------------------------------------------------------------------
-- Parallel query: PARALLEL SAFE functions give the same results in
-- workers; a query with a PARALLEL UNSAFE function stays in the leader
------------------------------------------------------------------------
-- (plpgsql, so that it is not inlined into the PARALLEL RESTRICTED pg_backend_pid)
CREATE FUNCTION probe_pid() RETURNS int
LANGUAGE plpgsql VOLATILE PARALLEL SAFE AS 'BEGIN RETURN pg_catalog.pg_backend_pid(); END';
CREATE TABLE hard_par AS
	SELECT g, CASE g % 4 WHEN 0 THEN 'Job ' || g
	                     WHEN 1 THEN U&'  STRA\00DFE\3000' || g
	                     WHEN 2 THEN U&'\FF2A\FF2F\FF22 ' || g
	                     ELSE U&'e\0301 ' || g END AS s
	FROM generate_series(1, 20000) AS g;
ANALYZE hard_par;
-- serial reference
CREATE TABLE hard_par_serial AS
	SELECT g, fencing.normalize_name(s) AS n, fencing.lock_key(s) AS k FROM hard_par;
SET parallel_setup_cost = 0;
SET parallel_tuple_cost = 0;
SET min_parallel_table_scan_size = 0;
SET max_parallel_workers_per_gather = 2;
SET parallel_leader_participation = off;
-- force_parallel_mode is called debug_parallel_query from PostgreSQL 16 on
SELECT CASE WHEN current_setting('server_version_num')::int >= 160000
            THEN 'debug_parallel_query' ELSE 'force_parallel_mode' END AS force_parallel \gset
SET :force_parallel = on;
SELECT fencing.latest_token() AS before_parallel \gset
SELECT count(*) AS rows,
       count(*) FILTER (WHERE p.w <> pg_backend_pid()) > 0 AS ran_in_workers,
       count(*) FILTER (WHERE p.n IS DISTINCT FROM s.n OR p.k IS DISTINCT FROM s.k) AS mismatches,
       bool_and(p.latest >= :before_parallel) AS latest_in_workers
FROM (SELECT g, probe_pid() AS w, fencing.normalize_name(s) AS n,
             fencing.lock_key(s) AS k, fencing.latest_token() AS latest
      FROM hard_par) AS p
JOIN hard_par_serial AS s USING (g);
-- errors raised in a worker reach the client with their SQLSTATE
SELECT err('SELECT count(fencing.lock_key(CASE WHEN g = 15000 THEN '''' ELSE s END)) FROM hard_par') AS empty_name_in_worker,
       err('SELECT count(fencing.lock_key(CASE WHEN g = 15000 THEN repeat(''x'', 5000) ELSE s END)) FROM hard_par') AS long_name_in_worker;
-- views over PARALLEL SAFE set-returning functions work in forced parallel mode
SELECT count(*) >= 0 AS locks_ok FROM fencing.locks;
SELECT tokens_issued >= 0 AS stats_ok FROM fencing.stats;
SELECT latest_token >= :before_parallel AS status_ok FROM fencing.status();
-- PARALLEL UNSAFE: the whole query runs in this backend
SELECT count(*) AS rows,
       count(*) FILTER (WHERE w = pg_backend_pid()) AS in_leader,
       count(DISTINCT t) AS distinct_tokens
FROM (SELECT probe_pid() AS w, fencing.next_token() AS t FROM hard_par) AS q;
BEGIN;
SELECT count(*) AS rows,
       count(*) FILTER (WHERE w = pg_backend_pid()) AS in_leader,
       count(DISTINCT t) AS distinct_tokens
FROM (SELECT probe_pid() AS w, fencing.try_lock('par ' || (g % 10)) AS t
      FROM hard_par WHERE g <= 1000) AS q;
-- the locks were taken by this transaction (not by a worker that is gone)
SELECT count(fencing.held_token('par ' || n)) AS held FROM generate_series(0, 9) AS n;
ROLLBACK;
SELECT count(*) AS rows,
       count(*) FILTER (WHERE w = pg_backend_pid()) AS in_leader
FROM (SELECT probe_pid() AS w, fencing.check_fence('par', fencing.latest_token()) AS t
      FROM hard_par WHERE g <= 100) AS q;
RESET :force_parallel;
RESET parallel_leader_participation;
RESET max_parallel_workers_per_gather;
RESET min_parallel_table_scan_size;
RESET parallel_tuple_cost;
RESET parallel_setup_cost;

------------------------------------------------------------------------
-- PREPARE TRANSACTION: refused (0A000) while a fencing lock is held.  The
-- refusal comes before the server looks at max_prepared_transactions, so
-- it shows here whatever that is; the PREPAREs that succeed need it above
-- 0 and are in test/t/036_lock_prepared.pl.
------------------------------------------------------------------------
BEGIN;
SELECT fencing.try_lock('prepared') IS NOT NULL AS locked;
PREPARE TRANSACTION 'hard_with_lock';
\echo sqlstate: :LAST_ERROR_SQLSTATE
SELECT count(*) AS prepared_xacts FROM pg_prepared_xacts WHERE gid LIKE 'hard%';
-- the refused transaction was rolled back and its lock is free
SELECT count(*) AS lock_rows FROM fencing.locks WHERE name = 'prepared';
SELECT (SELECT fencing.try_lock('prepared')) IS NOT NULL AS free_again;
BEGIN;
SELECT fencing.lease('prepared', '1 min') IS NOT NULL AS leased;
PREPARE TRANSACTION 'hard_with_lease';
\echo sqlstate: :LAST_ERROR_SQLSTATE
-- a lock kept by RELEASE SAVEPOINT blocks PREPARE too
BEGIN;
SAVEPOINT s;
SELECT fencing.try_lock('prepared') IS NOT NULL AS locked;
RELEASE SAVEPOINT s;
PREPARE TRANSACTION 'hard_after_release';
\echo sqlstate: :LAST_ERROR_SQLSTATE
SELECT count(*) AS prepared_xacts FROM pg_prepared_xacts WHERE gid LIKE 'hard%';

------------------------------------------------------------------------
-- READ ONLY transactions: tokens and locks work, check_fence is a write
------------------------------------------------------------------------
BEGIN READ ONLY;
SELECT fencing.next_token() > :start_token AS token,
       fencing.try_lock('read only') IS NOT NULL AS try_lock,
       fencing.lock('read only 2', '1s') IS NOT NULL AS lock,
       fencing.lease('read only 3', '1 min') IS NOT NULL AS lease,
       fencing.held_token('read only') IS NOT NULL AS held;
SELECT fencing.check_fence('read only', fencing.latest_token());
ROLLBACK;
BEGIN READ ONLY;
SELECT err('UPDATE hard_temp SET v = 4') AS temp_table_write,
       err('UPDATE hard_t SET v = 4') AS table_write,
       err(format('SELECT fencing.check_fence(''read only'', %s)', fencing.latest_token())) AS check_fence;
ROLLBACK;
SELECT count(*) AS lock_rows_left FROM fencing.locks WHERE name LIKE 'read only%';

------------------------------------------------------------------------
-- Marks of every function of the extension, so that a change shows here
------------------------------------------------------------------------
SELECT p.oid::regprocedure AS function, l.lanname AS language,
       p.provolatile AS volatile, p.proparallel AS parallel,
       p.proisstrict AS strict, p.prosecdef AS security_definer,
       p.proconfig AS config,
       EXISTS (SELECT 1 FROM aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) AS a
               WHERE a.grantee = 0 AND a.privilege_type = 'EXECUTE') AS public_execute
FROM pg_proc AS p
JOIN pg_language AS l ON l.oid = p.prolang
JOIN pg_depend AS d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid
	AND d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
JOIN pg_extension AS e ON e.oid = d.refobjid
WHERE e.extname = 'fencing'
ORDER BY p.oid::regprocedure::text;

-- lock_rows(), stat_rows(), lease_rows() and lease_stat_rows() are the
-- functions behind the views fencing.locks, fencing.stats and
-- fencing.leases: PUBLIC may execute them (a view calls its functions as
-- the role that queries it), and their comments say to query the views
SELECT p.oid::regprocedure AS function,
       has_function_privilege('public', p.oid, 'EXECUTE') AS public_execute,
       obj_description(p.oid, 'pg_proc') AS comment
FROM pg_proc AS p
WHERE p.pronamespace = 'fencing'::regnamespace
  AND p.proname IN ('lock_rows', 'stat_rows', 'lease_rows', 'lease_stat_rows')
ORDER BY 1;

-- still the same server process, and every later token is above the start
SELECT fencing.next_token() > :start_token AS server_still_up;

DROP FOREIGN TABLE hard_ft;
DROP SERVER hard_server;
DROP FOREIGN DATA WRAPPER hard_dummy;
DROP MATERIALIZED VIEW hard_mv;
DROP TABLE hard_par, hard_par_serial, hard_temp, hard_t CASCADE;
DROP SEQUENCE hard_seq;
DROP TYPE hard_type;
DROP FUNCTION probe_pid();
DROP FUNCTION err(text);
