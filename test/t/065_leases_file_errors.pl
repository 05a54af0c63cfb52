
# Copyright (c) 2026, the fencing developers
#
# 065_leases_file_errors.pl -- a write of the lease state file that fails
# loses nothing (src/locks/lease_store.c, lease_file_flush): the entries
# it took from the dirty ring go back into it before the error is raised,
# and a later write writes them (LL2').
#
# fencing.lock_delay is an hour, so that the broken entry stays in the
# table.  A lease reaches the file; the keeper is stopped; the disk is
# full for the file (a link to /dev/full stands in for it) while an
# operator breaks the lease, whose write fails; the disk has room again;
# the holder's renewal makes the break durable and gets FN004; after a
# clean restart the lease is still broken.

use strict;
use warnings;

use FindBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep time);

use lib "$FindBin::RealBin/../perl";
use FencingTest qw(lease_keeper_pid);

my $node = PostgreSQL::Test::Cluster->new('review_flush_error');
$node->init;
# a lock-delay keeps the broken entry in the table, so that the keeper
# does not drop it (which would write it anew)
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'fencing'\nfencing.lock_delay = '1h'\n");
$node->start;
sub sql { return $node->safe_psql('postgres', $_[0]); }
sql('CREATE EXTENSION fencing');

# The tokens held in used slots of the lease file.
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

my $token = sql("SELECT fencing.acquire_lease('victim', '1 hour')");
my $deadline = time() + 60;
sleep(0.05) until (grep { $_ == $token } file_tokens()) || time() > $deadline;
ok((grep { $_ == $token } file_tokens()), 'the lease is in the file, live');

# The keeper idles in its latch wait (nothing is dirty), then stops.
my $keeper = lease_keeper_pid($node);
sub keeper_waits_on_latch
{
	open(my $fh, '<', "/proc/$keeper/wchan") or return 0;
	my $wchan = <$fh> // '';
	close($fh);
	return $wchan =~ /epoll/;
}
$deadline = time() + 60;
sleep(0.05) until keeper_waits_on_latch() || time() > $deadline;
ok(keeper_waits_on_latch(), 'the keeper idles in its latch wait');
kill('STOP', $keeper);

# The disk is full for the lease file while the operator breaks the
# lease: the file is put aside and a link to /dev/full (ENOSPC on every
# write) stands in its place; then the file comes back.
my $file = $node->data_dir . '/fencing.leases';
rename($file, "$file.aside") or die "rename: $!";
symlink('/dev/full', $file) or die "symlink: $!";
my ($brc, $bout, $berr) = $node->psql('postgres', "SELECT fencing.break_lease('victim')");
like($berr, qr/could not write file "fencing.leases"/,
	'the break\'s own write of the file fails (disk full)');
unlink($file) or die "unlink: $!";
rename("$file.aside", $file) or die "rename: $!";

my ($rc, $rout, $rerr) = $node->psql('postgres', "SELECT fencing.renew_lease('victim', $token)");
like($rerr, qr/not held with token $token.*broken/s,
	'the holder is told that its lease ended (FN004, broken)');

kill('CONT', $keeper);
$node->restart;

($rc, $rout, $rerr) = $node->psql('postgres', "SELECT fencing.renew_lease('victim', $token)");
like($rerr, qr/not held with token $token/,
	'after a clean restart the lease it was told had ended is still not renewable (LL2\')');
is(sql("SELECT count(*) FROM fencing.leases WHERE name = 'victim'"), '0',
	'and fencing.leases does not show it held');

$node->stop;
done_testing();
