
# Copyright (c) 2026, the fencing developers
#
# 017_tokens_wal_records.pl -- fencing's WAL records and resource manager
# ids.  Reservations are written under id 199; id 128 (fencing 1.0's) stays
# registered for replay, so WAL written by 1.0 still raises the limit in
# crash recovery, unless fencing.replay_1_0_wal = off frees the id (the
# server then cannot replay such WAL and says which id is missing).  Redo
# does not trust a record under either id: a record fencing never writes
# (too short or too long, a limit above the largest bigint, unknown info
# bits), as another extension sharing the id would write, stops recovery
# with an error that names the record and hints at the shared id;
# describing the record for the error's context does not crash.  Records are written by a small
# test module (test/tools/wal_record.c) compiled here.

use strict;
use warnings;

use File::Temp qw(tempdir);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;

my $tmp = tempdir(CLEANUP => 1);
chmod(0755, $tmp);
my $includedir = `pg_config --includedir-server`;
chomp $includedir;
my $module = "$tmp/wal_record.so";
# (-I src: base/base.h, the server version differences)
system('gcc', '-shared', '-fPIC', "-I$includedir", "-I$FindBin::RealBin/../../src",
	"$FindBin::RealBin/../tools/wal_record.c", '-o', $module) == 0
  or BAIL_OUT('could not compile test/tools/wal_record.c');

my $node = PostgreSQL::Test::Cluster->new('wal_records');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'fencing'");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION fencing');
$node->safe_psql('postgres',
	"CREATE FUNCTION test_wal_record(int, int, bytea) RETURNS pg_lsn
	 AS '$tmp/wal_record', 'test_wal_record' LANGUAGE C STRICT");

is( $node->safe_psql(
		'postgres',
		"SELECT string_agg(rm_id || ' ' || rm_name, ', ' ORDER BY rm_id)
		 FROM pg_get_wal_resource_managers() WHERE rm_id >= 128"),
	'128 fencing_1_0, 199 fencing',
	'fencing registers id 199, and id 128 for WAL written by fencing 1.0');

# A reservation record's main data: the limit, a little-endian uint64.
sub limit_bytes
{
	my ($limit) = @_;
	return '\\x' . unpack('H*', pack('Q<', $limit));
}

# Write one record, stop immediately (the record is flushed, no checkpoint
# passes it), and try to start again: crash recovery replays it.
sub write_and_recover
{
	my ($rmid, $info, $data) = @_;
	$node->safe_psql('postgres', "SELECT test_wal_record($rmid, $info, '$data')");
	$node->stop('immediate');
	my $log_offset = -s $node->logfile;
	my $started = $node->start(fail_ok => 1);
	return ($started, slurp_file($node->logfile, $log_offset));
}

# After a start that failed on a record: throw the WAL away (this node is
# disposable) so that the server starts again.
sub discard_wal
{
	$node->_update_pid(0);
	command_ok([ 'pg_resetwal', '-f', '-D', $node->data_dir ],
		'pg_resetwal discards the WAL with the record');
	$node->start;
	return;
}

# 1. A record as fencing 1.0 wrote it, under id 128, replays.
my $latest = $node->safe_psql('postgres',
	'SELECT max(t) FROM (SELECT fencing.next_token() AS t FROM generate_series(1, 1000)) s');
my $old_limit = $latest + 1_000_000_000_000;
my ($started, $log) = write_and_recover(128, 0, limit_bytes($old_limit));
ok($started, 'WAL written by fencing 1.0 (id 128): the server recovers');
cmp_ok($node->safe_psql('postgres', 'SELECT fencing.latest_token()'), '>=', $old_limit,
	'redo of the 1.0 record raised the limit');
cmp_ok($node->safe_psql('postgres', 'SELECT fencing.next_token()'), '>', $old_limit,
	'tokens continue above the limit of the 1.0 record');

# 2. Records fencing never writes: under id 199 too short and too long (a
# valid limit followed by one byte more), under id 128 a limit above the
# largest bigint, under id 199 unknown info bits, and a lease record (info
# 0x10) too short for one.
my @bad = (
	[ 199, 0, '\\x01020304', qr/It carries 4 bytes of data; a fencing reservation carries 8\./,
		'too short' ],
	[ 199, 0, limit_bytes($old_limit + 5) . '00', qr/It carries 9 bytes of data; a fencing reservation carries 8\./,
		'too long' ],
	[ 128, 0, limit_bytes(9223372036854775808), qr/Its limit 9223372036854775808 is above the largest bigint\./,
		'limit above the largest bigint, under id 128' ],
	[ 199, 0x30, limit_bytes($old_limit + 5),
		qr/Its info bits are 0x30; fencing writes only 0x00 \(RESERVE\), 0x10 \(LEASE_PUT\) and 0x20 \(LEASE_DROP\)\./,
		'unknown info bits' ],
	[ 199, 0x10, limit_bytes($old_limit + 5),
		qr/It carries 8 bytes of data; a fencing lease record carries at least \d+\./,
		'a lease record too short' ]);
for my $case (@bad)
{
	my ($rmid, $info, $data, $detail, $label) = @$case;
	($started, $log) = write_and_recover($rmid, $info, $data);
	ok(!$started, "record fencing never writes ($label): recovery stops");
	like($log, qr/FATAL:  invalid fencing WAL record at [0-9A-F]+\/[0-9A-F]+ \(resource manager $rmid\)/,
		"$label: the error names the record and its resource manager id");
	like($log, qr/DETAIL:  $detail/, "$label: the detail says what is wrong");
	like($log, qr/HINT:  Another extension may write WAL under the same resource manager id/,
		"$label: the hint points at a shared resource manager id");
	like($log, qr/CONTEXT:  WAL redo at \S+ for (fencing|fencing_1_0)\/(RESERVE|LEASE_PUT|UNKNOWN \(30\)): invalid record: /,
		"$label: the record's description in the context says it is invalid");
	discard_wal();
}
cmp_ok($node->safe_psql('postgres', 'SELECT fencing.next_token()'), '>', $old_limit,
	'after the refused records the limit is where the state file left it');

# 3. fencing.replay_1_0_wal = off: id 128 is free, and WAL written by 1.0
# can no longer be replayed.
$node->append_conf('postgresql.conf', 'fencing.replay_1_0_wal = off');
$node->restart;
is( $node->safe_psql(
		'postgres',
		"SELECT string_agg(rm_id || ' ' || rm_name, ', ' ORDER BY rm_id)
		 FROM pg_get_wal_resource_managers() WHERE rm_id >= 128"),
	'199 fencing', 'fencing.replay_1_0_wal = off: only id 199 is registered');
my $later_limit = $old_limit + 1_000_000_000_000;
($started, $log) = write_and_recover(128, 0, limit_bytes($later_limit));
ok(!$started, 'fencing.replay_1_0_wal = off: a 1.0 record stops recovery');
like($log, qr/resource manager with ID 128 not registered/,
	'fencing.replay_1_0_wal = off: the log names the missing id 128');
$node->_update_pid(0);
$node->append_conf('postgresql.conf', 'fencing.replay_1_0_wal = on');
$node->start;
cmp_ok($node->safe_psql('postgres', 'SELECT fencing.next_token()'), '>', $later_limit,
	'fencing.replay_1_0_wal back on: the 1.0 record replays');

$node->stop;
done_testing();
