--
-- fencing.resource_fences (DESIGN.md F8, F9): a resource's fence only goes
-- up, through fencing.check_fence(), and never above latest_token().  Its
-- owner, members of pg_write_all_data (a clean-up job) and superusers can
-- write the table, so a trigger of the extension holds the rule for every
-- role: UPDATE, DELETE and TRUNCATE are refused, and a new row (what
-- pg_restore loads) must be a canonical name with an issued token.  This
-- file runs as a superuser, the extension's owner.
--
-- Tokens come from fencing.next_token(); messages that would print one are
-- shown tersely or as their SQLSTATE.
--
CREATE SCHEMA fence_resource;
SET search_path = fence_resource, public;
SELECT fencing.next_token() AS low \gset
SELECT fencing.next_token() AS high \gset
SELECT fencing.check_fence('fr:invoice-run', :high) = :high AS raised;
CREATE VIEW watermarks AS
	SELECT resource, CASE fence WHEN :low THEN 'low' WHEN :high THEN 'high'
	                 ELSE 'other' END AS fence
	FROM fencing.resource_fences WHERE resource LIKE 'fr:%' ORDER BY resource;
\set VERBOSITY terse

-- the superuser and owner: lower, raise, close for good, remove
UPDATE fencing.resource_fences SET fence = :low WHERE resource = 'fr:invoice-run';
UPDATE fencing.resource_fences SET fence = :high WHERE resource = 'fr:invoice-run';
UPDATE fencing.resource_fences SET fence = 9223372036854775807 WHERE resource = 'fr:invoice-run';
UPDATE fencing.resource_fences SET resource = 'fr:other' WHERE resource = 'fr:invoice-run';
INSERT INTO fencing.resource_fences (resource, fence) VALUES ('fr:invoice-run', :low)
	ON CONFLICT (resource) DO UPDATE SET fence = EXCLUDED.fence;
DELETE FROM fencing.resource_fences WHERE resource = 'fr:invoice-run';
TRUNCATE fencing.resource_fences;
SELECT * FROM watermarks;

-- new rows, as pg_restore loads them: an issued token and a canonical name
INSERT INTO fencing.resource_fences (resource, fence) VALUES ('fr:restored', :low);
INSERT INTO fencing.resource_fences (resource, fence) VALUES ('fr:closed', 9223372036854775807);
INSERT INTO fencing.resource_fences (resource, fence) VALUES ('fr:zero', 0);
INSERT INTO fencing.resource_fences (resource, fence) VALUES ('FR:Not Canonical', :low);
INSERT INTO fencing.resource_fences (resource, fence) VALUES ('fr:restored', :high)
	ON CONFLICT (resource) DO NOTHING;
COPY fencing.resource_fences (resource, fence) FROM STDIN;
fr:copied	1
\.
COPY fencing.resource_fences (resource, fence) FROM STDIN;
fr:copied-closed	9223372036854775807
\.
SELECT * FROM watermarks;
-- check_fence goes on raising them, and rejects what is below
SELECT fencing.check_fence('fr:restored', :high) = :high AS raised;
SELECT fencing.check_fence('fr:copied', :low) = :low AS raised;
\set VERBOSITY sqlstate
SELECT fencing.check_fence('fr:invoice-run', :low);
\set VERBOSITY terse
SELECT * FROM watermarks;

-- a clean-up job with pg_write_all_data
CREATE ROLE regress_fence_cleaner IN ROLE pg_write_all_data;
SET ROLE regress_fence_cleaner;
DELETE FROM fencing.resource_fences WHERE resource LIKE 'fr:%';
UPDATE fencing.resource_fences SET fence = 1 WHERE resource LIKE 'fr:%';
RESET ROLE;
SELECT * FROM watermarks;

-- a statement run while check_fence writes (here by the owner's own
-- trigger on the table) is not check_fence's, even one that raises
CREATE FUNCTION raise_other() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	UPDATE fencing.resource_fences SET fence = fencing.latest_token()
	WHERE resource = 'fr:copied';
	RETURN NEW;
END $$;
CREATE TRIGGER a_raise_other BEFORE INSERT ON fencing.resource_fences
	FOR EACH ROW EXECUTE FUNCTION raise_other();
SELECT fencing.check_fence('fr:new', :high) = :high AS raised;
DROP TRIGGER a_raise_other ON fencing.resource_fences;
SELECT * FROM watermarks;
\set VERBOSITY default

-- what a superuser can still do on purpose: write with the triggers off
SET session_replication_role = replica;
DELETE FROM fencing.resource_fences WHERE resource LIKE 'fr:%';
RESET session_replication_role;
SELECT * FROM watermarks;

DROP ROLE regress_fence_cleaner;
SET client_min_messages = warning;
DROP SCHEMA fence_resource CASCADE;
RESET client_min_messages;
