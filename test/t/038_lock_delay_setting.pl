
# Copyright (c) 2026, the fencing developers
#
# 038_lock_delay_setting.pl -- how fencing.lock_delay acts on the delays of
# lost holders (src/locks/delay.c), beyond 038_lock_delay.pl:
#
# - a grant waiting out a delay (lock, lock_shared, lock_all, acquire with
#   no timeout) is cancellable and honours statement_timeout: it ends with
#   57014 long before the delay does, holding nothing;
# - a delay is scoped to its database: the same name in another database
#   is granted at once;
# - a delay lasts the setting in force, not the exiting backend's copy of
#   it: a holder idle in its transaction has not read a reload yet, and
#   its loss starts a delay when the setting was raised from 0 after it
#   began, and none when it was lowered to 0;
# - the setting in force also bounds the delays already running: lowering
#   it shortens them (0 ends them all at once), raising it lengthens them.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use FindBin;
use lib "$FindBin::RealBin/../perl";
use FencingTest qw(holding_session terminate_session);

my $node = PostgreSQL::Test::Cluster->new('lock_delay_setting');
$node->init;
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'fencing'\nfencing.lock_delay = '5min'\n");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION fencing');
$node->safe_psql('postgres', 'CREATE DATABASE other');
$node->safe_psql('other', 'CREATE EXTENSION fencing');

sub sql { return $node->safe_psql('postgres', $_[0]); }

sub set_lock_delay
{
	my ($value) = @_;
	sql("ALTER SYSTEM SET fencing.lock_delay = '$value'");
	$node->reload;
	$node->poll_query_until('postgres',
		"SELECT current_setting('fencing.lock_delay') = '$value'")
	  or die "fencing.lock_delay did not become $value";
}

sub holder { return holding_session($node, @_); }

sub terminate { terminate_session($node, @_); }

# Seconds from the start of $name's delay to its end, as the view shows
# them; undef when the name has no delay.
sub delay_seconds
{
	my ($name) = @_;
	my $s = sql(
		"SELECT extract(epoch FROM delayed_until - since) FROM fencing.locks
		 WHERE name = '$name' AND delayed_until IS NOT NULL");
	return $s eq '' ? undef : $s;
}

# --- waiting out a delay: cancel and statement_timeout --------------------
terminate(holder('job wait'));
ok(defined delay_seconds('job wait'), 'the lost holder left a delay of five minutes');
{
	my ($h, $pid) = holder('job unrelated');
	$h->query_safe("SELECT fencing.try_acquire('job pool wait', 1)");
	terminate($h, $pid);
}
ok(defined delay_seconds('job pool wait'), "and one of the only permit of 'job pool wait'");

my @waits = (
	[ 'lock',        "fencing.lock('job wait')" ],
	[ 'lock_shared', "fencing.lock_shared('job wait')" ],
	[ 'lock_all',    "fencing.lock_all(ARRAY['job wait', 'job wait 2'])" ],
	[ 'acquire',     "fencing.acquire('job pool wait', 1)" ]);
for my $w (@waits)
{
	my ($label, $call) = @$w;
	my $started = time();
	my ($ret, $out, $err) = $node->psql('postgres',
		"SET statement_timeout = '1s'; BEGIN; SELECT $call;",
		extra_params => [ '-v', 'VERBOSITY=verbose' ],
		timeout => 30, timed_out => \my $timed_out);
	my $took = time() - $started;
	like($err, qr/ERROR:  57014: canceling statement due to statement timeout/,
		"$label waiting out a delay: statement_timeout ends it (57014)");
	cmp_ok($took, '>=', 0.9, sprintf("$label: after the timeout (%.1f s)", $took));
	cmp_ok($took, '<', 30, "$label: long before the delay ends");

	my $s = $node->background_psql('postgres', on_error_stop => 0,
		extra_params => [ '-v', 'VERBOSITY=verbose' ], timeout => 30);
	my $pid = $s->query_safe('SELECT pg_backend_pid()');
	$s->query_until(qr/sending/, "\\echo sending\nBEGIN; SELECT $call;\n");
	$node->poll_query_until('postgres',
		"SELECT wait_event_type = 'Extension' FROM pg_stat_activity WHERE pid = $pid")
	  or die "$label did not sleep on the delay";
	cmp_ok(sql("SELECT count(*) FROM fencing.locks WHERE pid = $pid AND NOT granted"),
		'>=', 1, "$label: the view shows the wait");
	$started = time();
	sql("SELECT pg_cancel_backend($pid)");
	my ($after) = $s->query("SELECT 'after'");
	$took = time() - $started;
	like($s->{stderr}, qr/ERROR:  57014: canceling statement due to user request/,
		"$label waiting out a delay: a cancel ends it (57014)");
	cmp_ok($took, '<', 30, sprintf("$label: at once (%.1f s)", $took));
	$s->query('ROLLBACK');
	is(sql("SELECT count(*) FROM fencing.locks WHERE pid = $pid"),
		0, "$label: the cancelled wait holds and awaits nothing");
	$s->quit;
}

# --- a delay is scoped to its database -----------------------------------
is( $node->safe_psql('other',
		"BEGIN; SELECT fencing.try_lock('job wait') IS NOT NULL; COMMIT"),
	't', 'another database is granted the same name at once');
is( $node->safe_psql('other',
		"BEGIN; SELECT fencing.lock('job wait', '1s') IS NOT NULL; COMMIT"),
	't', 'and lock() there does not wait');
is(sql("BEGIN; SELECT fencing.try_lock('job wait') IS NULL; COMMIT"),
	't', "the delay's own database still refuses it");

# --- the setting in force, not the exiting backend's copy -----------------
set_lock_delay('0');
my @raised = holder('job raised');
set_lock_delay('30s');
terminate(@raised);
my $seconds = delay_seconds('job raised');
ok(defined $seconds,
	'raised from 0 while the holder sat idle: its loss starts a delay');
cmp_ok($seconds // 0, '==', 30, 'of the new setting');

my @lowered = holder('job lowered');
set_lock_delay('0');
terminate(@lowered);
is(delay_seconds('job lowered'), undef,
	'lowered to 0 while the holder sat idle: its loss starts no delay');
is(sql("BEGIN; SELECT fencing.try_lock('job lowered') IS NOT NULL; COMMIT"),
	't', 'and the name is grantable');

# --- the setting bounds the delays in force --------------------------------
set_lock_delay('10min');
terminate(holder('job bounded'));
cmp_ok(delay_seconds('job bounded') // 0, '==', 600, 'a delay of ten minutes');
set_lock_delay('5s');
cmp_ok(delay_seconds('job bounded') // 0, '==', 5, 'lowering the setting shortens it');
set_lock_delay('10min');
cmp_ok(delay_seconds('job bounded') // 0, '==', 600, 'raising the setting lengthens it');
set_lock_delay('0');
is(sql("BEGIN; SELECT fencing.try_lock('job bounded') IS NOT NULL; COMMIT"),
	't', '0 ends every delay in force at once');
is(sql('SELECT count(*) FROM fencing.locks WHERE delayed_until IS NOT NULL'),
	0, 'and the view shows none');
set_lock_delay('10min');
is(sql('SELECT count(*) FROM fencing.locks WHERE delayed_until IS NOT NULL'),
	0, 'a delay that ended does not come back when the setting is raised');

$node->stop;
done_testing();
