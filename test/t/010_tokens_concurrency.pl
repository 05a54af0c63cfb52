
# Copyright (c) 2026, the fencing developers
#
# 010_tokens_concurrency.pl -- T1 with real processes: 10 psql clients,
# in two databases, each draw 2000 tokens one statement at a time, all at
# once, while the counter is pushed to the end of its block again and again
# so that they cross reservation boundaries together.  Every token is
# unique, each client's tokens strictly increase, the clients really
# interleaved, and a token drawn after any other session's call returned is
# above that call's token (each call is timed by the server's clock before
# and after the token).  fencing.stats counts one reservation per WAL record
# written (pg_waldump counts the records), not one per waiting backend.
#
# Then ten sessions again: six draw tokens as fast as they can while three
# call advance_token just above the latest token and one forces
# reservations, each again and again, so that the counter is lifted while
# it is drawn from: every token is unique and each session's tokens
# strictly increase.

use strict;
use warnings;

use File::Temp qw(tempdir);
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use FindBin;
use lib "$FindBin::RealBin/../perl";
use FencingTest qw(run_gated_clients);

my $clients = 10;
my $per_client = 2000;
my $barrier_key = 1010;

my $node = PostgreSQL::Test::Cluster->new('concurrency');
$node->init;
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'fencing'\nmax_connections = 40");
$node->start;

# Two databases: tokens are cluster-wide, not per database.
$node->safe_psql('postgres', 'CREATE EXTENSION fencing');
$node->safe_psql('postgres', 'CREATE DATABASE other');
$node->safe_psql('other', 'CREATE EXTENSION fencing');

my $start_latest = $node->safe_psql('postgres', 'SELECT fencing.latest_token()');
my $start_issued = $node->safe_psql('postgres', 'SELECT tokens_issued FROM fencing.stats');

# Each client first waits on a shared advisory lock that this test holds
# exclusively, so that all of them start drawing together; then it draws one
# token per statement, autocommit.
my $dir = tempdir(CLEANUP => 1);
my $script = "$dir/draw.sql";
open(my $fh, '>', $script) or die "could not write $script: $!";
print $fh "SELECT pg_advisory_lock_shared($barrier_key) \\g /dev/null\n";
print $fh "SELECT pg_advisory_unlock_shared($barrier_key) \\g /dev/null\n";
# microseconds since the epoch before the call, the token, and after it
my $draw = 'SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint, '
  . 'fencing.next_token(), '
  . '(extract(epoch FROM clock_timestamp()) * 1000000)::bigint;';
print $fh "$draw\n" x $per_client;
close($fh);

# Advisory locks belong to a database: one gate in each.
my %gate;
for my $db ('postgres', 'other')
{
	$gate{$db} = $node->background_psql($db);
	$gate{$db}->query_safe("SELECT pg_advisory_lock($barrier_key)");
}

my (@handles, @outputs, @errors);
for my $i (0 .. $clients - 1)
{
	my $db = $i % 2 ? 'other' : 'postgres';
	$outputs[$i] = "$dir/client$i.out";
	$errors[$i] = "$dir/client$i.err";
	push @handles,
	  IPC::Run::start(
		[
			'psql', '-X', '-A', '-t', '-q', '-v', 'ON_ERROR_STOP=1',
			'-d', $node->connstr($db) . ' application_name=draw', '-f', $script
		],
		'<', \undef, '>', $outputs[$i], '2>', $errors[$i]);
}

# Release the clients once every one of them waits at the gate.
$node->poll_query_until('postgres',
	"SELECT count(*) = $clients FROM pg_locks
	 WHERE locktype = 'advisory' AND objid = $barrier_key AND NOT granted")
  or die "the clients did not reach the gate";
my $reservations_before = $node->safe_psql('postgres', 'SELECT reservations FROM fencing.stats');
my $lsn_before = $node->safe_psql('postgres', 'SELECT pg_current_wal_insert_lsn()');
$gate{$_}->query_safe("SELECT pg_advisory_unlock($barrier_key)") for keys %gate;

# While the clients draw, keep moving the counter to just below the end of
# the current block, so that they cross reservation boundaries together (a
# block holds 1,000,000 tokens; 20,000 alone would not reach the end of
# one).  The pusher goes on until the last client has disconnected, however
# long they take.
my $pusher = $node->background_psql('postgres');
my $draw_sessions = "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'draw'";
for (my $i = 0;; $i++)
{
	$pusher->query_safe(
		'SELECT fencing.advance_token((SELECT reserved_limit FROM fencing.status()) - 200)');
	last if $i >= 10 && $pusher->query_safe($draw_sessions) == 0;
	die 'the clients did not finish in 10 minutes' if $i > 12_000;
	usleep(50_000);
}
my $lsn_clients_done = $node->safe_psql('postgres', 'SELECT pg_current_wal_flush_lsn()');
# Then three boundaries crossed for certain, one after another.
for (1 .. 3)
{
	$pusher->query_safe(
		'SELECT fencing.advance_token((SELECT reserved_limit FROM fencing.status()) - 1)');
	$pusher->query_safe('SELECT count(fencing.next_token()) FROM generate_series(1, 3)');
}
$pusher->quit;

for my $i (0 .. $clients - 1)
{
	my $ok = $handles[$i]->finish;
	ok($ok, "client $i exited cleanly")
	  or diag(slurp_file($errors[$i]));
}
$gate{$_}->quit for keys %gate;

# Check what each client received.
my (%seen, @ranges, @calls);
my $duplicates = 0;
my $max = 0;
for my $i (0 .. $clients - 1)
{
	my @lines = split /\n/, slurp_file($outputs[$i]);
	is(scalar @lines, $per_client, "client $i received $per_client tokens");
	is(scalar(grep { !/^\d+\|\d+\|\d+$/ } @lines), 0, "client $i: every line is a timed token");
	my @tokens;
	for my $line (@lines)
	{
		my ($start, $token, $end) = split /\|/, $line;
		push @tokens, $token;
		push @calls, [ $start, $token, $end, $i ];
	}

	my $increasing = 1;
	for my $j (1 .. $#tokens)
	{
		if ($tokens[$j] <= $tokens[ $j - 1 ])
		{
			$increasing = 0;
			diag("client $i: token $j ($tokens[$j]) not above $tokens[$j - 1]");
			last;
		}
	}
	ok($increasing, "client $i: its tokens strictly increase");
	cmp_ok($tokens[0], '>', $start_latest,
		"client $i: first token above the latest token before the run");

	for my $t (@tokens)
	{
		$duplicates++ if $seen{$t}++;
		$max = $t if $t > $max;
	}
	push @ranges, [ $tokens[0], $tokens[-1] ];
}

# T1 across sessions: walk the calls in order of their start; every call
# that had returned before (in any session) must have a smaller token.
my @by_end = sort { $a->[2] <=> $b->[2] } @calls;
my ($done, $max_done, $max_done_client, $violations, $cross_checked) = (0, 0, -1, 0, 0);
for my $call (sort { $a->[0] <=> $b->[0] } @calls)
{
	while ($done < @by_end && $by_end[$done][2] < $call->[0])
	{
		($max_done, $max_done_client) = ($by_end[$done][1], $by_end[$done][3])
		  if $by_end[$done][1] > $max_done;
		$done++;
	}
	next if $done == 0;
	$cross_checked++ if $max_done_client != $call->[3];
	if ($call->[1] <= $max_done)
	{
		diag("client $call->[3]: token $call->[1] drawn after client "
			  . "$max_done_client had returned $max_done") if $violations < 5;
		$violations++;
	}
}
cmp_ok($cross_checked, '>', 1000,
	"many calls began after another session's call had returned ($cross_checked)");
is($violations, 0,
	'every token is above every token returned, in any session, before its call began');

is(scalar keys %seen, $clients * $per_client, 'every token is distinct');
is($duplicates, 0, 'no token was handed out twice');

# Interleaving: the ranges of tokens drawn by different clients overlap,
# so the calls really ran concurrently.
my $overlapping = 0;
for my $a (0 .. $#ranges)
{
	for my $b ($a + 1 .. $#ranges)
	{
		$overlapping++
		  if $ranges[$a][0] < $ranges[$b][1] && $ranges[$b][0] < $ranges[$a][1];
	}
}
cmp_ok($overlapping, '>', 0, "clients interleaved ($overlapping overlapping pairs)");

# fencing.stats counts reservation records: as many as pg_waldump finds
# of the extension's resource manager (id 199) in the WAL of the run.
my $reservations = $node->safe_psql('postgres', 'SELECT reservations FROM fencing.stats')
  - $reservations_before;
my $lsn_after = $node->safe_psql('postgres', 'SELECT pg_current_wal_flush_lsn()');
my ($waldump, $waldump_err) = run_command(
	[ 'pg_waldump', '-p', $node->data_dir . '/pg_wal', '-s', $lsn_before, '-e', $lsn_after ]);
my $records = () = $waldump =~ /^rmgr: custom199 /mg;
my ($waldump_clients) = run_command(
	[ 'pg_waldump', '-p', $node->data_dir . '/pg_wal', '-s', $lsn_before, '-e', $lsn_clients_done ]);
my $records_clients = () = $waldump_clients =~ /^rmgr: custom199 /mg;
# How many boundaries the clients cross depends on how long they take (a
# reservation covers a stretch of clock as well as a count of tokens): at
# least one, while they all draw; the three crossed afterwards are certain.
cmp_ok($records_clients, '>=', 1,
	"the clients crossed a reservation boundary while drawing together ($records_clients records)");
cmp_ok($records, '>=', $records_clients + 3,
	"and the three crossings after them wrote a record each ($records records in all)");
is($reservations, $records,
	'fencing.stats.reservations counts one per reservation record in WAL');

my $latest = $node->safe_psql('postgres', 'SELECT fencing.latest_token()');
cmp_ok($latest, '>=', $max, 'latest_token covers every token handed out');
my $next = $node->safe_psql('other', 'SELECT fencing.next_token()');
cmp_ok($next, '>', $max, 'the next token is above every token handed out');
is( $node->safe_psql(
		'postgres', "SELECT tokens_issued - $start_issued FROM fencing.stats"),
	$clients * $per_client + 3 * 3 + 1,
	'fencing.stats counted every token (the clients\', the nine that crossed boundaries, and one)');

# --- Drawing while the counter is lifted -----------------------------------
# Six sessions draw tokens as fast as one statement can, while three others
# call advance_token just above the latest token again and again (a lift
# to a value the drawers are about to pass) and one forces a reservation
# again and again (a lift of the counter to its clock floor).  A lift that
# lands after draws it did not see would move the counter back: every
# token must still be unique and each session's tokens strictly increase.
$node->safe_psql('postgres',
	'CREATE UNLOGGED TABLE drawn (session int, chunk int, tokens bigint[])');
my $lift_seconds = 3;
my @lift_scripts;
for my $i (1 .. 6)
{
	push @lift_scripts, qq{DO \$\$
DECLARE
	start timestamptz := clock_timestamp();
BEGIN
	FOR chunk IN 1 .. 60 LOOP
		EXIT WHEN clock_timestamp() > start + interval '$lift_seconds s';
		INSERT INTO drawn VALUES ($i, chunk,
			(SELECT array_agg(fencing.next_token()) FROM generate_series(1, 5000)));
	END LOOP;
END \$\$;
};
}
for my $i (1 .. 3)
{
	push @lift_scripts, qq{DO \$\$
DECLARE
	start timestamptz := clock_timestamp();
BEGIN
	WHILE clock_timestamp() < start + interval '$lift_seconds s' LOOP
		PERFORM count(fencing.advance_token(fencing.latest_token() + 2))
		FROM generate_series(1, 1000);
	END LOOP;
END \$\$;
};
}
push @lift_scripts, qq{DO \$\$
DECLARE
	start timestamptz := clock_timestamp();
BEGIN
	WHILE clock_timestamp() < start + interval '$lift_seconds s' LOOP
		PERFORM fencing.advance_token(reserved_limit) FROM fencing.status();
	END LOOP;
END \$\$;
};
my $lift_reservations = $node->safe_psql('postgres', 'SELECT reservations FROM fencing.stats');
my ($lift_failed, $lift_stderr) = run_gated_clients($node, 1012, @lift_scripts);
is($lift_failed, 0, 'the ten drawing and lifting sessions ran without error')
  or diag($lift_stderr);
my ($drawn, $distinct, $back, $sessions) = split /\|/, $node->safe_psql('postgres', q{
	WITH t AS (
		SELECT session, chunk, o, token
		FROM drawn, unnest(tokens) WITH ORDINALITY AS u(token, o))
	SELECT count(*), count(DISTINCT token),
		   (SELECT count(*) FROM (
				SELECT token <= lag(token) OVER (PARTITION BY session ORDER BY chunk, o) AS back
				FROM t) b WHERE back),
		   count(DISTINCT session)
	FROM t});
is($sessions, 6, 'all six drawing sessions drew');
cmp_ok($drawn, '>', 6 * 5000, "they drew $drawn tokens while the counter was lifted");
cmp_ok($node->safe_psql('postgres', 'SELECT reservations FROM fencing.stats') - $lift_reservations,
	'>', 10, 'and reservations were made meanwhile');
is($distinct, $drawn, 'every token drawn while the counter was lifted is distinct');
is($back, 0, "each drawing session's tokens strictly increase while the counter is lifted");

$node->stop;
done_testing();
