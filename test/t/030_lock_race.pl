
# Copyright (c) 2026, the fencing developers
#
# 030_lock_race.pl -- L4 with real processes.
#
# Part 1: 12 psql processes race for one name at the same moment, several
# rounds: exactly one gets a token, 11 get NULL, and while they all still
# sit in their transactions fencing.locks shows the winner alone.
#
# Part 2: 12 processes take turns through fencing.lock() on a counter that
# they update with a read-then-write that would lose updates without mutual
# exclusion: no update is lost, and ordering the writes by token gives the
# order in which they happened (each later holder has a higher token).
#
# Part 3: on a hot standby every lock function raises a clear error (T6).

use strict;
use warnings;

use File::Temp qw(tempdir);
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $clients = 12;
my $rounds = 5;
my $increments = 25;
my $start_gate = 3010;
my $end_gate = 3011;

my $node = PostgreSQL::Test::Cluster->new('lock_race');
$node->init(allows_streaming => 1);
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'fencing'\nmax_connections = 40");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION fencing');

my $dir = tempdir(CLEANUP => 1);

# Start one psql per client on the same script; returns the handles.
sub start_clients
{
	my ($script, $tag) = @_;
	my @clients;

	for my $i (0 .. $clients - 1)
	{
		my %c = (
			out => "$dir/$tag.$i.out",
			err => "$dir/$tag.$i.err");
		$c{handle} = IPC::Run::start(
			[
				'psql', '-X', '-A', '-t', '-q', '-v', 'ON_ERROR_STOP=1',
				'-d', $node->connstr('postgres'), '-f', $script
			],
			'<', \undef, '>', $c{out}, '2>', $c{err});
		push @clients, \%c;
	}
	return @clients;
}

# Wait until every client waits for the gate (an advisory lock the test
# holds exclusively), then open it.
sub open_gate
{
	my ($gate_session, $key, $what) = @_;

	$node->poll_query_until('postgres',
		"SELECT count(*) = $clients FROM pg_locks
		 WHERE locktype = 'advisory' AND objid = $key AND NOT granted")
	  or die "the clients did not reach the $what gate";
	$gate_session->query_safe("SELECT pg_advisory_unlock($key)");
}

# Part 1: the race.
my $race = "$dir/race.sql";
open(my $fh, '>', $race) or die "could not write $race: $!";
print $fh <<"EOS";
SELECT pg_advisory_lock_shared($start_gate) \\g /dev/null
SELECT pg_advisory_unlock_shared($start_gate) \\g /dev/null
BEGIN;
SELECT coalesce(fencing.try_lock('Nightly Report'), 0);
SELECT pg_advisory_lock_shared($end_gate) \\g /dev/null
SELECT pg_advisory_unlock_shared($end_gate) \\g /dev/null
COMMIT;
EOS
close($fh);

my $gate = $node->background_psql('postgres');
my $busy_before =
  $node->safe_psql('postgres', 'SELECT locks_busy FROM fencing.stats');
my $previous_winner = 0;

for my $round (1 .. $rounds)
{
	$gate->query_safe(
		"SELECT pg_advisory_lock($start_gate), pg_advisory_lock($end_gate)");

	my @race = start_clients($race, "race$round");
	open_gate($gate, $start_gate, 'start');

	# Every client has tried once it waits at the end gate; all still hold
	# their transactions open.
	$node->poll_query_until('postgres',
		"SELECT count(*) = $clients FROM pg_locks
		 WHERE locktype = 'advisory' AND objid = $end_gate AND NOT granted")
	  or die "the clients did not reach the end gate";
	my $view = $node->safe_psql('postgres',
		"SELECT count(*), coalesce(max(token), 0), coalesce(max(pid), 0),
				bool_and(granted)
		 FROM fencing.locks WHERE name = 'nightly report'");
	$gate->query_safe("SELECT pg_advisory_unlock($end_gate)");

	my (@tokens, $failed);
	for my $c (@race)
	{
		$failed++ unless $c->{handle}->finish;
		diag(slurp_file($c->{err})) if -s $c->{err};
		push @tokens, slurp_file($c->{out}) =~ s/\s+$//r;
	}
	ok(!$failed, "round $round: all $clients clients exited cleanly");

	my @winners = grep { $_ ne '0' } @tokens;
	my @losers = grep { $_ eq '0' } @tokens;
	is(scalar @winners, 1, "round $round: exactly one client got a token");
	is(scalar @losers, $clients - 1,
		"round $round: the other " . ($clients - 1) . " got NULL");
	like($winners[0] // '', qr/^\d+$/, "round $round: the winner's token is a number");
	cmp_ok($winners[0] // 0, '>', $previous_winner,
		"round $round: the token is above the previous round's winner");
	my ($rows, $token, $pid, $granted) = split /\|/, $view;
	is($rows, 1, "round $round: the view showed one holder while all waited");
	is($token, $winners[0] // -1, "round $round: the view showed the winner's token");
	is($granted, 't', "round $round: the view showed the lock granted");
	$previous_winner = $winners[0] // $previous_winner;
}

is( $node->safe_psql(
		'postgres', "SELECT locks_busy - $busy_before FROM fencing.stats"),
	$rounds * ($clients - 1),
	'fencing.stats counted every busy attempt');
is($node->safe_psql('postgres', 'SELECT count(*) FROM fencing.locks'),
	0, 'no lock is left in the view');

# Part 2: mutual exclusion over time.  Each turn reads the counter, then
# writes what it read plus one, so two holders at once would lose an update.
$node->safe_psql('postgres',
	'CREATE TABLE counter (v int NOT NULL);
	 INSERT INTO counter VALUES (0);
	 CREATE TABLE turns (token bigint NOT NULL, v int NOT NULL)');

my $turns = "$dir/turns.sql";
open($fh, '>', $turns) or die "could not write $turns: $!";
print $fh <<"EOS";
SELECT pg_advisory_lock_shared($start_gate) \\g /dev/null
SELECT pg_advisory_unlock_shared($start_gate) \\g /dev/null
EOS
print $fh <<'EOS' x $increments;
BEGIN;
SELECT fencing.lock('counter') AS token \gset
SELECT v FROM counter \gset
SELECT pg_sleep(0.001) \g /dev/null
UPDATE counter SET v = :v + 1;
INSERT INTO turns VALUES (:token, :v + 1);
COMMIT;
EOS
close($fh);

$gate->query_safe("SELECT pg_advisory_lock($start_gate)");
my @workers = start_clients($turns, 'turns');
open_gate($gate, $start_gate, 'start');

my $failed = 0;
for my $c (@workers)
{
	$failed++ unless $c->{handle}->finish;
	diag(slurp_file($c->{err})) if -s $c->{err};
}
is($failed, 0, "all $clients workers exited cleanly");

is($node->safe_psql('postgres', 'SELECT v FROM counter'),
	$clients * $increments, 'no update was lost');
is( $node->safe_psql(
		'postgres',
		'SELECT count(*) FROM (SELECT v, row_number() OVER (ORDER BY token) AS n
							   FROM turns) t WHERE v <> n'),
	0,
	'in token order the turns are the order of the writes');
is($node->safe_psql('postgres', 'SELECT count(DISTINCT token) FROM turns'),
	$clients * $increments, 'every turn had its own token');

$gate->quit;

# Part 3: a hot standby refuses every lock function (T6): a lock taken on a
# replica would exclude nobody.
$node->backup('for_standby');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($node, 'for_standby', has_streaming => 1);
$standby->start;
for my $call (
	"fencing.try_lock('job')", "fencing.lock('job')",
	"fencing.lock('job', '1s')", "fencing.lease('job', '1s')",
	"fencing.held_token('job')")
{
	my ($ret, $out, $err) = $standby->psql(
		'postgres', "SELECT $call",
		extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	like(
		$err,
		qr/ERROR:  25006: cannot call fencing\.\w+\(\) on a hot standby/,
		"the standby refuses $call");
}
is($standby->safe_psql('postgres', 'SELECT count(*) FROM fencing.locks'),
	0, 'the standby can show its (empty) view');
$standby->stop;

$node->stop;
done_testing();
