
# Copyright (c) 2026, the fencing developers
#
# 071_leases_full_redo.pl -- crash recovery with a full lease table keeps
# every live lease (LL5; LL7: a full table disturbs nothing else).  Redo
# skips the records of changes the state file already held when the
# server started (src/locks/lease_store.c, file_covered), so an older
# record of a name released since (its entry reused) does not come back
# and need an entry.
#
# fencing.max_leases = 16, all taken (by a superuser, so no share
# applies); a checkpoint; then n1 is renewed and released and n17 takes
# its entry; the keeper writes the file; the postmaster is killed; after
# the restart all 16 holders renew.

use strict;
use warnings;

use FindBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep time);

use lib "$FindBin::RealBin/../perl";
use FencingTest qw(kill9_and_restart);

my $node = PostgreSQL::Test::Cluster->new('review_full_redo');
$node->init;
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'fencing'\nfencing.max_leases = 16\nrestart_after_crash = on\n");
$node->start;
sub sql { return $node->safe_psql('postgres', $_[0]); }
sql('CREATE EXTENSION fencing');

sub file_tokens
{
	my $path = $node->data_dir . '/fencing.leases';
	open(my $fh, '<:raw', $path) or return ();
	local $/;
	my $bytes = <$fh>;
	close($fh);
	return () if length($bytes) < 512;
	my $slot_size = unpack('V', substr($bytes, 12, 4));
	my @tokens;
	for (my $off = 512; $off + $slot_size <= length($bytes); $off += $slot_size)
	{
		next unless unpack('V', substr($bytes, $off, 4)) == 0x55534544;
		push @tokens, unpack('q<', substr($bytes, $off + 32, 8));
	}
	return @tokens;
}

my %token;
$token{"n$_"} = sql("SELECT fencing.acquire_lease('n$_', '1 hour')") for 1 .. 16;
is(sql("SELECT count(*) FROM fencing.leases"), '16', 'the table is full');
sql('CHECKPOINT');

sql("SELECT fencing.renew_lease('n1', $token{n1})");
is(sql("SELECT fencing.release_lease('n1', $token{n1})"), 't', 'n1 is released');
$token{n17} = sql("SELECT fencing.acquire_lease('n17', '1 hour')");
like($token{n17}, qr/^\d+$/, 'n17 takes the free entry');

my $deadline = time() + 60;
sub file_done
{
	my %in = map { $_ => 1 } file_tokens();
	return $in{ $token{n17} } && !$in{ $token{n1} };
}
sleep(0.05) until file_done() || time() > $deadline;
ok(file_done(), 'the keeper wrote the file: n17 in it, n1 not');
my $lsn = sql('SELECT pg_current_wal_insert_lsn()');
$node->poll_query_until('postgres', "SELECT pg_current_wal_flush_lsn() >= '$lsn'")
  or die 'WAL not flushed';

kill9_and_restart($node);

my @lost;
for my $n (2 .. 17)
{
	my ($rc, $out, $err) = $node->psql('postgres', "SELECT fencing.renew_lease('n$n', $token{\"n$n\"})");
	push @lost, "n$n" if $rc != 0;
}
is(join(',', @lost), '', 'after the crash restart every live lease still renews (LL5)');
is(sql("SELECT count(*) FROM fencing.leases"), '16', 'and the table holds all sixteen');

$node->stop;
done_testing();
