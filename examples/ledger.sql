-- ledger.sql
--		The protected table that examples/correctness_lock.{c,py} write to,
--		and the role they run as.
--
-- Run once in a database where the fencing extension is created (the server
-- must have shared_preload_libraries = 'fencing'), as its owner:
--		psql -v ON_ERROR_STOP=1 -f examples/ledger.sql
-- It drops and recreates schema "example", and creates role example_worker
-- (a role of the whole cluster) unless it exists.

DROP SCHEMA IF EXISTS example CASCADE;
CREATE SCHEMA example;

-- "fence" holds the token of the last holder that wrote the row (NULL:
-- never written under a lock).  It has no DEFAULT: a default would stand
-- in for a token, and fencing.protect() refuses such a column.
CREATE TABLE example.accounts (
	id		integer PRIMARY KEY,
	owner	text NOT NULL,
	balance	numeric(12,2) NOT NULL DEFAULT 0,
	fence	bigint
);

INSERT INTO example.accounts (id, owner) VALUES
	(1, 'Acme Corp'),
	(2, 'Globex');

-- From now on a write must carry a token at least as new as the row's fence
-- (fence = $token in the statement, or SET LOCAL fencing.token), or it fails
-- with SQLSTATE FN001.
SELECT fencing.protect('example.accounts');

-- The examples run as a member of example_worker (e.g.
-- GRANT example_worker TO your_app_login;), not as a superuser.  Every
-- transaction of theirs that writes first calls
-- fencing.check_fence(lock name, token), or for a lease
-- fencing.use_lease(name, token); PUBLIC may execute neither: a role that
-- may call check_fence can fence out every holder of any resource, so it
-- is granted to the roles that hold the locks only, and use_lease to the
-- roles that run lease jobs.
DO $$
BEGIN
	CREATE ROLE example_worker NOLOGIN;
EXCEPTION WHEN duplicate_object THEN
	NULL;
END $$;
GRANT USAGE ON SCHEMA example TO example_worker;
GRANT SELECT, UPDATE ON example.accounts TO example_worker;
GRANT EXECUTE ON FUNCTION fencing.check_fence(text, bigint) TO example_worker;
GRANT EXECUTE ON FUNCTION fencing.use_lease(text, bigint) TO example_worker;
