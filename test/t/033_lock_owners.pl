
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

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

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

$node->stop;
done_testing();
