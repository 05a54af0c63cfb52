--
-- An inheritance child whose fence column is GENERATED cannot sit under a
-- protected table (DESIGN.md F7): the lock holder must write the fence.
-- PostgreSQL 15 lets such a child be created or attached, and fencing
-- refuses it (expected/fence_ddl_generated.out); from 16 on the server
-- itself refuses a generated child column under a parent column that is
-- not generated, before fencing is asked (fence_ddl_generated_1.out).
-- Either way no such child ends up under a protected table, and protect()
-- installs nothing on a tree that has one.
--
CREATE SCHEMA fence_ddl_generated;
SET search_path = fence_ddl_generated, public;
CREATE TABLE accounts (id int, customer text, fence bigint);
SELECT fencing.protect('accounts');

-- a child added later with a generated fence: the DDL fails, naming it
CREATE TABLE accounts_gen (fence bigint GENERATED ALWAYS AS (id) STORED) INHERITS (accounts);
CREATE TABLE accounts_gen (id int, customer text, fence bigint GENERATED ALWAYS AS (id) STORED);
ALTER TABLE accounts_gen INHERIT accounts;
SELECT count(*) AS links FROM pg_inherits WHERE inhrelid = 'accounts_gen'::regclass;

-- protect() refuses a tree with such a child, naming it, and installs
-- nothing
CREATE TABLE gen_parent (id int, fence bigint);
CREATE TABLE gen_child (id int, fence bigint GENERATED ALWAYS AS (id) STORED);
ALTER TABLE gen_child INHERIT gen_parent;
SELECT fencing.protect('gen_parent');
SELECT count(*) AS triggers FROM pg_trigger
WHERE tgrelid IN ('gen_parent'::regclass, 'gen_child'::regclass)
  AND tgfoid = 'fencing.reject_stale()'::regprocedure;

SET client_min_messages = warning;
DROP SCHEMA fence_ddl_generated CASCADE;
RESET client_min_messages;
