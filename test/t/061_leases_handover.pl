
# Copyright (c) 2026, the fencing developers
#
# 061_leases_handover.pl -- the instants at which a lease that outlives a
# transaction changes hands, put under the test's control
# (src/locks/leases.c, src/locks/lease_store.c; LL1', LL2', LL2, LL5).
#
# A gate (test/tools/lwlock_gate.c) holds the lease table's LWLock in
# shared mode, so that the sessions that want it exclusively queue up in
# the order the test starts them, each seen waiting in pg_stat_activity,
# and run in that order once the gate opens.
#
# 1. A renewal queued before the lease's expiry, an acquisition of the
#    expired name queued after it: the renewal gets the lock after the
#    expiry, so it raises FN004 (the time is read once the lock is held),
#    and the acquisition takes the name.  Never both.
# 2. The same with use_lease as the renewal: FN004, and the resource fence
#    it raised goes with its transaction.
# 3. A crash just after a lapse: the holder got FN004, then the postmaster
#    is killed (the keeper and the WAL writer stopped before, so that
#    nothing but the FN004's own path writes the lapse down).  After the
#    restart the lease stays ended; a live lease renewed before the crash
#    is still held.
# 4. A crash just after a break: break_lease returned the token, then the
#    postmaster is killed: the lease stays broken.
# 5. A crash just after clear_lock_delays ended a lapsed lease's delay: the
#    delay does not come back.  And a lease taken while the keeper is
#    stopped survives a crash restart: the postmaster copies it.
# 6. A clock that steps back after a lapse was told (with a lock-delay,
#    so that the ended entry stays): the lease stays ended.
# 7. A clock that steps back between an acquisition's look at the table
#    and its entry (the acquisition stopped there by gdb): the look noted
#    the lapse, so a renewal in between is refused; nobody holds the name.

use strict;
use warnings;

use FindBin;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use List::Util qw(min);
use Time::HiRes qw(sleep time);

use lib "$FindBin::RealBin/../perl";
use FencingTest qw(kill9_and_restart lease_keeper_pid lwlock_gate_module
  libfaketime start_with_fake_clock set_fake_offset bg_session bg_send bg_finish
  bg_quit bg_pump_all bg_poll);

my $tmp = PostgreSQL::Test::Utils::tempdir();
my $gate_so = lwlock_gate_module($tmp);

my $node = PostgreSQL::Test::Cluster->new('leases_handover');
$node->init;
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'fencing'\nrestart_after_crash = on\n");
$node->start;

sub sql { return $node->safe_psql('postgres', $_[0]); }

sub setup
{
	sql('CREATE EXTENSION IF NOT EXISTS fencing');
	sql("CREATE OR REPLACE FUNCTION test_lwlock_gate(text, bool, text, float8) RETURNS bool
		 AS '$gate_so', 'test_lwlock_gate' LANGUAGE C STRICT");
}
setup();

sub session { return bg_session($node); }
sub send_sql { return bg_send(@_); }
sub finish { return bg_finish(@_); }
sub quit { return bg_quit(@_); }
sub poll_pumping { return bg_poll($node, $_[0]); }
sub pump_all { return bg_pump_all(); }

# Wait until backend $pid waits for the lease table's LWLock.
sub waits_for_table
{
	my ($pid, $what) = @_;
	ok( poll_pumping(
			"SELECT coalesce(bool_or(wait_event_type = 'LWLock' AND wait_event = 'fencing leases'), false)
			 FROM pg_stat_activity WHERE pid = $pid"),
		"$what waits for the lease table's lock");
	return;
}

# Close the gate: a session holds the table's lock in shared mode until
# open_gate.  Returns the gate's session and file.
my $gates = 0;
sub close_gate
{
	my $file = "$tmp/gate" . ++$gates;
	my $g = session();
	send_sql($g, "SELECT test_lwlock_gate('fencing leases', false, '$file', 120)");
	my $deadline = time() + 60;
	until (-e "$file.held" || time() > $deadline)
	{
		pump_all();
		sleep(0.01);
	}
	ok(-e "$file.held", 'the gate holds the lease table\'s lock');
	return ($g, $file);
}

sub open_gate
{
	my ($g, $file) = @_;
	open(my $fh, '>', $file) or die "could not create $file: $!";
	close($fh);
	my ($out) = finish($g);
	is($out, 't', 'the gate opens');
	quit($g);
	return;
}

# Sleep until the server's clock has passed epoch $at by $margin seconds.
sub sleep_past
{
	my ($at, $margin) = @_;
	my $now = sql('SELECT extract(epoch FROM clock_timestamp())');
	while ($now < $at + $margin)
	{
		pump_all();
		sleep(min(0.05, $at + $margin - $now));
		$now = sql('SELECT extract(epoch FROM clock_timestamp())');
	}
	return;
}

sub expiry_of
{
	my ($name) = @_;
	return sql("SELECT extract(epoch FROM expires_at) FROM fencing.leases WHERE name = '$name'");
}

# --- 1. a renewal queued before the expiry, an acquisition after it -------

my $t1 = sql("SELECT fencing.acquire_lease('race', '2 seconds')");
my $exp1 = expiry_of('race');
my ($gate, $gate_file) = close_gate();
my $renewer = session();
send_sql($renewer, "SELECT fencing.renew_lease('race', $t1)");
waits_for_table($renewer->{pid}, 'race: the renewal, sent before the expiry,');
cmp_ok(sql('SELECT extract(epoch FROM clock_timestamp())'), '<', $exp1,
	'race: the renewal was sent before the lease expired');
sleep_past($exp1, 0.3);
my $acquirer = session();
send_sql($acquirer, "SELECT fencing.acquire_lease('race', '1 minute')");
waits_for_table($acquirer->{pid}, 'race: the acquisition of the expired name');
open_gate($gate, $gate_file);
my ($renewed, $renew_err) = finish($renewer);
my ($taken) = finish($acquirer);
like($renew_err, qr/FN004.*not held with token $t1/s,
	'race: the renewal that got the lock after the expiry raises FN004');
like($renew_err, qr/expired at/, 'race: its detail says the lease expired');
like($taken, qr/^\d+$/, 'race: the acquisition takes the name');
ok(!($renewed =~ /^\d{4}-/ && $taken =~ /^\d+$/),
	'race: never both a renewal and a new holder');
is(sql("SELECT token FROM fencing.leases WHERE name = 'race'"), $taken,
	'race: the table holds the new lease');
sql("SELECT fencing.release_lease('race', $taken)");

# --- 2. use_lease as the renewal -------------------------------------------

my $t2 = sql("SELECT fencing.acquire_lease('race use', '2 seconds')");
my $exp2 = expiry_of('race use');
($gate, $gate_file) = close_gate();
send_sql($renewer, "BEGIN; SELECT fencing.use_lease('race use', $t2); COMMIT;");
waits_for_table($renewer->{pid}, 'race use: use_lease, sent before the expiry,');
sleep_past($exp2, 0.3);
send_sql($acquirer, "SELECT fencing.acquire_lease('race use', '1 minute')");
waits_for_table($acquirer->{pid}, 'race use: the acquisition of the expired name');
open_gate($gate, $gate_file);
($renewed, $renew_err) = finish($renewer);
($taken) = finish($acquirer);
like($renew_err, qr/FN004/, 'race use: use_lease raises FN004');
like($taken, qr/^\d+$/, 'race use: the acquisition takes the name');
is(sql("SELECT count(*) FROM fencing.resource_fences WHERE resource = 'race use'"), 0,
	'race use: the fence use_lease raised went with its transaction');
sql("SELECT fencing.release_lease('race use', $taken)");
quit($renewer);
quit($acquirer);

# --- 3-5. crashes just after a lease was told it ended ----------------------

# The keeper writes the file soon after each change and flushes the
# records: let both happen, so that what follows is the only news.
sub settle
{
	my $lsn = sql('SELECT pg_current_wal_insert_lsn()');
	$node->poll_query_until('postgres', "SELECT pg_current_wal_flush_lsn() >= '$lsn'")
	  or die 'the lease records were not flushed';
	sleep(0.3);
	return;
}

# Stop the keeper and the WAL writer: nothing writes the file or flushes
# WAL in the background any more.  Returns their pids, for the kill.
sub stop_background_writers
{
	my $keeper = lease_keeper_pid($node);
	my $walwriter = sql("SELECT pid FROM pg_stat_activity WHERE backend_type = 'walwriter'");
	ok(defined $keeper && $walwriter =~ /^\d+$/, 'the keeper and the WAL writer run');
	kill('STOP', $keeper, $walwriter);
	return [ $keeper, $walwriter ];
}

sub crash
{
	my ($stopped) = @_;
	kill9_and_restart($node, also_kill => $stopped);
	setup();
	return;
}

# 3. the lapse
my $lapsing = sql("SELECT fencing.acquire_lease('lapsing', '1 second')");
my $live = sql("SELECT fencing.acquire_lease('live', '1 hour')");
my $lapsing_exp = expiry_of('lapsing');
settle();
my $stopped = stop_background_writers();
sleep_past($lapsing_exp, 0.3);
my ($rc, $out, $err) = $node->psql('postgres', "SELECT fencing.renew_lease('lapsing', $lapsing)");
like($err, qr/not held with token $lapsing/, 'lapse: the holder is told that its lease ended');
crash($stopped);
($rc, $out, $err) = $node->psql('postgres', "SELECT fencing.renew_lease('lapsing', $lapsing)");
like($err, qr/not held with token $lapsing/,
	'lapse: after the crash its renewal still raises FN004');
($rc, $out, $err) = $node->psql('postgres',
	"BEGIN; SELECT fencing.use_lease('lapsing', $lapsing); COMMIT");
like($err, qr/not held with token $lapsing/, 'lapse: and so does its use_lease');
like(sql("SELECT fencing.renew_lease('live', $live)"), qr/^\d{4}-/,
	'lapse: a live lease is still held after the crash (LL5)');

# 4. the break
my $breaking = sql("SELECT fencing.acquire_lease('breaking', '1 hour')");
settle();
$stopped = stop_background_writers();
is(sql("SELECT fencing.break_lease('breaking')"), $breaking,
	'break: break_lease returns the token it ended');
crash($stopped);
($rc, $out, $err) = $node->psql('postgres', "SELECT fencing.renew_lease('breaking', $breaking)");
like($err, qr/not held with token $breaking/, 'break: after the crash the lease stays broken');
like(sql("SELECT fencing.acquire_lease('breaking', '1 minute')"), qr/^\d+$/,
	'break: and the name can be taken');

# 5. a lock-delay cleared
sql("ALTER SYSTEM SET fencing.lock_delay = '1h'");
sql('SELECT pg_reload_conf()');
my $delayed = sql("SELECT fencing.acquire_lease('delayed', '1 second')");
sleep_past(expiry_of('delayed'), 0.3);
ok( $node->poll_query_until(
		'postgres',
		"SELECT count(*) = 1 FROM fencing.locks WHERE name = 'delayed' AND NOT granted"),
	'clear: the lapsed lease keeps its name under the lock-delay');
is(sql("SELECT fencing.acquire_lease('delayed', '1 minute') IS NULL"), 't',
	'clear: nobody gets the name during the delay');
settle();
$stopped = stop_background_writers();
is(sql("SELECT fencing.clear_lock_delays('delayed')"), 1,
	'clear: clear_lock_delays ends the delay');
crash($stopped);
like(sql("SELECT fencing.acquire_lease('delayed', '1 minute')"), qr/^\d+$/,
	'clear: after the crash the cleared delay does not come back');
sql('ALTER SYSTEM RESET fencing.lock_delay');
sql('SELECT pg_reload_conf()');
sql('SELECT fencing.release_lease(name, token) FROM fencing.leases');

# 5b. A lease taken while the keeper is stopped, then a crash restart (the
# keeper killed): only the postmaster's copy of the table, as it lets go
# of shared memory, writes it down; its WAL record was never flushed.
settle();
my $keeper = lease_keeper_pid($node);
kill('STOP', $keeper);
my $late = sql("SELECT fencing.acquire_lease('late', '1 hour')");
kill('KILL', $keeper);
my $deadline = time() + 60;
sleep(0.2) until (lease_keeper_pid($node) // $keeper) != $keeper || time() > $deadline;
ok($node->poll_query_until('postgres', 'SELECT true'), 'copy: the server restarts after its keeper was killed');
setup();
like(sql("SELECT fencing.renew_lease('late', $late)"), qr/^\d{4}-/,
	'copy: the lease taken while the keeper was stopped survives the crash restart');
sql('SELECT fencing.release_lease(name, token) FROM fencing.leases');

$node->stop;

# --- 6. the clock steps back after a lapse was told --------------------------

SKIP:
{
	skip 'libfaketime is not installed', 6 unless libfaketime();
	my $offset_file = "$tmp/clock_offset";
	set_fake_offset($offset_file, '+0');
	my $faked = PostgreSQL::Test::Cluster->new('leases_clock_back');
	$faked->init;
	# a lock-delay keeps the ended entry in the table while the clock is back
	$faked->append_conf('postgresql.conf',
		"shared_preload_libraries = 'fencing'\nfencing.lock_delay = '1h'\n");
	start_with_fake_clock($faked, file => $offset_file);
	$faked->safe_psql('postgres', 'CREATE EXTENSION fencing');
	my $back = $faked->safe_psql('postgres', "SELECT fencing.acquire_lease('clock', '2 seconds')");
	sleep(2.5);
	($rc, $out, $err) = $faked->psql('postgres', "SELECT fencing.renew_lease('clock', $back)");
	like($err, qr/not held with token $back/, 'clock: the holder is told that its lease expired');
	set_fake_offset($offset_file, '-60');
	($rc, $out, $err) = $faked->psql('postgres', "SELECT fencing.renew_lease('clock', $back)");
	like($err, qr/not held with token $back/,
		'clock: a minute back, the ended lease is still not renewable');
	set_fake_offset($offset_file, '+0');

	# 7. The clock steps back between an acquisition's look at the table
	# and its entry: a backend stopped by gdb at that instant (at its
	# fencing_issue_token call, between the two), the keeper stopped so
	# that only the look can note the lapse.  The look noted the lease's
	# end before it let the acquisition go on: a renewal in between, on
	# the clock as it now reads, raises FN004; the acquisition, which
	# looks again under the lock that writes, finds the clock before the
	# end and takes nothing (the name is free once the clock has passed
	# it again).
	$faked->safe_psql('postgres', "ALTER SYSTEM SET fencing.lock_delay = 0");
	$faked->reload;
	$faked->poll_query_until('postgres', "SELECT current_setting('fencing.lock_delay') = '0'");
	my $stepped = $faked->safe_psql('postgres', "SELECT fencing.acquire_lease('stepped', '2 seconds')");
	my $keeper = lease_keeper_pid($faked);
	kill('STOP', $keeper);
	sleep(2.5);
	my $acquirer = bg_session($faked);
	my ($gdb_in, $gdb_out) = ('', '');
	my $gdb = IPC::Run::start(
		[ 'gdb', '-q', '-nx', '-p', $acquirer->{pid} ],
		'<', \$gdb_in, '>&', \$gdb_out,
		IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default));
	$gdb_in .= "set pagination off\nset confirm off\nset breakpoint pending on\n"
	  . "break fencing_issue_token\ncontinue\n";
	$gdb->pump until $gdb_out =~ /Continuing\./;
	bg_send($acquirer, "SELECT coalesce(fencing.acquire_lease('stepped', '1 minute')::text, 'busy')");
	$gdb->pump until $gdb_out =~ /Breakpoint 1, .*fencing_issue_token/;
	pass('step: the acquisition is stopped after its look at the table');
	set_fake_offset($offset_file, '-30');
	($rc, $out, $err) = $faked->psql('postgres', "SELECT fencing.renew_lease('stepped', $stepped)");
	like($err, qr/not held with token $stepped/,
		'step: on the clock stepped back, the renewal is refused: the look noted the end');
	$gdb_in .= "detach\nquit\n";
	$gdb->finish;
	my ($taken) = bg_finish($acquirer);
	is($taken, 'busy',
		'step: the acquisition, on the clock stepped back to before the end, waits for it');
	is($faked->safe_psql('postgres', "SELECT count(*) FROM fencing.leases WHERE name = 'stepped'"), 0,
		'step: nobody holds the name');
	bg_quit($acquirer);
	kill('CONT', $keeper);
	$faked->stop;
}

done_testing();
