-- ledger.sql
--		The protected table that examples/correctness_lock.{c,py} write to.
--
-- Run once in a database where the fencing extension is created (the server
-- must have shared_preload_libraries = 'fencing'):
--		psql -v ON_ERROR_STOP=1 -f examples/ledger.sql
-- It drops and recreates schema "example".

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
