
# Copyright (c) 2026, the fencing developers
#
# 011_tokens_crash.pl -- T2: after SIGKILL of the postmaster or
# "pg_ctl stop -m immediate" while 8 clients draw tokens, every token issued
# after the restart is above every token any client received before, and
# the fencing.state file left by the crash covers every token received; after
# the next reservation it holds exactly the published limit.  The first
# round removes the file after a checkpoint, so that neither the file nor
# WAL replay knows the limit: a fresh start above the clock must carry it.
# The later rounds run with the counter an hour ahead of the clock, so that
# the clock floor cannot hide a state file or a WAL replay that lags.
# At the end, a damaged state file stops the server with a message saying
# what is wrong and how to repair it; restored, tokens continue above; a
# state file written by fencing 1.0 is read (a logged fresh start).

use strict;
use warnings;

use File::Temp qw(tempdir);
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use FencingTest qw(state_file_limit state_file_timeline write_state_file kill9_and_restart);

my $clients = 8;

my $node = PostgreSQL::Test::Cluster->new('crash');
$node->init;
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'fencing'\nmax_connections = 30\nrestart_after_crash = on");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION fencing');

my $dir = tempdir(CLEANUP => 1);

# Scripts: one token per statement, autocommit.  The long one runs until
# the server goes away under it.
sub write_script
{
	my ($path, $count) = @_;
	open(my $fh, '>', $path) or die "could not write $path: $!";
	print $fh "SELECT fencing.next_token();\n" x $count;
	close($fh);
	return $path;
}
my $long_script = write_script("$dir/long.sql", 400000);
my $short_script = write_script("$dir/short.sql", 1000);

# Start the clients; each writes the tokens it receives, one per line.
sub start_clients
{
	my ($round, $script) = @_;
	my @clients;

	for my $i (0 .. $clients - 1)
	{
		my $out = "$dir/round$round.client$i.out";
		my $err = "$dir/round$round.client$i.err";
		my $h = IPC::Run::start(
			[
				'psql', '-X', '-A', '-t', '-q', '-v', 'ON_ERROR_STOP=1',
				'-d', $node->connstr('postgres'), '-f', $script
			],
			'<', \undef, '>', $out, '2>', $err);
		push @clients, { handle => $h, out => $out, err => $err };
	}
	return \@clients;
}

# Wait for the clients to exit (after a crash they fail: that is expected)
# and return the tokens each received.
sub collect_tokens
{
	my ($clients) = @_;
	my @per_client;

	for my $c (@$clients)
	{
		$c->{handle}->finish;
		my @tokens = split /\n/, slurp_file($c->{out});
		my @bad = grep { !/^\d+$/ } @tokens;
		if (@bad)
		{
			diag("unexpected client output: $bad[0]");
			@tokens = grep { /^\d+$/ } @tokens;
		}
		push @per_client, \@tokens;
	}
	return \@per_client;
}

# Wait until the clients together have drawn at least $n tokens since the
# server started.
sub wait_for_tokens
{
	my ($n) = @_;
	$node->poll_query_until('postgres',
		"SELECT tokens_issued >= $n FROM fencing.stats")
	  or die "the clients did not draw $n tokens";
	return;
}

my $all_max = 0;
my %seen;
my $duplicates = 0;

# Check one round's tokens: every client's tokens increase, all of them are
# above every token received in earlier rounds, none was seen before.
sub check_round
{
	my ($label, $per_client) = @_;
	my ($round_min, $round_max, $total);
	my $increasing = 1;

	for my $tokens (@$per_client)
	{
		$total += scalar @$tokens;
		for my $j (0 .. $#$tokens)
		{
			my $t = $tokens->[$j];
			$increasing = 0 if $j > 0 && $t <= $tokens->[ $j - 1 ];
			$duplicates++ if $seen{$t}++;
			$round_min = $t if !defined $round_min || $t < $round_min;
			$round_max = $t if !defined $round_max || $t > $round_max;
		}
	}
	cmp_ok($total, '>=', 1000, "$label: clients received tokens ($total)");
	ok($increasing, "$label: each client's tokens strictly increase");
	cmp_ok($round_min, '>', $all_max,
		"$label: every token is above every token received before the previous crash")
	  if $all_max > 0;
	$all_max = $round_max if defined $round_max && $round_max > $all_max;
	return $round_max;
}

# The state file a crash left behind must cover every token received
# before the crash.  A missing or invalid file is a failure, not a reason
# to stop the test.
sub check_file_covers
{
	my ($label, $file_limit, $round_max) = @_;
	ok(defined $file_limit, "$label: the crash left a valid fencing.state")
	  or return;
	cmp_ok($file_limit, '>=', $round_max // 0,
		"$label: the state file left by the crash covers every token received");
	return;
}

# After a reservation the state file holds exactly the published limit.
sub check_file_is_limit
{
	my ($label) = @_;
	my $token = $node->safe_psql('postgres', 'SELECT fencing.next_token()');
	cmp_ok($token, '>', $all_max,
		"$label: the first token after the restart is above every token received");
	$duplicates++ if $seen{$token}++;
	$all_max = $token;
	my $limit = $node->safe_psql('postgres', 'SELECT reserved_limit FROM fencing.status()');
	is(state_file_limit($node), $limit,
		"$label: after a reservation the state file holds the published limit");
	return;
}

my $clock_sql = "SELECT (extract(epoch FROM clock_timestamp() - "
  . "timestamptz '2000-01-01 00:00:00+00') * 1000000)::bigint";

# Round 1: clients draw and finish; a checkpoint puts every reservation
# before the redo point; SIGKILL; the state file is removed.  After the
# restart neither the file nor WAL replay knows the limit, so a fresh start
# above the clock must lift the counter above every token issued.
{
	my $c = start_clients(1, $short_script);
	my $per_client = collect_tokens($c);
	check_round('round 1 (clients finish)', $per_client);
	is(scalar(grep { scalar @$_ == 1000 } @$per_client),
		$clients, 'round 1: every client received all its tokens');
	$node->safe_psql('postgres', 'CHECKPOINT');
	my $state_file = $node->data_dir . '/fencing.state';
	ok(-f $state_file, 'the data directory has fencing.state');

	kill9_and_restart($node,
		before_start => sub {
			ok(unlink($state_file), 'the state file was there to remove')
			  or diag("could not remove $state_file: $!");
		});

	my $latest = $node->safe_psql('postgres', 'SELECT fencing.latest_token()');
	cmp_ok($latest, '<', $all_max,
		'state file removed after a checkpoint: the server lost the limit (precondition)');
	my $clock = $node->safe_psql('postgres', $clock_sql);
	my $first = $node->safe_psql('postgres', 'SELECT fencing.next_token()');
	cmp_ok($first, '>', $all_max, 'state lost: the first token is above every earlier token');
	cmp_ok($first, '>', $clock, "state lost: the first token is above the server's clock");
	like(slurp_file($node->logfile),
		qr/LOG:  fencing state file "fencing.state" not found: fence tokens make a fresh start/,
		'state lost: the log says the server makes a fresh start');
	ok(-f $state_file, 'the reservation wrote fencing.state again');
	$seen{$first}++;
	$all_max = $first;
	check_file_is_limit('round 1');
}

# From here on the counter runs an hour ahead of the clock (the lead bound
# is void, which the log says): what carries tokens across a crash is the
# state file and WAL replay alone.
$node->safe_psql('postgres',
	'SELECT fencing.advance_token(clock_floor + 3600000000000) FROM fencing.status()');
cmp_ok($node->safe_psql('postgres', 'SELECT tokens_ahead_of_clock FROM fencing.status()'),
	'>', 3_500_000_000_000, 'the counter is an hour ahead of the clock');

# Rounds 2-6: crash while the clients draw.
my @rounds = (
	{ label => 'round 2 (SIGKILL)', crash => 'kill9' },
	{ label => 'round 3 (immediate stop, checkpoint while drawing)', crash => 'immediate', checkpoint => 1 },
	{ label => 'round 4 (SIGKILL, reservations forced while drawing)', crash => 'kill9', advance => 1, checkpoint => 1 },
	{ label => 'round 5 (immediate stop, reservations forced while drawing)', crash => 'immediate', advance => 1 },
	{ label => 'round 6 (SIGKILL of one backend: crash restart)', crash => 'backend' },
);
my $round_no = 2;
for my $r (@rounds)
{
	my $c = start_clients($round_no, $long_script);
	wait_for_tokens(2000);
	# Several reservations while the clients keep drawing (three
	# statements, each its own transaction), a checkpoint, and how many
	# tokens were issued by then: one psql, since every psql started while
	# the clients run costs a second on a loaded machine.
	my @statements;
	push @statements,
	  ('SELECT fencing.advance_token(fencing.latest_token() + 5000000);') x 3
	  if $r->{advance};
	push @statements, 'CHECKPOINT;' if $r->{checkpoint};
	push @statements, 'SELECT tokens_issued FROM fencing.stats;';
	my @out = split /\n/,
	  $node->safe_psql('postgres', join("\n", @statements));
	my $issued = $out[-1];
	wait_for_tokens($issued + 1000);

	my $file_limit;
	if ($r->{crash} eq 'kill9')
	{
		kill9_and_restart($node, before_start => sub { $file_limit = state_file_limit($node) });
	}
	elsif ($r->{crash} eq 'backend')
	{
		# The postmaster resets shared memory and recovers by itself.
		my $victim = $node->safe_psql('postgres',
			"SELECT pid FROM pg_stat_activity WHERE backend_type = 'client backend'
			 AND query LIKE '%next_token%' AND pid <> pg_backend_pid() LIMIT 1");
		die 'no client backend to kill' unless $victim =~ /^\d+$/;
		my $log_offset = -s $node->logfile;
		kill('KILL', $victim) or die "could not kill backend $victim: $!";
		$node->wait_for_log(qr/all server processes terminated; reinitializing/, $log_offset);
		$node->wait_for_log(qr/database system is ready to accept connections/, $log_offset);
		ok($node->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()'),
			'the postmaster saw the backend crash and reinitialised')
		  or die 'the server did not come back after the crash';
		# every client died with the crash, so nothing has reserved since
		$file_limit = state_file_limit($node);
	}
	else
	{
		$node->stop('immediate');
		$file_limit = state_file_limit($node);
		$node->start;
	}
	my $round_max = check_round($r->{label}, collect_tokens($c));
	check_file_covers($r->{label}, $file_limit, $round_max);
	check_file_is_limit($r->{label});
	$round_no++;
}

# After the last crash: one more token, above everything.
my $final = $node->safe_psql('postgres', 'SELECT fencing.next_token()');
cmp_ok($final, '>', $all_max, 'after the last crash: the next token is above every token received');
is($duplicates, 0, 'no token was received twice in any round');

cmp_ok($node->safe_psql('postgres', 'SELECT reserved_limit FROM fencing.status()'),
	'>=', $final, 'status(): the durable limit covers the last token returned');

# A damaged state file stops the server at startup, saying what is wrong
# and how to repair it; the file restored, the server starts and tokens
# continue above every token received.
$node->stop;
my $state_path = $node->data_dir . '/fencing.state';
my $good;
{
	open(my $fh, '<:raw', $state_path) or die "could not read $state_path: $!";
	local $/;
	$good = <$fh>;
	close($fh);
}
my @damage = (
	[ 'a flipped bit in the limit', sub { my $d = $_[0]; substr($d, 9, 1) ^= "\x01"; $d },
		qr/Its checksum does not match its content\./ ],
	[ 'a truncated file', sub { substr($_[0], 0, 10) },
		qr/The file has 10 bytes; a valid one has 24\./ ],
	[ 'a wrong magic number', sub { my $d = $_[0]; substr($d, 0, 4) = 'XXXX'; $d },
		qr/Its magic number is 0x58585858 instead of 0x464E4331\./ ],
	[ 'an unknown format version', sub { my $d = $_[0]; substr($d, 4, 4) = pack('L', 7); $d },
		qr/Its format version is 7; this server reads versions 1 and 2\./ ]);
for my $case (@damage)
{
	my ($label, $damage, $detail) = @$case;
	open(my $fh, '>:raw', $state_path) or die "could not write $state_path: $!";
	print $fh $damage->($good);
	close($fh);
	my $log_offset = -s $node->logfile;
	ok(!$node->start(fail_ok => 1), "$label: the server refuses to start");
	my $log = slurp_file($node->logfile, $log_offset);
	like($log, qr/FATAL:  fencing state file "fencing.state" is damaged/,
		"$label: the log says the state file is damaged");
	like($log, qr/DETAIL:  $detail/, "$label: the detail says what is wrong");
	like($log, qr/HINT:  Restore the file from a backup of this server, or remove it; without it the server starts as a new cluster does/,
		"$label: the hint says how to repair it");
	$node->_update_pid(0);
}
{
	open(my $fh, '>:raw', $state_path) or die "could not write $state_path: $!";
	print $fh $good;
	close($fh);
}
$node->start;
my $repaired = $node->safe_psql('postgres', 'SELECT fencing.next_token()');
cmp_ok($repaired, '>', $all_max, 'the state file restored: tokens continue above every token received');

# A state file written by fencing 1.0 (format version 1, no timeline) is
# read: tokens continue above its limit, after a logged fresh start, and the
# next reservation writes version 2 with this server's timeline.
$node->stop;
my $v1_limit = $repaired + 1_000_000_000;
write_state_file($node, version => 1, limit => $v1_limit);
my $log_offset = -s $node->logfile;
$node->start;
like(slurp_file($node->logfile, $log_offset),
	qr/LOG:  fencing state file "fencing.state" was written by fencing 1.0: fence tokens make a fresh start/,
	'a state file of fencing 1.0: the log says the server makes a fresh start');
cmp_ok($node->safe_psql('postgres', 'SELECT fencing.next_token()'), '>', $v1_limit,
	'a state file of fencing 1.0: tokens continue above its limit');
is(state_file_timeline($node), 1,
	'the next reservation wrote a version 2 state file with the timeline');

$node->stop;
done_testing();
