
# Copyright (c) 2026, the fencing developers
#
# 044_lock_delay_restart.pl -- the postmaster carries lock delays over a
# crash restart and a server restart without trusting what it reads: at a
# crash restart the table of delays in shared memory may hold whatever a
# dying backend left there.  A test module (test/tools/lock_delay_poke.c)
# writes such values into the table: a start time ten years ahead (no
# restored delay may last longer than fencing.lock_delay from the restart),
# and a count and a capacity far beyond the table (the postmaster must read
# no further than the table it made).  After each crash restart the server
# is back, the delays of the locks held at the crash are in force, and no
# delay ends later than fencing.lock_delay from now.

use strict;
use warnings;

use File::Temp qw(tempdir);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use FindBin;
use lib "$FindBin::RealBin/../perl";
use FencingTest qw(holding_session terminate_session);

my $tmp = tempdir(CLEANUP => 1);
chmod(0755, $tmp);
my $includedir = `pg_config --includedir-server`;
chomp $includedir;
system('gcc', '-shared', '-fPIC', "-I$includedir", "-I$FindBin::RealBin/../../src",
	"$FindBin::RealBin/../tools/lock_delay_poke.c", '-o', "$tmp/lock_delay_poke.so") == 0
  or BAIL_OUT('could not compile test/tools/lock_delay_poke.c');

my $capacity = 16;
my $delay = 600;    # fencing.lock_delay, in seconds

my $node = PostgreSQL::Test::Cluster->new('lock_delay_restart');
$node->init;
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'fencing'\n"
	  . "fencing.lock_delay = '${delay}s'\n"
	  . "fencing.max_tracked_locks = $capacity\n"
	  . "restart_after_crash = on\n");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION fencing');
$node->safe_psql('postgres',
	"CREATE FUNCTION test_lock_delay_poke(int, int, timestamptz) RETURNS int
	 AS '$tmp/lock_delay_poke', 'test_lock_delay_poke' LANGUAGE C");

sub sql { return $node->safe_psql('postgres', $_[0]); }

sub holder { return holding_session($node, @_); }

sub lose_holder { terminate_session($node, holder(@_)); }

# Whether the server's log, from $offset on, says within a minute that the
# server accepts connections again; a postmaster that died says nothing.
sub back_after
{
	my ($offset) = @_;
	for (1 .. 600)
	{
		return 1 if $node->log_contains(
			qr/all server processes terminated; reinitializing.*database system is ready to accept connections/s,
			$offset);
		usleep(100_000);
	}
	return 0;
}

# Kill the backend of a holder of $name: the postmaster restarts the
# server, carrying the delays over.  Returns whether it came back.
sub crash_holding
{
	my ($name) = @_;
	my ($h, $pid) = holder($name);
	my $offset = -s $node->logfile;
	kill('KILL', $pid) or die "could not kill backend $pid: $!";
	my $back = back_after($offset);
	eval { $h->quit };
	return $back && $node->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()');
}

# name => seconds from now until the delay ends, for every delay in force.
sub delays_left
{
	my %left = map { split /\|/ } split /\n/, sql(
		"SELECT name, extract(epoch FROM delayed_until - clock_timestamp())
		 FROM fencing.locks WHERE delayed_until IS NOT NULL");
	return \%left;
}

# --- times: a start ten years ahead --------------------------------------
lose_holder('job times');
is(sql("SELECT test_lock_delay_poke(NULL, NULL, now() + interval '10 years')"),
	1, 'the delay of "job times" now says it started ten years from now');
ok(crash_holding('job crash 1'), 'crash restart: the server is back');
my $left = delays_left();
ok(defined $left->{'job crash 1'}, 'crash restart: the lock held at the crash is delayed');
ok(defined $left->{'job times'}, 'crash restart: the delay in force is carried over');
cmp_ok($left->{'job times'} // 1e9, '<=', $delay + 1,
	'crash restart: and ends no later than fencing.lock_delay from now');

# the same over a clean restart (the file the postmaster writes)
sql("SELECT test_lock_delay_poke(NULL, NULL, now() + interval '10 years')");
$node->restart;
$left = delays_left();
ok(defined $left->{'job times'}, 'restart: the delay is carried over');
cmp_ok($left->{'job times'} // 1e9, '<=', $delay + 1,
	'restart: and ends no later than fencing.lock_delay from now');

# --- counts: far beyond the table ----------------------------------------
sql('SELECT test_lock_delay_poke(1000000000, 1000000000, NULL)');
ok(crash_holding('job crash 2'), 'count and capacity far beyond the table: the server is back');
$left = delays_left();
ok(defined $left->{'job crash 2'}, 'the lock held at the crash is delayed');
ok(defined $left->{'job times'}, 'the delays in force are carried over');
cmp_ok(scalar(keys %$left), '<=', $capacity, 'and no more of them than the table holds');
is(sql("BEGIN; SELECT fencing.try_lock('job crash 2') IS NULL; COMMIT"),
	't', 'the delayed name is refused');
is(sql("BEGIN; SELECT fencing.try_lock('job unrelated') IS NOT NULL; COMMIT"),
	't', 'an unrelated name is granted');

$node->stop;
done_testing();
