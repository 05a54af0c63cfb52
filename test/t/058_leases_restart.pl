
# Copyright (c) 2026, the fencing developers
#
# 058_leases_restart.pl -- LL5: leases that outlive a transaction across a
# clean restart, a crash restart (SIGKILL of the postmaster) and the
# promotion of a streaming standby (src/locks/lease_store.c).
#
# Each time a live holder, which renews, keeps its lease: its renewal
# against the new server works.  A dead holder's lease, never renewed
# again, counts as renewed when the new server starts serving, and ends
# one ttl later: until then nobody else gets the name, then someone does,
# with a token above every token of the old server.  A lease comes back
# from the state file alone (its record before the last checkpoint) and
# from WAL alone (the file removed, its record after the checkpoint).  A
# damaged file is a WARNING, and the server starts without leases.  A lease
# that lapsed before a crash stays lapsed, also when the keeper never wrote
# the lapse down, and keeps the lock-delay its lapse started.  On the
# standby the view shows the primary's leases and the lease functions
# raise 25006.

use strict;
use warnings;

use FindBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep time);

use lib "$FindBin::RealBin/../perl";
use FencingTest qw(kill9_and_restart lease_keeper_pid);

my $ttl = 6;

my $node = PostgreSQL::Test::Cluster->new('leases_primary');
$node->init(allows_streaming => 1);
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'fencing'\nrestart_after_crash = on\n");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION fencing');

sub sql { my ($n, $q) = @_; return $n->safe_psql('postgres', $q); }

# A live holder and a dead one take leases of $ttl seconds; returns their
# tokens.
sub take_leases
{
	my ($n, $tag) = @_;
	return (
		sql($n, "SELECT fencing.acquire_lease('live $tag', '$ttl seconds')"),
		sql($n, "SELECT fencing.acquire_lease('dead $tag', '$ttl seconds')"));
}

# The keeper writes the file soon after each change, and the WAL writer
# flushes the records: let both happen.
sub settle
{
	my ($n) = @_;
	my $lsn = sql($n, 'SELECT pg_current_wal_insert_lsn()');
	$n->poll_query_until('postgres', "SELECT pg_current_wal_flush_lsn() >= '$lsn'")
	  or die 'the lease records were not flushed';
	sleep(0.3);
}

# After a restart or a promotion at $started (epoch seconds): the live
# holder renews; the dead holder's lease holds for one ttl from the start
# of service, then the name goes to a new holder with a higher token.
sub check_after
{
	my ($n, $tag, $live, $dead, $started, $max_token) = @_;

	like(sql($n, "SELECT fencing.renew_lease('live $tag', $live)"), qr/^\d{4}-/,
		"$tag: the live holder renews against the new server");
	my ($token, $expires) = split /\|/, sql($n,
		"SELECT token, extract(epoch FROM expires_at) FROM fencing.leases WHERE name = 'dead $tag'");
	is($token, $dead, "$tag: the dead holder's lease is still held");
	cmp_ok($expires, '>=', $started + $ttl - 0.5,
		"$tag: it counts as renewed when the new server started serving");
	is(sql($n, "SELECT fencing.acquire_lease('dead $tag', '1 minute') IS NULL"), 't',
		"$tag: nobody else gets the name before it ends");
	is(sql($n, "BEGIN; SELECT fencing.try_lock('dead $tag') IS NULL; ROLLBACK"), 't',
		"$tag: nor a transaction's lock of it");
	my ($new, $at) = split /\|/, sql($n,
		"SELECT fencing.acquire_lease('dead $tag', '1 minute', '10 seconds'), extract(epoch FROM clock_timestamp())");
	like($new, qr/^\d+$/, "$tag: a new holder gets the name once it ended");
	cmp_ok($at, '>=', $expires, "$tag: not before the end of the dead holder's lease");
	cmp_ok($new, '>', $max_token, "$tag: with a token above every token of the old server");
	sql($n, "SELECT fencing.release_lease(name, token) FROM fencing.leases");
}

# Each case waits a while after taking the leases before the server goes,
# so that an expiry kept from before (not renewed at the start of service)
# would come before start + ttl - 0.5 s, and the check tells them apart.
my $before = 1.2;
my ($rc, $out, $err);

# 1. A clean restart.
my ($live, $dead) = take_leases($node, 'restart');
my $max = sql($node, 'SELECT fencing.latest_token()');
sleep($before);
$node->restart;
my $started = sql($node, 'SELECT extract(epoch FROM pg_postmaster_start_time())');
check_after($node, 'restart', $live, $dead, $started, $max);

# 1b. A restart slower than the leases' ttl: the server is down for longer
# than either lease had left.  What counts is the last moment their state
# was known (the stop), not the clock at the start: both are live then, so
# both are carried over, and the live holder renews.
($live, $dead) = take_leases($node, 'slow restart');
$max = sql($node, 'SELECT fencing.latest_token()');
$node->stop;
sleep($ttl + 1);
$node->start;
$started = sql($node, 'SELECT extract(epoch FROM pg_postmaster_start_time())');
check_after($node, 'slow restart', $live, $dead, $started, $max);

# 1c. The same after a crash: the postmaster killed, down for longer than
# the ttl.
($live, $dead) = take_leases($node, 'slow crash');
settle($node);
$max = sql($node, 'SELECT fencing.latest_token()');
kill9_and_restart($node, before_start => sub { sleep($ttl + 1) });
$started = sql($node, 'SELECT extract(epoch FROM pg_postmaster_start_time())');
check_after($node, 'slow crash', $live, $dead, $started, $max);

# 2. SIGKILL of the postmaster, the records before the last checkpoint:
# the file has them.
($live, $dead) = take_leases($node, 'file');
settle($node);
sql($node, 'CHECKPOINT');
$max = sql($node, 'SELECT fencing.latest_token()');
sleep($before);
kill9_and_restart($node);
$started = sql($node, 'SELECT extract(epoch FROM pg_postmaster_start_time())');
check_after($node, 'file', $live, $dead, $started, $max);

# 3. SIGKILL, the records after the last checkpoint and no file: WAL has
# them.
sql($node, 'CHECKPOINT');
($live, $dead) = take_leases($node, 'wal');
settle($node);
$max = sql($node, 'SELECT fencing.latest_token()');
sleep($before);
kill9_and_restart($node,
	before_start => sub { unlink($node->data_dir . '/fencing.leases') or die "unlink: $!" });
$started = sql($node, 'SELECT extract(epoch FROM pg_postmaster_start_time())');
check_after($node, 'wal', $live, $dead, $started, $max);

# 4. With a lock-delay set, a lease lapses while the keeper is stopped
# (nothing records the lapse), then the keeper dies and the postmaster
# restarts the server: the lease does not come back, and its name stays
# under the delay its lapse started (LL6).
sql($node, "ALTER SYSTEM SET fencing.lock_delay = '60s'");
sql($node, 'SELECT pg_reload_conf()');
my $lapsing = sql($node, "SELECT fencing.acquire_lease('lapsing', '1 second')");
settle($node);
my $keeper = lease_keeper_pid($node);
ok(defined $keeper, 'lapsed: the keeper runs');
kill('STOP', $keeper);
sleep(2);
kill('KILL', $keeper);
my $deadline = time() + 60;
sleep(0.2) until (lease_keeper_pid($node) // $keeper) != $keeper || time() > $deadline;
$node->poll_query_until('postgres', 'SELECT true')
  or die 'the server did not restart after its keeper was killed';
($rc, $out, $err) = $node->psql('postgres', "SELECT fencing.renew_lease('lapsing', $lapsing)");
like($err, qr/FN004|not held with token/,
	'lapsed: a renewal after the lapse is refused after the crash too');
is(sql($node, "SELECT fencing.acquire_lease('lapsing', '1 minute') IS NULL"), 't',
	'lapsed: the name stays under the lock-delay its lapse started');
sql($node, "SELECT fencing.clear_lock_delays('lapsing')");
sql($node, 'ALTER SYSTEM RESET fencing.lock_delay');
sql($node, 'SELECT pg_reload_conf()');

# 5. A damaged file.  The file has a slot per lease, each with its own
# checksum: a damaged slot loses its lease alone (a WARNING says how many),
# a damaged header the whole file.  Either way the server starts, and the
# holder of a lost lease learns it at its next renewal.
sub damage_file
{
	my ($offset, $what) = @_;
	my $file = $node->data_dir . '/fencing.leases';
	open(my $fh, '+<:raw', $file) or die "could not open $file: $!";
	my $content = do { local $/; <$fh> };
	$offset = index($content, $what) if !defined $offset;
	die "\"$what\" is not in $file" if $offset < 0;
	seek($fh, $offset, 0);
	print $fh "X";
	close($fh);
}
($live, $dead) = take_leases($node, 'damaged');
$node->stop;
damage_file(undef, 'live damaged');
my $log_offset = -s $node->logfile;
$node->start;
like(slurp_file($node->logfile, $log_offset),
	qr/WARNING:  1 slots of the fencing lease file "fencing.leases" are damaged; their leases are ignored/,
	'damaged slot: the server starts and says how many leases are gone');
is(sql($node, "SELECT string_agg(name, ',') FROM fencing.leases"), 'dead damaged',
	'damaged slot: the lease of the damaged slot is gone, the other stays');
($rc, $out, $err) = $node->psql('postgres', "SELECT fencing.renew_lease('live damaged', $live)");
like($err, qr/FN004|not held with token/, 'damaged slot: its holder learns that its lease is lost');
$node->stop;
damage_file(16, undef);
$log_offset = -s $node->logfile;
$node->start;
like(slurp_file($node->logfile, $log_offset),
	qr/WARNING:  fencing lease file "fencing.leases" is damaged; its leases are ignored/,
	'damaged header: the server starts and says why the leases are gone');
is(sql($node, 'SELECT count(*) FROM fencing.leases'), 0, 'damaged header: no lease is held');
($rc, $out, $err) = $node->psql('postgres', "SELECT fencing.renew_lease('dead damaged', $dead)");
like($err, qr/FN004|not held with token/, 'damaged header: a holder learns that its lease is lost');
$node->restart;
is(sql($node, 'SELECT count(*) FROM fencing.leases'), 0,
	'damaged header: the file written anew starts clean');

# 6. Promotion of a streaming standby.
$node->backup('leases_backup');
my $standby = PostgreSQL::Test::Cluster->new('leases_standby');
$standby->init_from_backup($node, 'leases_backup', has_streaming => 1);
$standby->start;
($live, $dead) = take_leases($node, 'promotion');
$node->wait_for_catchup($standby, 'replay', $node->lsn('insert'));
is(sql($standby, "SELECT string_agg(name || ':' || token, ',' ORDER BY name) FROM fencing.leases"),
	"dead promotion:$dead,live promotion:$live", 'the standby shows the primary\'s leases');
($rc, $out, $err) = $standby->psql('postgres', "SELECT fencing.renew_lease('live promotion', $live)");
like($err, qr/cannot call fencing.renew_lease\(\) on a hot standby/,
	'lease functions raise an error on the standby');
$max = sql($node, 'SELECT fencing.latest_token()');
sleep($before);
$node->stop('immediate');
# promoted later than the leases' ttl after the primary's end
sleep($ttl + 1);
$standby->promote;
$started = time();
$standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
  or die 'the standby was not promoted';
check_after($standby, 'promotion', $live, $dead, $started - 1, $max);

$standby->stop;
done_testing();
