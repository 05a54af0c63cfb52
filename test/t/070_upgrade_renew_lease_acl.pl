
# Copyright (c) 2026, the fencing developers
#
# 075_review_upgrade_acl.pl -- ALTER EXTENSION fencing UPDATE from 1.2 to
# 1.3 drops renew_lease(text, bigint, interval) and creates it again
# (fencing--1.2--1.3.sql), and with it the privileges the owner gave it:
# a REVOKE from PUBLIC is undone and a role's GRANT is lost, silently.
# The update's NOTICE speaks of use_lease only.  Privileges on an
# extension's functions are the owner's (pg_dump keeps them apart from
# the extension's own, pg_init_privs); an update should keep them, or
# refuse, or say so.

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
sql('REVOKE EXECUTE ON FUNCTION fencing.renew_lease(text, bigint, interval) FROM PUBLIC');
sql('GRANT EXECUTE ON FUNCTION fencing.renew_lease(text, bigint, interval) TO lease_job');
is(sql("SELECT has_function_privilege('public', 'fencing.renew_lease(text, bigint, interval)', 'EXECUTE')"),
	'f', '1.2: PUBLIC may not renew, as the owner set');

my ($rc, $out, $err) = $node->psql('postgres', 'ALTER EXTENSION fencing UPDATE');
is($rc, 0, 'the update to 1.3 runs');

my $public_may = sql("SELECT has_function_privilege('public', 'fencing.renew_lease(text, bigint, interval)', 'EXECUTE')
	OR has_function_privilege('public', 'fencing.renew_lease(text, bigint)', 'EXECUTE')");
ok($public_may eq 'f' || $err =~ /renew_lease/,
	'after the update PUBLIC may still not renew, or the update says that the privileges changed');
is(sql("SELECT count(*) FROM pg_proc WHERE proname = 'renew_lease' AND proacl IS NOT NULL"), '2',
	'both renew_lease functions carry the owner\'s privileges (lease_job\'s grant among them)');

$node->stop;
done_testing();
