
# Copyright (c) 2026, the fencing developers
#
# 033_lock_sessions.pl -- named locks between two sessions.
#
# Part 1 (L1 through the lock functions): session 1 holds a lock under one
# spelling of a name; session 2 asks for another spelling that differs by
# full case folding (ß/SS), full-width or other compatibility forms,
# composition, or Unicode white space.  Session 2 finds it busy while
# session 1 holds it and gets it, with a higher token, once session 1 has
# committed.  In a UTF8 and in a LATIN1 database (with the spellings that
# LATIN1 can hold).
#
# Part 2: fencing.lock() waiting for a held lock is cancelled with
# pg_cancel_backend: the waiter gets SQLSTATE 57014, its wait leaves
# fencing.locks at once (before the client even rolls back), it holds no
# lock afterwards, and its session goes on working.
#
# Part 3 (L3 after a wait): lock(), lock_shared() and lock_all(), with and
# without a timeout, granted only after waiting for a holder, end with the
# waiter's transaction (COMMIT or ROLLBACK): no advisory lock of the
# waiter is left in pg_locks and another session gets the names at once.

use strict;
use warnings;
use utf8;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use FencingTest qw(sql_text);

my $node = PostgreSQL::Test::Cluster->new('lock_sessions');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'fencing'");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION fencing');

my %create = (
	utf8 => "ENCODING 'UTF8' LC_COLLATE 'C.utf8' LC_CTYPE 'C.utf8'",
	latin1 => "ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C'",);
for my $db (sort keys %create)
{
	$node->safe_psql('postgres',
		"CREATE DATABASE $db $create{$db} TEMPLATE template0");
	$node->safe_psql($db, 'CREATE EXTENSION fencing');
}

# [ what session 1 takes, what session 2 asks for, what differs ]
my %pairs = (
	utf8 => [
		[ 'STRASSE', 'straße', 'full case folding (ß and SS)' ],
		[ 'ＩＮＶＯＩＣＥ－ＲＵＮ：２０２６', 'invoice-run:2026', 'full-width forms' ],
		[ "\x{FB01}le \x{2460}\x{2163}", 'FILE 1IV', 'compatibility forms (ligature, circled digit, roman numeral)' ],
		[ "cafe\x{301}", "CAF\x{C9}", 'composed and decomposed accents' ],
		[ "\x{3000}job\x{2003}\x{2028}\x{85}run\x{A0}", 'Job Run', 'Unicode white space' ],
	],
	latin1 => [
		[ 'STRASSE', 'straße', 'full case folding (ß and SS)' ],
		[ "\x{AA}\x{B2}\x{B9}", 'A21', 'compatibility forms (ª, ², ¹)' ],
		[ "\x{C9}T\x{C9}", "\x{E9}t\x{E9}", 'accented capitals' ],
		[ "\x{A0}job\x{85}\x{A0}run ", 'JOB RUN', 'white space (no-break space, next line)' ],
	],);

# --- Part 1: one lock, however it is spelt, in two sessions ---------------
for my $db (sort keys %pairs)
{
	my $s1 = $node->background_psql($db);
	my $s2 = $node->background_psql($db);
	for my $pair (@{ $pairs{$db} })
	{
		my ($first, $second, $what) = @$pair;
		my ($a, $b) = (sql_text($first), sql_text($second));

		$s1->query_safe('BEGIN');
		my $t1 = $s1->query_safe("SELECT fencing.try_lock($a)");
		like($t1, qr/^\d+$/, "$db, $what: session 1 gets the lock");
		is($s2->query_safe("SELECT fencing.try_lock($b) IS NULL"),
			't', "$db, $what: session 2 finds the other spelling busy");
		is($s2->query_safe("SELECT fencing.lock($b, '0') IS NULL"),
			't', "$db, $what: so does lock() with a zero timeout");
		$s1->query_safe('COMMIT');

		$s2->query_safe('BEGIN');
		my $t2 = $s2->query_safe("SELECT fencing.try_lock($b)");
		like($t2, qr/^\d+$/,
			"$db, $what: after session 1 commits, session 2 gets it");
		cmp_ok($t2, '>', $t1, "$db, $what: with a higher token");
		is($s1->query_safe("SELECT fencing.try_lock($a) IS NULL"),
			't', "$db, $what: and now session 1 finds it busy");
		$s2->query_safe('COMMIT');
	}
	$s1->quit;
	$s2->quit;
}

# --- Part 2: a cancelled wait -----------------------------------------------
my $holder = $node->background_psql('postgres');
$holder->query_safe('BEGIN');
like($holder->query_safe("SELECT fencing.try_lock('cancel me')"),
	qr/^\d+$/, 'the holder takes the lock');

my $waiter = $node->background_psql('postgres', on_error_stop => 0);
$waiter->query_safe('\set VERBOSITY verbose');
my $waiter_pid = $waiter->query_safe('SELECT pg_backend_pid()');
$waiter->query_safe('BEGIN');
$waiter->{stdin} .= "SELECT fencing.lock('cancel me');\n";
$waiter->{run}->pump_nb;
ok( $node->poll_query_until(
		'postgres',
		"SELECT count(*) = 1 FROM fencing.locks
		  WHERE pid = $waiter_pid AND NOT granted AND token IS NULL"),
	'the waiter is shown waiting');
ok( $node->poll_query_until(
		'postgres',
		"SELECT count(*) = 1 FROM pg_locks
		  WHERE pid = $waiter_pid AND locktype = 'advisory' AND NOT granted"),
	"and it waits in the server's lock queue");

is($node->safe_psql('postgres', "SELECT pg_cancel_backend($waiter_pid)"),
	't', 'cancel the wait');
ok( $node->poll_query_until(
		'postgres',
		"SELECT state = 'idle in transaction (aborted)' FROM pg_stat_activity
		  WHERE pid = $waiter_pid"),
	"the waiter's transaction is aborted");
is( $node->safe_psql(
		'postgres', "SELECT count(*) FROM fencing.locks WHERE pid = $waiter_pid"),
	0,
	'its wait left fencing.locks with the abort, before any ROLLBACK');
is( $node->safe_psql(
		'postgres', "SELECT count(*) FROM pg_locks
		  WHERE pid = $waiter_pid AND locktype = 'advisory'"),
	0,
	'it neither holds nor awaits the lock');

$waiter->query('ROLLBACK');
like(
	$waiter->{stderr},
	qr/ERROR:  57014: canceling statement due to user request/,
	'the waiter got SQLSTATE 57014');
$waiter->{stderr} = '';
is($waiter->query_safe("SELECT fencing.held_token('cancel me') IS NULL"),
	't', 'the session goes on, without the lock');
is($holder->query_safe("SELECT fencing.held_token('cancel me') IS NOT NULL"),
	't', 'the holder still has it');
$holder->query_safe('COMMIT');
$waiter->query_safe('BEGIN');
like($waiter->query_safe("SELECT fencing.lock('cancel me', '1s')"),
	qr/^\d+$/, 'once the holder commits, the former waiter gets the lock');
$waiter->query_safe('COMMIT');

$holder->quit;
$waiter->quit;

# --- Part 3: a lock granted after a wait ends with its transaction ---------
# The waiter's call is granted only once the holder's transaction ends; its
# lock then ends with the waiter's own transaction (commit or rollback):
# the waiter holds no advisory lock afterwards and another session gets
# the name at once.
$holder = $node->background_psql('postgres');
$waiter = $node->background_psql('postgres');
$waiter_pid = $waiter->query_safe('SELECT pg_backend_pid()');
my $other = $node->background_psql('postgres');
foreach my $case (
	[ "fencing.lock('waited')", 'COMMIT' ],
	[ "fencing.lock('waited')", 'ROLLBACK' ],
	[ "fencing.lock('waited', '5 minutes')", 'COMMIT' ],
	[ "fencing.lock('waited', '5 minutes')", 'ROLLBACK' ],
	[ "fencing.lock_shared('waited')", 'COMMIT' ],
	[ "fencing.lock_all(ARRAY['waited', 'waited too'])", 'COMMIT' ],
	[ "fencing.lock_all(ARRAY['waited', 'waited too'], '5 minutes')", 'COMMIT' ])
{
	my ($call, $end) = @$case;
	my $what = "$call granted after a wait, then $end";

	$holder->query_safe('BEGIN');
	my $held = $holder->query_safe("SELECT fencing.try_lock('waited')");
	like($held, qr/^\d+$/, "$what: the holder takes the name first")
	  or last;
	$waiter->query_safe('BEGIN');
	$waiter->{stdin} .= "SELECT $call;\n";
	$waiter->{run}->pump_nb;
	ok( $node->poll_query_until(
			'postgres',
			"SELECT count(*) > 0 FROM pg_locks
			  WHERE pid = $waiter_pid AND locktype = 'advisory' AND NOT granted"),
		"$what: the waiter waits");
	$holder->query_safe('COMMIT');
	my ($token, $again) = split /\n/,
	  $waiter->query_safe("SELECT fencing.held_token('waited')");
	like($token, qr/^\d+$/, "$what: granted once the holder committed");
	cmp_ok($token, '>', $held, "$what: with a token above the holder's");
	is($again, $token, "$what: held_token() in its transaction returns it");
	$waiter->query_safe($end);

	my $released = is(
		$node->safe_psql(
			'postgres', "SELECT count(*) FROM pg_locks
			  WHERE pid = $waiter_pid AND locktype = 'advisory'"),
		0, "$what: the waiter holds no advisory lock after its $end");
	$other->query_safe('BEGIN');
	$released &= like(
		$other->query_safe("SELECT fencing.try_lock_all(ARRAY['waited', 'waited too'])"),
		qr/^\d+$/, "$what: another session gets the names at once");
	$other->query_safe('ROLLBACK');
	# A lock left behind would be granted again at once to the waiter.
	last unless $released;
}
$holder->quit;
$waiter->quit;
$other->quit;

$node->stop;
done_testing();
