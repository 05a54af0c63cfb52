
# Copyright (c) 2026, the fencing developers
#
# 060_leases_frozen_holder.pl -- the guide's expiry test for a lease that
# outlives a transaction, with the holder frozen in the middle of a batch
# (src/fence/use_lease.c).
#
# use_lease() raises the resource fence of the lease's name, which locks
# the name's row of fencing.resource_fences until the batch's transaction
# ends.  Worker A takes the run's lease (2 s), starts a batch (BEGIN;
# use_lease; a row written) and its client process is stopped (SIGSTOP)
# before COMMIT.  Its idle time in that transaction is bounded by the
# lease's ttl, as fencing.lease() bounds a transaction's lease: the server
# ends A's session (FATAL 25P03) about one ttl after A's last statement,
# the batch rolls back and the row lock goes.  Worker B, which takes the
# lapsed name, gets through its own use_lease within about the ttl instead
# of waiting for A for ever, and bills the customers once.
#
# The same for a holder in pipeline mode that stalls without Sync (never
# idle in core's eyes: the lease timer of lease_ceiling.c ends it), with a
# libpq client (test/tools/pipeline_stall.c).
#
# The bound is on idle time only: a holder that keeps working in its batch
# past the ttl is not ended, and after its COMMIT the session may sit idle
# as long as it likes.
#
# A batch cannot be prepared (PREPARE TRANSACTION): the prepared
# transaction would keep the fence's row lock with no session, so no idle
# limit, and the next batch would wait for it until a DBA ended it.

use strict;
use warnings;

use FindBin;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use lib "$FindBin::RealBin/../perl";
use FencingTest qw(pipeline_stall_client);
use Time::HiRes qw(sleep time);

my $ttl = 2;    # seconds, the lease's ttl

my $node = PostgreSQL::Test::Cluster->new('leases_frozen_holder');
$node->init;
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'fencing'\nmax_prepared_transactions = 2\n");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION fencing');
$node->safe_psql('postgres', <<'SQL');
CREATE TABLE ledger (customer int PRIMARY KEY, amount numeric NOT NULL, fence bigint);
SELECT fencing.protect('ledger');
SQL

sub sql { return $node->safe_psql('postgres', $_[0]); }

# --- A is frozen in the middle of a batch -------------------------------

my ($a_in, $a_out, $a_err) = ('', '', '');
my $a_psql = IPC::Run::start(
	[ 'psql', '-X', '-At', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr('postgres') ],
	'<', \$a_in, '>', \$a_out, '2>', \$a_err,
	IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default));
my $a_client_pid = $a_psql->{KIDS}[0]{PID};

$a_in .= "SELECT 'backend ' || pg_backend_pid();\n"
  . "SELECT 'token ' || fencing.acquire_lease('invoice-run', '$ttl seconds', holder => 'worker A');\n";
$a_psql->pump until $a_out =~ /^token (\d+)$/m;
my ($ta) = $a_out =~ /^token (\d+)$/m;
my ($a_backend) = $a_out =~ /^backend (\d+)$/m;
ok($ta > 0, 'A takes the run\'s lease');

$a_in .= "BEGIN;\n"
  . "SELECT fencing.use_lease('invoice-run', $ta);\n"
  . "INSERT INTO ledger VALUES (1, 10);\n"
  . "SELECT 'batch open';\n";
$a_psql->pump until $a_out =~ /^batch open$/m;
my $a_idle_since = time();
ok(kill('STOP', $a_client_pid), 'A\'s client is stopped in the middle of its batch');

is(sql("SELECT state FROM pg_stat_activity WHERE pid = $a_backend"),
	'idle in transaction', 'A\'s backend sits idle in its batch\'s transaction');

# --- B takes the lapsed name and starts its batch ------------------------

my ($b_rc, $b_out, $b_err) = $node->psql(
	'postgres',
	"SET statement_timeout = '20s';\n"
	  . "SELECT fencing.acquire_lease('invoice-run', '30 seconds', timeout => '15 seconds', holder => 'worker B') AS tb \\gset\n"
	  . "BEGIN;\n"
	  . "SELECT fencing.use_lease('invoice-run', :tb);\n"
	  . "SELECT 'used after ' || round(extract(epoch FROM clock_timestamp()) * 1000);\n"
	  . "INSERT INTO ledger VALUES (1, 10), (2, 20);\n"
	  . "COMMIT;\n"
	  . "SELECT 'token ' || :tb;\n",
	on_error_stop => 1);
is($b_rc, 0, 'B takes the name, runs its batch and commits') or diag($b_err);
my ($tb) = $b_out =~ /^token (\d+)$/m;
my ($b_used_ms) = $b_out =~ /^used after (\d+)$/m;
cmp_ok($tb // 0, '>', $ta, 'B\'s token is above A\'s');
my $waited = defined $b_used_ms ? $b_used_ms / 1000.0 - $a_idle_since : 1e9;
note(sprintf('B\'s use_lease returned %.2f s after A froze (ttl %d s)', $waited, $ttl));
cmp_ok($waited, '<', $ttl + 3,
	'B\'s use_lease returns within about the ttl of A\'s freezing, not when A comes back');

# Bounded by a few ttls, not by the harness's default of minutes: without
# the bound A lives on, and A's client must still be there to resume.
my $a_gone = 0;
foreach (1 .. 50)
{
	$a_gone = sql("SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $a_backend") eq 't';
	last if $a_gone;
	sleep(0.2);
}
ok($a_gone, 'the server ended A\'s session');
like(slurp_file($node->logfile),
	qr/FATAL:  terminating connection due to idle-in-transaction timeout/,
	'with FATAL 25P03, as an idle lease holder of fencing.lease()');

is(sql('SELECT string_agg(customer || \':\' || (fence = ' . ($tb // 0) . '), \' \' ORDER BY customer) FROM ledger'),
	'1:true 2:true', 'A\'s batch rolled back; every customer is billed once, by B');

# A comes back: its connection is gone, and its batch with it.
ok(kill('CONT', $a_client_pid), 'A\'s client resumes');
$a_in .= "INSERT INTO ledger VALUES (3, 30);\nCOMMIT;\n";
$a_psql->finish;
isnt($a_psql->result(0), 0, 'A\'s next statement fails');
like($a_err, qr/idle-in-transaction timeout|terminat|closed the connection|no connection/i,
	'A is told its session was ended');
is(sql('SELECT count(*) FROM ledger WHERE customer = 3'), 0, 'A wrote nothing more');

# --- the same in pipeline mode, without Sync ------------------------------

my $client = pipeline_stall_client();

my ($p_out, $p_err) = ('', '');
my $p_run = IPC::Run::start(
	[ $client, $node->connstr('postgres'), 'pipeline-run', "$ttl seconds", 10, 'use-lease' ],
	'<', \undef, '>', \$p_out, '2>', \$p_err);
my $give_up = time() + 60;
while ($p_out !~ /^token (\d+)$/m && time() < $give_up)
{
	$p_run->pump_nb;
	sleep(0.05);
}
my ($tp) = $p_out =~ /^token (\d+)$/m;
my $p_idle_since = time();
ok(defined $tp, 'the pipeline client used its lease in a batch and stalls without Sync')
  or diag($p_out . $p_err);

my ($q_rc, $q_out, $q_err) = $node->psql(
	'postgres',
	"SET statement_timeout = '20s';\n"
	  . "SELECT fencing.acquire_lease('pipeline-run', '30 seconds', timeout => '15 seconds') AS tq \\gset\n"
	  . "BEGIN;\n"
	  . "SELECT fencing.use_lease('pipeline-run', :tq);\n"
	  . "SELECT 'used after ' || round(extract(epoch FROM clock_timestamp()) * 1000);\n"
	  . "COMMIT;\n",
	on_error_stop => 1);
is($q_rc, 0, 'the next holder takes the name and uses it') or diag($q_err);
my ($q_used_ms) = $q_out =~ /^used after (\d+)$/m;
my $p_waited = defined $q_used_ms ? $q_used_ms / 1000.0 - $p_idle_since : 1e9;
note(sprintf('its use_lease returned %.2f s after the pipeline client stalled', $p_waited));
cmp_ok($p_waited, '<', $ttl + 3, 'within about the ttl, long before the client wakes (10 s)');
$p_run->finish;
like($p_out,
	qr/^after 25P03 terminating connection due to idle-in-transaction timeout$/m,
	'the pipeline client is told with core\'s FATAL 25P03') or diag($p_out . $p_err);

# --- the bound is on idle time only ---------------------------------------

my $c = $node->background_psql('postgres', on_error_stop => 0);
my $c_backend = $c->query_safe('SELECT pg_backend_pid()');
my $tc = $c->query_safe("SELECT fencing.acquire_lease('report-run', '1 second')");
$c->query_safe("BEGIN; SELECT fencing.use_lease('report-run', $tc)");
is($c->query_safe('SHOW idle_in_transaction_session_timeout'), '1s',
	'in the batch, the holder may stay idle for the lease\'s ttl');
foreach my $i (1 .. 6)
{
	sleep(0.4);
	$c->query_safe("SELECT $i");
}
$c->query_safe('COMMIT');
is(sql("SELECT count(*) FROM pg_stat_activity WHERE pid = $c_backend"), 1,
	'a holder that keeps working in its batch for longer than the ttl is not ended');
is($c->query_safe('SHOW idle_in_transaction_session_timeout'), '0',
	'after COMMIT the session\'s own idle limit is back');
sleep(1.5);
is(sql("SELECT count(*) FROM pg_stat_activity WHERE pid = $c_backend"), 1,
	'and the session may sit idle outside a transaction');
$c->quit;

# --- a batch is not prepared --------------------------------------------

my $tp = sql("SELECT fencing.acquire_lease('prepared-run', '30 seconds')");
my ($rc, $out, $err) = $node->psql('postgres',
	"\\set VERBOSITY verbose\nBEGIN;\nSELECT fencing.use_lease('prepared-run', $tp);\nPREPARE TRANSACTION 'batch';");
like($err, qr/ERROR:  0A000: cannot PREPARE a transaction that used a lease/,
	'PREPARE TRANSACTION after use_lease is refused (0A000)') or diag($err);
is(sql('SELECT count(*) FROM pg_prepared_xacts'), '0', 'nothing was prepared');
($rc, $out, $err) = $node->psql('postgres',
	"SET statement_timeout = '5s'; BEGIN; SELECT fencing.use_lease('prepared-run', $tp) = $tp; COMMIT;");
is($out, 't', 'the next batch is not held up by a prepared one') or diag($err);
($rc, $out, $err) = $node->psql('postgres',
	"\\set VERBOSITY verbose\nSET statement_timeout = '5s';\nBEGIN;\nSAVEPOINT s;\nSELECT fencing.use_lease('prepared-run', $tp);\nROLLBACK TO s;\nPREPARE TRANSACTION 'after-rollback';\nCOMMIT PREPARED 'after-rollback';");
is($rc, 0, 'a use_lease rolled back to a savepoint leaves nothing that keeps PREPARE out')
  or diag($err);
# A shorter transaction lease, taken by a cursor that then fails, set the
# limit in force when use_lease() ran; its lock goes with the failed
# portal, and the use must still refuse PREPARE.
($rc, $out, $err) = $node->psql('postgres',
	"\\set VERBOSITY verbose\nSET statement_timeout = '5s';\nBEGIN;\n"
	  . "DECLARE c CURSOR FOR SELECT fencing.lease('prepared-tx', '5 s'), 1 / (2 - g) FROM generate_series(1, 3) g;\n"
	  . "FETCH 1 FROM c;\nSELECT fencing.use_lease('prepared-run', $tp);\n"
	  . "SAVEPOINT s;\nFETCH 1 FROM c;\nROLLBACK TO s;\nPREPARE TRANSACTION 'after-cursor';",
	on_error_stop => 0);
like($err, qr/ERROR:  0A000: cannot PREPARE a transaction that used a lease/,
	'PREPARE is refused after use_lease also when the shorter lease in force when it ran is gone')
  or diag($err);
is(sql('SELECT count(*) FROM pg_prepared_xacts'), '0', 'nothing was prepared');
is(sql("SELECT fencing.release_lease('prepared-run', $tp)"), 't', 'the lease is released');

$node->stop;
done_testing();
