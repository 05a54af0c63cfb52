
# Copyright (c) 2026, the fencing developers
#
# 032_pgbouncer.pl -- L3 through PgBouncer in transaction pooling mode.
#
# Fencing locks are transaction-scoped, so a pooler that hands the server
# connection to another client after each transaction must never pass a
# lock along with it.  The test starts Debian's pgbouncer in front of the
# node with a pool of two server connections: a client holding a lock in a
# transaction makes a second client see it busy; after COMMIT the lock is
# free for the next transaction on whichever server connection it gets;
# many short transactions through the reused connections never find a lock
# left behind.  A second pool of one server connection makes the reuse
# certain: two clients are shown to run on the same server backend in turn,
# and the lock one of them held there is gone when the other arrives.

use strict;
use warnings;

use FindBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

use lib "$FindBin::RealBin/../perl";
use FencingTest qw(start_pgbouncer stop_pgbouncer);

plan skip_all =>
  "$FencingTest::PGBOUNCER not found: install the Debian package pgbouncer to run this test"
  unless -x $FencingTest::PGBOUNCER;

my $node = PostgreSQL::Test::Cluster->new('pooled');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'fencing'");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION fencing');

# A pool of two server connections, and a database "single" whose pool has
# one, so that two clients of it must share a server connection.
my $bouncer = start_pgbouncer($node, 2, { single => 1 });
my $pool = $bouncer->{pool};
ok($bouncer->{up}, 'pgbouncer accepts connections')
  or diag($bouncer->{diag}->());

# Client 1 holds the lock in a transaction through the pool.
my $c1 = $pool->background_psql('postgres');
$c1->query_safe('BEGIN');
my $t1 = $c1->query_safe("SELECT fencing.try_lock('pooled job')");
like($t1, qr/^\d+$/, 'client 1 got the lock through the pool');
my $c1_server = $c1->query_safe('SELECT pg_backend_pid()');

# Client 2, on the pool's other server connection, sees it busy.
my $c2 = $pool->background_psql('postgres');
$c2->query_safe('BEGIN');
is($c2->query_safe("SELECT fencing.try_lock('pooled job') IS NULL"),
	't', 'client 2 finds the lock busy while client 1 holds it');
isnt($c2->query_safe('SELECT pg_backend_pid()'),
	$c1_server, 'client 2 runs on another server connection');
$c2->query_safe('COMMIT');

is( $node->safe_psql(
		'postgres', "SELECT count(*) FROM fencing.locks WHERE pid = $c1_server"),
	1,
	"the view shows client 1's server connection holding the lock");

$c1->query_safe('COMMIT');

# After COMMIT nothing is left on the server connection client 1 used,
# although pgbouncer keeps it open and hands it on.
is( $node->safe_psql(
		'postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE pid = $c1_server"),
	1,
	"client 1's server connection is still open in the pool");
is( $node->safe_psql(
		'postgres', "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"),
	0, 'no advisory lock is left after COMMIT');
is($node->safe_psql('postgres', 'SELECT count(*) FROM fencing.locks'),
	0, 'the view is empty after COMMIT');

# Client 2's next transaction gets the lock, with a higher token.
$c2->query_safe('BEGIN');
my $t2 = $c2->query_safe("SELECT fencing.try_lock('pooled job')");
like($t2, qr/^\d+$/, 'client 2 gets the lock in its next transaction');
cmp_ok($t2, '>', $t1, "client 2's token is above client 1's");
$c2->query_safe('ROLLBACK');

# Many short transactions from both clients, one at a time, land on the two
# reused server connections; every one of them finds the lock free, also
# right after another client's transaction on the same server connection
# took it.  Autocommit statements and explicit transactions alternate; each
# autocommit statement is warned that its lock ends with it.
my (%servers, $all_free, $previous, $warned);
$all_free = 1;
$warned = 0;
$previous = $t2;
for my $i (1 .. 20)
{
	my $c = $i % 2 ? $c1 : $c2;
	my $row;
	if ($i % 4 < 2)
	{
		$c->{stderr} = '';
		$row = $c->query(
			"SELECT fencing.try_lock('pooled job'), pg_backend_pid()");
		$warned++
		  if $c->{stderr} =~
		  /WARNING:  fencing lock "pooled job" is released at the end of this statement/;
		$c->{stderr} = '';
	}
	else
	{
		$c->query_safe('BEGIN');
		$row = $c->query_safe(
			"SELECT fencing.lock('pooled job', '0'), pg_backend_pid()");
		$c->query_safe('COMMIT');
	}
	my ($token, $server) = split /\|/, $row;
	$all_free = 0 unless defined $token && $token =~ /^\d+$/ && $token > $previous;
	$previous = $token if defined $token && $token =~ /^\d+$/;
	$servers{$server}++;
}
ok($all_free, 'each of 20 pooled transactions found the lock free, with a rising token');
is($warned, 10, 'each of the 10 autocommit statements was warned');
cmp_ok(scalar keys %servers, '<=', 2, 'they ran on at most two server connections');

# One server connection for two clients, so each transaction runs on the
# backend the other client's transaction used before.  A holds the lock
# there and ends its transaction (commit, then rollback); B, arriving on
# the same backend, neither holds nor sees a lock, and takes it anew.
my $a = $pool->background_psql('single');
my $b = $pool->background_psql('single');
for my $end ('COMMIT', 'ROLLBACK')
{
	$a->query_safe('BEGIN');
	my ($a_token, $a_server) = split /\|/,
	  $a->query_safe("SELECT fencing.try_lock('reused'), pg_backend_pid()");
	like($a_token, qr/^\d+$/, "$end: client A holds the lock");
	$a->query_safe($end);

	$b->query_safe('BEGIN');
	my ($b_server, $b_held, $b_locks) = split /\|/, $b->query_safe(
		"SELECT pg_backend_pid(), fencing.held_token('reused') IS NULL,
				(SELECT count(*) FROM pg_locks
				  WHERE pid = pg_backend_pid() AND locktype = 'advisory')");
	is($b_server, $a_server,
		"$end: client B runs on the server backend client A used");
	is($b_held, 't', "$end: B does not hold A's lock");
	is($b_locks, '0', "$end: that backend holds no advisory lock");
	my $b_token = $b->query_safe("SELECT fencing.try_lock('reused')");
	cmp_ok($b_token, '>', $a_token, "$end: B takes the lock with a higher token");
	$b->query_safe('COMMIT');
}
$a->quit;
$b->quit;
is( $node->safe_psql(
		'postgres', "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"),
	0, 'no advisory lock is left at the end');
is($node->safe_psql('postgres', 'SELECT count(*) FROM fencing.locks'),
	0, 'the view is empty at the end');

# A client that disconnects in the middle of a transaction: pgbouncer
# closes that server connection, and the lock goes with it.
my $c3 = $pool->background_psql('postgres');
$c3->query_safe('BEGIN');
like($c3->query_safe("SELECT fencing.try_lock('abandoned')"),
	qr/^\d+$/, 'client 3 takes a lock and then disconnects mid-transaction');
$c3->quit;
ok( $node->poll_query_until(
		'postgres', "SELECT count(*) = 0 FROM fencing.locks"),
	"the abandoned transaction's lock is released");
$c1->query_safe('BEGIN');
is($c1->query_safe("SELECT fencing.try_lock('abandoned') IS NOT NULL"),
	't', 'and the next client gets it');
$c1->query_safe('COMMIT');

$c1->quit;
$c2->quit;
stop_pgbouncer($bouncer);
$node->stop;
done_testing();
