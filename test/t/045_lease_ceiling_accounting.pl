
# Copyright (c) 2026, the fencing developers
#
# 045_lease_ceiling_accounting.pl -- what fencing.lease(name, ttl, max_hold)
# says about the sessions its ceiling ends: fencing.stats counts exactly
# those, whatever the server logs, and the lock-delay applies to them.
#
# Phase 1, all holders at once, fencing.lock_delay off:
#	- a holder whose role has log_min_messages = panic (set by a superuser
#	  with ALTER ROLE): the server logs nothing of its ending, but the
#	  ceiling still ends it at max_hold and it is counted;
#	- a holder whose role has log_min_messages = fatal, with an error inside
#	  a savepoint and then a statement every 0.1 s, each refused in the
#	  aborted subtransaction (each refusal stops every timer of the
#	  backend, and none is logged): the ceiling still ends it;
#	- a holder terminated with pg_terminate_backend() before its max_hold:
#	  not counted, no LOG line naming its lease;
#	- a holder whose ttl ends it before its max_hold: counted as an expired
#	  lease, not as a ceiling, no LOG line naming its lease.
# Phase 2, fencing.lock_delay = 1h: a holder ended by its ceiling leaves
# the name delayed (fencing.locks shows delayed_until, try_lock is refused).
# Last, a walsender (which uses SIGUSR2, the signal of the ceiling's timer)
# is refused a lease with max_hold, and holds nothing.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use FencingTest qw(take_lease session_gone);
use Time::HiRes qw(time sleep);

my $node = PostgreSQL::Test::Cluster->new('ceiling_accounting');
$node->init(allows_streaming => 1);
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'fencing'");
$node->start;
$node->safe_psql('postgres', <<'EOF');
CREATE EXTENSION fencing;
CREATE ROLE quiet LOGIN;
ALTER ROLE quiet SET log_min_messages = panic;
CREATE ROLE quiet_errors LOGIN;
ALTER ROLE quiet_errors SET log_min_messages = fatal;
EOF

sub sql { return $node->safe_psql('postgres', $_[0]) }

# A holder: a session (as role, if given) in an open transaction holding a
# lease; the server's clock just before the call is t0.
sub holder
{
	my ($name, $ttl, $max_hold, $role) = @_;
	my $s = $node->background_psql('postgres', on_error_stop => 0,
		$role ? (extra_params => [ '-U', $role ]) : ());
	my $pid = $s->query_safe('SELECT pg_backend_pid()');
	$s->query_safe('BEGIN');
	my ($t0, $token) = split /\|/,
	  $s->query_safe(
		"SELECT clock_timestamp(), fencing.lease('$name', '$ttl', '$max_hold')");
	die "no lease on $name" unless length $token;
	return { session => $s, pid => $pid, t0 => $t0, name => $name };
}

# Poll try_lock until the name is free (at most 30 s), calling tick (if
# given) between polls: whether it became free, and whether that was at
# least $limit after t0.
sub wait_free
{
	my ($h, $limit, $tick) = @_;
	my $give_up = time() + 30;
	while (time() < $give_up)
	{
		my ($free, $late) = split /\|/,
		  sql("BEGIN; SELECT fencing.try_lock('$h->{name}') IS NOT NULL, "
			  . "clock_timestamp() - '$h->{t0}'::timestamptz >= '$limit'::interval; COMMIT;");
		return (1, $late eq 't') if $free eq 't';
		$tick->() if $tick;
		sleep(0.1);
	}
	return (0, 1);
}

# ---- phase 1 ------------------------------------------------------------

my $quiet = holder('quiet', '1 hour', '2 seconds', 'quiet');
is($quiet->{session}->query_safe('SHOW log_min_messages'),
	'panic', 'the quiet holder runs with log_min_messages = panic');
my $refused = holder('refused', '1 hour', '2 seconds', 'quiet_errors');
$refused->{session}->query_safe('SAVEPOINT s');
$refused->{session}->query('SELECT 1/0');
my $refused_tick = sub {
	# send without waiting: psql prints the refusal to stderr
	eval {
		$refused->{session}->{stdin} .= "SELECT 1;\n";
		$refused->{session}->{run}->pump_nb;
	};
};
my $terminated = holder('terminated', '1 hour', '1 hour');
my $expired = holder('expired', '1 second', '1 hour');

ok(sql("SELECT pg_terminate_backend($terminated->{pid})") eq 't'
	  && session_gone($node, $terminated->{pid}),
	'a holder terminated before its max_hold is gone');

my ($free, $not_early) = wait_free($refused, '2 seconds', $refused_tick);
ok($free,
	'refused statements, log_min_messages = fatal: another session gets the name');
ok($not_early, 'refused statements, log_min_messages = fatal: never before max_hold');
ok(session_gone($node, $refused->{pid}),
	"refused statements, log_min_messages = fatal: the holder's session is gone");

($free, $not_early) = wait_free($quiet, '2 seconds');
ok($free, 'log_min_messages = panic: another session gets the name');
ok($not_early, 'log_min_messages = panic: never before max_hold');
ok(session_gone($node, $quiet->{pid}),
	"log_min_messages = panic: the holder's session is gone");
ok(session_gone($node, $expired->{pid}), 'the holder whose ttl passed is gone');

is( sql('SELECT leases_ceiling_ended, leases_expired FROM fencing.stats'),
	'2|1',
	'the ceiling ended two sessions (whatever the log level), the ttl another, and termination is neither'
);
ok(!$node->log_contains(qr/fencing lease "terminated" reached its max_hold/),
	'no LOG line claims the ceiling ended the terminated holder');
ok(!$node->log_contains(qr/fencing lease "expired" reached its max_hold/),
	'no LOG line claims the ceiling ended the holder whose ttl passed');

# ---- phase 2: lock-delay --------------------------------------------------

sql("ALTER SYSTEM SET fencing.lock_delay = '1h'");
sql('SELECT pg_reload_conf()');
$node->poll_query_until('postgres',
	"SELECT current_setting('fencing.lock_delay') = '1h'")
  or die 'fencing.lock_delay did not become 1h';

my $delayed = holder('delayed', '1 hour', '2 seconds');
ok(session_gone($node, $delayed->{pid}),
	'lock_delay on: the ceiling ends the holder');
is( sql("SELECT delayed_until > now() + '50 minutes' FROM fencing.locks
		  WHERE name = 'delayed' AND delayed_until IS NOT NULL"),
	't',
	'lock_delay on: the name of a holder the ceiling ended is delayed');
is( sql("BEGIN; SELECT fencing.try_lock('delayed') IS NULL; COMMIT;"),
	't', 'lock_delay on: and nobody is granted it');
ok( $node->log_contains(
		qr/LOG:  fencing lease "delayed" reached its max_hold of 2000 ms; the server ended its session/),
	'lock_delay on: the server log names the lease');
is(sql('SELECT leases_ceiling_ended FROM fencing.stats'),
	'3', 'and it is counted');

# ---- a process that uses SIGUSR2 itself --------------------------------

# a walsender connection that runs SQL (replication=database): the timer of
# max_hold signals SIGUSR2, which a walsender uses, so the lease is refused
# before it takes the lock
my ($ret, $out, $err) = $node->psql('postgres',
	"SELECT fencing.lease('walsender', '1 hour', '2 seconds')",
	connstr => $node->connstr('postgres') . ' replication=database',
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($err, qr/0A000: a lease with max_hold cannot be taken in this process/,
	'a walsender cannot take a lease with max_hold (0A000)');
is(sql("BEGIN; SELECT fencing.try_lock('walsender') IS NOT NULL; COMMIT;"),
	't', 'and it took nothing');

$node->stop;
done_testing();
