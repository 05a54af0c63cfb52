
# Copyright (c) 2026, the fencing developers
#
# 017_tokens_state_durable.pl -- T2 and T3 rest on the state file
# fencing.state as much as on WAL (no checkpoint hook: once a checkpoint has
# passed a reservation's record, the file is what carries its limit).  It
# is replaced durably: its new content is flushed before the rename that
# puts it in place, and the data directory is flushed after the rename, so
# that a power loss leaves the old file or the new one, complete.  The
# content is flushed through the descriptor that wrote it, before that is
# closed (as PostgreSQL flushes its own files): a write-back error is
# reported to an fsync of that descriptor, while an fsync through a
# descriptor opened later (as durable_rename() makes) may not see it.  A
# shim preloaded into the server (test/tools/fsync_log.c) logs every fsync
# and rename, and every close of a descriptor with writes not yet flushed;
# the server runs with fsync = on.  Checked for the two writers:
#  - a backend's reservation;
#  - redo, in crash recovery, of a reservation above the state file (a
#    record written by test/tools/wal_record.c).

use strict;
use warnings;

use Cwd qw(realpath);
use File::Temp qw(tempdir);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use FencingTest qw(state_file_limit);

my $tmp = tempdir(CLEANUP => 1);
chmod(0755, $tmp);
my $includedir = `pg_config --includedir-server`;
chomp $includedir;
system('gcc', '-shared', '-fPIC', "$FindBin::RealBin/../tools/fsync_log.c",
	'-o', "$tmp/fsync_log.so", '-ldl') == 0
  or BAIL_OUT('could not compile test/tools/fsync_log.c');
system('gcc', '-shared', '-fPIC', "-I$includedir", "-I$FindBin::RealBin/../../src",
	"$FindBin::RealBin/../tools/wal_record.c", '-o', "$tmp/wal_record.so") == 0
  or BAIL_OUT('could not compile test/tools/wal_record.c');
my $log = "$tmp/fsync.log";

my $node = PostgreSQL::Test::Cluster->new('state_durable');
$node->init;
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'fencing'\nfsync = on\n");

# Start the server with the shim in every process it forks.
sub start_logged
{
	local $ENV{LD_PRELOAD} = "$tmp/fsync_log.so";
	local $ENV{FSYNC_LOG} = $log;
	$node->start;
	return;
}

start_logged();
$node->safe_psql('postgres', 'CREATE EXTENSION fencing');
$node->safe_psql('postgres',
	"CREATE FUNCTION test_wal_record(int, int, bytea) RETURNS pg_lsn
	 AS '$tmp/wal_record', 'test_wal_record' LANGUAGE C STRICT");
my $dir = realpath($node->data_dir);
my $file = "$dir/fencing.state";
my $tmpfile = "$dir/fencing.state.tmp";

# The logged calls since the log was last emptied, as [pid, call, paths].
sub calls
{
	return [] unless -e $log;
	return [ map { [ split / /, $_, 3 ] } split /\n/, slurp_file($log) ];
}

sub empty_log
{
	open(my $fh, '>', $log) or die "could not empty $log: $!";
	close($fh);
	return;
}

# Check how the state file was last replaced: by a rename of the temporary
# file, whose content was flushed before it, and after which the data
# directory was flushed, in one process.
sub check_replacement
{
	my ($label) = @_;
	my @calls = @{ calls() };
	my ($at) = grep { $calls[$_][1] eq 'rename' && $calls[$_][2] eq "$tmpfile $file" }
	  reverse 0 .. $#calls;
	ok(defined $at, "$label: the state file is put in place by a rename")
	  or return;
	my $pid = $calls[$at][0];
	my @before = grep { $_->[0] eq $pid } @calls[ 0 .. $at - 1 ];
	my @after = grep { $_->[0] eq $pid } @calls[ $at + 1 .. $#calls ];
	ok((grep { $_->[1] =~ /^f(data)?sync$/ && $_->[2] eq $tmpfile } @before),
		"$label: the new content is flushed before the rename");
	ok(!(grep { $_->[1] eq 'close-unflushed' && $_->[2] eq $tmpfile } @before),
		"$label: the descriptor that wrote the new content is flushed before it is closed");
	ok((grep { $_->[1] =~ /^f(data)?sync$/ && $_->[2] eq $dir } @after),
		"$label: the data directory is flushed after the rename");
	return;
}

# --- a reservation ---------------------------------------------------------
empty_log();
my $limit = $node->safe_psql('postgres', 'SELECT reserved_limit FROM fencing.status()');
$node->safe_psql('postgres',
	'SELECT fencing.advance_token(reserved_limit) FROM fencing.status()');
cmp_ok(state_file_limit($node), '>', $limit, 'a reservation raised the state file');
check_replacement('reservation');

# What a reservation costs in flushes, in the backend that makes it: the
# temporary file's content and the data directory after the rename are
# all the state file needs (the old file and the renamed one are the same
# inodes as flushed before); the rest is the WAL flush.
sub reservation_flushes
{
	my @calls = @{ calls() };
	my ($at) = grep { $calls[$_][1] eq 'rename' && $calls[$_][2] eq "$tmpfile $file" }
	  reverse 0 .. $#calls;
	return (-1, -1) unless defined $at;
	my $pid = $calls[$at][0];
	my @flushes = grep { $_->[0] eq $pid && $_->[1] =~ /^f(data)?sync$/ } @calls;
	my $state = grep { $_->[2] eq $tmpfile || $_->[2] eq $file || $_->[2] eq $dir } @flushes;
	return ($state, scalar(@flushes) - $state);
}
my $session = $node->background_psql('postgres');
$session->query_safe('SELECT fencing.next_token()');
empty_log();
$session->query_safe('SELECT fencing.advance_token(reserved_limit) FROM fencing.status()');
my ($state_flushes, $other_flushes) = reservation_flushes();
diag("one reservation: $state_flushes flushes of the state file and the data directory, "
	  . "$other_flushes others (WAL)");
is($state_flushes, 2,
	'a reservation flushes the state file twice: its new content, then the data directory');
cmp_ok($other_flushes, '<=', 1, 'and WAL once at most');
$session->quit;

# --- redo of a reservation above the state file ---------------------------
my $redo_limit = state_file_limit($node) + 1_000_000_000_000;
$node->safe_psql('postgres',
	"SELECT test_wal_record(199, 0, '\\x" . unpack('H*', pack('Q<', $redo_limit)) . "')");
$node->stop('immediate');
empty_log();
start_logged();
cmp_ok(state_file_limit($node), '>=', $redo_limit,
	'redo in crash recovery raised the state file to the record');
check_replacement('redo');

$node->stop;
done_testing();
