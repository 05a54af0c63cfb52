
# Copyright (c) 2026, the fencing developers
#
# 044_lock_delay_bypass.pl -- ways a lost holder's fencing.lock_delay was
# skipped or cut short, and ways one role could stop other roles' locks
# through the table of delays (src/locks/delay.c).
#
# - A session that created its first temporary table after its first
#   fencing lock: core's RemoveTempRelationsCallback (a before_shmem_exit
#   callback registered after fencing's, so run before it) aborts the open
#   transaction at exit, which freed the fencing locks before fencing looked
#   at them, so a terminated holder left no delay.
# - The table of delays is as large as fencing.max_tracked_locks, and any
#   role that may call try_lock can fill it with delays of its own names
#   (two sessions that end while holding 12 and 6 locks).  No delay may end
#   early because of that, and the cost falls on that role alone: the role
#   with the most delays has its soonest ones folded into one delay of
#   every fencing lock of that role in that database.  Other roles' delays
#   stay, other roles and other databases are granted their locks, and the
#   role itself is refused until the fold ends (more lost sessions lengthen
#   only its own fold).
# - fencing.clear_lock_delays(name) (revoked from PUBLIC) ends a name's
#   delays in the current database, or with no name every delay there.
# - A table already full of another role's delays (that role lost many
#   holders at once): a role that then loses holders pays for its own
#   delays, folding them into its own fold; only its first delay makes room
#   at the other role's expense, for one entry.
# - Only when every delay in the table belongs to a different role are two
#   of them folded into a delay of every lock of their database, and other
#   databases are still granted theirs.

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

# --- one role loses more holders than the table holds ------------------
$node->safe_psql('postgres', 'CREATE ROLE alice LOGIN');
$node->safe_psql('postgres', 'CREATE DATABASE other');
$node->safe_psql('other', 'CREATE EXTENSION fencing');

# psql as $role in $db: (stdout, stderr) of $sql, which may fail.
sub psql_as
{
	my ($role, $db, $sql) = @_;
	my ($ret, $out, $err) = $node->psql($db, $sql,
		extra_params => [ '-U', $role, '-v', 'VERBOSITY=verbose' ]);
	return ($out, $err);
}

# try_lock($name) as $role in $db, in a transaction of its own: 'granted'
# or 'refused'.
sub try_as
{
	my ($role, $db, $name) = @_;
	my ($out, $err) = psql_as($role, $db,
		"BEGIN; SELECT fencing.try_lock('$name') IS NOT NULL; COMMIT");
	return $out eq 't' ? 'granted' : $out eq 'f' ? 'refused' : "error: $err";
}

# $count sessions' worth of locks: psql takes them as $role in an open
# transaction and exits (the session ends with its transaction open).
sub lose_locks
{
	my ($role, $prefix, $count, $db) = @_;
	my ($out, $err) = psql_as($role, $db // 'postgres',
		"BEGIN; SELECT count(fencing.try_lock('$prefix ' || g)) FROM generate_series(1, $count) g;");
	is($out, $count, "$role took $count locks ($prefix)");
	$node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM pg_stat_activity WHERE usename = '$role'")
	  or die "the sessions of $role did not end";
}

my $log_offset = -s $node->logfile;
{
	my $h = $node->background_psql('postgres', on_error_stop => 0,
		extra_params => [ '-U', 'alice' ]);
	$h->query_safe("BEGIN; SELECT fencing.try_lock('victim')");
	$h->quit;
	$node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM pg_stat_activity WHERE usename = 'alice'")
	  or die 'the session of alice did not end';
}
is(delayed('victim'), 1, "alice's lost holder of 'victim' is delayed");
lose_locks('mallory', 'junk', 12);
lose_locks('mallory', 'more junk', 6);

is(try_as('alice', 'other', 'unrelated'), 'granted',
	"another database: alice is granted an unrelated name");
is(try_as('mallory', 'other', 'unrelated'), 'granted',
	'another database: so is mallory, whose lost holders were elsewhere');
is(try_as('alice', 'postgres', 'unrelated'), 'granted',
	"the same database: another role is granted an unrelated name");
is(try_as('alice', 'postgres', 'victim'), 'refused',
	"alice's delay of 'victim' is kept");
is(try_as('alice', 'postgres', 'more junk 6'), 'refused',
	"mallory's latest lost names are still refused to everyone");
is(try_as('mallory', 'postgres', 'unrelated'), 'refused',
	'mallory, whose delays were folded, is refused every fencing lock in that database');
is( sql("SELECT count(*) FROM fencing.locks
		 WHERE delayed_until IS NOT NULL AND database = 'postgres'
		   AND name = '(every fencing lock of role mallory)'"),
	1, "the view shows the fold as a delay of every lock of mallory's in that database");
like(slurp_file($node->logfile, $log_offset),
	qr/WARNING:  the table of fencing lock delays is full\n[^\n]*DETAIL:  Delays of the role with OID \d+ are folded into one delay of every fencing lock that role takes in the database with OID \d+/,
	'a WARNING says whose delays were folded');

# more lost sessions of the offender, in the database where it still gets
# locks, cost only its own delays
lose_locks('mallory', 'yet more junk', 6, 'other');
is(try_as('alice', 'postgres', 'unrelated 2'), 'granted',
	'after more lost sessions of mallory, alice is still granted an unrelated name');
is(try_as('alice', 'other', 'unrelated 2'), 'granted',
	'in both databases');
is(try_as('alice', 'postgres', 'victim'), 'refused',
	"and 'victim' is still delayed");
is(try_as('alice', 'other', 'yet more junk 6'), 'refused',
	"and so is mallory's latest lost name");

# a restart carries the fold over as it is
$node->restart;
is(try_as('mallory', 'postgres', 'unrelated'), 'refused',
	"after a restart, mallory's fold is still in force");
is(try_as('alice', 'postgres', 'unrelated 5'), 'granted',
	'and still refuses nobody else');

# --- clearing delays --------------------------------------------------------
{
	my ($out, $err) = psql_as('mallory', 'postgres', 'SELECT fencing.clear_lock_delays()');
	like($err, qr/ERROR:  42501: permission denied for function clear_lock_delays/,
		'clear_lock_delays() is not for PUBLIC');
	my $delays_in = sub {
		return sql("SELECT count(*) FROM fencing.locks
					WHERE delayed_until IS NOT NULL AND database = '$_[0]'");
	};
	my $in_postgres = $delays_in->('postgres');
	my $in_other = $delays_in->('other');
	cmp_ok($in_other, '>', 0, 'precondition: both databases have delays');
	is(sql("SELECT fencing.clear_lock_delays('victim')"), 1,
		"the owner ends the delay of 'victim'");
	is(try_as('alice', 'postgres', 'victim'), 'granted',
		"'victim' is grantable at once");
	is($node->safe_psql('other', 'SELECT fencing.clear_lock_delays()'), $in_other,
		"with no name, every delay of the caller's database ends");
	is($delays_in->('postgres'), $in_postgres - 1,
		'and no delay of another database');
	is(sql('SELECT fencing.clear_lock_delays()'), $in_postgres - 1,
		'the fold ends with the delays of its database');
	is(sql('SELECT count(*) FROM fencing.locks WHERE delayed_until IS NOT NULL'),
		0, 'no delay is left');
	is(try_as('mallory', 'postgres', 'unrelated'), 'granted',
		'mallory is granted her locks again');
}

# --- a table already full of another role's delays -------------------------
$node->safe_psql('postgres', 'CREATE ROLE bob LOGIN');
lose_locks('bob', 'bob', 16);
is(sql("SELECT count(*) FROM fencing.locks WHERE delayed_until IS NOT NULL AND name LIKE 'bob %'"),
	16, "bob's lost holders fill the table");
lose_locks('mallory', 'late junk', 4);
my $bob_grantable = 0;
for my $i (1 .. 16)
{
	$bob_grantable++ if try_as('alice', 'postgres', "bob $i") eq 'granted';
}
cmp_ok($bob_grantable, '<=', 2,
	"mallory's lost holders cost bob's delays at most the two folded to make one entry ($bob_grantable)");
is( sql("SELECT count(*) FROM fencing.locks
		 WHERE delayed_until IS NOT NULL AND database = 'postgres'
		   AND name = '(every fencing lock of role mallory)'"),
	1, "mallory's later delays are folded into her own");
is(try_as('alice', 'postgres', 'unrelated 4'), 'granted',
	'and alice is still granted an unrelated name');
sql('SELECT fencing.clear_lock_delays()');

# --- as many roles as the table has entries ---------------------------------
# Each role loses one holder: once every entry belongs to a different role,
# two are folded into a delay of every lock of their database.
$log_offset = -s $node->logfile;
for my $i (1 .. 17)
{
	$node->safe_psql('postgres', "CREATE ROLE r$i LOGIN");
	lose_locks("r$i", "single $i", 1);
}
is(try_as('alice', 'other', 'unrelated 3'), 'granted',
	'every entry a different role: another database is granted its locks');
is(try_as('alice', 'postgres', 'unrelated 3'), 'refused',
	'and in the database of the lost holders nobody is, until the fold ends');
is(try_as('r17', 'postgres', 'single 17'), 'refused',
	'the latest lost name is delayed');
is( sql("SELECT count(*) FROM fencing.locks
		 WHERE delayed_until IS NOT NULL AND database = 'postgres'
		   AND name = '(every fencing lock)'"),
	1, 'the view shows the delay of every lock of that database');
like(slurp_file($node->logfile, $log_offset),
	qr/WARNING:  the table of fencing lock delays is full\n[^\n]*DETAIL:  Every delay belongs to a different role; the two soonest are folded into one delay of every fencing lock in the database with OID \d+/,
	'a WARNING says so');

$node->stop;
done_testing();
