
# Copyright (c) 2026, the fencing developers
#
# 015_tokens_new_cluster.pl -- T4: a brand-new cluster continues above the
# old cluster's tokens without a manual step: after pg_dump/pg_restore,
# after pg_upgrade, and after point-in-time recovery to a moment before the
# source reserved its last block.  Nothing token-related is in the dump,
# copied by pg_upgrade or replayed past the recovery target: the clock floor
# carries it (tokens drawn at an ordinary rate do not outrun the clock).

use strict;
use warnings;

use Cwd qw(getcwd);
use File::Temp qw(tempdir);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $tmp = tempdir(CLEANUP => 1);

my $old = PostgreSQL::Test::Cluster->new('old');
$old->init;
$old->append_conf('postgresql.conf', "shared_preload_libraries = 'fencing'");
$old->start;
$old->safe_psql('postgres', 'CREATE EXTENSION fencing');
$old->safe_psql('postgres',
	'CREATE TABLE invoice (id int PRIMARY KEY, fence bigint NOT NULL)');
$old->safe_psql('postgres',
	'INSERT INTO invoice SELECT g, fencing.next_token() FROM generate_series(1, 100) g');
my $old_last = $old->safe_psql('postgres',
	'SELECT max(t) FROM (SELECT fencing.next_token() AS t FROM generate_series(1, 200000)) s');
$old_last = $old->safe_psql('postgres', 'SELECT fencing.next_token()');
like($old_last, qr/^\d+$/, 'the old cluster issued tokens');

# pg_dump / pg_restore into a brand-new cluster.
my $dump = "$tmp/old.dump";
command_ok([ 'pg_dump', '-Fc', '-d', $old->connstr('postgres'), '-f', $dump ],
	'pg_dump of the old cluster');

my $restored = PostgreSQL::Test::Cluster->new('restored');
$restored->init;
$restored->append_conf('postgresql.conf', "shared_preload_libraries = 'fencing'");
$restored->start;
ok(!-f $restored->data_dir . '/fencing.state', 'the new cluster has no fencing.state');
command_ok(
	[ 'pg_restore', '--exit-on-error', '-d', $restored->connstr('postgres'), $dump ],
	'pg_restore into the new cluster');
is($restored->safe_psql('postgres',
		"SELECT extversion FROM pg_extension WHERE extname = 'fencing'"),
	'1.1', 'the extension was restored');
my $max_fence = $restored->safe_psql('postgres', 'SELECT max(fence) FROM invoice');
my $first = $restored->safe_psql('postgres', 'SELECT fencing.next_token()');
cmp_ok($first, '>', $old_last, "restored: the first token is above the old cluster's last");
cmp_ok($first, '>', $max_fence, 'restored: the first token is above every fence in the data');
$restored->stop;

# pg_upgrade (same major version, a fresh data directory).
$old->stop;
my $upgraded = PostgreSQL::Test::Cluster->new('upgraded');
$upgraded->init;
$upgraded->append_conf('postgresql.conf', "shared_preload_libraries = 'fencing'");
my $bindir = $old->config_data('--bindir');
{
	my $home = getcwd();
	my $cwd = "$tmp/upgrade";
	mkdir $cwd or die "could not create $cwd: $!";
	chdir $cwd or die "could not chdir to $cwd: $!";
	command_ok(
		[
			'pg_upgrade', '--no-sync',
			'-d', $old->data_dir, '-D', $upgraded->data_dir,
			'-b', $bindir, '-B', $bindir,
			'-s', $old->host, '-p', $old->port, '-P', $upgraded->port
		],
		'pg_upgrade of the old cluster');
	chdir $home or die "could not chdir back to $home: $!";
}
$upgraded->start;
is($upgraded->safe_psql('postgres', 'SELECT count(*) FROM invoice'),
	'100', 'the upgraded cluster has the data');
my $upgraded_first = $upgraded->safe_psql('postgres', 'SELECT fencing.next_token()');
cmp_ok($upgraded_first, '>', $old_last,
	"upgraded: the first token is above the old cluster's last");
$upgraded->stop;

# Point-in-time recovery to a moment before a reservation: the recovered
# cluster never saw the later block, yet continues above its tokens.
my $source = PostgreSQL::Test::Cluster->new('pitr_source');
$source->init(has_archiving => 1, allows_streaming => 1);
$source->append_conf('postgresql.conf', "shared_preload_libraries = 'fencing'");
$source->start;
$source->safe_psql('postgres', 'CREATE EXTENSION fencing');
$source->safe_psql('postgres',
	'SELECT count(fencing.next_token()) FROM generate_series(1, 10000)');
$source->backup('pitr_base');
$source->safe_psql('postgres',
	'SELECT count(fencing.next_token()) FROM generate_series(1, 10000)');
$source->safe_psql('postgres', "SELECT pg_create_restore_point('before_new_block')");
my $known_limit = $source->safe_psql('postgres',
	'SELECT reserved_limit FROM fencing.status()');

# A restart makes the next call reserve a new block, after the restore point.
$source->restart;
my $source_last = $source->safe_psql('postgres',
	'SELECT max(t) FROM (SELECT fencing.next_token() AS t FROM generate_series(1, 200000)) s');
cmp_ok($source_last, '>', $known_limit,
	'the source drew tokens from a block reserved after the restore point');
my $walfile = $source->safe_psql('postgres',
	'SELECT pg_walfile_name(pg_current_wal_lsn())');
$source->safe_psql('postgres', 'SELECT pg_switch_wal()');
$source->poll_query_until('postgres',
	"SELECT '$walfile' <= last_archived_wal FROM pg_stat_archiver")
  or die 'WAL was not archived';
$source->stop;

my $recovered = PostgreSQL::Test::Cluster->new('pitr_recovered');
$recovered->init_from_backup($source, 'pitr_base', has_restoring => 1);
$recovered->append_conf('postgresql.conf',
	"recovery_target_name = 'before_new_block'\nrecovery_target_action = 'promote'");
$recovered->start;
$recovered->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
  or die 'point-in-time recovery did not finish';
my $recovered_latest = $recovered->safe_psql('postgres', 'SELECT fencing.latest_token()');
cmp_ok($recovered_latest, '<', $source_last,
	'the recovered cluster does not know the later block (precondition)');
my $recovered_first = $recovered->safe_psql('postgres', 'SELECT fencing.next_token()');
cmp_ok($recovered_first, '>', $source_last,
	'point-in-time recovery: the first token is above every token of the source');
$recovered->stop;

done_testing();
