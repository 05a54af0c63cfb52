
# Copyright (c) 2026, the fencing developers
#
# 062_leases_promotion.pl -- a lease that was told it ended stays ended
# when a synchronous standby is promoted (LL2'), and a live one is carried
# over (LL5) (src/locks/lease_store.c, fencing_lease_make_durable).
#
# The primary's keeper is stopped, so that only the FN004's own path can
# tell the standby that the lease lapsed, and so is its walsender, so that
# the standby hears nothing more of the primary.  The holder's renewal
# after the expiry is not answered while the standby cannot confirm the
# lapse: it waits as a commit waits for a synchronous standby (SyncRep).
# Once the walsender runs again it gets FN004.  The primary then stops at
# once and the standby is promoted: the lease is still ended there, and a
# lease renewed before the walsender stopped is still held.  Were the
# holder told FN004 before the standby had the lapse, the promoted
# standby would carry the lease over and renew it.

use strict;
use warnings;

use FindBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep time);

use lib "$FindBin::RealBin/../perl";
use FencingTest qw(lease_keeper_pid bg_session bg_send bg_finish bg_quit bg_pump_all);

my $primary = PostgreSQL::Test::Cluster->new('leases_sync_primary');
$primary->init(allows_streaming => 1);
$primary->append_conf('postgresql.conf', "shared_preload_libraries = 'fencing'\n");
$primary->start;
$primary->safe_psql('postgres', 'CREATE EXTENSION fencing');
$primary->backup('sync_backup');
my $standby = PostgreSQL::Test::Cluster->new('leases_sync_standby');
$standby->init_from_backup($primary, 'sync_backup', has_streaming => 1);
$standby->start;
$primary->append_conf('postgresql.conf',
	"synchronous_standby_names = 'leases_sync_standby'\n");
$primary->reload;
ok( $primary->poll_query_until(
		'postgres',
		"SELECT sync_state = 'sync' FROM pg_stat_replication WHERE application_name = 'leases_sync_standby'"),
	'the standby is synchronous');

sub sql { my ($n, $q) = @_; return $n->safe_psql('postgres', $q); }

# A ttl long enough that a lease carried over at the promotion would still
# be held when the test renews it there.
my $ending = sql($primary, "SELECT fencing.acquire_lease('ending', '4 seconds')");
my $live = sql($primary, "SELECT fencing.acquire_lease('live', '1 hour')");
my $expires = sql($primary,
	"SELECT extract(epoch FROM expires_at) FROM fencing.leases WHERE name = 'ending'");
$primary->wait_for_catchup($standby, 'replay', $primary->lsn('insert'));
is(sql($standby, "SELECT string_agg(name, ',' ORDER BY name) FROM fencing.leases"),
	'ending,live', 'the standby knows both leases');

my $keeper = lease_keeper_pid($primary);
my $walsender = sql($primary, "SELECT pid FROM pg_stat_replication WHERE application_name = 'leases_sync_standby'");
ok(defined $keeper && $walsender =~ /^\d+$/, 'the keeper and the walsender run');
kill('STOP', $keeper, $walsender);
my $now = sql($primary, 'SELECT extract(epoch FROM clock_timestamp())');
sleep($expires + 0.3 - $now) if $expires + 0.3 > $now;

my $holder = bg_session($primary);
bg_send($holder, "SELECT fencing.renew_lease('ending', $ending)");
# The renewal either waits for the standby, or it was answered at once.
my $waits = 0;
my $deadline = time() + 60;
while (time() < $deadline)
{
	bg_pump_all();
	last if $holder->{out} =~ /^done 1$/m;
	$waits = sql($primary,
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE pid = $holder->{pid} AND wait_event = 'SyncRep'") eq 't';
	last if $waits;
	sleep(0.05);
}
ok($waits, 'the renewal after the expiry is not answered before the synchronous standby has the lapse');
if ($waits)
{
	kill('CONT', $walsender);
	my ($out, $err) = bg_finish($holder);
	like($err, qr/FN004.*not held with token $ending/s, 'once the standby has it, the holder gets FN004');
}
else
{
	# told before the standby knew: the walsender is still stopped
	my ($out, $err) = bg_finish($holder);
	like($err, qr/FN004/, 'the holder got FN004 while the standby could not know');
}
bg_quit($holder);
# The primary dies at once, with the processes still stopped.
$primary->kill9;
kill('KILL', $keeper, $walsender);
$standby->promote;
ok($standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()'),
	'the standby is promoted');

my ($rc, $out, $err) = $standby->psql('postgres', "SELECT fencing.renew_lease('ending', $ending)");
like($err, qr/not held with token $ending/,
	'after the promotion the lease told it ended is still not renewable');
like(sql($standby, "SELECT fencing.renew_lease('live', $live)"), qr/^\d{4}-/,
	'and the live lease is carried over');
like(sql($standby, "SELECT fencing.acquire_lease('ending', '1 minute')"), qr/^\d+$/,
	'the ended lease\'s name can be taken on the new primary');

$standby->stop;
done_testing();
