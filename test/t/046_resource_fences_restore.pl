
# Copyright (c) 2026, the fencing developers
#
# 046_resource_fences_restore.pl -- fencing.resource_fences is guarded by a
# trigger of the extension (only check_fence raises a watermark, nothing
# lowers or removes one, a new row needs an issued token), and pg_dump and
# pg_restore still carry the watermarks into a brand-new cluster without a
# manual step (DESIGN.md T4, F8): in the custom format restored with
# pg_restore, and as INSERT statements restored with psql.  The new
# cluster has issued no token when the rows arrive; its first token (the
# fresh start) lifts latest_token() above them.  After the restore the
# guard is in force, and the restored watermarks still reject stale tokens.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $tmp = PostgreSQL::Test::Utils::tempdir;

sub new_node
{
	my ($name, $conf) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init;
	$node->append_conf('postgresql.conf',
		"shared_preload_libraries = 'fencing'\n" . ($conf // ''));
	$node->start;
	return $node;
}

my $watermarks = 'SELECT resource || \' \' || fence FROM fencing.resource_fences ORDER BY resource';

my $old = new_node('old');
$old->safe_psql(
	'postgres', q{
CREATE EXTENSION fencing;
SELECT fencing.check_fence('invoice-run:2026-10', fencing.next_token());
SELECT fencing.check_fence('Nightly Report', fencing.next_token());
SELECT fencing.check_fence('invoice-run:2026-10', fencing.next_token());
});
my $rows = $old->safe_psql('postgres', $watermarks);
my $max_fence = $old->safe_psql('postgres', 'SELECT max(fence) FROM fencing.resource_fences');
my @dumped = split /\n/, $rows;
is(scalar @dumped, 2, 'the old cluster has two watermarks');

my ($ret, $stdout, $stderr) = $old->psql('postgres',
	'DELETE FROM fencing.resource_fences', extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($stderr, qr/42501.*cannot delete from fencing.resource_fences/,
	'a superuser cannot delete a watermark (42501)');

my $custom = "$tmp/old.dump";
my $inserts = "$tmp/old.sql";
command_ok([ 'pg_dump', '-Fc', '-d', $old->connstr('postgres'), '-f', $custom ],
	'pg_dump -Fc of the old cluster');
command_ok([ 'pg_dump', '--inserts', '-d', $old->connstr('postgres'), '-f', $inserts ],
	'pg_dump --inserts of the old cluster');
$old->stop;

# Brand-new clusters with the real tolerance, so that their fresh start is
# the one a user gets.
for my $case ([ 'custom', "pg_restore" ], [ 'inserts', "psql" ])
{
	my ($format, $tool) = @$case;
	my $new = new_node("new_$format", "fencing.clock_tolerance = '1s'");
	# another database asks: the restore's database starts empty
	$new->safe_psql('postgres', 'CREATE DATABASE probe');
	$new->safe_psql('probe', 'CREATE EXTENSION fencing');
	cmp_ok($new->safe_psql('probe', 'SELECT fencing.latest_token()'),
		'<', $max_fence,
		"$format: the new cluster has issued no token as high as the dumped watermarks (precondition)");
	if ($format eq 'custom')
	{
		command_ok(
			[ 'pg_restore', '--exit-on-error', '-d', $new->connstr('postgres'), $custom ],
			"$format: $tool into the new cluster, nothing else");
	}
	else
	{
		command_ok(
			[ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', $new->connstr('postgres'),
			  '-f', $inserts ],
			"$format: $tool into the new cluster, nothing else");
	}
	is($new->safe_psql('postgres', $watermarks), $rows,
		"$format: the watermarks are restored unchanged");
	cmp_ok($new->safe_psql('postgres', 'SELECT fencing.next_token()'),
		'>', $max_fence, "$format: the first token is above every restored watermark");

	($ret, $stdout, $stderr) = $new->psql('postgres',
		"UPDATE fencing.resource_fences SET fence = 1",
		extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	like($stderr, qr/42501.*cannot update fencing.resource_fences/,
		"$format: the restored table is guarded (42501)");
	($ret, $stdout, $stderr) = $new->psql('postgres',
		"SELECT fencing.check_fence('invoice-run:2026-10', $max_fence - 1)",
		extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	like($stderr, qr/FN001/, "$format: a token below a restored watermark is stale (FN001)");
	$new->stop;
}

done_testing();
