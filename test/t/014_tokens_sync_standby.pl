
# Copyright (c) 2026, the fencing developers
#
# 014_tokens_sync_standby.pl -- T2 and T3 with synchronous replication:
#  - while synchronous_standby_names names a standby that has not confirmed
#    a reservation, no token is handed out, even in the moment after the
#    setting changed when the server's own wait does not wait yet (the
#    checkpointer has not seen it): the call fails with 57014;
#  - while the synchronous standby is down, a reservation waits (wait event
#    SyncRep) instead of handing out an unconfirmed token; cancelling the
#    wait raises an error and returns no token, with no word of a
#    transaction that "committed locally" (none did), whatever the session's
#    log_min_messages; terminating it ends the session with the usual FATAL;
#    once the standby is back, calls succeed;
#  - a cancelled advance_token moves nothing later tokens are served from:
#    they continue where they were, not above its unconfirmed target;
#  - a standby rebuilt with pg_basebackup while a reservation waits for it
#    (its record already in WAL, before the backup's checkpoint) releases
#    the waiter, and once promoted continues above every token the primary
#    handed out from that reservation, although the counter is far ahead of
#    the clock (the clock floor cannot help).

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use FindBin;
use lib "$FindBin::RealBin/../perl";
use FencingTest;

my $primary = PostgreSQL::Test::Cluster->new('primary');
$primary->init(allows_streaming => 1);
$primary->append_conf('postgresql.conf', "shared_preload_libraries = 'fencing'");
$primary->start;
$primary->safe_psql('postgres', 'CREATE EXTENSION fencing');
$primary->safe_psql('postgres', 'SELECT fencing.next_token()');

my @verbose = (extra_params => [ '-v', 'VERBOSITY=verbose' ]);

# synchronous_standby_names set while the checkpointer, which tells the
# server's commit wait that synchronous standbys exist, is stopped: commits
# do not wait yet, but a reservation must not hand out a token that no
# synchronous standby confirmed.
{
	my $checkpointer = $primary->safe_psql('postgres',
		"SELECT pid FROM pg_stat_activity WHERE backend_type = 'checkpointer'");
	kill('STOP', $checkpointer) or die "could not stop the checkpointer: $!";
	$primary->safe_psql('postgres',
		"ALTER SYSTEM SET synchronous_standby_names = 'absent_standby'");
	$primary->safe_psql('postgres', 'SELECT pg_reload_conf()');
	$primary->poll_query_until('postgres',
		"SELECT current_setting('synchronous_standby_names') = 'absent_standby'")
	  or die 'the new synchronous_standby_names did not reach new sessions';
	my $latest = $primary->safe_psql('postgres', 'SELECT fencing.latest_token()');
	my ($ret, $stdout, $stderr) = $primary->psql('postgres',
		'SELECT fencing.advance_token(reserved_limit) FROM fencing.status()', @verbose);
	isnt($ret, 0,
		'synchronous_standby_names names a standby that did not confirm: the reservation fails');
	like($stderr, qr/ERROR:\s+57014:.*synchronous standbys/s,
		'... with 57014 and a message about synchronous standbys');
	is($stdout, '', '... and returns no token');
	kill('CONT', $checkpointer) or die "could not continue the checkpointer: $!";
	$primary->safe_psql('postgres', 'ALTER SYSTEM RESET synchronous_standby_names');
	$primary->safe_psql('postgres', 'SELECT pg_reload_conf()');
	$primary->poll_query_until('postgres',
		"SELECT current_setting('synchronous_standby_names') = ''")
	  or die 'synchronous_standby_names was not reset';
	cmp_ok($primary->safe_psql('postgres', 'SELECT fencing.next_token()'), '>', $latest,
		'with synchronous_standby_names empty again, tokens are handed out');
}

$primary->backup('backup');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'backup', has_streaming => 1);
$standby->start;

# The standby's walreceiver connects with application_name = its node name.
$primary->safe_psql('postgres',
	"ALTER SYSTEM SET synchronous_standby_names = 'standby'");
$primary->reload;
ok( $primary->poll_query_until(
		'postgres',
		"SELECT sync_state = 'sync' FROM pg_stat_replication WHERE application_name = 'standby'"),
	'the standby is synchronous');

# With the standby up, a reservation is confirmed and returns.
my $last = $primary->safe_psql('postgres',
	'SELECT fencing.advance_token(fencing.latest_token() + 2000000)');
$last = $primary->safe_psql('postgres', 'SELECT fencing.next_token()');
like($last, qr/^\d+$/, 'a reservation with the synchronous standby up returns');

$standby->stop;
$primary->poll_query_until('postgres',
	"SELECT count(*) = 0 FROM pg_stat_replication WHERE application_name = 'standby'")
  or die 'the standby did not disconnect';

# Start a call that needs a reservation in a background session; check that
# it is still waiting for the synchronous standby a second later; cancel
# it; the call must fail with an error and print no token.
sub start_waiting_call
{
	my ($label, $sql, $setup) = @_;
	my $session = $primary->background_psql('postgres', on_error_stop => 0,
		extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	my $pid = $session->query_safe('SELECT pg_backend_pid()');
	$session->query_safe($setup) if defined $setup;
	$session->query_until(qr/started/, "\\echo started\n$sql;\n");

	# Until it waits, or has returned without waiting (then fail at once).
	$primary->poll_query_until('postgres',
		"SELECT wait_event = 'SyncRep'
				OR (state = 'idle' AND strpos(query, \$q\$$sql\$q\$) > 0)
		 FROM pg_stat_activity WHERE pid = $pid")
	  or die "$label: the call neither waited nor returned";
	is( $primary->safe_psql(
			'postgres', "SELECT wait_event FROM pg_stat_activity WHERE pid = $pid"),
		'SyncRep', "$label: the call waits for the synchronous standby");
	return { session => $session, pid => $pid, label => $label };
}

sub check_still_waiting
{
	my ($call) = @_;
	my $pid = $call->{pid};
	is( $primary->safe_psql(
			'postgres',
			"SELECT state, wait_event_type, wait_event FROM pg_stat_activity WHERE pid = $pid"),
		'active|IPC|SyncRep',
		"$call->{label}: still waiting for the synchronous standby");
	return;
}

sub cancel_and_check
{
	my ($call, $expect_re) = @_;
	my $label = $call->{label};
	my $session = $call->{session};

	my $log_offset = -s $primary->logfile;
	is($primary->safe_psql('postgres', "SELECT pg_cancel_backend($call->{pid})"),
		't', "$label: cancel sent");
	my ($out) = $session->query("SELECT 'after cancel'");
	is($out, 'after cancel', "$label: the cancelled call returned no token");
	like($session->{stderr}, qr/ERROR:\s+57014:.*$expect_re/s,
		"$label: the cancelled call raised an error (57014)");
	unlike($session->{stderr}, qr/WARNING|committed locally/,
		"$label: no warning about a transaction committed locally (none was)");
	unlike(slurp_file($primary->logfile, $log_offset), qr/committed locally/,
		"$label: nor does the server log speak of one");
	return;
}

# (a) advance_token far ahead must make a reservation and wait.
my $latest_before = $primary->safe_psql('postgres', 'SELECT fencing.latest_token()');
my $far = $latest_before + 1_000_000_000;
my $a = start_waiting_call('advance_token', "SELECT fencing.advance_token($far)");
sleep 1;
check_still_waiting($a);
cancel_and_check($a, qr/synchronous standbys/);
cmp_ok($primary->safe_psql('postgres', 'SELECT fencing.latest_token()'),
	'<', $far, 'no token at the unconfirmed target was handed out');

# The cancelled advance_token must not have moved the counter: with the
# standby back, the next token continues from the tokens handed out before,
# far below the target that was never confirmed.
$standby->start;
$primary->poll_query_until('postgres',
	"SELECT sync_state = 'sync' FROM pg_stat_replication WHERE application_name = 'standby'")
  or die 'the standby did not become synchronous again';
my $after_cancel = $primary->safe_psql('postgres', 'SELECT fencing.next_token()');
cmp_ok($after_cancel, '>', $last,
	'after the cancelled advance_token, tokens still increase');
cmp_ok($after_cancel, '<', $far,
	'and continue below the target the cancelled advance_token did not reach');
$last = $after_cancel;
$standby->stop;
$primary->poll_query_until('postgres',
	"SELECT count(*) = 0 FROM pg_stat_replication WHERE application_name = 'standby'")
  or die 'the standby did not disconnect';

# (b) next_token after a restart (the counter resumes at the durable limit,
# so the first call reserves): two callers, both wait, neither gets a token.
# The first one has synchronous_commit = off: a session setting must not
# weaken the cluster-wide guarantee.
$primary->restart;
my $b1 = start_waiting_call('next_token after restart, synchronous_commit = off',
	'SELECT fencing.next_token()', 'SET synchronous_commit = off');
# The second one logs nothing below PANIC: a WARNING it would print is then
# sent to its client without passing through the server log.
my $b2 = start_waiting_call('a second next_token, log_min_messages = panic',
	'SELECT fencing.next_token()', 'SET log_min_messages = panic');
# A third one is terminated while it waits.
my $b3 = start_waiting_call('a terminated next_token', 'SELECT fencing.next_token()');
sleep 1;
check_still_waiting($b1);
check_still_waiting($b2);
check_still_waiting($b3);
my $latest_waiting = $primary->safe_psql('postgres', 'SELECT fencing.latest_token()');
cancel_and_check($b1, qr/synchronous standbys/);
cancel_and_check($b2, qr/synchronous standbys/);
{
	my $log_offset = -s $primary->logfile;
	$primary->safe_psql('postgres', "SELECT pg_terminate_backend($b3->{pid})");
	$b3->{session}{run}->finish;
	like($b3->{session}{stderr},
		qr/FATAL:\s+57P01:\s+terminating connection due to administrator command/,
		'terminated while it waits: the client is told why its session ended');
	unlike($b3->{session}{stderr}, qr/WARNING|committed locally/,
		'terminated while it waits: no warning about a transaction committed locally');
	ok( $primary->poll_query_until('postgres',
			"SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $b3->{pid}"),
		'terminated while it waits: the session ended');
	unlike(slurp_file($primary->logfile, $log_offset), qr/committed locally/,
		'terminated while it waits: nor does the server log speak of one');
}
is($primary->safe_psql('postgres', 'SELECT tokens_issued FROM fencing.stats'),
	'0', 'no token was issued while the standby was down');

# (c) the standby comes back: the same sessions now get tokens.
$standby->start;
$primary->poll_query_until('postgres',
	"SELECT sync_state = 'sync' FROM pg_stat_replication WHERE application_name = 'standby'")
  or die 'the standby did not become synchronous again';
my ($token) = $b1->{session}->query('SELECT fencing.next_token()');
like($token, qr/^\d+$/, 'with the standby back, next_token returns a token');
cmp_ok($token, '>', $last, 'and it is above every token handed out before');
cmp_ok($token, '>', $latest_waiting, 'and above the latest token seen while waiting');
my ($t2) = $b2->{session}->query('SELECT fencing.next_token()');
cmp_ok($t2, '>', $token, 'the second session gets a later token');
my $adv = $primary->safe_psql('postgres', "SELECT fencing.advance_token($far)");
cmp_ok($adv, '>=', $far, 'advance_token reaches its target once confirmed');

$_->{session}->quit for ($a, $b1, $b2);

# (d) A base backup taken while a reservation waits for the synchronous
# standby: the backup's checkpoint comes after the reservation's record, so
# the backup can only learn the new limit from the state file.  The counter
# is first moved far ahead of the clock, so that the clock floor and the
# fresh start of a promoted node cannot cover for a stale state file.
$primary->safe_psql('postgres',
	"ALTER SYSTEM SET synchronous_standby_names = 'standby, rebuilt'");
$primary->reload;
$primary->safe_psql('postgres',
	'SELECT fencing.advance_token(clock_floor + 1000000000000) FROM fencing.status()');
$standby->stop;
$primary->poll_query_until('postgres',
	"SELECT count(*) = 0 FROM pg_stat_replication WHERE application_name = 'standby'")
  or die 'the standby did not disconnect';
my $limit_before = $primary->safe_psql('postgres', 'SELECT reserved_limit FROM fencing.status()');
my $d = start_waiting_call('reservation during a base backup',
	'SELECT fencing.advance_token(reserved_limit) FROM fencing.status()');
$primary->backup('during_reservation');

my $rebuilt = PostgreSQL::Test::Cluster->new('rebuilt');
$rebuilt->init_from_backup($primary, 'during_reservation', has_streaming => 1);
# once promoted it has no synchronous standby of its own
$rebuilt->append_conf('postgresql.auto.conf', "synchronous_standby_names = ''\n");
$rebuilt->start;
my ($released) = $d->{session}->query("SELECT 'released'");
like($released, qr/^\d+\nreleased$/,
	'the rebuilt standby confirmed the waiting reservation, which returned');
my $primary_last = $primary->safe_psql('postgres',
	'SELECT max(t) FROM (SELECT fencing.next_token() AS t FROM generate_series(1, 1000)) s');
cmp_ok($primary_last, '>', $limit_before,
	'the primary handed out tokens from the reservation the backup waited on');
# Wait for the rebuilt standby to replay all the WAL the primary flushed
# (every reservation: each waited for a synchronous standby, so each was
# flushed first).  Not the insert position: right after the backup's WAL
# switch it points past the next segment's page header, where no record
# may arrive for many seconds (the next standby snapshot, every 15 s), and
# replay_lsn reaches it only then.
$primary->wait_for_catchup($rebuilt, 'replay', $primary->lsn('flush'));
cmp_ok(FencingTest::state_file_limit($rebuilt) // 0, '>=', $primary_last,
	"the rebuilt standby's fencing.state covers the reservation it released");
$d->{session}->quit;
$primary->stop('immediate');

$rebuilt->promote;
$rebuilt->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
  or die 'the rebuilt standby did not finish promotion';
my $rebuilt_first = $rebuilt->safe_psql('postgres', 'SELECT fencing.next_token()');
cmp_ok($rebuilt_first, '>', $primary_last,
	"promoted rebuilt standby: the first token is above every token the primary handed out");
$rebuilt->stop;
done_testing();
