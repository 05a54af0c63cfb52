
# Copyright (c) 2026, the fencing developers
#
# 068_leases_sync_restart.pl -- after the primary restarts, the end of a
# lease from before the restart is told (FN004) only once the synchronous
# standby has it, and a promotion of that standby keeps it ended (LL2';
# src/locks/lease_store.c: at the start of service, whoever tells an end
# first waits for everything the server knew at its start).
#
# A primary with a synchronous standby; a lease of 3 seconds reaches the
# standby; the standby stops; the lease lapses on the primary, whose
# keeper ends and drops it; the primary restarts cleanly; the holder's
# renewal waits for the standby (SyncRep); the standby starts again and
# confirms; the holder gets FN004; the primary dies, the standby is
# promoted, and the lease is still not renewable there.

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
if ($waits)
{
	$standby->start;
	my ($out, $err) = bg_finish($holder);
	like($err, qr/FN004/, 'once the standby has it, the holder gets FN004');
}
else
{
	my ($out, $err) = bg_finish($holder);
	like($err, qr/FN004/, 'the holder got FN004 while the standby could not know');
}
bg_quit($holder);

$primary->kill9;
$standby->start if !$waits;
$standby->promote;
ok($standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()'),
	'the standby is promoted');
my ($rc, $out, $err) = $standby->psql('postgres', "SELECT fencing.renew_lease('lapsing', $token)");
like($err, qr/not held with token $token/,
	'after the promotion, the lease the holder was told had ended is not renewable (LL2\')');

$standby->stop;
done_testing();
