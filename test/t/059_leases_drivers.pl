
# Copyright (c) 2026, the fencing developers
#
# 059_leases_drivers.pl -- LL4: the whole life of a lease that outlives a
# transaction (acquire, a hundred batch transactions that each start with
# use_lease, renewals from a different connection, release) works
# unchanged through PgBouncer in transaction pooling and in statement
# pooling, and through psycopg 3 with bound parameters (the extended
# protocol, with unnamed and with named prepared statements): nothing of a
# lease lives in the session.  Every batch's row carries the lease's token
# (stamped from the fencing.token that use_lease set), the run's resource
# fence is the token, and after the release the token is refused (FN004).

use strict;
use warnings;

use FindBin;
use File::Temp qw(tempdir);
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

use lib "$FindBin::RealBin/../perl";
use FencingTest qw(start_pgbouncer stop_pgbouncer);

my $python = '/usr/bin/python3';
my $have_psycopg = system("$python -c 'import psycopg' >/dev/null 2>&1") == 0;
my $have_pgbouncer = -x $FencingTest::PGBOUNCER;

my $node = PostgreSQL::Test::Cluster->new('leases_drivers');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'fencing'");
$node->start;
$node->safe_psql('postgres', <<'SQL');
CREATE EXTENSION fencing;
CREATE TABLE driver_ledger (run text, batch int, amount int NOT NULL, fence bigint,
							PRIMARY KEY (run, batch));
SELECT fencing.protect('driver_ledger');
SQL

# What a run left: its rows, those stamped with its token, and its
# resource fence.
sub check_run
{
	my ($run, $token, $batches, $label) = @_;
	is( $node->safe_psql(
			'postgres',
			"SELECT count(*), count(*) FILTER (WHERE fence = $token),
					(SELECT fence FROM fencing.resource_fences WHERE resource = '$run')
			 FROM driver_ledger WHERE run = '$run'"),
		"$batches|$batches|$token",
		"$label: $batches batches, each row stamped with the lease's token, the run's fence at the token");
	is($node->safe_psql('postgres', "SELECT count(*) FROM fencing.leases WHERE name = '$run'"),
		0, "$label: the lease is released");
}

# The life of a lease through psycopg 3, bound parameters throughout; the
# renewals on a second connection.  Prints what the Perl side checks.
my $dir = tempdir(CLEANUP => 1);
my $script = "$dir/lease_life.py";
open(my $fh, '>', $script) or die "could not write $script: $!";
print $fh <<'PY';
import sys
import psycopg

work_dsn, renew_dsn, run, threshold = sys.argv[1:5]
threshold = None if threshold == 'none' else int(threshold)
work = psycopg.connect(work_dsn, autocommit=True, prepare_threshold=threshold)
renew = psycopg.connect(renew_dsn, autocommit=True, prepare_threshold=threshold)

token = work.execute("SELECT fencing.acquire_lease(%s, %s::interval, NULL, %s)",
                     (run, '10 seconds', 'psycopg')).fetchone()[0]
print('token', token)
for batch in range(100):
    with work.transaction():
        used = work.execute("SELECT fencing.use_lease(%s, %s)", (run, token)).fetchone()[0]
        assert used == token, (used, token)
        work.execute("INSERT INTO driver_ledger (run, batch, amount) VALUES (%s, %s, %s)",
                     (run, batch, 1))
    if batch % 10 == 0:
        renew.execute("SELECT fencing.renew_lease(%s, %s)", (run, token))
print('released', renew.execute("SELECT fencing.release_lease(%s, %s)",
                                (run, token)).fetchone()[0])
try:
    with work.transaction():
        work.execute("SELECT fencing.use_lease(%s, %s)", (run, token))
    print('after release: no error')
except psycopg.Error as e:
    print('after release', e.sqlstate)
PY
close($fh);

sub psycopg_life
{
	my ($work, $renew, $run, $threshold, $label) = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run([ $python, $script, $work, $renew, $run, $threshold ],
		'>', \$out, '2>', \$err);
	my ($token) = $out =~ /^token (\d+)$/m;
	like($token // '', qr/^\d+$/, "$label: the lease was acquired") or diag($err);
	like($out, qr/^released True$/m, "$label: released after 100 batches") or diag($out . $err);
	like($out, qr/^after release FN004$/m, "$label: the released token is refused (FN004)");
	check_run($run, $token // 0, 100, $label);
	return;
}

SKIP:
{
	skip 'python3-psycopg is not installed (apt-get install python3-psycopg)', 10
	  unless $have_psycopg;
	psycopg_life($node->connstr('postgres'), $node->connstr('postgres'),
		'psycopg run', 'none', 'psycopg, unnamed statements');
	psycopg_life($node->connstr('postgres'), $node->connstr('postgres'),
		'psycopg prepared run', '0', 'psycopg, named prepared statements');
}

SKIP:
{
	skip "$FencingTest::PGBOUNCER not found: install the Debian package pgbouncer", 12
	  unless $have_pgbouncer;

	# Transaction pooling, two server connections for three clients, with
	# psycopg (unnamed statements: PgBouncer does not keep prepared ones).
	my $bouncer = start_pgbouncer($node, 2);
	ok($bouncer->{up}, 'pgbouncer (transaction pooling) accepts connections')
	  or diag($bouncer->{diag}->());
	SKIP:
	{
		skip 'python3-psycopg is not installed', 5 unless $have_psycopg;
		my $pooled = $bouncer->{pool}->connstr('postgres');
		psycopg_life($pooled, $pooled, 'pooled run', 'none',
			'psycopg through transaction pooling');
	}
	stop_pgbouncer($bouncer);

	# Statement pooling: no transaction block spans two queries, so each
	# batch is one query string of several statements (an implicit
	# transaction block), sent by psql -c.
	$bouncer = start_pgbouncer($node, 2, undef, 'statement');
	ok($bouncer->{up}, 'pgbouncer (statement pooling) accepts connections')
	  or diag($bouncer->{diag}->());
	my $pooled = $bouncer->{pool}->connstr('postgres');
	my $query = sub {
		my ($sql) = @_;
		my ($out, $err) = ('', '');
		IPC::Run::run([ 'psql', '-X', '-A', '-t', '-d', $pooled, '-c', $sql ],
			'>', \$out, '2>', \$err);
		$out =~ s/\s+$//;
		return ($out, $err);
	};
	my ($token, $err) = $query->("SELECT fencing.acquire_lease('statement run', '10 seconds')");
	like($token, qr/^\d+$/, 'statement pooling: the lease was acquired') or diag($err);
	my $failed = 0;
	for my $batch (0 .. 99)
	{
		my ($out, $e) = $query->(
			"SELECT fencing.use_lease('statement run', $token);"
			  . " INSERT INTO driver_ledger (run, batch, amount) VALUES ('statement run', $batch, 1)");
		$failed++ if $e =~ /ERROR/;
		$query->("SELECT fencing.renew_lease('statement run', $token)") if $batch % 10 == 0;
	}
	is($failed, 0, 'statement pooling: 100 batches ran');
	is(($query->("SELECT fencing.release_lease('statement run', $token)"))[0], 't',
		'statement pooling: released');
	check_run('statement run', $token, 100, 'statement pooling');
	stop_pgbouncer($bouncer);
}

$node->stop;
done_testing();
