
# Copyright (c) 2026, the fencing developers
#
# 072_leases_keeper_pace.pl -- a stream of lease changes and of lapses
# does not wake the lease keeper once per change (T5: no signal per call;
# src/locks/lease_store.c).
#
# The keeper writes the state file and sweeps the table at most every
# 20 ms.  Measured from the kernel's count of the keeper's voluntary
# context switches (/proc/PID/status): each wake-up from its latch wait
# is one.  Two streams, each about a second long:
#
#   - acquire + release cycles in a loop: every cycle changes the table
#     twice;
#   - 2,000 leases whose expiries are spread over a second: every lapse
#     is an event the sweep could wake for.
#
# Over a stream of S seconds the keeper may wake twice per 20 ms (a write
# and a sweep) and a few times besides; once per change or per lapse is
# thousands.

use strict;
use warnings;

use FindBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep time);

use lib "$FindBin::RealBin/../perl";
use FencingTest qw(lease_keeper_pid);

my $node = PostgreSQL::Test::Cluster->new('leases_keeper_pace');
$node->init;
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'fencing'\nfencing.max_leases = 4096\n"
	  . "fencing.max_leases_per_role = 4096\nfencing.lock_delay = 0\n");
$node->start;
sub sql { return $node->safe_psql('postgres', $_[0]); }
sql('CREATE EXTENSION fencing');

my $keeper = lease_keeper_pid($node);
ok(defined $keeper, 'the keeper runs');

sub keeper_wakeups
{
	open(my $fh, '<', "/proc/$keeper/status") or die "cannot read /proc/$keeper/status: $!";
	my ($n) = join('', <$fh>) =~ /^voluntary_ctxt_switches:\s+(\d+)/m;
	close($fh);
	return $n;
}

# The most wake-ups a paced keeper has over $seconds.
sub paced_bound
{
	my ($seconds) = @_;
	return int(2 * $seconds / 0.020) + 20;
}

# A stream of changes: acquire + release cycles for a second.
my $before = keeper_wakeups();
my $started = time();
my $cycles = sql(
	q{DO $$
	DECLARE
		until timestamptz := clock_timestamp() + interval '1 second';
		n int := 0;
	BEGIN
		WHILE clock_timestamp() < until LOOP
			PERFORM fencing.release_lease('c' || n, fencing.acquire_lease('c' || n, '1 minute'));
			n := n + 1;
		END LOOP;
		PERFORM pg_catalog.set_config('pace.cycles', n::text, false);
	END $$;
	SELECT pg_catalog.current_setting('pace.cycles')});
my $elapsed = time() - $started;
my $woken = keeper_wakeups() - $before;
cmp_ok($cycles, '>=', 1000, "$cycles acquire + release cycles in a second");
cmp_ok($woken, '<=', paced_bound($elapsed),
	sprintf('%d changes in %.2f s woke the keeper %d times (paced: at most %d)',
		2 * $cycles, $elapsed, $woken, paced_bound($elapsed)));

# A stream of lapses: 2,000 leases of ttl 1.5 ms, 2 ms, ... 1 s.
sql(
	"SELECT count(fencing.acquire_lease('l' || i, interval '1 millisecond' + i * interval '0.5 milliseconds'))
	 FROM generate_series(1, 2000) i");
$before = keeper_wakeups();
$started = time();
sleep(1.2);
$elapsed = time() - $started;
$woken = keeper_wakeups() - $before;
cmp_ok($woken, '<=', paced_bound($elapsed),
	sprintf('2,000 lapses over a second woke the keeper %d times in %.2f s (paced: at most %d)',
		$woken, $elapsed, paced_bound($elapsed)));

# The sweep still notes every lapse, within its pace.
my $deadline = time() + 10;
sleep(0.05) while sql("SELECT leases_lapsed FROM fencing.stats") < 2000 && time() < $deadline;
is(sql("SELECT leases_lapsed FROM fencing.stats"), '2000',
	'every lapse was noted');
is(sql("SELECT count(*) FROM fencing.leases WHERE name LIKE 'l%'"), '0',
	'and no lapsed lease is listed');

$node->stop;
done_testing();
