
# Copyright (c) 2026, the fencing developers
#
# 034_lock_registry_readers.pl -- a reader of the lock registry (the view
# fencing.locks) is never stuck behind a backend that stopped in the middle
# of writing its entry.
#
# Only the owner of an entry writes it, bracketed by a change counter that
# readers check; a reader that finds a write in progress tries again.  A
# writer can stop half way (descheduled, stopped by a debugger, SIGSTOP):
# the reader must neither wait for it without bound nor ignore a cancel.
#
# Six sessions take and give up entries in a tight loop (try_lock of a
# name another session holds).  The test stops all six at once (SIGSTOP)
# at random moments and reads the view; whenever one of them stopped in the
# middle of a write, the read finds it.  Every read must answer within a
# few seconds while the writers stay stopped.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $node = PostgreSQL::Test::Cluster->new('registry_readers');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'fencing'");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION fencing');

my $h = $node->background_psql('postgres');
$h->query_safe('BEGIN');
$h->query_safe("SELECT fencing.try_lock('busy')");

my (@writers, @pids);
for my $i (1 .. 6)
{
	my $w = $node->background_psql('postgres');
	push @pids, $w->query_safe('SELECT pg_backend_pid()');
	$w->query_until(qr/started/, "\\echo started\n"
		  . "DO \$\$ BEGIN WHILE clock_timestamp() < now() + interval '90 seconds' LOOP "
		  . "PERFORM fencing.try_lock('busy'); END LOOP; END \$\$;\n");
	push @writers, $w;
}

# The reader, opened before any writer is stopped (a new connection could
# wait for a lock manager partition a stopped writer holds).
my $reader = $node->background_psql('postgres');
my $reads = 0;

# Read the view while the writers are stopped; returns the seconds it took,
# or undef when no answer came within $limit seconds.
sub timed_read
{
	my ($limit) = @_;
	$reads++;
	$reader->{stdin} .= "SELECT count(*) FROM fencing.locks;\n\\echo read $reads\n";
	my $start = time();
	while ($reader->{stdout} !~ /read $reads\n/ && time() < $start + $limit)
	{
		$reader->{run}->pump_nb;
		sleep(0.001);
	}
	return $reader->{stdout} =~ /read $reads\n/ ? time() - $start : undef;
}

my ($slow, $stuck, $trials) = (0, 0, 0);
my $stop_trying = time() + 60;
while (time() < $stop_trying && !$stuck && !$slow)
{
	$trials++;
	sleep(rand(0.02));
	kill 'STOP', @pids;
	my $took = timed_read(5);
	$stuck++ unless defined $took;
	$slow++ if defined $took && $took > 0.2;
	kill 'CONT', @pids;
	$reader->{run}->pump until $reader->{stdout} =~ /read $reads\n/;
	$reader->{stdout} = '';
}
note "trials: $trials; reads slowed by a half-written entry: $slow; stuck: $stuck";
ok($slow + $stuck > 0, 'some reads met an entry a stopped writer had half written');
is($stuck, 0, 'every read answered within 5 s while the writers stayed stopped');

$_->{run}->kill_kill for @writers;
$h->quit;
$reader->quit;
$node->stop('immediate');
done_testing();
