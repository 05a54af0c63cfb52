
# Copyright (c) 2026, the fencing developers
#
# 072_review_role_share.pl -- the per-role share of the lease table
# (fencing.max_leases_per_role, a quarter of fencing.max_leases by
# default; src/locks/leases.c, lease_check_room) does not keep a full
# table charged to the roles that fill it (LL7'): four roles, each within
# its share, fill the table, and every other role and database is then
# refused with 53400.
#
# fencing.max_leases = 16: each role may hold 4.  Roles filler1..filler4
# take 4 leases each; role bystander, which holds none, then asks for one
# in another database.

use strict;
use warnings;

use FindBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('review_role_share');
$node->init;
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'fencing'\nfencing.max_leases = 16\n");
$node->start;
sub sql { return $node->safe_psql('postgres', $_[0]); }
sql('CREATE EXTENSION fencing');
sql('CREATE DATABASE other');
$node->safe_psql('other', 'CREATE EXTENSION fencing');

for my $r (1 .. 4)
{
	sql("CREATE ROLE filler$r LOGIN");
	for my $n (1 .. 4)
	{
		my $t = $node->safe_psql('postgres',
			"SELECT fencing.acquire_lease('f$r.$n', '1 hour')",
			extra_params => [ '-U', "filler$r" ]);
		like($t, qr/^\d+$/, "filler$r takes lease $n of its share");
	}
}
sql('CREATE ROLE bystander LOGIN');

my ($rc, $out, $err) = $node->psql('other',
	"\\set VERBOSITY verbose\nSELECT fencing.acquire_lease('mine', '1 hour')",
	extra_params => [ '-U', 'bystander' ]);
unlike($err, qr/53400/, 'a role that holds no lease is not refused 53400 (LL7\')');
like($out, qr/^\d+$/, 'it takes its lease');

$node->stop;
done_testing();
