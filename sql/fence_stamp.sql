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

-- Where the trigger would not fire, the statement stamps nothing either:
-- a disabled fence trigger, a REPLICA one, session_replication_role =
-- replica, a partition whose trigger is disabled.
CREATE TABLE off (id int PRIMARY KEY, fence bigint);
SELECT fencing.protect('off');
ALTER TABLE off DISABLE TRIGGER fencing_reject_stale;
EXPLAIN (VERBOSE, COSTS OFF) INSERT INTO off (id) VALUES (1);
ALTER TABLE off ENABLE REPLICA TRIGGER fencing_reject_stale;
EXPLAIN (VERBOSE, COSTS OFF) INSERT INTO off (id) VALUES (1);
ALTER TABLE off ENABLE TRIGGER fencing_reject_stale;
BEGIN;
SET LOCAL session_replication_role = replica;
EXPLAIN (VERBOSE, COSTS OFF) INSERT INTO off (id) VALUES (1);
SET LOCAL fencing.token = :'token';
INSERT INTO off (id) VALUES (1) RETURNING fence IS NULL AS not_stamped;
ROLLBACK;
CREATE TABLE offpart (id int NOT NULL, fence bigint) PARTITION BY LIST (id);
CREATE TABLE offpart_1 PARTITION OF offpart FOR VALUES IN (1);
CREATE TABLE offpart_2 PARTITION OF offpart FOR VALUES IN (2);
SELECT fencing.protect('offpart');
ALTER TABLE offpart_2 DISABLE TRIGGER fencing_reject_stale;
EXPLAIN (VERBOSE, COSTS OFF) INSERT INTO offpart (id) VALUES (1);
BEGIN;
SET LOCAL fencing.token = :'token';
INSERT INTO offpart (id) VALUES (1), (2) RETURNING id, fence IS NULL AS not_stamped;
ROLLBACK;

-- What runs between building the row and the fence trigger sees the row
-- as the trigger's stamp leaves it: another BEFORE ROW trigger that fires
-- first (on the table or on a partition) and rules keep the trigger's
-- stamping.
CREATE TABLE guarded (id int PRIMARY KEY, fence bigint);
SELECT fencing.protect('guarded');
CREATE FUNCTION no_client_fence() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF NEW.fence IS NOT NULL THEN
		RAISE EXCEPTION 'clients must not set fence';
	END IF;
	RETURN NEW;
END
$$;
CREATE TRIGGER a_guard BEFORE INSERT ON guarded FOR EACH ROW EXECUTE FUNCTION no_client_fence();
EXPLAIN (VERBOSE, COSTS OFF) INSERT INTO guarded (id) VALUES (1);
BEGIN;
SET LOCAL fencing.token = :'token';
INSERT INTO guarded (id) VALUES (1) RETURNING fence = :'token' AS stamped;
ROLLBACK;
-- a trigger that fires first and unsets the token: the write carries none (F2)
CREATE TABLE unset (id int PRIMARY KEY, fence bigint);
SELECT fencing.protect('unset');
CREATE FUNCTION unset_token() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	PERFORM set_config('fencing.token', '', true);
	RETURN NEW;
END
$$;
CREATE TRIGGER a_unset BEFORE INSERT ON unset FOR EACH ROW EXECUTE FUNCTION unset_token();
BEGIN;
SET LOCAL fencing.token = :'token';
\set VERBOSITY sqlstate
INSERT INTO unset (id) VALUES (1);
\set VERBOSITY default
ROLLBACK;
-- a partition's own trigger
CREATE TABLE guardpart (id int NOT NULL, fence bigint) PARTITION BY LIST (id);
CREATE TABLE guardpart_1 PARTITION OF guardpart FOR VALUES IN (1);
SELECT fencing.protect('guardpart');
CREATE TRIGGER a_guard BEFORE INSERT ON guardpart_1 FOR EACH ROW EXECUTE FUNCTION no_client_fence();
EXPLAIN (VERBOSE, COSTS OFF) INSERT INTO guardpart (id) VALUES (1);
-- a rule sees NEW.fence as the statement gives it
CREATE TABLE ruled (id int PRIMARY KEY, fence bigint);
SELECT fencing.protect('ruled');
CREATE TABLE ruled_log (id int, fence bigint);
CREATE RULE log_fence AS ON INSERT TO ruled DO ALSO INSERT INTO ruled_log VALUES (NEW.id, NEW.fence);
BEGIN;
SET LOCAL fencing.token = :'token';
INSERT INTO ruled (id) VALUES (1);
SELECT r.fence = :'token' AS row_stamped, l.fence IS NULL AS rule_saw_null
FROM ruled r JOIN ruled_log l USING (id);
ROLLBACK;

-- Rows routed by the fence column are routed by what the trigger's stamp
-- leaves (the trigger fires after routing): a partition key on it keeps
-- the trigger's stamping, and its error.
CREATE TABLE by_fence (id int, fence bigint) PARTITION BY RANGE (fence);
CREATE TABLE by_fence_all PARTITION OF by_fence FOR VALUES FROM (MINVALUE) TO (MAXVALUE);
SELECT fencing.protect('by_fence');
EXPLAIN (VERBOSE, COSTS OFF) INSERT INTO by_fence (id) VALUES (1);
BEGIN;
SET LOCAL fencing.token = :'token';
\set VERBOSITY sqlstate
INSERT INTO by_fence (id) VALUES (1);
\set VERBOSITY default
ROLLBACK;
-- A volatile call among the statement's values could change the token
-- after the call read it: the trigger stamps what counts when it fires.
EXPLAIN (VERBOSE, COSTS OFF) INSERT INTO acct (id, balance) VALUES (50, random()::bigint);
BEGIN;
SET LOCAL fencing.token = :'token';
\set VERBOSITY sqlstate
INSERT INTO acct (id, balance) VALUES (50, length(set_config('fencing.token', '', true)));
\set VERBOSITY default
ROLLBACK;
BEGIN;
SET LOCAL fencing.token = :'token';
INSERT INTO acct (id, balance) VALUES (51, length(set_config('fencing.token', :'newer', true)))
	RETURNING fence = :'newer' AS stamped_with_the_later;
ROLLBACK;
-- A column default or a domain check is evaluated with the row, after a
-- call that comes before it in the column order: one that changes the
-- token would leave the row with the token the call read, where the
-- trigger stamps the one in force when it fires.  Such tables keep the
-- trigger's stamping (a serial's nextval() does not count): leaving the
-- fence column out is then judged as giving it DEFAULT.
CREATE TABLE late_unset (id int, fence bigint,
	note text DEFAULT set_config('fencing.token', '', true));
SELECT fencing.protect('late_unset');
CREATE TABLE late_newer (id int, fence bigint,
	note text DEFAULT set_config('fencing.token', :'newer', true));
SELECT fencing.protect('late_newer');
CREATE DOMAIN unsetting_text AS text CHECK (set_config('fencing.token', '', true) IS NOT NULL);
CREATE TABLE late_domain (id int, fence bigint, note unsetting_text DEFAULT 'x');
SELECT fencing.protect('late_domain');
EXPLAIN (VERBOSE, COSTS OFF) INSERT INTO late_unset (id) VALUES (1);
EXPLAIN (VERBOSE, COSTS OFF) INSERT INTO late_domain (id) VALUES (1);
BEGIN;
SET LOCAL fencing.token = :'token';
\set VERBOSITY sqlstate
INSERT INTO late_unset (id) VALUES (1);
\set VERBOSITY default
ROLLBACK;
BEGIN;
SET LOCAL fencing.token = :'token';
\set VERBOSITY sqlstate
INSERT INTO late_unset (id, fence) VALUES (1, DEFAULT);
\set VERBOSITY default
ROLLBACK;
BEGIN;
SET LOCAL fencing.token = :'token';
INSERT INTO late_newer (id) VALUES (2) RETURNING fence = :'newer' AS stamped_with_the_later;
INSERT INTO late_newer (id, fence) VALUES (3, DEFAULT) RETURNING fence = :'newer' AS stamped_with_the_later;
ROLLBACK;
BEGIN;
SET LOCAL fencing.token = :'token';
\set VERBOSITY sqlstate
INSERT INTO late_domain (id) VALUES (4);
\set VERBOSITY default
ROLLBACK;
BEGIN;
SET LOCAL fencing.token = :'token';
\set VERBOSITY sqlstate
INSERT INTO late_domain (id, fence) VALUES (4, DEFAULT);
\set VERBOSITY default
ROLLBACK;

-- A volatile call in a subquery among the statement's values runs with
-- the row too, after a call that comes before it in the column order:
-- the same as a column default, the trigger must stamp what counts when
-- it fires (leaving the column out is judged as giving it DEFAULT).
CREATE TABLE late_sublink (id int, fence bigint, note text);
SELECT fencing.protect('late_sublink');
BEGIN;
SET LOCAL fencing.token = :'token';
\set VERBOSITY sqlstate
INSERT INTO late_sublink (id, note) VALUES (1, (SELECT set_config('fencing.token', '', true)));
\set VERBOSITY default
ROLLBACK;
BEGIN;
SET LOCAL fencing.token = :'token';
\set VERBOSITY sqlstate
INSERT INTO late_sublink (id, fence, note) VALUES (1, DEFAULT, (SELECT set_config('fencing.token', '', true)));
\set VERBOSITY default
ROLLBACK;

-- A column of an array of a domain type runs the domain's check on each
-- element, with the row, as a domain column does.
CREATE TABLE late_domain_array (id int, fence bigint, notes unsetting_text[]);
SELECT fencing.protect('late_domain_array');
BEGIN;
SET LOCAL fencing.token = :'token';
\set VERBOSITY sqlstate
INSERT INTO late_domain_array (id, notes) VALUES (1, ARRAY['x']);
\set VERBOSITY default
ROLLBACK;
BEGIN;
SET LOCAL fencing.token = :'token';
\set VERBOSITY sqlstate
INSERT INTO late_domain_array (id, fence, notes) VALUES (1, DEFAULT, ARRAY['x']);
\set VERBOSITY default
ROLLBACK;

-- A fence trigger with a WHEN condition may not fire for the row the call
-- builds (here it would skip every stamped row): the trigger stamps.
CREATE TABLE when_null (id int, fence bigint);
CREATE TRIGGER fencing_reject_stale BEFORE INSERT ON when_null FOR EACH ROW
	WHEN (NEW.fence IS NULL) EXECUTE FUNCTION fencing.reject_stale('fence', 'error');
EXPLAIN (VERBOSE, COSTS OFF) INSERT INTO when_null (id) VALUES (1);

-- Without PUBLIC's right to execute token_in_force(), the statement leaves
-- the column to the trigger, whose stamp needs no right: also for a role
-- that has the right, as a plan it caches may run for another role.
REVOKE EXECUTE ON FUNCTION fencing.token_in_force() FROM PUBLIC;
CREATE ROLE fence_stamp_norights;
GRANT USAGE ON SCHEMA fence_stamp TO fence_stamp_norights;
GRANT INSERT, SELECT ON acct TO fence_stamp_norights;
CREATE ROLE fence_stamp_rights;
GRANT USAGE ON SCHEMA fence_stamp TO fence_stamp_rights;
GRANT INSERT, SELECT ON acct TO fence_stamp_rights;
GRANT EXECUTE ON FUNCTION fencing.token_in_force() TO fence_stamp_rights;
SET ROLE fence_stamp_norights;
EXPLAIN (VERBOSE, COSTS OFF) INSERT INTO acct (id) VALUES (40);
BEGIN;
SET LOCAL fencing.token = :'newer';
INSERT INTO acct (id) VALUES (40) RETURNING fence = :'newer' AS stamped;
ROLLBACK;
RESET ROLE;
BEGIN;
SET LOCAL fencing.token = :'newer';
SET LOCAL ROLE fence_stamp_rights;
PREPARE ins_as(int) AS INSERT INTO acct (id) VALUES ($1) RETURNING fence = :'newer' AS stamped;
EXECUTE ins_as(41);
SET LOCAL ROLE fence_stamp_norights;
EXECUTE ins_as(42);
ROLLBACK;
DEALLOCATE ins_as;
REVOKE EXECUTE ON FUNCTION fencing.token_in_force() FROM fence_stamp_rights;
GRANT EXECUTE ON FUNCTION fencing.token_in_force() TO PUBLIC;

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
DROP ROLE fence_stamp_norights;
DROP ROLE fence_stamp_rights;
