
# Copyright (c) 2026, the fencing developers
#
# 015_tokens_new_cluster.pl -- T4: a new or recovered cluster continues
# above every token of the old one without a manual step, even when it
# starts the moment after the old one issued its highest possible token
# (clock + lead bound): after pg_dump/pg_restore, after pg_upgrade, and after
# point-in-time recovery to a moment before the source reserved its last
# block.  The condition it rests on holds as stated: a new cluster whose
# clock is behind the old one by less than fencing.clock_tolerance starts
# above the old tokens; one behind by more may not.  A clock that steps
# back on a running server makes the next reservation wait for it (within
# the tolerance) or, beyond that, run ahead: logged, shown by
# fencing.status(), tokens still increasing.  Nothing here depends on how
# fast the machine is: every margin is a clock offset, not a delay.

use strict;
use warnings;

use File::Temp qw(tempdir);
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use FindBin;
use lib "$FindBin::RealBin/../perl";
use FencingTest qw(libfaketime start_with_fake_clock set_fake_offset clock_offset archive_current_wal);

my $tmp = tempdir(CLEANUP => 1);

# The lead bound (src/tokens/tokens.h): no token is more than this many
# nanoseconds above its server's clock when it is issued.
my $lead_bound = 2_000_000;

# New and recovered clusters run with the real default tolerance; the
# sources keep the few milliseconds of test/tap.conf.
my $real_tolerance = "fencing.clock_tolerance = '1s'";

sub new_node
{
	my ($name, $conf, %params) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init(%params);
	$node->append_conf('postgresql.conf',
		"shared_preload_libraries = 'fencing'\n" . ($conf // ''));
	return $node;
}

# The highest token the rules allow right now: lift the counter to the
# clock plus 1.9 ms (within the lead bound) and draw one token above it.
sub issue_at_lead_bound
{
	my ($node) = @_;
	$node->safe_psql('postgres',
		'SELECT fencing.advance_token(clock_floor + 1900000) FROM fencing.status()');
	return $node->safe_psql('postgres', 'SELECT fencing.next_token()');
}

my $old = new_node('old');
$old->start;
$old->safe_psql('postgres', 'CREATE EXTENSION fencing');
$old->safe_psql('postgres',
	'CREATE TABLE invoice (id int PRIMARY KEY, fence bigint NOT NULL)');
$old->safe_psql('postgres',
	'INSERT INTO invoice SELECT g, fencing.next_token() FROM generate_series(1, 100) g');
$old->safe_psql('postgres',
	'SELECT count(fencing.next_token()) FROM generate_series(1, 200000)');

# The new clusters exist before the old one issues its last token; each
# draws its first token right after it.
my $restored = new_node('restored', $real_tolerance);
$restored->start;
ok(!-f $restored->data_dir . '/fencing.state', 'the new cluster has no fencing.state');

my $faketime = libfaketime();
my ($behind_less, $behind_more, $behind_file);
if ($faketime)
{
	# One clock 0.5 s behind the old cluster's (less than the tolerance),
	# one 10 s behind (more).  The first reads its offset from a file, so
	# that its clock can step back later.
	$behind_file = "$tmp/behind_less.faketime";
	PostgreSQL::Test::Utils::append_to_file($behind_file, "-0.5\n");
	$behind_less = new_node('behind_less', $real_tolerance);
	start_with_fake_clock($behind_less, file => $behind_file);
	$behind_more = new_node('behind_more', $real_tolerance);
	start_with_fake_clock($behind_more, offset => '-10');
	$_->safe_psql('postgres', 'CREATE EXTENSION fencing') for ($behind_less, $behind_more);
}

my $old_clock = $old->safe_psql('postgres', 'SELECT clock_floor FROM fencing.status()');
my $old_last = issue_at_lead_bound($old);
my $old_last_issued = time();
cmp_ok($old_last, '>', $old_clock + 1_900_000,
	"precondition: the old cluster's last token is 1.9 ms ahead of its clock as it issued it");

# The tolerance condition: the first token of a cluster whose clock is
# behind by more than the tolerance is drawn first (the sooner after the old
# token, the more it shows), then the one behind by less.
SKIP:
{
	skip 'libfaketime is not installed', 6 unless $faketime;
	my $less_offset = clock_offset($behind_less);
	my $more_offset = clock_offset($behind_more);
	skip "libfaketime is not active in the servers (offsets $less_offset, $more_offset)", 6
	  unless $less_offset < -0.3 && $less_offset > -0.7 && $more_offset < -9;

	my $more_first = $behind_more->safe_psql('postgres', 'SELECT fencing.next_token()');
	my $since_old_last = time() - $old_last_issued;
  SKIP:
	{
		# The first token is about the new clock (10 s behind) plus the
		# tolerance (1 s): below the old cluster's last token as long as
		# less than about 9 s have passed since it was issued.  A machine
		# that slow cannot show it; it is not a failure of the rule.
		skip sprintf('%.1f s passed since the old cluster\'s last token: too late to show it', $since_old_last), 1
		  if $since_old_last > 8;
		cmp_ok($more_first, '<', $old_last,
			'clock 10 s behind, tolerance 1 s: T4 is not promised, and the first token is indeed below the old cluster\'s last');
	}
	my $more_clock = $behind_more->safe_psql('postgres', 'SELECT clock_floor FROM fencing.status()');
	cmp_ok($more_first, '<=', $more_clock + $lead_bound,
		'clock 10 s behind: the first token is within the lead bound of its own clock');

	my $started = time();
	my $less_first = $behind_less->safe_psql('postgres', 'SELECT fencing.next_token()');
	my $waited = time() - $started;
	cmp_ok($less_first, '>', $old_last,
		"clock 0.5 s behind, tolerance 1 s: the first token is above the old cluster's last");
	cmp_ok($waited, '>=', 0.9,
		sprintf('the fresh start waited about the tolerance for the clock (%.2f s)', $waited));
	my $log = slurp_file($behind_less->logfile);
	like($log, qr/fencing state file "fencing.state" not found: fence tokens make a fresh start/,
		'the log says the missing state file means a fresh start');
	like($log, qr/fence tokens make a fresh start above \d+/,
		'the log says where the fresh start begins');
}

# pg_dump / pg_restore into the brand-new cluster.
my $dump = "$tmp/old.dump";
command_ok([ 'pg_dump', '-Fc', '-d', $old->connstr('postgres'), '-f', $dump ],
	'pg_dump of the old cluster');
command_ok(
	[ 'pg_restore', '--exit-on-error', '-d', $restored->connstr('postgres'), $dump ],
	'pg_restore into the new cluster');
is($restored->safe_psql('postgres',
		"SELECT extversion FROM pg_extension WHERE extname = 'fencing'"),
	$restored->safe_psql('postgres',
		"SELECT default_version FROM pg_available_extensions WHERE name = 'fencing'"),
	'the extension was restored at the current version');
my $max_fence = $restored->safe_psql('postgres', 'SELECT max(fence) FROM invoice');
my $first = $restored->safe_psql('postgres', 'SELECT fencing.next_token()');
cmp_ok($first, '>', $old_last, "restored: the first token is above the old cluster's last");
cmp_ok($first, '>', $max_fence, 'restored: the first token is above every fence in the data');
$restored->stop;

# pg_upgrade (same major version, a fresh data directory).  It runs in the
# background while the point-in-time recovery below, on clusters of its
# own, runs; its result and the upgraded cluster are checked after that.
$old_last = issue_at_lead_bound($old);
$old->stop;
my $upgraded = new_node('upgraded', $real_tolerance);
my $bindir = $old->config_data('--bindir');
my $upgrade_cwd = "$tmp/upgrade";
my $upgrade_log = "$tmp/pg_upgrade.log";
mkdir $upgrade_cwd or die "could not create $upgrade_cwd: $!";
my @upgrade_cmd = (
	'pg_upgrade', '--no-sync',
	'-d', $old->data_dir, '-D', $upgraded->data_dir,
	'-b', $bindir, '-B', $bindir,
	'-s', $old->host, '-p', $old->port, '-P', $upgraded->port);
note "Running in the background: @upgrade_cmd";
my $upgrade = IPC::Run::start(\@upgrade_cmd,
	init => sub { chdir $upgrade_cwd or die "could not chdir to $upgrade_cwd: $!" },
	'<', \undef, '>', $upgrade_log, '2>&1');

# Point-in-time recovery to a moment before a reservation: the recovered
# cluster never saw the later block, yet continues above its tokens.
my $source = new_node('pitr_source', undef, has_archiving => 1, allows_streaming => 1);
$source->start;
$source->safe_psql('postgres', 'CREATE EXTENSION fencing');
$source->safe_psql('postgres',
	'SELECT count(fencing.next_token()) FROM generate_series(1, 10000)');
$source->backup('pitr_base');
$source->safe_psql('postgres',
	'SELECT count(fencing.next_token()) FROM generate_series(1, 10000)');
$source->safe_psql('postgres', "SELECT pg_create_restore_point('before_new_block')");
my $known_limit = $source->safe_psql('postgres',
	'SELECT reserved_limit FROM fencing.status()');

# Reservations after the restore point, the last one at the lead bound.
$source->safe_psql('postgres',
	'SELECT count(fencing.next_token()) FROM generate_series(1, 200000)');
my $source_last = issue_at_lead_bound($source);
cmp_ok($source_last, '>', $known_limit,
	'the source drew tokens from a block reserved after the restore point');
archive_current_wal($source);
$source->stop('immediate');

my $recovered = PostgreSQL::Test::Cluster->new('pitr_recovered');
$recovered->init_from_backup($source, 'pitr_base', has_restoring => 1);
$recovered->append_conf('postgresql.conf',
	"recovery_target_name = 'before_new_block'\nrecovery_target_action = 'promote'\n$real_tolerance");
$recovered->start;
$recovered->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
  or die 'point-in-time recovery did not finish';
my $recovered_latest = $recovered->safe_psql('postgres', 'SELECT fencing.latest_token()');
cmp_ok($recovered_latest, '<', $source_last,
	'the recovered cluster does not know the later blocks (precondition)');
is($recovered->safe_psql('postgres', 'SELECT fresh_start_pending FROM fencing.status()'),
	't', 'recovered on a new timeline: the next reservation is a fresh start');
my $recovered_first = $recovered->safe_psql('postgres', 'SELECT fencing.next_token()');
cmp_ok($recovered_first, '>', $source_last,
	'point-in-time recovery: the first token is above every token of the source');
like(slurp_file($recovered->logfile),
	qr/fresh start above \d+.*\n.*DETAIL:  This server may not know every token issued before \((its state file belongs to another WAL timeline|its data directory was restored from a base backup)\)/,
	'the log says why the recovered cluster makes a fresh start');
$recovered->stop;

# The pg_upgrade started above.
{
	my $upgrade_ok = $upgrade->finish;
	note slurp_file($upgrade_log);
	ok($upgrade_ok, 'pg_upgrade of the old cluster');
}
$upgraded->start;
is($upgraded->safe_psql('postgres', 'SELECT count(*) FROM invoice'),
	'100', 'the upgraded cluster has the data');
my $upgraded_first = $upgraded->safe_psql('postgres', 'SELECT fencing.next_token()');
cmp_ok($upgraded_first, '>', $old_last,
	"upgraded: the first token is above the old cluster's last");
$upgraded->stop;

# A clock that steps back under a running server (the 0.5 s behind one
# from above, whose offset a file holds).
SKIP:
{
	skip 'libfaketime is not installed or not active', 11
	  unless $faketime && clock_offset($behind_less) < -0.3;
	my $node = $behind_less;
	my $t1 = issue_at_lead_bound($node);

	# Back by 0.8 s, less than the tolerance: the next reservation waits
	# for the clock instead of publishing a limit beyond clock + bound.
	my $log_offset = -s $node->logfile;
	set_fake_offset($behind_file, '-1.3');
	cmp_ok(clock_offset($node), '<', -1.1, 'the clock stepped back by 0.8 s');
	$node->safe_psql('postgres',
		'SELECT fencing.advance_token(reserved_limit) FROM fencing.status()');
	my $t2 = $node->safe_psql('postgres', 'SELECT fencing.next_token()');
	my $clock2_read = time();
	my $clock2 = $node->safe_psql('postgres', 'SELECT clock_floor FROM fencing.status()');
	cmp_ok($t2, '>', $t1, 'clock stepped back: tokens still increase');
	cmp_ok($t2, '<=', $clock2 + $lead_bound,
		'clock stepped back by less than the tolerance: the token is within the lead bound of the clock');
	is($node->safe_psql('postgres', "SELECT tokens_ahead_of_clock <= $lead_bound FROM fencing.status()"),
		't', 'fencing.status(): tokens are not ahead of the clock by more than the bound');
	unlike(slurp_file($node->logfile, $log_offset), qr/ahead of the clock/,
		'nothing logged about tokens running ahead');

	# Back by 30 s, far more than the tolerance: no stall, a LOG line, and
	# status() shows how far tokens are ahead.
	set_fake_offset($behind_file, '-31.3');
	my $started = time();
	$node->safe_psql('postgres',
		'SELECT fencing.advance_token(reserved_limit) FROM fencing.status()');
	my $t3 = $node->safe_psql('postgres', 'SELECT fencing.next_token()');
	my $took = time() - $started;
	cmp_ok($t3, '>', $t2, 'clock 30 s back: tokens still increase');
	# (a stall would last until the clock is back where it was, 30 s)
	cmp_ok($took, '<', 25, sprintf('clock 30 s back: the reservation did not stall (%.2f s)', $took));
	like(slurp_file($node->logfile, $log_offset),
		qr/LOG:  fence tokens run \d+ ms ahead of the clock/,
		'clock 30 s back: the log says tokens run ahead of the clock');
	# How far ahead, from the server's own numbers: the clock floor now is
	# the floor read after t2 ($clock2) moved back by exactly 30 s and
	# forward by the real time since, which this process bounds from
	# outside ($elapsed).  So whatever the machine's speed,
	#   t2 - clock2 + 30 s - elapsed <= ahead <= latest - clock2 + 30 s
	# (1 ms of slack for the faketime offset's floating point).
	my ($ahead, $latest, $floor, $tolerance) = split /\|/, $node->safe_psql('postgres',
		'SELECT tokens_ahead_of_clock, latest_token, clock_floor, clock_tolerance FROM fencing.status()');
	my $elapsed_ns = int((time() - $clock2_read) * 1e9) + 1;
	is($ahead, $latest - $floor, 'fencing.status(): tokens_ahead_of_clock is latest_token - clock_floor');
	cmp_ok($ahead, '>=', $t2 - $clock2 + 30_000_000_000 - $elapsed_ns - 1_000_000,
		sprintf('fencing.status() shows tokens 30 s ahead of the clock, less the %.2f s since (%d ns, tolerance %s)',
			$elapsed_ns / 1e9, $ahead, $tolerance));
	cmp_ok($ahead, '<=', $latest - $clock2 + 30_000_000_000 + 1_000_000,
		'... and not further than the 30 s step');
}

$_->stop for grep { defined } ($behind_less, $behind_more);
done_testing();
