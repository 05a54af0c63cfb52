--
-- fencing.lock_delay (src/locks/delay.c): the setting, who may change it,
-- and the columns it adds to fencing.locks and fencing.stats.  The delays
-- themselves (a terminated holder, an expired lease, a crash, a restart)
-- need several sessions and a server that dies: test/t/038_lock_delay.pl.
-- After each expected error the SQLSTATE is echoed.
--

-- Off by default; milliseconds, from 0 to one hour, changed by reloading
-- the configuration (sighup), never per session.
SHOW fencing.lock_delay;
SELECT setting, unit, context, vartype, min_val, max_val, boot_val
FROM pg_settings WHERE name = 'fencing.lock_delay';

-- A session cannot change it, not even a superuser's: a holder must not
-- be able to turn off the delay its own loss would start.
SET fencing.lock_delay = '5s';
\echo sqlstate: :LAST_ERROR_SQLSTATE
SELECT set_config('fencing.lock_delay', '0', false);
\echo sqlstate: :LAST_ERROR_SQLSTATE
BEGIN;
SET LOCAL fencing.lock_delay = 0;
\echo sqlstate: :LAST_ERROR_SQLSTATE
ROLLBACK;

-- Nor can a role or a database carry it (those take effect in a session).
ALTER ROLE CURRENT_USER SET fencing.lock_delay = '1s';
\echo sqlstate: :LAST_ERROR_SQLSTATE
\set SHOW_CONTEXT never
DO $$BEGIN
	EXECUTE format('ALTER DATABASE %I SET fencing.lock_delay = ''1s''',
				   current_database());
END$$;
\set SHOW_CONTEXT errors
\echo sqlstate: :LAST_ERROR_SQLSTATE
RESET fencing.lock_delay;
\echo sqlstate: :LAST_ERROR_SQLSTATE
-- Each of those says where the setting is changed; set_config() does not
-- come through a statement fencing sees and keeps PostgreSQL's message.

-- ALTER SYSTEM is for a superuser (or a role granted ALTER SYSTEM on it),
-- and the value is bounded.  (The range in the message is written
-- "0 .. 3600000" by PostgreSQL 15 and "0 ms .. 3600000 ms" from 17 on, so
-- only the SQLSTATE is shown here.)
\set VERBOSITY sqlstate
ALTER SYSTEM SET fencing.lock_delay = '2h';
\echo sqlstate: :LAST_ERROR_SQLSTATE
ALTER SYSTEM SET fencing.lock_delay = '-1s';
\echo sqlstate: :LAST_ERROR_SQLSTATE
\set VERBOSITY default
ALTER SYSTEM SET fencing.lock_delay = 'soon';
\echo sqlstate: :LAST_ERROR_SQLSTATE
CREATE ROLE regress_lock_delay_holder;
SET ROLE regress_lock_delay_holder;
ALTER SYSTEM SET fencing.lock_delay = 0;
\echo sqlstate: :LAST_ERROR_SQLSTATE
RESET ROLE;
DROP ROLE regress_lock_delay_holder;

-- fencing.locks says until when a lock is delayed (NULL for held and
-- awaited locks, which is every row here); fencing.stats counts delays
-- started and grants refused because of one.
SELECT attname, format_type(atttypid, atttypmod)
FROM pg_attribute
WHERE attrelid = 'fencing.locks'::regclass AND attnum > 0
ORDER BY attnum;
BEGIN;
SELECT fencing.try_lock('lock delay view') IS NOT NULL AS granted;
SELECT name, mode, granted, delayed_until
FROM fencing.locks WHERE pid = pg_backend_pid();
ROLLBACK;
SELECT attname
FROM pg_attribute
WHERE attrelid = 'fencing.stats'::regclass AND attnum > 0
ORDER BY attnum;

-- fencing.clear_lock_delays(name) ends the delays of a name in this
-- database at once, and with no name every delay of this database
-- (test/t/044_lock_delay_bypass.pl); here there are none.  A name is
-- checked as a lock's is, and the function is not for PUBLIC.
SELECT fencing.clear_lock_delays('no delay here') AS cleared;
SELECT fencing.clear_lock_delays() AS cleared;
SELECT fencing.clear_lock_delays('');
\echo sqlstate: :LAST_ERROR_SQLSTATE
CREATE ROLE regress_lock_delay_clearer;
SET ROLE regress_lock_delay_clearer;
SELECT fencing.clear_lock_delays();
\echo sqlstate: :LAST_ERROR_SQLSTATE
RESET ROLE;
DROP ROLE regress_lock_delay_clearer;
