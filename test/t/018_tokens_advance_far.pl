
# Copyright (c) 2026, the fencing developers
#
# 018_tokens_advance_far.pl -- fencing.advance_token() far ahead of the
# clock: it returns at once with a value at least its target, every later
# token is above the target, a reservation covers it, fencing.status() shows
# the tokens running ahead of the clock by more than the lead bound (2 ms),
# the log says so once, and the counter never moves back.  A target this far
# ahead leaves the cluster's tokens ahead of its clock for as long as the
# distance (here 1000 s), which is why this runs on a throwaway server and
# not in sql/tokens.sql (make installcheck runs that on servers people care
# about; test/t/054_installcheck.pl checks it does not do this).

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $node = PostgreSQL::Test::Cluster->new('advance_far');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'fencing'");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION fencing');
$node->safe_psql('postgres', 'SELECT fencing.next_token()');

my $reservations0 = $node->safe_psql('postgres', 'SELECT reservations FROM fencing.stats');
my $far = $node->safe_psql('postgres',
	'SELECT fencing.latest_token() + 1000000000000');
my $log_offset = -s $node->logfile;

my $started = time();
my $advanced = $node->safe_psql('postgres', "SELECT fencing.advance_token($far)");
my $took = time() - $started;
cmp_ok($advanced, '>=', $far, 'advance_token returns at least its target');
# Waiting for the clock would take 1000 s: far past fencing.clock_tolerance,
# so the call does not wait.  (60 s: a bound no machine reaches by being
# slow, far below the 1000 s a wait would take.)
cmp_ok($took, '<', 60, 'advance_token far ahead does not wait for the clock');
cmp_ok($node->safe_psql('postgres', 'SELECT fencing.latest_token()'),
	'>=', $far, 'latest_token moved to the target');
cmp_ok($node->safe_psql('postgres', 'SELECT fencing.next_token()'),
	'>', $far, 'the next token is above the target');
cmp_ok($node->safe_psql('postgres', 'SELECT reservations FROM fencing.stats'),
	'>', $reservations0, 'a reservation covers the target');
cmp_ok($node->safe_psql('postgres', 'SELECT reserved_limit FROM fencing.status()'),
	'>', $far, 'the durable limit is above the target');
cmp_ok($node->safe_psql('postgres', 'SELECT tokens_ahead_of_clock FROM fencing.status()'),
	'>', 990_000_000_000, 'fencing.status() shows the tokens about 1000 s ahead of the clock');
ok($node->wait_for_log(qr/LOG:  fence tokens run \d+ ms ahead of the clock/, $log_offset),
	'the log says the tokens run ahead of the clock');

# ... and never moves back.
my $before_back = $node->safe_psql('postgres', 'SELECT fencing.latest_token()');
cmp_ok($node->safe_psql('postgres', "SELECT fencing.advance_token($before_back - 1000)"),
	'>=', $before_back, 'a target below the counter does not move it back');
cmp_ok($node->safe_psql('postgres', 'SELECT fencing.advance_token(0)'),
	'>=', $before_back, 'advance_token(0) does not move it back');
is($node->safe_psql('postgres', 'SELECT fencing.latest_token()'),
	$before_back, 'neither call moved the counter');
cmp_ok($node->safe_psql('postgres', 'SELECT fencing.next_token()'),
	'>', $before_back, 'the next token is still above');

# Across a restart, the counter stays above the target (the state file and
# WAL carry it; the clock does not).
$node->restart;
cmp_ok($node->safe_psql('postgres', 'SELECT fencing.next_token()'),
	'>', $before_back, 'after a restart, tokens continue above the target');

$node->stop;
done_testing();
