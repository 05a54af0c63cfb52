--
-- fence_cache: the trigger's cache of column and mode per trigger stays
-- right for statements that reach many partitions, and follows every DDL
-- that changes what it holds: the trigger's arguments, a partition's
-- columns, ATTACH PARTITION, new partitions, a new owner, and a
-- default on a partitioned ancestor (which only the trigger sees when the
-- catalogs are changed behind the DDL checks).  Each step runs after the
-- cache has been filled in the same session.
--
\set SHOW_CONTEXT never
\set VERBOSITY terse
SELECT fencing.next_token() > 1000 AS token_issued;

-- 100 hash partitions: one statement reaches every one of them, more
-- than once each
CREATE TABLE spread (id int NOT NULL, fence bigint, note text) PARTITION BY HASH (id);
DO $$
BEGIN
	FOR r IN 0 .. 99 LOOP
		EXECUTE format('CREATE TABLE spread_%s PARTITION OF spread FOR VALUES WITH (MODULUS 100, REMAINDER %s)', r, r);
	END LOOP;
END
$$;
SELECT fencing.protect('spread');
BEGIN;
SET LOCAL fencing.token = 500;
INSERT INTO spread SELECT i, NULL, 'a' FROM generate_series(1, 5000) i;
COMMIT;
SELECT count(*) AS rows, count(DISTINCT tableoid) AS partitions, min(fence), max(fence) FROM spread;
-- without a token, every partition refuses
INSERT INTO spread VALUES (1, NULL, 'no token');
-- a stale token, every partition refuses, twice in one session
BEGIN;
SET LOCAL fencing.token = 400;
UPDATE spread SET note = 'stale';
ROLLBACK;
BEGIN;
SET LOCAL fencing.token = 400;
DELETE FROM spread WHERE id > 4990;
ROLLBACK;

-- the mode changes (protect() replaces the trigger on every partition):
-- stale writes now touch no row, on every partition
SELECT fencing.protect('spread', on_stale => 'skip');
BEGIN;
SET LOCAL fencing.token = 400;
UPDATE spread SET note = 'stale';
ROLLBACK;
SELECT fencing.protect('spread', on_stale => 'error');
BEGIN;
SET LOCAL fencing.token = 400;
UPDATE spread SET note = 'stale' WHERE id = 7;
ROLLBACK;

-- a partition attached later, its columns in another order: the fence is
-- its own column 1
CREATE TABLE spread_late (fence bigint, note text, id int NOT NULL);
ALTER TABLE spread DETACH PARTITION spread_99;
ALTER TABLE spread ATTACH PARTITION spread_late FOR VALUES WITH (MODULUS 100, REMAINDER 99);
BEGIN;
SET LOCAL fencing.token = 600;
INSERT INTO spread SELECT i, NULL, 'b' FROM generate_series(5001, 6000) i;
COMMIT;
SELECT count(*), min(fence), max(fence) FROM spread_late;
BEGIN;
SET LOCAL fencing.token = 550;
UPDATE spread SET note = 'stale' WHERE fence = 600;
ROLLBACK;

-- the trigger's arguments change behind protect(): another fence column
ALTER TABLE spread ADD COLUMN epoch bigint;
UPDATE spread SET epoch = 10, fence = fence;
DROP TRIGGER fencing_reject_stale ON spread;
INSERT INTO spread VALUES (1, NULL, 'unprotected');
DELETE FROM spread WHERE note = 'unprotected';
CREATE TRIGGER fencing_reject_stale BEFORE INSERT OR UPDATE OR DELETE ON spread
	FOR EACH ROW EXECUTE FUNCTION fencing.reject_stale('epoch', 'error');
BEGIN;
SET LOCAL fencing.token = 5;
UPDATE spread SET note = 'stale' WHERE id = 3;
ROLLBACK;
BEGIN;
SET LOCAL fencing.token = 10;
UPDATE spread SET note = 'c' WHERE id = 3;
COMMIT;
-- and back, with CREATE OR REPLACE TRIGGER
CREATE OR REPLACE TRIGGER fencing_reject_stale BEFORE INSERT OR UPDATE OR DELETE ON spread
	FOR EACH ROW EXECUTE FUNCTION fencing.reject_stale('fence', 'skip');
BEGIN;
SET LOCAL fencing.token = 400;
UPDATE spread SET note = 'stale' WHERE id = 3;
ROLLBACK;

-- a new owner: still fenced
CREATE ROLE fence_cache_owner;
ALTER TABLE spread OWNER TO fence_cache_owner;
BEGIN;
SET LOCAL fencing.token = 400;
UPDATE spread SET note = 'stale' WHERE id = 3;
ROLLBACK;
ALTER TABLE spread OWNER TO CURRENT_USER;
DROP ROLE fence_cache_owner;

-- A table of its own (no ancestor to invalidate): CREATE OR REPLACE
-- TRIGGER keeps the trigger's OID and changes its mode
CREATE TABLE single (id int, fence bigint);
SELECT fencing.protect('single');
INSERT INTO single VALUES (1, 500);
BEGIN;
SET LOCAL fencing.token = 400;
UPDATE single SET id = 2;
ROLLBACK;
SELECT oid AS trigger_before FROM pg_trigger WHERE tgrelid = 'single'::regclass \gset
CREATE OR REPLACE TRIGGER fencing_reject_stale BEFORE INSERT OR UPDATE OR DELETE ON single
	FOR EACH ROW EXECUTE FUNCTION fencing.reject_stale('fence', 'skip');
SELECT oid = :trigger_before AS same_trigger FROM pg_trigger WHERE tgrelid = 'single'::regclass;
BEGIN;
SET LOCAL fencing.token = 400;
UPDATE single SET id = 2;
ROLLBACK;
DROP TABLE single;

-- A default on the fence column of a partitioned ancestor, written into
-- the catalogs directly (past the DDL checks): the next write to a
-- partition below it resolves its trigger again and refuses the column.
CREATE TABLE tree (id int NOT NULL, fence bigint) PARTITION BY RANGE (id);
CREATE TABLE tree_mid PARTITION OF tree FOR VALUES FROM (0) TO (1000) PARTITION BY RANGE (id);
CREATE TABLE tree_leaf PARTITION OF tree_mid FOR VALUES FROM (0) TO (1000);
SELECT fencing.protect('tree');
BEGIN;
SET LOCAL fencing.token = 500;
INSERT INTO tree VALUES (1, NULL);
COMMIT;
CREATE TABLE default_donor (fence bigint DEFAULT 700);
UPDATE pg_attrdef SET adrelid = 'tree'::regclass, adnum = 2
	WHERE adrelid = 'default_donor'::regclass;
UPDATE pg_attribute SET atthasdef = (attrelid = 'tree'::regclass)
	WHERE attrelid IN ('tree'::regclass, 'default_donor'::regclass) AND attname = 'fence';
SELECT pg_get_expr(adbin, adrelid) FROM pg_attrdef WHERE adrelid = 'tree'::regclass;
-- a write without a token would take the default and pass
INSERT INTO tree (id) VALUES (2);
INSERT INTO tree_leaf (id) VALUES (3);
SELECT id, fence FROM tree ORDER BY id;
UPDATE pg_attrdef SET adrelid = 'default_donor'::regclass, adnum = 1
	WHERE adrelid = 'tree'::regclass;
UPDATE pg_attribute SET atthasdef = (attrelid = 'default_donor'::regclass)
	WHERE attrelid IN ('tree'::regclass, 'default_donor'::regclass) AND attname = 'fence';
DROP TABLE default_donor;
-- the default gone, the partition's trigger resolves again
INSERT INTO tree (id, fence) VALUES (4, 500);
SELECT id, fence FROM tree ORDER BY id;

DROP TABLE spread, spread_99, tree;
