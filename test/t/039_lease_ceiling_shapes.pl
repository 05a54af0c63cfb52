
# Copyright (c) 2026, the fencing developers
#
# 039_lease_ceiling_shapes.pl -- fencing.lease(name, ttl, max_hold) against
# the statement and transaction shapes a careless or hostile holder could
# use to keep its lock past max_hold.
#
# Each holder takes a lease with a ttl of an hour (so its idle limit never
# ends it) and a max_hold of 2 s, noting the server's clock just before the
# call (t0); another session then polls try_lock: the name must never be
# free before 2 s after t0, and must be free well before 30 s, with the
# holder's session gone.  The shapes: an error inside a savepoint, then
# idle; the same with a statement_timeout cancel and a lock_timeout; an
# error inside a savepoint followed by more statements (each refused in the
# aborted subtransaction); a pg_sleep inside a PL/pgSQL block that catches
# everything; a COPY FROM STDIN whose client sends nothing; a WITH HOLD
# cursor whose query runs at COMMIT; the same name leased again with a
# later max_hold; a name taken by try_lock before its lease; a savepoint
# rolled back that did not take the lease; a COPY TO STDOUT whose client
# stops reading; a wait for a row lock and one in fencing.lock(), both
# without a timeout; on 17+, one statement that
# switches transaction_timeout off while it sleeps (a function's SET clause,
# set_config).  All holders run at once.  Each ending is counted in
# fencing.stats and named in the server log.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use FencingTest qw(take_lease session_gone);
use Time::HiRes qw(time sleep);

my $node = PostgreSQL::Test::Cluster->new('ceiling_shapes');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'fencing'");
$node->start;
$node->safe_psql('postgres', <<'EOF2');
CREATE EXTENSION fencing;
CREATE TABLE copied (x int);
CREATE FUNCTION sleep_catching_all(seconds float8) RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
	PERFORM pg_sleep(seconds);
	RETURN 'slept';
EXCEPTION WHEN OTHERS THEN
	PERFORM pg_sleep(seconds);
	RETURN 'caught';
END $$;
EOF2

# A holder: a session in an open transaction, its pid.
sub holder
{
	my (@setup) = @_;
	my $s = $node->background_psql('postgres', on_error_stop => 0);
	my $pid = $s->query_safe('SELECT pg_backend_pid()');
	$s->query_safe($_) for ('BEGIN', @setup);
	return { session => $s, pid => $pid };
}

# Poll try_lock on every name until each is free (at most 30 s in all),
# calling each tick between rounds, so that no holder waits for another.
# Returns, per name, whether it became free, whether it was free only
# $limit after its t0, and the seconds from t0 to the first free finding.
sub wait_all_free
{
	my ($limit, $cases, @ticks) = @_;
	my %seen;
	my $give_up = time() + 30;
	while (time() < $give_up && keys %seen < @$cases)
	{
		for my $case (@$cases)
		{
			my ($what, $h, $name) = @$case;
			next if $seen{$name};
			my ($free, $late, $elapsed) = split /\|/,
			  $node->safe_psql('postgres',
				"BEGIN; SELECT fencing.try_lock('$name') IS NOT NULL, "
				  . "clock_timestamp() - '$h->{t0}'::timestamptz >= '$limit'::interval, "
				  . "extract(epoch FROM clock_timestamp() - '$h->{t0}'::timestamptz); COMMIT;"
			  );
			$seen{$name} = [ 1, $late eq 't', $elapsed ] if $free eq 't';
		}
		$_->() for @ticks;
		sleep(0.1);
	}
	return map { $seen{ $_->[2] } // [ 0, 1, undef ] } @$cases;
}

# error inside a savepoint, then idle: the outer transaction keeps the lock
my $error_idle = holder();
take_lease($error_idle, 'error-idle', '2 seconds');
$error_idle->{session}->query_safe('SAVEPOINT s');
$error_idle->{session}->query('SELECT 1/0');

# a statement_timeout cancel inside a savepoint, then idle
my $cancel_idle = holder();
take_lease($cancel_idle, 'cancel-idle', '2 seconds');
$cancel_idle->{session}->query_safe('SAVEPOINT s');
$cancel_idle->{session}->query_safe("SET LOCAL statement_timeout = '100ms'");
$cancel_idle->{session}->query('SELECT pg_sleep(5)');

# a lock_timeout inside a savepoint (waiting for a row another session
# keeps locked), then idle
$node->safe_psql('postgres', 'INSERT INTO copied VALUES (1)');
my $blocker = $node->background_psql('postgres');
$blocker->query_safe('BEGIN');
$blocker->query_safe('SELECT * FROM copied FOR UPDATE');
$blocker->query_safe("SELECT fencing.try_lock('held-by-blocker')");
my $lock_wait = holder();
take_lease($lock_wait, 'lock-wait', '2 seconds');
$lock_wait->{session}->query_safe('SAVEPOINT s');
$lock_wait->{session}->query_safe("SET LOCAL lock_timeout = '100ms'");
$lock_wait->{session}->query('SELECT * FROM copied FOR UPDATE');

# error inside a savepoint, then a statement every 0.1 s (each refused:
# the subtransaction is aborted), so the holder is never idle for long
my $error_busy = holder();
take_lease($error_busy, 'error-busy', '2 seconds');
$error_busy->{session}->query_safe('SAVEPOINT s');
$error_busy->{session}->query('SELECT 1/0');
my $error_busy_tick = sub {
	# send without waiting: psql prints the refusal to stderr
	eval {
		$error_busy->{session}->{stdin} .= "SELECT 1;\n";
		$error_busy->{session}->{run}->pump_nb;
	};
};

# pg_sleep in a PL/pgSQL block that catches everything
my $catch_all = holder();
take_lease($catch_all, 'catch-all', '2 seconds');
$catch_all->{session}->query_until(qr/sleeping/,
	"\\echo sleeping\nSELECT sleep_catching_all(60);\n");

# COPY FROM STDIN whose client never sends the data
my $copy = holder();
take_lease($copy, 'copy', '2 seconds');
$copy->{session}->query_until(qr/copying/, "\\echo copying\nCOPY copied FROM STDIN;\n");

# a WITH HOLD cursor whose query runs at COMMIT
my $with_hold = holder();
take_lease($with_hold, 'with-hold', '2 seconds');
$with_hold->{session}->query_safe(
	'DECLARE c CURSOR WITH HOLD FOR SELECT pg_sleep(60)');
$with_hold->{session}->query_until(qr/committing/, "\\echo committing\nCOMMIT;\n");

# the same name leased again with a later max_hold, then idle
my $again = holder();
take_lease($again, 'again', '2 seconds');
$again->{session}->query_safe("SELECT pg_sleep(0.1), fencing.lease('again', '1 hour', '1 hour')");

# try_lock first, the lease with max_hold second, then idle
my $try_first = holder('SELECT fencing.try_lock(\'try-first\')');
take_lease($try_first, 'try-first', '2 seconds');

# a savepoint rolled back that did not take the lease, then idle
my $other_sp = holder();
take_lease($other_sp, 'other-savepoint', '2 seconds');
$other_sp->{session}->query_safe('SAVEPOINT s');
$other_sp->{session}->query_safe("SELECT fencing.lease('other-savepoint-2', '1 hour', '1 hour')");
$other_sp->{session}->query_safe('ROLLBACK TO SAVEPOINT s');

# COPY TO STDOUT whose client stops reading: psql blocks writing to its
# stdout, which this script does not read, so the backend blocks sending
my $copy_out = holder();
take_lease($copy_out, 'copy-out', '2 seconds');
$copy_out->{session}->{stdin} .=
  "COPY (SELECT repeat('x', 1000) FROM generate_series(1, 1000000)) TO STDOUT;\n";
$copy_out->{session}->{run}->pump_nb;
ok( $node->poll_query_until('postgres',
		"SELECT wait_event = 'ClientWrite' FROM pg_stat_activity WHERE pid = $copy_out->{pid}"),
	'COPY TO STDOUT: the holder blocks sending to its client');

# waits without a timeout: for a row lock, and in fencing.lock()
my $row_wait = holder();
take_lease($row_wait, 'row-wait', '2 seconds');
$row_wait->{session}->query_until(qr/waiting/,
	"\\echo waiting\nSELECT * FROM copied FOR UPDATE;\n");
my $lock_fn_wait = holder();
take_lease($lock_fn_wait, 'lock-fn-wait', '2 seconds');
$lock_fn_wait->{session}->query_until(qr/waiting/,
	"\\echo waiting\nSELECT fencing.lock('held-by-blocker');\n");

# 17+: one statement that switches core's transaction timeout off while it
# runs (the timer is stopped by the setting's assign hook and, when the
# setting comes back, armed again from that moment): the ceiling must not
# wait for the statement
my $v17 = $node->safe_psql('postgres', 'SHOW server_version_num') >= 170000;
my @v17_cases;
if ($v17)
{
	$node->safe_psql('postgres', <<'EOF2');
CREATE FUNCTION sleep_without_transaction_timeout(seconds float8) RETURNS void
LANGUAGE sql SET transaction_timeout = 0 AS 'SELECT pg_sleep(seconds)';
EOF2
	my $set_clause = holder();
	take_lease($set_clause, 'set-clause', '2 seconds');
	$set_clause->{session}->query_until(qr/sleeping/,
		"\\echo sleeping\nSELECT sleep_without_transaction_timeout(60);\n");
	my $set_config = holder();
	take_lease($set_config, 'set-config', '2 seconds');
	$set_config->{session}->query_until(qr/sleeping/,
		"\\echo sleeping\nSELECT set_config('transaction_timeout', '0', true), pg_sleep(60);\n");
	@v17_cases = (
		[ "17+: a function's SET transaction_timeout = 0 while it sleeps", $set_clause, 'set-clause' ],
		[ "17+: set_config('transaction_timeout', '0') in a sleeping statement", $set_config, 'set-config' ]);
}

my @cases = (
	[ 'an error inside a savepoint, then idle', $error_idle, 'error-idle' ],
	[ 'a statement_timeout cancel inside a savepoint, then idle', $cancel_idle, 'cancel-idle' ],
	[ 'a lock_timeout inside a savepoint, then idle', $lock_wait, 'lock-wait' ],
	[ 'an error inside a savepoint, then refused statements', $error_busy, 'error-busy' ],
	[ 'pg_sleep in a PL/pgSQL block catching OTHERS', $catch_all, 'catch-all' ],
	[ 'COPY FROM STDIN waiting for its client', $copy, 'copy' ],
	[ 'a WITH HOLD cursor run at COMMIT', $with_hold, 'with-hold' ],
	[ 'the same name leased again with a later max_hold', $again, 'again' ],
	[ 'try_lock first, lease with max_hold second', $try_first, 'try-first' ],
	[ 'a rolled-back savepoint that did not take the lease', $other_sp, 'other-savepoint' ],
	[ 'COPY TO STDOUT whose client stops reading', $copy_out, 'copy-out' ],
	[ 'a wait for a row lock without a timeout', $row_wait, 'row-wait' ],
	[ 'a wait in fencing.lock() without a timeout', $lock_fn_wait, 'lock-fn-wait' ],
	@v17_cases);
my @results = wait_all_free('2 seconds', \@cases, $error_busy_tick);
for my $i (0 .. $#cases)
{
	my ($what, $h, $name) = @{ $cases[$i] };
	my ($free, $not_early, $elapsed) = @{ $results[$i] };
	ok($free, "$what: another session gets the name");
	ok($not_early, "$what: never before max_hold");
	ok(defined $elapsed && $elapsed < 30,
		"$what: well before 30 s (" . ($elapsed // 'never') . ' s)');
	ok($free && session_gone($node, $h->{pid}), "$what: the holder's session is gone");
	ok( $node->log_contains(
			qr/LOG:  fencing lease "\Q$name\E" reached its max_hold of 2000 ms; the server ended its session/),
		"$what: the server log names the lease");
}
is( $node->safe_psql('postgres', 'SELECT leases_ceiling_ended FROM fencing.stats'),
	scalar(@cases),
	'fencing.stats counts every session a ceiling ended');

$blocker->query_safe('COMMIT');
$blocker->quit;
$copy_out->{session}->{run}->kill_kill;
$node->stop;
done_testing();
