
# Copyright (c) 2026, the fencing developers
#
# 033_lock_long_timeouts.pl -- a wait's timeout is honoured whatever its
# length: lock(name, '30 days') and lock_all(names, '30 days') still wait
# after 25 days (past lock_timeout's range of 2147483647 ms, about 24.8
# days), and on PostgreSQL 17 and later lock(name, 'infinity') waits
# without a bound, as NULL does.
#
# Nobody waits 25 days: the server starts on a clock of libfaketime's 25
# days behind the real one, and the test puts it right while the calls
# wait.  PostgreSQL's timeouts are checked against the clock whenever one
# of them goes off, and deadlock_timeout (8 s) goes off during each wait,
# so a lock timeout due within 25 days of the wait's start fires then.
# Each call must still be waiting afterwards, and be granted when the
# holder commits.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use FencingTest qw(libfaketime start_with_fake_clock set_fake_offset);
use Time::HiRes qw(sleep);

plan skip_all => 'libfaketime is not installed (apt-get install libfaketime)'
  unless libfaketime();

my $clock = PostgreSQL::Test::Utils::tempdir() . '/offset.faketime';
PostgreSQL::Test::Utils::append_to_file($clock, "-2160000\n");
my $node = PostgreSQL::Test::Cluster->new('long_timeouts');
$node->init;
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'fencing'\n" . "deadlock_timeout = '8s'\n");
start_with_fake_clock($node, file => $clock);
$node->safe_psql('postgres', 'CREATE EXTENSION fencing');
my $version = $node->safe_psql('postgres', 'SHOW server_version_num');

sub sql { return $node->safe_psql('postgres', $_[0]); }

my $h = $node->background_psql('postgres');
$h->query_safe('BEGIN');
$h->query_safe("SELECT fencing.try_lock_all(ARRAY['long 1', 'long 2', 'long 3'])");

my @calls = (
	[ 'lock() with a timeout of 30 days', "fencing.lock('long 1', '30 days')", 'long 1' ],
	[
		'lock_all() with a timeout of 30 days',
		"fencing.lock_all(ARRAY['long 2'], '30 days')", 'long 2'
	],);
push @calls, [ "lock() with a timeout of 'infinity'", "fencing.lock('long 3', 'infinity')", 'long 3' ]
  if $version >= 170000;

my @waiters;
for my $call (@calls)
{
	my ($label, $sql, $name) = @$call;
	my $w = $node->background_psql('postgres', on_error_stop => 0);
	my $pid = $w->query_safe('SELECT pg_backend_pid()');
	$w->query_safe('BEGIN');
	$w->query_until(qr/started/, "\\echo started\nSELECT $sql IS NOT NULL AS granted;\n");
	ok( $node->poll_query_until(
			'postgres',
			"SELECT count(*) = 1 FROM fencing.locks WHERE pid = $pid AND name = '$name' AND NOT granted"),
		"$label: waits");
	push @waiters, { label => $label, session => $w, pid => $pid, name => $name };
}

# 25 days later, after every wait's deadlock_timeout went off.
set_fake_offset($clock, '+0');
sleep(10);
for my $w (@waiters)
{
	is( sql("SELECT count(*) FROM fencing.locks
			 WHERE pid = $w->{pid} AND name = '$w->{name}' AND NOT granted"),
		1, "$w->{label}: still waits 25 days later");
}

$h->query_safe('COMMIT');
for my $w (@waiters)
{
	my ($granted) = split /\n/, $w->{session}->query("SELECT 'collected'");
	is($granted, 't', "$w->{label}: granted when the holder commits");
	$w->{session}->quit;
}

$h->quit;
$node->stop;
done_testing();
