
# Copyright (c) 2026, the fencing developers
#
# 056_leases_race.pl -- LL1 and LL6 for leases that outlive a transaction
# (src/locks/leases.c), with real processes.
#
# Part 1: 12 psql processes race for one name through a mix of
# acquire_lease (waiting), try_lock, lease and lock_all (waiting), 15 turns
# each (150 tries for try_lock and lease).  Whoever is granted the name checks that nobody else is inside: it
# takes a session advisory lock of its own without waiting, which a second
# holder at the same moment would find taken.  The waiting methods pause
# between turns, so that the others find the name free now and then.  No
# turn ever finds it taken,
# every method is granted turns, and every grant has its own token.
#
# Part 2: a waiter in acquire_lease(..., timeout) is woken when the lease
# is released (the hand-over latency, from the release to the waiter's
# grant, is measured on the server's clock and printed) and when it lapses
# (from its expiry); fencing.lock() waiting for a leased name is woken by
# the release too.  Nothing polls: a lapse wakes the waiter within a few
# milliseconds of the expiry, a release within a few of the release.
#
# Part 3 (LL6): with fencing.lock_delay set, a lapsed lease and a broken
# one leave their name ungrantable until the delay has passed (fencing.locks
# says until when), and the lapsed one's holder cannot renew it meanwhile;
# a released one frees it at once; fencing.clear_lock_delays() ends a
# lease's delay like any other.

use strict;
use warnings;

use FindBin;
use File::Temp qw(tempdir);
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

use lib "$FindBin::RealBin/../perl";
use FencingTest qw(run_gated_clients);

my $turns = 15;
my $inside_key = 4646;

my $node = PostgreSQL::Test::Cluster->new('leases_race');
$node->init;
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'fencing'\nmax_connections = 40");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION fencing');

sub sql { return $node->safe_psql('postgres', $_[0]); }

# Part 1.  One turn of each method; every granted turn prints "grant
# <method> <token> <alone>", where alone says whether the holder found
# nobody else inside.
my $inside = <<"EOS";
SELECT 'grant ' || :'method' || ' ' || :'tok' || ' ' || pg_try_advisory_lock($inside_key)::int AS line \\gset
\\echo :line
SELECT pg_sleep(0.002) \\g /dev/null
SELECT pg_advisory_unlock($inside_key) \\g /dev/null
EOS
# A turn of a method that does not wait: one try, then a short pause.
sub try_turn
{
	my ($call) = @_;
	return <<"EOS";
\\unset tok
BEGIN;
SELECT $call AS tok \\gset
\\if :{?tok}
$inside
\\endif
COMMIT;
SELECT pg_sleep(0.003) \\g /dev/null
EOS
}
my %turn = (
	acquire_lease => <<"EOS",
\\unset tok
SELECT fencing.acquire_lease('Race', '10 seconds', '5 seconds') AS tok \\gset
\\if :{?tok}
$inside
SELECT fencing.release_lease('race', :tok) \\g /dev/null
\\endif
EOS
	try_lock => try_turn("fencing.try_lock(' RACE')"),
	lease => try_turn("fencing.lease('race', '10 seconds')"),
	lock_all => <<"EOS");
\\unset tok
BEGIN;
SELECT fencing.lock_all(ARRAY['race', 'race partner ' || pg_backend_pid()], '5 seconds') AS tok \\gset
\\if :{?tok}
$inside
\\endif
COMMIT;
EOS

my @methods = sort keys %turn;
my $dir = tempdir(CLEANUP => 1);
my $gate = $node->background_psql('postgres');
$gate->query_safe('SELECT pg_advisory_lock(4600)');
my @clients;
for my $i (0 .. 11)
{
	my $method = $methods[ $i % @methods ];
	my $script = "$dir/client$i.sql";
	open(my $fh, '>', $script) or die "could not write $script: $!";
	print $fh "\\set method $method\n";
	print $fh "SELECT pg_advisory_lock_shared(4600) \\g /dev/null\n";
	print $fh "SELECT pg_advisory_unlock_shared(4600) \\g /dev/null\n";
	# a try that finds the name busy is a turn too: try more often
	print $fh $turn{$method} x ($method =~ /^(try_lock|lease)$/ ? 10 * $turns : $turns);
	close($fh);
	push @clients, { out => "$dir/client$i.out", err => "$dir/client$i.err" };
	$clients[-1]{handle} = IPC::Run::start(
		[
			'psql', '-X', '-A', '-t', '-q', '-v', 'ON_ERROR_STOP=1',
			'-d', $node->connstr('postgres'), '-f', $script
		],
		'<', \undef, '>', $clients[-1]{out}, '2>', $clients[-1]{err});
}
$node->poll_query_until('postgres',
	"SELECT count(*) = 12 FROM pg_locks
	 WHERE locktype = 'advisory' AND objid = 4600 AND NOT granted")
  or die 'the clients did not reach the start gate';
$gate->query_safe('SELECT pg_advisory_unlock(4600)');

my (%granted, %tokens, $overlaps, $failed);
$overlaps = 0;
$failed = 0;
for my $c (@clients)
{
	$failed++ unless $c->{handle}->finish;
	diag(slurp_file($c->{err})) if -s $c->{err};
	for my $line (split /\n/, slurp_file($c->{out}))
	{
		next unless $line =~ /^grant (\w+) (\d+) ([01])$/;
		$granted{$1}++;
		$tokens{$2}++;
		$overlaps++ if $3 eq '0';
	}
}
is($failed, 0, 'all 12 clients exited cleanly');
is($overlaps, 0, 'no holder ever found another holder inside');
for my $method (@methods)
{
	cmp_ok($granted{$method} // 0, '>', 0, "$method was granted the name");
}
my $grants = 0;
$grants += $_ for values %granted;
is(scalar(keys %tokens), $grants, "each of the $grants grants had its own token");
note(join(', ', map { "$_: " . ($granted{$_} // 0) } @methods));
is(sql('SELECT count(*) FROM fencing.leases'), 0, 'no lease is left');

# Part 2: hand-over.  Measured $rounds times each: the holder's release (or
# its lease's expiry) and the waiter's grant, by the server's clock.
my $rounds = 10;
my $holder = $node->background_psql('postgres');
my $waiter = $node->background_psql('postgres');

sub median
{
	my @s = sort { $a <=> $b } @_;
	return $s[ int(@s / 2) ];
}

# The waiter waits (in $call) for $name, which the holder holds with
# token $token; returns once it has been seen waiting.
sub start_waiting
{
	my ($call) = @_;
	$waiter->query_until(qr/waiting/,
		"\\echo waiting\nSELECT $call IS NOT NULL, extract(epoch FROM clock_timestamp());\n");
	$node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM pg_stat_activity
		 WHERE wait_event_type IN ('Extension', 'Lock') AND query LIKE '%handover%'")
	  or die 'the waiter does not wait';
}

# The waiter's answer, once its call returns: whether it got the name,
# and when.
sub waiter_result
{
	my ($line) = split /\n/, $waiter->query_safe("SELECT 'done'");
	return split /\|/, $line;
}

my (@after_release, @after_expiry, @lock_after_release);
for my $round (1 .. $rounds)
{
	my $token = $holder->query_safe(
		"SELECT fencing.acquire_lease('handover', '1 minute')");
	start_waiting("fencing.acquire_lease('handover', '1 minute', '10 seconds')");
	my $released = $holder->query_safe(
		"SELECT extract(epoch FROM clock_timestamp()) FROM fencing.release_lease('handover', $token)");
	my ($got, $at) = waiter_result();
	is($got, 't', "round $round: the waiter got the lease after the release") if $round == 1;
	push @after_release, ($at - $released) * 1000;
	$holder->query_safe(
		"SELECT fencing.release_lease('handover', max(token)) FROM fencing.leases WHERE name = 'handover'");

	# a lease of 300 ms that its holder never renews
	$token = $holder->query_safe(
		"SELECT fencing.acquire_lease('handover', '300 milliseconds')");
	my $expires = $holder->query_safe(
		"SELECT extract(epoch FROM expires_at) FROM fencing.leases WHERE token = $token");
	start_waiting("fencing.acquire_lease('handover', '1 minute', '10 seconds')");
	($got, $at) = waiter_result();
	is($got, 't', "round $round: the waiter got the lease after the lapse") if $round == 1;
	push @after_expiry, ($at - $expires) * 1000;
	cmp_ok($at, '>=', $expires, "round $round: not before the expiry");
	$holder->query_safe(
		"SELECT fencing.release_lease('handover', max(token)) FROM fencing.leases WHERE name = 'handover'");

	# fencing.lock() waiting for a leased name
	$token = $holder->query_safe(
		"SELECT fencing.acquire_lease('handover', '1 minute')");
	$waiter->query_safe('BEGIN');
	start_waiting("fencing.lock('handover', '10 seconds')");
	$released = $holder->query_safe(
		"SELECT extract(epoch FROM clock_timestamp()) FROM fencing.release_lease('handover', $token)");
	($got, $at) = waiter_result();
	is($got, 't', "round $round: fencing.lock() got the name after the release") if $round == 1;
	push @lock_after_release, ($at - $released) * 1000;
	$waiter->query_safe('COMMIT');
}
my $summary = sprintf(
	'hand-over latency, median (max) of %d: release to acquire_lease %.2f ms (%.2f), expiry to acquire_lease %.2f ms (%.2f), release to lock %.2f ms (%.2f)',
	$rounds, median(@after_release), (sort { $b <=> $a } @after_release)[0],
	median(@after_expiry), (sort { $b <=> $a } @after_expiry)[0],
	median(@lock_after_release), (sort { $b <=> $a } @lock_after_release)[0]);
diag($summary);
# Polling every 50 ms (pg_lease's interval) would put the medians near 25 ms.
cmp_ok(median(@after_release), '<', 10, 'a release wakes the waiting acquire_lease at once');
cmp_ok(median(@after_expiry), '<', 10, 'a lapse wakes the waiting acquire_lease at once');
cmp_ok(median(@lock_after_release), '<', 10, 'a release wakes the waiting fencing.lock() at once');

# Part 3 (LL6).
$node->safe_psql('postgres', "ALTER SYSTEM SET fencing.lock_delay = '1s'");
$node->reload;
$node->poll_query_until('postgres', "SELECT current_setting('fencing.lock_delay') = '1s'")
  or die 'fencing.lock_delay was not set';

sub try_lock_now
{
	return sql("BEGIN; SELECT fencing.try_lock('$_[0]') IS NOT NULL; COMMIT");
}

# Released: free at once.
my $t = sql("SELECT fencing.acquire_lease('ll6 released', '1 minute')");
sql("SELECT fencing.release_lease('ll6 released', $t)");
is(try_lock_now('ll6 released'), 't', 'a released lease frees its name at once');

# Broken: delayed from the break.
$t = sql("SELECT fencing.acquire_lease('ll6 broken', '1 minute')");
my $broken_at = sql("SELECT extract(epoch FROM clock_timestamp()) FROM fencing.break_lease('ll6 broken')");
is(try_lock_now('ll6 broken'), 'f', 'a broken lease leaves its name delayed');
my ($mode, $until) = split /\|/,
  sql("SELECT mode, extract(epoch FROM delayed_until) FROM fencing.locks WHERE name = 'll6 broken'");
is($mode, 'lease', 'fencing.locks shows the delayed lease');
cmp_ok(abs($until - ($broken_at + 1)), '<', 0.1, 'its delay ends one lock_delay after the break');
is(sql("SELECT fencing.acquire_lease('ll6 broken', '1 minute') IS NULL"),
	't', 'acquire_lease is refused under the delay too');

# Lapsed: delayed from the expiry.
$t = sql("SELECT fencing.acquire_lease('ll6 lapsed', '200 milliseconds')");
my $expires = sql("SELECT extract(epoch FROM expires_at) FROM fencing.leases WHERE token = $t");
sleep(0.4);
is(try_lock_now('ll6 lapsed'), 'f', 'a lapsed lease leaves its name delayed');
my ($rc, $out, $err) = $node->psql('postgres', "SELECT fencing.renew_lease('ll6 lapsed', $t)");
like($err, qr/fencing lease "ll6 lapsed" is not held with token $t\n.*DETAIL:  The lease expired at/s,
	'its holder cannot renew it while the delay keeps the name (FN004, expired)');
$until = sql("SELECT extract(epoch FROM delayed_until) FROM fencing.locks WHERE name = 'll6 lapsed'");
cmp_ok(abs($until - ($expires + 1)), '<', 0.1, 'its delay ends one lock_delay after the expiry');
my $waited = sql(
	"BEGIN; SELECT extract(epoch FROM clock_timestamp()) FROM fencing.lock('ll6 lapsed', '5 seconds'); COMMIT");
cmp_ok($waited, '>=', $until, 'fencing.lock() waits for the end of the delay');
is(try_lock_now('ll6 broken'), 't', 'the broken lease\'s delay has ended too');

# An operator ends a lease's delay by hand, as any lock-delay.
$t = sql("SELECT fencing.acquire_lease('ll6 cleared', '1 minute')");
sql("SELECT fencing.break_lease('ll6 cleared')");
is(try_lock_now('ll6 cleared'), 'f', 'a broken lease leaves its name delayed');
is(sql("SELECT fencing.clear_lock_delays('LL6 Cleared')"), '1',
	'fencing.clear_lock_delays() ends the delay the lease left');
is(try_lock_now('ll6 cleared'), 't', 'and the name is free at once');
is(sql("SELECT leases_lapsed, leases_broken, delays_started FROM fencing.stats"),
	sprintf('%d|2|%d', $rounds + 1, 3),
	'fencing.stats counts the lapses, the break and the delays they started');

$holder->quit;
$waiter->quit;
$gate->quit;
$node->stop;
done_testing();
