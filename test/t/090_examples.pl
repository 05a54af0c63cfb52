# Copyright (c) 2026, the fencing developers

# The client examples must keep doing what their header comments promise:
# examples/correctness_lock.c (libpq) and examples/correctness_lock.py
# (psycopg 3) get a token and commit, report "busy" while another
# transaction holds the lock under another spelling, and stop on SQLSTATE
# FN001 when a newer holder has written the row.  The demo's worker must
# compile, and examples/demo.sh must run against a server named by
# PGHOST/PGPORT, clean up after itself, and refuse a server without the
# preload.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;

my $root = $ENV{TESTDIR} // '.';
my $examples = "$root/examples";
my $lock_name = 'invoice-run:2026-10';

# --- build the C examples ---------------------------------------------------

my $bindir = PostgreSQL::Test::Utils::tempdir();
my $pg_config = $ENV{PG_CONFIG} // 'pg_config';
chomp(my $includedir = `$pg_config --includedir`);
chomp(my $libdir = `$pg_config --libdir`);

foreach my $prog (qw(correctness_lock invoice_worker))
{
	my ($out, $err) = ('', '');
	my $ok = IPC::Run::run(
		[
			'gcc', '-Wall', '-Wextra', '-Werror', "-I$includedir",
			"$examples/$prog.c", "-L$libdir", '-lpq', '-o', "$bindir/$prog"
		],
		'>', \$out, '2>', \$err);
	ok($ok, "examples/$prog.c compiles with -Wall -Wextra -Werror")
	  or diag($err);
}

# --- a server with the preload ----------------------------------------------

my $node = PostgreSQL::Test::Cluster->new('examples');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'fencing'");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION fencing');

# The examples take their connection from the environment.
$ENV{PGHOST} = $node->host;
$ENV{PGPORT} = $node->port;
$ENV{PGDATABASE} = 'postgres';

my $ledger_sql = slurp_file("$examples/ledger.sql");

# Run a client to completion: (exit status, stdout, stderr).
sub run_client
{
	my @cmd = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run(\@cmd, '>', \$out, '2>', \$err,
		IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default));
	return ($? >> 8, $out, $err);
}

sub account_row
{
	return $node->safe_psql('postgres',
		'SELECT balance, fence FROM example.accounts WHERE id = 1');
}

sub stale_rejections
{
	return $node->safe_psql('postgres',
		'SELECT stale_writes_rejected FROM fencing.stats');
}

# The three documented outcomes of one client, given as a command prefix.
sub check_client
{
	my ($label, @client) = @_;
	my ($rc, $out, $err);

	$node->safe_psql('postgres', $ledger_sql);

	# 1. free lock: a token, the write carries it, commit
	($rc, $out, $err) = run_client(@client, $lock_name, '1', '10.00');
	is($rc, 0, "$label: exit 0 when the lock is free") or diag($out . $err);
	my ($token) = $out =~ /^got token (\d+) for '\Q$lock_name\E'$/m;
	ok(defined $token, "$label: prints the token it got");
	$token //= -1;
	like(
		$out,
		qr/^committed: account 1 \+10\.00 with fence $token$/m,
		"$label: prints the commit with its fence");
	is(account_row(), "10.00|$token",
		"$label: the row carries the amount and the token as fence");

	# 2. busy: another transaction holds the same lock under another spelling
	my $holder = $node->background_psql('postgres');
	$holder->query_safe('BEGIN');
	my $holder_token =
	  $holder->query_safe("SELECT fencing.try_lock(' Invoice-Run:2026-10 ')");
	like($holder_token, qr/^\d+$/, "$label: a second session holds the lock");
	($rc, $out, $err) = run_client(@client, $lock_name, '1', '10.00');
	is($rc, 2, "$label: exit 2 while the lock is held") or diag($out . $err);
	like(
		$out,
		qr/^busy: '\Q$lock_name\E' is held by another transaction$/m,
		"$label: says busy");
	unlike($out, qr/got token/, "$label: got no token while busy");
	is(account_row(), "10.00|$token", "$label: wrote nothing while busy");
	$holder->query_safe('ROLLBACK');
	$holder->quit;

	# 3. stale: while the client pauses between taking the lock and writing,
	#    a newer token is written to the row; the client's write is rejected
	#    with FN001 and it stops without retrying
	my $rejected_before = stale_rejections();
	my ($bg_out, $bg_err) = ('', '');
	my $timer = IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default);
	my $h = IPC::Run::start([ @client, $lock_name, '1', '10.00', '3' ],
		'>', \$bg_out, '2>', \$bg_err, $timer);
	$h->pump until $bg_out =~ /^got token (\d+)/m || $timer->is_expired;
	my ($paused_token) = $bg_out =~ /^got token (\d+)/m;
	ok(defined $paused_token, "$label: paused client got a token");
	$paused_token //= -1;
	my $newer = $node->safe_psql('postgres',
		'UPDATE example.accounts SET fence = fencing.next_token() WHERE id = 1 RETURNING fence'
	);
	cmp_ok($newer, '>', $paused_token,
		"$label: a newer holder's token is on the row");
	$h->finish;
	$rc = $h->result(0);
	is($rc, 3, "$label: exit 3 when the write is stale") or diag($bg_out . $bg_err);
	like(
		$bg_out,
		qr/^stale: SQLSTATE FN001: .+$/m,
		"$label: reports SQLSTATE FN001 with the server's message");
	like(
		$bg_out,
		qr/^stopping: a newer holder exists; no retry$/m,
		"$label: stops without retrying");
	unlike($bg_out, qr/^committed/m, "$label: did not commit the stale write");
	is(account_row(), "10.00|$newer",
		"$label: the row keeps the newer holder's fence and the old balance");
	is(stale_rejections() - $rejected_before,
		1, "$label: exactly one stale write was rejected (no retry)");
	return;
}

check_client('C example', "$bindir/correctness_lock");

SKIP:
{
	my $have_psycopg =
	  system('python3 -c "import psycopg" >/dev/null 2>&1') == 0;
	skip
	  'python3-psycopg is not installed (apt-get install python3-psycopg); the Python example was not run',
	  17
	  unless $have_psycopg;
	check_client('Python example', 'python3', "$examples/correctness_lock.py");
}

# --- the demo against a server we name ----------------------------------------

{
	my ($rc, $out, $err) = run_client('bash', "$examples/demo.sh");
	is($rc, 0, 'demo.sh with PGHOST/PGPORT runs to the end')
	  or diag($out . $err);
	like($out, qr/^using the server at PGHOST=/m,
		'demo.sh uses the server named by PGHOST/PGPORT');
	my @ok = $out =~ /^  OK: all 5 customers billed exactly once/mg;
	is(scalar @ok, 2, 'demo.sh: both scenes end with each customer billed once');
	like(
		$out,
		qr/^\s+\+\d+\.\d+s\s+pod-A\s+token \d+\s+REJECTED by the fence, SQLSTATE FN001/m,
		'demo.sh: the paused pod is rejected with FN001');
	like(
		$out,
		qr/^## Coordination design: .*\n\*\*Failure being prevented:\*\*.*\n\*\*Lock type:\*\*.*\n\*\*Mechanism:\*\*.*\n\*\*Store:\*\*.*\n\*\*TTL and renewal:\*\*.*\n\*\*Fencing:\*\*.*\n\*\*Tests:\*\*/m,
		'demo.sh prints the filled-in coordination design block');
	is( $node->safe_psql(
			'postgres',
			"SELECT count(*) FROM pg_database WHERE datname LIKE 'fencing_demo%'"),
		'0',
		'demo.sh dropped the database it created');
	is( $node->safe_psql(
			'postgres',
			"SELECT count(*) FROM pg_stat_activity WHERE application_name IN ('pod-A', 'pod-B')"
		),
		'0',
		'demo.sh left no worker connected');
}

# A server without the preload is refused with a clear message.
{
	my $plain = PostgreSQL::Test::Cluster->new('no_preload');
	$plain->init;
	$plain->start;
	local $ENV{PGHOST} = $plain->host;
	local $ENV{PGPORT} = $plain->port;
	my ($rc, $out, $err) = run_client('bash', "$examples/demo.sh");
	isnt($rc, 0, 'demo.sh fails on a server without the preload');
	like(
		$err,
		qr/does not preload fencing/,
		'demo.sh says the server does not preload fencing');
	$plain->stop;
}

$node->stop;
done_testing();
