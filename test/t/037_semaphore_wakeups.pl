
# Copyright (c) 2026, the fencing developers
#
# 037_semaphore_wakeups.pl -- a semaphore's waiter never sleeps while a
# permit it could take is free.
#
# A permit under a lock-delay (its holder H was terminated) is refused to
# everyone until the delay ends, and no release wakes anyone then: a waiter
# must know when the delay ends and wake up by itself.  A caller that finds
# the permit busy because another caller is, at that very moment, taking it
# only to find the delay and give it back, learns nothing of the delay from
# the busy permit; it must be woken when the permit is given back.
#
# W waits in fencing.acquire('sem', 1) (with a 60 s timeout, far past the
# delay) while S calls try_acquire('sem', 1) in a loop, for a while before
# the delay ends.  The test stops S (SIGSTOP) at random moments and wakes W
# (pg_reload_conf(): the configuration reload sets every backend's latch)
# until W, woken while S was stopped, refused nothing (it found the permit
# busy, so S was stopped holding it); then lets S go on and end.  W must
# then be granted the permit soon after the delay ends, not at its timeout.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use Time::HiRes qw(time sleep);

my $delay = 20;
my $node = PostgreSQL::Test::Cluster->new('semaphore_wakeups');
$node->init;
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'fencing'\n" . "fencing.lock_delay = '${delay}s'\n");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION fencing');

sub sql { return $node->safe_psql('postgres', $_[0]); }

my $h = $node->background_psql('postgres', on_error_stop => 0);
my $h_pid = $h->query_safe('SELECT pg_backend_pid()');
$h->query_safe('BEGIN');
like($h->query_safe("SELECT fencing.try_acquire('sem', 1)"),
	qr/^\d+$/, 'H holds the only permit of sem');

my $w = $node->background_psql('postgres', on_error_stop => 0);
my $w_pid = $w->query_safe('SELECT pg_backend_pid()');
$w->query_safe('BEGIN');
$w->query_until(qr/started/,
	"\\echo started\nSELECT fencing.acquire('sem', 1, '60 seconds') IS NOT NULL AS granted;\n");
ok( $node->poll_query_until(
		'postgres',
		"SELECT wait_event_type = 'Extension' FROM pg_stat_activity WHERE pid = $w_pid"),
	'W waits for a permit');

# S tries for 12 s: it ends well before the delay does.
my $s = $node->background_psql('postgres', on_error_stop => 0);
my $s_pid = $s->query_safe('SELECT pg_backend_pid()');
$s->query_until(qr/started/, "\\echo started\n"
	  . "DO \$\$ BEGIN WHILE clock_timestamp() < now() + interval '12 seconds' LOOP "
	  . "PERFORM fencing.try_acquire('sem', 1); END LOOP; END \$\$;\n");

sql("SELECT pg_terminate_backend($h_pid)");
$node->poll_query_until('postgres',
	"SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $h_pid")
  or die 'H did not exit';
my $until = sql(
	"SELECT delayed_until FROM fencing.locks WHERE name = 'sem' AND delayed_until IS NOT NULL");
like($until, qr/^\d{4}-/, 'the permit of the terminated holder is delayed');

# While S is stopped no new connection is opened (a backend's start takes
# a lock of the lock manager, whose partition S may hold): the observer and
# the kicker are sessions opened before.
my $observer = $node->background_psql('postgres');
my $kicker = $node->background_psql('postgres', on_error_stop => 0);
my $kicks = 0;

sub refusals { return $observer->query_safe('SELECT delayed_refusals FROM fencing.stats'); }

# Wake W (and every other backend) with a configuration reload; returns
# whether the kicker's statement was done within a second (a stopped S may
# hold a lock the kicker needs; it is finished after S goes on).
sub kick_waiter
{
	$kicks++;
	$kicker->{stdin} .=
	  "SELECT pg_reload_conf();\n\\echo kicked $kicks\n";
	my $give_up = time() + 1;
	while ($kicker->{stdout} !~ /kicked $kicks/ && time() < $give_up)
	{
		$kicker->{run}->pump_nb;
		sleep(0.01);
	}
	return $kicker->{stdout} =~ /kicked $kicks/;
}

sub kick_finished
{
	$kicker->{run}->pump until $kicker->{stdout} =~ /kicked $kicks/;
	$kicker->{stdout} = '';
	return;
}

my $found_busy = 0;
my $trials = 0;
my $stop_trying = time() + 8;
while (time() < $stop_trying)
{
	$trials++;
	sleep(rand(0.05));
	kill 'STOP', $s_pid;
	my $before = refusals();
	if (kick_waiter())
	{
		my $w_state = '';
		my $give_up = time() + 1;
		while (time() < $give_up && refusals() == $before)
		{
			$w_state = $observer->query_safe(
				"SELECT wait_event_type FROM pg_stat_activity WHERE pid = $w_pid");
			last if $w_state eq 'LWLock';
			sleep(0.05);
		}
		$found_busy = 1 if refusals() == $before && $w_state eq 'Extension';
	}
	kill 'CONT', $s_pid;
	kick_finished();
	last if $found_busy;
}
note "trials: $trials; W found the permit busy while S held it: $found_busy";

# S ends by itself; then W must get the permit soon after the delay ends.
$s->query_safe("SELECT 'S is done'");
my $granted_at = undef;
my $give_up = time() + 40;
while (time() < $give_up)
{
	my ($granted, $late) = split /\|/, sql(
		"SELECT count(*) FILTER (WHERE granted), extract(epoch FROM clock_timestamp() - '$until'::timestamptz)
		 FROM fencing.locks WHERE pid = $w_pid");
	if ($granted)
	{
		$granted_at = $late;
		last;
	}
	sleep(0.1);
}
ok(defined $granted_at, 'W is granted the permit');
cmp_ok($granted_at // 99, '<', 5, 'within seconds of the end of the delay, not at its timeout');
my ($w_out) = split /\n/, $w->query("SELECT 'collected'");
is($w_out, 't', 'W got a token');
$w->query_safe('COMMIT');

$w->quit;
$s->quit;
$observer->quit;
$kicker->quit;
eval { $h->quit };
$node->stop;
done_testing();
