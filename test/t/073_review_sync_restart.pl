
# Copyright (c) 2026, the fencing developers
#
# 073_review_sync_restart.pl -- after a restart of the primary, an end of
# a lease from before the restart is told without the synchronous
# standby's confirmation (src/locks/lease_store.c: bucket_seq and
# bucket_lsn, what fencing_lease_durable_of asks to be made durable,
# start at zero in the new shared memory), and a promotion of that
# standby makes the lease renewable again (LL2').
#
# 1. A primary with a synchronous standby; a lease "lapsing" of 3 seconds
#    reaches the standby.  The standby stops (it hears nothing more).
# 2. The lease lapses on the primary: its keeper notes the lapse and drops
#    the entry (fencing.lock_delay 0), records flushed locally only.
# 3. The primary restarts cleanly.
# 4. The holder renews: the standby never confirmed the lapse, so the
#    answer must wait for it (as 062 shows without the restart); on this
#    code FN004 comes at once.
# 5. The primary dies, the standby starts and is promoted: it carries the
#    lease over, and the holder that was told FN004 renews it.

use strict;
use warnings;

use FindBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep time);

use lib "$FindBin::RealBin/../perl";
use FencingTest qw(bg_session bg_send bg_finish bg_quit bg_pump_all);

my $primary = PostgreSQL::Test::Cluster->new('review_sync_primary');
$primary->init(allows_streaming => 1);
$primary->append_conf('postgresql.conf', "shared_preload_libraries = 'fencing'\n");
$primary->start;
$primary->safe_psql('postgres', 'CREATE EXTENSION fencing');
$primary->backup('sync_backup');
my $standby = PostgreSQL::Test::Cluster->new('review_sync_standby');
$standby->init_from_backup($primary, 'sync_backup', has_streaming => 1);
$standby->start;
$primary->append_conf('postgresql.conf',
	"synchronous_standby_names = 'review_sync_standby'\n");
$primary->reload;
ok( $primary->poll_query_until(
		'postgres',
		"SELECT sync_state = 'sync' FROM pg_stat_replication WHERE application_name = 'review_sync_standby'"),
	'the standby is synchronous');

sub sql { my ($n, $q) = @_; return $n->safe_psql('postgres', $q); }

my $token = sql($primary, "SELECT fencing.acquire_lease('lapsing', '3 seconds')");
my $expires = sql($primary,
	"SELECT extract(epoch FROM expires_at) FROM fencing.leases WHERE name = 'lapsing'");
$primary->wait_for_catchup($standby, 'replay', $primary->lsn('insert'));
is(sql($standby, "SELECT count(*) FROM fencing.leases WHERE name = 'lapsing'"), '1',
	'the standby knows the lease');
$standby->stop('fast');

my $now = sql($primary, 'SELECT extract(epoch FROM clock_timestamp())');
sleep($expires + 0.3 - $now) if $expires + 0.3 > $now;
ok($primary->poll_query_until('postgres',
	"SELECT count(*) = 0 FROM fencing.leases WHERE name = 'lapsing'"),
	'the primary\'s keeper has ended the lease');
$primary->restart;

my $holder = bg_session($primary);
bg_send($holder, "SELECT fencing.renew_lease('lapsing', $token)");
my $waits = 0;
my $deadline = time() + 30;
while (time() < $deadline)
{
	bg_pump_all();
	last if $holder->{out} =~ /^done 1$/m;
	$waits = sql($primary,
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE pid = $holder->{pid} AND wait_event = 'SyncRep'") eq 't';
	last if $waits;
	sleep(0.05);
}
ok($waits, 'after the restart, the renewal is not answered before the synchronous standby has the lapse');
if (!$waits)
{
	my ($out, $err) = bg_finish($holder);
	like($err, qr/FN004/, 'the holder got FN004 while the standby could not know');
	bg_quit($holder);
}

$primary->kill9;
$standby->start;
$standby->promote;
ok($standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()'),
	'the standby is promoted');
my ($rc, $out, $err) = $standby->psql('postgres', "SELECT fencing.renew_lease('lapsing', $token)");
like($err, qr/not held with token $token/,
	'after the promotion, the lease the holder was told had ended is not renewable (LL2\')');

$standby->stop;
done_testing();
