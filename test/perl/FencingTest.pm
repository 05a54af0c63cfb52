# FencingTest.pm -- helpers shared by the TAP tests under test/t.
#
# Copyright (c) 2026, the fencing developers

package FencingTest;

use strict;
use warnings;

use Exporter 'import';
our @EXPORT_OK = qw(state_file_limit @WHITE_SPACE @IGNORABLE);

# The limit stored in a node's fencing.state file (magic, version, limit,
# crc; see src/token_wal.c), or undef when there is no valid file.
sub state_file_limit
{
	my ($node) = @_;
	my $path = $node->data_dir . '/fencing.state';
	return undef unless -f $path;
	open(my $fh, '<:raw', $path) or die "could not open $path: $!";
	local $/;
	my $data = <$fh>;
	close($fh);
	my ($magic, $version, $limit) = unpack('L L Q', $data);
	return undef unless defined $magic && $magic == 0x464E4331;
	return $limit;
}

# Every Unicode White_Space code point: lock names collapse runs of them.
our @WHITE_SPACE = (
	0x09 .. 0x0d, 0x20, 0x85, 0xa0, 0x1680, 0x2000 .. 0x200a,
	0x2028, 0x2029, 0x202f, 0x205f, 0x3000);

# A sample of Default_Ignorable_Code_Point: NFKC_Casefold removes them.
our @IGNORABLE = (
	0xad, 0x34f, 0x61c, 0x115f, 0x1160, 0x17b4, 0x17b5,
	0x180b .. 0x180f, 0x200b .. 0x200f, 0x202a .. 0x202e, 0x2060 .. 0x2064,
	0x3164, 0xfe00 .. 0xfe0f, 0xfeff, 0xffa0, 0x1bca0 .. 0x1bca3,
	0x1d173 .. 0x1d17a, 0xe0001, 0xe0020 .. 0xe007f, 0xe0100 .. 0xe01ef);

1;
