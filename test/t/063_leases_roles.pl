
# Copyright (c) 2026, the fencing developers
#
# 063_leases_roles.pl -- hostile roles and other databases against the
# leases that outlive a transaction and the lock-delays (LL7', LL9, LL1,
# the lock-delay's database; src/locks/leases.c, src/locks/delay.c).
#
# 1. A role that fills its share of the lease table (a DO loop of
#    acquire_lease with a ttl of weeks) is refused 53400 itself, in every
#    database; other roles, in both databases, keep acquiring; a
#    superuser is not counted.  Its lapsed leases under a lock-delay count
#    until the delay ends.  The share is fencing.max_leases_per_role
#    (reloadable, not settable by a session).
# 2. A role allowed to use its leases (EXECUTE on use_lease) raises the
#    fence of its own lease's name, and cannot raise another name's: not
#    through check_fence, not through use_lease of another role's lease.
#    The other role's next batch goes through.
# 3. FN004 tells another role nothing of the token: the same detail for
#    the lease's token and for any other.
# 4. Lock-delays keep to their database: a session of one database that
#    loses 2,000 locks leaves delays that refuse those names there and in
#    no other database; a lapsed lease's delay the same; clear_lock_delays
#    in one database ends only that database's delays; break_lease of a
#    name in one database breaks only that database's lease.

use strict;
use warnings;

use FindBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep time);

use lib "$FindBin::RealBin/../perl";
use FencingTest qw(holding_session terminate_session);

my $node = PostgreSQL::Test::Cluster->new('leases_roles');
$node->init;
$node->append_conf('postgresql.conf', <<'CONF');
shared_preload_libraries = 'fencing'
fencing.max_leases = 64
max_locks_per_transaction = 256
CONF
$node->start;

for my $db ('one', 'two')
{
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($db, 'CREATE EXTENSION fencing');
}
$node->safe_psql('postgres', <<'SQL');
CREATE ROLE hog LOGIN;
CREATE ROLE worker LOGIN;
CREATE ROLE other LOGIN;
SQL
for my $db ('one', 'two')
{
	$node->safe_psql($db, <<'SQL');
GRANT EXECUTE ON FUNCTION fencing.use_lease(text, bigint) TO hog, worker, other;
CREATE TABLE ledger (id int PRIMARY KEY, fence bigint);
SELECT fencing.protect('ledger');
GRANT SELECT, INSERT, UPDATE ON ledger TO hog, worker, other;
SQL
}

sub as
{
	my ($role, $db, $sql) = @_;
	my ($rc, $out, $err) = $node->psql($db, $sql,
		connstr => $node->connstr($db) . " user=$role",
		extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	return ($out, $err);
}

sub as_ok
{
	my ($role, $db, $sql) = @_;
	my ($out, $err) = as($role, $db, $sql);
	die "$role in $db: $sql: $err" if $err =~ /ERROR/;
	return $out;
}

# --- 1. a role fills its share -------------------------------------------------

is($node->safe_psql('postgres', "SELECT current_setting('fencing.max_leases_per_role', true)"), '-1',
	'share: by default -1, a quarter of fencing.max_leases');
my ($out, $err) = as('hog', 'one', <<'SQL');
DO $$
BEGIN
	FOR i IN 1 .. 64 LOOP
		PERFORM fencing.acquire_lease('hog-' || i, '24 days');
	END LOOP;
END $$;
SQL
like($err, qr/53400.*role "hog" holds too many fencing leases/s,
	'share: the hog is refused 53400 once it holds its share');
like($err, qr/It holds 16 entries of the lease table, and fencing.max_leases_per_role allows 16/,
	'share: the detail says how many it holds and may hold');
# leases take effect at once, as nextval does: the DO block's first 16 stay
is($node->safe_psql('one', "SELECT count(*) FROM fencing.leases WHERE name LIKE 'hog-%'"), 16,
	'share: the hog holds exactly its share');
($out, $err) = as('hog', 'two', "SELECT fencing.acquire_lease('hog elsewhere', '1 hour')");
like($err, qr/53400/, 'share: the hog is refused in the other database too (the share is cluster-wide)');
for my $db ('one', 'two')
{
	like(as_ok('worker', $db, "SELECT fencing.acquire_lease('worker job', '1 hour')"), qr/^\d+$/,
		"share: another role acquires in database $db");
	like(as_ok('other', $db, "SELECT fencing.acquire_lease('other job', '1 hour')"), qr/^\d+$/,
		"share: a third role acquires in database $db");
}
like($node->safe_psql('one', "SELECT fencing.acquire_lease('superuser job', '1 hour')"), qr/^\d+$/,
	'share: a superuser is not counted');
($out, $err) = as('hog', 'one', "SET fencing.max_leases_per_role = 1000");
like($err, qr/cannot be changed now|permission denied|parameter "fencing.max_leases_per_role" cannot be changed/,
	'share: a session cannot raise its own share');
$node->append_conf('postgresql.conf', "fencing.max_leases_per_role = 20\n");
$node->reload;
ok($node->poll_query_until('one', "SELECT current_setting('fencing.max_leases_per_role') = '20'"),
	'share: the setting is reloaded');
like(as_ok('hog', 'one', "SELECT fencing.acquire_lease('hog-17', '24 days')"), qr/^\d+$/,
	'share: a larger share lets the hog take more');
as_ok('hog', 'one', "SELECT fencing.acquire_lease('hog-' || i, '24 days') FROM generate_series(18, 20) i");
($out, $err) = as('hog', 'one', "SELECT fencing.acquire_lease('hog-21', '24 days')");
like($err, qr/53400/, 'share: up to the new share');

# Lapsed leases count while their lock-delay keeps their entry.
$node->safe_psql('postgres', "ALTER SYSTEM SET fencing.lock_delay = '1h'");
$node->reload;
ok($node->poll_query_until('one', "SELECT current_setting('fencing.lock_delay') = '1h'"),
	'share: a lock-delay is set');
as_ok('hog', 'one', "SELECT fencing.release_lease(name, token) FROM fencing.leases WHERE name = 'hog-20'");
my $short = as_ok('hog', 'one', "SELECT fencing.acquire_lease('hog-short', '1 second')");
sleep(1.5);
($out, $err) = as('hog', 'one', "SELECT fencing.acquire_lease('hog-22', '24 days')");
like($err, qr/53400/, 'share: a lapsed lease under its lock-delay still counts');
$node->safe_psql('one', "SELECT fencing.clear_lock_delays('hog-short')");
like(as_ok('hog', 'one', "SELECT fencing.acquire_lease('hog-22', '24 days')"), qr/^\d+$/,
	'share: once its delay is cleared it no longer does');
$node->safe_psql('postgres', 'ALTER SYSTEM RESET fencing.lock_delay');
$node->reload;
$node->safe_psql('one', "SELECT fencing.break_lease(name) FROM fencing.leases WHERE name LIKE 'hog-%'");
$node->safe_psql('one', "SELECT fencing.clear_lock_delays()");

# --- 2. a lease holder raises its own lease's fence only ---------------------

my $w = as_ok('worker', 'one', "SELECT token FROM fencing.leases WHERE name = 'worker job' AND database = current_database()");
my $o = as_ok('other', 'one', "SELECT token FROM fencing.leases WHERE name = 'other job' AND database = current_database()");
like(as_ok('worker', 'one', "BEGIN; SELECT fencing.use_lease('worker job', $w); INSERT INTO ledger VALUES (1); COMMIT;"),
	qr/^$w$/m, 'fence: the worker uses its own lease');
($out, $err) = as('worker', 'one', "SELECT fencing.check_fence('other job', fencing.latest_token())");
like($err, qr/42501.*permission denied for function check_fence/s,
	'fence: it cannot raise another name\'s fence with check_fence');
($out, $err) = as('worker', 'one', "BEGIN; SELECT fencing.use_lease('other job', $o); COMMIT;");
like($err, qr/FN004/, 'fence: nor with use_lease of another role\'s lease');
like(as_ok('other', 'one', "BEGIN; SELECT fencing.use_lease('other job', $o); INSERT INTO ledger VALUES (2); COMMIT;"),
	qr/^$o$/m, 'fence: the other role\'s next batch goes through');
is($node->safe_psql('one', "SELECT fence FROM fencing.resource_fences WHERE resource = 'other job'"), $o,
	'fence: the other name\'s fence is its own holder\'s token');

# --- 3. FN004 tells another role nothing of the token ------------------------

my @details;
for my $token ($o, $o - 1, $o + 1)
{
	($out, $err) = as('worker', 'one', "SELECT fencing.renew_lease('other job', $token)");
	my ($detail) = $err =~ /DETAIL:\s+(.*)/;
	push @details, $detail;
}
like($details[0], qr/another session user/, 'token: another role is told the lease is not its own');
is($details[1], $details[0], 'token: the same for a token one below');
is($details[2], $details[0], 'token: the same for a token one above');

# --- 4. lock-delays keep to their database --------------------------------------

$node->safe_psql('postgres', "ALTER SYSTEM SET fencing.lock_delay = '1h'");
$node->reload;
ok($node->poll_query_until('one', "SELECT current_setting('fencing.lock_delay') = '1h'"),
	'databases: a lock-delay is set');
# one session of database one holds 2,000 locks and is lost
my $names = "SELECT 'lost ' || i FROM generate_series(1, 2000) i";
my $h = $node->background_psql('one', on_error_stop => 0);
my $pid = $h->query_safe('SELECT pg_backend_pid()');
$h->query_safe("BEGIN; SELECT count(fencing.try_lock(n)) FROM ($names) AS t(n)");
terminate_session($node, $h, $pid);
is($node->safe_psql('one', "BEGIN; SELECT count(fencing.try_lock(n)) FROM ($names) AS t(n); COMMIT"), 0,
	'databases: the lost holder\'s 2,000 names are refused in its database');
is($node->safe_psql('two', "BEGIN; SELECT count(fencing.try_lock(n)) FROM ($names) AS t(n); COMMIT"), 2000,
	'databases: and granted, all 2,000, in the other database');
is($node->safe_psql('two', "SELECT count(fencing.release_lease(n, fencing.acquire_lease(n, '1 minute'))) FROM ($names) AS t(n)"),
	2000, 'databases: leases of those names are granted there too');
is($node->safe_psql('two', "SELECT fencing.clear_lock_delays()"), 0,
	'databases: clear_lock_delays in the other database ends none of them');
is($node->safe_psql('one', "BEGIN; SELECT count(fencing.try_lock(n)) FROM ($names) AS t(n); COMMIT"), 0,
	'databases: they still refuse their names in their database');
# a lapsed lease's delay
my $lapsed = $node->safe_psql('one', "SELECT fencing.acquire_lease('lapsing here', '1 second')");
sleep(1.5);
is($node->safe_psql('one', "SELECT fencing.acquire_lease('lapsing here', '1 minute') IS NULL"), 't',
	'databases: a lapsed lease\'s delay refuses its name in its database');
is($node->safe_psql('two', "BEGIN; SELECT fencing.try_lock('lapsing here') IS NOT NULL; ROLLBACK"), 't',
	'databases: not a transaction lock of it in the other');
like($node->safe_psql('two', "SELECT fencing.acquire_lease('lapsing here', '1 minute')"), qr/^\d+$/,
	'databases: nor a lease of it there');
# break_lease of a name breaks only that database's lease
my $here = $node->safe_psql('one', "SELECT fencing.acquire_lease('both places', '1 hour')");
my $there = $node->safe_psql('two', "SELECT fencing.acquire_lease('both places', '1 hour')");
is($node->safe_psql('two', "SELECT fencing.break_lease('both places')"), $there,
	'databases: break_lease breaks the lease of its own database');
like($node->safe_psql('one', "SELECT fencing.renew_lease('both places', $here)"), qr/^\d{4}-/,
	'databases: the other database\'s lease of the same name is still held');
is($node->safe_psql('one', "SELECT fencing.clear_lock_delays()"), 2001,
	'databases: clear_lock_delays ends the delays of its own database');
$node->safe_psql('postgres', 'ALTER SYSTEM RESET fencing.lock_delay');
$node->reload;

$node->stop;
done_testing();
