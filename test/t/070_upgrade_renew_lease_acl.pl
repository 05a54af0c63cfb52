
# Copyright (c) 2026, the fencing developers
#
# 070_upgrade_renew_lease_acl.pl -- the update from 1.2 to 1.3 keeps the
# privileges the owner gave renew_lease(text, bigint, interval) (the
# default of its ttl is taken out of its catalog entry in place), and
# when they are not the default ones it says, in a WARNING, that the new
# renew_lease(text, bigint) has the default privileges, and how to give it
# the same (fencing--1.2--1.3.sql).  It names, in a WARNING too, each role
# that may execute check_fence but not use_lease, which 1.3 revokes from
# PUBLIC, with the GRANT it needs.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('review_upgrade_acl');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'fencing'\n");
$node->start;
sub sql { return $node->safe_psql('postgres', $_[0]); }

sql("CREATE EXTENSION fencing VERSION '1.2'");
sql('CREATE ROLE lease_job LOGIN');
sql('GRANT EXECUTE ON FUNCTION fencing.check_fence(text, bigint) TO lease_job');
sql('REVOKE EXECUTE ON FUNCTION fencing.renew_lease(text, bigint, interval) FROM PUBLIC');
sql('GRANT EXECUTE ON FUNCTION fencing.renew_lease(text, bigint, interval) TO lease_job');
is(sql("SELECT has_function_privilege('public', 'fencing.renew_lease(text, bigint, interval)', 'EXECUTE')"),
	'f', '1.2: PUBLIC may not renew, as the owner set');

my ($rc, $out, $err) = $node->psql('postgres', 'ALTER EXTENSION fencing UPDATE');
is($rc, 0, 'the update to 1.3 runs');

is(sql("SELECT has_function_privilege('public', 'fencing.renew_lease(text, bigint, interval)', 'EXECUTE')"),
	'f', 'the three-argument renew_lease keeps the owner\'s REVOKE from PUBLIC');
is(sql("SELECT has_function_privilege('lease_job', 'fencing.renew_lease(text, bigint, interval)', 'EXECUTE')"),
	't', 'and the owner\'s GRANT to lease_job');
is(sql("SELECT pronargdefaults FROM pg_proc WHERE oid = 'fencing.renew_lease(text, bigint, interval)'::regprocedure"),
	'0', 'its default is gone');
like($err, qr/WARNING:  fencing.renew_lease\(text, bigint\) is new, with the default privileges/,
	'the update says that the new renew_lease has the default privileges');
like($err, qr/HINT:  To give the new function the same privileges/, 'and how to give it the same');
like($err, qr/WARNING:  role lease_job may execute fencing.check_fence but no longer fencing.use_lease/,
	'the update names the role that ran lease jobs with check_fence');
like($err, qr/HINT:  If the role runs lease jobs: GRANT EXECUTE ON FUNCTION fencing.use_lease\(text, bigint\) TO lease_job;/,
	'with the grant it needs');
$node->stop;
done_testing();
