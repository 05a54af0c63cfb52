
# Copyright (c) 2026, the fencing developers
#
# Privileges.  An ordinary role (not superuser, not owner of the
# extension) can take tokens and locks, use check_fence once it is granted
# EXECUTE (PUBLIC lacks it: DESIGN.md F9, test/t/043_fence_roles.pl) and
# read the monitoring views, but cannot move the counter, reset the
# statistics, write the watermarks directly, or protect/unprotect a table
# it does not own.  A role whose search_path puts its own schema first, holding its own
# = <= < operators on bigint and text and its own hashtextextended,
# normalize_name, lock_key and now, gets exactly the results a clean
# search_path gives from protect(), check_fence() and the trigger, and stale
# tokens are still rejected.  Every function of the extension not written
# in C, and every SECURITY DEFINER one, pins search_path.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('privileges');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'fencing'");
$node->start;

$node->safe_psql(
	'postgres', q{
CREATE EXTENSION fencing;
CREATE ROLE app LOGIN;
GRANT EXECUTE ON FUNCTION fencing.check_fence(text, bigint) TO app;
CREATE TABLE owners_ledger (id int PRIMARY KEY, billed int NOT NULL DEFAULT 0, fence bigint);
INSERT INTO owners_ledger VALUES (1, 0, NULL);
SELECT fencing.protect('owners_ledger');
GRANT SELECT, INSERT, UPDATE, DELETE ON owners_ledger TO app;
CREATE SCHEMA evil AUTHORIZATION app;
CREATE SCHEMA app_data AUTHORIZATION app;
});

# Run SQL as app; returns (exit code, stdout, stderr).
sub as_app
{
	my ($sql) = @_;
	my ($stdout, $stderr);
	my $ret = $node->psql(
		'postgres', $sql,
		stdout => \$stdout,
		stderr => \$stderr,
		extra_params => [ '-U', 'app', '-v', 'VERBOSITY=verbose' ]);
	return ($ret, $stdout, $stderr);
}

sub app_ok
{
	my ($sql, $expected, $label) = @_;
	my ($ret, $stdout, $stderr) = as_app($sql);
	is($ret, 0, "$label: succeeds") or diag $stderr;
	is($stdout, $expected, "$label: result") if defined $expected;
}

sub app_fails
{
	my ($sql, $sqlstate, $label) = @_;
	my ($ret, $stdout, $stderr) = as_app($sql);
	isnt($ret, 0, "$label: fails");
	like($stderr, qr/ERROR:  $sqlstate:/, "$label: SQLSTATE $sqlstate")
	  or diag $stderr;
}

is($node->safe_psql('postgres',
		"SELECT rolsuper OR rolcreaterole OR rolbypassrls FROM pg_roles WHERE rolname = 'app'"),
	'f', 'app is an ordinary role');

#
# What an ordinary role may do.
#
app_ok('SELECT fencing.next_token() > 0', 't', 'next_token');
app_ok('SELECT fencing.latest_token() > 0', 't', 'latest_token');
app_ok(
	q{BEGIN;
SELECT fencing.try_lock('app lock') IS NOT NULL,
       fencing.lock('app lock 2', '1s') IS NOT NULL,
       fencing.lock('app lock 3') IS NOT NULL,
       fencing.lease('app lease', '1 min') IS NOT NULL,
       fencing.held_token('app lock') = fencing.try_lock('app lock');
COMMIT;}, 't|t|t|t|t', 'try_lock, lock, lease, held_token');
app_ok(
	q{BEGIN;
SELECT fencing.try_lock('app lock') IS NOT NULL;
SELECT count(*) FROM fencing.locks WHERE name = 'app lock' AND pid = pg_backend_pid();
COMMIT;}, "t\n1", 'fencing.locks');
app_ok(q{SELECT fencing.normalize_name('  App  LOCK '), fencing.lock_key('app lock') = hashtextextended('app lock', 0)},
	'app lock|t', 'normalize_name and lock_key');
app_ok('SELECT tokens_issued > 0, locks_granted > 0 FROM fencing.stats', 't|t',
	'fencing.stats');
app_ok('SELECT latest_token > 0, lock_capacity > 0 FROM fencing.status()', 't|t',
	'fencing.status()');
app_ok(
	q{SELECT fencing.next_token() AS t \gset
SELECT fencing.check_fence('app resource', :t) = :t;
SELECT resource, fence = :t FROM fencing.resource_fences WHERE resource = 'app resource';},
	"t\napp resource|t", 'check_fence raises the watermark');
app_fails(q{SELECT fencing.check_fence('app resource', 1)},
	'FN001', 'check_fence rejects a stale token for app');
# app writes a protected table it was granted, with a token
app_ok(q{BEGIN;
SELECT set_config('fencing.token', fencing.next_token()::text, true) IS NOT NULL;
UPDATE owners_ledger SET billed = billed + 1 WHERE id = 1;
COMMIT;
SELECT billed FROM owners_ledger}, "t\n1", 'app writes a protected table with a token');
app_fails(q{UPDATE owners_ledger SET billed = billed + 1, fence = 1 WHERE id = 1},
	'FN001', 'app with a stale token is rejected by the trigger');

#
# What it may not do.
#
app_fails('SELECT fencing.advance_token(fencing.latest_token() + 1000)',
	'42501', 'advance_token');
app_fails('SELECT fencing.stats_reset()', '42501', 'stats_reset');
app_fails(q{INSERT INTO fencing.resource_fences (resource, fence) VALUES ('forged', 9223372036854775806)},
	'42501', 'INSERT into resource_fences');
app_fails(q{UPDATE fencing.resource_fences SET fence = 0},
	'42501', 'UPDATE of resource_fences');
app_fails(q{DELETE FROM fencing.resource_fences},
	'42501', 'DELETE from resource_fences');
app_fails(q{TRUNCATE fencing.resource_fences}, '42501', 'TRUNCATE of resource_fences');
app_fails(q{SELECT fencing.protect('owners_ledger', 'fence', 'skip')},
	'42501', "protect on a table app does not own");
app_fails(q{SELECT fencing.unprotect('owners_ledger')},
	'42501', "unprotect on a table app does not own");
app_fails(q{CREATE FUNCTION fencing.next_token_evil() RETURNS int LANGUAGE sql AS 'SELECT 1'},
	'42501', 'creating objects in schema fencing');
app_fails(q{SELECT fencing.check_fence('forged', 9223372036854775806)},
	'22023', 'check_fence with a token never issued');
is($node->safe_psql('postgres',
		"SELECT count(*) FROM pg_trigger WHERE tgrelid = 'owners_ledger'::regclass AND tgfoid = 'fencing.reject_stale'::regproc AND encode(tgargs, 'escape') = 'fence\\000error\\000'"),
	'1', 'the owner\'s trigger is unchanged');
is($node->safe_psql('postgres',
		"SELECT count(*) FROM fencing.resource_fences WHERE resource = 'forged' OR fence <= 0"),
	'0', 'no forged watermark');

#
# A hostile search_path.
#
$node->safe_psql(
	'postgres', q{
SET ROLE app;
CREATE FUNCTION evil.hashtextextended(text, bigint) RETURNS bigint LANGUAGE sql AS 'SELECT 0::bigint';
CREATE FUNCTION evil.normalize_name(text) RETURNS text LANGUAGE sql AS 'SELECT ''pwned''::text';
CREATE FUNCTION evil.lock_key(text) RETURNS bigint LANGUAGE sql AS 'SELECT 0::bigint';
CREATE FUNCTION evil.now() RETURNS timestamptz LANGUAGE sql AS 'SELECT ''1999-01-01''::timestamptz';
CREATE FUNCTION evil.always(bigint, bigint) RETURNS boolean LANGUAGE sql AS 'SELECT true';
CREATE FUNCTION evil.never(bigint, bigint) RETURNS boolean LANGUAGE sql AS 'SELECT false';
CREATE FUNCTION evil.always(text, text) RETURNS boolean LANGUAGE sql AS 'SELECT true';
CREATE FUNCTION evil.never(text, text) RETURNS boolean LANGUAGE sql AS 'SELECT false';
CREATE OPERATOR evil.= (LEFTARG = bigint, RIGHTARG = bigint, FUNCTION = evil.always);
CREATE OPERATOR evil.<= (LEFTARG = bigint, RIGHTARG = bigint, FUNCTION = evil.always);
CREATE OPERATOR evil.< (LEFTARG = bigint, RIGHTARG = bigint, FUNCTION = evil.never);
CREATE OPERATOR evil.>= (LEFTARG = bigint, RIGHTARG = bigint, FUNCTION = evil.always);
CREATE OPERATOR evil.> (LEFTARG = bigint, RIGHTARG = bigint, FUNCTION = evil.never);
CREATE OPERATOR evil.= (LEFTARG = text, RIGHTARG = text, FUNCTION = evil.always);
CREATE OPERATOR evil.<= (LEFTARG = text, RIGHTARG = text, FUNCTION = evil.always);
CREATE OPERATOR evil.< (LEFTARG = text, RIGHTARG = text, FUNCTION = evil.never);
});

my $hostile = 'SET search_path = evil, pg_catalog, fencing, app_data, public, pg_temp;';
my $clean   = 'SET search_path = app_data, public;';

# The hostile objects really are what unqualified names resolve to.
app_ok(
	qq{$hostile
SELECT 1::bigint = 2::bigint, 2::bigint < 1::bigint, hashtextextended('a', 0),
       normalize_name('A'), lock_key('A'), now() < '2000-01-01'},
	't|f|0|pwned|0|t', 'hostile objects win unqualified lookups');

# One scenario, run as app under a given search_path; resource and table
# names carry a suffix so the two runs do not share state.  Prints only
# values that do not depend on token numbers.  The scenario's own
# comparisons name pg_catalog's operators: the hostile = is an inlinable
# "SELECT true" that would let the planner drop the call it compares.
sub scenario
{
	my ($path, $suffix) = @_;
	return qq{$path
\\set VERBOSITY sqlstate
\\set ON_ERROR_STOP 0
CREATE TABLE app_data.jobs_$suffix (id int PRIMARY KEY, state text, fence bigint);
INSERT INTO app_data.jobs_$suffix VALUES (1, 'new', NULL), (2, 'new', NULL);
SELECT fencing.protect('app_data.jobs_$suffix');
SELECT t.tgname, t.tgfoid OPERATOR(pg_catalog.=) 'fencing.reject_stale'::pg_catalog.regproc AS reject_stale,
       pg_catalog.encode(t.tgargs, 'escape'), t.tgtype
FROM pg_catalog.pg_trigger t
WHERE t.tgrelid OPERATOR(pg_catalog.=) 'app_data.jobs_$suffix'::pg_catalog.regclass;
SELECT fencing.next_token() AS t1 \\gset
SELECT fencing.next_token() AS t2 \\gset
-- the resource fence: raise to t2, then t1 is stale, t2 again is fine
SELECT fencing.check_fence('  Resource $suffix ', :t2) OPERATOR(pg_catalog.=) :t2 AS raised;
SELECT fencing.check_fence('RESOURCE $suffix', :t1) AS stale_accepted;
\\echo check_fence stale: :LAST_ERROR_SQLSTATE
SELECT fencing.check_fence('resource $suffix', :t2) OPERATOR(pg_catalog.=) :t2 AS equal_accepted;
SELECT r.resource, r.fence OPERATOR(pg_catalog.=) :t2, r.updated_at OPERATOR(pg_catalog.>) '2020-01-01'::timestamptz
FROM fencing.resource_fences r WHERE r.resource LIKE '%$suffix';
-- the row fence: t2 writes, t1 is stale, no token is rejected, delete needs one
UPDATE app_data.jobs_$suffix SET state = 'by t2', fence = :t2 WHERE id = 1;
UPDATE app_data.jobs_$suffix SET state = 'by t1', fence = :t1 WHERE id = 1;
\\echo update stale: :LAST_ERROR_SQLSTATE
UPDATE app_data.jobs_$suffix SET state = 'no token' WHERE id = 1;
\\echo update without token: :LAST_ERROR_SQLSTATE
BEGIN;
SELECT pg_catalog.set_config('fencing.token', :'t1', true) IS NOT NULL;
DELETE FROM app_data.jobs_$suffix WHERE id = 1;
\\echo delete stale: :LAST_ERROR_SQLSTATE
ROLLBACK;
BEGIN;
SELECT pg_catalog.set_config('fencing.token', :'t1', true) IS NOT NULL;
UPDATE app_data.jobs_$suffix SET state = 'stamped t1' WHERE id = 2;
COMMIT;
SELECT id, state, fence OPERATOR(pg_catalog.=) :t2 AS fence_is_t2,
       fence OPERATOR(pg_catalog.=) :t1 AS fence_is_t1
FROM app_data.jobs_$suffix ORDER BY id;
SELECT fencing.normalize_name('Name $suffix'), fencing.lock_key('x') OPERATOR(pg_catalog.=) pg_catalog.hashtextextended('x', 0);
-- unprotect under the same path removes the trigger
SELECT fencing.unprotect('app_data.jobs_$suffix');
SELECT pg_catalog.count(*) FROM pg_catalog.pg_trigger WHERE tgrelid = 'app_data.jobs_$suffix'::regclass;
};
}

my ($ret_c, $out_c, $err_c) = as_app(scenario($clean,   'x'));
my ($ret_h, $out_h, $err_h) = as_app(scenario($hostile, 'x_h'));
note "clean search_path:\n$out_c";
is($err_h =~ s/x_h/x/gr, $err_c, 'hostile search_path: the same errors as a clean one');
is($out_h =~ s/x_h/x/gr, $out_c, 'hostile search_path: the same results as a clean one');
like($out_c, qr/^check_fence stale: FN001$/m, 'check_fence rejects the stale token');
like($out_c, qr/^update stale: FN001$/m, 'the trigger rejects the stale row write');
like($out_c, qr/^update without token: FN001$/m, 'the trigger rejects a write without a token');
like($out_c, qr/^delete stale: FN001$/m, 'the trigger rejects a stale delete');
like($out_c, qr/^resource x\|t\|t$/m, 'the watermark row is canonical, at t2, timestamped by pg_catalog.now()');
like($out_c, qr/^1\|by t2\|t\|f\n2\|stamped t1\|f\|t$/m, 'rows as the fences allow');
like($out_c, qr/^fencing_reject_stale\|t\|fence\\000error\\000\|\d+$/m,
	'protect installed fencing.reject_stale with the column and mode');

# stale tokens after the hostile run, from a clean session, are still stale
app_fails(q{SELECT fencing.check_fence('resource x_h', 1)}, 'FN001',
	'watermark written under the hostile path still rejects a stale token');

#
# search_path pinning in the catalog.
#
my $unpinned = $node->safe_psql(
	'postgres', q{
SELECT coalesce(string_agg(p.oid::regprocedure::text, ', '), 'none')
FROM pg_proc p
JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid
	AND d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'fencing'
WHERE (p.prolang <> (SELECT oid FROM pg_language WHERE lanname = 'c') OR p.prosecdef)
  AND NOT EXISTS (SELECT 1 FROM unnest(p.proconfig) AS c WHERE c LIKE 'search\_path=%')
});
is($unpinned, 'none',
	'every non-C and every SECURITY DEFINER function of the extension pins search_path');
note 'functions of the extension by language: '
  . $node->safe_psql(
	'postgres', q{
SELECT string_agg(l.lanname || ' ' || n, ', ') FROM (
	SELECT p.prolang, count(*) AS n FROM pg_proc p
	JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid
		AND d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
	JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'fencing'
	GROUP BY p.prolang) AS x JOIN pg_language l ON l.oid = x.prolang});
is($node->safe_psql('postgres',
		"SELECT count(*) FROM pg_proc WHERE oid = 'fencing.check_fence(text,bigint)'::regprocedure AND prosecdef AND proconfig @> ARRAY['search_path=pg_catalog, pg_temp']"),
	'1', 'check_fence is SECURITY DEFINER with search_path pg_catalog, pg_temp');

$node->stop;
done_testing();
