
# Copyright (c) 2026, the fencing developers
#
# Upgrade safety.
#
# 1. ALTER EXTENSION fencing UPDATE from 1.0 to the current version, and
#    again at the current version (a no-op that says so): no error, and
#    neither the counter nor the state file moves back.  That both paths
#    build the same objects is test 053's job.
# 2. A restart with the library installed again (the same file as a newer
#    build would be) keeps the state file and the counter: tokens continue
#    above every token issued before, after a clean and after an immediate
#    stop.
# 3. A standby whose shared_preload_libraries lacks fencing cannot replay the
#    extension's WAL records: its startup process fails and the log names
#    the missing resource manager and tells the operator to load the module
#    through shared_preload_libraries (PostgreSQL's own message: the module
#    is not loaded, so it cannot add its name).

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes ();
use FindBin;
use lib "$FindBin::RealBin/../perl";
use FencingTest qw(state_file_limit);


my $primary = PostgreSQL::Test::Cluster->new('primary');
$primary->init(allows_streaming => 1);
$primary->append_conf('postgresql.conf', "shared_preload_libraries = 'fencing'");
$primary->start;
$primary->safe_psql('postgres', "CREATE EXTENSION fencing VERSION '1.0'");
my $issued = $primary->safe_psql('postgres',
	'SELECT max(t) FROM (SELECT fencing.next_token() AS t FROM generate_series(1, 1000)) s');
my $limit_before = state_file_limit($primary);
ok(defined $limit_before, 'the primary has a valid fencing.state');
cmp_ok($limit_before // 0, '>=', $issued, 'the state file covers the tokens issued');

#
# 1. ALTER EXTENSION UPDATE.
#
my $current = $primary->safe_psql('postgres',
	"SELECT default_version FROM pg_available_extensions WHERE name = 'fencing'");
$primary->safe_psql('postgres', 'ALTER EXTENSION fencing UPDATE');
is($primary->safe_psql('postgres',
		"SELECT extversion FROM pg_extension WHERE extname = 'fencing'"),
	$current, "ALTER EXTENSION fencing UPDATE moved 1.0 to $current");
for my $sql ('ALTER EXTENSION fencing UPDATE', "ALTER EXTENSION fencing UPDATE TO '$current'")
{
	my ($ret, $stdout, $stderr) = $primary->psql('postgres', $sql);
	is($ret, 0, "$sql: no error");
	like($stderr, qr/NOTICE:  version "\Q$current\E" of extension "fencing" is already installed/,
		"$sql: says the extension is already at version $current");
}
is($primary->safe_psql('postgres',
		"SELECT extversion FROM pg_extension WHERE extname = 'fencing'"),
	$current, "extension still at $current");
cmp_ok($primary->safe_psql('postgres', 'SELECT fencing.latest_token()'),
	'>=', $issued, 'latest_token unchanged by ALTER EXTENSION UPDATE');
cmp_ok(state_file_limit($primary) // 0, '>=', $limit_before,
	'state file unchanged by ALTER EXTENSION UPDATE');
my $after_update = $primary->safe_psql('postgres', 'SELECT fencing.next_token()');
cmp_ok($after_update, '>', $issued, 'next token after ALTER EXTENSION UPDATE is above');

#
# 2. Restart with the library installed again.  The test cannot write the
# package library directory, so "a newer library" is the same file loaded
# again by a new postmaster; a reservation far above the clock floor makes
# sure that the counter, not the clock, is what carries tokens forward.
#
my $far = $primary->safe_psql('postgres',
	'SELECT fencing.advance_token(fencing.latest_token() + 1000000000000)');
my $before_restart = $primary->safe_psql('postgres', 'SELECT fencing.next_token()');
cmp_ok($before_restart, '>', $far, 'token above the advanced counter');
$primary->restart;
my $after_restart = $primary->safe_psql('postgres', 'SELECT fencing.next_token()');
cmp_ok($after_restart, '>', $before_restart,
	'after a clean restart tokens continue above the last one');
cmp_ok(state_file_limit($primary) // 0, '>', $after_restart,
	'the state file covers the tokens issued after the restart');

my $before_crash = $primary->safe_psql('postgres',
	'SELECT max(t) FROM (SELECT fencing.next_token() AS t FROM generate_series(1, 3000)) s');
$primary->stop('immediate');
$primary->start;
my $after_crash = $primary->safe_psql('postgres', 'SELECT fencing.next_token()');
cmp_ok($after_crash, '>', $before_crash,
	'after an immediate stop tokens continue above the last one');
is($primary->safe_psql('postgres',
		"SELECT count(*) FROM fencing.status() WHERE latest_token >= $after_crash AND reserved_limit > $after_crash"),
	'1', 'fencing.status() agrees after the restarts');

#
# 3. A standby without the library.
#
$primary->backup('backup');
my $standby = PostgreSQL::Test::Cluster->new('standby_without_fencing');
$standby->init_from_backup($primary, 'backup', has_streaming => 1);
# the configuration copied from the primary preloads fencing: take it out
$standby->append_conf('postgresql.conf', "shared_preload_libraries = ''");

# Records from now on: a reservation forced by advancing past the limit,
# and tokens issued across it.
my $reservations = $primary->safe_psql('postgres', 'SELECT reservations FROM fencing.stats');
$primary->safe_psql('postgres',
	'SELECT fencing.advance_token(fencing.latest_token() + 2000000)');
$primary->safe_psql('postgres',
	'SELECT count(fencing.next_token()) FROM generate_series(1, 3000)');
cmp_ok($primary->safe_psql('postgres', 'SELECT reservations FROM fencing.stats'),
	'>', $reservations, 'the primary wrote at least one reservation record');
$primary->safe_psql('postgres', 'SELECT pg_switch_wal()');

my $log_offset = -s $standby->logfile // 0;
my $started = $standby->start(fail_ok => 1);
note 'pg_ctl start of the standby ' . ($started ? 'returned' : 'failed');
ok( $standby->wait_for_log(qr/resource manager with ID \d+ not registered/, $log_offset),
	'the standby log says a resource manager is missing');
my $log = slurp_file($standby->logfile, $log_offset);
like($log, qr/resource manager with ID 199 not registered/,
	"the standby log names the resource manager's ID (199, fencing's)");
# PostgreSQL 17 puts the parameter's name in quotes
my $spl = $standby->pg_version >= 17 ? '"shared_preload_libraries"' : 'shared_preload_libraries';
like($log, qr/HINT:  Include the extension module that implements this resource manager in \Q$spl\E\./,
	'the standby log hints to load the module in shared_preload_libraries');

# Replay stopped: the standby is down (or refuses to serve) and is not
# quietly running without the records.
my $deadline = time() + 60;
my $pid_file = $standby->data_dir . '/postmaster.pid';
Time::HiRes::sleep(0.1) while (-f $pid_file && time() < $deadline);
ok(!-f $pid_file, 'the standby shut down instead of running without the records');
# pg_ctl may have returned before the startup process failed; the node
# object then still believes the postmaster runs and would refuse to start
# it again: tell it the postmaster is gone.
$standby->_update_pid(0);
# The postmaster writes this line after the startup process has exited, a
# moment after the lines read above: wait for it (wait_for_log polls the
# log, and dies after PostgreSQL::Test::Utils::timeout_default seconds,
# which counts here as a failed test, not a dead script).
ok( eval {
		$standby->wait_for_log(qr/startup process \(PID \d+\) exited with exit code 1/,
			$log_offset);
		1;
	},
	'the startup process exited with an error');

# With the library back in shared_preload_libraries the same standby
# replays the records and serves latest_token above the primary's tokens.
$standby->append_conf('postgresql.conf', "shared_preload_libraries = 'fencing'");
$standby->start;
# Up to what the primary flushed, not its insert position: after the WAL
# switch above that points past the next segment's page header, which
# replay_lsn reaches only when a record arrives there (the next standby
# snapshot, up to 15 s later).
$primary->wait_for_catchup($standby, 'replay', $primary->lsn('flush'));
cmp_ok($standby->safe_psql('postgres', 'SELECT fencing.latest_token()'),
	'>=', $primary->safe_psql('postgres', 'SELECT fencing.latest_token()'),
	'with fencing preloaded the standby replays and covers the primary');
my $primary_file_limit = state_file_limit($primary);
ok(defined $primary_file_limit, 'the primary has a valid state file');
cmp_ok(state_file_limit($standby) // 0, '>=', $primary_file_limit // 1,
	"the standby's state file caught up with the primary's");
$standby->stop;
$primary->stop;
done_testing();
