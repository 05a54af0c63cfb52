--
-- INSERTs into a protected table that leave the fence column out: the
-- statement computes the column with fencing.token_in_force(), the token
-- the trigger would stamp (F2), or NULL, which the trigger rejects.  The
-- plans show where the call goes and where it does not; the rows show
-- that what is written is what the trigger's stamp wrote, in every shape.
--
-- Messages that would print a token are shown as their SQLSTATE only.
--
CREATE SCHEMA fence_stamp;
SET search_path = fence_stamp, public;
SELECT fencing.next_token() AS token \gset
SELECT fencing.next_token() AS newer \gset

CREATE TABLE acct (id int PRIMARY KEY, balance bigint NOT NULL DEFAULT 0, fence bigint);
SELECT fencing.protect('acct');
CREATE TABLE counted (id serial PRIMARY KEY, fence bigint);
SELECT fencing.protect('counted');
CREATE TABLE plain (id int PRIMARY KEY, balance bigint NOT NULL DEFAULT 0, fence bigint);
CREATE TABLE parted (id int NOT NULL, balance bigint NOT NULL DEFAULT 0, fence bigint)
	PARTITION BY HASH (id);
CREATE TABLE parted_0 PARTITION OF parted FOR VALUES WITH (MODULUS 2, REMAINDER 0);
CREATE TABLE parted_1 PARTITION OF parted FOR VALUES WITH (MODULUS 2, REMAINDER 1);
SELECT fencing.protect('parted');

-- Where the call goes: the fence column left out, on a protected table or
-- partitioned table, also in WITH; not where the statement gives the
-- column (a value, NULL or DEFAULT), nor on a table that is not protected.
EXPLAIN (VERBOSE, COSTS OFF) INSERT INTO acct (id) VALUES (1);
EXPLAIN (VERBOSE, COSTS OFF) INSERT INTO acct VALUES (1, 0), (2, 0);
EXPLAIN (VERBOSE, COSTS OFF) INSERT INTO parted SELECT i FROM generate_series(1, 3) i;
EXPLAIN (VERBOSE, COSTS OFF) INSERT INTO counted DEFAULT VALUES;
EXPLAIN (VERBOSE, COSTS OFF)
	WITH w AS (INSERT INTO acct (id) VALUES (1) RETURNING id) SELECT id FROM w;
EXPLAIN (VERBOSE, COSTS OFF) INSERT INTO acct VALUES (1, 0, 5);
EXPLAIN (VERBOSE, COSTS OFF) INSERT INTO acct VALUES (1, 0, NULL);
EXPLAIN (VERBOSE, COSTS OFF) INSERT INTO acct VALUES (1, 0, DEFAULT);
EXPLAIN (VERBOSE, COSTS OFF) INSERT INTO plain (id) VALUES (1);

-- What is written: the token that counts, in every row, as the trigger's
-- stamp wrote it; RETURNING and ON CONFLICT's EXCLUDED see it.
BEGIN;
SET LOCAL fencing.token = :'token';
SELECT fencing.token_in_force() = :'token' AS in_force;
INSERT INTO acct (id) VALUES (1), (2);
INSERT INTO counted DEFAULT VALUES RETURNING fence = :'token' AS returned;
INSERT INTO parted SELECT i FROM generate_series(1, 10) i;
WITH w AS (INSERT INTO acct (id) VALUES (3) RETURNING fence) SELECT fence = :'token' AS from_cte FROM w;
INSERT INTO acct (id) VALUES (1) ON CONFLICT (id) DO UPDATE SET balance = acct.balance + 1
	RETURNING fence = :'token' AS updated;
INSERT INTO acct (id) VALUES (2) ON CONFLICT (id) DO UPDATE SET balance = excluded.fence
	RETURNING balance = :'token' AS excluded_has_token;
SELECT count(*) AS rows, count(*) FILTER (WHERE fence = :'token') AS with_token FROM acct;
SELECT count(*) AS rows, count(*) FILTER (WHERE fence = :'token') AS with_token FROM parted;
COMMIT;

-- A write with no token that counts is still refused, row by row: no token,
-- a session-level SET (F6), a token the statement set and rolled back.
\set VERBOSITY sqlstate
INSERT INTO acct (id) VALUES (10);
INSERT INTO parted (id) VALUES (10);
SET fencing.token = :'token';
INSERT INTO acct (id) VALUES (10);
RESET fencing.token;
BEGIN;
SAVEPOINT s;
SET LOCAL fencing.token = :'token';
ROLLBACK TO s;
SELECT fencing.token_in_force() IS NULL AS none_in_force;
INSERT INTO acct (id) VALUES (10);
ROLLBACK;
-- a stale token is refused as before (F1 for the upsert's UPDATE)
BEGIN;
SET LOCAL fencing.token = :'newer';
UPDATE acct SET balance = 1 WHERE id = 1;
COMMIT;
BEGIN;
SET LOCAL fencing.token = :'token';
INSERT INTO acct (id) VALUES (1) ON CONFLICT (id) DO UPDATE SET balance = 2;
ROLLBACK;
\set VERBOSITY default

-- set_token() sets what counts, as SET LOCAL does.
BEGIN;
SELECT fencing.set_token(:'newer') = :'newer' AS set;
INSERT INTO acct (id) VALUES (20) RETURNING fence = :'newer' AS stamped;
ROLLBACK;

-- Plans made before protect() and unprotect() follow them: a prepared
-- INSERT and one in a PL/pgSQL function, run again after each.
CREATE TABLE later (id int PRIMARY KEY, fence bigint);
PREPARE ins(int) AS INSERT INTO later (id) VALUES ($1) RETURNING fence IS NULL AS fence_null;
CREATE FUNCTION ins_later(i int) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
	f bigint;
BEGIN
	INSERT INTO later (id) VALUES (i) RETURNING fence INTO f;
	RETURN f IS NULL;
END
$$;
BEGIN;
SET LOCAL fencing.token = :'token';
EXECUTE ins(1);
SELECT ins_later(2) AS fence_null;
COMMIT;
SELECT fencing.protect('later');
\set VERBOSITY sqlstate
EXECUTE ins(3);
SELECT ins_later(3);
\set VERBOSITY default
BEGIN;
SET LOCAL fencing.token = :'token';
EXECUTE ins(3);
SELECT ins_later(4) AS fence_null;
COMMIT;
SELECT fencing.unprotect('later');
BEGIN;
SET LOCAL fencing.token = :'token';
EXECUTE ins(5);
SELECT ins_later(6) AS fence_null;
COMMIT;
SELECT id, fence IS NULL AS fence_null FROM later ORDER BY id;
DEALLOCATE ins;

-- A disabled fence trigger stamps nothing, so neither does the statement.
CREATE TABLE off (id int PRIMARY KEY, fence bigint);
SELECT fencing.protect('off');
ALTER TABLE off DISABLE TRIGGER fencing_reject_stale;
EXPLAIN (VERBOSE, COSTS OFF) INSERT INTO off (id) VALUES (1);

-- A role that may insert only some columns inserts with its token: the
-- call is the trigger's write, not the role's.
CREATE ROLE fence_stamp_writer;
GRANT USAGE ON SCHEMA fence_stamp TO fence_stamp_writer;
GRANT INSERT (id, balance) ON acct TO fence_stamp_writer;
SET ROLE fence_stamp_writer;
BEGIN;
SET LOCAL fencing.token = :'newer';
INSERT INTO acct (id) VALUES (30);
COMMIT;
\set VERBOSITY sqlstate
INSERT INTO acct (id, fence) VALUES (31, :'newer');
\set VERBOSITY default
RESET ROLE;
SELECT fence = :'newer' AS stamped FROM acct WHERE id = 30;

DROP SCHEMA fence_stamp CASCADE;
DROP ROLE fence_stamp_writer;
