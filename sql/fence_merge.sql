--
-- MERGE, wherever it runs (DESIGN.md F7): PostgreSQL tells a row trigger
-- fired by a MERGE the union of the columns of all its UPDATE actions, so
-- without fencing.token an action that leaves the fence alone looks like
-- one that assigns it; every UPDATE action of a MERGE needs the token.  A
-- statement that a MERGE runs through a function is not part of it, and
-- follows the rules of its own kind.  From PostgreSQL 17 on, a MERGE can
-- be a writable CTE, read by the main query or not
-- (expected/fence_merge.out); PostgreSQL 15 stops before that part
-- (fence_merge_1.out).
--
-- Tried by an ordinary role with write rights; rejections are shown
-- tersely, and each attempt is followed by the rows.
--
CREATE SCHEMA fence_merge;
SET search_path = fence_merge, public;
CREATE TABLE ledger (id int PRIMARY KEY, amount int, fence bigint);
SELECT fencing.protect('ledger');
SELECT fencing.next_token() AS token \gset
BEGIN;
SET LOCAL fencing.token = :token;
INSERT INTO ledger VALUES (1, 100), (2, 200);
COMMIT;
CREATE TABLE other (id int PRIMARY KEY, note text);
INSERT INTO other VALUES (1, 'a');
-- writes the row's own fence back, as a holder that read it would
CREATE FUNCTION touch(i int) RETURNS int LANGUAGE sql AS
  $$ UPDATE fence_merge.ledger SET amount = amount + 1, fence = fence WHERE id = i RETURNING id $$;

CREATE ROLE regress_fence_merger;
GRANT USAGE ON SCHEMA fence_merge TO regress_fence_merger;
GRANT SELECT, INSERT, UPDATE, DELETE ON ledger, other TO regress_fence_merger;
SET ROLE regress_fence_merger;
CREATE TEMP VIEW rows AS
	SELECT id, amount, fence = :token AS fence_is_token FROM ledger ORDER BY id;
\set VERBOSITY terse

-- the action that fires leaves the fence alone; another assigns it
MERGE INTO ledger l USING (VALUES (1)) AS s(id) ON l.id = s.id
	WHEN MATCHED AND l.amount > 0 THEN UPDATE SET amount = 0
	WHEN MATCHED THEN UPDATE SET fence = l.fence;
-- a function called by a MERGE runs an UPDATE of its own, which assigns
-- the fence: judged as that UPDATE
MERGE INTO other o USING (VALUES (1)) AS s(id) ON o.id = s.id
	WHEN MATCHED THEN UPDATE SET note = 'touched ' || fence_merge.touch(2);
SELECT * FROM rows;

SELECT current_setting('server_version_num')::int >= 170000 AS merge_in_with \gset
\if :merge_in_with
\else
\quit
\endif

-- a MERGE in a writable CTE that the main query reads ...
WITH m AS (MERGE INTO ledger l USING (VALUES (1)) AS s(id) ON l.id = s.id
	WHEN MATCHED AND l.amount > 0 THEN UPDATE SET amount = 0
	WHEN MATCHED THEN UPDATE SET fence = l.fence
	RETURNING l.id)
SELECT count(*) FROM m;
-- ... or does not read (it runs after the main query)
WITH m AS (MERGE INTO ledger l USING (VALUES (1)) AS s(id) ON l.id = s.id
	WHEN MATCHED AND l.amount > 0 THEN UPDATE SET amount = 0
	WHEN MATCHED THEN UPDATE SET fence = l.fence
	RETURNING l.id)
SELECT 1 AS one;
-- beside a plain UPDATE of the same table, in either order
WITH u AS (UPDATE ledger SET amount = amount, fence = fence WHERE id = 2 RETURNING id),
	 m AS (MERGE INTO ledger l USING (VALUES (1)) AS s(id) ON l.id = s.id
	WHEN MATCHED AND l.amount > 0 THEN UPDATE SET amount = 0
	WHEN MATCHED THEN UPDATE SET fence = l.fence
	RETURNING l.id)
SELECT 1 AS one;
WITH m AS (MERGE INTO ledger l USING (VALUES (1)) AS s(id) ON l.id = s.id
	WHEN MATCHED AND l.amount > 0 THEN UPDATE SET amount = 0
	WHEN MATCHED THEN UPDATE SET fence = l.fence
	RETURNING l.id)
UPDATE ledger SET amount = amount, fence = fence WHERE id = 2;
-- a MERGE that leaves the fence column alone in every action
WITH m AS (MERGE INTO ledger l USING (VALUES (1)) AS s(id) ON l.id = s.id
	WHEN MATCHED THEN UPDATE SET amount = 0
	RETURNING l.id)
SELECT 1 AS one;
-- a MERGE CTE into another table beside an UPDATE that assigns the fence:
-- the UPDATE follows the UPDATE rules
WITH m AS (MERGE INTO other o USING (VALUES (1)) AS s(id) ON o.id = s.id
	WHEN MATCHED THEN UPDATE SET note = 'b'
	RETURNING o.id)
UPDATE ledger SET amount = amount + 1, fence = fence WHERE id = 2;
SELECT * FROM rows;
-- with the token, every action goes through, checked against it
BEGIN;
SELECT fencing.next_token() AS token \gset
SET LOCAL fencing.token = :token;
WITH m AS (MERGE INTO ledger l USING (VALUES (1), (2), (3)) AS s(id) ON l.id = s.id
	WHEN MATCHED AND l.id = 1 THEN UPDATE SET amount = 0
	WHEN MATCHED THEN DELETE
	WHEN NOT MATCHED THEN INSERT VALUES (s.id, 300)
	RETURNING l.id)
SELECT 1 AS one;
COMMIT;
SELECT id, amount, fence = :token AS fence_is_token FROM ledger ORDER BY id;
\set VERBOSITY default

RESET ROLE;
DROP VIEW pg_temp.rows;
DROP OWNED BY regress_fence_merger;
DROP ROLE regress_fence_merger;
SET client_min_messages = warning;
DROP SCHEMA fence_merge CASCADE;
RESET client_min_messages;
