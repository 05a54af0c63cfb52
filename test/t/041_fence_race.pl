# Copyright (c) 2026, the fencing developers
#
# Fences raced by real processes.
#
# 1. Twelve psql processes each write one protected row once, each with its
#    own token drawn beforehand from fencing.next_token(), released at the
#    same instant in random order and holding the row for a random moment.
#    The row must end with the highest token's write, the highest writer
#    must have succeeded, every other writer either succeeded or got FN001,
#    and the writes that did succeed happened in increasing token order
#    (an AFTER trigger logs each accepted write while the row is locked).
#
# 2. Twelve processes race fencing.check_fence() on one resource with random
#    tokens.  The final watermark is the maximum, the maximum's call
#    succeeded, and every accepted call's token is above every token that
#    was accepted before it (each accepted call logs a sequence number while
#    it still holds the resource's row).
use strict;
use warnings;

use IPC::Run;
use List::Util qw(shuffle);
use Time::HiRes qw(time);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

# The highest of some tokens.  List::Util::max compares as doubles, which
# cannot tell apart tokens near 8.5e17 that differ in their last digits;
# Perl's <=> compares integers exactly.
sub highest
{
	my @sorted = sort { $a <=> $b } @_;
	return $sorted[-1];
}

my $nprocs = 12;

my $node = PostgreSQL::Test::Cluster->new('fence_race');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'fencing'");
$node->append_conf('postgresql.conf', "max_connections = 40");
$node->start;

$node->safe_psql('postgres', q{
	CREATE EXTENSION fencing;
	CREATE TABLE account (id int PRIMARY KEY, written_by int, fence bigint);
	INSERT INTO account VALUES (1, NULL, NULL);
	SELECT fencing.protect('account');
	CREATE TABLE accepted_writes (seq bigserial PRIMARY KEY, fence bigint, writer int);
	CREATE FUNCTION log_write() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN
		INSERT INTO accepted_writes (fence, writer) VALUES (NEW.fence, NEW.written_by);
		RETURN NEW;
	END $$;
	CREATE TRIGGER log_write AFTER UPDATE ON account
		FOR EACH ROW EXECUTE FUNCTION log_write();
	CREATE TABLE accepted_checks (seq bigserial PRIMARY KEY, token bigint, checker int);
});

# Run one psql process per statement list, all at once; returns, per
# process, [exit code, stdout, stderr].
sub run_concurrently
{
	my (@scripts) = @_;
	my @procs;
	foreach my $sql (@scripts)
	{
		my ($out, $err) = ('', '');
		my $h = IPC::Run::start(
			[
				'psql', '-X', '-At', '-q',
				'-v', 'ON_ERROR_STOP=1',
				'-v', 'VERBOSITY=verbose',
				'-d', $node->connstr('postgres'),
				'-c', $sql
			],
			'>', \$out, '2>', \$err);
		push @procs, [ $h, \$out, \$err ];
	}
	my @results;
	foreach my $p (@procs)
	{
		$p->[0]->finish;
		push @results, [ $p->[0]->result(0), ${ $p->[1] }, ${ $p->[2] } ];
	}
	return @results;
}

# SQL that sleeps until a shared start instant, plus a random jitter, so
# that every process is connected before any of them writes.
sub start_barrier
{
	my ($start) = @_;
	my $jitter = sprintf('%.3f', rand(0.05));
	return "SELECT pg_catalog.pg_sleep(greatest(0, $start + $jitter - extract(epoch FROM clock_timestamp())));";
}

########################################################################
# 1. one row, twelve writers, random order
########################################################################

my @tokens = split /\n/,
  $node->safe_psql('postgres',
	"SELECT fencing.next_token() FROM generate_series(1, $nprocs)");
is(scalar(@tokens), $nprocs, "drew $nprocs tokens");
my $max_token = highest(@tokens);

my @order = shuffle(0 .. $nprocs - 1);
my $start = time() + 2;
my @scripts;
foreach my $i (@order)
{
	my $hold = sprintf('%.3f', rand(0.05));
	push @scripts,
	    start_barrier($start)
	  . "BEGIN;"
	  . "UPDATE account SET written_by = $i, fence = $tokens[$i] WHERE id = 1;"
	  . "SELECT pg_catalog.pg_sleep($hold);"
	  . "COMMIT;";
}
my @results = run_concurrently(@scripts);

my ($ok, $stale, $other) = (0, 0, 0);
my %outcome;
foreach my $k (0 .. $#order)
{
	my ($rc, $out, $err) = @{ $results[$k] };
	my $i = $order[$k];
	if ($rc == 0)
	{
		$ok++;
		$outcome{$i} = 'ok';
	}
	elsif ($err =~ /ERROR:  FN001: stale fence token $tokens[$i] for table public\.account/)
	{
		$stale++;
		$outcome{$i} = 'stale';
	}
	else
	{
		$other++;
		diag("writer $i: rc $rc: $err");
	}
}
is($other, 0, 'every writer either succeeded or was rejected with FN001');
is($ok + $stale, $nprocs, "all $nprocs writers finished");
cmp_ok($ok, '>=', 1, "at least one write was accepted ($ok accepted, $stale stale)");

my ($max_writer) = grep { $tokens[$_] == $max_token } 0 .. $nprocs - 1;
is($outcome{$max_writer}, 'ok', 'the highest token\'s write was accepted');
is( $node->safe_psql('postgres', 'SELECT written_by || \' \' || fence FROM account'),
	"$max_writer $max_token",
	'the row holds the highest token\'s write');

my @log = map { [ split /\|/ ] } split /\n/,
  $node->safe_psql('postgres',
	'SELECT fence, writer FROM accepted_writes ORDER BY seq');
is(scalar(@log), $ok, 'one logged write per accepted writer');
my $monotonic = 1;
foreach my $j (1 .. $#log)
{
	$monotonic = 0 if $log[$j][0] <= $log[ $j - 1 ][0];
}
ok($monotonic, 'accepted writes happened in increasing token order');
my %logged = map { $_->[1] => 1 } @log;
is_deeply(
	[ sort { $a <=> $b } keys %logged ],
	[ sort { $a <=> $b } grep { $outcome{$_} eq 'ok' } keys %outcome ],
	'the logged writers are exactly the writers told "ok"');
is( $node->safe_psql('postgres',
		'SELECT stale_writes_rejected FROM fencing.stats'),
	$stale,
	'fencing.stats counted every stale rejection');

########################################################################
# 2. check_fence raced by twelve processes
########################################################################

@tokens = split /\n/,
  $node->safe_psql('postgres',
	"SELECT fencing.next_token() FROM generate_series(1, $nprocs)");
@tokens = shuffle(@tokens);
$max_token = highest(@tokens);

$start = time() + 2;
@scripts = ();
foreach my $i (0 .. $nprocs - 1)
{
	my $hold = sprintf('%.3f', rand(0.05));
	# alternate spellings of the one resource name
	my $name = ('Invoice-Run:2026-10', 'invoice-run:2026-10', '  INVOICE-RUN:2026-10 ')[ $i % 3 ];
	push @scripts,
	    start_barrier($start)
	  . "BEGIN;"
	  . "SELECT fencing.check_fence('$name', $tokens[$i]);"
	  . "INSERT INTO accepted_checks (token, checker) VALUES ($tokens[$i], $i);"
	  . "SELECT pg_catalog.pg_sleep($hold);"
	  . "COMMIT;";
}
@results = run_concurrently(@scripts);

($ok, $stale, $other) = (0, 0, 0);
%outcome = ();
foreach my $i (0 .. $nprocs - 1)
{
	my ($rc, $out, $err) = @{ $results[$i] };
	if ($rc == 0 && $out =~ /^$tokens[$i]$/m)
	{
		$ok++;
		$outcome{$i} = 'ok';
	}
	elsif ($rc != 0 && $err =~ /ERROR:  FN001: stale fence token $tokens[$i] for resource "invoice-run:2026-10"/)
	{
		$stale++;
		$outcome{$i} = 'stale';
	}
	else
	{
		$other++;
		diag("checker $i: rc $rc: $out $err");
	}
}
is($other, 0, 'every check_fence call either returned its token or failed with FN001');
($max_writer) = grep { $tokens[$_] == $max_token } 0 .. $nprocs - 1;
is($outcome{$max_writer}, 'ok', 'the highest token\'s check was accepted');
is( $node->safe_psql('postgres',
		"SELECT resource || ' ' || fence FROM fencing.resource_fences"),
	"invoice-run:2026-10 $max_token",
	'one resource row, at the highest token');

@log = map { [ split /\|/ ] } split /\n/,
  $node->safe_psql('postgres',
	'SELECT token, checker FROM accepted_checks ORDER BY seq');
is(scalar(@log), $ok, "one logged check per accepted call ($ok accepted, $stale stale)");
$monotonic = 1;
foreach my $j (1 .. $#log)
{
	$monotonic = 0 if $log[$j][0] <= $log[ $j - 1 ][0];
}
ok($monotonic, 'every accepted token is above every token accepted before it');

$node->stop;
done_testing();
