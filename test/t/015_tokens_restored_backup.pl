
# Copyright (c) 2026, the fencing developers
#
# 015_tokens_restored_backup.pl -- T4 for a data directory restored from a
# base backup and started as it is (no recovery or standby signal file, so
# it stays on the original's timeline): its fencing.state is the one the
# backup copied, older than the tokens the original issued afterwards, and
# only the backup_label says so.  Started with its clock behind the
# original's by less than fencing.clock_tolerance, its first token must be
# above every token the original issued after the backup, the last of them
# at the lead bound.  The restored server's clock is set (libfaketime) just
# before its first token, relative to that last token, so nothing here
# depends on how fast the machine is.

use strict;
use warnings;

use File::Temp qw(tempdir);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use FindBin;
use lib "$FindBin::RealBin/../perl";
use FencingTest qw(libfaketime start_with_fake_clock set_fake_offset);

plan skip_all => 'libfaketime is not installed' unless libfaketime();

my $tmp = tempdir(CLEANUP => 1);

my $original = PostgreSQL::Test::Cluster->new('original');
$original->init(allows_streaming => 1);
$original->append_conf('postgresql.conf', "shared_preload_libraries = 'fencing'");
$original->start;
$original->safe_psql('postgres', 'CREATE EXTENSION fencing');
$original->safe_psql('postgres',
	'SELECT count(fencing.next_token()) FROM generate_series(1, 10000)');
$original->backup('base');

# After the backup: more reservations, the last token at the lead bound
# (the clock plus 1.9 ms), the highest the rules allow.
$original->safe_psql('postgres',
	'SELECT count(fencing.next_token()) FROM generate_series(1, 200000)');
$original->safe_psql('postgres',
	'SELECT fencing.advance_token(clock_floor + 1900000) FROM fencing.status()');
my $original_last = $original->safe_psql('postgres', 'SELECT fencing.next_token()');
$original->stop('immediate');

my $restored = PostgreSQL::Test::Cluster->new('restored');
$restored->init_from_backup($original, 'base');
$restored->append_conf('postgresql.conf', "fencing.clock_tolerance = '1s'");
ok(-e $restored->data_dir . '/backup_label', 'the restored data directory has a backup_label');
ok(!-e $restored->data_dir . '/recovery.signal' && !-e $restored->data_dir . '/standby.signal',
	'and no signal file: it starts on the original timeline');

my $clock = "$tmp/restored.faketime";
PostgreSQL::Test::Utils::append_to_file($clock, "+0\n");
start_with_fake_clock($restored, file => $clock);
is($restored->safe_psql('postgres', 'SELECT timeline_id FROM pg_control_checkpoint()'),
	'1', 'the restored server is on the original timeline');
cmp_ok($restored->safe_psql('postgres', 'SELECT reserved_limit FROM fencing.status()'),
	'<', $original_last, 'it does not know the tokens issued after the backup (precondition)');

# Its clock half a second behind the moment the original's last token
# stands for (a token counts nanoseconds since 2000-01-01).
my $token_epoch = $original_last / 1e9 + 946_684_800;
set_fake_offset($clock, sprintf('%+.3f', $token_epoch - 0.5 - time()));
my ($restored_clock, $restored_first) = split /\n/, $restored->safe_psql('postgres',
	'SELECT clock_floor FROM fencing.status(); SELECT fencing.next_token()');
cmp_ok($restored_clock, '<', $original_last,
	'the restored clock is behind the original last token (precondition)');
cmp_ok($restored_first, '>', $original_last,
	'clock 0.5 s behind, tolerance 1 s: the first token is above every token the original issued after the backup');
like(slurp_file($restored->logfile),
	qr/fencing: the data directory was restored from a base backup: fence tokens make a fresh start/,
	'the log says why');

$restored->stop;
done_testing();
