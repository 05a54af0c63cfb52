
# Copyright (c) 2026, the fencing developers
#
# 038_lock_delay.pl -- fencing.lock_delay (src/locks/delay.c).
#
# A holder whose session ends abnormally while it holds a fencing name
# leaves the name ungrantable until fencing.lock_delay has passed: one
# terminated with pg_terminate_backend, one whose lease expired, one whose
# backend crashed (SIGKILL: the postmaster reinitialises shared memory).
# In that window try_lock returns NULL, fencing.locks shows the name and
# until when, lock() with a shorter timeout returns NULL and one with a
# longer timeout waits and is granted after the delay; then the name is
# grantable.  COMMIT, ROLLBACK, ROLLBACK after an error and ROLLBACK TO
# SAVEPOINT free the name at once.  A shared holder or a semaphore's other
# permit holders that are still alive keep what they hold; a semaphore
# delays only the permit of the lost holder.  try_lock_all and lock_all
# honour a delay on any of their names, all or nothing.  Delays survive a
# restart of the server (fast or immediate) through a file the postmaster
# writes; a damaged file is a WARNING and its delays are dropped.
#
# Durations are asserted only as "not before delayed_until" and "within
# delayed_until plus a generous slack".  The delays overlap instead of
# adding up: each lost holder's window is checked right after the loss, and
# the lock() that must wait for its end runs in a session of its own while
# the next cases run (the crash first: a crash restart takes a while).
# Every delay lasts the setting in force (15 s here), counted from the
# loss; 038_lock_delay_setting.pl changes the setting under running delays.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

# Slack for "soon after the delay ends", for slow and sanitized builds.
my $slack = 30;

my $node = PostgreSQL::Test::Cluster->new('lock_delay');
$node->init;
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'fencing'\n"
	  . "fencing.lock_delay = '15s'\n"
	  . "restart_after_crash = on\n");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION fencing');

sub set_lock_delay
{
	my ($value) = @_;
	$node->safe_psql('postgres', "ALTER SYSTEM SET fencing.lock_delay = '$value'");
	$node->reload;
	$node->poll_query_until('postgres',
		"SELECT current_setting('fencing.lock_delay') = '$value'")
	  or die "fencing.lock_delay did not become $value";
}

# A session that takes a lock with $call in an open transaction.
sub holder
{
	my ($call) = @_;
	my $h = $node->background_psql('postgres', on_error_stop => 0);
	my $pid = $h->query_safe('SELECT pg_backend_pid()');
	$h->query_safe('BEGIN');
	my $token = $h->query_safe("SELECT $call");
	like($token, qr/^\d+$/, "holder $pid: $call granted");
	return ($h, $pid);
}

sub wait_gone
{
	my ($pid) = @_;
	$node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $pid")
	  or die "backend $pid did not exit";
}

sub sql { return $node->safe_psql('postgres', $_[0]); }

# The delay of a name as the view shows it: mode, pid and the end as epoch
# seconds and as text; dies if there is none.
sub delayed_row
{
	my ($name, $where) = @_;
	$where //= 'true';
	my $row = sql(
		"SELECT mode, granted, pid, extract(epoch FROM delayed_until),
				delayed_until
		 FROM fencing.locks
		 WHERE name = '$name' AND delayed_until IS NOT NULL AND $where");
	return split /\|/, $row;
}

# The checks every lost holder must pass, in two halves, so that the waits
# of several lost holders overlap instead of adding up.  check_in_window()
# runs in the window: the view, a refused try_lock, a lock() that times out;
# it then starts, in a session of its own, a lock() with a longer timeout,
# which must wait for the delay to end; check_after() collects its answer
# and checks the name is free.  $lost_at is a moment (epoch) before the
# holder was lost; $delay the setting in seconds.
sub check_in_window
{
	my ($label, $name, $lost_at, $delay, $mode) = @_;
	$mode //= 'exclusive';

	my ($vmode, $granted, $pid, $until_epoch, $until) = delayed_row($name);
	ok(defined $until, "$label: fencing.locks shows the delayed name")
	  or return { label => $label, name => $name };
	is($vmode,   $mode, "$label: with the mode it was held in");
	is($granted, 'f',   "$label: not granted");
	cmp_ok($until_epoch, '>=', $lost_at + $delay - 1,
		"$label: delayed_until is at least fencing.lock_delay after the loss");
	cmp_ok($until_epoch, '<=', time() + $delay + 1,
		"$label: and no later than fencing.lock_delay from now");

	is( sql("SELECT fencing.try_lock('$name') IS NULL,
				clock_timestamp() < '$until'::timestamptz"),
		"t|t", "$label: try_lock in the window returns NULL");
	is( sql("SELECT fencing.lock('$name', '200ms') IS NULL,
				clock_timestamp() < '$until'::timestamptz"),
		"t|t", "$label: lock() with a timeout shorter than the window returns NULL");
	return {
		label => $label,
		name  => $name,
		until => $until,
		waiter => start_waiter("BEGIN;
			 SELECT fencing.lock('$name', '${slack}s') IS NOT NULL,
				clock_timestamp() >= '$until'::timestamptz,
				clock_timestamp() < '$until'::timestamptz + interval '$slack s';
			 COMMIT;")
	};
}

sub check_after
{
	my ($w) = @_;
	my ($label, $name) = @$w{qw(label name)};

	is(defined $w->{waiter} ? finish_waiter($w->{waiter}) : undef,
		"t|t|t",
		"$label: lock() with a longer timeout waits and is granted after delayed_until");
	is(sql("SELECT count(*) FROM fencing.locks WHERE name = '$name'"),
		0, "$label: the delay left the view");
	is( sql("BEGIN; SELECT fencing.try_lock('$name') IS NOT NULL; COMMIT"),
		't', "$label: then the name is grantable");
}

# Start $sql in a session of its own and return without waiting for its
# answer (the statement is sent when this returns); finish_waiter() returns
# the answer.
sub start_waiter
{
	my ($query) = @_;
	my $s = $node->background_psql('postgres', on_error_stop => 0);
	$s->query_until(qr/sending\n/, "\\echo sending\n$query\n");
	return $s;
}

sub finish_waiter
{
	my ($s) = @_;
	my $out = $s->query('SELECT 1');
	$s->quit;
	$out =~ s/\n?1$//;
	return $out;
}

my ($h, $pid, $t0);
# Lost holders whose waiting lock() is still to be collected (check_after).
my @waiting;

# --- a backend crash ------------------------------------------------------
# A crash restart takes a while: 15 s keeps the window open.  First, so
# that the cases after it run while its delay runs out.
my ($crash, $crash_holder, $crash_bystander);
{
	($h, $pid) = holder("fencing.try_lock('job crash')");
	my $other = $node->background_psql('postgres', on_error_stop => 0);
	$other->query_safe('BEGIN');
	$other->query_safe("SELECT fencing.try_lock('job crash bystander')");
	my $log_offset = -s $node->logfile;
	$t0 = time();
	kill('KILL', $pid) or die "could not kill backend $pid: $!";
	$node->wait_for_log(qr/all server processes terminated; reinitializing/,
		$log_offset);
	$node->wait_for_log(qr/database system is ready to accept connections/,
		$log_offset);
	$node->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
	  or die 'the server did not come back after the crash';
	ok($node->log_contains(qr/fencing: 2 lock delays carried over the restart/,
			$log_offset),
		'crash: the postmaster carried the held locks into delays');
	my (undef, undef, undef, undef, $bystander_until) =
	  delayed_row('job crash bystander');
	ok(defined $bystander_until,
		'crash: a holder that died with the crash (SIGQUIT) is delayed too');
	$crash = check_in_window('crash', 'job crash', $t0, 15);
	# Once its lock() sleeps until the delay ends it has counted its one
	# refusal, and counts none while the cases below count theirs.
	$node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM pg_stat_activity
		 WHERE wait_event_type = 'Extension'
		   AND query LIKE '%fencing.lock(''job crash''%'")
	  or die 'the lock() waiting for the crash delay does not sleep';
	($crash_holder, $crash_bystander) = ($h, $other);
}
# --- a holder terminated with pg_terminate_backend -----------------------
($h, $pid) = holder("fencing.try_lock('job terminated')");
is(sql("SELECT fencing.try_lock('job terminated') IS NULL"),
	't', 'terminated: busy while the holder lives');
$t0 = time();
sql("SELECT pg_terminate_backend($pid)");
wait_gone($pid);
{
	my (undef, undef, $vpid) = delayed_row('job terminated');
	is($vpid, $pid, 'terminated: the view names the lost holder');
}
{
	my $before = sql('SELECT delayed_refusals FROM fencing.stats');
	is(sql("SELECT fencing.try_lock('job terminated') IS NULL"),
		't', 'terminated: refused once more');
	is(sql('SELECT delayed_refusals FROM fencing.stats') - $before,
		1, 'fencing.stats counts that refused grant once');
}
push @waiting, check_in_window('terminated', 'job terminated', $t0, 15);
eval { $h->quit };
is(sql('SELECT delays_started >= 1, delayed_refusals >= 2 FROM fencing.stats'),
	't|t', 'fencing.stats counts the delay and the refused grants');

# --- a holder whose lease expired ---------------------------------------
($h, $pid) = holder("fencing.lease('job lease', '500ms')");
$t0 = time();
wait_gone($pid);
push @waiting, check_in_window('lease expired', 'job lease', $t0, 15);
eval { $h->quit };

# --- shared holders: the one still alive keeps its lock -----------------
{
	my ($a, $a_pid) = holder("fencing.try_lock_shared('job shared')");
	my $b = $node->background_psql('postgres', on_error_stop => 0);
	$b->query_safe('BEGIN');
	my $b_token = $b->query_safe("SELECT fencing.try_lock_shared('job shared')");
	$t0 = time();
	sql("SELECT pg_terminate_backend($a_pid)");
	wait_gone($a_pid);
	is($b->query_safe("SELECT fencing.held_token('job shared')"),
		$b_token, 'shared: the holder still alive keeps its lock');
	is($b->query_safe("SELECT fencing.try_lock_shared('job shared')"),
		$b_token, 'shared: and takes it again with the same token');
	is(sql("SELECT fencing.try_lock_shared('job shared') IS NULL"),
		't', 'shared: a new shared holder is refused in the window');
	my ($mode) = delayed_row('job shared');
	is($mode, 'shared', 'shared: the view shows the delay of the shared lock');
	$b->query_safe('COMMIT');
	$b->quit;
	push @waiting, check_in_window('shared', 'job shared', $t0, 15, 'shared');
	eval { $a->quit };
}

# --- a semaphore delays the lost holder's permit only -------------------
{
	my ($a, $a_pid) = holder("fencing.try_acquire('job pool', 2)");
	my $b = $node->background_psql('postgres', on_error_stop => 0);
	$b->query_safe('BEGIN');
	like($b->query_safe("SELECT fencing.try_acquire('job pool', 2)"),
		qr/^\d+$/, 'permits: a second holder takes the other permit');
	$t0 = time();
	sql("SELECT pg_terminate_backend($a_pid)");
	wait_gone($a_pid);
	my ($mode, undef, undef, $until_epoch, $until) = delayed_row('job pool');
	is($mode, 'permit 1 of 2', "permits: the lost holder's permit is delayed");
	is( sql("SELECT fencing.try_acquire('job pool', 2) IS NULL,
				clock_timestamp() < '$until'::timestamptz"),
		't|t', 'permits: with the other permit held, none is free in the window');
	$b->query_safe('COMMIT');
	$b->quit;
	my $c = $node->background_psql('postgres', on_error_stop => 0);
	$c->query_safe('BEGIN');
	like($c->query_safe("SELECT fencing.try_acquire('job pool', 2)"),
		qr/^\d+$/, 'permits: the permit freed cleanly is free at once');
	is( sql("SELECT fencing.try_acquire('job pool', 2) IS NULL,
				clock_timestamp() < '$until'::timestamptz"),
		't|t', 'permits: the delayed one is still refused');
	my $acquire = start_waiter("BEGIN;
			 SELECT fencing.acquire('job pool', 2, '${slack}s') IS NOT NULL,
				clock_timestamp() >= '$until'::timestamptz;
			 COMMIT;");
	push @waiting, {
		finish => sub {
			is(finish_waiter($acquire), 't|t',
				'permits: acquire() waits for the delay and then gets the permit');
			$c->query_safe('COMMIT');
			$c->quit;
			eval { $a->quit };
		}
	};
}

# --- groups: all or nothing ---------------------------------------------
{
	($h, $pid) = holder("fencing.try_lock('job group b')");
	$t0 = time();
	sql("SELECT pg_terminate_backend($pid)");
	wait_gone($pid);
	my (undef, undef, undef, undef, $until) = delayed_row('job group b');
	is( sql("BEGIN;
			 SELECT fencing.try_lock_all(ARRAY['job group a', 'job group b', 'job group c']) IS NULL,
				clock_timestamp() < '$until'::timestamptz;
			 SELECT count(*) FROM fencing.locks WHERE pid = pg_backend_pid();
			 COMMIT"),
		"t|t\n0", 'groups: try_lock_all with a delayed name gets NULL and holds nothing');
	my $lock_all = start_waiter("BEGIN;
			 SELECT fencing.lock_all(ARRAY['job group a', 'job group b', 'job group c'], '${slack}s') IS NOT NULL,
				clock_timestamp() >= '$until'::timestamptz;
			 COMMIT;");
	my $group_holder = $h;
	push @waiting, {
		finish => sub {
			is(finish_waiter($lock_all), 't|t',
				'groups: lock_all waits for the delay, then takes all');
			eval { $group_holder->quit };
		}
	};
}

# --- clean endings free the name at once --------------------------------
# (they need no delay of their own: they run while the delays above run
# out)
foreach my $ending (
	[ 'COMMIT',                   ['COMMIT'] ],
	[ 'ROLLBACK',                 ['ROLLBACK'] ],
	[ 'ROLLBACK after an error',  [ 'SELECT 1/0', 'ROLLBACK' ] ],
	[ 'ROLLBACK TO SAVEPOINT',    [] ])
{
	my ($label, $steps) = @$ending;
	my $name = "job clean $label";
	my $c = $node->background_psql('postgres', on_error_stop => 0);
	my $cpid = $c->query_safe('SELECT pg_backend_pid()');
	$c->query_safe('BEGIN');
	$c->query_safe('SAVEPOINT s') if $label eq 'ROLLBACK TO SAVEPOINT';
	$c->query_safe("SELECT fencing.try_lock('$name')");
	if ($label eq 'ROLLBACK TO SAVEPOINT')
	{
		$c->query_safe('ROLLBACK TO SAVEPOINT s');
	}
	else
	{
		$c->query($_) foreach @$steps;
	}
	is(sql("BEGIN; SELECT fencing.try_lock('$name') IS NOT NULL; COMMIT"),
		't', "$label: the name is free at once");
	# the session then ends (its transaction still open after the savepoint)
	sql("SELECT pg_terminate_backend($cpid)");
	wait_gone($cpid);
	eval { $c->quit };
	is( sql("SELECT count(*) FROM fencing.locks WHERE name = '$name'"),
		0, "$label: no delay when the session ends after it");
	is(sql("BEGIN; SELECT fencing.try_lock('$name') IS NOT NULL; COMMIT"),
		't', "$label: and the name stays free");
}

# --- the waits started above end --------------------------------------------
$_->{finish} ? $_->{finish}->() : check_after($_) for @waiting;
check_after($crash);
eval { $crash_holder->quit };
eval { $crash_bystander->quit };

# --- a server restart -----------------------------------------------------
{
	# fast shutdown: the holder's backend is terminated and records its delay
	($h, $pid) = holder("fencing.try_lock('job restart')");
	$t0 = time();
	$node->restart;
	eval { $h->quit };
	my ($mode, undef, $vpid, $until_epoch, $until) = delayed_row('job restart');
	ok(defined $until, 'fast restart: the delay survived the restart');
	cmp_ok($until_epoch, '>=', $t0 + 15 - 1,
		'fast restart: with the end it had');
	is( sql("SELECT fencing.try_lock('job restart') IS NULL,
				clock_timestamp() < '$until'::timestamptz"),
		't|t', 'fast restart: try_lock in the window returns NULL');
	ok(!-e $node->data_dir . '/fencing.lock_delays',
		'fast restart: the file is removed once read');

	# immediate shutdown: the backend dies without a word; the postmaster
	# finds its lock in the registry
	($h, $pid) = holder("fencing.try_lock('job immediate')");
	$t0 = time();
	$node->stop('immediate');
	eval { $h->quit };
	ok(-e $node->data_dir . '/fencing.lock_delays',
		'immediate stop: the postmaster wrote the delays down');
	$node->start;
	(undef, undef, undef, $until_epoch, $until) = delayed_row('job immediate');
	ok(defined $until, 'immediate stop: the held lock is delayed after the start');
	is( sql("SELECT fencing.try_lock('job immediate') IS NULL,
				clock_timestamp() < '$until'::timestamptz"),
		't|t', 'immediate stop: try_lock in the window returns NULL');

	# a damaged file: a WARNING, the server starts, the delays are dropped
	($h, $pid) = holder("fencing.try_lock('job damaged')");
	$node->stop('immediate');
	eval { $h->quit };
	my $file = $node->data_dir . '/fencing.lock_delays';
	open(my $fh, '+<', $file) or die "could not open $file: $!";
	binmode $fh;
	seek($fh, 40, 0);
	print $fh 'garbage';
	close $fh;
	my $log_offset = -s $node->logfile;
	$node->start;
	ok( $node->log_contains(
			qr/WARNING:  fencing lock delay file "fencing.lock_delays" is damaged; its delays are ignored/,
			$log_offset),
		'damaged file: a WARNING');
	is(sql("SELECT count(*) FROM fencing.locks WHERE delayed_until IS NOT NULL"),
		0, 'damaged file: no delays');
	is(sql("BEGIN; SELECT fencing.try_lock('job damaged') IS NOT NULL; COMMIT"),
		't', 'damaged file: the name is grantable');
}

# --- off: no delay --------------------------------------------------------
set_lock_delay('0');
($h, $pid) = holder("fencing.try_lock('job off')");
sql("SELECT pg_terminate_backend($pid)");
wait_gone($pid);
eval { $h->quit };
is(sql("BEGIN; SELECT fencing.try_lock('job off') IS NOT NULL; COMMIT"),
	't', 'with fencing.lock_delay = 0 a lost holder leaves the name free');

$node->stop;
done_testing();
