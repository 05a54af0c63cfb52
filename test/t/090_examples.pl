# Copyright (c) 2026, the fencing developers

# The client examples must keep doing what their header comments promise:
# examples/correctness_lock.c (libpq) and examples/correctness_lock.py
# (psycopg 3), run as a member of the role examples/ledger.sql grants
# check_fence to, get a token and commit, report "busy" while another
# transaction holds the lock under another spelling, stop on SQLSTATE FN001
# when a newer holder has written the row, and stop on FN001 at
# fencing.check_fence, before writing, when a newer holder is half way
# through the run and has not reached the row yet (a row fence alone lets
# that write through).  Without the grant they fail at
# check_fence.  The demo's worker must compile, and examples/demo.sh must
# run against a server named by PGHOST/PGPORT (its pods fenced out by
# check_fence, also when one wakes in the middle of the new holder's run;
# the batch job on a lease whose pod, frozen between two batches past its
# ttl, is taken over by a waiting pod and stopped with FN004 at its next
# batch), clean up after itself, and refuse a server without the preload.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use Time::HiRes qw(usleep);

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

# The clients log in as example_app, a member of the role ledger.sql
# grants check_fence to (as an application's login role would be), or as
# outsider, who has everything but check_fence.
$node->safe_psql('postgres', $ledger_sql);
$node->safe_psql(
	'postgres', q{
	CREATE ROLE example_app LOGIN IN ROLE example_worker;
	CREATE ROLE outsider LOGIN;
});
our $client_user = 'example_app';
my $client_app = 'example-client';

# Run a command to completion: (exit status, stdout, stderr).
sub run_cmd
{
	my @cmd = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run(\@cmd, '>', \$out, '2>', \$err,
		IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default));
	return ($? >> 8, $out, $err);
}

# Run a client example to completion, as $client_user.
sub run_client
{
	local $ENV{PGUSER} = $client_user;
	local $ENV{PGAPPNAME} = $client_app;
	return run_cmd(@_);
}

sub account_row
{
	my ($id) = @_;
	$id //= 1;
	return $node->safe_psql('postgres',
		"SELECT balance, fence FROM example.accounts WHERE id = $id");
}

# Start a client that pauses between taking the lock and writing; return
# its harness, output buffer and token once it has printed the token.
sub start_paused_client
{
	my ($label, $account, @client) = @_;
	my ($out, $err) = ('', '');
	local $ENV{PGUSER} = $client_user;
	local $ENV{PGAPPNAME} = $client_app;
	my $timer = IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default);
	my $h = IPC::Run::start([ @client, $lock_name, $account, '10.00', '3' ],
		'>', \$out, '2>', \$err, $timer);
	$h->pump until $out =~ /^got token (\d+)/m || $timer->is_expired;
	my ($token) = $out =~ /^got token (\d+)/m;
	ok(defined $token, "$label: paused client got a token");
	return ($h, \$out, \$err, $token // -1);
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

	# 0. a role without EXECUTE on fencing.check_fence (revoked from PUBLIC
	#    in 1.1) fails at the check, before writing
	{
		local $client_user = 'outsider';
		$node->safe_psql('postgres',
			'GRANT USAGE ON SCHEMA example TO outsider; GRANT SELECT, UPDATE ON example.accounts TO outsider'
		);
		($rc, $out, $err) = run_client(@client, $lock_name, '1', '10.00');
		is($rc, 1, "$label: exit 1 without EXECUTE on check_fence")
		  or diag($out . $err);
		like(
			$out,
			qr/^error: .*permission denied for function check_fence/m,
			"$label: a role without the grant is refused at check_fence");
		is(account_row(), '0.00|', "$label: it wrote nothing");
	}

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
	my ($h, $bg_out, $bg_err, $paused_token) =
	  start_paused_client($label, '1', @client);
	my $newer = $node->safe_psql('postgres',
		'UPDATE example.accounts SET fence = fencing.next_token() WHERE id = 1 RETURNING fence'
	);
	cmp_ok($newer, '>', $paused_token,
		"$label: a newer holder's token is on the row");
	$h->finish;
	$rc = $h->result(0);
	is($rc, 3, "$label: exit 3 when the write is stale") or diag($$bg_out . $$bg_err);
	like(
		$$bg_out,
		qr/^stale: SQLSTATE FN001: .+$/m,
		"$label: reports SQLSTATE FN001 with the server's message");
	like(
		$$bg_out,
		qr/^stopping: a newer holder exists; no retry$/m,
		"$label: stops without retrying");
	unlike($$bg_out, qr/^committed/m, "$label: did not commit the stale write");
	is(account_row(), "10.00|$newer",
		"$label: the row keeps the newer holder's fence and the old balance");
	is(stale_rejections() - $rejected_before,
		1, "$label: exactly one stale write was rejected (no retry)");

	# 4. The interleaving a row fence alone misses: while the client
	#    pauses, a newer holder checks the run's fence and bills account 1,
	#    its transaction open.
	#    The client, still believing it holds the run, writes account 2,
	#    which the newer holder has not reached (its fence is not newer):
	#    a row fence alone would take that write, and the newer holder would
	#    then bill account 2 again.  The client's check_fence waits for the
	#    newer holder's transaction and fails with FN001 before it writes.
	$rejected_before = stale_rejections();
	my $before2 = account_row(2);
	($h, $bg_out, $bg_err, $paused_token) =
	  start_paused_client($label, '2', @client);
	my $holder_b = $node->background_psql('postgres');
	$holder_b->query_safe('BEGIN');
	my $token_b = $holder_b->query_safe(
		"SELECT fencing.check_fence('$lock_name', fencing.next_token())");
	cmp_ok($token_b, '>', $paused_token,
		"$label: the newer holder checked the run's fence with a newer token");
	$holder_b->query_safe(
		"UPDATE example.accounts SET balance = balance + 10, fence = $token_b WHERE id = 1"
	);

	# Until the client waits at check_fence for the newer holder (or, were
	# the check missing, has written account 2 and ended).
	my $waiting = 0;
	my $timer = IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default);
	while (!$timer->is_expired && $h->pumpable)
	{
		$waiting = $node->safe_psql('postgres',
			"SELECT count(*) FROM pg_stat_activity WHERE application_name = '$client_app' AND wait_event_type = 'Lock'"
		);
		last if $waiting;
		$h->pump_nb;
		usleep(50_000);
	}
	is($waiting, 1,
		"$label: the stale client's check_fence waits for the newer holder's transaction"
	);
	$holder_b->query_safe(
		"UPDATE example.accounts SET balance = balance + 10, fence = $token_b WHERE id = 2"
	);
	$holder_b->query_safe('COMMIT');
	$holder_b->quit;
	$h->finish;
	$rc = $h->result(0);
	is($rc, 3,
		"$label: exit 3 when a newer holder is half way through the run")
	  or diag($$bg_out . $$bg_err);
	like(
		$$bg_out,
		qr/^stale: SQLSTATE FN001: stale fence token $paused_token for resource "\Q$lock_name\E"$/m,
		"$label: rejected by check_fence on the run's resource");
	like(
		$$bg_out,
		qr/^stopping: a newer holder exists; no retry$/m,
		"$label: stops without retrying after check_fence");
	my ($balance2) = split /\|/, $before2;
	is( account_row(2),
		sprintf('%.2f|%s', $balance2 + 10, $token_b),
		"$label: account 2 is billed once, by the newer holder");
	is(stale_rejections() - $rejected_before,
		1, "$label: exactly one stale check was rejected (no retry)");
	return;
}

my $tests_before = Test::More->builder->current_test;
check_client('C example', "$bindir/correctness_lock");
my $tests_per_client = Test::More->builder->current_test - $tests_before;

SKIP:
{
	my $have_psycopg =
	  system('python3 -c "import psycopg" >/dev/null 2>&1') == 0;
	skip
	  'python3-psycopg is not installed (apt-get install python3-psycopg); the Python example was not run',
	  $tests_per_client
	  unless $have_psycopg;
	check_client('Python example', 'python3', "$examples/correctness_lock.py");
}

# --- the demo against a server we name ----------------------------------------

{
	my ($rc, $out, $err) = run_cmd('bash', "$examples/demo.sh");
	is($rc, 0, 'demo.sh with PGHOST/PGPORT runs to the end')
	  or diag($out . $err);
	like($out, qr/^using the server at PGHOST=/m,
		'demo.sh uses the server named by PGHOST/PGPORT');
	my @ok = $out =~ /^  OK: all 5 customers billed exactly once/mg;
	is(scalar @ok, 4, 'demo.sh: all four scenes end with each customer billed once');
	like(
		$out,
		qr/^    GRANT EXECUTE ON FUNCTION fencing\.check_fence\(text, bigint\) TO billing_worker_\d+;$/m,
		'demo.sh says it grants check_fence to the role its pods run as');

	# Scenes 2 and 3: pod-A is stopped by check_fence on the run's resource,
	# before it writes; in scene 3 while pod-B, half way through the run,
	# has not reached the customer pod-A had pending.
	my ($scene2, $scene3, $scene4) =
	  $out =~ /^(=== Scene 2:.*?)^(=== Scene 3:.*?)^(=== Scene 4:.*?)^## Coordination design/ms;
	my $fenced_out =
	  qr/^\s+\+\d+\.\d+s\s+pod-A\s+token (\d+)\s+REJECTED by the run's fence \(check_fence\), SQLSTATE FN001: stale fence token \1 for resource "invoice-run:2026-10"/m;
	like($scene2 // '', $fenced_out,
		'demo.sh scene 2: the paused pod is rejected with FN001 by check_fence');
	like($scene3 // '', qr/^\s+\+\d+\.\d+s\s+pod-B\s+token \d+\s+holds after 1 of 5 customers/m,
		'demo.sh scene 3: pod-B has billed one customer when pod-A wakes');
	like($scene3 // '', qr/^\s+\+\d+\.\d+s\s+pod-A\s+token \d+\s+reconnected as backend \d+; resumes its pending bill \((?!Acme)/m,
		'demo.sh scene 3: pod-A resumes with a customer pod-B has not reached');
	like($scene3 // '', qr/^\s+\+\d+\.\d+s\s+demo\s+pod-A's check_fence waits: pod-B's open transaction holds the run's fence$/m,
		"demo.sh scene 3: pod-A's check_fence waits for pod-B");
	like($scene3 // '', $fenced_out,
		'demo.sh scene 3: the stale pod is rejected with FN001 by check_fence');
	unlike($out, qr/let a stale write through|COMMIT of a stale bill/,
		'demo.sh: no stale pod wrote anything');

	# Scene 4: the run on a lease.  pod-A commits a batch, is frozen between
	# two batches, its lease lapses one ttl after its last use_lease, pod-B
	# (waiting in acquire_lease) takes over with a higher token where the
	# committed batches end, and pod-A's next use_lease raises FN004.
	$scene4 //= '';
	my $at = qr/^\s+\+(\d+\.\d+)s\s+/m;
	my (undef, $token_a) = $scene4 =~
	  /${at}pod-A\s+token (\d+)\s+fencing\.acquire_lease\('invoice-run:2026-10', '3s', holder => 'pod-A'\) granted/m;
	ok(defined $token_a, 'demo.sh scene 4: pod-A takes the run with acquire_lease');
	$token_a //= -1;
	like($scene4, qr/^\s+\+\d+\.\d+s\s+pod-A\s+token $token_a\s+COMMIT of batch 1 \(Acme, Globex\); the lease stays held/m,
		'demo.sh scene 4: pod-A commits its first batch and keeps the lease');
	like($scene4, qr/^\s+\+\d+\.\d+s\s+demo\s+SIGSTOP pod-A between two batches/m,
		'demo.sh scene 4: pod-A is frozen between two batches');
	my @renewed = $scene4 =~ /${at}pod-A\s+token $token_a\s+batch \d+: BEGIN; fencing\.use_lease/mg;
	my ($got_b, $token_b) = $scene4 =~
	  /${at}pod-B\s+token (\d+)\s+fencing\.acquire_lease\('Invoice-Run:2026-10', '10s', holder => 'pod-B'\) granted/m;
	like($scene4, qr/^\s+\+\d+\.\d+s\s+pod-B\s+fencing\.acquire_lease\(.*\) waits for the run/m,
		'demo.sh scene 4: pod-B waits in acquire_lease');
	ok(defined $token_b && $token_a > 0 && $token_b > $token_a,
		"demo.sh scene 4: pod-B's token is above pod-A's");
	# the lease lapses 3 s after pod-A's last renewal (its last use_lease),
	# not before: pod-B's grant comes no earlier
	cmp_ok(($got_b // 0) - ($renewed[-1] // 1e9), '>=', 2.9,
		"demo.sh scene 4: pod-B gets the run no earlier than 3 s after pod-A's last use_lease");
	like($scene4, qr/^\s+\+\d+\.\d+s\s+pod-B\s+token \d+\s+batch 1: BEGIN; fencing\.use_lease.*next unbilled: Initech$/m,
		"demo.sh scene 4: pod-B goes on where pod-A's committed batches end");
	like($scene4,
		qr/^\s+\+\d+\.\d+s\s+pod-A\s+token $token_a\s+use_lease REJECTED, SQLSTATE FN004: fencing lease "invoice-run:2026-10" is not held with token $token_a \| DETAIL: The name is leased under another token/m,
		"demo.sh scene 4: pod-A's next batch is refused by use_lease with FN004");
	like($scene4, qr/^\s+\+\d+\.\d+s\s+pod-A\s+token $token_a\s+stops at once: no retry, no reconnect; this batch wrote nothing$/m,
		'demo.sh scene 4: pod-A stops without retrying');
	like($scene4, qr/^\s+\+\d+\.\d+s\s+pod-B\s+token \d+\s+fencing\.release_lease\('Invoice-Run:2026-10', token\) = true/m,
		'demo.sh scene 4: pod-B releases the lease at the end of the run');
	like($scene4,
		qr/^  OK: all 5 customers billed exactly once: 2 by pod-A \(token $token_a\) before it froze,\n  3 by pod-B \(token $token_b\) after it took over/m,
		'demo.sh scene 4: pod-A billed its committed batch, pod-B the rest, each customer once');
	like($out,
		qr/^- batch job on a lease: pod-A \(token $token_a\).*pod-A's next use_lease failed with FN004/m,
		'the design block reports the batch job on a lease');
	like($out, qr/^- concurrency: 10 pods, 10 spellings of the name: 1 token \(w\d\d\), 9 busy/m,
		'the design block reports ten pods under ten different spellings');
	like($out, qr/^\*\*TTL and renewal:\*\*.* in production 30 s, renewed every 10 s/m,
		'the design block gives the same production ttl as README.md');
	my @long = grep { length($_) > 250 } split /\n/, ($out =~ /^(## Coordination design:.*)\z/ms)[0] // '';
	is(scalar @long, 0, 'no line of the design block runs past 250 characters')
	  or diag(join("\n", @long));
	like(
		$out,
		qr/^## Coordination design: .*\n\*\*Failure being prevented:\*\*.*\n\*\*Lock type:\*\*.*\n\*\*Mechanism:\*\*.*\n\*\*Store:\*\*.*\n\*\*TTL and renewal:\*\*.*\n\*\*Fencing:\*\*.*\n\*\*Tests:\*\*/m,
		'demo.sh prints the filled-in coordination design block');
	like(
		$out,
		qr/^\*\*Fencing:\*\*.*fencing\.check_fence on 'invoice-run:2026-10', first in every transaction that writes.*GRANT EXECUTE ON FUNCTION fencing\.check_fence\(text, bigint\) TO billing_worker_\d+/m,
		'the design block names check_fence per transaction and its grant');
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
	is($node->safe_psql('postgres', 'SELECT count(*) FROM fencing.leases'),
		'0', 'demo.sh left no lease behind');
	is( $node->safe_psql(
			'postgres',
			"SELECT count(*) FROM pg_roles WHERE rolname LIKE 'billing\\_worker%'"),
		'0',
		'demo.sh dropped the role it created');
}

# A server without the preload is refused with a clear message: the same
# server restarted without it (a restart costs less than a new cluster).
{
	$node->append_conf('postgresql.conf', "shared_preload_libraries = ''");
	$node->restart;
	is($node->safe_psql('postgres', 'SHOW shared_preload_libraries'),
		'', 'the server no longer preloads fencing (precondition)');
	my ($rc, $out, $err) = run_cmd('bash', "$examples/demo.sh");
	isnt($rc, 0, 'demo.sh fails on a server without the preload');
	like(
		$err,
		qr/does not preload fencing/,
		'demo.sh says the server does not preload fencing');
}

$node->stop;
done_testing();
