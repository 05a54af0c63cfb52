
# Copyright (c) 2026, the fencing developers
#
# 031_lease_expiry.pl -- fencing.lease() is enforced by the server.
#
# A takes a 1 s lease and then sits idle in its transaction (the session
# simply does not send its next statement) for 3 s: the server ends A's
# session, the lock is free, fencing.locks no longer shows it, and B then
# gets the lock with a higher token.  A holder that keeps issuing statements
# (fencing.held_token) more often than its ttl keeps the lease far beyond
# the ttl.  fencing.stats counts as expired only leases still in force: a
# lease rolled back with its savepoint does not count when the session's
# own idle limit ends it; it counts a holder whose reports are kept out of
# the server log (log_min_messages = panic) all the same.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep time);

my $node = PostgreSQL::Test::Cluster->new('lease');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'fencing'");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION fencing');

# A takes the lease and goes quiet.
my $a = $node->background_psql('postgres', on_error_stop => 0);
my $a_pid = $a->query_safe('SELECT pg_backend_pid()');
$a->query_safe('BEGIN');
my $a_token = $a->query_safe("SELECT fencing.lease('job', '1s')");
like($a_token, qr/^\d+$/, 'A got a lease and a token');
is($a->query_safe("SELECT fencing.held_token('job')"),
	$a_token, 'A holds the lock with that token');

is($node->safe_psql('postgres', "SELECT fencing.try_lock('job') IS NULL"),
	't', 'while A holds the lease, B finds the lock busy');
is( $node->safe_psql(
		'postgres', "SELECT count(*) FROM fencing.locks WHERE pid = $a_pid"),
	1,
	'the view shows A holding the lock');

# A stays idle in its transaction for 3 s.
sleep(3);

ok( $node->poll_query_until(
		'postgres',
		"SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $a_pid"),
	"the server ended A's session");
ok( $node->log_contains(
		'terminating connection due to idle-in-transaction timeout'),
	'the server log says why');
is($node->safe_psql('postgres', 'SELECT count(*) FROM fencing.locks'),
	0, "A's row left the view with its session");
is($node->safe_psql('postgres', 'SELECT leases_expired FROM fencing.stats'),
	'1', 'fencing.stats counts the expired lease');
is( $node->safe_psql(
		'postgres', "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"),
	0, "A's advisory lock is gone");

# A's session is gone: when A wakes up, its next statement fails, and A is
# told why.
$a->{stderr} = '';
my $a_next = eval { $a->query('SELECT 1'); 1 };
ok(!$a_next, "A's next statement fails");
like(
	$a->{stderr},
	qr/FATAL:  terminating connection due to idle-in-transaction timeout/,
	'A is told that the server ended its session for sitting idle');
eval { $a->quit };

# B gets the lock with a higher token, and the view shows B only.
my $b = $node->background_psql('postgres');
my $b_pid = $b->query_safe('SELECT pg_backend_pid()');
$b->query_safe('BEGIN');
my $b_token = $b->query_safe("SELECT fencing.try_lock('job')");
like($b_token, qr/^\d+$/, 'B got the lock');
cmp_ok($b_token, '>', $a_token, "B's token is above A's");
is( $node->safe_psql(
		'postgres',
		"SELECT string_agg(pid || ':' || token || ':' || granted, ',') FROM fencing.locks"),
	"$b_pid:$b_token:true",
	'the view shows B alone');
$b->query_safe('COMMIT');

# A holder that renews by checking its token every 0.4 s keeps a 1 s lease
# for 3 s, and is never ended.
my $c = $node->background_psql('postgres');
my $c_pid = $c->query_safe('SELECT pg_backend_pid()');
$c->query_safe('BEGIN');
my $c_token = $c->query_safe("SELECT fencing.lease('job', '1s')");
like($c_token, qr/^\d+$/, 'C got a lease');
my $start = time();
my $renewals_ok = 1;
while (time() - $start < 3)
{
	sleep(0.4);
	$renewals_ok = 0
	  unless $c->query_safe("SELECT fencing.held_token('job')") eq $c_token;
}
ok($renewals_ok, 'C still held its token at every check over 3 s');
is( $node->safe_psql(
		'postgres', "SELECT count(*) FROM pg_stat_activity WHERE pid = $c_pid"),
	1,
	"C's session is alive");
is($node->safe_psql('postgres', "SELECT fencing.try_lock('job') IS NULL"),
	't', 'and the lock is still busy for others');
$c->query_safe('COMMIT');
is($c->query_safe('SHOW idle_in_transaction_session_timeout'),
	'0', "after C's commit the session has no idle limit again");
$c->quit;

# A lease belongs to the (sub)transaction that took it.  Three sessions sit
# idle in their transactions at once: D1 took a lease in a savepoint and
# rolled back to it, D2 did the same on a lock it already held, and both
# are ended by the session's own 1 s idle limit, which is no lease
# expiring; D3 took a lease in a savepoint it released, and that lease
# expires.
my @d;
for my $i (1 .. 3)
{
	push @d, $node->background_psql('postgres', on_error_stop => 0);
}
my @d_pid = map { $_->query_safe('SELECT pg_backend_pid()') } @d;
$d[0]->query_safe("SET idle_in_transaction_session_timeout = '1s'");
$d[0]->query_safe('BEGIN');
$d[0]->query_safe('SAVEPOINT s');
like($d[0]->query_safe("SELECT fencing.lease('d1', '1 hour')"),
	qr/^\d+$/, 'D1 takes a lease in a savepoint');
$d[0]->query_safe('ROLLBACK TO SAVEPOINT s');
$d[1]->query_safe("SET idle_in_transaction_session_timeout = '1s'");
$d[1]->query_safe('BEGIN');
my $d2_token = $d[1]->query_safe("SELECT fencing.try_lock('d2')");
$d[1]->query_safe('SAVEPOINT s');
is($d[1]->query_safe("SELECT fencing.lease('d2', '1 hour')"),
	$d2_token, 'D2 makes its lock a lease in a savepoint');
$d[1]->query_safe('ROLLBACK TO SAVEPOINT s');
$d[2]->query_safe('BEGIN');
$d[2]->query_safe('SAVEPOINT s');
like($d[2]->query_safe("SELECT fencing.lease('d3', '1s')"),
	qr/^\d+$/, 'D3 takes a lease in a savepoint');
$d[2]->query_safe('RELEASE SAVEPOINT s');
ok( $node->poll_query_until(
		'postgres',
		"SELECT count(*) = 0 FROM pg_stat_activity WHERE pid IN ("
		  . join(',', @d_pid) . ')'),
	'the server ended all three idle sessions');
eval { $_->quit } for @d;

# A shorter ttl taken in a savepoint goes with ROLLBACK TO: the holder may
# then sit idle longer than it, within the ttl in force before.
{
	my $f = $node->background_psql('postgres', on_error_stop => 0);
	my $f_pid = $f->query_safe('SELECT pg_backend_pid()');
	$f->query_safe('BEGIN');
	my $f_token = $f->query_safe("SELECT fencing.lease('f', '30 seconds')");
	$f->query_safe('SAVEPOINT s');
	$f->query_safe("SELECT fencing.lease('f', '1 second')");
	$f->query_safe('ROLLBACK TO SAVEPOINT s');
	sleep(3);
	is( $node->safe_psql(
			'postgres', "SELECT count(*) FROM pg_stat_activity WHERE pid = $f_pid"),
		1,
		'a holder idle 3 s after rolling back a 1 s ttl is alive (its ttl is 30 s again)');
	is($f->query_safe("SELECT fencing.held_token('f')"),
		$f_token, 'and still holds its lease');
	$f->query_safe('COMMIT');
	$f->quit;
}

# A holder whose reports never reach the server log (log_min_messages =
# panic) is counted too: the count does not depend on the log.
my $e = $node->background_psql('postgres', on_error_stop => 0);
my $e_pid = $e->query_safe('SELECT pg_backend_pid()');
$e->query_safe('SET log_min_messages = panic');
$e->query_safe('BEGIN');
like($e->query_safe("SELECT fencing.lease('e', '1s')"),
	qr/^\d+$/, 'E, which logs nothing, takes a lease');
ok( $node->poll_query_until(
		'postgres', "SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $e_pid"),
	"the server ended E's session");
eval { $e->quit };

is($node->safe_psql('postgres', 'SELECT count(*) FROM fencing.locks'),
	0, 'the view is empty at the end');
is($node->safe_psql('postgres',
		'SELECT leases_granted, leases_expired FROM fencing.stats'),
	'8|3',
	'eight leases granted; of those in force, the three whose holders stalled expired');

$node->stop;
done_testing();
