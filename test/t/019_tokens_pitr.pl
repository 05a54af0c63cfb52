
# Copyright (c) 2026, the fencing developers
#
# 019_tokens_pitr.pl -- T4 for point-in-time recovery from a copy of the
# data directory taken while the server was stopped (a file-system-level
# backup, so no backup_label), to a target LSN just before the source's
# last reservation.  The copy's fencing.state is a valid file of the
# source's own timeline, and recovery replays only the reservations before
# the target, so neither says anything about the tokens the source issued
# afterwards.  The recovered server's clock runs behind the moment the
# source issued its last token (libfaketime), by less than its
# fencing.clock_tolerance: what lifts it above that token is that recovery
# ended on a new timeline, and a server whose state file belongs to
# another timeline makes a fresh start above its clock plus the lead bound
# plus fencing.clock_tolerance.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use FencingTest qw(start_behind_token archive_current_wal);

my $source = PostgreSQL::Test::Cluster->new('source');
$source->init(has_archiving => 1, allows_streaming => 1);
$source->append_conf('postgresql.conf', "shared_preload_libraries = 'fencing'");
$source->start;
$source->safe_psql('postgres', 'CREATE EXTENSION fencing');
$source->safe_psql('postgres',
	'SELECT count(fencing.next_token()) FROM generate_series(1, 1000)');

# The backup: a copy of the stopped data directory, fencing.state included.
$source->stop;
$source->backup_fs_cold('cold');
$source->start;

# Reservations after the copy, which recovery replays; then the target,
# and after it the source's last reservation: its highest token the rules
# allow (1.9 ms above its clock, within the lead bound).
$source->safe_psql('postgres',
	'SELECT count(fencing.next_token()) FROM generate_series(1, 10000)');
my ($target_lsn, $known_limit) = split /\|/, $source->safe_psql('postgres',
	'SELECT pg_current_wal_insert_lsn(), reserved_limit FROM fencing.status()');
$source->safe_psql('postgres',
	'SELECT fencing.advance_token(clock_floor + 1900000) FROM fencing.status()');
my $last = $source->safe_psql('postgres', 'SELECT fencing.next_token()');
cmp_ok($last, '>', $known_limit,
	'the source drew its last token from a block reserved after the target (precondition)');
archive_current_wal($source);
$source->stop('immediate');

my $recovered = PostgreSQL::Test::Cluster->new('recovered');
$recovered->init_from_backup($source, 'cold', has_restoring => 1, standby => 0);
ok(!-e $recovered->data_dir . '/backup_label',
	'a copy of the stopped data directory has no backup_label (precondition)');
$recovered->append_conf('postgresql.conf', qq(
recovery_target_lsn = '$target_lsn'
recovery_target_inclusive = off
recovery_target_action = 'promote'
fencing.clock_tolerance = '10s'
));

# The recovered server's clock starts 7 s behind the moment of the source's
# last token, so that start, recovery and promotion on a slow (sanitized)
# build still leave it behind when the precondition is checked; the first
# token then waits about the tolerance, 10 s.  Without libfaketime its
# clock is the real one, already past that moment.
my $faketime = start_behind_token($recovered, $last, 7);
$recovered->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
  or die 'point-in-time recovery did not finish';

cmp_ok($recovered->safe_psql('postgres', 'SELECT fencing.latest_token()'),
	'<', $last, 'the recovered cluster never saw the last reservation (precondition)');
SKIP:
{
	skip 'libfaketime is not installed', 1 unless $faketime;
	cmp_ok($recovered->safe_psql('postgres', 'SELECT clock_floor FROM fencing.status()'),
		'<', $last,
		"the recovered cluster's clock is behind the source's last token (precondition)");
}
my $first = $recovered->safe_psql('postgres', 'SELECT fencing.next_token()');
cmp_ok($first, '>', $last,
	'point-in-time recovery from a stopped copy: the first token is above every token of the source');
like(slurp_file($recovered->logfile),
	qr/fresh start above \d+.*\n.*DETAIL:  This server may not know every token issued before \(its state file belongs to another WAL timeline\)/,
	'the log says the fresh start is due to the new timeline');
$recovered->stop;

done_testing();
