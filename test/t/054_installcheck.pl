
# Copyright (c) 2026, the fencing developers
#
# 054_installcheck.pl -- "make installcheck" is safe on a server people care
# about.  It runs the pg_regress and isolation suites (and its cleanup)
# against a throwaway server set up as a user's could be: initdb's
# postgresql.conf with only shared_preload_libraries = 'fencing' added (no
# test/regress.conf, no test/tap.conf, so fencing.clock_tolerance is its
# default 1 s and max_prepared_transactions 0), and checks that it passes
# and leaves the server as it found it:
#
#   - the token counter within the lead bound (2 ms) of the clock floor: no
#     test moved the cluster-wide counter ahead of the clock, which would
#     void the lead bound (and T4's protection) for as long as the lead;
#   - the same databases (contrib_regression, isolation_regression and the
#     suites' own are dropped), the same roles, the same extensions in the
#     database postgres;
#   - the same settings (pg_settings, pg_file_settings, postgresql.auto.conf,
#     ALTER ROLE/DATABASE ... SET), no prepared transaction, no replication
#     slot, fencing.stats not reset.

use strict;
use warnings;

use File::Basename qw(dirname);
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $root = $ENV{TESTDIR} // '.';

# A copy of what make installcheck reads, so that its output files
# (results/, output_iso/, regression.diffs) stay out of the tree.
my $tree = PostgreSQL::Test::Utils::tempdir();
system_or_bail('cp', '-a',
	(map { "$root/$_" } qw(Makefile fencing.control sql expected)), $tree);
system_or_bail('mkdir', '-p', "$tree/test");
system_or_bail('cp', '-a', "$root/test/isolation", "$root/test/installcheck", "$tree/test/");
system_or_bail('rm', '-rf', "$tree/test/installcheck/output");

# The server: initdb's configuration, the connection settings the test
# framework needs, and the preload.  Nothing else: PostgreSQL::Test::Cluster
# adds its own settings (fsync = off, wal_level = minimal, ...) and
# TEMP_CONFIG's, and they are cut off again here.
my $node = PostgreSQL::Test::Cluster->new('installcheck');
{
	delete local $ENV{TEMP_CONFIG};
	$node->init;
}
my $conf_file = $node->data_dir . '/postgresql.conf';
my $conf = slurp_file($conf_file);
$conf =~ s/\n# Added by PostgreSQL::Test::Cluster\.pm\n.*//s
  or die "no settings of PostgreSQL::Test::Cluster found in $conf_file";
my $host = $node->host;
my $port = $node->port;
open(my $fh, '>', $conf_file) or die "could not write $conf_file: $!";
print $fh $conf, <<"EOC";

# 054_installcheck.pl: how to reach the server, and the preload
port = $port
unix_socket_directories = '$host'
listen_addresses = ''
shared_preload_libraries = 'fencing'
EOC
close($fh);
$node->start;

is( $node->safe_psql(
		'postgres',
		"SELECT count(*) FROM pg_settings WHERE name LIKE 'fencing.%' AND source <> 'default'"),
	'0',
	'every fencing setting is at its default');
is($node->safe_psql('postgres', 'SHOW fencing.clock_tolerance'), '1s',
	'fencing.clock_tolerance is its default');
is($node->safe_psql('postgres', 'SHOW max_prepared_transactions'), '0',
	'max_prepared_transactions is its default');

# fencing as a user would have it in a database of theirs, with a token
# issued (a new cluster's first token waits about fencing.clock_tolerance).
$node->safe_psql('postgres', 'CREATE EXTENSION fencing');
$node->safe_psql('postgres', 'SELECT fencing.next_token()');

# What the server looks like, as one string per aspect.
my %queries = (
	databases => 'SELECT string_agg(datname, \',\' ORDER BY datname) FROM pg_database',
	roles => 'SELECT string_agg(rolname, \',\' ORDER BY rolname) FROM pg_roles',
	extensions_in_postgres =>
	  'SELECT string_agg(extname || \' \' || extversion, \',\' ORDER BY extname) FROM pg_extension',
	settings => 'SELECT string_agg(name || \'=\' || coalesce(setting, \'\') || \' (\' || source || \')\', E\'\n\' ORDER BY name) FROM pg_settings',
	file_settings => 'SELECT string_agg(sourcefile || \':\' || name || \'=\' || setting, E\'\n\' ORDER BY sourcefile, seqno) FROM pg_file_settings',
	role_and_database_settings =>
	  'SELECT count(*) || \' \' || coalesce(string_agg(array_to_string(setconfig, \',\'), \';\' ORDER BY setdatabase, setrole), \'\') FROM pg_db_role_setting',
	prepared_transactions => 'SELECT count(*) FROM pg_prepared_xacts',
	replication_slots => 'SELECT count(*) FROM pg_replication_slots',
	tablespaces => 'SELECT string_agg(spcname, \',\' ORDER BY spcname) FROM pg_tablespace',
	fencing_stats_reset => 'SELECT stats_reset FROM fencing.stats',);
sub snapshot
{
	my %s = map { $_ => $node->safe_psql('postgres', $queries{$_}) } keys %queries;
	$s{auto_conf} = slurp_file($node->data_dir . '/postgresql.auto.conf');
	return \%s;
}
my $before = snapshot();

# make installcheck, as a user runs it: PG* variables name the server.
my $pg_config = $ENV{PG_CONFIG} // 'pg_config';
my ($out, $err) = ('', '');
my $ok;
{
	local $ENV{PGHOST} = $host;
	local $ENV{PGPORT} = $port;
	delete local $ENV{PGDATABASE};
	delete local $ENV{PGOPTIONS};
	$ok = IPC::Run::run([ 'make', '-C', $tree, 'installcheck', "PG_CONFIG=$pg_config" ],
		'>', \$out, '2>', \$err);
}
ok($ok, 'make installcheck passes on a server with default settings')
  or diag("stdout:\n$out\nstderr:\n$err\n"
	  . (-f "$tree/regression.diffs" ? slurp_file("$tree/regression.diffs") : '')
	  . (-f "$tree/output_iso/regression.diffs" ? slurp_file("$tree/output_iso/regression.diffs") : ''));
like($out, qr/regress install-check.*isolation install-check.*regress install-check/s,
	'it ran the regress suite, the isolation suite and the cleanup');
for my $name (map { s{.*/}{}r =~ s/\.spec$//r } glob("$root/test/isolation/specs/*.spec"))
{
	like($out, qr/\b\Q$name\E\b/, "the isolation spec $name ran");
}

# The server as it was found.
my $after = snapshot();
for my $aspect (sort keys %$before)
{
	is($after->{$aspect}, $before->{$aspect}, "the same $aspect after make installcheck");
}
my ($ahead, $latest_within) = split /\|/, $node->safe_psql('postgres',
	'SELECT tokens_ahead_of_clock, latest_token <= clock_floor + 2000000 FROM fencing.status()');
cmp_ok($ahead, '<=', 2_000_000,
	'the token counter is within the lead bound (2 ms) of the clock floor');
is($latest_within, 't', 'latest_token <= clock_floor + 2 ms');
is($node->safe_psql('postgres', 'SELECT fresh_start_pending FROM fencing.status()'),
	'f', 'no fresh start is pending');

$node->stop;
done_testing();
