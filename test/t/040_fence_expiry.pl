# Copyright (c) 2026, the fencing developers
#
# The guide's expiry test, end to end with real processes.
#
# Holder A takes fencing.lease('invoice-run:2026-10', '1s') and gets token
# tA, then its client process is frozen (SIGSTOP) for 3 s, well past the
# ttl.  The server ends A's session, which frees the lock.  B takes the
# lease with a higher token tB, bills the customer (fence = tB) and commits.
# A is resumed: its old connection is gone, so, like a real job retrying
# with the state it had, it reconnects and sends its pending write with tA.
# The protected ledger rejects it with FN001 and the customer is billed
# once.  The same stale write against an unprotected copy of the ledger goes
# through (billed twice), which is the failure the fence prevents.
use strict;
use warnings;

use IPC::Run;
use Time::HiRes qw(usleep);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('fence_expiry');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'fencing'");
$node->start;

$node->safe_psql('postgres', q{
	CREATE EXTENSION fencing;
	CREATE TABLE ledger (customer text PRIMARY KEY, balance int NOT NULL, bills int NOT NULL, fence bigint);
	INSERT INTO ledger VALUES ('acme', 0, 0, NULL);
	SELECT fencing.protect('ledger');
	CREATE TABLE ledger_unfenced (LIKE ledger);
	INSERT INTO ledger_unfenced VALUES ('acme', 0, 0, NULL);
});

# The billing step of the invoice job, as the job would send it.
sub bill_sql
{
	my ($table, $token) = @_;
	return "UPDATE $table SET balance = balance + 100, bills = bills + 1, fence = $token WHERE customer = 'acme';";
}

# Holder A: an interactive psql process whose input we feed.
my ($a_in, $a_out, $a_err) = ('', '', '');
my $a_psql = IPC::Run::start(
	[ 'psql', '-X', '-At', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr('postgres') ],
	'<', \$a_in, '>', \$a_out, '2>', \$a_err,
	IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default));
my $a_client_pid = $a_psql->{KIDS}[0]{PID};

$a_in .= "SELECT 'backend ' || pg_backend_pid();\n"
  . "BEGIN;\n"
  . "SELECT 'token ' || fencing.lease('invoice-run:2026-10', '1s');\n";
$a_psql->pump until $a_out =~ /^token (\d+)$/m;
my ($token_a) = $a_out =~ /^token (\d+)$/m;
my ($a_backend) = $a_out =~ /^backend (\d+)$/m;
ok($token_a > 0, 'A holds the lease');

# While A's lease is live, nobody else gets the lock.
is( $node->safe_psql('postgres',
		"SELECT fencing.try_lock('invoice-run:2026-10') IS NULL"),
	't', 'B cannot take the lock while A\'s lease is live');

# A pauses (a GC pause, a frozen VM) for 3 s, past its 1 s ttl.
ok(kill('STOP', $a_client_pid), 'A\'s client process is stopped');
sleep(3);

# The server has ended A's session, so the lock is free.
my $gone = 0;
foreach (1 .. 100)
{
	$gone = $node->safe_psql('postgres',
		"SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $a_backend") eq 't';
	last if $gone;
	usleep(100_000);
}
ok($gone, 'the server ended A\'s session when its lease expired');

# B takes the lease, bills the customer, commits.
my ($b_rc, $b_out, $b_err) = $node->psql('postgres',
	    "BEGIN;\n"
	  . "SELECT fencing.lease('invoice-run:2026-10', '1s')\n"
	  . "\\gset b_\n"
	  . bill_sql('ledger', ':b_lease') . "\n"
	  . bill_sql('ledger_unfenced', ':b_lease') . "\n"
	  . "COMMIT;\n"
	  . "SELECT :b_lease;\n",
	on_error_stop => 1);
is($b_rc, 0, 'B took the lease and billed the customer') or diag($b_err);
my $token_b = $b_out;
cmp_ok($token_b, '>', $token_a, 'B\'s token is above A\'s');
is($node->safe_psql('postgres', 'SELECT bills || \' \' || fence FROM ledger'),
	"1 $token_b", 'the ledger shows B\'s bill, fenced with tB');

# A wakes up and goes on with its job on the connection it had.
ok(kill('CONT', $a_client_pid), 'A\'s client process resumes');
$a_in .= bill_sql('ledger', $token_a) . "\nCOMMIT;\n";
$a_psql->finish;
isnt($a_psql->result(0), 0, 'A\'s old session is gone: its write fails');
note("A's client said: $a_err");
like($a_err, qr/terminat|closed the connection|no connection/i,
	'A is told its connection was terminated');

# A reconnects and retries its pending write with the token it still has.
my ($a2_rc, $a2_out, $a2_err) = $node->psql('postgres',
	"\\set VERBOSITY verbose\n" . bill_sql('ledger', $token_a));
isnt($a2_rc, 0, 'A\'s retried write is rejected');
like($a2_err,
	qr/ERROR:  FN001: stale fence token $token_a for table public\.ledger/,
	'with SQLSTATE FN001, naming the table and A\'s token');
like($a2_err, qr/already $token_b/, 'and the current fence tB');
like($a2_err, qr/HINT:  A newer holder exists; stop this job, do not retry\./,
	'and telling A to stop');

is( $node->safe_psql('postgres',
		"SELECT balance || ' ' || bills || ' ' || fence FROM ledger WHERE customer = 'acme'"),
	"100 1 $token_b",
	'the customer is billed once');

# Without the fence, the same late write bills the customer twice.
$node->safe_psql('postgres', bill_sql('ledger_unfenced', $token_a));
is( $node->safe_psql('postgres',
		"SELECT balance || ' ' || bills FROM ledger_unfenced WHERE customer = 'acme'"),
	'200 2',
	'control: an unfenced ledger bills the customer twice');

is($node->safe_psql('postgres', 'SELECT stale_writes_rejected FROM fencing.stats'),
	'1', 'fencing.stats counted the stale write');

$node->stop;
done_testing();
