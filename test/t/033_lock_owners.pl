
# Copyright (c) 2026, the fencing developers
#
# 033_lock_owners.pl -- a fencing lock is released exactly when core
# releases it, and fencing gives back exactly the locks it took, whatever
# resource owner was current when it took them.
#
# Part 1: a timed wait that is granted and then gives the lock back.  A
# simple query runs under its portal's resource owner, and a timed wait
# takes the lock in an internal subtransaction; the lock must end up where
# fencing gives it back from.  fencing.lock(name, timeout) granted while a
# lock-delay is in force (the holder it waited for was terminated) gives the
# lock back and returns NULL at the timeout, holding nothing; lock_all(names,
# timeout) that waited for one name and then times out on the next gives
# back the name it waited for.  No WARNING, no advisory lock left in
# pg_locks, nothing in fencing.locks, and another session can take the
# names.
#
# Part 2: a lock taken by a cursor belongs to the cursor's portal, which core
# releases at the end of the transaction, not with a savepoint the cursor
# was fetched in: fencing keeps its entry as long as core keeps the lock
# (held_token answers, fencing.locks shows it, another session finds it
# busy, and a holder terminated then leaves a lock-delay).  A cursor that
# fails inside the savepoint, or was declared inside it, goes with the
# savepoint's rollback, and so do its locks, in core and in fencing alike.
# Through psql's DECLARE and FETCH, and through a server-side cursor of
# psycopg (a real driver).

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use IPC::Run;

my $node = PostgreSQL::Test::Cluster->new('lock_owners');
$node->init;
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'fencing'\n" . "fencing.lock_delay = '30s'\n");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION fencing');

sub sql { return $node->safe_psql('postgres', $_[0]); }

# A session in an open transaction; returns it and its pid.
sub session_in_transaction
{
	my $s = $node->background_psql('postgres', on_error_stop => 0);
	my $pid = $s->query_safe('SELECT pg_backend_pid()');
	$s->query_safe('BEGIN');
	return ($s, $pid);
}

# The advisory locks the backend $pid holds, as "objid:granted" (empty:
# none).
sub advisory_of
{
	my ($pid) = @_;
	return sql(
		"SELECT coalesce(string_agg(objid || ':' || granted, ','), '')
		 FROM pg_locks WHERE pid = $pid AND locktype = 'advisory'");
}

# --- Part 1: a timed wait that gives the lock back ---------------------------

# lock(name, timeout) granted under a lock-delay.
{
	my ($h, $h_pid) = session_in_transaction();
	like($h->query_safe("SELECT fencing.try_lock('x1')"),
		qr/^\d+$/, 'H holds x1');
	my ($b, $b_pid) = session_in_transaction();
	my $start = time();
	$b->query_until(qr/started/,
		"\\echo started\nSELECT fencing.lock('x1', '5 seconds') IS NULL AS timed_out;\n");
	ok( $node->poll_query_until(
			'postgres',
			"SELECT count(*) = 1 FROM fencing.locks WHERE pid = $b_pid AND NOT granted"),
		'B waits for x1');
	sleep(1.5);
	sql("SELECT pg_terminate_backend($h_pid)");
	$node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $h_pid")
	  or die "H did not exit";
	$b->{stderr} = '';
	my ($timed_out, $after) =
	  split /\n/, $b->query("SELECT 'after'");
	my $elapsed = time() - $start;
	is($timed_out, 't', 'lock() returns NULL: the lock-delay outlasts its timeout');
	cmp_ok($elapsed, '>=', 4.9, 'at its timeout, not before');
	is($b->{stderr}, '', 'with no warning');
	$b->{stderr} = '';
	is(advisory_of($b_pid), '', 'B holds no advisory lock afterwards');
	is($b->query_safe("SELECT fencing.held_token('x1') IS NULL"),
		't', 'held_token says B does not hold x1');
	is(sql("SELECT count(*) FROM fencing.locks WHERE pid = $b_pid"),
		0, 'fencing.locks shows nothing of B');
	$b->query_safe('ROLLBACK');
	$b->quit;
	eval { $h->quit };
}

# lock_all(names, timeout) that waited for one name, then times out on the
# next.  The holder of the first name releases it by rolling back to a
# savepoint; the second stays held.
{
	my ($first, $second) = sql(
		"SELECT string_agg(n, '|' ORDER BY fencing.lock_key(n))
		 FROM unnest(ARRAY['x4', 'x5']) n") =~ /^(.*)\|(.*)$/;
	note "lock_all takes $first, then $second";

	my ($s, $s_pid) = session_in_transaction();
	like($s->query_safe("SELECT fencing.try_lock('$second')"),
		qr/^\d+$/, "S holds $second");
	$s->query_safe('SAVEPOINT sp');
	like($s->query_safe("SELECT fencing.try_lock('$first')"),
		qr/^\d+$/, "S holds $first in a savepoint");

	my ($b, $b_pid) = session_in_transaction();
	my $start = time();
	$b->query_until(qr/started/,
		"\\echo started\nSELECT fencing.lock_all(ARRAY['x4', 'x5'], '4 seconds') IS NULL AS timed_out;\n"
	);
	ok( $node->poll_query_until(
			'postgres',
			"SELECT count(*) = 1 FROM fencing.locks
			 WHERE pid = $b_pid AND name = '$first' AND NOT granted"),
		"B waits for $first");
	$s->query_safe('ROLLBACK TO SAVEPOINT sp');
	$b->{stderr} = '';
	my ($timed_out) = split /\n/, $b->query("SELECT 'after'");
	my $elapsed = time() - $start;
	is($timed_out, 't', "lock_all returns NULL: $second stayed busy");
	cmp_ok($elapsed, '>=', 3.9, 'at its timeout');
	is($b->{stderr}, '', 'with no warning');
	$b->{stderr} = '';
	is(advisory_of($b_pid), '', "B holds no advisory lock afterwards, not even $first");
	is(sql("SELECT count(*) FROM fencing.locks WHERE pid = $b_pid"),
		0, 'fencing.locks shows nothing of B');
	is( sql("BEGIN; SELECT fencing.try_lock('$first') IS NOT NULL; COMMIT"),
		't', "a third session can take $first");
	$b->query_safe('ROLLBACK');
	$s->query_safe('ROLLBACK');
	$b->quit;
	$s->quit;
}

# --- Part 2: locks taken through a cursor -----------------------------------

# What fencing and core say about name in the session $s (pid $pid): the
# session's own held_token, the view's rows for the pid, whether the pid
# holds an advisory lock on the name's key, and whether another session
# finds the name busy.
sub lock_state
{
	my ($s, $pid, $name) = @_;
	my $held = $s->query_safe("SELECT fencing.held_token('$name') IS NOT NULL");
	my $view = sql(
		"SELECT count(*) FROM fencing.locks WHERE pid = $pid AND name = '$name' AND granted");
	my $core = sql(
		"SELECT count(*) FROM pg_locks WHERE pid = $pid AND locktype = 'advisory'
		   AND objid::bigint = fencing.lock_key('$name') & 4294967295");
	my $busy = sql("BEGIN; SELECT fencing.try_lock('$name') IS NULL; COMMIT");
	return "held_token=$held view=$view core=$core busy_for_others=$busy";
}

my $kept = 'held_token=t view=1 core=1 busy_for_others=t';
my $gone = 'held_token=f view=0 core=0 busy_for_others=f';

# A cursor declared in the transaction, first fetched inside a savepoint
# that rolls back: core keeps the lock, and so does fencing; a holder
# terminated then leaves a lock-delay.
{
	my ($s, $pid) = session_in_transaction();
	$s->query_safe(
		"DECLARE c CURSOR FOR SELECT fencing.try_lock('cx') FROM generate_series(1, 2)");
	$s->query_safe('SAVEPOINT s');
	my $token = $s->query_safe('FETCH 1 FROM c');
	like($token, qr/^\d+$/, 'the cursor took cx in the savepoint');
	$s->query_safe('ROLLBACK TO SAVEPOINT s');
	is(lock_state($s, $pid, 'cx'), $kept,
		'after ROLLBACK TO, fencing and core both still hold cx');
	is($s->query_safe("SELECT fencing.held_token('cx')"),
		$token, 'held_token returns the token the cursor got');
	$s->query_safe('CLOSE c');
	is(lock_state($s, $pid, 'cx'), $kept,
		'closing the cursor keeps cx until the transaction ends');
	sql("SELECT pg_terminate_backend($pid)");
	$node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $pid")
	  or die "the holder did not exit";
	is( sql("SELECT count(*) FROM fencing.locks
			 WHERE name = 'cx' AND pid = $pid AND delayed_until IS NOT NULL"),
		1, 'the terminated holder left a lock-delay on cx');
	eval { $s->quit };
}

# The same cursor fetched again in a savepoint and failing there: core
# releases the failed cursor's locks with the savepoint, and fencing must
# forget them too.
{
	my ($s, $pid) = session_in_transaction();
	$s->query_safe(
		"DECLARE c CURSOR FOR SELECT fencing.try_lock('cy'), 1 / (2 - i) FROM generate_series(1, 2) i");
	$s->query_safe('SAVEPOINT s');
	$s->query('FETCH 2 FROM c');
	like($s->{stderr}, qr/division by zero/, 'the cursor failed after taking cy');
	$s->{stderr} = '';
	$s->query_safe('ROLLBACK TO SAVEPOINT s');
	is(lock_state($s, $pid, 'cy'), $gone,
		'after ROLLBACK TO, neither core nor fencing holds cy');
	$s->query_safe('ROLLBACK');
	$s->quit;
}

# A cursor declared and fetched inside a savepoint goes with its rollback;
# one declared in a savepoint that was released belongs to the transaction.
{
	my ($s, $pid) = session_in_transaction();
	$s->query_safe('SAVEPOINT s');
	$s->query_safe(
		"DECLARE c CURSOR FOR SELECT fencing.try_lock('cz') FROM generate_series(1, 2)");
	$s->query_safe('FETCH 1 FROM c');
	$s->query_safe('ROLLBACK TO SAVEPOINT s');
	is(lock_state($s, $pid, 'cz'), $gone,
		'a cursor declared in a savepoint that rolls back leaves nothing held');
	$s->query_safe('SAVEPOINT s1');
	$s->query_safe(
		"DECLARE d CURSOR FOR SELECT fencing.try_lock('cw') FROM generate_series(1, 2)");
	$s->query_safe('RELEASE SAVEPOINT s1');
	$s->query_safe('SAVEPOINT s2');
	my $token = $s->query_safe('FETCH 1 FROM d');
	$s->query_safe('ROLLBACK TO SAVEPOINT s2');
	is(lock_state($s, $pid, 'cw'), $kept,
		'a cursor declared in a released savepoint keeps its lock past a later rollback');
	is($s->query_safe("SELECT fencing.try_lock('cw')"),
		$token, 'taking cw again returns the token the cursor got');
	$s->query_safe('COMMIT');
	is(lock_state($s, $pid, 'cw'), $gone, 'COMMIT releases it');
	$s->quit;
}

# Through a driver: a psycopg server-side cursor, fetched in a savepoint.
my $psycopg_script = <<'PY';
import sys
import psycopg

conninfo = sys.argv[1]
holder = psycopg.connect(conninfo)
other = psycopg.connect(conninfo, autocommit=True)
pid = holder.info.backend_pid

def state(name):
    held = holder.execute("SELECT fencing.held_token(%s) IS NOT NULL", (name,)).fetchone()[0]
    view = other.execute(
        "SELECT count(*) FROM fencing.locks WHERE pid = %s AND name = %s AND granted",
        (pid, name)).fetchone()[0]
    with other.transaction():
        busy = other.execute("SELECT fencing.try_lock(%s) IS NULL", (name,)).fetchone()[0]
    return "held_token=%s view=%d busy_for_others=%s" % (
        "t" if held else "f", view, "t" if busy else "f")

cur = holder.cursor(name="c")
cur.execute("SELECT fencing.try_lock('px') FROM generate_series(1, 2)")
holder.execute("SAVEPOINT s")
token = cur.fetchone()[0]
holder.execute("ROLLBACK TO SAVEPOINT s")
print("after rollback:", state("px"))
print("same token:", holder.execute("SELECT fencing.held_token('px')").fetchone()[0] == token)
other.execute("SELECT pg_terminate_backend(%s)", (pid,))
for _ in range(100):
    if other.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()[0] == 0:
        break
    other.execute("SELECT pg_sleep(0.1)")
print("delayed:", other.execute(
    "SELECT count(*) FROM fencing.locks WHERE name = 'px' AND pid = %s AND delayed_until IS NOT NULL",
    (pid,)).fetchone()[0])
PY

SKIP:
{
	skip 'python3-psycopg is not installed (apt-get install python3-psycopg)', 3
	  unless system('/usr/bin/python3 -c "import psycopg" >/dev/null 2>&1') == 0;
	my ($out, $err) = ('', '');
	IPC::Run::run(
		[ '/usr/bin/python3', '-c', $psycopg_script, $node->connstr('postgres') ],
		'>', \$out, '2>', \$err);
	like($out, qr/^after rollback: held_token=t view=1 busy_for_others=t$/m,
		'psycopg: a lock its cursor took in a rolled-back savepoint is still held and shown')
	  or diag($err);
	like($out, qr/^same token: True$/m, "psycopg: held_token returns the cursor's token");
	like($out, qr/^delayed: 1$/m, 'psycopg: the terminated holder left a lock-delay');
}

$node->stop;
done_testing();
