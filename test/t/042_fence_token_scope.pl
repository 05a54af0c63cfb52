
# Copyright (c) 2026, the fencing developers
#
# 042_fence_token_scope.pl -- F6: fencing.token counts only in the
# transaction that set it, whatever else tries to set it.
#
# Each place PostgreSQL takes a setting from is tried with a non-empty
# token, and then a write that carries no token of its own must still be
# rejected (F2):
#
#  1. role and database settings stored before the library was loaded
#     (PostgreSQL does not validate a placeholder): logged as a WARNING at
#     connection time and ignored;
#  2. ALTER ROLE / ALTER DATABASE / ALTER ROLE ... IN DATABASE / ALTER ROLE
#     ALL ... SET: refused with an error; an empty value is allowed;
#  3. connection options (PGOPTIONS, options= in the connection string):
#     the connection is refused; an empty value is allowed;
#  4. postgresql.conf: logged and ignored, at start and at reload;
#  5. a session-level SET in an earlier transaction: INSERT, UPDATE and
#     DELETE without a token of their own are rejected, and an INSERT's own
#     fence is not compared with the earlier value;
#  6. PgBouncer in transaction pooling mode: a client's session-level SET
#     stays on the server connection, but the next client's token-less
#     write on that connection is rejected.
#
# The function SET clause (PGC_S_TEST as well) is tested in
# sql/fence_rules.sql.

use strict;
use warnings;

use FindBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

use lib "$FindBin::RealBin/../perl";
use FencingTest qw(start_pgbouncer stop_pgbouncer);

my $node = PostgreSQL::Test::Cluster->new('token_scope');
$node->init;

########################################################################
# 1. settings stored while the library was not loaded
########################################################################

$node->start;
$node->safe_psql('postgres', q{
	CREATE ROLE app LOGIN;
	CREATE ROLE app2 LOGIN;
	CREATE DATABASE other;
	ALTER ROLE app SET fencing.token = '77';
	ALTER ROLE app2 IN DATABASE postgres SET fencing.token = '78';
	ALTER DATABASE other SET fencing.token = '79';
});
is( $node->safe_psql('postgres',
		q{SELECT count(*) FROM pg_db_role_setting, unnest(setconfig) c WHERE c LIKE 'fencing.token=%'}),
	3, 'three stored settings of fencing.token, made before fencing was loaded');
$node->stop;

$node->append_conf('postgresql.conf', "shared_preload_libraries = 'fencing'");
$node->start;

my $setup = q{
	CREATE EXTENSION fencing;
	SELECT fencing.next_token() > 1000;
	CREATE TABLE ledger (id int PRIMARY KEY, v int NOT NULL, fence bigint);
	INSERT INTO ledger VALUES (1, 0, 10);
	SELECT fencing.protect('ledger');
	GRANT SELECT, INSERT, UPDATE, DELETE ON ledger TO PUBLIC;
};
$node->safe_psql('postgres', $setup);
$node->safe_psql('other', $setup);

# What a client sees when it writes without a token: the psql exit code,
# SHOW fencing.token, and stderr.
sub tokenless_write
{
	my ($db, %opts) = @_;
	my ($rc, $out, $err) = $node->psql(
		$db,
		"SHOW fencing.token;\n"
		  . "UPDATE ledger SET v = v + 1 WHERE id = 1;\n",
		extra_params => [ '-v', 'VERBOSITY=verbose', @{ $opts{extra} // [] } ],
		connstr => $opts{connstr});
	return ($rc, $out, $err);
}

my $refused = qr/fencing\.token can only be set in the transaction that writes/;

# (psql shows messages that arrive while it connects without the SQLSTATE,
# whatever VERBOSITY says; the SQLSTATE is checked with ALTER ROLE below)
my $stored_refused = qr/WARNING:  $refused\nDETAIL:  A value from ALTER ROLE or ALTER DATABASE \.\.\. SET would outlive that transaction/;
my $option_refused = qr/FATAL:  $refused\nDETAIL:  A value from the connection's options would outlive that transaction/;

# psql -U role
sub as_role
{
	my ($role) = @_;
	return [ '-U', $role ];
}

my ($rc, $out, $err) = tokenless_write('postgres', extra => as_role('app'));
isnt($rc, 0, 'ALTER ROLE app SET (stored earlier): a token-less write is rejected');
is($out, '', 'ALTER ROLE app SET (stored earlier): fencing.token is empty');
like($err, $stored_refused, 'ALTER ROLE app SET (stored earlier): a WARNING says why');
like($err, qr/FN001: missing fence token/, 'ALTER ROLE app SET (stored earlier): the write fails with FN001');

($rc, $out, $err) = tokenless_write('postgres', extra => as_role('app2'));
isnt($rc, 0, 'ALTER ROLE app2 IN DATABASE SET (stored earlier): a token-less write is rejected');
is($out, '', 'ALTER ROLE app2 IN DATABASE SET (stored earlier): fencing.token is empty');
like($err, $stored_refused, 'ALTER ROLE app2 IN DATABASE SET (stored earlier): a WARNING says why');

($rc, $out, $err) = tokenless_write('other');
isnt($rc, 0, 'ALTER DATABASE other SET (stored earlier): a token-less write is rejected');
is($out, '', 'ALTER DATABASE other SET (stored earlier): fencing.token is empty');
like($err, $stored_refused, 'ALTER DATABASE other SET (stored earlier): a WARNING says why');

is($node->safe_psql('postgres', 'SELECT v FROM ledger'), '0', 'the row in postgres is unchanged');
is($node->safe_psql('other', 'SELECT v FROM ledger'), '0', 'the row in other is unchanged');

$node->safe_psql('postgres', q{
	ALTER ROLE app RESET fencing.token;
	ALTER ROLE app2 IN DATABASE postgres RESET fencing.token;
	ALTER DATABASE other RESET fencing.token;
});

########################################################################
# 2. ALTER ROLE / DATABASE ... SET with the library loaded
########################################################################

foreach my $case (
	[ 'superuser', 'ALTER ROLE app SET fencing.token = 80' ],
	[ 'superuser', 'ALTER ROLE ALL SET fencing.token = 80' ],
	[ 'superuser', 'ALTER ROLE app IN DATABASE postgres SET fencing.token = 80' ],
	[ 'superuser', 'ALTER DATABASE postgres SET fencing.token = 80' ],
	[ 'app', 'ALTER ROLE app SET fencing.token = 80' ])
{
	my ($who, $sql) = @$case;
	my ($rc, $out, $err) = $node->psql('postgres', $sql,
		extra_params => [ '-v', 'VERBOSITY=verbose', ($who eq 'app' ? @{ as_role('app') } : ()) ]);
	isnt($rc, 0, "$sql ($who): refused");
	like($err, qr/ERROR:  55P02: $refused/, "$sql ($who): with SQLSTATE 55P02 and why");
	like($err, qr/HINT:  Run SET LOCAL fencing\.token = <token of the lock you hold> in the transaction that writes\./,
		"$sql ($who): the hint says to use SET LOCAL");
}
is( $node->safe_psql('postgres',
		q{SELECT count(*) FROM pg_db_role_setting, unnest(setconfig) c WHERE c LIKE 'fencing.token=%'}),
	0, 'no setting of fencing.token was stored');

# an empty value (no token) is allowed
$node->safe_psql('postgres', q{ALTER ROLE app SET fencing.token = ''});
($rc, $out, $err) = tokenless_write('postgres', extra => as_role('app'));
is($out, '', 'ALTER ROLE app SET fencing.token = empty is allowed');
unlike($err, qr/WARNING/, 'and gives no warning at connection time');
$node->safe_psql('postgres', 'ALTER ROLE app RESET fencing.token');

########################################################################
# 3. connection options
########################################################################

{
	local $ENV{PGOPTIONS} = '-c fencing.token=81';
	($rc, $out, $err) = tokenless_write('postgres');
	isnt($rc, 0, 'PGOPTIONS -c fencing.token: refused');
	like($err, $option_refused, 'PGOPTIONS -c fencing.token: the connection fails and says why');
	unlike($err, qr/FN001/, 'PGOPTIONS -c fencing.token: no statement ran');
}
($rc, $out, $err) = tokenless_write('postgres',
	connstr => $node->connstr('postgres') . q{ options='-c fencing.token=81'});
isnt($rc, 0, 'options= in the connection string: refused');
like($err, $option_refused, 'options= in the connection string: the connection fails and says why');
{
	local $ENV{PGOPTIONS} = '-c fencing.token=';
	($rc, $out, $err) = tokenless_write('postgres');
	is($out, '', 'PGOPTIONS with an empty fencing.token connects');
	like($err, qr/FN001: missing fence token/, 'and a token-less write is still rejected');
}
is($node->safe_psql('postgres', 'SELECT v FROM ledger'), '0', 'the row is unchanged');

########################################################################
# 4. postgresql.conf
########################################################################

my $log_offset = -s $node->logfile;
$node->append_conf('postgresql.conf', "fencing.token = '82'");
$node->reload;
my $logged = 0;
foreach (1 .. 300)
{
	$logged = $node->log_contains(qr/fencing\.token can only be set in the transaction that writes/, $log_offset);
	last if $logged;
	select(undef, undef, undef, 0.1);
}
ok($logged, 'postgresql.conf at reload: the server logs why the value is ignored');
($rc, $out, $err) = tokenless_write('postgres');
is($out, '', 'postgresql.conf at reload: fencing.token stays empty');
like($err, qr/FN001: missing fence token/, 'postgresql.conf at reload: a token-less write is rejected');

$log_offset = -s $node->logfile;
$node->restart;
ok( $node->log_contains(qr/WARNING:  fencing\.token can only be set in the transaction that writes/, $log_offset),
	'postgresql.conf at start: the server starts and logs a WARNING');
($rc, $out, $err) = tokenless_write('postgres');
is($out, '', 'postgresql.conf at start: fencing.token is empty');
like($err, qr/FN001: missing fence token/, 'postgresql.conf at start: a token-less write is rejected');
is($node->safe_psql('postgres', 'SELECT v FROM ledger'), '0', 'the row is unchanged');

# remove the line again for the rest of the test
my $conf = slurp_file($node->data_dir . '/postgresql.conf');
$conf =~ s/^fencing\.token = '82'\n//m;
open(my $cfh, '>', $node->data_dir . '/postgresql.conf') or die $!;
print $cfh $conf;
close($cfh);
$node->restart;

########################################################################
# 5. a session-level SET in an earlier transaction, one connection
########################################################################

{
	my $token = $node->safe_psql('postgres', 'SELECT fencing.next_token()');
	my $later = $node->safe_psql('postgres', 'SELECT fencing.next_token()');
	my $session = $node->background_psql('postgres', on_error_stop => 0);
	$session->query_safe('\set VERBOSITY verbose');
	$session->query_safe("SET fencing.token = $token");
	is($session->query_safe('SHOW fencing.token'), $token,
		'a session-level SET leaves the value set after its transaction');

	foreach my $case (
		[ 'INSERT', 'INSERT INTO ledger (id, v) VALUES (2, 0)' ],
		[ 'INSERT in an explicit transaction',
			'BEGIN; INSERT INTO ledger (id, v) VALUES (2, 0); COMMIT' ],
		[ 'INSERT ... SELECT', 'INSERT INTO ledger (id, v) SELECT 2, 0' ],
		[ 'UPDATE', 'UPDATE ledger SET v = v + 1 WHERE id = 1' ],
		[ 'DELETE', 'DELETE FROM ledger WHERE id = 1' ])
	{
		my ($what, $sql) = @$case;
		$session->query($sql);
		like($session->{stderr}, qr/FN001: missing fence token/,
			"session-level SET in an earlier transaction: a token-less $what is rejected with FN001");
		like($session->{stderr}, qr/set in an earlier transaction/,
			"session-level SET in an earlier transaction: $what is told why");
		$session->{stderr} = '';
		$session->query('ROLLBACK') if $sql =~ /^BEGIN/;
		$session->{stderr} = '';
	}

	# The earlier value neither stamps nor contradicts a fence the INSERT
	# sets itself: a row inserted with another token lands with that token.
	$session->query_safe("INSERT INTO ledger (id, v, fence) VALUES (3, 0, $later)");
	is($node->safe_psql('postgres', 'SELECT fence FROM ledger WHERE id = 3'),
		$later, 'an INSERT with its own fence is not held to the earlier session-level value');
	is($node->safe_psql('postgres', 'SELECT count(*) FROM ledger WHERE id = 2'),
		'0', 'no token-less INSERT landed');
	$session->query_safe("BEGIN; SET LOCAL fencing.token = $later; DELETE FROM ledger WHERE id = 3; COMMIT");
	$session->query_safe('RESET fencing.token');
	$session->quit;
}
is($node->safe_psql('postgres', 'SELECT v, fence FROM ledger'), '0|10', 'the row is unchanged');

########################################################################
# 6. PgBouncer, transaction pooling, one server connection
########################################################################

SKIP:
{
	skip "$FencingTest::PGBOUNCER not found: install the Debian package pgbouncer", 9
	  unless -x $FencingTest::PGBOUNCER;

	my $bouncer = start_pgbouncer($node, 1);
	my $pool = $bouncer->{pool};
	ok($bouncer->{up}, 'pgbouncer accepts connections')
	  or diag($bouncer->{diag}->());

	my $token = $node->safe_psql('postgres', 'SELECT fencing.next_token()');
	my $client_a = $pool->background_psql('postgres');
	my $client_b = $pool->background_psql('postgres', on_error_stop => 0);

	# client A sets the token for its session and its transaction ends
	$client_a->query_safe("SET fencing.token = $token");
	my $a_server = $client_a->query_safe('SELECT pg_backend_pid()');

	# client B gets the same server connection and finds the value there ...
	is($client_b->query_safe('SELECT pg_backend_pid()'), $a_server,
		'client B runs on the server connection client A used');
	is($client_b->query_safe('SHOW fencing.token'), $token,
		"client A's session-level value is still set on that connection");

	# ... but its token-less write is rejected
	$client_b->query("\\set VERBOSITY verbose\nUPDATE ledger SET v = v + 1 WHERE id = 1;\n\\set VERBOSITY default");
	like($client_b->{stderr}, qr/FN001: missing fence token/, "client B's token-less UPDATE is rejected with FN001");
	like($client_b->{stderr}, qr/set in an earlier transaction/, 'and told that the value is from an earlier transaction');
	$client_b->{stderr} = '';

	# client A's own SET LOCAL works in its transaction, and ends with it
	$client_a->query_safe("BEGIN; SET LOCAL fencing.token = $token; UPDATE ledger SET v = v + 1 WHERE id = 1; COMMIT;");
	is($node->safe_psql('postgres', 'SELECT v, fence = ' . $token . ' FROM ledger'),
		"1|t", "client A's write with SET LOCAL lands, stamped with its token");
	$client_b->query("UPDATE ledger SET v = v + 1 WHERE id = 1;");
	like($client_b->{stderr}, qr/missing fence token/, "client B's next token-less UPDATE is rejected too");
	$client_b->{stderr} = '';
	$client_b->query("DELETE FROM ledger WHERE id = 1;");
	like($client_b->{stderr}, qr/missing fence token for DELETE/, "and so is client B's token-less DELETE");
	is($node->safe_psql('postgres', 'SELECT v FROM ledger'), '1', 'the row keeps client A\'s write only');

	$client_a->quit;
	$client_b->quit;
	stop_pgbouncer($bouncer);
}

$node->stop;
done_testing();
