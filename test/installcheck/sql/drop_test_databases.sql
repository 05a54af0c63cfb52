--
-- The last step of "make installcheck" (see the Makefile): drop the
-- databases the suites ran in, and what a suite that failed half-way may
-- have left (its own databases and regress_fenc* roles), so that the
-- server is left as it was found.  Runs in the database postgres, which
-- pg_regress itself connects to.
--
SET client_min_messages = warning;
DROP DATABASE IF EXISTS contrib_regression;
DROP DATABASE IF EXISTS isolation_regression;
DROP DATABASE IF EXISTS regress_fencing_other;
DROP DATABASE IF EXISTS regress_fencing_normalize;
DO $$
DECLARE
	role name;
BEGIN
	FOR role IN SELECT rolname FROM pg_catalog.pg_roles
				WHERE rolname LIKE 'regress\_fenc%' ORDER BY rolname
	LOOP
		EXECUTE pg_catalog.format('DROP ROLE %I', role);
	END LOOP;
END
$$;
RESET client_min_messages;
SELECT count(*) AS test_databases_left FROM pg_catalog.pg_database
WHERE datname IN ('contrib_regression', 'isolation_regression',
				  'regress_fencing_other', 'regress_fencing_normalize');
