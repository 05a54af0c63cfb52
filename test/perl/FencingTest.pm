# FencingTest.pm -- helpers shared by the TAP tests under test/t.
#
# Copyright (c) 2026, the fencing developers

package FencingTest;

use strict;
use warnings;

use Encode qw(encode_utf8);
use Exporter 'import';
use File::Basename ();
use File::Temp qw(tempdir);
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Time::HiRes ();

our @EXPORT_OK = qw(state_file_limit state_file_timeline write_state_file libfaketime
  start_with_fake_clock start_behind_token set_fake_offset clock_offset archive_current_wal
  sql_text start_pgbouncer stop_pgbouncer run_gated_clients take_lease session_gone
  holding_session terminate_session kill9_and_restart lease_keeper_pid pipeline_stall_client
  lwlock_gate_module bg_session bg_send bg_finish bg_quit bg_pump_all bg_poll
  @WHITE_SPACE @IGNORABLE);

# The holder $h (a hash whose "session" is a background_psql in an open
# transaction) takes a lease on $name with a ttl of an hour, so that its
# idle limit never ends it, and a max_hold.  The server's clock just before
# the call becomes $h->{t0}, unless an earlier lease set it.  Returns the
# token.
sub take_lease
{
	my ($h, $name, $max_hold) = @_;
	my ($t0, $token) = split /\|/,
	  $h->{session}->query_safe(
		"SELECT clock_timestamp(), fencing.lease('$name', '1 hour', '$max_hold')");
	$h->{t0} //= $t0;
	return $token;
}

# Pids of the children of process $ppid (from /proc).
sub children_of
{
	my ($ppid) = @_;
	my @pids;
	opendir(my $dh, '/proc') or die "no /proc: $!";
	for my $pid (grep { /^\d+$/ } readdir($dh))
	{
		open(my $fh, '<', "/proc/$pid/stat") or next;
		my $stat = <$fh>;
		close($fh);
		next unless defined $stat && $stat =~ /\)\s+\S+\s+(\d+)/;
		push @pids, $pid if $1 == $ppid;
	}
	closedir($dh);
	return @pids;
}

# SIGKILL the postmaster of $node (and the pids of $opts{also_kill}, for
# example a child stopped with SIGSTOP, which would never notice), let its
# backends notice and die, run $opts{before_start} if given, then start the
# node again.
sub kill9_and_restart
{
	my ($node, %opts) = @_;
	my @children = children_of($node->{_pid});

	$node->kill9;
	kill('KILL', @{ $opts{also_kill} }) if $opts{also_kill};
	my $deadline = time() + 120;
	while (grep { kill(0, $_) } @children)
	{
		die "children of the killed postmaster did not exit"
		  if time() > $deadline;
		Time::HiRes::usleep(100_000);
	}
	$opts{before_start}->() if $opts{before_start};
	$node->start;
	return;
}

# test/tools/pipeline_stall.c built against the libpq under test, in a
# directory of its own; returns the program's path.
sub pipeline_stall_client
{
	my $client = PostgreSQL::Test::Utils::tempdir() . '/pipeline_stall';
	my $includedir = `pg_config --includedir`;
	my $libdir = `pg_config --libdir`;
	chomp($includedir, $libdir);
	system('gcc', '-Wall', '-Werror', "-I$includedir",
		File::Basename::dirname(__FILE__) . "/../tools/pipeline_stall.c",
		"-L$libdir", '-lpq', '-o', $client) == 0
	  or BAIL_OUT('could not compile test/tools/pipeline_stall.c');
	return $client;
}

# test/tools/lwlock_gate.c built into the directory $dir as a loadable
# module; returns its path.
sub lwlock_gate_module
{
	my ($dir) = @_;
	my $includedir = `pg_config --includedir-server`;
	chomp($includedir);
	system('gcc', '-shared', '-fPIC', '-Wall', '-Werror', "-I$includedir",
		File::Basename::dirname(__FILE__) . "/../tools/lwlock_gate.c",
		'-o', "$dir/lwlock_gate.so") == 0
	  or BAIL_OUT('could not compile test/tools/lwlock_gate.c');
	return "$dir/lwlock_gate.so";
}

# Sessions whose statements run in the background, so that a test can
# line several up: bg_session($node) starts psql (errors do not stop it,
# and they come with their SQLSTATE), bg_send() returns as soon as psql
# has the statements, bg_finish() waits for their end and returns what
# they printed and what they raised.  IPC::Run writes a session's input
# only while it is pumped: a test that waits for something else calls
# bg_pump_all() or bg_poll(), which pump every session.
my @bg_sessions;

sub bg_pump_all
{
	$_->{run}->pump_nb for @bg_sessions;
	return;
}

sub bg_session
{
	my ($node, $db) = @_;
	my %s = (in => '', out => '', err => '', n => 0, node => $node);
	$s{run} = IPC::Run::start(
		[ 'psql', '-X', '-At', '-v', 'ON_ERROR_STOP=0', '-d', $node->connstr($db // 'postgres') ],
		'<', \$s{in}, '>', \$s{out}, '2>', \$s{err},
		IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default));
	$s{in} .= "\\set VERBOSITY verbose\nSELECT 'pid ' || pg_backend_pid();\n";
	$s{run}->pump until $s{out} =~ /^pid (\d+)$/m;
	$s{pid} = $1;
	$s{out} = '';
	push @bg_sessions, \%s;
	return \%s;
}

sub bg_send
{
	my ($s, $sql) = @_;
	$s->{n}++;
	$s->{out} = '';
	$s->{err} = '';
	$sql .= ';' unless $sql =~ /;\s*$/;
	$s->{in} .= "$sql\n\\echo done $s->{n}\n";
	bg_pump_all();
	return;
}

sub bg_finish
{
	my ($s) = @_;
	$s->{run}->pump until $s->{out} =~ /^done $s->{n}$/m;
	my $out = $s->{out};
	$out =~ s/^done $s->{n}\n//m;
	chomp($out);
	return ($out, $s->{err});
}

sub bg_quit
{
	my ($s) = @_;
	$s->{in} .= "\\q\n";
	eval { $s->{run}->finish; };
	@bg_sessions = grep { $_ != $s } @bg_sessions;
	return;
}

# Poll $query on $node until it returns 't' (true when it did), pumping
# the background sessions meanwhile.
sub bg_poll
{
	my ($node, $query) = @_;
	my $deadline = Time::HiRes::time() + $PostgreSQL::Test::Utils::timeout_default;
	while (Time::HiRes::time() < $deadline)
	{
		bg_pump_all();
		return 1 if $node->safe_psql('postgres', $query) eq 't';
		Time::HiRes::sleep(0.05);
	}
	return 0;
}

# The pid of $node's lease keeper (a child of its postmaster whose title
# names it), or undef while it is not running.
sub lease_keeper_pid
{
	my ($node) = @_;
	for my $pid (children_of($node->{_pid}))
	{
		open(my $fh, '<', "/proc/$pid/cmdline") or next;
		my $cmdline = <$fh>;
		close($fh);
		return $pid if defined $cmdline && $cmdline =~ /fencing lease keeper/;
	}
	return undef;
}

# Whether the backend $pid of $node has gone (polls for a while).
sub session_gone
{
	my ($node, $pid) = @_;
	return $node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $pid");
}

# A session of $node that holds the fencing lock $name in an open
# transaction and sits idle; returns the session (a background_psql) and
# its backend's pid.
sub holding_session
{
	my ($node, $name) = @_;
	my $h = $node->background_psql('postgres', on_error_stop => 0);
	my $pid = $h->query_safe('SELECT pg_backend_pid()');
	$h->query_safe("BEGIN; SELECT fencing.try_lock('$name')");
	return ($h, $pid);
}

# Terminate the backend $pid of $node, whose client is the session $h, and
# wait until it has gone (a lost holder: its locks' delays have started).
sub terminate_session
{
	my ($node, $h, $pid) = @_;
	$node->safe_psql('postgres', "SELECT pg_terminate_backend($pid)");
	session_gone($node, $pid) or die "backend $pid did not exit";
	eval { $h->quit };
	return;
}

# Run one psql process (ON_ERROR_STOP) per SQL script text against the
# database "postgres" of $node, all starting at the same moment: each script
# first waits at a gate, the advisory lock $gate_key that a session of ours
# holds until every client waits for it.  Waits for all to end; returns the
# number of clients that failed and their standard error, concatenated.
sub run_gated_clients
{
	my ($node, $gate_key, @scripts) = @_;
	my $dir = tempdir(CLEANUP => 1);
	my (@clients, $failed, $stderr);

	my $gate = $node->background_psql('postgres');
	$gate->query_safe("SELECT pg_advisory_lock($gate_key)");
	for my $i (0 .. $#scripts)
	{
		my $script = "$dir/client$i.sql";
		open(my $fh, '>', $script) or die "could not write $script: $!";
		print $fh "SELECT pg_advisory_lock_shared($gate_key) \\g /dev/null\n";
		print $fh "SELECT pg_advisory_unlock_shared($gate_key) \\g /dev/null\n";
		print $fh $scripts[$i];
		close($fh);
		push @clients, { err => "$dir/client$i.err" };
		$clients[-1]{handle} = IPC::Run::start(
			[
				'psql', '-X', '-A', '-t', '-q', '-v', 'ON_ERROR_STOP=1',
				'-d', $node->connstr('postgres'), '-f', $script
			],
			'<', \undef, '>', '/dev/null', '2>', $clients[-1]{err});
	}
	$node->poll_query_until('postgres',
		"SELECT count(*) = " . scalar(@scripts) . " FROM pg_locks
		 WHERE locktype = 'advisory' AND objid = $gate_key AND NOT granted")
	  or die "the clients did not reach the start gate";
	$gate->query_safe("SELECT pg_advisory_unlock($gate_key)");
	$gate->quit;

	$failed = 0;
	$stderr = '';
	for my $c (@clients)
	{
		$failed++ unless $c->{handle}->finish;
		$stderr .= slurp_file($c->{err});
	}
	return ($failed, $stderr);
}

# The fields of a node's fencing.state file (see src/tokens/state_file.c: magic,
# version, limit, and in version 2 the timeline), or an empty list when
# there is no file with the right magic number.
sub state_file_fields
{
	my ($node) = @_;
	my $path = $node->data_dir . '/fencing.state';
	return () unless -f $path;
	open(my $fh, '<:raw', $path) or die "could not open $path: $!";
	local $/;
	my $data = <$fh>;
	close($fh);
	my ($magic, $version, $limit, $timeline) = unpack('L L Q L', $data);
	return () unless defined $magic && $magic == 0x464E4331;
	return ($version, $limit, $timeline);
}

# The limit stored in a node's fencing.state file, or undef when there is
# no valid file.
sub state_file_limit
{
	my ($version, $limit) = state_file_fields(@_);
	return $limit;
}

# Debian's pgbouncer, where the tests expect it.
our $PGBOUNCER = '/usr/sbin/pgbouncer';

# Start pgbouncer in transaction pooling mode (or $mode: "statement") in
# front of $node, with $pool_size server connections for the database
# "postgres"; $aliases, a hash of alias => pool size, adds further names for
# the same database with pools of their own.  It listens on a Unix socket of its own
# port in the node's socket directory, so the returned Cluster object
# ({pool}) connects through it with psql and background_psql.  {up} says
# whether it accepted a connection within ten seconds; {diag} returns its
# output and log for a failure message.
sub start_pgbouncer
{
	my ($node, $pool_size, $aliases, $mode) = @_;
	my $user = $node->safe_psql('postgres', 'SELECT current_user');
	my $dir = tempdir(CLEANUP => 1);
	my $port = PostgreSQL::Test::Cluster::get_free_port();
	my ($host, $node_port) = ($node->host, $node->port);
	my $ini = "$dir/pgbouncer.ini";
	my $alias_lines = join('',
		map { "$_ = host=$host port=$node_port dbname=postgres user=$user pool_size=$aliases->{$_}\n" }
		  sort keys %{ $aliases // {} });

	open(my $fh, '>', $ini) or die "could not write $ini: $!";
	print $fh <<"EOS";
[databases]
postgres = host=$host port=$node_port dbname=postgres user=$user
$alias_lines
[pgbouncer]
listen_addr =
listen_port = $port
unix_socket_dir = $host
auth_type = any
pool_mode = @{[ $mode // 'transaction' ]}
default_pool_size = $pool_size
min_pool_size = 0
max_client_conn = 20
server_lifetime = 3600
server_idle_timeout = 3600
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
ignore_startup_parameters = extra_float_digits
EOS
	close($fh);

	my %bouncer = (out => '', err => '');
	$bouncer{run} = IPC::Run::start([ $PGBOUNCER, $ini ],
		'<', \undef, '>', \$bouncer{out}, '2>', \$bouncer{err});
	$bouncer{pool} = PostgreSQL::Test::Cluster->new("pool_$port", port => $port);
	$bouncer{up} = 0;
	# psql reads its query from a pipe: when the connection is refused it can
	# exit before reading, and IPC::Run then dies with a broken pipe.
	for (1 .. 200)
	{
		my $ret = eval { ($bouncer{pool}->psql('postgres', 'SELECT 1'))[0] };
		if (defined $ret && $ret == 0) { $bouncer{up} = 1; last; }
		select(undef, undef, undef, 0.1);
	}
	$bouncer{diag} = sub {
		return $bouncer{err}
		  . (-e "$dir/pgbouncer.log" ? slurp_file("$dir/pgbouncer.log") : '');
	};
	return \%bouncer;
}

# Stop a pgbouncer that start_pgbouncer started.
sub stop_pgbouncer
{
	my ($bouncer) = @_;
	$bouncer->{run}->signal('INT');
	$bouncer->{run}->finish;
	return;
}

# SQL for a (Perl, Unicode) string as a text value in the database
# encoding: the string travels as hex of its UTF-8 bytes, so the SQL is ASCII
# and does not depend on psql's client encoding.
sub sql_text
{
	my ($str) = @_;
	my $hex = unpack('H*', encode_utf8($str));
	return "convert_from('\\x$hex'::bytea, 'UTF8')";
}

# The WAL timeline stored in a node's fencing.state file (0: unknown), or
# undef when there is no version 2 file.
sub state_file_timeline
{
	my ($version, $limit, $timeline) = state_file_fields(@_);
	return undef unless defined $version && $version == 2;
	return $timeline;
}

# CRC-32C (Castagnoli), as PostgreSQL's pg_crc32c computes it.
sub crc32c
{
	my ($data) = @_;
	my $crc = 0xFFFFFFFF;
	for my $byte (unpack('C*', $data))
	{
		$crc ^= $byte;
		$crc = ($crc >> 1) ^ (($crc & 1) ? 0x82F63B78 : 0) for 1 .. 8;
	}
	return $crc ^ 0xFFFFFFFF;
}

# Write a valid fencing.state into a stopped node's data directory: version
# 1 (fencing 1.0: magic, version, limit, crc) or 2 (with the timeline
# before the crc).
sub write_state_file
{
	my ($node, %opts) = @_;
	my $version = $opts{version} // 2;
	my $head = pack('L L Q', 0x464E4331, $version, $opts{limit});
	my $data = $version == 1
	  ? $head . pack('L L', crc32c($head), 0)
	  : do { my $body = $head . pack('L', $opts{timeline} // 1); $body . pack('L', crc32c($body)) };
	my $path = $node->data_dir . '/fencing.state';
	open(my $fh, '>:raw', $path) or die "could not write $path: $!";
	print $fh $data;
	close($fh);
	return;
}

# The path of libfaketime, or undef when it is not installed.
sub libfaketime
{
	for my $dir ('/usr/lib/x86_64-linux-gnu/faketime',
		'/usr/lib/aarch64-linux-gnu/faketime', '/usr/lib/faketime')
	{
		return "$dir/libfaketime.so.1" if -f "$dir/libfaketime.so.1";
	}
	return undef;
}

# Start a node whose clock runs off the real clock: by a fixed offset in
# seconds (offset => '-0.5'), or by whatever offset a file holds, re-read
# at every clock call (file => $path; change it with set_fake_offset).  The
# monotonic clock stays real, so timeouts behave.
sub start_with_fake_clock
{
	my ($node, %opts) = @_;
	my $lib = libfaketime() or die 'libfaketime is not installed';

	local $ENV{LD_PRELOAD} = $lib;
	local $ENV{FAKETIME_DONT_FAKE_MONOTONIC} = 1;
	local $ENV{FAKETIME} = $opts{offset} if defined $opts{offset};
	local $ENV{FAKETIME_TIMESTAMP_FILE} = $opts{file} if defined $opts{file};
	local $ENV{FAKETIME_NO_CACHE} = 1 if defined $opts{file};
	$node->start;
	return;
}

# Step the clock of a node started with start_with_fake_clock(file =>
# $file) to a new offset.  libfaketime re-reads the file at every clock
# call and exits the process when it reads a half-written one ("failed to
# parse FAKETIME timestamp"), so the new offset replaces the file in one
# rename.
sub set_fake_offset
{
	my ($file, $offset) = @_;
	open(my $fh, '>', "$file.new") or die "could not write $file.new: $!";
	print $fh "$offset\n";
	close($fh) or die "could not write $file.new: $!";
	rename("$file.new", $file) or die "could not rename $file.new to $file: $!";
	return;
}

# Seconds by which a node's clock is ahead of this process's (negative:
# behind).  The server reads its clock somewhere within a query's round
# trip, so the estimate is off by up to half of it: measured over one
# connection (no psql start-up inside the interval), keeping the sample
# with the shortest round trip (up to 20 samples, stopping at one under
# 10 ms), so that a busy machine does not skew it by a second.
sub clock_offset
{
	my ($node) = @_;
	my $session = $node->background_psql('postgres');
	my ($offset, $round_trip);

	for (1 .. 20)
	{
		my $before = Time::HiRes::time();
		my $server = $session->query_safe('SELECT extract(epoch FROM clock_timestamp())');
		my $after = Time::HiRes::time();
		if (!defined $round_trip || $after - $before < $round_trip)
		{
			$round_trip = $after - $before;
			$offset = $server - ($before + $after) / 2;
		}
		last if $round_trip < 0.01;
	}
	$session->quit;
	return $offset;
}

# Start a node whose clock runs $seconds behind the moment a fence token
# ($token: nanoseconds since 2000-01-01 by the clock of the server that
# issued it) stood for, as a server whose clock lags the old one's does
# after a failover or a recovery; without libfaketime, on the real clock.
# Returns whether the clock is faked.
sub start_behind_token
{
	my ($node, $token, $seconds) = @_;

	if (!libfaketime())
	{
		$node->start;
		return 0;
	}
	my $token_epoch = $token / 1e9 + 946_684_800;	# seconds since 1970
	start_with_fake_clock($node,
		offset => sprintf('%+.3f', $token_epoch - $seconds - Time::HiRes::time()));
	return 1;
}

# Switch a node with archive_mode on to a new WAL segment and wait until
# the one holding everything written so far is archived, so that a
# recovery from the archive can replay all of it.
sub archive_current_wal
{
	my ($node) = @_;
	my $walfile = $node->safe_psql('postgres',
		'SELECT pg_walfile_name(pg_current_wal_lsn())');

	$node->safe_psql('postgres', 'SELECT pg_switch_wal()');
	$node->poll_query_until('postgres',
		"SELECT '$walfile' <= last_archived_wal FROM pg_stat_archiver")
	  or die "WAL segment $walfile was not archived";
	return;
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
