
# Copyright (c) 2026, the fencing developers
#
# 037_semaphores.pl -- fencing.acquire and fencing.try_acquire between real
# processes.
#
# Part 1: 20 psql processes take turns through fencing.acquire('api', 3).
# While holding, each counts the holders: two sequences (which no
# transaction boundary hides) count entries and announced exits, and their
# difference at entry is the number of holders; each also logs when it
# held its permit.  Never more than 3 hold at once, by either measure, and
# 3 do hold at once (the test exercises concurrency); every holder's token
# is its own.
#
# Part 2: a waiter sleeps without polling: with all permits held, acquire
# waits with wait_event_type "Extension" (on its latch, not a sleep loop
# and not a lock wait), is shown in fencing.locks as waiting,
# and gets a permit as soon as one holder commits; a waiter whose timeout
# passes gets NULL and holds nothing; try_acquire with all permits held
# gets NULL.
#
# Part 3: permits held in another database do not make a semaphore of the
# same name busy here.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use FencingTest qw(run_gated_clients);

my $clients = 20;
my $rounds = 10;
my $permits = 3;
my $start_gate = 3710;

my $node = PostgreSQL::Test::Cluster->new('semaphores');
$node->init;
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'fencing'\nmax_connections = 40");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION fencing');

# --- Part 1: at most 3 holders ---------------------------------------------------
$node->safe_psql(
	'postgres', 'CREATE SEQUENCE entered; CREATE SEQUENCE left_;
	 CREATE TABLE holds (client int, round int, token bigint, holders bigint,
						 permit text, held_from timestamptz, held_to timestamptz)');

my $round_sql = <<"EOS";
BEGIN;
SELECT fencing.acquire('api', $permits) AS token \\gset
SELECT clock_timestamp() AS held_from \\gset
SELECT nextval('entered') - (SELECT last_value FROM left_) + (SELECT CASE WHEN is_called THEN 0 ELSE 1 END FROM left_) AS holders \\gset
SELECT mode AS permit FROM fencing.locks WHERE pid = pg_backend_pid() \\gset
SELECT pg_sleep(0.005) \\g /dev/null
INSERT INTO holds VALUES (:client, :round, :token, :holders, :'permit', :'held_from', clock_timestamp());
SELECT nextval('left_') \\g /dev/null
COMMIT;
EOS
my @scripts;
for my $client (1 .. $clients)
{
	push @scripts, join('',
		map { "\\set client $client\n\\set round $_\n$round_sql" } 1 .. $rounds);
}

my ($failed, $stderr) = run_gated_clients($node, $start_gate, @scripts);
is($failed, 0, "all $clients clients ran their $rounds rounds to the end");
is($stderr, '', 'no client reported an error') or diag($stderr);

is($node->safe_psql('postgres', 'SELECT count(*) FROM holds'),
	$clients * $rounds, 'every round was logged');
is($node->safe_psql('postgres', 'SELECT max(holders) FROM holds'),
	$permits, "holders counted at entry: at most $permits, and $permits were reached");
# The most permits held at one moment, from the logged intervals: at each
# start, the intervals that contain it.
is( $node->safe_psql(
		'postgres',
		'SELECT max(n) FROM (SELECT count(*) AS n FROM holds a JOIN holds b
			ON b.held_from <= a.held_from AND a.held_from < b.held_to
			GROUP BY a.client, a.round) x'),
	$permits,
	"by the logged intervals too, at most $permits held at once");
is( $node->safe_psql(
		'postgres',
		"SELECT count(*) FROM holds a JOIN holds b ON a.permit = b.permit
		   AND (a.client, a.round) <> (b.client, b.round)
		   AND a.held_from < b.held_to AND b.held_from < a.held_to"),
	0,
	'no permit had two holders at once');
is( $node->safe_psql(
		'postgres',
		"SELECT string_agg(DISTINCT permit, ',' ORDER BY permit) FROM holds"),
	'permit 1 of 3,permit 2 of 3,permit 3 of 3',
	'the view named each holder\'s permit, and all three were used');
is($node->safe_psql('postgres', 'SELECT count(DISTINCT token) FROM holds'),
	$clients * $rounds, 'every holder had a token of its own');
is($node->safe_psql('postgres', 'SELECT count(*) FROM fencing.locks'),
	0, 'no permit is left in the view');

# --- Part 2: waiting ------------------------------------------------------------
my @holders;
for my $i (1 .. $permits)
{
	my $h = $node->background_psql('postgres');
	$h->query_safe('BEGIN');
	like($h->query_safe("SELECT fencing.try_acquire('api', $permits)"),
		qr/^\d+$/, "holder $i takes a permit");
	push @holders, $h;
}

my $other = $node->background_psql('postgres');
$other->query_safe('BEGIN');
is($other->query_safe("SELECT fencing.try_acquire('api', $permits) IS NULL"),
	't', 'with all permits held, try_acquire gets NULL');
is($other->query_safe("SELECT fencing.acquire('api', $permits, '300ms') IS NULL"),
	't', 'and acquire whose timeout passes gets NULL');
is( $other->query_safe(
		"SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid() AND locktype = 'advisory'"),
	0,
	'holding nothing');
$other->query_safe('COMMIT');

my $waiter = $node->background_psql('postgres');
my $waiter_pid = $waiter->query_safe('SELECT pg_backend_pid()');
$waiter->query_safe('BEGIN');
$waiter->{stdin} .= "SELECT fencing.acquire('api', $permits);\n";
$waiter->{run}->pump_nb;
ok( $node->poll_query_until(
		'postgres',
		"SELECT wait_event_type = 'Extension' AND state = 'active'
		   FROM pg_stat_activity WHERE pid = $waiter_pid"),
	'the waiter sleeps on its latch (wait_event_type Extension)');
is( $node->safe_psql(
		'postgres',
		"SELECT mode, granted, token IS NULL FROM fencing.locks WHERE pid = $waiter_pid"),
	'permit ? of 3|f|t',
	'fencing.locks shows it waiting for a permit');
# Still asleep a while later: it does not wake (or run) until a permit frees.
sleep(1);
is( $node->safe_psql(
		'postgres',
		"SELECT wait_event_type, (SELECT count(*) FROM pg_locks
			WHERE pid = $waiter_pid AND locktype = 'advisory')
		   FROM pg_stat_activity WHERE pid = $waiter_pid"),
	'Extension|0',
	'a second later it still sleeps, holding no permit lock');

my $freed = $node->safe_psql('postgres',
	"SELECT mode FROM fencing.locks WHERE pid = "
	  . $holders[1]->query_safe('SELECT pg_backend_pid()'));
$holders[1]->query_safe('COMMIT');
ok( $node->poll_query_until(
		'postgres',
		"SELECT count(*) = 1 FROM fencing.locks WHERE pid = $waiter_pid AND granted"),
	'when a holder commits, the waiter gets a permit');
is( $node->safe_psql(
		'postgres', "SELECT mode FROM fencing.locks WHERE pid = $waiter_pid"),
	$freed, 'the one that was freed');
my ($token) = split /\n/, $waiter->query_safe("SELECT fencing.held_token('api')");
like($token, qr/^\d+$/, 'acquire returned a token');
$waiter->query_safe('COMMIT');

$_->quit for @holders;
$waiter->quit;
$other->quit;

# --- Part 3: a semaphore is one database's --------------------------------------
# Every permit of "api" held in another database: here they are all free.
$node->safe_psql('postgres', 'CREATE DATABASE elsewhere');
$node->safe_psql('elsewhere', 'CREATE EXTENSION fencing');
@holders = ();
for my $i (1 .. $permits)
{
	my $h = $node->background_psql('elsewhere');
	$h->query_safe('BEGIN');
	like($h->query_safe("SELECT fencing.try_acquire('api', $permits)"),
		qr/^\d+$/, "holder $i takes a permit of api in the other database");
	push @holders, $h;
}
is($node->safe_psql('postgres',
		"BEGIN; SELECT fencing.try_acquire('api', $permits) IS NOT NULL; COMMIT"),
	't', 'with every permit held in another database, try_acquire here gets one');
# and with permit 1 held here, the others are still free here
my $here = $node->background_psql('postgres');
$here->query_safe('BEGIN');
$here->query_safe("SELECT fencing.try_acquire('api', $permits)");
is($node->safe_psql('postgres',
		"BEGIN; SELECT fencing.try_acquire('api', $permits) IS NOT NULL; COMMIT"),
	't', 'with permit 1 held here and every permit in another database, try_acquire here gets one');
$here->quit;
$_->quit for @holders;
$node->stop;
done_testing();
