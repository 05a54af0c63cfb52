--
-- Rows that leave a protected partition (DESIGN.md F3, F7), tried by an
-- ordinary role with write rights.  An UPDATE that moves a row to another
-- partition deletes it from the source partition and inserts it through
-- the partitioned table.  Without fencing.token, the DELETE half passes
-- only as the DELETE of that very move, once the UPDATE really ran, and
-- only when the move's own INSERT lands in a partition fenced with the
-- same column; every other DELETE and INSERT is checked on its own,
-- whenever in the statement it runs (a writable CTE the main query does
-- not read runs after the main query).
--
-- Tokens come from fencing.next_token(); rejections are shown tersely.
--
CREATE SCHEMA fence_moves;
SET search_path = fence_moves, public;
SELECT fencing.next_token() AS token \gset

-- the parent is not protected, sp_live and sp_fenced are, sp_archive not
CREATE TABLE sp (id int, amount int, fence bigint) PARTITION BY LIST (id);
CREATE TABLE sp_live PARTITION OF sp FOR VALUES IN (1, 3);
CREATE TABLE sp_archive PARTITION OF sp FOR VALUES IN (2);
CREATE TABLE sp_fenced PARTITION OF sp FOR VALUES IN (4);
SELECT fencing.protect('sp_live');
SELECT fencing.protect('sp_fenced');
-- the owner's own trigger, named to fire after the fence check as
-- PostgreSQL's documentation recommends for it
CREATE TRIGGER zz_suppress BEFORE UPDATE ON sp_live
	FOR EACH ROW EXECUTE FUNCTION suppress_redundant_updates_trigger();
BEGIN;
SET LOCAL fencing.token = :token;
INSERT INTO sp VALUES (1, 100), (3, 300);
COMMIT;

-- puts the two rows back in sp_live, with the current token
CREATE FUNCTION reset_rows() RETURNS void LANGUAGE plpgsql SECURITY DEFINER
SET search_path = fence_moves, pg_temp AS $$
BEGIN
	PERFORM set_config('fencing.token', fencing.latest_token()::text, true);
	DELETE FROM sp;
	INSERT INTO sp VALUES (1, 100), (3, 300);
END $$;

CREATE ROLE regress_fence_mover;
GRANT USAGE ON SCHEMA fence_moves TO regress_fence_mover;
GRANT SELECT, INSERT, UPDATE, DELETE ON sp, sp_live, sp_archive, sp_fenced
	TO regress_fence_mover;
-- the unprotected partition lets the role add triggers
GRANT TRIGGER ON sp_archive TO regress_fence_mover;
SET ROLE regress_fence_mover;
-- the intruder's own protected table, a decoy for the move's INSERT half
CREATE TEMP TABLE decoy (id int, amount int, fence bigint);
SELECT fencing.protect('decoy');

CREATE TEMP VIEW placement AS
	SELECT tableoid::regclass AS part, id, amount FROM sp ORDER BY id;
\set VERBOSITY terse

-- Each attempt starts from rows 1 and 3 in sp_live, runs in a transaction
-- of its own and is followed by where the rows are: a bypass shows row 1
-- in sp_archive, or gone.

-- a writable CTE that the main query does not read moves a row out
SELECT reset_rows();
WITH m AS (UPDATE sp SET id = 2, fence = fence WHERE id = 1 RETURNING *)
SELECT 1 AS one;
SELECT * FROM placement;
-- the same, with the CTE read
SELECT reset_rows();
WITH m AS (UPDATE sp SET id = 2, fence = fence WHERE id = 1 RETURNING *)
SELECT count(*) FROM m;
SELECT * FROM placement;
-- two unread CTEs, the move after an update that stays
SELECT reset_rows();
WITH s AS (UPDATE sp SET amount = amount, fence = fence WHERE id = 3 RETURNING *),
	 m AS (UPDATE sp SET id = 2, fence = fence WHERE id = 1 RETURNING *)
SELECT 1 AS one;
SELECT * FROM placement;

-- the same UPDATE moves a row of the unprotected partition into a fenced
-- one, with the fence the row moving out has: that row's INSERT is not
-- the INSERT half of the other's move (sp_live's rows are updated first)
SELECT reset_rows();
INSERT INTO sp SELECT 2, 200, fence FROM sp WHERE id = 1;
UPDATE sp SET id = CASE id WHEN 1 THEN 2 ELSE 4 END, fence = fence
WHERE id IN (1, 2);
SELECT * FROM placement;
SELECT reset_rows();
INSERT INTO sp SELECT 2, 200, fence FROM sp WHERE id = 1;
WITH m AS (UPDATE sp SET id = CASE id WHEN 1 THEN 2 ELSE 4 END, fence = fence
		   WHERE id IN (1, 2) RETURNING *)
SELECT 1 AS one;
SELECT * FROM placement;

-- a decoy INSERT into another protected table, fed by the moving UPDATE,
-- with the fence the UPDATE gave the row
SELECT reset_rows();
WITH m AS (UPDATE sp SET id = 2, fence = fence WHERE id = 1 RETURNING *)
INSERT INTO decoy SELECT id, amount, fence FROM m;
SELECT * FROM placement;
-- the decoy is the partitioned table itself, into the fenced partition
SELECT reset_rows();
WITH m AS (UPDATE sp SET id = 2, fence = fence WHERE id = 1 RETURNING *)
INSERT INTO sp SELECT 4, amount, fence FROM m;
SELECT * FROM placement;
-- the decoy runs after the main query
SELECT reset_rows();
WITH m AS (UPDATE sp SET id = 2, fence = fence WHERE id = 1 RETURNING *),
	 d AS (INSERT INTO decoy SELECT id, amount, fence FROM m RETURNING *)
SELECT 1 AS one;
SELECT * FROM placement;

-- a subtransaction that rolls back while the row moves, inside a trigger
-- of the destination (the role's own, on the unprotected partition) or of
-- the source (the owner's, after the fence check), does not undo the move
CREATE FUNCTION pg_temp.swallow_error() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	BEGIN
		PERFORM 1 / 0;
	EXCEPTION WHEN division_by_zero THEN
		NULL;
	END;
	RETURN NEW;
END $$;
CREATE TRIGGER swallow BEFORE INSERT ON sp_archive
	FOR EACH ROW EXECUTE FUNCTION pg_temp.swallow_error();
SELECT reset_rows();
UPDATE sp SET id = 2, fence = fence WHERE id = 1;
SELECT * FROM placement;
RESET ROLE;
DROP TRIGGER swallow ON sp_archive;
CREATE FUNCTION swallow_error() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	BEGIN
		PERFORM 1 / 0;
	EXCEPTION WHEN division_by_zero THEN
		NULL;
	END;
	RETURN CASE TG_OP WHEN 'DELETE' THEN OLD ELSE NEW END;
END $$;
CREATE TRIGGER zz_swallow BEFORE UPDATE OR DELETE ON sp_live
	FOR EACH ROW EXECUTE FUNCTION swallow_error();
SET ROLE regress_fence_mover;
SELECT reset_rows();
UPDATE sp SET id = 2, fence = fence WHERE id = 1;
SELECT * FROM placement;
-- ... nor, when the row stays fenced, does it make the move fail
UPDATE sp SET id = 4, fence = fence WHERE id = 3;
SELECT * FROM placement;
RESET ROLE;
DROP TRIGGER zz_swallow ON sp_live;
SET ROLE regress_fence_mover;

-- a no-op UPDATE passes the fence and is cancelled by the later trigger;
-- a DELETE of the same row in the same command, run after it (it reads
-- the UPDATE's result), is not the DELETE half of a move: neither unread
-- (run after the main query) ...
SELECT reset_rows();
WITH u AS (UPDATE sp SET fence = fence WHERE id = 1 RETURNING *),
	 d AS (DELETE FROM sp WHERE id = 1 AND (SELECT count(*) FROM u) = 0 RETURNING *)
SELECT 1 AS one;
SELECT * FROM placement;
-- ... nor read by the main query, nor claimed by a decoy INSERT there
SELECT reset_rows();
WITH u AS (UPDATE sp SET fence = fence WHERE id = 1 RETURNING *),
	 d AS (DELETE FROM sp WHERE id = 1 AND (SELECT count(*) FROM u) = 0 RETURNING *)
SELECT count(*) FROM d;
SELECT * FROM placement;
SELECT reset_rows();
WITH u AS (UPDATE sp SET fence = fence WHERE id = 1 RETURNING *),
	 d AS (DELETE FROM sp WHERE id = 1 AND (SELECT count(*) FROM u) = 0 RETURNING *)
INSERT INTO decoy SELECT id, amount, fence FROM d;
SELECT * FROM placement;
-- ... nor with the UPDATE read first by a join
SELECT reset_rows();
WITH u AS (UPDATE sp SET fence = fence WHERE id = 1 RETURNING *),
	 d AS (DELETE FROM sp WHERE id = 1 RETURNING *)
SELECT count(*) FROM u, d;
SELECT * FROM placement;
-- ... nor through the partition itself
SELECT reset_rows();
WITH u AS (UPDATE sp_live SET fence = fence WHERE id = 1 RETURNING *),
	 d AS (DELETE FROM sp_live WHERE id = 1 AND (SELECT count(*) FROM u) = 0 RETURNING *)
SELECT 1 AS one;
SELECT * FROM placement;

-- what stays allowed: a move between fenced partitions, read or not ...
SELECT reset_rows();
WITH m AS (UPDATE sp SET id = 4, fence = fence WHERE id = 3 RETURNING *)
SELECT 1 AS one;
WITH m AS (UPDATE sp SET id = 3, fence = fence WHERE id = 4 RETURNING *)
SELECT count(*) FROM m;
WITH m AS (UPDATE sp SET id = 4, fence = fence WHERE id = 3 RETURNING *)
INSERT INTO decoy SELECT id, amount, fence FROM m;
SELECT * FROM placement;
-- ... and, with the current token, a move out of the fence and a DELETE
SELECT reset_rows();
BEGIN;
SELECT fencing.next_token() AS token \gset
SET LOCAL fencing.token = :token;
WITH m AS (UPDATE sp SET id = 2 WHERE id = 1 RETURNING *)
SELECT 1 AS one;
WITH d AS (DELETE FROM sp WHERE id = 3 RETURNING *)
SELECT 1 AS one;
COMMIT;
SELECT * FROM placement;
\set VERBOSITY default

RESET ROLE;
DROP TABLE IF EXISTS pg_temp.decoy;
DROP OWNED BY regress_fence_mover;
DROP ROLE regress_fence_mover;
SET client_min_messages = warning;
DROP SCHEMA fence_moves CASCADE;
RESET client_min_messages;
