
# Copyright (c) 2026, the fencing developers
#
# 064_leases_scale.pl -- the cost of one lease change does not grow with
# the number of leases held (LL8; src/locks/lease_store.c).
#
# With 20,000 leases held, the keeper writes the state file a slot per
# changed entry: what it writes for one renewal, and for 200, is bounded
# by a constant per change (a slot, the header, the WAL it flushes), not by
# the table.  Measured from the keeper's own I/O counters
# (/proc/PID/io: the bytes its write calls passed).  And the table stays
# right at that size: a restart brings back every lease, a lapse of many
# at once is noted and their entries dropped, and a full table is refused
# 53400.

use strict;
use warnings;

use FindBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep time);

use lib "$FindBin::RealBin/../perl";
use FencingTest qw(lease_keeper_pid);

my $held = 20000;

my $node = PostgreSQL::Test::Cluster->new('leases_scale');
$node->init;
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'fencing'\nfencing.max_leases = 20100\n");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION fencing');

sub sql { return $node->safe_psql('postgres', $_[0]); }

# The bytes the keeper's write calls have passed so far.
sub keeper_written
{
	my $pid = lease_keeper_pid($node) or die 'no keeper';
	open(my $fh, '<', "/proc/$pid/io") or die "cannot read /proc/$pid/io: $!";
	my ($wchar) = join('', <$fh>) =~ /^wchar:\s+(\d+)/m;
	close($fh);
	return $wchar;
}

# Wait until the keeper has written what changed: its counter moved past
# $from and then stood still for a while.
sub keeper_settles
{
	my ($from) = @_;
	my $deadline = time() + 60;
	my $last = keeper_written();
	my $still = 0;
	while (time() < $deadline)
	{
		sleep(0.1);
		my $now = keeper_written();
		$still = ($now == $last && $now > $from) ? $still + 1 : 0;
		$last = $now;
		return $last if $still >= 5;
	}
	die 'the keeper did not settle';
}

is(sql("SELECT count(fencing.acquire_lease('held ' || i, '1 hour')) FROM generate_series(1, $held) i"),
	$held, "$held leases are held");
my $settled = keeper_settles(0);

my $token = sql("SELECT token FROM fencing.leases WHERE name = 'held 1'");
sql("SELECT fencing.renew_lease('held 1', $token)");
my $after_one = keeper_settles($settled);
my $one = $after_one - $settled;
cmp_ok($one, '<', 64 * 1024,
	"one renewal among $held leases: the keeper writes $one bytes, under 64 kB");

sql("SELECT count(fencing.renew_lease(name, token)) FROM fencing.leases WHERE name IN (SELECT 'held ' || i FROM generate_series(1, 200) i)");
my $after_many = keeper_settles($after_one);
my $many = $after_many - $after_one;
cmp_ok($many, '<', 200 * 4096,
	"200 renewals among $held leases: the keeper writes $many bytes, under 4 kB each");

# the table holds, at this size
$node->restart;
is(sql("SELECT count(*) FROM fencing.leases"), $held, 'a restart brings back every lease');
is(sql("SELECT count(fencing.renew_lease(name, token)) FROM fencing.leases"), $held,
	'and each renews');
my ($rc, $out, $err) = $node->psql('postgres',
	"SELECT count(fencing.acquire_lease('more ' || i, '1 hour')) FROM generate_series(1, 200) i");
like($err, qr/too many fencing leases held at once/, 'a full table is refused 53400');
sql("SELECT count(fencing.break_lease(name)) FROM fencing.leases WHERE name LIKE 'more %'");
sql("SELECT count(fencing.renew_lease(name, token, '1 second')) FROM fencing.leases WHERE name LIKE 'held 1%'");
my $short = sql("SELECT count(*) FROM fencing.leases WHERE name LIKE 'held 1%'");
sleep(1.5);
ok($node->poll_query_until('postgres',
		"SELECT count(*) = $held - $short FROM fencing.leases"),
	"the $short leases that lapse at once are noted and dropped");
like(sql("SELECT fencing.acquire_lease('more', '1 hour')"), qr/^\d+$/,
	'their entries are free again');

$node->stop;
done_testing();
