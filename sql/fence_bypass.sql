--
-- Ways around the fence that a writer without a valid token might try,
-- each written as such a writer would write it, with what the extension
-- does instead.
--
-- Tokens come from fencing.next_token(); messages that would print one are
-- shown as their SQLSTATE only.
--
CREATE SCHEMA fence_bypass;
SET search_path = fence_bypass, public;
SELECT fencing.next_token() AS old_token \gset
SELECT fencing.next_token() AS token \gset

------------------------------------------------------------------------
-- A default on a view column stands in for the token as a
-- table default would (F2, F7)
------------------------------------------------------------------------
CREATE TABLE ledger1 (id int PRIMARY KEY, amount int, fence bigint);
SELECT fencing.protect('ledger1');
CREATE TEMP VIEW l1 AS SELECT * FROM ledger1;
-- a view over that view, and one with its columns renamed
CREATE VIEW l1_upper AS SELECT * FROM l1;
CREATE VIEW l1_renamed (key, value, epoch) AS SELECT id, amount, fence FROM ledger1;
-- refused when it is set, on any view that writes the fence column
-- (the temporary views' schema differs from run to run) ...
\set VERBOSITY sqlstate
ALTER VIEW l1 ALTER COLUMN fence SET DEFAULT fencing.latest_token();
ALTER TABLE l1 ALTER COLUMN fence SET DEFAULT 1;
ALTER VIEW l1_upper ALTER COLUMN fence SET DEFAULT 1;
\set VERBOSITY default
ALTER VIEW l1_renamed ALTER COLUMN epoch SET DEFAULT 1;
-- ... but not on other columns, nor DEFAULT NULL
ALTER VIEW l1 ALTER COLUMN amount SET DEFAULT 7;
ALTER VIEW l1_renamed ALTER COLUMN epoch SET DEFAULT NULL;
ALTER VIEW l1_renamed ALTER COLUMN epoch DROP DEFAULT;
\set VERBOSITY sqlstate
INSERT INTO l1 (id, amount) VALUES (1, 10);
UPDATE l1 SET amount = 0, fence = DEFAULT WHERE id = 1;
\set VERBOSITY default
SELECT count(*) AS rows_written FROM ledger1;

-- a view given its default before protect(): protect() refuses the table,
-- naming the view, and installs nothing
CREATE TABLE ledger1b (id int PRIMARY KEY, amount int, fence bigint);
CREATE VIEW l1b AS SELECT id, fence, amount FROM ledger1b;
CREATE VIEW l1b_upper AS SELECT * FROM l1b;
ALTER VIEW l1b_upper ALTER COLUMN fence SET DEFAULT 1;
SELECT fencing.protect('ledger1b');
SELECT count(*) AS fence_triggers FROM pg_trigger WHERE tgrelid = 'ledger1b'::regclass;
-- with the trigger there all the same (created by hand), writes through
-- the view are refused
CREATE TRIGGER fencing_reject_stale BEFORE INSERT OR UPDATE OR DELETE ON ledger1b
	FOR EACH ROW EXECUTE FUNCTION fencing.reject_stale();
INSERT INTO l1b_upper (id, amount) VALUES (1, 10);
UPDATE l1b_upper SET amount = 0, fence = DEFAULT WHERE id = 1;
WITH w AS (INSERT INTO l1b_upper (id, amount) VALUES (1, 10) RETURNING id) SELECT * FROM w;
-- the owner drops the default
ALTER VIEW l1b_upper ALTER COLUMN fence DROP DEFAULT;
SELECT fencing.protect('ledger1b');
BEGIN;
SET LOCAL fencing.token = :token;
INSERT INTO l1b (id, amount) VALUES (1, 10);
COMMIT;
SELECT id, amount, fence = :token AS fence_is_token FROM ledger1b;

-- a view over an unprotected partitioned parent whose partition is protected
CREATE TABLE ledger1p (id int, fence bigint) PARTITION BY LIST (id);
CREATE TABLE ledger1p_1 PARTITION OF ledger1p FOR VALUES IN (1);
CREATE VIEW l1p AS SELECT * FROM ledger1p;
SELECT fencing.protect('ledger1p_1');
ALTER VIEW l1p ALTER COLUMN fence SET DEFAULT 1;

------------------------------------------------------------------------
-- A row moved out of a protected partition leaves the fence,
-- as a DELETE does: it needs fencing.token unless it lands in a partition
-- with the same fence (F3, F7)
------------------------------------------------------------------------
CREATE TABLE sp (id int, amount int, fence bigint) PARTITION BY LIST (id);
CREATE TABLE sp_live PARTITION OF sp FOR VALUES IN (1, 3);
CREATE TABLE sp_archive PARTITION OF sp FOR VALUES IN (2);
CREATE TABLE sp_fenced PARTITION OF sp FOR VALUES IN (4);
SELECT fencing.protect('sp_live');
SELECT fencing.protect('sp_fenced');
BEGIN;
SET LOCAL fencing.token = :token;
INSERT INTO sp VALUES (1, 100), (3, 300);
COMMIT;
\set VERBOSITY sqlstate
DELETE FROM sp WHERE id = 1;
\set VERBOSITY default
-- without a token: refused, whether the fence is copied or a token given
UPDATE sp SET id = 2, fence = fence WHERE id = 1;
UPDATE sp SET id = 2, fence = :token WHERE id = 1;
-- one row staying, one leaving: the statement is refused as a whole
UPDATE sp SET id = CASE id WHEN 1 THEN 2 ELSE 4 END, fence = fence;
-- a stale fencing.token is refused as for a DELETE
BEGIN;
SET LOCAL fencing.token = :old_token;
\set VERBOSITY sqlstate
UPDATE sp SET id = 2 WHERE id = 1;
\set VERBOSITY default
ROLLBACK;
SELECT tableoid::regclass AS part, id FROM sp ORDER BY id;
-- to a partition with the same fence the row keeps its fence: allowed
UPDATE sp SET id = 4, fence = fence WHERE id = 3;
-- with the current token it may leave
BEGIN;
SET LOCAL fencing.token = :token;
UPDATE sp SET id = 2 WHERE id = 1;
COMMIT;
SELECT tableoid::regclass AS part, id, fence = :token AS fence_is_token FROM sp ORDER BY id;
-- a move inside a protected tree needs no more than an UPDATE
CREATE TABLE sq (id int, fence bigint) PARTITION BY LIST (id);
CREATE TABLE sq_1 PARTITION OF sq FOR VALUES IN (1);
CREATE TABLE sq_2 PARTITION OF sq FOR VALUES IN (2);
SELECT fencing.protect('sq');
INSERT INTO sq VALUES (1, :token);
UPDATE sq SET id = 2, fence = fence WHERE id = 1;
SELECT tableoid::regclass AS part, id FROM sq;

------------------------------------------------------------------------
-- check_fence() takes the tokens the trigger takes, and its
-- errors speak of a resource name
------------------------------------------------------------------------
SELECT fencing.check_fence('bypass bucket', 0);
SELECT fencing.check_fence('   ', :token);
SELECT fencing.check_fence(repeat('x', 300), :token);
SELECT count(*) AS watermarks FROM fencing.resource_fences WHERE resource = 'bypass bucket';

------------------------------------------------------------------------
-- A table protected on its own is attached or inherited
------------------------------------------------------------------------
CREATE TABLE ap (id int, fence bigint) PARTITION BY LIST (id);
SELECT fencing.protect('ap');
CREATE TABLE ap1 (id int, fence bigint);
SELECT fencing.protect('ap1', 'fence', 'skip');
ALTER TABLE ap ATTACH PARTITION ap1 FOR VALUES IN (1);
-- a sub-partition protected on its own, below the table attached
CREATE TABLE ap2 (id int, fence bigint) PARTITION BY LIST (id);
CREATE TABLE ap2_1 PARTITION OF ap2 FOR VALUES IN (2);
SELECT fencing.protect('ap2_1');
ALTER TABLE ap ATTACH PARTITION ap2 FOR VALUES IN (2);
SELECT fencing.unprotect('ap1');
ALTER TABLE ap ATTACH PARTITION ap1 FOR VALUES IN (1);

------------------------------------------------------------------------
-- Other BEFORE ROW triggers run before or after the fence
-- check and may change the fence column: protect() and ATTACH PARTITION
-- name them in a WARNING
------------------------------------------------------------------------
CREATE FUNCTION fill_fence() RETURNS trigger LANGUAGE plpgsql AS
  $$ BEGIN NEW.fence := fencing.latest_token(); RETURN NEW; END $$;
CREATE TABLE ledger2 (id int PRIMARY KEY, amount int, fence bigint);
CREATE TRIGGER a_fill BEFORE INSERT ON ledger2 FOR EACH ROW EXECUTE FUNCTION fill_fence();
CREATE TRIGGER zz_max BEFORE UPDATE ON ledger2 FOR EACH ROW EXECUTE FUNCTION fill_fence();
CREATE TRIGGER after_log AFTER INSERT ON ledger2 FOR EACH ROW EXECUTE FUNCTION fill_fence();
CREATE TRIGGER b_delete BEFORE DELETE ON ledger2 FOR EACH ROW EXECUTE FUNCTION fill_fence();
SELECT fencing.protect('ledger2');
-- ATTACH clones a parent's trigger onto a protected table
CREATE TABLE tp (id int, fence bigint) PARTITION BY LIST (id);
CREATE TABLE tp1 (id int, fence bigint);
SELECT fencing.protect('tp1');
CREATE TRIGGER a_fill BEFORE INSERT OR UPDATE ON tp FOR EACH ROW EXECUTE FUNCTION fill_fence();
ALTER TABLE tp ATTACH PARTITION tp1 FOR VALUES IN (1);
-- only AFTER and BEFORE DELETE triggers besides the fence: nothing said
DROP TRIGGER a_fill ON ledger2;
DROP TRIGGER zz_max ON ledger2;
SELECT fencing.protect('ledger2');

------------------------------------------------------------------------
-- The owner's escape hatches (documented): a fence trigger
-- replaced by hand with a WHEN clause checks only the rows it selects;
-- TRUNCATE stays refused, and protect() puts the real trigger back
------------------------------------------------------------------------
CREATE TABLE ledger7 (id int PRIMARY KEY, amount int, fence bigint);
SELECT fencing.protect('ledger7');
INSERT INTO ledger7 VALUES (1, 100, :token), (2, 200, :token);
CREATE OR REPLACE TRIGGER fencing_reject_stale BEFORE INSERT OR UPDATE OR DELETE ON ledger7
	FOR EACH ROW WHEN (false) EXECUTE FUNCTION fencing.reject_stale();
TRUNCATE ledger7;
DELETE FROM ledger7 WHERE id = 1;
SELECT fencing.protect('ledger7');
\set VERBOSITY sqlstate
DELETE FROM ledger7 WHERE id = 2;
\set VERBOSITY default
SELECT id FROM ledger7;

RESET search_path;
SET client_min_messages = warning;
DROP SCHEMA fence_bypass CASCADE;
RESET client_min_messages;
