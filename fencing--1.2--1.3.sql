/* fencing--1.2--1.3.sql */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "ALTER EXTENSION fencing UPDATE TO '1.3'" to load this file. \quit

/*
 * 1.2 to 1.3.  Every change here is also in fencing--1.3.sql, so that a
 * database updated from an earlier version and one created at 1.3 hold
 * the same objects (test/t/053_upgrade_script.pl compares them).  Calls
 * are schema-qualified, as in the install script.
 */

-- renew_lease's ttl had a default; a call that leaves out a defaulted
-- argument has it read back from the catalog and parsed at every parse
-- analysis.  Two functions take the same calls.  The default is taken out
-- of the catalog entry in place, so that the function keeps its OID, its
-- privileges (as the owner granted and revoked them) and whatever depends
-- on it.
UPDATE pg_catalog.pg_proc
   SET proargdefaults = NULL, pronargdefaults = 0
 WHERE oid OPERATOR(pg_catalog.=) 'fencing.renew_lease(text, bigint, interval)'::pg_catalog.regprocedure;

CREATE FUNCTION fencing.renew_lease(name text, token bigint)
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'fencing_renew_lease'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION fencing.renew_lease(text, bigint) IS
'extend the lease held with token to now + the ttl it was taken with and return the new expiry; FN004 when it is not held with token';

-- The new two-argument function has the default privileges.  Where the
-- owner changed those of the one function, the update says what to run
-- to do the same on the new one (a grant made here would become an
-- initial privilege, which pg_dump leaves out).
DO $$
DECLARE
	acl pg_catalog.aclitem[];
BEGIN
	SELECT p.proacl INTO acl FROM pg_catalog.pg_proc AS p
	WHERE p.oid OPERATOR(pg_catalog.=) 'fencing.renew_lease(text, bigint, interval)'::pg_catalog.regprocedure;
	IF acl IS NOT NULL THEN
		RAISE WARNING 'fencing.renew_lease(text, bigint) is new, with the default privileges; fencing.renew_lease(text, bigint, interval) has %', acl
			USING HINT = 'To give the new function the same privileges, run GRANT and REVOKE on fencing.renew_lease(text, bigint) as you did on the three-argument one.';
	END IF;
END
$$;

COMMENT ON FUNCTION fencing.use_lease(text, bigint) IS
'first statement of each transaction of a lease holder''s work: FN004 unless held with token, raises the resource fence of name to token as check_fence does, sets this transaction''s fencing.token, then renews the lease';

-- use_lease raises the resource fence of the lease's name, which fences out
-- the name's earlier holders: the owner grants it to the roles that run
-- lease jobs.  A holder needs no right to raise the fences of other names
-- (in 1.2 it needed EXECUTE on check_fence, which raises any name's).
REVOKE EXECUTE ON FUNCTION fencing.use_lease(text, bigint) FROM PUBLIC;

-- A grant made here would become part of the extension's initial
-- privileges, which pg_dump leaves out: the roles that ran lease jobs with
-- EXECUTE on check_fence are named instead, with the grant they need.
DO $$
DECLARE
	r record;
BEGIN
	FOR r IN
		SELECT DISTINCT pg_catalog.quote_ident(a.rolname) AS role
		FROM pg_catalog.pg_proc AS p,
			 pg_catalog.aclexplode(p.proacl) AS x
		JOIN pg_catalog.pg_roles AS a ON a.oid OPERATOR(pg_catalog.=) x.grantee
		WHERE p.oid OPERATOR(pg_catalog.=)
				'fencing.check_fence(text, bigint)'::pg_catalog.regprocedure
		  AND x.privilege_type OPERATOR(pg_catalog.=) 'EXECUTE'
		  AND NOT a.rolsuper
		  AND NOT pg_catalog.has_function_privilege(a.oid,
				'fencing.use_lease(text, bigint)'::pg_catalog.regprocedure, 'EXECUTE')
		ORDER BY 1
	LOOP
		RAISE WARNING 'role % may execute fencing.check_fence but no longer fencing.use_lease', r.role
			USING DETAIL = 'Since fencing 1.3, fencing.use_lease needs EXECUTE on itself, which PUBLIC lacks, instead of EXECUTE on fencing.check_fence.',
				  HINT = pg_catalog.format('If the role runs lease jobs: GRANT EXECUTE ON FUNCTION fencing.use_lease(text, bigint) TO %s;', r.role);
	END LOOP;
END
$$;
