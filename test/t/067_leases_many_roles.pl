
# Copyright (c) 2026, the fencing developers
#
# 067_leases_many_roles.pl -- roles that each stay within their share of
# the lease table cannot together take it from a role that holds none
# (LL7'; src/locks/leases.c, lease_check_room): the last eighth of the
# table is kept for roles that hold fewer than two leases.
#
# fencing.max_leases = 16: each role may hold 4, the last 2 entries are
# the reserve.  Roles filler1..filler4 take what they can; role
# bystander, which holds none, then takes a lease in another database.

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

my $taken = 0;
my $reserve_refusals = 0;
for my $r (1 .. 4)
{
	sql("CREATE ROLE filler$r LOGIN");
	for my $n (1 .. 4)
	{
		my ($rc, $out, $err) = $node->psql('postgres',
			"\\set VERBOSITY verbose\nSELECT fencing.acquire_lease('f$r.$n', '1 hour')",
			extra_params => [ '-U', "filler$r" ]);
		$taken++ if $out =~ /^\d+$/;
		$reserve_refusals++ if $err =~ /53400.*kept for roles that hold fewer than 2 leases/s;
	}
}
is($taken, 14, 'the fillers take the table but its reserve');
cmp_ok($reserve_refusals, '>=', 1, 'a filler is refused the reserve, 53400, saying why');
sql('CREATE ROLE bystander LOGIN');

my ($rc, $out, $err) = $node->psql('other',
	"\\set VERBOSITY verbose\nSELECT fencing.acquire_lease('mine', '1 hour')",
	extra_params => [ '-U', 'bystander' ]);
unlike($err, qr/53400/, 'a role that holds no lease is not refused 53400 (LL7\')');
like($out, qr/^\d+$/, 'it takes its lease');
($rc, $out, $err) = $node->psql('postgres', "SELECT fencing.acquire_lease('mine too', '1 hour')",
	extra_params => [ '-U', 'bystander' ]);
like($out, qr/^\d+$/, 'and a second one from the reserve');

$node->stop;
done_testing();
