
# Copyright (c) 2026, the fencing developers
#
# 066_leases_clock_back_grant.pl -- a transaction's lock granted on the
# name of a lapsed lease notes the lease's end first
# (src/locks/leases.c, fencing_lease_until), so that a clock stepped back
# afterwards does not make the lease renewable beside the lock (LL1,
# LL1'; an ended lease stays ended).
#
# A lease on "x" for 2 seconds; the keeper is stopped (nothing else notes
# the lapse); after the expiry a session takes try_lock('x') and keeps its
# transaction open; the clock steps back a minute (libfaketime); the
# lease's holder renews and gets FN004, and fencing.locks shows one
# holder.

use strict;
use warnings;

use FindBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep time);

use lib "$FindBin::RealBin/../perl";
use FencingTest qw(libfaketime start_with_fake_clock set_fake_offset lease_keeper_pid
  bg_session bg_send bg_finish bg_quit);

plan skip_all => 'libfaketime is not installed' unless libfaketime();

my $tmp = PostgreSQL::Test::Utils::tempdir();
my $offset_file = "$tmp/clock_offset";
set_fake_offset($offset_file, '+0');

my $node = PostgreSQL::Test::Cluster->new('review_clock_back_lock');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'fencing'\n");
start_with_fake_clock($node, file => $offset_file);
sub sql { return $node->safe_psql('postgres', $_[0]); }
sql('CREATE EXTENSION fencing');

my $token = sql("SELECT fencing.acquire_lease('x', '2 seconds')");
my $expiry = sql("SELECT extract(epoch FROM expires_at) FROM fencing.leases WHERE name = 'x'");
my $keeper = lease_keeper_pid($node);
ok(defined $keeper, 'the keeper runs');
kill('STOP', $keeper);

my $now = sql('SELECT extract(epoch FROM clock_timestamp())');
while ($now < $expiry + 0.3)
{
	sleep(0.05);
	$now = sql('SELECT extract(epoch FROM clock_timestamp())');
}

my $b = bg_session($node);
bg_send($b, "BEGIN; SELECT fencing.try_lock('x')");
my ($locked) = bg_finish($b);
like($locked, qr/^BEGIN\n\d+$/, 'after the lapse, try_lock takes the name');

set_fake_offset($offset_file, '-60');
my ($rc, $out, $err) = $node->psql('postgres', "SELECT fencing.renew_lease('x', $token)");
like($err, qr/FN004|not held with token $token/,
	'a minute back, the lapsed lease is not renewed while another holds its name');
is(sql("SELECT count(*) FROM fencing.locks WHERE name = 'x' AND granted"), '1',
	'fencing.locks shows one holder of the name');

kill('CONT', $keeper);
bg_send($b, 'COMMIT');
bg_finish($b);
bg_quit($b);
$node->stop;
done_testing();
