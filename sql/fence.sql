--
-- Stale-write protection: reject_stale(), fencing.token, protect(),
-- unprotect(), check_fence() (DESIGN.md F1-F5).
--
-- Fences below are small literal numbers so the output is stable.  A
-- fence must be a token the cluster has issued (F8, 1 <= fence <=
-- latest_token()), so the first statement issues one: tokens are far
-- above these numbers.  After each expected error the SQLSTATE is echoed:
-- FN001 for every stale or missing token.  sql/fence_rules.sql has the
-- full rules of the writer's token.
--
\set SHOW_CONTEXT never
SELECT fencing.next_token() > 1000 AS token_issued;

CREATE TABLE ledger (id int PRIMARY KEY, customer text, billed int NOT NULL DEFAULT 0, fence bigint);
INSERT INTO ledger VALUES (1, 'acme', 0, 10), (2, 'globex', 0, NULL);
SELECT fencing.protect('ledger');
SELECT stale_writes_rejected AS rejected_before FROM fencing.stats \gset

-- F1: a lower fence is rejected and the row is unchanged
UPDATE ledger SET billed = billed + 1, fence = 9 WHERE id = 1;
\echo sqlstate: :LAST_ERROR_SQLSTATE
SELECT id, billed, fence FROM ledger WHERE id = 1;
-- F1: equal is allowed (the same holder writing again), higher too
UPDATE ledger SET billed = billed + 1, fence = 10 WHERE id = 1;
UPDATE ledger SET billed = billed + 1, fence = 20 WHERE id = 1;
SELECT id, billed, fence FROM ledger WHERE id = 1;
-- and the old holder is now stale
UPDATE ledger SET billed = billed + 1, fence = 10 WHERE id = 1;
\echo sqlstate: :LAST_ERROR_SQLSTATE
-- a row whose fence is NULL was never fenced: any token may write it
UPDATE ledger SET billed = 1, fence = 5 WHERE id = 2;
SELECT id, billed, fence FROM ledger WHERE id = 2;

-- F2: a write with no token is rejected
UPDATE ledger SET billed = billed + 1 WHERE id = 1;
\echo sqlstate: :LAST_ERROR_SQLSTATE
UPDATE ledger SET billed = billed + 1, fence = NULL WHERE id = 1;
\echo sqlstate: :LAST_ERROR_SQLSTATE
INSERT INTO ledger (id, customer) VALUES (3, 'initech');
\echo sqlstate: :LAST_ERROR_SQLSTATE
INSERT INTO ledger (id, customer, fence) VALUES (3, 'initech', NULL);
\echo sqlstate: :LAST_ERROR_SQLSTATE
SELECT count(*) AS initech_rows FROM ledger WHERE id = 3;

-- F2: fencing.token is stamped into rows whose statement does not set the fence
BEGIN;
SET LOCAL fencing.token = 25;
UPDATE ledger SET billed = billed + 1 WHERE id = 1;
INSERT INTO ledger (id, customer) VALUES (3, 'initech');
SELECT id, billed, fence FROM ledger WHERE id IN (1, 3) ORDER BY id;
-- the statement may give the same token as fencing.token
UPDATE ledger SET fence = 25 WHERE id = 3;
-- fencing.token itself can be stale
SET LOCAL fencing.token = 30;
UPDATE ledger SET billed = billed + 1 WHERE id = 3;
SELECT id, fence FROM ledger WHERE id IN (1, 3) ORDER BY id;
SET LOCAL fencing.token = 25;
UPDATE ledger SET billed = billed + 1 WHERE id = 3;
\echo sqlstate: :LAST_ERROR_SQLSTATE
ROLLBACK;
-- a fence other than fencing.token is a second token: a write carries one
BEGIN;
SET LOCAL fencing.token = 25;
INSERT INTO ledger (id, customer, fence) VALUES (4, 'umbrella', 26);
\echo sqlstate: :LAST_ERROR_SQLSTATE
ROLLBACK;
-- SET LOCAL ended with the transaction
SHOW fencing.token;
SELECT id, billed, fence FROM ledger ORDER BY id;

-- F3: DELETE is checked against fencing.token
DELETE FROM ledger WHERE id = 2;
\echo sqlstate: :LAST_ERROR_SQLSTATE
BEGIN;
SET LOCAL fencing.token = 4;
DELETE FROM ledger WHERE id = 2;
\echo sqlstate: :LAST_ERROR_SQLSTATE
ROLLBACK;
BEGIN;
SET LOCAL fencing.token = 5;
DELETE FROM ledger WHERE id = 2;
ROLLBACK;
SELECT count(*) AS globex_rows FROM ledger WHERE id = 2;

-- F4: the message names the table, the stale token and the current fence
UPDATE ledger SET fence = 7 WHERE id = 1;
\echo sqlstate: :LAST_ERROR_SQLSTATE

-- INSERT ... ON CONFLICT DO UPDATE goes through the UPDATE check
INSERT INTO ledger (id, customer, billed, fence) VALUES (1, 'acme', 99, 15)
	ON CONFLICT (id) DO UPDATE SET billed = EXCLUDED.billed, fence = EXCLUDED.fence;
\echo sqlstate: :LAST_ERROR_SQLSTATE
INSERT INTO ledger (id, customer, billed, fence) VALUES (1, 'acme', 99, 21)
	ON CONFLICT (id) DO UPDATE SET billed = EXCLUDED.billed, fence = EXCLUDED.fence;
SELECT id, billed, fence FROM ledger WHERE id = 1;

-- stale rejections are counted (UPDATE 9, UPDATE 10, token 25 on 30,
-- DELETE with 4, UPDATE 7, upsert 15)
SELECT stale_writes_rejected - :rejected_before AS stale_rejected FROM fencing.stats;

-- skip mode: a stale write touches no row, like the guide's "WHERE fence < $2"
CREATE TABLE jobs (id int PRIMARY KEY, state text, fence bigint);
INSERT INTO jobs VALUES (1, 'new', 50);
SELECT fencing.protect('jobs', on_stale => 'skip');
UPDATE jobs SET state = 'stale', fence = 40 WHERE id = 1;
UPDATE jobs SET state = 'done', fence = 50 WHERE id = 1;
BEGIN;
SET LOCAL fencing.token = 49;
DELETE FROM jobs WHERE id = 1;
ROLLBACK;
-- a missing token is still an error in skip mode, and the detail says so
UPDATE jobs SET state = 'no token' WHERE id = 1;
\echo sqlstate: :LAST_ERROR_SQLSTATE
UPDATE jobs SET state = 'null token', fence = NULL WHERE id = 1;
\echo sqlstate: :LAST_ERROR_SQLSTATE
DELETE FROM jobs WHERE id = 1;
\echo sqlstate: :LAST_ERROR_SQLSTATE
SELECT * FROM jobs;

-- a custom fence column, and re-running protect is harmless (one trigger)
CREATE TABLE files (path text PRIMARY KEY, epoch bigint, fence int);
INSERT INTO files VALUES ('/a', 3, 1);
SELECT fencing.protect('files', 'epoch');
SELECT fencing.protect('files', 'epoch');
SELECT fencing.protect('files'::regclass, fence_column => 'epoch', on_stale => 'error');
SELECT tgname, pg_catalog.pg_get_triggerdef(oid) FROM pg_trigger WHERE tgrelid = 'files'::regclass;
UPDATE files SET epoch = 2, fence = 2;
\echo sqlstate: :LAST_ERROR_SQLSTATE
UPDATE files SET epoch = 4;
-- re-protecting with another mode replaces the trigger, and says so
SELECT fencing.protect('files', 'epoch', 'skip');
SELECT count(*) AS triggers FROM pg_trigger WHERE tgrelid = 'files'::regclass;
-- re-running it without a column or mode keeps both
SELECT fencing.protect('files');
SELECT pg_catalog.pg_get_triggerdef(oid) FROM pg_trigger WHERE tgrelid = 'files'::regclass;
UPDATE files SET epoch = 3;
SELECT * FROM files;

-- unprotect removes it; unprotecting again is harmless
SELECT fencing.unprotect('files');
SELECT count(*) AS triggers FROM pg_trigger WHERE tgrelid = 'files'::regclass;
UPDATE files SET epoch = 0;
SELECT fencing.unprotect('files');
SELECT * FROM files;

-- the cached column number follows the table when it is altered
CREATE TABLE altered (a int, fence bigint, b int);
INSERT INTO altered VALUES (1, 10, 1);
SELECT fencing.protect('altered');
UPDATE altered SET b = 2, fence = 10;
ALTER TABLE altered DROP COLUMN a;
ALTER TABLE altered DROP COLUMN fence;
ALTER TABLE altered ADD COLUMN c int;
ALTER TABLE altered ADD COLUMN fence bigint;
UPDATE altered SET fence = 30;
BEGIN;
SET LOCAL fencing.token = 31;
UPDATE altered SET b = 3;
INSERT INTO altered (b, c) VALUES (4, 4);
SELECT * FROM altered ORDER BY b;
SET LOCAL fencing.token = 29;
UPDATE altered SET b = 5;
\echo sqlstate: :LAST_ERROR_SQLSTATE
ROLLBACK;
ALTER TABLE altered ALTER COLUMN fence TYPE int;
UPDATE altered SET fence = 40;
\echo sqlstate: :LAST_ERROR_SQLSTATE

-- fencing.token must be a non-negative bigint
SET fencing.token = 'abc';
\echo sqlstate: :LAST_ERROR_SQLSTATE
SET fencing.token = '-5';
\echo sqlstate: :LAST_ERROR_SQLSTATE
SET fencing.token = '12x';
\echo sqlstate: :LAST_ERROR_SQLSTATE
SET fencing.token = '99999999999999999999';
\echo sqlstate: :LAST_ERROR_SQLSTATE
SET fencing.token = ' 42 ';
SHOW fencing.token;
-- a server-wide token would stamp every unfenced write: not allowed
ALTER SYSTEM SET fencing.token = '42';
\echo sqlstate: :LAST_ERROR_SQLSTATE
SET fencing.token = '';
UPDATE ledger SET billed = 0 WHERE id = 1;
\echo sqlstate: :LAST_ERROR_SQLSTATE
RESET fencing.token;

--
-- F5: misuse
--
CREATE TABLE misuse (id int, fence bigint, small int);
INSERT INTO misuse VALUES (1, 1, 1);
SELECT fencing.reject_stale();
CREATE TRIGGER t_after AFTER UPDATE ON misuse
	FOR EACH ROW EXECUTE FUNCTION fencing.reject_stale();
UPDATE misuse SET fence = 2;
\echo sqlstate: :LAST_ERROR_SQLSTATE
DROP TRIGGER t_after ON misuse;
CREATE TRIGGER t_stmt BEFORE UPDATE ON misuse
	FOR EACH STATEMENT EXECUTE FUNCTION fencing.reject_stale();
UPDATE misuse SET fence = 2;
\echo sqlstate: :LAST_ERROR_SQLSTATE
DROP TRIGGER t_stmt ON misuse;
CREATE TRIGGER t_truncate BEFORE TRUNCATE ON misuse
	FOR EACH STATEMENT EXECUTE FUNCTION fencing.reject_stale();
TRUNCATE misuse;
\echo sqlstate: :LAST_ERROR_SQLSTATE
DROP TRIGGER t_truncate ON misuse;
CREATE VIEW misuse_view AS SELECT * FROM misuse;
CREATE TRIGGER t_instead INSTEAD OF UPDATE ON misuse_view
	FOR EACH ROW EXECUTE FUNCTION fencing.reject_stale();
UPDATE misuse_view SET fence = 2;
\echo sqlstate: :LAST_ERROR_SQLSTATE
DROP VIEW misuse_view;
CREATE TRIGGER t_nocol BEFORE UPDATE ON misuse
	FOR EACH ROW EXECUTE FUNCTION fencing.reject_stale('nope');
UPDATE misuse SET fence = 2;
\echo sqlstate: :LAST_ERROR_SQLSTATE
DROP TRIGGER t_nocol ON misuse;
CREATE TRIGGER t_type BEFORE UPDATE ON misuse
	FOR EACH ROW EXECUTE FUNCTION fencing.reject_stale('small');
UPDATE misuse SET fence = 2;
\echo sqlstate: :LAST_ERROR_SQLSTATE
DROP TRIGGER t_type ON misuse;
CREATE TRIGGER t_args BEFORE UPDATE ON misuse
	FOR EACH ROW EXECUTE FUNCTION fencing.reject_stale('fence', 'error', 'extra');
UPDATE misuse SET fence = 2;
\echo sqlstate: :LAST_ERROR_SQLSTATE
DROP TRIGGER t_args ON misuse;
CREATE TRIGGER t_mode BEFORE UPDATE ON misuse
	FOR EACH ROW EXECUTE FUNCTION fencing.reject_stale('fence', 'ignore');
UPDATE misuse SET fence = 2;
\echo sqlstate: :LAST_ERROR_SQLSTATE
DROP TRIGGER t_mode ON misuse;
-- the row is untouched by all of the above
SELECT * FROM misuse;

--
-- protect() validations
--
SELECT fencing.protect(0);
\echo sqlstate: :LAST_ERROR_SQLSTATE
SELECT fencing.protect(NULL);
\echo sqlstate: :LAST_ERROR_SQLSTATE
SELECT fencing.protect(123456789);
\echo sqlstate: :LAST_ERROR_SQLSTATE
SELECT fencing.protect('misuse', on_stale => 'ignore');
\echo sqlstate: :LAST_ERROR_SQLSTATE
SELECT fencing.protect('misuse', 'nope');
\echo sqlstate: :LAST_ERROR_SQLSTATE
SELECT fencing.protect('misuse', 'small');
\echo sqlstate: :LAST_ERROR_SQLSTATE
SELECT fencing.protect('misuse', 'ctid');
\echo sqlstate: :LAST_ERROR_SQLSTATE
CREATE TABLE generated_fence (id int, fence bigint GENERATED ALWAYS AS (id * 2) STORED);
SELECT fencing.protect('generated_fence');
\echo sqlstate: :LAST_ERROR_SQLSTATE
CREATE VIEW ledger_view AS SELECT * FROM ledger;
SELECT fencing.protect('ledger_view');
\echo sqlstate: :LAST_ERROR_SQLSTATE
CREATE MATERIALIZED VIEW ledger_mv AS SELECT * FROM ledger;
SELECT fencing.protect('ledger_mv');
\echo sqlstate: :LAST_ERROR_SQLSTATE
CREATE SEQUENCE fence_seq;
SELECT fencing.protect('fence_seq');
\echo sqlstate: :LAST_ERROR_SQLSTATE
CREATE FOREIGN DATA WRAPPER fence_dummy_fdw;
CREATE SERVER fence_dummy_server FOREIGN DATA WRAPPER fence_dummy_fdw;
CREATE FOREIGN TABLE remote_ledger (id int, fence bigint) SERVER fence_dummy_server;
SELECT fencing.protect('remote_ledger');
\echo sqlstate: :LAST_ERROR_SQLSTATE
SELECT fencing.protect('pg_catalog.pg_class', 'relpages');
\echo sqlstate: :LAST_ERROR_SQLSTATE
SELECT fencing.protect('pg_catalog.pg_largeobject_metadata');
\echo sqlstate: :LAST_ERROR_SQLSTATE
SELECT fencing.unprotect('pg_catalog.pg_class');
\echo sqlstate: :LAST_ERROR_SQLSTATE
-- temporary tables are ordinary tables of the session: allowed
CREATE TEMP TABLE scratch (id int, fence bigint);
SELECT fencing.protect('scratch');
INSERT INTO scratch VALUES (1, 7);
-- (the message names the session's temporary schema, pg_temp_N)
\set VERBOSITY sqlstate
INSERT INTO scratch VALUES (2, NULL);
UPDATE scratch SET fence = 6;
\set VERBOSITY default
SELECT * FROM scratch;
-- a role that does not own the table can neither protect nor unprotect it
CREATE ROLE regress_fence_intruder;
GRANT SELECT, UPDATE, TRIGGER ON misuse, ledger TO regress_fence_intruder;
SET ROLE regress_fence_intruder;
SELECT fencing.protect('misuse');
\echo sqlstate: :LAST_ERROR_SQLSTATE
SELECT fencing.unprotect('ledger');
\echo sqlstate: :LAST_ERROR_SQLSTATE
-- ... and is fenced like everyone else
UPDATE ledger SET billed = 0, fence = 1 WHERE id = 1;
\echo sqlstate: :LAST_ERROR_SQLSTATE
RESET ROLE;
SELECT count(*) AS triggers FROM pg_trigger WHERE tgrelid = 'misuse'::regclass;

-- a hostile search_path (own schema "fencing"-like objects, own operators)
-- changes nothing
CREATE SCHEMA evil;
CREATE FUNCTION evil.reject_stale() RETURNS trigger LANGUAGE plpgsql AS
	$$BEGIN RETURN NEW; END$$;
CREATE FUNCTION evil.always_true(bigint, bigint) RETURNS boolean LANGUAGE sql AS 'SELECT true';
CREATE OPERATOR evil.<= (LEFTARG = bigint, RIGHTARG = bigint, FUNCTION = evil.always_true);
CREATE OPERATOR evil.= (LEFTARG = text, RIGHTARG = text, FUNCTION = texteq);
CREATE TABLE evil.target (id int, fence bigint);
INSERT INTO evil.target VALUES (1, 10);
SET search_path = evil, pg_catalog, public;
SELECT fencing.protect('target');
SELECT pg_catalog.pg_get_triggerdef(oid) FROM pg_catalog.pg_trigger WHERE tgrelid = 'evil.target'::regclass;
UPDATE target SET fence = 9;
\echo sqlstate: :LAST_ERROR_SQLSTATE
RESET search_path;

--
-- Partitioned tables: the trigger is cloned to every partition and finds
-- the fence column in each partition's own column order
--
CREATE TABLE parted (id int, customer text, fence bigint) PARTITION BY RANGE (id);
CREATE TABLE parted_1 (fence bigint, customer text, id int);
ALTER TABLE parted ATTACH PARTITION parted_1 FOR VALUES FROM (0) TO (100);
CREATE TABLE parted_2 (junk int, id int, customer text, fence bigint);
ALTER TABLE parted_2 DROP COLUMN junk;
ALTER TABLE parted ATTACH PARTITION parted_2 FOR VALUES FROM (100) TO (200);
SELECT attrelid::regclass, attname, attnum FROM pg_attribute
	WHERE attrelid IN ('parted_1'::regclass, 'parted_2'::regclass) AND attname = 'fence'
	ORDER BY 1;
SELECT fencing.protect('parted');
-- a partition attached later gets the trigger too
CREATE TABLE parted_3 (customer text, id int, extra text DEFAULT 'x', fence bigint);
ALTER TABLE parted_3 DROP COLUMN extra;
ALTER TABLE parted ATTACH PARTITION parted_3 FOR VALUES FROM (200) TO (300);
SELECT tgrelid::regclass, tgname FROM pg_trigger
	WHERE tgrelid IN ('parted'::regclass, 'parted_1'::regclass, 'parted_2'::regclass, 'parted_3'::regclass)
	ORDER BY 1;
-- a partition's cloned trigger belongs to the parent's
SELECT fencing.protect('parted_1', on_stale => 'skip');
SELECT fencing.unprotect('parted_1');
INSERT INTO parted VALUES (1, 'a', 10), (101, 'b', 10), (201, 'c', 10);
INSERT INTO parted (id, customer) VALUES (2, 'd');
\echo sqlstate: :LAST_ERROR_SQLSTATE
BEGIN;
SET LOCAL fencing.token = 12;
INSERT INTO parted (id, customer) VALUES (2, 'd'), (102, 'e'), (202, 'f');
UPDATE parted SET customer = upper(customer) WHERE id IN (1, 101, 201);
COMMIT;
SELECT tableoid::regclass, * FROM parted ORDER BY id;
UPDATE parted SET customer = 'stale' WHERE id = 1 OR id = 101 OR id = 201;
\echo sqlstate: :LAST_ERROR_SQLSTATE
UPDATE parted SET customer = 'stale', fence = 11 WHERE id = 101;
\echo sqlstate: :LAST_ERROR_SQLSTATE
UPDATE parted SET customer = 'stale', fence = 11 WHERE id = 201;
\echo sqlstate: :LAST_ERROR_SQLSTATE
UPDATE parted SET customer = 'fresh', fence = 13 WHERE id IN (1, 101, 201);
-- moving a row to another partition: checked once, as an UPDATE
UPDATE parted SET id = 150, fence = 14 WHERE id = 1;
UPDATE parted SET id = 250, fence = 12 WHERE id = 101;
\echo sqlstate: :LAST_ERROR_SQLSTATE
BEGIN;
SET LOCAL fencing.token = 14;
UPDATE parted SET id = 50 WHERE id = 201;
COMMIT;
SELECT tableoid::regclass, * FROM parted ORDER BY id;
BEGIN;
SET LOCAL fencing.token = 13;
DELETE FROM parted WHERE id IN (101, 150);
\echo sqlstate: :LAST_ERROR_SQLSTATE
ROLLBACK;
BEGIN;
SET LOCAL fencing.token = 14;
DELETE FROM parted WHERE id IN (101, 150);
COMMIT;
SELECT tableoid::regclass, * FROM parted ORDER BY id;

-- COPY fires the trigger row by row too (first call in a per-row context)
CREATE TABLE copied (id int, fence bigint);
SELECT fencing.protect('copied');
COPY copied FROM stdin;
1	5
2	6
\.
BEGIN;
SET LOCAL fencing.token = 7;
COPY copied FROM stdin;
3	\N
4	\N
5	7
\.
COMMIT;
COPY copied FROM stdin;
6	9
7	\N
\.
\echo sqlstate: :LAST_ERROR_SQLSTATE
SELECT * FROM copied ORDER BY id;

-- more partitions than the trigger's cache has entries, rows interleaved
CREATE TABLE wide (id int, fence bigint) PARTITION BY HASH (id);
DO $$
BEGIN
	FOR r IN 0..69 LOOP
		EXECUTE format('CREATE TABLE wide_%s PARTITION OF wide FOR VALUES WITH (MODULUS 70, REMAINDER %s)', r, r);
	END LOOP;
END $$;
SELECT fencing.protect('wide');
BEGIN;
SET LOCAL fencing.token = 100;
INSERT INTO wide SELECT g FROM generate_series(1, 2000) g;
COMMIT;
SELECT count(*) AS rows, min(fence), max(fence), count(DISTINCT tableoid) AS partitions FROM wide;
UPDATE wide SET fence = 99 WHERE id > 1000;
\echo sqlstate: :LAST_ERROR_SQLSTATE
UPDATE wide SET fence = 101 WHERE id % 2 = 0;
SELECT fence, count(*) FROM wide GROUP BY fence ORDER BY fence;

--
-- check_fence(): fences for resources that are not one row
--
-- (tokens up to the latest issued are accepted; issue one so 100 qualifies)
SELECT fencing.next_token() > 100 AS token_issued;
SELECT fencing.check_fence('invoice-run:2026-10', 100);
-- names are normalised like lock names: these are the same resource
SELECT fencing.check_fence('  INVOICE-RUN:2026-10 ', 99);
\echo sqlstate: :LAST_ERROR_SQLSTATE
SELECT fencing.check_fence('Invoice-Run:2026-10', 100);
SELECT fencing.check_fence('invoice-run:2026-10', 101);
SELECT resource, fence FROM fencing.resource_fences ORDER BY resource;
SELECT fencing.check_fence('invoice-run:2026-10', 100);
\echo sqlstate: :LAST_ERROR_SQLSTATE
-- a stale check rolls back with the caller's transaction; so does a raise
BEGIN;
SELECT fencing.check_fence('invoice-run:2026-11', 200);
ROLLBACK;
SELECT count(*) AS rolled_back FROM fencing.resource_fences WHERE resource = 'invoice-run:2026-11';
-- a token that was never issued could block the resource for everyone
\set VERBOSITY sqlstate
SELECT fencing.check_fence('invoice-run:2026-10', fencing.latest_token() + 1000000);
\set VERBOSITY default
-- check_fence() refuses it itself, naming itself, before it writes the table
DO $$
BEGIN
    PERFORM fencing.check_fence('invoice-run:2026-10', fencing.latest_token() + 1000000);
EXCEPTION WHEN invalid_parameter_value THEN
    RAISE NOTICE 'refused: %', regexp_replace(SQLERRM, '[0-9]+', 'N', 'g');
END
$$;
SELECT fencing.check_fence('invoice-run:2026-10', fencing.latest_token()) = fencing.latest_token() AS latest_accepted;
SELECT fencing.check_fence('invoice-run:2026-10', -1);
\echo sqlstate: :LAST_ERROR_SQLSTATE
SELECT fencing.check_fence(NULL, 1);
\echo sqlstate: :LAST_ERROR_SQLSTATE
SELECT fencing.check_fence('x', NULL);
\echo sqlstate: :LAST_ERROR_SQLSTATE
SELECT fencing.check_fence('   ', 1);
\echo sqlstate: :LAST_ERROR_SQLSTATE
-- raising a fence needs EXECUTE, which PUBLIC lacks (F9) ...
SET ROLE regress_fence_intruder;
SELECT fencing.check_fence('intruder-resource', 5);
\echo sqlstate: :LAST_ERROR_SQLSTATE
RESET ROLE;
-- ... granted, ordinary roles may call it, read the watermarks, but not
-- write them directly
GRANT EXECUTE ON FUNCTION fencing.check_fence(text, bigint) TO regress_fence_intruder;
SET ROLE regress_fence_intruder;
SELECT fencing.check_fence('intruder-resource', 5);
SELECT fencing.check_fence('intruder-resource', 4);
\echo sqlstate: :LAST_ERROR_SQLSTATE
SELECT resource, fence FROM fencing.resource_fences WHERE resource = 'intruder-resource';
UPDATE fencing.resource_fences SET fence = 0;
\echo sqlstate: :LAST_ERROR_SQLSTATE
-- a hostile search_path does not subvert the comparison
SET search_path = evil, pg_catalog, public;
SELECT fencing.check_fence('intruder-resource', 3);
\echo sqlstate: :LAST_ERROR_SQLSTATE
RESET search_path;
RESET ROLE;
-- the table is dumped with the extension
SELECT extconfig::regclass[] FROM pg_extension WHERE extname = 'fencing';

DROP SCHEMA evil CASCADE;
DROP OWNED BY regress_fence_intruder;
DROP ROLE regress_fence_intruder;
