
# Copyright (c) 2026, the fencing developers
#
# 035_lock_groups.pl -- fencing.lock_all and fencing.try_lock_all between
# real processes.
#
# Part 1: 12 psql processes each take, round after round, a random set of 3
# of 6 names with fencing.lock_all, listed in random order, so that sets
# overlap and two callers often list shared names in opposite orders.  None
# deadlocks (the server's deadlock detector, set to react quickly, would
# end one of them with 40P01, and ON_ERROR_STOP makes that a failed exit),
# and no two hold a common name at once: while holding, each updates a
# per-name counter with a read-then-write that would lose an update if two
# held the name together, and logs when it held each name; the logged
# intervals of one name never overlap.  Every group has one token of its
# own, shared by its names.
#
# Part 2: all or nothing.  A try_lock_all with one busy name gets NULL and
# holds none of the names; a lock_all that waits holds the names before the
# busy one (key order) and gets all once it is freed; a lock_all whose
# timeout passes gets NULL and holds nothing, in the same transaction.

use strict;
use warnings;

use List::Util qw(shuffle);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use FindBin;
use lib "$FindBin::RealBin/../perl";
use FencingTest qw(run_gated_clients);

my $clients = 12;
my $rounds = 15;
my @names = map { "group name $_" } 1 .. 6;
my $start_gate = 3510;

my $seed = $ENV{FENCING_TEST_SEED} // time();
note "random seed $seed (set FENCING_TEST_SEED to repeat)";
srand($seed);

my $node = PostgreSQL::Test::Cluster->new('lock_groups');
$node->init;
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'fencing'\nmax_connections = 40\n"
	  . "deadlock_timeout = '50ms'");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION fencing');

# --- Part 1: overlapping random groups ----------------------------------------
$node->safe_psql(
	'postgres', "CREATE TABLE counters (name text PRIMARY KEY, v int NOT NULL);
	 INSERT INTO counters SELECT n, 0 FROM unnest(ARRAY['"
	  . join("', '", @names) . "']) n;
	 CREATE TABLE holds (client int, round int, name text, token bigint,
						 held_from timestamptz, held_to timestamptz)");

my %expected_turns = map { $_ => 0 } @names;
my @scripts;
for my $client (1 .. $clients)
{
	my $script = '';
	for my $round (1 .. $rounds)
	{
		my @set = (shuffle @names)[ 0 .. 2 ];
		$expected_turns{$_}++ for @set;
		my $array = "ARRAY['" . join("', '", @set) . "']";
		$script .= "BEGIN;\n";
		$script .= "SELECT fencing.lock_all($array) AS token \\gset\n";
		$script .= "SELECT clock_timestamp() AS held_from \\gset\n";
		for my $i (0 .. $#set)
		{
			$script .=
			  "SELECT v AS v$i FROM counters WHERE name = '$set[$i]' \\gset\n";
		}
		$script .= "SELECT pg_sleep(0.002) \\g /dev/null\n";
		for my $i (0 .. $#set)
		{
			$script .=
			  "UPDATE counters SET v = :v$i + 1 WHERE name = '$set[$i]';\n";
		}
		$script .= "INSERT INTO holds SELECT $client, $round, n, :token, "
		  . ":'held_from', clock_timestamp() FROM unnest($array) n;\n";
		$script .= "COMMIT;\n";
	}
	push @scripts, $script;
}

my ($failed, $stderr) = run_gated_clients($node, $start_gate, @scripts);
is($failed, 0, "all $clients clients ran their $rounds rounds to the end");
unlike($stderr, qr/deadlock detected/, 'no client was ended by a deadlock');
is($stderr, '', 'no client reported an error') or diag($stderr);

is( $node->safe_psql('postgres', 'SELECT string_agg(v::text, \',\' ORDER BY name) FROM counters'),
	join(',', map { $expected_turns{$_} } sort @names),
	'no update of a per-name counter was lost');
is( $node->safe_psql(
		'postgres',
		'SELECT count(*) FROM holds a JOIN holds b ON a.name = b.name
		   AND (a.client, a.round) <> (b.client, b.round)
		   AND a.held_from < b.held_to AND b.held_from < a.held_to'),
	0,
	'no two clients held a common name at the same time');
is( $node->safe_psql(
		'postgres',
		'SELECT count(*) FROM (SELECT client, round FROM holds
		   GROUP BY client, round HAVING count(DISTINCT token) <> 1) g'),
	0,
	'the names of a group share one token');
is( $node->safe_psql(
		'postgres',
		'SELECT count(DISTINCT token) FROM holds'),
	$clients * $rounds,
	'every group had a token of its own');
is( $node->safe_psql(
		'postgres',
		'SELECT count(*) FROM (SELECT name, token,
			 lag(held_to) OVER (PARTITION BY name ORDER BY token) AS previous_to,
			 held_from FROM holds) h WHERE held_from < previous_to'),
	0,
	'for each name, a later token means a later holder');
is($node->safe_psql('postgres', 'SELECT count(*) FROM fencing.locks'),
	0, 'no lock is left in the view');

# --- Part 2: all or nothing ---------------------------------------------------
my $holder = $node->background_psql('postgres');
my $caller = $node->background_psql('postgres');
my $caller_pid = $caller->query_safe('SELECT pg_backend_pid()');

$holder->query_safe('BEGIN');
my $holder_token = $holder->query_safe("SELECT fencing.try_lock('g:3')");

# The keys decide the order in which a group is taken; name the parts of
# the group before and after the busy name in that order.
my ($before_busy, $after_busy) = split /\|/, $node->safe_psql(
	'postgres', "SELECT string_agg(n, ',' ORDER BY k) FILTER (WHERE k < b),
			string_agg(n, ',' ORDER BY k) FILTER (WHERE k > b)
	 FROM (SELECT n, fencing.lock_key(n) AS k, fencing.lock_key('g:3') AS b
		   FROM unnest(ARRAY['g:1', 'g:2', 'g:4', 'g:5', 'g:6']) n) x"), -1;
note "taken before g:3: $before_busy; after: $after_busy";

$caller->query_safe('BEGIN');
is( $caller->query_safe(
		"SELECT fencing.try_lock_all(ARRAY['g:1', 'g:2', 'g:3', 'g:4', 'g:5', 'g:6']) IS NULL"),
	't',
	'try_lock_all with one busy name gets NULL');
is( $caller->query_safe(
		"SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid() AND locktype = 'advisory'"),
	0,
	'and holds none of the names, in the same transaction');
is( $caller->query_safe(
		"SELECT fencing.lock_all(ARRAY['g:6', 'g:5', 'g:4', 'g:3', 'g:2', 'g:1'], '300ms') IS NULL"),
	't',
	'lock_all whose timeout passes gets NULL');
is( $caller->query_safe(
		"SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid() AND locktype = 'advisory'"),
	0,
	'and holds none of the names, in the same transaction');
is($node->safe_psql('postgres', "SELECT count(*) FROM fencing.locks WHERE pid = $caller_pid"),
	0, 'nor is it in fencing.locks');
is( $node->safe_psql('postgres',
		"BEGIN; SELECT fencing.try_lock_all(ARRAY['g:1', 'g:2', 'g:4', 'g:5', 'g:6']) IS NOT NULL; COMMIT"),
	't',
	'a third session can take every other name of the group at once');
$caller->query_safe('COMMIT');

# A wait without a timeout: the caller holds the names before the busy one
# and waits for it; when the holder commits it gets them all.
$caller->query_safe('BEGIN');
$caller->{stdin} .= "SELECT fencing.lock_all(ARRAY['g:6', 'g:5', 'g:4', 'g:3', 'g:2', 'g:1']);\n";
$caller->{run}->pump_nb;
ok( $node->poll_query_until(
		'postgres',
		"SELECT count(*) = 1 FROM fencing.locks
		  WHERE pid = $caller_pid AND name = 'g:3' AND NOT granted"),
	'the caller waits for the busy name');
is( $node->safe_psql(
		'postgres',
		"SELECT string_agg(name, ',' ORDER BY key) FROM fencing.locks
		  WHERE pid = $caller_pid AND name <> 'g:3'"),
	$before_busy // '',
	'holding the names before it in key order, and none after it');
is( $node->safe_psql(
		'postgres',
		"SELECT count(*) FROM fencing.locks WHERE pid = $caller_pid AND token IS NOT NULL"),
	0,
	'no token is shown before the whole group is held');
$holder->query_safe('COMMIT');
# the output of the waiting lock_all comes first
my ($returned, $group_token) =
  split /\n/, $caller->query_safe("SELECT fencing.held_token('g:3')");
is($returned, $group_token, 'lock_all returned the token held_token returns');
cmp_ok($group_token, '>', $holder_token,
	'once the holder commits the caller gets the group, with a later token');
is( $node->safe_psql(
		'postgres',
		"SELECT count(*), count(DISTINCT token), min(token) FROM fencing.locks
		  WHERE pid = $caller_pid AND granted"),
	"6|1|$group_token",
	'all six names are held under that one token');
$caller->query_safe('COMMIT');

# The timeout bounds the whole call, not each wait: with the first name (in
# key order) freed 2.5 s into a 4 s timeout and the second held
# throughout, lock_all returns NULL at 4 s, not 4 s after the first wait.
{
	my ($first, $second) = $node->safe_psql('postgres',
		"SELECT string_agg(n, '|' ORDER BY fencing.lock_key(n))
		 FROM unnest(ARRAY['bound:a', 'bound:b']) n") =~ /^(.*)\|(.*)$/;
	my $h1 = $node->background_psql('postgres');
	my $h2 = $node->background_psql('postgres');
	$h1->query_safe('BEGIN');
	$h1->query_safe("SELECT fencing.try_lock('$first')");
	$h2->query_safe('BEGIN');
	$h2->query_safe("SELECT fencing.try_lock('$second')");
	$caller->query_safe('BEGIN');
	my $start = time();
	$caller->query_until(qr/started/,
		"\\echo started\nSELECT fencing.lock_all(ARRAY['bound:a', 'bound:b'], '4 seconds') IS NULL AS timed_out;\n");
	ok( $node->poll_query_until(
			'postgres',
			"SELECT count(*) = 1 FROM fencing.locks WHERE pid = $caller_pid AND name = '$first' AND NOT granted"),
		"lock_all waits for $first");
	sleep(2.5);
	$h1->query_safe('COMMIT');
	my ($timed_out) = split /\n/, $caller->query_safe("SELECT 'collected'");
	my $elapsed = time() - $start;
	is($timed_out, 't', "lock_all returns NULL: $second stayed busy");
	cmp_ok($elapsed, '<', 5.5, "at its timeout of 4 s for the whole call ($elapsed s), not 4 s after the first wait");
	cmp_ok($elapsed, '>=', 3.9, 'and not before it');
	$caller->query_safe('ROLLBACK');
	$h2->query_safe('ROLLBACK');
	$h1->quit;
	$h2->quit;
}

$holder->quit;
$caller->quit;
$node->stop;
done_testing();
