
# Copyright (c) 2026, the fencing developers
#
# 069_leases_clear_unnoted.pl -- fencing.clear_lock_delays() ends the
# lock-delay of a lease whose lapse nobody has noted yet (the keeper is
# slow or stopped: the entry is still among the live ones), and says so.
#
# fencing.lock_delay = 1h; two leases of 1 second lapse while the keeper
# is stopped; an acquisition of one notes its lapse and is refused under
# the delay; clear_lock_delays ends each delay (1), the one nobody noted
# and the noted one, and frees the names.

use strict;
use warnings;

use FindBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep);

use lib "$FindBin::RealBin/../perl";
use FencingTest qw(lease_keeper_pid);

my $node = PostgreSQL::Test::Cluster->new('review_clear_unnoted');
$node->init;
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'fencing'\nfencing.lock_delay = '1h'\n");
$node->start;
sub sql { return $node->safe_psql('postgres', $_[0]); }
sql('CREATE EXTENSION fencing');

my $keeper = lease_keeper_pid($node);
ok(defined $keeper, 'the keeper runs');
kill('STOP', $keeper);

# x and y lapse while the keeper is stopped.  An acquisition of y notes
# y's lapse and is refused under the delay; nobody looks at x.
sql("SELECT fencing.acquire_lease('x', '1 second'), fencing.acquire_lease('y', '1 second')");
my $expiry = sql("SELECT max(extract(epoch FROM expires_at)) FROM fencing.leases");
my $now = sql('SELECT extract(epoch FROM clock_timestamp())');
while ($now < $expiry + 0.3)
{
	sleep(0.05);
	$now = sql('SELECT extract(epoch FROM clock_timestamp())');
}
is(sql("SELECT fencing.acquire_lease('y', '1 minute') IS NULL"), 't',
	'a lapsed lease keeps its name under the lock-delay');
is(sql("SELECT fencing.clear_lock_delays('x')"), '1',
	'clear_lock_delays ends the delay of a lapsed lease whose lapse nobody noted');
like(sql("SELECT fencing.acquire_lease('x', '1 minute')"), qr/^\d+$/,
	'and the name can be taken');
is(sql("SELECT fencing.clear_lock_delays('y')"), '1',
	'clear_lock_delays ends the delay of the lapse the acquisition noted');
like(sql("SELECT fencing.acquire_lease('y', '1 minute')"), qr/^\d+$/,
	'and that name can be taken');

kill('CONT', $keeper);
$node->stop;
done_testing();
