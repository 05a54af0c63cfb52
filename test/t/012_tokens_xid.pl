
# Copyright (c) 2026, the fencing developers
#
# 012_tokens_xid.pl -- T5: issuing tokens never assigns a transaction id,
# across checkpoints and several reservations, and a lock-holding READ
# COMMITTED transaction that sits idle shows backend_xid and backend_xmin
# NULL, so it does not hold back VACUUM: one holding a raw advisory lock and
# drawing tokens, and one each holding fencing.try_lock, fencing.lock and
# fencing.lease.  Tokens within one reservation do not flush WAL: one flush
# per reservation of 1,000,000 tokens.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('xid');
$node->init;
# fsync on, so that pg_stat_wal (pg_stat_io from 18 on) counts the WAL
# flushes.
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'fencing'\nfsync = on\ntrack_wal_io_timing = off");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION fencing');
$node->safe_psql('postgres', 'SELECT fencing.next_token()');

sub reservations
{
	return $node->safe_psql('postgres', 'SELECT reservations FROM fencing.stats');
}

# A lock-holding style session: READ COMMITTED, an advisory lock, many
# tokens in a few statements, checkpoints in between.
my $holder = $node->background_psql('postgres');
my $pid = $holder->query_safe('SELECT pg_backend_pid()');
my $reservations_before = reservations();

$holder->query_safe('BEGIN ISOLATION LEVEL READ COMMITTED');
$holder->query_safe('SELECT pg_advisory_xact_lock(12)');
my $drawn = $holder->query_safe(
	'SELECT count(DISTINCT fencing.next_token()) FROM generate_series(1, 1500000)');
is($drawn, '1500000', '1,500,000 distinct tokens in one statement');
$node->safe_psql('postgres', 'CHECKPOINT');
$drawn = $holder->query_safe(
	'SELECT count(fencing.next_token()) FROM generate_series(1, 1500000)');
is($drawn, '1500000', '1,500,000 more tokens after a checkpoint');
$holder->query_safe(
	'SELECT fencing.advance_token(fencing.latest_token() + 2500000)');
$holder->query_safe('SELECT fencing.next_token()');
$node->safe_psql('postgres', 'CHECKPOINT');
my $last = $holder->query_safe('SELECT fencing.next_token()');

cmp_ok(reservations() - $reservations_before, '>=', 3,
	'the transaction crossed at least three reservations');
is($holder->query_safe('SELECT pg_current_xact_id_if_assigned() IS NULL'),
	't', 'no transaction id assigned after millions of tokens');
is($holder->query_safe("SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid() AND locktype = 'transactionid'"),
	'0', 'no transactionid lock held');

# Seen from another session: the backend sits idle in its transaction and
# has neither a transaction id nor an xmin.
sub check_idle_without_xid
{
	my ($backend_pid, $label) = @_;
	$node->poll_query_until('postgres',
		"SELECT state = 'idle in transaction' FROM pg_stat_activity WHERE pid = $backend_pid")
	  or die "$label: the holder did not become idle in transaction";
	is( $node->safe_psql(
			'postgres',
			"SELECT backend_xid IS NULL, backend_xmin IS NULL
			 FROM pg_stat_activity WHERE pid = $backend_pid"),
		't|t',
		"$label: idle in transaction, backend_xid and backend_xmin are NULL");
	return;
}

# VACUUM is not held back: rows deleted while the holders sit idle are
# removable.
sub check_vacuum_not_held_back
{
	my ($table, $label) = @_;
	$node->safe_psql('postgres',
		"CREATE TABLE $table AS SELECT g FROM generate_series(1, 1000) g");
	$node->safe_psql('postgres', "DELETE FROM $table");
	my ($ret, $stdout, $stderr) = $node->psql('postgres', "VACUUM (VERBOSE) $table");
	like($stderr, qr/tuples: 1000 removed, 0 remain, 0 are dead but not yet removable/,
		"VACUUM removes rows deleted while $label sit idle");
	return;
}

check_idle_without_xid($pid, 'raw advisory lock and tokens');
is( $node->safe_psql(
		'postgres',
		"SELECT count(*) FROM pg_locks
		 WHERE pid = $pid AND locktype = 'advisory' AND granted"),
	'1', 'the holder still holds its lock');
check_vacuum_not_held_back('churn', 'the token-drawing holder');

# The same for transactions holding fencing's own locks, idle.
my %lock_holders;
for my $call ("fencing.try_lock('t5 try_lock')", "fencing.lock('t5 lock')",
	"fencing.lease('t5 lease', interval '10 minutes')")
{
	my $session = $node->background_psql('postgres');
	$session->query_safe('BEGIN ISOLATION LEVEL READ COMMITTED');
	like($session->query_safe("SELECT $call"), qr/^\d+$/, "$call granted a token");
	$lock_holders{$call} = { session => $session, pid => $session->query_safe('SELECT pg_backend_pid()') };
}
for my $call (sort keys %lock_holders)
{
	my $lock_pid = $lock_holders{$call}{pid};
	check_idle_without_xid($lock_pid, "holding $call");
	is( $node->safe_psql(
			'postgres',
			"SELECT count(*) FROM fencing.locks WHERE pid = $lock_pid AND granted"),
		'1', "the holder of $call still holds its lock");
}
check_vacuum_not_held_back('churn_locks', 'fencing lock holders');
for my $call (sort keys %lock_holders)
{
	my $session = $lock_holders{$call}{session};
	is($session->query_safe('SELECT pg_current_xact_id_if_assigned() IS NULL'),
		't', "the holder of $call has no transaction id");
	$session->query_safe('COMMIT');
	$session->quit;
}

my $next = $holder->query_safe('SELECT fencing.next_token()');
cmp_ok($next, '>', $last, 'the holder keeps drawing increasing tokens');
is($holder->query_safe('SELECT pg_current_xact_id_if_assigned() IS NULL'),
	't', 'still no transaction id');
$holder->query_safe('COMMIT');
$holder->quit;

# WAL flushes: within one reservation, 100,000 tokens flush nothing.  Start
# a fresh block, then draw well inside it.
# PostgreSQL 18 moved the WAL write and flush counts from pg_stat_wal to
# pg_stat_io (object 'wal'; context 'normal' is what pg_stat_wal counted,
# 'init' is the writing of new segments).
my $wal_io =
  $node->pg_version >= 18
  ? "(SELECT coalesce(sum(fsyncs), 0) AS wal_sync, coalesce(sum(writes), 0) AS wal_write"
  . " FROM pg_stat_io WHERE object = 'wal' AND context = 'normal')"
  : 'pg_stat_wal';
my $stats_sql =
  "SELECT s.wal_sync, s.wal_write, f.reservations FROM $wal_io s, fencing.stats f";
my $session = $node->background_psql('postgres');
$session->query_safe(
	'SELECT fencing.advance_token(fencing.latest_token() + 1)');
$session->query_safe('SELECT pg_stat_force_next_flush()');
$node->safe_psql('postgres', 'SELECT pg_stat_force_next_flush()');
my ($sync0, $write0, $res0) = split /\|/, $node->safe_psql('postgres', $stats_sql);
my $lsn0 = $node->safe_psql('postgres', 'SELECT pg_current_wal_insert_lsn()');

$session->query_safe('SELECT count(fencing.next_token()) FROM generate_series(1, 100000)');
$session->query_safe('SELECT pg_stat_force_next_flush()');
# let the session report its statistics at idle
$session->query_safe('SELECT 1');
$node->safe_psql('postgres', 'SELECT pg_stat_force_next_flush()');
my ($sync1, $write1, $res1) = split /\|/, $node->safe_psql('postgres', $stats_sql);
my $wal_bytes = $node->safe_psql('postgres',
	"SELECT pg_current_wal_insert_lsn() - '$lsn0'::pg_lsn");

# The instrument works: a reservation does flush, and it shows.
$session->query_safe(
	'SELECT fencing.advance_token(fencing.latest_token() + 3000000)');
$session->query_safe('SELECT pg_stat_force_next_flush()');
$session->query_safe('SELECT 1');
$node->safe_psql('postgres', 'SELECT pg_stat_force_next_flush()');
my ($sync2, $write2, $res2) = split /\|/, $node->safe_psql('postgres', $stats_sql);
$session->quit;
cmp_ok($res2 - $res1, '>=', 1, 'advance_token far ahead made a reservation');
cmp_ok($sync2 - $sync1, '>=', 1, 'a reservation shows up as a WAL flush in pg_stat_wal');

my $reserved = $res1 - $res0;
note "100,000 tokens: wal_sync +"
  . ($sync1 - $sync0)
  . ", wal_write +"
  . ($write1 - $write0)
  . ", reservations +$reserved, WAL bytes $wal_bytes";
cmp_ok($reserved, '<=', 1, '100,000 tokens fit in at most one reservation');
cmp_ok($sync1 - $sync0, '<=', $reserved + 3,
	'WAL flushes (wal_sync) at most one per reservation, plus background slack');
cmp_ok($write1 - $write0, '<=', $reserved + 3,
	'WAL writes (wal_write) at most one per reservation, plus background slack');
cmp_ok($wal_bytes, '<', 4096, '100,000 tokens wrote (almost) no WAL');

$node->stop;
done_testing();
