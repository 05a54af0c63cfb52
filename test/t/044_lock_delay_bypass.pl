
# Copyright (c) 2026, the fencing developers
#
# 044_lock_delay_bypass.pl -- ways a lost holder's fencing.lock_delay was
# skipped or cut short (review of src/lock_delay.c).
#
# - A session that created its first temporary table after its first
#   fencing lock: core's RemoveTempRelationsCallback (a before_shmem_exit
#   callback registered after fencing's, so run before it) aborts the open
#   transaction at exit, which freed the fencing locks before fencing looked
#   at them, so a terminated holder left no delay.
# - The table of delays is as large as fencing.max_tracked_locks: any role
#   that may call try_lock can fill it with delays of its own names (take a
#   lock, then end its own session).  That used to evict another holder's
#   delay early; a full table now folds its soonest delays into a delay of
#   every lock, so the victim's name stays refused (so does every other).

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('lock_delay_bypass');
$node->init;
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'fencing'\n"
	  . "fencing.lock_delay = '10min'\n"
	  . "fencing.max_tracked_locks = 16\n");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION fencing');
$node->safe_psql('postgres', 'CREATE ROLE mallory LOGIN');

sub sql { return $node->safe_psql('postgres', $_[0]); }

sub wait_gone
{
	my ($pid) = @_;
	$node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $pid")
	  or die "backend $pid did not exit";
}

# A holder of $name that runs @then in its open transaction, then is
# terminated; returns once its backend has gone.
sub lose_holder
{
	my ($name, @then) = @_;
	my $h = $node->background_psql('postgres', on_error_stop => 0);
	my $pid = $h->query_safe('SELECT pg_backend_pid()');
	$h->query_safe('BEGIN');
	like($h->query_safe("SELECT fencing.try_lock('$name')"),
		qr/^\d+$/, "holder of \"$name\" granted");
	$h->query_safe($_) foreach @then;
	sql("SELECT pg_terminate_backend($pid)");
	wait_gone($pid);
	eval { $h->quit };
}

sub delayed
{
	my ($name) = @_;
	return sql(
		"SELECT count(*) FROM fencing.locks
		 WHERE name = '$name' AND delayed_until IS NOT NULL");
}

# --- a temporary table created after the session's first fencing lock -----
lose_holder('job plain');
is(delayed('job plain'), 1, 'a terminated holder is delayed (control)');

lose_holder('job temp', 'CREATE TEMP TABLE scratch (id int)');
is(delayed('job temp'), 1,
	'a terminated holder that created a temporary table is delayed');
is(sql("SELECT fencing.try_lock('job temp') IS NULL"),
	't', 'and its name is refused in the window');

# the temporary namespace outlives the table: a later transaction too
{
	my $h = $node->background_psql('postgres', on_error_stop => 0);
	my $pid = $h->query_safe('SELECT pg_backend_pid()');
	$h->query_safe("BEGIN; SELECT fencing.try_lock('job warm'); COMMIT");
	$h->query_safe('CREATE TEMP TABLE scratch (id int); DROP TABLE scratch');
	$h->query_safe('BEGIN');
	$h->query_safe("SELECT fencing.try_lock('job temp later')");
	sql("SELECT pg_terminate_backend($pid)");
	wait_gone($pid);
	eval { $h->quit };
	is(delayed('job temp later'), 1,
		'a holder whose session once used a temporary table is delayed');
}

# --- an unprivileged role fills the table of delays -----------------------
lose_holder('victim');
is(delayed('victim'), 1, 'the victim holder is delayed');
my $victim_until = sql(
	"SELECT delayed_until FROM fencing.locks WHERE name = 'victim' AND delayed_until IS NOT NULL");
for my $i (1 .. 16)
{
	# the junk holder ends its own session with its transaction open
	$node->psql('postgres',
		"BEGIN; SELECT fencing.try_lock('junk $i');
		 SELECT pg_terminate_backend(pg_backend_pid());",
		extra_params => [ '-U', 'mallory' ]);
}
is(sql("SELECT fencing.try_lock('victim') IS NULL"),
	't', "the victim's name is still refused after other roles' lost holders filled the table");
is( sql("SELECT count(*) FROM fencing.locks
		 WHERE delayed_until >= '$victim_until'
		   AND (name = 'victim'
				OR (database IS NULL AND name LIKE '(every fencing lock%'))"),
	1, "the view shows the victim's delay, or a delay of every lock ending no earlier");
is( sql("SELECT count(*) FROM fencing.locks
		 WHERE database IS NULL AND name LIKE '(every fencing lock%'"),
	1, 'the delays that did not fit are one delay of every lock');
is(sql("SELECT fencing.try_lock('unrelated') IS NULL"),
	't', 'while it lasts, no fencing lock is granted (the safe side of a full table)');
like(slurp_file($node->logfile),
	qr/WARNING:  the table of fencing lock delays is full: no fencing lock is granted until the delay of "[^"]+" ends/,
	'a WARNING names the delay that was folded, with the way out');

$node->stop;
done_testing();
