--
-- DDL around protected tables (DESIGN.md F7): TRUNCATE, inheritance
-- children and partitions (also those added later), the fence column's
-- definition, re-running protect(), and writes that reach a protected
-- table through views and rules.  Role-based cases are in
-- test/t/043_fence_roles.pl.
--
-- Tokens come from fencing.next_token(); messages that would print one are
-- shown as their SQLSTATE only.
--
CREATE SCHEMA fence_ddl;
SET search_path = fence_ddl, public;
SELECT fencing.next_token() AS old_token \gset
SELECT fencing.next_token() AS token \gset
CREATE FOREIGN DATA WRAPPER fence_ddl_fdw;
CREATE SERVER fence_ddl_server FOREIGN DATA WRAPPER fence_ddl_fdw;

-- The triggers that run fencing.reject_stale() under a tree of tables.
CREATE FUNCTION fence_triggers(root regclass)
RETURNS TABLE (tbl regclass, tgname name, args text, clone boolean, enabled "char")
LANGUAGE sql AS $$
	SELECT t.tgrelid::regclass, t.tgname, encode(t.tgargs, 'escape'),
	       t.tgparentid <> 0, t.tgenabled
	FROM pg_trigger t
	WHERE t.tgfoid = 'fencing.reject_stale'::regproc
	  AND t.tgrelid IN (SELECT relid FROM pg_partition_tree(root)
	                    UNION SELECT inhrelid FROM pg_inherits WHERE inhparent = root
	                    UNION SELECT root)
	ORDER BY t.tgrelid::regclass::text
$$;

------------------------------------------------------------------------
-- TRUNCATE removes rows without firing row triggers: refused wherever a
-- fence trigger would fire
------------------------------------------------------------------------
CREATE TABLE plain (id int PRIMARY KEY, fence bigint);
INSERT INTO plain VALUES (1, :token), (2, :token);
SELECT fencing.protect('plain');
TRUNCATE plain;
\echo sqlstate: :LAST_ERROR_SQLSTATE
TRUNCATE ONLY plain;
TRUNCATE TABLE plain RESTART IDENTITY;
SELECT count(*) AS plain_rows FROM plain;

-- every table the statement names, in any position
CREATE TABLE scratch (id int);
INSERT INTO scratch VALUES (1);
TRUNCATE scratch, plain;
SELECT count(*) AS scratch_rows FROM scratch;

-- a partitioned table and a partition of it
CREATE TABLE parted (id int, fence bigint) PARTITION BY RANGE (id);
CREATE TABLE parted_a PARTITION OF parted FOR VALUES FROM (0) TO (10);
SELECT fencing.protect('parted');
INSERT INTO parted VALUES (1, :token);
TRUNCATE parted;
TRUNCATE parted_a;
TRUNCATE ONLY parted_a;
SELECT count(*) AS parted_rows FROM parted;

-- inheritance: a protected parent's children carry the fence too
CREATE TABLE inh_parent (id int, fence bigint);
CREATE TABLE inh_child () INHERITS (inh_parent);
SELECT fencing.protect('inh_parent');
INSERT INTO inh_child VALUES (1, :token);
TRUNCATE inh_child;
TRUNCATE ONLY inh_parent;
-- an unprotected parent with a protected child: ONLY leaves the child alone
CREATE TABLE loose_parent (id int, fence bigint);
CREATE TABLE guarded_child () INHERITS (loose_parent);
SELECT fencing.protect('guarded_child');
INSERT INTO loose_parent VALUES (1, NULL);
INSERT INTO guarded_child VALUES (2, :token);
TRUNCATE ONLY loose_parent;
TRUNCATE loose_parent;
SELECT tableoid::regclass, id FROM loose_parent ORDER BY id;

-- CASCADE empties the tables that reference the named one, at any depth
CREATE TABLE customers (id int PRIMARY KEY);
CREATE TABLE orders (id int PRIMARY KEY, customer int REFERENCES customers);
CREATE TABLE order_lines (id int PRIMARY KEY, order_id int REFERENCES orders, fence bigint);
INSERT INTO customers VALUES (1);
INSERT INTO orders VALUES (1, 1);
INSERT INTO order_lines VALUES (1, 1, :token);
SELECT fencing.protect('order_lines');
TRUNCATE customers;
TRUNCATE customers CASCADE;
SELECT (SELECT count(*) FROM customers) AS customers,
       (SELECT count(*) FROM orders) AS orders,
       (SELECT count(*) FROM order_lines) AS order_lines;
-- without the protected table in reach, CASCADE proceeds
CREATE TABLE tags (id int PRIMARY KEY);
CREATE TABLE order_tags (tag int REFERENCES tags);
INSERT INTO tags VALUES (1);
INSERT INTO order_tags VALUES (1);
TRUNCATE tags CASCADE;

-- from inside a function (SPI) and a DO block
CREATE FUNCTION empty_plain() RETURNS void LANGUAGE plpgsql AS
	$$BEGIN TRUNCATE fence_ddl.plain; END$$;
SELECT empty_plain();
CREATE FUNCTION empty_plain_sql() RETURNS void LANGUAGE sql AS
	'TRUNCATE fence_ddl.plain';
SELECT empty_plain_sql();
DO $$BEGIN TRUNCATE fence_ddl.plain; END$$;
-- a caught error changes nothing either
DO $$
BEGIN
	TRUNCATE fence_ddl.plain;
EXCEPTION WHEN object_not_in_prerequisite_state THEN
	RAISE NOTICE 'refused: %', SQLERRM;
END $$;
SELECT count(*) AS plain_rows FROM plain;

-- The escape hatches are the owner's: a disabled trigger does not fence,
-- nor does an ORIGIN trigger while session_replication_role = replica
-- (as in a logical replication apply worker, which never fires it).
BEGIN;
ALTER TABLE plain DISABLE TRIGGER fencing_reject_stale;
TRUNCATE plain;
ROLLBACK;
BEGIN;
SET LOCAL session_replication_role = replica;
TRUNCATE plain;
ROLLBACK;
BEGIN;
ALTER TABLE plain ENABLE ALWAYS TRIGGER fencing_reject_stale;
SET LOCAL session_replication_role = replica;
TRUNCATE plain;
\echo sqlstate: :LAST_ERROR_SQLSTATE
ROLLBACK;
BEGIN;
ALTER TABLE plain ENABLE REPLICA TRIGGER fencing_reject_stale;
TRUNCATE plain;
ROLLBACK;
-- the documented ways: DELETE with the token, or unprotect first
BEGIN;
SELECT set_config('fencing.token', :'token', true) IS NOT NULL AS token_set;
DELETE FROM plain WHERE id = 1;
COMMIT;
BEGIN;
SELECT fencing.unprotect('plain');
TRUNCATE plain;
SELECT count(*) AS plain_rows FROM plain;
ROLLBACK;
SELECT count(*) AS plain_rows FROM plain;

------------------------------------------------------------------------
-- Inheritance: protect() fences the children, so a stale write through
-- the parent cannot reach their rows
------------------------------------------------------------------------
CREATE TABLE accounts (id int, customer text, fence bigint);
CREATE TABLE accounts_eu (region text) INHERITS (accounts);
CREATE TABLE accounts_eu_de () INHERITS (accounts_eu);
INSERT INTO accounts VALUES (1, 'acme', :token);
INSERT INTO accounts_eu VALUES (2, 'globex', :token, 'eu');
INSERT INTO accounts_eu_de VALUES (3, 'initech', :token, 'eu');
SELECT fencing.protect('accounts');
SELECT * FROM fence_triggers('accounts');
SELECT * FROM fence_triggers('accounts_eu');
\set VERBOSITY sqlstate
UPDATE accounts SET customer = 'stale', fence = :old_token WHERE id = 2;
UPDATE accounts SET customer = 'stale', fence = :old_token WHERE id = 3;
UPDATE accounts SET customer = 'no token' WHERE id = 3;
BEGIN;
SELECT set_config('fencing.token', :'old_token', true) IS NOT NULL AS token_set;
DELETE FROM accounts WHERE id = 2;
ROLLBACK;
\set VERBOSITY default
SELECT tableoid::regclass, id, customer, fence = :token AS fence_is_token
FROM accounts ORDER BY id;
-- the current holder writes through the parent
BEGIN;
SELECT set_config('fencing.token', :'token', true) IS NOT NULL AS token_set;
UPDATE accounts SET customer = upper(customer);
COMMIT;
SELECT id, customer FROM accounts ORDER BY id;

-- children added later follow the parent's fence: CREATE TABLE ...
-- INHERITS, ALTER TABLE ... INHERIT (with the child's own children), and
-- inside CREATE SCHEMA
CREATE TABLE accounts_us () INHERITS (accounts);
CREATE TABLE accounts_old (id int, customer text, fence bigint);
CREATE TABLE accounts_old_archive () INHERITS (accounts_old);
ALTER TABLE accounts_old INHERIT accounts;
CREATE SCHEMA fence_ddl_apac
	CREATE TABLE accounts_apac (region text) INHERITS (fence_ddl.accounts);
SELECT * FROM fence_triggers('accounts');
SELECT * FROM fence_triggers('accounts_old');
\set VERBOSITY sqlstate
INSERT INTO accounts_us VALUES (4, 'umbrella', NULL);
INSERT INTO fence_ddl_apac.accounts_apac VALUES (5, 'soylent', :token, 'apac');
INSERT INTO accounts_old_archive VALUES (6, 'hooli', :token);
UPDATE accounts SET customer = 'stale', fence = :old_token WHERE id IN (5, 6);
\set VERBOSITY default
SELECT tableoid::regclass, id, customer FROM accounts WHERE id > 3 ORDER BY id;

-- a child that cannot be fenced makes the DDL fail, naming it
CREATE FOREIGN TABLE accounts_remote () INHERITS (accounts) SERVER fence_ddl_server;
-- (a child whose fence column is generated: sql/fence_ddl_generated.sql)
-- ... and protect() refuses a tree with such a child, naming it, and
-- installs nothing
CREATE TABLE remote_parent (id int, fence bigint);
CREATE FOREIGN TABLE remote_child () INHERITS (remote_parent) SERVER fence_ddl_server;
SELECT fencing.protect('remote_parent');
SELECT count(*) AS triggers FROM pg_trigger
WHERE tgrelid IN ('remote_parent'::regclass, 'remote_child'::regclass);

-- a child follows its parent: protect() with the same fence is harmless,
-- another fence or unprotect() is refused with a hint
SELECT fencing.protect('accounts_eu');
-- (the owner of a child may drop its trigger, an escape hatch; protect()
-- on the child or the parent puts it back, as for a child attached before
-- fencing 1.1 protected children)
DROP TRIGGER fencing_reject_stale ON accounts_us;
SELECT * FROM fence_triggers('accounts_us');
SELECT fencing.protect('accounts_us');
SELECT * FROM fence_triggers('accounts_us');
SELECT fencing.protect('accounts_eu', on_stale => 'skip');
SELECT fencing.unprotect('accounts_eu');
-- a table follows one fence: two protected parents must agree
CREATE TABLE audit (id int, customer text, fence bigint);
SELECT fencing.protect('audit', on_stale => 'skip');
CREATE TABLE accounts_audited () INHERITS (accounts, audit);
SELECT fencing.unprotect('audit');
CREATE TABLE accounts_audited () INHERITS (accounts, audit);
SELECT * FROM fence_triggers('accounts_audited');

-- a new mode on the parent reaches every child, each said in a NOTICE
SELECT fencing.protect('accounts', on_stale => 'skip');
SELECT DISTINCT args FROM fence_triggers('accounts');
SELECT DISTINCT args FROM fence_triggers('accounts_eu');
UPDATE accounts SET customer = 'skipped', fence = :old_token;
SELECT count(*) FILTER (WHERE customer = 'skipped') AS skipped_rows FROM accounts;
-- a table that no longer inherits keeps its fence until it is unprotected
ALTER TABLE accounts_audited NO INHERIT accounts;
SELECT * FROM fence_triggers('accounts_audited');
SELECT fencing.unprotect('accounts_audited');
-- unprotect() removes the trigger from the whole tree
SELECT fencing.unprotect('accounts');
SELECT count(*) AS triggers FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
WHERE t.tgfoid = 'fencing.reject_stale'::regproc AND c.relname LIKE 'accounts%';

------------------------------------------------------------------------
-- Partitions: PostgreSQL clones the trigger onto partitions created or
-- attached later, sub-partitions included
------------------------------------------------------------------------
CREATE TABLE sales (id int, fence bigint) PARTITION BY RANGE (id);
SELECT fencing.protect('sales');
CREATE TABLE sales_1 PARTITION OF sales FOR VALUES FROM (0) TO (10);
CREATE TABLE sales_2 PARTITION OF sales FOR VALUES FROM (10) TO (20) PARTITION BY RANGE (id);
CREATE TABLE sales_2a PARTITION OF sales_2 FOR VALUES FROM (10) TO (15);
CREATE TABLE sales_3 (fence bigint, id int);
ALTER TABLE sales ATTACH PARTITION sales_3 FOR VALUES FROM (20) TO (30);
CREATE TABLE sales_4 (id int, fence bigint) PARTITION BY RANGE (id);
CREATE TABLE sales_4a PARTITION OF sales_4 FOR VALUES FROM (30) TO (35);
ALTER TABLE sales ATTACH PARTITION sales_4 FOR VALUES FROM (30) TO (40);
SELECT * FROM fence_triggers('sales');
INSERT INTO sales VALUES (1, :token), (11, :token), (21, :token), (31, :token);
\set VERBOSITY sqlstate
UPDATE sales SET fence = :old_token WHERE id = 1;
UPDATE sales SET fence = :old_token WHERE id = 11;
UPDATE sales SET fence = :old_token WHERE id = 21;
UPDATE sales SET fence = :old_token WHERE id = 31;
INSERT INTO sales (id) VALUES (12);
\set VERBOSITY default
-- a foreign table as a partition: PostgreSQL clones row triggers onto it
-- (shown with a trigger protect() did not install) ...
CREATE TABLE by_hand (id int, fence bigint) PARTITION BY RANGE (id);
CREATE TRIGGER by_hand BEFORE INSERT OR UPDATE OR DELETE ON by_hand
	FOR EACH ROW EXECUTE FUNCTION fencing.reject_stale();
CREATE FOREIGN TABLE by_hand_remote PARTITION OF by_hand FOR VALUES FROM (0) TO (10)
	SERVER fence_ddl_server;
SELECT * FROM fence_triggers('by_hand');
-- ... but its rows live on another server: a protected table refuses it
CREATE FOREIGN TABLE sales_remote PARTITION OF sales FOR VALUES FROM (40) TO (50)
	SERVER fence_ddl_server;
CREATE FOREIGN TABLE sales_remote (id int, fence bigint) SERVER fence_ddl_server;
ALTER TABLE sales ATTACH PARTITION sales_remote FOR VALUES FROM (40) TO (50);
SELECT fencing.protect('by_hand');
-- a partition follows its parent
SELECT fencing.protect('sales_1');
SELECT fencing.protect('sales_2a', on_stale => 'skip');
SELECT fencing.unprotect('sales_2');
DROP TRIGGER fencing_reject_stale ON sales_1;
-- a table protected on its own cannot take a protected parent's clone
CREATE TABLE sales_5 (id int, fence bigint);
SELECT fencing.protect('sales_5');
ALTER TABLE sales ATTACH PARTITION sales_5 FOR VALUES FROM (50) TO (60);
SELECT fencing.unprotect('sales_5');
ALTER TABLE sales ATTACH PARTITION sales_5 FOR VALUES FROM (50) TO (60);
-- DETACH takes the clone away (the owner's choice)
ALTER TABLE sales DETACH PARTITION sales_5;
SELECT count(*) AS sales_5_triggers FROM pg_trigger WHERE tgrelid = 'sales_5'::regclass;
-- unprotect() on the parent takes every clone with it
SELECT fencing.unprotect('sales');
SELECT * FROM fence_triggers('sales');

------------------------------------------------------------------------
-- The fence column's definition: nothing may stand in for the token
------------------------------------------------------------------------
CREATE TABLE ledger (id int, fence bigint, note text);
SELECT fencing.protect('ledger');
ALTER TABLE ledger ALTER COLUMN fence SET DEFAULT 0;
ALTER TABLE ledger ALTER COLUMN fence SET DEFAULT fencing.latest_token();
ALTER TABLE ledger ALTER COLUMN fence SET NOT NULL,
	ALTER COLUMN fence ADD GENERATED ALWAYS AS IDENTITY;
ALTER TABLE ledger DROP COLUMN fence, ADD COLUMN fence bigint DEFAULT 0;
ALTER TABLE ledger DROP COLUMN fence, ADD COLUMN fence bigint GENERATED ALWAYS AS (id) STORED;
ALTER TABLE ledger DROP COLUMN fence, ADD COLUMN fence bigint GENERATED BY DEFAULT AS IDENTITY;
ALTER TABLE ledger ADD COLUMN "FENCE" bigint DEFAULT 0;
-- what gives no value is allowed, and so are other columns
ALTER TABLE ledger ALTER COLUMN fence SET DEFAULT NULL;
ALTER TABLE ledger ALTER COLUMN fence SET DEFAULT NULL::bigint;
ALTER TABLE ledger ALTER COLUMN fence DROP DEFAULT;
ALTER TABLE ledger ALTER COLUMN note SET DEFAULT 'n/a';
ALTER TABLE ledger ADD COLUMN created bigint DEFAULT 0;
SELECT attname, pg_get_expr(adbin, adrelid) AS default_value
FROM pg_attribute LEFT JOIN pg_attrdef ON adrelid = attrelid AND adnum = attnum
WHERE attrelid = 'ledger'::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum;
-- the protect()ed column by its name, whatever it is called
CREATE TABLE files (path text, epoch bigint, fence bigint);
SELECT fencing.protect('files', 'epoch');
ALTER TABLE files ALTER COLUMN epoch SET DEFAULT 1;
ALTER TABLE files ALTER COLUMN fence SET DEFAULT 1;
-- through the tables the command reaches: a parent's default recurses
-- into its protected children, a partition is protected by its parent's
ALTER TABLE loose_parent ALTER COLUMN fence SET DEFAULT 0;
ALTER TABLE ONLY loose_parent ALTER COLUMN fence SET DEFAULT 0;
ALTER TABLE parted_a ALTER COLUMN fence SET DEFAULT 0;
ALTER TABLE parted ALTER COLUMN fence SET DEFAULT 0;
-- an unprotected table is none of fencing's business
CREATE TABLE free (id int, fence bigint);
ALTER TABLE free ALTER COLUMN fence SET DEFAULT 0;

------------------------------------------------------------------------
-- Re-running protect() with another column or mode changes the table and
-- says so; the same arguments again say nothing, and a column or mode not
-- given keeps the table's (protect('jobs') on a table protected with
-- on_stale => 'skip' stays 'skip')
------------------------------------------------------------------------
CREATE TABLE jobs (id int, fence bigint, epoch bigint);
SELECT fencing.protect('jobs', on_stale => 'skip');
SELECT fencing.protect('jobs', on_stale => 'skip');
SELECT fencing.protect('jobs');
SELECT * FROM fence_triggers('jobs');
SELECT fencing.protect('jobs', 'epoch');
SELECT * FROM fence_triggers('jobs');
SELECT fencing.protect('jobs', on_stale => 'error');
SELECT fencing.protect('jobs', NULL, NULL);
SELECT * FROM fence_triggers('jobs');
-- a disabled trigger is enabled again by protect()
ALTER TABLE jobs DISABLE TRIGGER fencing_reject_stale;
SELECT fencing.protect('jobs', 'epoch');
SELECT * FROM fence_triggers('jobs');

------------------------------------------------------------------------
-- Writes that reach a protected table through a view or a rule are
-- fenced like any other
------------------------------------------------------------------------
CREATE VIEW plain_view AS SELECT * FROM plain;
CREATE TABLE plain_log (id int, fence bigint);
CREATE RULE log_to_plain AS ON INSERT TO plain_log
	DO ALSO UPDATE plain SET fence = NEW.fence WHERE id = NEW.id;
\set VERBOSITY sqlstate
UPDATE plain_view SET fence = :old_token;
DELETE FROM plain_view;
INSERT INTO plain_log VALUES (2, :old_token);
\set VERBOSITY default
SELECT count(*) AS log_rows FROM plain_log;
SELECT id, fence = :token AS fence_is_token FROM plain ORDER BY id;

------------------------------------------------------------------------
-- The fence trigger keeps its name: protect() and the tables added
-- under a protected parent later find it by that name
------------------------------------------------------------------------
CREATE TABLE named (id int, fence bigint);
SELECT fencing.protect('named');
CREATE TABLE named_p (id int, fence bigint) PARTITION BY LIST (id);
CREATE TABLE named_p1 PARTITION OF named_p FOR VALUES IN (1);
SELECT fencing.protect('named_p');
ALTER TRIGGER fencing_reject_stale ON named RENAME TO my_fence;
ALTER TRIGGER fencing_reject_stale ON named_p RENAME TO my_fence;
-- a trigger of another function may take the name
CREATE TABLE other_named (id int, fence bigint);
CREATE TRIGGER other_trigger BEFORE INSERT ON other_named
	FOR EACH ROW EXECUTE FUNCTION suppress_redundant_updates_trigger();
ALTER TRIGGER other_trigger ON other_named RENAME TO fencing_reject_stale;
-- a child added later follows the fence, and protect() again replaces the
-- trigger rather than adding a second one
CREATE TABLE named_child () INHERITS (named);
SELECT * FROM fence_triggers('named');
SELECT fencing.protect('named');
SELECT fencing.protect('named_p');
SELECT * FROM fence_triggers('named');
SELECT * FROM fence_triggers('named_p');

------------------------------------------------------------------------
-- The owner's switches that turn the fence off, or that let another
-- trigger change what it checks, are named in a WARNING
------------------------------------------------------------------------
CREATE TABLE switched (id int, fence bigint);
SELECT fencing.protect('switched');
CREATE TABLE switched_p (id int, fence bigint) PARTITION BY LIST (id);
CREATE TABLE switched_p1 PARTITION OF switched_p FOR VALUES IN (1);
SELECT fencing.protect('switched_p');
CREATE FUNCTION fill_fence() RETURNS trigger LANGUAGE plpgsql AS
	$$ BEGIN NEW.fence := fencing.latest_token(); RETURN NEW; END $$;
-- the fence trigger switched off, or to fire only for replication
ALTER TABLE switched DISABLE TRIGGER fencing_reject_stale;
ALTER TABLE switched ENABLE TRIGGER fencing_reject_stale;
ALTER TABLE switched DISABLE TRIGGER ALL;
ALTER TABLE switched ENABLE TRIGGER ALL;
ALTER TABLE switched DISABLE TRIGGER USER;
ALTER TABLE switched ENABLE REPLICA TRIGGER fencing_reject_stale;
-- ALWAYS fences replication's writes as well: nothing to say
ALTER TABLE switched ENABLE ALWAYS TRIGGER fencing_reject_stale;
ALTER TABLE switched ENABLE TRIGGER fencing_reject_stale;
-- through a partitioned parent, down to its partitions
ALTER TABLE switched_p DISABLE TRIGGER fencing_reject_stale;
ALTER TABLE switched_p ENABLE TRIGGER fencing_reject_stale;
-- a BEFORE ROW trigger the owner adds after protect(), or enables again
CREATE TRIGGER a_fill BEFORE INSERT ON switched
	FOR EACH ROW EXECUTE FUNCTION fill_fence();
ALTER TABLE switched DISABLE TRIGGER a_fill;
ALTER TABLE switched ENABLE ALWAYS TRIGGER a_fill;
CREATE TRIGGER z_fill BEFORE UPDATE ON switched_p
	FOR EACH ROW EXECUTE FUNCTION fill_fence();
-- AFTER and statement triggers cannot change the row: nothing to say
CREATE TRIGGER after_fill AFTER INSERT ON switched
	FOR EACH ROW EXECUTE FUNCTION fill_fence();
CREATE TRIGGER each_statement BEFORE INSERT ON switched
	FOR EACH STATEMENT EXECUTE FUNCTION suppress_redundant_updates_trigger();
DROP TRIGGER a_fill ON switched;
DROP TRIGGER z_fill ON switched_p;
-- the fence trigger replaced by hand with one that checks only some writes
CREATE OR REPLACE TRIGGER fencing_reject_stale BEFORE INSERT OR UPDATE OR DELETE ON switched
	FOR EACH ROW WHEN (false) EXECUTE FUNCTION fencing.reject_stale();
CREATE OR REPLACE TRIGGER fencing_reject_stale BEFORE INSERT OR UPDATE OF id OR DELETE ON switched
	FOR EACH ROW EXECUTE FUNCTION fencing.reject_stale();
CREATE OR REPLACE TRIGGER fencing_reject_stale BEFORE INSERT OR UPDATE ON switched
	FOR EACH ROW EXECUTE FUNCTION fencing.reject_stale();
SELECT fencing.protect('switched');
-- session_replication_role = replica: the ORIGIN fence trigger does not
-- fire, so each write to a protected table, COPY and TRUNCATE say so
BEGIN;
SET LOCAL session_replication_role = replica;
INSERT INTO switched VALUES (1, NULL);
UPDATE switched SET id = 2;
WITH d AS (DELETE FROM switched RETURNING *) SELECT count(*) FROM d;
INSERT INTO switched_p VALUES (1, NULL);
COPY switched FROM STDIN;
3	\N
\.
TRUNCATE switched;
-- not for a table without a fence, nor for reads
CREATE TEMP TABLE scratch (id int);
INSERT INTO scratch VALUES (1);
SELECT count(*) FROM switched;
ROLLBACK;

RESET search_path;
SET client_min_messages = warning;
DROP SCHEMA fence_ddl_apac CASCADE;
DROP SCHEMA fence_ddl CASCADE;
DROP SERVER fence_ddl_server;
DROP FOREIGN DATA WRAPPER fence_ddl_fdw;
RESET client_min_messages;
