
# Copyright (c) 2026, the fencing developers
#
# 057_leases_expiry.pl -- LL1, LL2, LL3, LL7 and T5 for leases that outlive
# a transaction (src/locks/leases.c).
#
# The guide's expiry test, as a batch job: worker A takes the run's lease
# (1 s), bills customer 1 in a batch that starts with use_lease, and then
# freezes for longer than its ttl.  Its renewal then raises FN004 although
# nobody took the name (no resurrection).  Worker B takes the name with a
# higher token and bills customers 1 and 2.  A resumes: renew_lease and
# use_lease raise FN004; writing anyway, it is rejected with FN001 by the
# rows B wrote (customer 1) and by the run's resource fence before any row
# B has not reached yet (customer 3); every customer is billed once.  A's
# release_lease with its old token returns false and frees nothing; B's
# own renewal and release work.
#
# LL3: a name taken again after its lease lapsed gets a fresh token, also
# when the lapsed entry is still in the table (the lease keeper, which
# drops it at the expiry, is stopped meanwhile, as a keeper that is late
# would be); the lapsed token renews, uses and releases nothing.
#
# LL7: with fencing.max_leases = 16, the 17th lease is refused with 53400,
# and nothing else is disturbed.  A lapsed or broken lease whose name is
# under fencing.lock_delay keeps its entry: a table full with it refuses
# a new lease rather than end the delay, and the name stays refused until
# the delay ends (here an operator ends it).  T5: three hundred lease
# changes assign no transaction id and flush no WAL themselves (the WAL
# writer flushes their records within wal_writer_delay, no commit needed).
#
# LL1 across databases: the same fifteen names leased in two databases at
# once, eight times over (with 16 entries the table's index has 32 slots,
# so the entries of both databases share probe chains): each database
# acquires, uses, renews and releases its own lease of a name, and never
# touches the other database's.

use strict;
use warnings;

use FindBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep);

use lib "$FindBin::RealBin/../perl";
use FencingTest qw(lease_keeper_pid);

my $node = PostgreSQL::Test::Cluster->new('leases_expiry');
$node->init;
# fsync on, so that pg_stat_wal (pg_stat_io from 18 on) counts WAL flushes
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'fencing'\nfencing.max_leases = 16\nfsync = on\n");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION fencing');
$node->safe_psql('postgres', <<'SQL');
CREATE TABLE ledger (customer int PRIMARY KEY, amount numeric NOT NULL, fence bigint);
SELECT fencing.protect('ledger');
SQL

sub sql { return $node->safe_psql('postgres', $_[0]); }

# The SQLSTATE of a statement that must fail, or 'no error'.
sub sqlstate_of
{
	my ($session, $statement) = @_;
	$session->{stderr} = '';
	$session->query(<<"EOS");
DO \$\$
BEGIN
	$statement;
	RAISE NOTICE 'no error';
EXCEPTION WHEN OTHERS THEN
	RAISE NOTICE 'sqlstate %', SQLSTATE;
END \$\$;
EOS
	$session->{stderr} =~ /NOTICE:  (sqlstate (\w+)|no error)/;
	my $state = $2 // 'no error';
	$session->{stderr} = '';
	return $state;
}

my $a = $node->background_psql('postgres', on_error_stop => 0);
my $b = $node->background_psql('postgres', on_error_stop => 0);

my $ta = $a->query_safe("SELECT fencing.acquire_lease('invoice-run', '1 second', holder => 'worker A')");
like($ta, qr/^\d+$/, 'A takes the run\'s lease');
$a->query_safe("BEGIN; SELECT fencing.use_lease('invoice-run', $ta); INSERT INTO ledger VALUES (1, 10); COMMIT");
is(sql('SELECT fence FROM ledger WHERE customer = 1'), $ta, "A billed customer 1 under its token");

# A freezes past its ttl.
sleep(1.3);
is(sqlstate_of($a, "PERFORM fencing.renew_lease('invoice-run', $ta)"), 'FN004',
	'after its ttl, A cannot renew, although nobody took the name');
is(sql('SELECT count(*) FROM fencing.leases'), 0, 'and the lease is not shown as held');

my $tb = $b->query_safe("SELECT fencing.acquire_lease('invoice-run', '30 seconds', holder => 'worker B')");
cmp_ok($tb, '>', $ta, 'B takes the name with a higher token');
$b->query_safe("BEGIN; SELECT fencing.use_lease('invoice-run', $tb);"
	  . " INSERT INTO ledger VALUES (1, 10) ON CONFLICT (customer) DO UPDATE SET amount = EXCLUDED.amount;"
	  . " INSERT INTO ledger VALUES (2, 20); COMMIT");

# A resumes where it was.
is(sqlstate_of($a, "PERFORM fencing.renew_lease('invoice-run', $ta)"), 'FN004',
	'A\'s renewal raises FN004');
$a->query_safe('BEGIN');
is(sqlstate_of($a, "PERFORM fencing.use_lease('invoice-run', $ta)"), 'FN004',
	'A\'s next batch raises FN004 at use_lease');
$a->query_safe('ROLLBACK');
$a->query_safe('BEGIN');
is(sqlstate_of($a, "SET LOCAL fencing.token = $ta; UPDATE ledger SET amount = 99 WHERE customer = 1"),
	'FN001', 'A writing anyway: the row B wrote rejects it (FN001)');
$a->query_safe('ROLLBACK');
$a->query_safe('BEGIN');
is(sqlstate_of($a, "PERFORM fencing.check_fence('invoice-run', $ta)"), 'FN001',
	'the run\'s resource fence rejects A before customer 3, which B has not reached (FN001)');
$a->query_safe('ROLLBACK');
is(sql("SELECT string_agg(customer || ':' || (fence = $tb), ',' ORDER BY customer) FROM ledger"),
	'1:true,2:true', 'every customer is billed once, by B');

# The guide's release test.
is($a->query_safe("SELECT fencing.release_lease('invoice-run', $ta)"), 'f',
	'A\'s release with its old token returns false');
is(sql("SELECT token FROM fencing.leases WHERE name = 'invoice-run'"), $tb,
	'and frees nothing: B still holds the lease');
like($b->query_safe("SELECT fencing.renew_lease('invoice-run', $tb)"), qr/^\d{4}-/,
	'B renews');
is($b->query_safe("SELECT fencing.release_lease('invoice-run', $tb)"), 't', 'B releases');
is(sql('SELECT count(*) FROM fencing.leases'), 0, 'the run is free');

# LL3 with the lapsed entry still in the table.  The keeper is stopped
# while it sleeps (nothing has changed for a while, and no lease is left to
# lapse), so that it holds no lock of the table.
sleep(0.2);
my $keeper = lease_keeper_pid($node);
ok(defined $keeper && kill('STOP', $keeper), 'the lease keeper is stopped');
my $lapsed = sql("SELECT fencing.acquire_lease('lapses', '100 milliseconds')");
sleep(0.3);
my $again = sql("SELECT fencing.acquire_lease('lapses', '1 minute')");
cmp_ok($again, '>', $lapsed,
	'the name taken again after its lapse gets a fresh token, above the lapsed one');
is(sqlstate_of($a, "PERFORM fencing.renew_lease('lapses', $lapsed)"), 'FN004',
	'the lapsed token does not renew the new lease (FN004)');
$a->query_safe('BEGIN');
is(sqlstate_of($a, "PERFORM fencing.use_lease('lapses', $lapsed)"), 'FN004',
	'nor use it (FN004)');
$a->query_safe('ROLLBACK');
is(sql("SELECT fencing.release_lease('lapses', $lapsed)"), 'f', 'nor release it');
ok(kill('CONT', $keeper), 'the lease keeper resumes');
is(sql("SELECT token FROM fencing.leases WHERE name = 'lapses'"), $again,
	'the new lease is held with its own token');
is(sql("SELECT fencing.release_lease('lapses', $again)"), 't', 'and released with it');

# LL7: the table is full at fencing.max_leases.
$b->query_safe("SELECT fencing.acquire_lease('full ' || i, '1 minute') FROM generate_series(1, 16) i");
is(sqlstate_of($a, "PERFORM fencing.acquire_lease('one more', '1 minute')"), '53400',
	'the 17th lease is refused with 53400');
is(sql('SELECT count(*) FROM fencing.leases'), 16, 'the 16 leases stay');
is(sql("SELECT count(*) FROM fencing.leases l WHERE fencing.renew_lease(l.name, l.token) > now()"),
	16, 'and renew');
is(sql("BEGIN; SELECT fencing.try_lock('one more') IS NOT NULL; COMMIT"),
	't', 'locks are not disturbed');
sql("SELECT fencing.release_lease(name, token) FROM fencing.leases WHERE name = 'full 1'");
like(sql("SELECT fencing.acquire_lease('one more', '1 minute')"), qr/^\d+$/,
	'once one is released, a new lease fits');
sql('SELECT fencing.release_lease(name, token) FROM fencing.leases');

# LL7 with lock-delays running: 14 leases held, one broken and one lapsed,
# whose names stay under fencing.lock_delay (a minute, ended by hand
# below).
sub set_lock_delay
{
	my ($value) = @_;
	sql("ALTER SYSTEM SET fencing.lock_delay = '$value'");
	$node->reload;
	$node->poll_query_until('postgres', "SELECT current_setting('fencing.lock_delay') = '$value'")
	  or die "fencing.lock_delay was not set to $value";
}
set_lock_delay('1min');
$b->query_safe("SELECT fencing.acquire_lease('full ' || i, '1 minute') FROM generate_series(1, 14) i");
sql("SELECT fencing.acquire_lease('delayed broken', '1 minute')");
sql("SELECT fencing.break_lease('delayed broken')");
sql("SELECT fencing.acquire_lease('delayed lapsed', '100 milliseconds')");
sleep(0.3);
my $delayed = "ARRAY['delayed broken', 'delayed lapsed']";
is(sql("SELECT count(*) FROM fencing.locks WHERE name = ANY ($delayed) AND delayed_until > now()"),
	2, 'the broken and the lapsed lease keep their names under the lock-delay');
is(sqlstate_of($a, "PERFORM fencing.acquire_lease('one more', '1 minute')"), '53400',
	'the table full of held and delayed leases refuses a new one with 53400');
is(sql("BEGIN; SELECT count(*) FROM unnest($delayed) n WHERE fencing.try_lock(n) IS NULL; COMMIT"),
	2, 'the delayed names still refuse try_lock');
my (undef, $refused) = $node->psql('postgres',
	"SELECT count(*) FROM unnest($delayed) n WHERE fencing.acquire_lease(n, '1 minute') IS NULL");
is($refused, 2, 'and acquire_lease');
is(sql("SELECT sum(fencing.clear_lock_delays(n)) FROM unnest($delayed) n"), 2,
	'an operator ends the two delays');
is(sql("BEGIN; SELECT count(*) FROM unnest($delayed) n WHERE fencing.try_lock(n) IS NOT NULL; COMMIT"),
	2, 'then the names are free');
like(sql("SELECT fencing.acquire_lease('one more', '1 minute')"), qr/^\d+$/,
	'and their entries make room for a new lease');
is(sql("SELECT count(*) FILTER (WHERE fencing.release_lease(name, token)) FROM fencing.leases"),
	15, 'the 15 leases held are released');
set_lock_delay('0');

# T5: no transaction id, and no WAL flush of our own.
my $wal_io =
  $node->pg_version >= 18
  ? "(SELECT coalesce(sum(fsyncs), 0) AS wal_sync FROM pg_stat_io WHERE object = 'wal' AND context = 'normal')"
  : 'pg_stat_wal';
my $session = $node->background_psql('postgres');
$session->query_safe('SELECT pg_stat_force_next_flush()');
my $sync0 = sql("SELECT wal_sync FROM $wal_io s");
$session->query_safe('BEGIN');
for my $i (1 .. 100)
{
	my $t = $session->query_safe("SELECT fencing.acquire_lease('t5', '1 minute')");
	$session->query_safe("SELECT fencing.renew_lease('t5', $t)");
	$session->query_safe("SELECT fencing.release_lease('t5', $t)");
}
is($session->query_safe('SELECT pg_current_xact_id_if_assigned() IS NULL'),
	't', 'three hundred lease changes assigned no transaction id');
$session->query_safe('COMMIT');
my $lsn = $session->query_safe('SELECT pg_current_wal_insert_lsn()');
$session->query_safe('SELECT pg_stat_force_next_flush()');
sql('SELECT pg_stat_force_next_flush()');
my $syncs = sql("SELECT wal_sync FROM $wal_io s") - $sync0;
note("WAL flushes during 300 lease changes: $syncs");
cmp_ok($syncs, '<', 30, 'the lease changes flushed no WAL themselves');
ok($node->poll_query_until('postgres', "SELECT pg_current_wal_flush_lsn() >= '$lsn'"),
	'the WAL writer flushed their records without a commit');
$session->quit;

# A lease excludes its name in its own database only (LL1): another
# database leases the same name, renews and releases it, and the first
# database's lease stays held.
$node->safe_psql('postgres', 'CREATE DATABASE other_db');
$node->safe_psql('other_db', 'CREATE EXTENSION fencing');
my $here = sql("SELECT fencing.acquire_lease('per database', '1 minute')");
my $there = $node->safe_psql('other_db',
	"SELECT fencing.acquire_lease('per database', '1 minute')");
like($there, qr/^\d+$/, 'another database leases a name this database leases');
like($node->safe_psql('other_db', "SELECT fencing.renew_lease('per database', $there)"),
	qr/^\d{4}-/, 'it renews its own lease of the name');
is($node->safe_psql('other_db', "SELECT fencing.release_lease('per database', $there)"),
	't', 'and releases it');
is(sql("SELECT count(*) FROM fencing.leases WHERE database = 'postgres' AND token = $here"),
	'1', "this database's lease of the name is still held");
is(sql("SELECT fencing.release_lease('per database', $here)"), 't',
	'and is released by its holder');

# The same fifteen names in both databases, eight rounds of new names.  In
# each round one database (in turn) holds the fifteen leases, and the other
# takes each name in turn: acquires, uses, renews and releases it.  Then
# the first database's leases are all still held with their own tokens,
# and it uses, renews and releases each of them.  Each function returns
# how many names went through every step.
my $round_functions = <<'SQL';
CREATE TABLE held (name text PRIMARY KEY, token bigint);
-- Acquire each name and keep it.
CREATE FUNCTION hold(names text[]) RETURNS bigint LANGUAGE sql AS $$
	WITH taken AS (
		INSERT INTO held
		SELECT n, fencing.acquire_lease(n, '1 minute') FROM unnest(names) n
		RETURNING token)
	SELECT count(token) FROM taken
$$;
-- Use, renew and release the lease held with token.
CREATE FUNCTION finish(name text, token bigint) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
	PERFORM fencing.use_lease(name, token);
	PERFORM fencing.renew_lease(name, token);
	RETURN fencing.release_lease(name, token);
EXCEPTION WHEN OTHERS THEN
	RETURN false;
END
$$;
-- The kept leases still held with their tokens, each finished.
CREATE FUNCTION give_back() RETURNS bigint LANGUAGE sql AS $$
	WITH shown AS (
		SELECT h.name, h.token FROM held h JOIN fencing.leases l
		  ON l.name = h.name AND l.token = h.token AND l.database = current_database()),
	done AS (DELETE FROM held RETURNING name, token)
	SELECT count(*) FILTER (WHERE finish(s.name, s.token)) FROM shown s JOIN done d USING (name, token)
$$;
-- Acquire, use, renew and release each name, one after the other.
CREATE FUNCTION cycle(names text[]) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
	n text;
	t bigint;
	ok bigint := 0;
BEGIN
	FOREACH n IN ARRAY names LOOP
		t := fencing.acquire_lease(n, '1 minute');
		IF t IS NOT NULL AND finish(n, t) THEN
			ok := ok + 1;
		END IF;
	END LOOP;
	RETURN ok;
END
$$;
SQL
my %db = (postgres => $node->background_psql('postgres'),
	other_db => $node->background_psql('other_db'));
$_->query_safe($round_functions) for values %db;
my @rounds_ok;
for my $round (1 .. 8)
{
	my ($keeps, $cycles) = $round % 2 ? ('postgres', 'other_db') : ('other_db', 'postgres');
	my $names = "ARRAY(SELECT 'round $round name ' || i FROM generate_series(1, 15) i)";
	my $held = $db{$keeps}->query_safe("SELECT hold($names)");
	my $cycled = $db{$cycles}->query_safe("BEGIN; SELECT cycle($names); COMMIT");
	my $kept = $db{$keeps}->query_safe("BEGIN; SELECT give_back(); COMMIT");
	push @rounds_ok, "$held $cycled $kept";
}
is(join(', ', @rounds_ok), join(', ', ('15 15 15') x 8),
	'in every round both databases lease the same fifteen names, each only its own');
is(sql('SELECT count(*) FROM fencing.leases'), 0, 'no lease is left');
$_->quit for values %db;

$a->quit;
$b->quit;
$node->stop;
done_testing();
