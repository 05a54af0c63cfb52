--
-- fence_rules: the writer's token per row (DESIGN.md F1-F3, F6-F8), and
-- every statement shape that writes a protected table (F7).
--
-- Fences are small literal numbers so that the output does not depend on
-- the token counter; they count as issued tokens because the first
-- statement issues one (tokens are far above them).  Where a message
-- would show the counter itself (the "not issued" detail), VERBOSITY is
-- terse.  After each expected error the SQLSTATE is echoed (psql's
-- SQLSTATE: 00000 when the statement succeeded).
--
\set SHOW_CONTEXT never
SELECT fencing.next_token() > 1000 AS token_issued;

-- show_error(sql): the error a statement raises, with numbers of ten
-- digits or more (the token counter) written as N
CREATE FUNCTION show_error(cmd text,
	OUT state text, OUT message text, OUT detail text, OUT hint text)
LANGUAGE plpgsql AS $$
BEGIN
	EXECUTE cmd;
	state := 'ok';
EXCEPTION WHEN OTHERS THEN
	GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE, message = MESSAGE_TEXT,
		detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
	message := regexp_replace(message, '[0-9]{10,}', 'N', 'g');
	detail := regexp_replace(detail, '[0-9]{10,}', 'N', 'g');
END
$$;

------------------------------------------------------------------------
-- F6: fencing.token counts only in the transaction that set it
------------------------------------------------------------------------
CREATE TABLE scope (id int PRIMARY KEY, v int, fence bigint);
INSERT INTO scope VALUES (1, 0, 10), (2, 0, 10), (3, 0, 10);
SELECT fencing.protect('scope');

-- a session-level SET in an earlier transaction does not count
SET fencing.token = 20;
SHOW fencing.token;
UPDATE scope SET v = 1 WHERE id = 1;
\echo sqlstate: :SQLSTATE
INSERT INTO scope (id, v) VALUES (4, 0);
\echo sqlstate: :SQLSTATE
DELETE FROM scope WHERE id = 3;
\echo sqlstate: :SQLSTATE
-- a session-level SET counts in the transaction that ran it, and only there
BEGIN;
SET fencing.token = 21;
UPDATE scope SET v = 1 WHERE id = 1;
COMMIT;
UPDATE scope SET v = 2 WHERE id = 1;
\echo sqlstate: :SQLSTATE
-- (one implicit transaction: statements sent in one query string)
SET fencing.token = 22 \; UPDATE scope SET v = 3 WHERE id = 1;
UPDATE scope SET v = 4 WHERE id = 1;
\echo sqlstate: :SQLSTATE
SELECT id, v, fence FROM scope ORDER BY id;
-- set_config(), local or not, counts in its own transaction
BEGIN;
SELECT set_config('fencing.token', '23', true);
UPDATE scope SET v = 5 WHERE id = 1;
COMMIT;
BEGIN;
SELECT set_config('fencing.token', '24', false);
UPDATE scope SET v = 6 WHERE id = 1;
COMMIT;
UPDATE scope SET v = 7 WHERE id = 1;
\echo sqlstate: :SQLSTATE
SELECT id, v, fence FROM scope WHERE id = 1;

-- a value restored by ROLLBACK TO keeps the transaction that really set it
SET fencing.token = 30;
BEGIN;
SAVEPOINT s;
SET LOCAL fencing.token = 31;
ROLLBACK TO s;
SHOW fencing.token;
UPDATE scope SET v = 8 WHERE id = 2;
\echo sqlstate: :SQLSTATE
ROLLBACK;
-- ... and a value of this transaction restored by ROLLBACK TO counts
BEGIN;
SET LOCAL fencing.token = 31;
SAVEPOINT s;
SET LOCAL fencing.token = 32;
ROLLBACK TO s;
UPDATE scope SET v = 8 WHERE id = 2;
COMMIT;
-- the same through a PL/pgSQL exception block (a subtransaction)
SET fencing.token = 33;
DO $$
BEGIN
	BEGIN
		SET LOCAL fencing.token = 34;
		RAISE EXCEPTION 'undo';
	EXCEPTION WHEN raise_exception THEN
		NULL;
	END;
	UPDATE scope SET v = 9 WHERE id = 2;
END $$;
\echo sqlstate: :SQLSTATE
RESET fencing.token;
SELECT id, v, fence FROM scope WHERE id = 2;

-- a prepared statement runs with the token of the transaction it runs in
SET plan_cache_mode = force_generic_plan;
PREPARE bump(int) AS UPDATE scope SET v = v + 1 WHERE id = $1;
BEGIN;
SET LOCAL fencing.token = 35;
EXECUTE bump(2);
COMMIT;
SET fencing.token = 35;
EXECUTE bump(2);
\echo sqlstate: :SQLSTATE
RESET fencing.token;
DEALLOCATE bump;
RESET plan_cache_mode;

-- a function's SET clause would set the token for every later call: refused
CREATE FUNCTION scope_writer() RETURNS void LANGUAGE sql
	SET fencing.token = '40' AS 'UPDATE scope SET v = 0 WHERE id = 3';
\echo sqlstate: :SQLSTATE
CREATE FUNCTION scope_writer() RETURNS void LANGUAGE sql
	AS 'UPDATE scope SET v = 0 WHERE id = 3';
ALTER FUNCTION scope_writer() SET fencing.token = '40';
\echo sqlstate: :SQLSTATE
BEGIN;
SET LOCAL fencing.token = 40;
ALTER FUNCTION scope_writer() SET fencing.token FROM CURRENT;
\echo sqlstate: :SQLSTATE
ROLLBACK;
-- (an empty value, which unsets the token inside the function, is allowed)
ALTER FUNCTION scope_writer() SET fencing.token = '';
BEGIN;
SET LOCAL fencing.token = 40;
SELECT scope_writer();
\echo sqlstate: :SQLSTATE
ROLLBACK;
SELECT proconfig FROM pg_proc WHERE proname = 'scope_writer';
ALTER FUNCTION scope_writer() RESET fencing.token;
-- a function without a SET clause sees the caller's SET LOCAL
BEGIN;
SET LOCAL fencing.token = 40;
SELECT scope_writer();
COMMIT;
SELECT id, v, fence FROM scope WHERE id = 3;
DROP FUNCTION scope_writer();

------------------------------------------------------------------------
-- The writer's token W, per row
------------------------------------------------------------------------
CREATE TABLE w (id int PRIMARY KEY, v int, fence bigint);
INSERT INTO w VALUES (1, 0, 10), (2, 0, NULL), (3, 0, 10), (4, 0, 10);
SELECT fencing.protect('w');
\set ON_ERROR_ROLLBACK on

-- with fencing.token T: INSERT stamps T into a NULL fence, accepts T, and
-- refuses any other fence (a write carries one token)
BEGIN;
SET LOCAL fencing.token = 20;
INSERT INTO w (id, v) VALUES (10, 0);
INSERT INTO w VALUES (11, 0, 20);
INSERT INTO w VALUES (12, 0, NULL);
INSERT INTO w VALUES (13, 0, 19);
\echo sqlstate: :SQLSTATE
INSERT INTO w VALUES (13, 0, 21);
\echo sqlstate: :SQLSTATE
SELECT id, fence FROM w WHERE id >= 10 ORDER BY id;
COMMIT;

-- with T: UPDATE stamps T when the fence is left alone, copied, NULL or T
BEGIN;
SET LOCAL fencing.token = 20;
UPDATE w SET v = 1 WHERE id = 1;
SELECT id, v, fence FROM w WHERE id = 1;
ROLLBACK;
BEGIN;
SET LOCAL fencing.token = 20;
UPDATE w SET v = 1, fence = fence WHERE id = 1;
UPDATE w SET v = 2, fence = NULL WHERE id = 3;
UPDATE w SET v = 3, fence = 20 WHERE id = 4;
SELECT id, v, fence FROM w WHERE id IN (1, 3, 4) ORDER BY id;
-- ... and refuses any other fence, above T or below
UPDATE w SET v = 5, fence = 25 WHERE id = 1;
\echo sqlstate: :SQLSTATE
UPDATE w SET v = 5, fence = 15 WHERE id = 1;
\echo sqlstate: :SQLSTATE
COMMIT;
-- a stale T is stale whatever the statement does with the fence column
BEGIN;
SET LOCAL fencing.token = 15;
UPDATE w SET v = 6 WHERE id = 1;
\echo sqlstate: :SQLSTATE
UPDATE w SET v = 6, fence = fence WHERE id = 1;
\echo sqlstate: :SQLSTATE
UPDATE w SET v = 6, fence = 15 WHERE id = 1;
\echo sqlstate: :SQLSTATE
DELETE FROM w WHERE id = 1;
\echo sqlstate: :SQLSTATE
-- a row that was never fenced accepts any issued token
UPDATE w SET v = 6 WHERE id = 2;
SELECT id, v, fence FROM w WHERE id IN (1, 2) ORDER BY id;
ROLLBACK;

-- without T: INSERT needs a fence; UPDATE must assign the fence, not
-- below the row's (equal is the same holder writing again); DELETE needs T
INSERT INTO w (id, v) VALUES (20, 0);
\echo sqlstate: :SQLSTATE
INSERT INTO w VALUES (20, 0, 30);
UPDATE w SET v = 1 WHERE id = 20;
\echo sqlstate: :SQLSTATE
UPDATE w SET v = 1, fence = NULL WHERE id = 20;
\echo sqlstate: :SQLSTATE
UPDATE w SET v = 1, fence = 29 WHERE id = 20;
\echo sqlstate: :SQLSTATE
UPDATE w SET v = 1, fence = 30 WHERE id = 20;
UPDATE w SET v = 2, fence = 31 WHERE id = 20;
DELETE FROM w WHERE id = 20;
\echo sqlstate: :SQLSTATE
SELECT id, v, fence FROM w WHERE id = 20;

-- SET fence = fence, and an ORM writing back the whole row it read: the
-- fence it read equals the row's, so without T a stale holder passes (the
-- statement carries no token of its own); with SET LOCAL fencing.token it
-- is rejected.  SET LOCAL fencing.token is the safe way.
SELECT fence AS read_fence FROM w WHERE id = 20 \gset
UPDATE w SET v = 3, fence = fence WHERE id = 20;
UPDATE w SET v = 4, fence = :read_fence WHERE id = 20;
SELECT id, v, fence FROM w WHERE id = 20;
BEGIN;
SET LOCAL fencing.token = 30;
UPDATE w SET v = 5, fence = :read_fence WHERE id = 20;
\echo sqlstate: :SQLSTATE
ROLLBACK;

------------------------------------------------------------------------
-- F8: a fence must be a token this cluster has issued
------------------------------------------------------------------------
\set VERBOSITY terse
UPDATE w SET v = 6, fence = 9223372036854775807 WHERE id = 20;
\echo sqlstate: :SQLSTATE
INSERT INTO w VALUES (21, 0, 9223372036854775807);
\echo sqlstate: :SQLSTATE
UPDATE w SET v = 6, fence = 0 WHERE id = 2;
\echo sqlstate: :SQLSTATE
INSERT INTO w VALUES (21, 0, 0);
\echo sqlstate: :SQLSTATE
INSERT INTO w VALUES (21, 0, -5);
\echo sqlstate: :SQLSTATE
BEGIN;
SET LOCAL fencing.token = 9223372036854775807;
UPDATE w SET v = 6 WHERE id = 20;
\echo sqlstate: :SQLSTATE
DELETE FROM w WHERE id = 20;
\echo sqlstate: :SQLSTATE
INSERT INTO w (id, v) VALUES (21, 0);
\echo sqlstate: :SQLSTATE
SET LOCAL fencing.token = 0;
INSERT INTO w (id, v) VALUES (21, 0);
\echo sqlstate: :SQLSTATE
DELETE FROM w WHERE id = 2;
\echo sqlstate: :SQLSTATE
ROLLBACK;
\set VERBOSITY default
-- the detail names the highest token issued; latest_token() itself is fine
\x on
SELECT * FROM show_error('UPDATE w SET v = 6, fence = fencing.latest_token() + 1000000 WHERE id = 20');
\x off
UPDATE w SET v = 6, fence = fencing.latest_token() WHERE id = 2;
SELECT fence = fencing.latest_token() AS latest_accepted FROM w WHERE id = 2;
-- rows whose fence is zero or negative (written before protect) accept
-- any issued token
CREATE TABLE wneg (id int, v int, fence bigint);
INSERT INTO wneg VALUES (1, 0, 0), (2, 0, -7);
SELECT fencing.protect('wneg');
UPDATE wneg SET v = 1, fence = 1;
SELECT * FROM wneg ORDER BY id;
-- the row the huge fence was aimed at is still writable by the next holder
UPDATE w SET v = 7, fence = 32 WHERE id = 20;
SELECT id, v, fence FROM w WHERE id = 20;

-- skip mode: a stale write touches no row; missing, two-token and
-- not-issued writes are still errors
CREATE TABLE wskip (id int PRIMARY KEY, v int, fence bigint);
INSERT INTO wskip VALUES (1, 0, 10);
SELECT fencing.protect('wskip', on_stale => 'skip');
UPDATE wskip SET v = 1, fence = 9 WHERE id = 1;
BEGIN;
SET LOCAL fencing.token = 9;
UPDATE wskip SET v = 2 WHERE id = 1;
DELETE FROM wskip WHERE id = 1;
UPDATE wskip SET v = 3, fence = 11 WHERE id = 1;
\echo sqlstate: :SQLSTATE
ROLLBACK;
UPDATE wskip SET v = 4 WHERE id = 1;
\echo sqlstate: :SQLSTATE
\set VERBOSITY terse
UPDATE wskip SET v = 5, fence = 9223372036854775807 WHERE id = 1;
\echo sqlstate: :SQLSTATE
UPDATE wskip SET v = 5, fence = -1 WHERE id = 1;
\echo sqlstate: :SQLSTATE
\set VERBOSITY default
SELECT * FROM wskip;

------------------------------------------------------------------------
-- MERGE: each action, and the union of UPDATE actions' columns
------------------------------------------------------------------------
CREATE TABLE m (id int PRIMARY KEY, v int, fence bigint);
INSERT INTO m VALUES (1, 0, 10), (2, 0, 10), (3, 0, 10);
SELECT fencing.protect('m');
-- without T, an UPDATE action is refused even when it assigns the fence:
-- the trigger cannot tell which action fired
MERGE INTO m USING (VALUES (1)) AS s(id) ON m.id = s.id
	WHEN MATCHED THEN UPDATE SET v = 1, fence = 20;
\echo sqlstate: :SQLSTATE
MERGE INTO m USING (VALUES (1)) AS s(id) ON m.id = s.id
	WHEN MATCHED THEN UPDATE SET v = 1;
\echo sqlstate: :SQLSTATE
MERGE INTO m USING (VALUES (1)) AS s(id) ON m.id = s.id
	WHEN MATCHED THEN DELETE;
\echo sqlstate: :SQLSTATE
-- an INSERT action is an INSERT: a fence or T
MERGE INTO m USING (VALUES (4)) AS s(id) ON m.id = s.id
	WHEN NOT MATCHED THEN INSERT (id, v) VALUES (s.id, 0);
\echo sqlstate: :SQLSTATE
MERGE INTO m USING (VALUES (4)) AS s(id) ON m.id = s.id
	WHEN NOT MATCHED THEN INSERT VALUES (s.id, 0, 20);
-- the union case: a stale T, one action leaves the fence alone while
-- another names it
BEGIN;
SET LOCAL fencing.token = 5;
MERGE INTO m USING (VALUES (1, 'a'), (2, 'b')) AS s(id, k) ON m.id = s.id
	WHEN MATCHED AND s.k = 'a' THEN UPDATE SET v = 100
	WHEN MATCHED AND s.k = 'b' THEN UPDATE SET v = 200, fence = 5;
\echo sqlstate: :SQLSTATE
MERGE INTO m USING (VALUES (1, 'a')) AS s(id, k) ON m.id = s.id
	WHEN MATCHED AND s.k = 'a' THEN UPDATE SET v = 100
	WHEN MATCHED AND s.k = 'b' THEN UPDATE SET v = 200, fence = 5;
\echo sqlstate: :SQLSTATE
MERGE INTO m USING (VALUES (3)) AS s(id) ON m.id = s.id
	WHEN MATCHED THEN DELETE;
\echo sqlstate: :SQLSTATE
ROLLBACK;
SELECT * FROM m ORDER BY id;
-- with a current T every action works and the fence is stamped
BEGIN;
SET LOCAL fencing.token = 30;
MERGE INTO m USING (VALUES (1, 'a'), (2, 'b'), (3, 'c'), (5, 'd')) AS s(id, k) ON m.id = s.id
	WHEN MATCHED AND s.k = 'a' THEN UPDATE SET v = 100
	WHEN MATCHED AND s.k = 'b' THEN UPDATE SET v = 200, fence = 30
	WHEN MATCHED AND s.k = 'c' THEN DELETE
	WHEN NOT MATCHED THEN INSERT (id, v) VALUES (s.id, 500);
-- ... but an action that sets another fence than T carries two tokens
MERGE INTO m USING (VALUES (1)) AS s(id) ON m.id = s.id
	WHEN MATCHED THEN UPDATE SET v = 101, fence = 31;
\echo sqlstate: :SQLSTATE
MERGE INTO m USING (VALUES (6)) AS s(id) ON m.id = s.id
	WHEN NOT MATCHED THEN INSERT VALUES (s.id, 600, 29);
\echo sqlstate: :SQLSTATE
COMMIT;
SELECT * FROM m ORDER BY id;

------------------------------------------------------------------------
-- INSERT ... ON CONFLICT DO UPDATE
------------------------------------------------------------------------
CREATE TABLE up (id int PRIMARY KEY, v int, fence bigint);
INSERT INTO up VALUES (1, 0, 10);
SELECT fencing.protect('up');
-- without T: DO UPDATE must assign the fence (EXCLUDED.fence), not stale
INSERT INTO up VALUES (1, 1, 20) ON CONFLICT (id) DO UPDATE SET v = EXCLUDED.v;
\echo sqlstate: :SQLSTATE
INSERT INTO up VALUES (1, 1, 9) ON CONFLICT (id) DO UPDATE SET v = EXCLUDED.v, fence = EXCLUDED.fence;
\echo sqlstate: :SQLSTATE
INSERT INTO up VALUES (1, 1, 20) ON CONFLICT (id) DO UPDATE SET v = EXCLUDED.v, fence = EXCLUDED.fence;
-- with T, with and without EXCLUDED.fence (EXCLUDED holds the stamped T)
BEGIN;
SET LOCAL fencing.token = 21;
INSERT INTO up (id, v) VALUES (1, 2) ON CONFLICT (id) DO UPDATE SET v = EXCLUDED.v;
INSERT INTO up (id, v) VALUES (1, 3) ON CONFLICT (id) DO UPDATE SET v = EXCLUDED.v, fence = EXCLUDED.fence;
INSERT INTO up VALUES (1, 4, 22) ON CONFLICT (id) DO UPDATE SET v = EXCLUDED.v;
\echo sqlstate: :SQLSTATE
INSERT INTO up (id, v) VALUES (1, 4) ON CONFLICT (id) DO UPDATE SET v = EXCLUDED.v, fence = 22;
\echo sqlstate: :SQLSTATE
COMMIT;
BEGIN;
SET LOCAL fencing.token = 19;
INSERT INTO up (id, v) VALUES (1, 5) ON CONFLICT (id) DO UPDATE SET v = EXCLUDED.v;
\echo sqlstate: :SQLSTATE
INSERT INTO up (id, v) VALUES (1, 5) ON CONFLICT (id) DO UPDATE SET v = EXCLUDED.v, fence = EXCLUDED.fence;
\echo sqlstate: :SQLSTATE
ROLLBACK;
SELECT * FROM up;

------------------------------------------------------------------------
-- COPY FROM, INSERT ... SELECT, writable CTEs
------------------------------------------------------------------------
CREATE TABLE cp (id int, fence bigint);
SELECT fencing.protect('cp');
-- (psql does not set SQLSTATE after COPY FROM STDIN: the errors show)
COPY cp FROM stdin;
1	\N
\.
\set VERBOSITY terse
COPY cp FROM stdin;
1	9223372036854775807
\.
\set VERBOSITY default
BEGIN;
SET LOCAL fencing.token = 20;
COPY cp FROM stdin;
2	\N
3	20
\.
COPY cp FROM stdin;
4	19
\.
COMMIT;
SELECT * FROM cp ORDER BY id;

CREATE TABLE cp_source (id int, fence bigint);
INSERT INTO cp_source VALUES (10, 15), (11, NULL);
INSERT INTO cp SELECT id, fence FROM cp_source;
\echo sqlstate: :SQLSTATE
INSERT INTO cp SELECT id, fence FROM cp_source WHERE fence IS NOT NULL;
BEGIN;
SET LOCAL fencing.token = 20;
INSERT INTO cp SELECT id + 10, fence FROM cp_source;
\echo sqlstate: :SQLSTATE
INSERT INTO cp SELECT id + 10 FROM cp_source;
COMMIT;
SELECT * FROM cp ORDER BY id;

-- writable CTEs: each part is checked
WITH d AS (DELETE FROM w WHERE id = 4 RETURNING *)
	INSERT INTO w SELECT id + 100, v, fence FROM d;
\echo sqlstate: :SQLSTATE
WITH u AS (UPDATE w SET v = 9 WHERE id = 20 RETURNING id)
	SELECT count(*) FROM u;
\echo sqlstate: :SQLSTATE
-- an UPDATE and a DELETE of the same row in one statement: a row the
-- statement has updated is skipped by its DELETE, and a DELETE that runs
-- first is checked on its own
WITH u AS (UPDATE w SET v = 9, fence = 32 WHERE id = 20 RETURNING id)
	DELETE FROM w WHERE id IN (SELECT id FROM u);
\echo sqlstate: :SQLSTATE
WITH u AS (UPDATE w SET v = 9, fence = 32 WHERE id = 20 RETURNING id)
	DELETE FROM w WHERE id = 20;
\echo sqlstate: :SQLSTATE
SELECT id, v, fence FROM w WHERE id IN (4, 20, 104) ORDER BY id;
BEGIN;
SET LOCAL fencing.token = 15;
WITH d AS (DELETE FROM w WHERE id = 4 RETURNING *)
	INSERT INTO w SELECT id + 100, v FROM d;
\echo sqlstate: :SQLSTATE
SET LOCAL fencing.token = 33;
WITH d AS (DELETE FROM w WHERE id = 4 RETURNING *)
	INSERT INTO w SELECT id + 100, v FROM d;
COMMIT;
SELECT id, v, fence FROM w WHERE id IN (4, 104) ORDER BY id;

------------------------------------------------------------------------
-- Views, foreign-key actions, and triggers of other tables
------------------------------------------------------------------------
-- an auto-updatable view writes the table: fenced the same way
CREATE VIEW w_view AS SELECT id, v FROM w WHERE id < 100;
CREATE VIEW w_renamed AS SELECT id, v, fence AS f FROM w;
UPDATE w_view SET v = 10 WHERE id = 20;
\echo sqlstate: :SQLSTATE
INSERT INTO w_view VALUES (30, 0);
\echo sqlstate: :SQLSTATE
UPDATE w_renamed SET v = 10, f = 31 WHERE id = 20;
\echo sqlstate: :SQLSTATE
UPDATE w_renamed SET v = 10, f = 33 WHERE id = 20;
BEGIN;
SET LOCAL fencing.token = 34;
UPDATE w_view SET v = 11 WHERE id = 20;
DELETE FROM w_view WHERE id = 20;
COMMIT;
SELECT count(*) AS row_20 FROM w WHERE id = 20;

-- ON DELETE CASCADE, ON UPDATE CASCADE and SET NULL into a protected table
-- are writes like any other: they need fencing.token
CREATE TABLE account (id int PRIMARY KEY);
CREATE TABLE account_line (id int PRIMARY KEY,
	account int REFERENCES account ON DELETE CASCADE ON UPDATE CASCADE, fence bigint);
CREATE TABLE account_note (id int PRIMARY KEY,
	account int REFERENCES account ON DELETE SET NULL, fence bigint);
INSERT INTO account VALUES (1), (2), (3);
INSERT INTO account_line VALUES (1, 1, 10), (2, 2, 10), (3, 3, 10);
INSERT INTO account_note VALUES (1, 3, 10);
SELECT fencing.protect('account_line');
SELECT fencing.protect('account_note');
DELETE FROM account WHERE id = 1;
\echo sqlstate: :SQLSTATE
UPDATE account SET id = 20 WHERE id = 2;
\echo sqlstate: :SQLSTATE
BEGIN;
SET LOCAL fencing.token = 9;
DELETE FROM account WHERE id = 1;
\echo sqlstate: :SQLSTATE
UPDATE account SET id = 20 WHERE id = 2;
\echo sqlstate: :SQLSTATE
SET LOCAL fencing.token = 11;
DELETE FROM account WHERE id = 1;
UPDATE account SET id = 20 WHERE id = 2;
DELETE FROM account WHERE id = 3;
COMMIT;
SELECT * FROM account_line ORDER BY id;
SELECT * FROM account_note ORDER BY id;

-- a row written by a trigger on another table
CREATE TABLE w_event (id int, target int);
CREATE FUNCTION w_event_apply() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	UPDATE w SET v = v + 1 WHERE id = NEW.target;
	RETURN NEW;
END $$;
CREATE TRIGGER w_event_apply AFTER INSERT ON w_event
	FOR EACH ROW EXECUTE FUNCTION w_event_apply();
INSERT INTO w_event VALUES (1, 1);
\echo sqlstate: :SQLSTATE
BEGIN;
SET LOCAL fencing.token = 5;
INSERT INTO w_event VALUES (1, 1);
\echo sqlstate: :SQLSTATE
SET LOCAL fencing.token = 40;
INSERT INTO w_event VALUES (1, 1);
COMMIT;
SELECT id, v, fence FROM w WHERE id = 1;

------------------------------------------------------------------------
-- F7: a fence column with a DEFAULT or identity cannot stand in for a token
------------------------------------------------------------------------
CREATE TABLE dflt (id int, fence bigint NOT NULL DEFAULT 0);
SELECT fencing.protect('dflt');
\echo sqlstate: :SQLSTATE
SELECT count(*) AS dflt_triggers FROM pg_trigger WHERE tgrelid = 'dflt'::regclass;
CREATE TABLE ident (id int, fence bigint GENERATED BY DEFAULT AS IDENTITY);
SELECT fencing.protect('ident');
\echo sqlstate: :SQLSTATE
CREATE TABLE ident_always (id int, fence bigint GENERATED ALWAYS AS IDENTITY);
SELECT fencing.protect('ident_always');
\echo sqlstate: :SQLSTATE
-- ALTER TABLE refuses to give a protected table's fence column a default or
-- an identity (fence_ddl.sql).  A trigger installed by hand on a column that
-- has one makes every write fail, naming the trigger and the table.
CREATE TABLE later (id int, fence bigint);
SELECT fencing.protect('later');
INSERT INTO later VALUES (1, 10);
SELECT fencing.unprotect('later');
ALTER TABLE later ALTER COLUMN fence SET DEFAULT 0;
CREATE TRIGGER fencing_reject_stale BEFORE INSERT OR UPDATE OR DELETE ON later
	FOR EACH ROW EXECUTE FUNCTION fencing.reject_stale('fence', 'error');
INSERT INTO later (id) VALUES (2);
\echo sqlstate: :SQLSTATE
INSERT INTO later DEFAULT VALUES;
\echo sqlstate: :SQLSTATE
UPDATE later SET fence = 11;
\echo sqlstate: :SQLSTATE
ALTER TABLE later ALTER COLUMN fence DROP DEFAULT;
INSERT INTO later DEFAULT VALUES;
\echo sqlstate: :SQLSTATE
BEGIN;
SET LOCAL fencing.token = 12;
INSERT INTO later DEFAULT VALUES;
INSERT INTO later VALUES (3, DEFAULT);
COMMIT;
SELECT * FROM later ORDER BY id NULLS FIRST;
SELECT fencing.unprotect('later');
ALTER TABLE later ALTER COLUMN fence SET NOT NULL;
ALTER TABLE later ALTER COLUMN fence ADD GENERATED BY DEFAULT AS IDENTITY;
CREATE TRIGGER fencing_reject_stale BEFORE INSERT OR UPDATE OR DELETE ON later
	FOR EACH ROW EXECUTE FUNCTION fencing.reject_stale('fence', 'error');
INSERT INTO later (id) VALUES (4);
\echo sqlstate: :SQLSTATE
INSERT INTO later (id, fence) OVERRIDING SYSTEM VALUE VALUES (4, 13);
\echo sqlstate: :SQLSTATE
INSERT INTO later (id, fence) OVERRIDING USER VALUE VALUES (4, 13);
\echo sqlstate: :SQLSTATE
ALTER TABLE later ALTER COLUMN fence DROP IDENTITY;
INSERT INTO later (id, fence) VALUES (4, 13);
SELECT count(*) AS later_rows FROM later;
-- routed INSERTs use the partitioned table's default, even one set with ONLY
CREATE TABLE pdflt (id int, fence bigint) PARTITION BY LIST (id);
CREATE TABLE pdflt_1 PARTITION OF pdflt FOR VALUES IN (1);
CREATE TABLE pdflt_2 (fence bigint, id int);
ALTER TABLE pdflt ATTACH PARTITION pdflt_2 FOR VALUES IN (2);
SELECT fencing.protect('pdflt');
INSERT INTO pdflt VALUES (1, 10), (2, 10);
ALTER TABLE ONLY pdflt ALTER COLUMN fence SET DEFAULT 0;
\echo sqlstate: :SQLSTATE
SELECT fencing.unprotect('pdflt');
ALTER TABLE ONLY pdflt ALTER COLUMN fence SET DEFAULT 0;
CREATE TRIGGER fencing_reject_stale BEFORE INSERT OR UPDATE OR DELETE ON pdflt
	FOR EACH ROW EXECUTE FUNCTION fencing.reject_stale('fence', 'error');
INSERT INTO pdflt (id) VALUES (1);
\echo sqlstate: :SQLSTATE
INSERT INTO pdflt_2 (id) VALUES (2);
\echo sqlstate: :SQLSTATE
UPDATE pdflt SET fence = 11 WHERE id = 2;
\echo sqlstate: :SQLSTATE
SELECT fencing.protect('pdflt');
\echo sqlstate: :SQLSTATE
ALTER TABLE ONLY pdflt ALTER COLUMN fence DROP DEFAULT;
-- a partition's own default serves INSERTs into the partition
DROP TRIGGER fencing_reject_stale ON pdflt;
ALTER TABLE pdflt_1 ALTER COLUMN fence SET DEFAULT 0;
CREATE TRIGGER fencing_reject_stale BEFORE INSERT OR UPDATE OR DELETE ON pdflt
	FOR EACH ROW EXECUTE FUNCTION fencing.reject_stale('fence', 'error');
INSERT INTO pdflt_1 (id) VALUES (1);
\echo sqlstate: :SQLSTATE
ALTER TABLE pdflt_1 ALTER COLUMN fence DROP DEFAULT;
UPDATE pdflt SET fence = 11;
SELECT tableoid::regclass, * FROM pdflt ORDER BY id;

------------------------------------------------------------------------
-- Partitions: different column orders, moves between partitions, and a
-- failed UPDATE rolled back to a savepoint
------------------------------------------------------------------------
CREATE TABLE moves (id int, v int, note text, fence bigint) PARTITION BY RANGE (id);
CREATE TABLE moves_a (fence bigint, note text, v int, id int);
ALTER TABLE moves ATTACH PARTITION moves_a FOR VALUES FROM (0) TO (100);
CREATE TABLE moves_b (junk int, id int, v int, note text, fence bigint);
ALTER TABLE moves_b DROP COLUMN junk;
ALTER TABLE moves ATTACH PARTITION moves_b FOR VALUES FROM (100) TO (200);
ALTER TABLE moves ADD CONSTRAINT moves_v_small CHECK (v < 100);
SELECT fencing.protect('moves');
INSERT INTO moves VALUES (1, 0, 'a', 10), (2, 0, 'b', 10), (3, 0, 'd', 10), (101, 0, 'c', 10);
-- the trigger accepts the UPDATE, the CHECK then fails; psql rolls back to
-- its savepoint, and a DELETE of the same row is checked on its own
BEGIN;
UPDATE moves SET v = 500, fence = 20 WHERE id = 1;
\echo sqlstate: :SQLSTATE
DELETE FROM moves WHERE id = 1;
\echo sqlstate: :SQLSTATE
SET LOCAL fencing.token = 20;
UPDATE moves SET v = 500 WHERE id = 1;
\echo sqlstate: :SQLSTATE
SET LOCAL fencing.token = 5;
DELETE FROM moves WHERE id = 1;
\echo sqlstate: :SQLSTATE
COMMIT;
-- (psql's own statements between the two advance the command id; a
-- function called by the DELETE itself does not: its UPDATE runs in a
-- subtransaction that is rolled back, and then the DELETE's trigger sees
-- the same row and command id that the UPDATE's trigger saw)
CREATE FUNCTION moves_try_update(target int) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
	BEGIN
		UPDATE moves SET v = 500, fence = 20 WHERE id = target;
	EXCEPTION WHEN check_violation THEN
		NULL;
	END;
	RETURN true;
END $$;
DELETE FROM moves WHERE id = 2 AND moves_try_update(2);
\echo sqlstate: :SQLSTATE
-- (with a stale fencing.token, the function's UPDATE carries two tokens)
BEGIN;
SET LOCAL fencing.token = 5;
DELETE FROM moves WHERE id = 3 AND moves_try_update(3);
\echo sqlstate: :SQLSTATE
COMMIT;
-- the same through a PL/pgSQL exception block
DO $$
BEGIN
	BEGIN
		UPDATE moves SET v = 500, fence = 20 WHERE id = 2;
	EXCEPTION WHEN check_violation THEN
		NULL;
	END;
	DELETE FROM moves WHERE id = 2;
END $$;
\echo sqlstate: :SQLSTATE
SELECT tableoid::regclass, id, v, note, fence FROM moves ORDER BY id, note;
-- moves between partitions are checked once, as an UPDATE, with the fence
-- column or with fencing.token
UPDATE moves SET id = 150, fence = 9 WHERE id = 1;
\echo sqlstate: :SQLSTATE
UPDATE moves SET id = 150, fence = 20 WHERE id = 1;
BEGIN;
SET LOCAL fencing.token = 9;
UPDATE moves SET id = 50 WHERE id = 101;
\echo sqlstate: :SQLSTATE
SET LOCAL fencing.token = 21;
UPDATE moves SET id = 50 WHERE id = 101;
UPDATE moves SET id = 2 WHERE id = 150;
UPDATE moves SET id = 102 WHERE id = 2;
DELETE FROM moves WHERE id = 3;
COMMIT;
SELECT tableoid::regclass, id, v, note, fence FROM moves ORDER BY id, note;
-- MERGE into the partitioned table, each partition in its own order
BEGIN;
SET LOCAL fencing.token = 22;
MERGE INTO moves USING (VALUES (50, 'x'), (102, 'y'), (3, 'z')) AS s(id, note) ON moves.id = s.id
	WHEN MATCHED THEN UPDATE SET note = s.note
	WHEN NOT MATCHED THEN INSERT (id, v, note) VALUES (s.id, 0, s.note);
COMMIT;
SELECT tableoid::regclass, id, v, note, fence FROM moves ORDER BY id, note;
\set ON_ERROR_ROLLBACK off

------------------------------------------------------------------------
-- Wording not shown above
------------------------------------------------------------------------
UPDATE w SET v = 0, fence = -3 WHERE id = 1;
SELECT fencing.unprotect('pdflt');
ALTER TABLE ONLY pdflt ALTER COLUMN fence SET DEFAULT 0;
SELECT fencing.protect('pdflt_1');
ALTER TABLE ONLY pdflt ALTER COLUMN fence DROP DEFAULT;
