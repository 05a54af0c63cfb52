
# Copyright (c) 2026, the fencing developers
#
# 034_lock_registry.pl -- the table behind fencing.locks never lets a key
# collision (L6) go unreported, and a lock it cannot name is refused.
#
# 'k3572106e45a860d4' and 'k756635f53ad34c6c' are a real collision of
# hashtextextended(name, 0) (see test/isolation/specs/locks_collision.spec).
# Whenever one name is in use, taking the other must raise FN002; it must
# never come back NULL ("busy"), whatever the holder is doing at that
# moment:
#
# 1. taking the lock: the holder is stopped after core granted its lock and
#    before it has a token (its token needs a reservation, and the
#    reservation waits for a synchronous standby that is not there);
# 2. committing, or exiting with the lock held: 10 holder processes take
#    and release the lock as fast as they can, and exit while holding it,
#    while one checker asks for the other name thousands of times;
# 3. crowded out of its place in the table: the 256 entries after the key's
#    home are taken by other locks, so the holder's entry lands far away.
#
# 4. When every entry is in use, a new lock is refused with SQLSTATE 53400
#    and a hint to raise fencing.max_tracked_locks; nothing is taken.

use strict;
use warnings;

use File::Temp qw(tempdir);
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $capacity = 300;    # more than the 256-entry probe window
my $holder_name = 'k3572106e45a860d4';
my $other_name = 'k756635f53ad34c6c';
my $holders = 10;
my $race_seconds = 4;

my $node = PostgreSQL::Test::Cluster->new('lock_registry');
$node->init(allows_streaming => 1);    # reservations wait for sync standbys
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'fencing'\n"
	  . "fencing.max_tracked_locks = $capacity\n"
	  . "max_connections = 40\n");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION fencing');

is( $node->safe_psql(
		'postgres',
		"SELECT fencing.lock_key('$holder_name') = fencing.lock_key('$other_name')"),
	't',
	'the two names share one key');

# The other name asked for once, in a transaction of its own: "granted",
# "busy" or the SQLSTATE of the error.
sub ask_other
{
	my ($session) = @_;
	$session->{stderr} = '';    # the notices of earlier queries
	$session->query(
		"DO \$\$
		 BEGIN
			RAISE NOTICE 'answer %',
				CASE WHEN fencing.try_lock('$other_name') IS NULL
					 THEN 'busy' ELSE 'granted' END;
		 EXCEPTION WHEN OTHERS THEN
			RAISE NOTICE 'answer %', SQLSTATE;
		 END \$\$");
	my $answer = $session->{stderr} =~ /answer (busy|granted|[0-9A-Z]{5})/ ? $1 : "no answer: $session->{stderr}";
	$session->{stderr} = '';
	return $answer;
}

# Run a query until it returns 't', for at most a few seconds.
sub poll_briefly
{
	my ($sql, $seconds) = @_;
	my $until = time() + $seconds;
	while (time() < $until)
	{
		return 1 if $node->safe_psql('postgres', $sql) eq 't';
		select(undef, undef, undef, 0.05);
	}
	return 0;
}

my $checker = $node->background_psql('postgres', on_error_stop => 0);

# --- 1. Taking the lock -----------------------------------------------------
#
# With a synchronous standby configured and none connected, a reservation
# waits; ordinary commits do not (synchronous_commit = local).  A first
# token reserves a block while nothing waits yet.
$node->safe_psql('postgres', 'SELECT fencing.next_token()');
$node->safe_psql('postgres',
	"ALTER SYSTEM SET synchronous_standby_names = 'nobody'");
$node->safe_psql('postgres', "ALTER SYSTEM SET synchronous_commit = 'local'");
$node->reload;

# An operator lifts the counter past the reserved block: its reservation
# waits for the missing standby.  Retry until the reload has reached the
# server processes and the wait really happens.
my $operator = $node->background_psql('postgres', on_error_stop => 0);
my $operator_pid = $operator->query_safe('SELECT pg_backend_pid()');
my $waits = 0;
for my $try (1 .. 20)
{
	$operator->{stdin} .=
	  "SELECT fencing.advance_token(fencing.latest_token() + 100000000);\n";
	$operator->{run}->pump_nb;
	$waits = poll_briefly(
		"SELECT wait_event IS NOT DISTINCT FROM 'SyncRep' FROM pg_stat_activity
		  WHERE pid = $operator_pid", 3);
	last if $waits;
}
ok($waits, 'a reservation waits for the missing synchronous standby');

# The holder gets the core lock, then waits for its token.
my $holder = $node->background_psql('postgres', on_error_stop => 0);
my $holder_pid = $holder->query_safe('SELECT pg_backend_pid()');
$holder->query_safe('BEGIN');
$holder->{stdin} .= "SELECT fencing.try_lock('$holder_name');\n";
$holder->{run}->pump_nb;
ok( $node->poll_query_until(
		'postgres',
		"SELECT count(*) = 1 FROM pg_locks l JOIN pg_stat_activity a USING (pid)
		  WHERE l.pid = $holder_pid AND l.locktype = 'advisory' AND l.granted
			AND a.wait_event = 'SyncRep'"),
	'the holder has the core lock and waits for its token');
is(ask_other($checker), 'FN002',
	'the other name is a collision while the holder waits for its token');
is( $node->safe_psql(
		'postgres',
		"SELECT name || ' ' || granted FROM fencing.locks WHERE pid = $holder_pid"),
	"$holder_name false",
	'the view shows the holder taking the lock, without a token yet');

# Let the reservations through.
$node->safe_psql('postgres', 'ALTER SYSTEM RESET synchronous_standby_names');
$node->safe_psql('postgres', 'ALTER SYSTEM RESET synchronous_commit');
$node->reload;
$operator->query_safe('SELECT 1');
like($holder->query_safe('SELECT 1'), qr/^\d+\n1$/, 'the holder got its token');
is(ask_other($checker), 'FN002', 'the other name is a collision while it holds');
$holder->query_safe('COMMIT');
is(ask_other($checker), 'granted', 'after its commit the other name is free');
$operator->quit;

# --- 2. Committing, and exiting, while someone asks -------------------------
#
# Holders take the lock in a loop of short transactions (an FN002 raised
# while the checker holds the other name is expected and ignored); every
# fifth holder instead takes the lock and exits with it held, over and
# over.  The checker asks for the other name in a loop and counts what it
# gets: granted, collision, or busy.  Busy would mean that at the moment
# the lock was busy, the checker found no entry for the holder.
$node->safe_psql(
	'postgres', q{
CREATE PROCEDURE hold_until(deadline timestamptz, name text) LANGUAGE plpgsql
AS $$
BEGIN
	WHILE clock_timestamp() < deadline LOOP
		BEGIN
			PERFORM fencing.try_lock(name);
		EXCEPTION WHEN SQLSTATE 'FN002' THEN
			NULL;
		END;
		COMMIT;
	END LOOP;
END
$$;
CREATE FUNCTION ask_until(deadline timestamptz, name text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
	granted int := 0;
	collision int := 0;
	busy int := 0;
BEGIN
	WHILE clock_timestamp() < deadline LOOP
		BEGIN
			IF fencing.try_lock(name) IS NULL THEN
				busy := busy + 1;
			ELSE
				granted := granted + 1;
			END IF;
			-- roll the subtransaction back, so a granted lock is released
			RAISE SQLSTATE 'P0002';
		EXCEPTION
			WHEN SQLSTATE 'FN002' THEN collision := collision + 1;
			WHEN SQLSTATE 'P0002' THEN NULL;
		END;
	END LOOP;
	RETURN format('granted %s collision %s busy %s', granted, collision, busy);
END
$$;
});

my $dir = tempdir(CLEANUP => 1);
my $deadline = $node->safe_psql('postgres',
	"SELECT clock_timestamp() + interval '$race_seconds seconds'");
my $connstr = $node->connstr('postgres');
my @procs;
for my $i (1 .. $holders)
{
	my @cmd;
	if ($i % 5 == 0)
	{
		# take the lock, then exit without ending the transaction
		my $script = "$dir/exit$i.sh";
		open(my $fh, '>', $script) or die "could not write $script: $!";
		print $fh <<"EOS";
end=\$((\$(date +%s) + $race_seconds))
while [ "\$(date +%s)" -lt "\$end" ]; do
	printf "BEGIN;\\nSELECT fencing.try_lock('$holder_name');\\n" |
		psql -X -q -d '$connstr' >/dev/null 2>&1
done
EOS
		close($fh);
		@cmd = ('sh', $script);
	}
	else
	{
		@cmd = (
			'psql', '-X', '-q', '-d', $connstr, '-c',
			"CALL hold_until('$deadline', '$holder_name')");
	}
	push @procs,
	  IPC::Run::start(\@cmd, '<', \undef, '>', "$dir/h$i.out", '2>',
		"$dir/h$i.err");
}
my $answers = $checker->query_safe(
	"SELECT ask_until('$deadline'::timestamptz + interval '0.5 seconds', '$other_name')");
my $failed = 0;
for my $i (0 .. $#procs)
{
	$failed++ unless $procs[$i]->finish;
	my $err = "$dir/h" . ($i + 1) . '.err';
	diag(slurp_file($err)) if -s $err;
}
is($failed, 0, "all $holders holders ran cleanly");
my ($granted, $collisions, $busy) =
  $answers =~ /granted (\d+) collision (\d+) busy (\d+)/;
note("checker: $answers");
cmp_ok($collisions // 0, '>', 100, 'the checker met the holders many times');
is($busy, 0, 'the checker never got "busy" for the other name');

is($node->safe_psql('postgres', 'SELECT count(*) FROM fencing.locks'),
	0, 'no entry is left behind by the holders that exited');

# --- 3. Crowded out of its place --------------------------------------------
#
# A lock's entry is looked for first at its key's home, key mod capacity,
# and the 255 entries after it.  Another session takes 256 locks whose keys
# have exactly those homes, one each; the holder's entry must go further.
my $key_home = sub {
	my ($expr) = @_;
	return "((($expr)::numeric + 18446744073709551616) % 18446744073709551616) % $capacity";
};
my $home = $node->safe_psql('postgres',
	'SELECT ' . $key_home->("fencing.lock_key('$holder_name')"));
my $fillers = $node->safe_psql(
	'postgres', "
	SELECT string_agg(quote_literal(n), ',' ORDER BY home)
	FROM (SELECT DISTINCT ON (home) n, home
		  FROM (SELECT 'filler ' || i AS n,
					   " . $key_home->("fencing.lock_key('filler ' || i)") . " AS home
				FROM generate_series(1, 20000) i) c
		  WHERE (home - $home + $capacity) % $capacity < 256
		  ORDER BY home, n) f");
my @fillers = split /,/, $fillers;
is(scalar @fillers, 256, 'found 256 names whose homes fill the window');

my $crowd = $node->background_psql('postgres');
$crowd->query_safe('BEGIN');
is( $crowd->query_safe(
		"SELECT count(fencing.try_lock(n)) FROM unnest(ARRAY[$fillers]) n"),
	256,
	'another session holds the 256 locks');

$holder->quit;
$holder = $node->background_psql('postgres', on_error_stop => 0);
$holder->query_safe('BEGIN');
like($holder->query_safe("SELECT fencing.try_lock('$holder_name')"),
	qr/^\d+$/, 'the holder still gets its lock');
is($node->safe_psql('postgres',
		"SELECT count(*) FROM fencing.locks WHERE name = '$holder_name'"),
	1, 'and the view names it');
is(ask_other($checker), 'FN002',
	'the other name is a collision although the entry is far from home');
$holder->query_safe('COMMIT');
is(ask_other($checker), 'granted', 'after its commit the other name is free');

# --- 4. Every entry in use ----------------------------------------------------
$crowd->query_safe(
	"SELECT count(fencing.try_lock('more ' || i)) FROM generate_series(1, "
	  . ($capacity - 256) . ') i');
is( $node->safe_psql(
		'postgres', 'SELECT count(*), bool_and(granted) FROM fencing.locks'),
	"$capacity|t",
	"all $capacity entries are in use");

$holder->query_safe('BEGIN');
$holder->query("SELECT fencing.try_lock('one too many')");
like(
	$holder->{stderr},
	qr/ERROR:  too many fencing locks held or awaited at once/,
	'try_lock: refused when no entry is free');
like($holder->{stderr}, qr/HINT:  Raise fencing.max_tracked_locks/,
	'with a hint to raise fencing.max_tracked_locks');
$holder->{stderr} = '';
$holder->query_safe('ROLLBACK');
for my $call ("fencing.lock('one too many')", "fencing.lock('one too many', '1s')",
	"fencing.lease('one too many', '1 min')")
{
	my ($ret, $out, $err) = $node->psql(
		'postgres', "BEGIN; SELECT $call",
		extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	like($err, qr/ERROR:  53400: too many fencing locks/, "$call: refused (53400)");
}
is($node->safe_psql('postgres',
		'SELECT untracked_locks FROM fencing.status()'),
	0, 'no lock is ever untracked');

$crowd->query_safe('COMMIT');
$holder->query_safe('BEGIN');
like($holder->query_safe("SELECT fencing.try_lock('one too many')"),
	qr/^\d+$/, 'once entries are free again, the lock is granted');
$holder->query_safe('COMMIT');

$crowd->quit;
$holder->quit;
$checker->quit;
$node->stop;
done_testing();
