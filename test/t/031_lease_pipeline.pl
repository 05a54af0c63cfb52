
# Copyright (c) 2026, the fencing developers
#
# 031_lease_pipeline.pl -- a lease's ttl holds for a client in pipeline
# mode, which sends statements without Sync and so never gets a
# ReadyForQuery (the moment core arms idle_in_transaction_session_timeout).
#
# A libpq client (test/tools/pipeline_stall.c) sends BEGIN and
# fencing.lease(name, '1 second') as Parse/Bind/Execute and a Flush, reads
# the token and stalls without Sync: the server must end its session about
# a second after the lease's statement ended, with core's own FATAL 25P03,
# and free the name; fencing.stats counts the expired lease.  The same after
# a statement fails inside a savepoint (the server then discards messages
# up to the next Sync, the lease taken before the savepoint still held).
# A client that keeps sending statements (with a Flush, still no Sync) more
# often than its ttl keeps the lease.  And the same stall through psycopg's
# pipeline mode.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use IPC::Run;
use lib "$FindBin::RealBin/../perl";
use FencingTest qw(pipeline_stall_client);
use Time::HiRes qw(time sleep);

my $node = PostgreSQL::Test::Cluster->new('lease_pipeline');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'fencing'");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION fencing');

my $client = pipeline_stall_client();

sub sql { return $node->safe_psql('postgres', $_[0]); }

# Start a client process; returns a handle with its output so far.
sub start_client
{
	my (@cmd) = @_;
	my %c = (out => '', err => '');
	$c{run} = IPC::Run::start(\@cmd, '<', \undef, '>', \$c{out}, '2>', \$c{err});
	return \%c;
}

# Wait until the client printed its token; returns it.
sub client_token
{
	my ($c) = @_;
	my $give_up = time() + 60;
	while ($c->{out} !~ /^token (\d+)$/m && time() < $give_up)
	{
		$c->{run}->pump_nb;
		sleep(0.05);
	}
	return $c->{out} =~ /^token (\d+)$/m ? $1 : undef;
}

# Poll from another session until name is free (at most 30 s).  Returns
# the seconds from $since (a timestamptz) to the first free finding, or
# undef.
sub seconds_until_free
{
	my ($name, $since) = @_;
	my $give_up = time() + 30;
	while (time() < $give_up)
	{
		my ($free, $elapsed) = split /\|/,
		  sql("BEGIN; SELECT fencing.try_lock('$name') IS NOT NULL,
				extract(epoch FROM clock_timestamp() - '$since'::timestamptz); COMMIT;");
		return $elapsed if $free eq 't';
		sleep(0.1);
	}
	return undef;
}

# The statement start of the lease call, from the view.
sub lease_since
{
	my ($name) = @_;
	return sql("SELECT since FROM fencing.locks WHERE name = '$name' AND granted");
}

# A libpq client that stalls without Sync: ended about a second after its
# lease, long before it wakes up (8 s).
for my $case ([ 'stalled', 'pl', '' ], [ 'stalled after an error in a savepoint', 'pl-error', 'after-error' ])
{
	my ($label, $name, $mode) = @$case;
	my $expired_before = sql('SELECT leases_expired FROM fencing.stats');
	my $c = start_client($client, $node->connstr('postgres'), $name, '1 second', 8,
		$mode ne '' ? ($mode) : ());
	my $token = client_token($c);
	like($token, qr/^\d+$/, "$label: the pipeline client got a lease");
	my $since = lease_since($name);
	my $elapsed = seconds_until_free($name, $since);
	ok(defined $elapsed, "$label: the name became free while the client stalled");
	cmp_ok($elapsed // 0, '>=', 1, "$label: not before the ttl");
	cmp_ok($elapsed // 99, '<', 5, "$label: about the ttl after the lease, long before the client wakes");
	$c->{run}->finish;
	like($c->{out}, qr/^error 22004$/m, "$label: the statement in the savepoint failed")
	  if $mode eq 'after-error';
	like(
		$c->{out},
		qr/^after 25P03 terminating connection due to idle-in-transaction timeout$/m,
		"$label: the client is told with core's FATAL 25P03")
	  or diag($c->{out} . $c->{err});
	is(sql('SELECT leases_expired FROM fencing.stats'),
		$expired_before + 1, "$label: fencing.stats counts the expired lease");
}

# A pipeline client that sends a statement every 300 ms keeps a 1 s lease
# for 3 s.
{
	my $c = start_client($client, $node->connstr('postgres'), 'pl-renew', '1 second', 3, 'renew');
	my $token = client_token($c);
	like($token, qr/^\d+$/, 'renewing: the pipeline client got a lease');
	$c->{run}->finish;
	like($c->{out}, qr/^after ok $token$/m,
		'renewing: after 3 s of statements it still holds the lease')
	  or diag($c->{out} . $c->{err});
}

# The same stall through psycopg's pipeline mode.
my $psycopg_script = <<'PY';
import sys
import time
import psycopg

conn = psycopg.connect(sys.argv[1])
try:
    with conn.pipeline():
        pid, token = conn.execute(
            "SELECT pg_backend_pid(), fencing.lease('py', '1 second')").fetchone()
        print("pid", pid, flush=True)
        print("token", token, flush=True)
        time.sleep(8)
        try:
            print("after ok", conn.execute("SELECT fencing.held_token('py')").fetchone()[0])
        except psycopg.Error as e:
            print("after error", flush=True)
            raise
except psycopg.Error:
    pass
PY

SKIP:
{
	skip 'python3-psycopg is not installed (apt-get install python3-psycopg)', 5
	  unless system('/usr/bin/python3 -c "import psycopg" >/dev/null 2>&1') == 0;
	my $c = start_client('/usr/bin/python3', '-c', $psycopg_script, $node->connstr('postgres'));
	my $token = client_token($c);
	like($token, qr/^\d+$/, 'psycopg: the pipeline got a lease');
	my $elapsed = seconds_until_free('py', lease_since('py'));
	cmp_ok($elapsed // 99, '<', 5, 'psycopg: the name became free about the ttl after the lease');
	cmp_ok($elapsed // 0, '>=', 1, 'psycopg: not before the ttl');
	$c->{run}->finish;
	like($c->{out}, qr/^after error$/m,
		"psycopg: the client's next statement fails, its connection gone")
	  or diag($c->{out} . $c->{err});
	my ($pid) = $c->{out} =~ /^pid (\d+)$/m;
	ok( $node->log_contains(
			"\\[$pid\\] .*FATAL:  terminating connection due to idle-in-transaction timeout"),
		'psycopg: the server ended it with FATAL 25P03');
}

$node->stop;
done_testing();
