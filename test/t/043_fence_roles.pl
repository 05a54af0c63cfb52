
# Copyright (c) 2026, the fencing developers
#
# 043_fence_roles.pl -- the fence against roles that hold privileges but not
# ownership, on a real standby, and through logical replication (DESIGN.md
# F7, F9).
#
# 1. check_fence() needs EXECUTE, which PUBLIC lacks: a role without the
#    grant cannot fence out a holder with a bare next_token(); a granted
#    role can; a resource service checks the token another session's lock
#    handed out; a database updated from 1.0 has the grant revoked too; a
#    granted role that leaves its check_fence() transaction open makes the
#    next holder wait on the watermark's row lock.
# 2. On a hot standby, check_fence() says so (25006), whatever the token.
# 3. A role with the TRUNCATE privilege cannot empty a protected table,
#    directly, through an unprotected parent, or through the owner's
#    SECURITY DEFINER function; nor by making the name resolve elsewhere
#    while TRUNCATE waits for its lock.
# 4. A role with the TRIGGER privilege cannot replace the fence trigger or
#    add a trigger to a protected table (one that runs first could rewrite
#    the fence), also not through a partitioned parent or a name that
#    changes while it waits; on other tables it still can.
# 5. protect() needs to own every inheritance child it would put the
#    trigger on.
# 6. Logical replication applies changes with session_replication_role =
#    replica, so the subscriber's ORIGIN fence trigger does not fire there,
#    for rows or TRUNCATE: the documented escape hatch (the publisher
#    fences the writes).
# 7. A role with only INSERT and UPDATE on a protected table cannot give a
#    (temporary) view of it a default on the fence column, which would
#    stand in for the token.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('roles');
$node->init(allows_streaming => 'logical');
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'fencing'");
$node->start;

$node->safe_psql(
	'postgres', q{
CREATE EXTENSION fencing;
CREATE ROLE holder LOGIN;
CREATE ROLE holder2 LOGIN;
CREATE ROLE intruder LOGIN;
CREATE ROLE service LOGIN;
CREATE ROLE table_owner LOGIN;
CREATE ROLE clerk LOGIN;
CREATE ROLE stranger LOGIN;
-- the documented grant: lock holders and a resource service
GRANT EXECUTE ON FUNCTION fencing.check_fence(text, bigint) TO holder, holder2, service;
GRANT CREATE ON SCHEMA public TO table_owner;
CREATE SCHEMA clerk_s AUTHORIZATION clerk;
});

# Run SQL as a role; returns (exit code, stdout, stderr).
sub as_role
{
	my ($role, $sql, $db) = @_;
	my ($stdout, $stderr);
	my $ret = $node->psql(
		$db // 'postgres', $sql,
		stdout => \$stdout,
		stderr => \$stderr,
		extra_params => [ '-U', $role, '-v', 'VERBOSITY=verbose' ]);
	return ($ret, $stdout, $stderr);
}

sub role_ok
{
	my ($role, $sql, $expected, $label) = @_;
	my ($ret, $stdout, $stderr) = as_role($role, $sql);
	is($ret, 0, "$label: succeeds") or diag $stderr;
	is($stdout, $expected, "$label: result") if defined $expected;
	return $stdout;
}

sub role_fails
{
	my ($role, $sql, $sqlstate, $label, $db) = @_;
	my ($ret, $stdout, $stderr) = as_role($role, $sql, $db);
	isnt($ret, 0, "$label: fails");
	like($stderr, qr/ERROR:  $sqlstate:/, "$label: SQLSTATE $sqlstate")
	  or diag $stderr;
	return $stderr;
}

#
# 1. check_fence() needs a right PUBLIC lacks (F9).
#
is( $node->safe_psql(
		'postgres', q{
SELECT has_function_privilege('public', 'fencing.check_fence(text,bigint)', 'EXECUTE'),
       has_function_privilege('intruder', 'fencing.check_fence(text,bigint)', 'EXECUTE'),
       has_function_privilege('holder', 'fencing.check_fence(text,bigint)', 'EXECUTE')}),
	'f|f|t',
	'PUBLIC and an ungranted role lack EXECUTE on check_fence; a granted role has it');

# The holder raises the run's fence with its lock's token.
my $h = $node->background_psql('postgres', on_error_stop => 0,
	extra_params => [ '-U', 'holder' ]);
$h->query_safe('BEGIN');
my $holder_token = $h->query_safe(q{SELECT fencing.try_lock('payments:batch-7')});
like($holder_token, qr/^\d+$/, 'the holder has the lock');
is($h->query_safe(qq{SELECT fencing.check_fence('payments:batch-7', $holder_token)}),
	$holder_token, "the holder's check_fence raises the watermark");
$h->query_safe('COMMIT');

# An intruder with a bare next_token() is refused and changes nothing.
my ($out, $failed);
my $err = role_fails('intruder',
	q{SELECT fencing.check_fence('payments:batch-7', fencing.next_token())},
	'42501', 'an ungranted role calls check_fence with a fresh token');
like($err, qr/permission denied for function check_fence/,
	'the message says permission denied');
is( $node->safe_psql(
		'postgres',
		q{SELECT fence FROM fencing.resource_fences WHERE resource = 'payments:batch-7'}),
	$holder_token,
	"the watermark is still the holder's token");
$h->query_safe('BEGIN');
($out, $failed) = $h->query(qq{SELECT fencing.check_fence('payments:batch-7', $holder_token)});
ok(!$failed && $out eq $holder_token, 'the holder is not fenced out and writes on')
  or diag $h->{stderr};
$h->{stderr} = '';
$h->query('COMMIT');

# A granted role can raise the fence, and then the holder is fenced out:
# the grant is a real power, given only to roles that hold locks.
role_ok('service',
	q{SELECT fencing.check_fence('payments:batch-7', fencing.next_token()) > 0},
	't', 'a granted role raises the fence with a fresh token');
$h->query('BEGIN');
($out, $failed) = $h->query(qq{SELECT fencing.check_fence('payments:batch-7', $holder_token)});
ok($failed && $h->{stderr} =~ /stale fence token/,
	'after the granted role raised it, the older holder is rejected')
  or diag $h->{stderr};
$h->{stderr} = '';
$h->query('ROLLBACK');

# A resource service checks the token a client's lock handed out in another
# session: the client holds the lock, the service has the grant.
$h->query_safe('BEGIN');
my $client_token = $h->query_safe(q{SELECT fencing.try_lock('bucket:exports')});
role_ok('service', qq{SELECT fencing.check_fence('bucket:exports', $client_token)},
	$client_token, "the service accepts the client's current token");
$h->query_safe('COMMIT');
my $h2 = $node->background_psql('postgres', on_error_stop => 0,
	extra_params => [ '-U', 'holder2' ]);
$h2->query_safe('BEGIN');
my $next_token = $h2->query_safe(q{SELECT fencing.try_lock('bucket:exports')});
cmp_ok($next_token, '>', $client_token, 'the next client gets a newer token');
role_ok('service', qq{SELECT fencing.check_fence('bucket:exports', $next_token)},
	$next_token, "the service accepts the next client's token");
$h2->query_safe('COMMIT');
role_fails('service', qq{SELECT fencing.check_fence('bucket:exports', $client_token)},
	'FN001', "the service rejects the first client's late request");

# A granted role that leaves its check_fence() transaction open holds the
# watermark's row lock: the next holder waits for it (here, until its
# lock_timeout; a lease would end a paused holder's transaction).
$h2->query_safe('BEGIN');
my $paused_token = $h2->query_safe(q{SELECT fencing.next_token()});
$h2->query_safe(qq{SELECT fencing.check_fence('bucket:exports', $paused_token)});
$err = role_fails('holder',
	q{SET lock_timeout = '200ms'; SELECT fencing.check_fence('bucket:exports', fencing.next_token())},
	'55P03', 'the next holder waits on the open check_fence transaction');
$h2->query_safe('ROLLBACK');
role_ok('holder', q{SELECT fencing.check_fence('bucket:exports', fencing.next_token()) > 0},
	't', 'once that transaction ends, the next holder goes on');
$h->quit;
$h2->quit;

# A database updated from 1.0 has the grant revoked too.
$node->safe_psql('postgres', 'CREATE DATABASE from_10');
$node->safe_psql('from_10', "CREATE EXTENSION fencing VERSION '1.0'");
is($node->safe_psql('from_10',
		q{SELECT has_function_privilege('intruder', 'fencing.check_fence(text,bigint)', 'EXECUTE')}),
	't', 'at 1.0, any role may call check_fence');
$node->safe_psql('from_10', 'ALTER EXTENSION fencing UPDATE');
is($node->safe_psql('from_10',
		q{SELECT has_function_privilege('intruder', 'fencing.check_fence(text,bigint)', 'EXECUTE')}),
	'f', 'after ALTER EXTENSION fencing UPDATE, an ungranted role may not');
role_fails('intruder', q{SELECT fencing.check_fence('payments:batch-7', fencing.next_token())},
	'42501', 'an ungranted role in the updated database', 'from_10');

#
# 2. On a hot standby, check_fence() reports the standby first.
#
$node->backup('backup');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($node, 'backup', has_streaming => 1);
$standby->start;
$node->wait_for_catchup($standby, 'replay', $node->lsn('flush'));
foreach my $token ('fencing.latest_token() + 1000', 'fencing.latest_token() - 1')
{
	my ($ret, $stdout, $stderr) = $standby->psql(
		'postgres',
		"SELECT fencing.check_fence('payments:batch-7', $token)",
		extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	isnt($ret, 0, "check_fence($token) fails on the standby");
	like($stderr, qr/ERROR:  25006:.*hot standby/,
		"check_fence($token) on the standby: 25006, the message says hot standby")
	  or diag $stderr;
}
$standby->stop;

#
# 3. TRUNCATE by roles that do not own the table.
#
$node->safe_psql(
	'postgres', q{
SET ROLE table_owner;
CREATE TABLE public.ledger (id int PRIMARY KEY, fence bigint);
INSERT INTO public.ledger VALUES (1, fencing.next_token());
SELECT fencing.protect('public.ledger');
CREATE TABLE public.archive (id int, fence bigint);
CREATE TABLE public.archive_2025 () INHERITS (public.archive);
SELECT fencing.protect('public.archive_2025');
INSERT INTO public.archive_2025 VALUES (1, fencing.next_token());
CREATE FUNCTION public.reset_ledger() RETURNS void LANGUAGE sql SECURITY DEFINER
	SET search_path = pg_catalog AS 'TRUNCATE public.ledger';
GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE, TRIGGER ON public.ledger TO clerk;
GRANT TRUNCATE ON public.archive TO clerk;
GRANT EXECUTE ON FUNCTION public.reset_ledger() TO clerk;
RESET ROLE;
});

$err = role_fails('clerk', 'TRUNCATE public.ledger', '55000',
	'a role with the TRUNCATE privilege truncates a protected table');
like($err, qr/cannot truncate protected table public\.ledger/, 'the message names the table');
like($err, qr/HINT:  .*fencing\.token.*fencing\.unprotect\(\)/, 'the hint gives both ways');
role_fails('clerk', 'TRUNCATE public.archive', '55000',
	'TRUNCATE through an unprotected parent (privileges checked on the parent only)');
role_fails('clerk', 'SELECT public.reset_ledger()', '55000',
	"the owner's SECURITY DEFINER function that truncates");
# (the fence is checked where PostgreSQL resolves the name, before the
# privilege, so even a role without any privilege hears it is protected)
role_fails('intruder', 'TRUNCATE public.ledger', '55000',
	'a role without any privilege truncates a protected table');
is( $node->safe_psql(
		'postgres',
		'SELECT (SELECT count(*) FROM public.ledger), (SELECT count(*) FROM public.archive_2025)'),
	'1|1',
	'no protected row was removed');

# The name TRUNCATE acts on changes while it waits for its lock: the check
# follows the table PostgreSQL finally locks, not the one it named first.
# Session "mover" (clerk, search_path clerk_s, public) runs the statement
# on "ledger" while session "locker" (clerk) holds clerk_s.ledger locked;
# once mover waits, locker drops clerk_s.ledger, and the name resolves to
# public.ledger when the lock comes.  Returns what mover printed on stderr.
my $locker = $node->background_psql('postgres', extra_params => [ '-U', 'clerk' ]);
my $mover = $node->background_psql('postgres', on_error_stop => 0,
	extra_params => [ '-U', 'clerk', '-v', 'VERBOSITY=verbose' ]);
my $mover_pid = $mover->query_safe('SELECT pg_backend_pid()');
$mover->query_safe('SET search_path = clerk_s, public');

sub run_while_name_moves
{
	my ($sql, $label) = @_;

	$node->safe_psql('postgres',
		'CREATE TABLE clerk_s.ledger (id int, fence bigint); ALTER TABLE clerk_s.ledger OWNER TO clerk');
	$locker->query_safe('BEGIN');
	$locker->query_safe('LOCK TABLE clerk_s.ledger IN ACCESS EXCLUSIVE MODE');
	$mover->query_until(qr/started/, "\\echo started\n$sql;\n");
	ok( $node->poll_query_until(
			'postgres', "SELECT count(*) > 0 FROM pg_locks WHERE pid = $mover_pid AND NOT granted"),
		"$label waits for clerk_s.ledger's lock");
	$locker->query_safe('DROP TABLE clerk_s.ledger');
	$locker->query_safe('COMMIT');
	$mover->query('SELECT 1');
	my $stderr = $mover->{stderr};
	$mover->{stderr} = '';
	return $stderr;
}

like(run_while_name_moves('TRUNCATE ledger', 'TRUNCATE ledger'),
	qr/ERROR:  55000: cannot truncate protected table public\.ledger/,
	'when the name moves to the protected table, TRUNCATE is refused');
is($node->safe_psql('postgres', 'SELECT count(*) FROM public.ledger'),
	'1', "the protected table's row is still there");

#
# 4. Triggers by roles that do not own the table.
#
$node->safe_psql(
	'postgres', q{
SET ROLE clerk;
CREATE FUNCTION clerk_s.keep_fence() RETURNS trigger LANGUAGE plpgsql AS
	$$BEGIN NEW.fence := OLD.fence; RETURN NEW; END$$;
RESET ROLE;
SET ROLE table_owner;
CREATE TABLE public.notes (id int, body text);
GRANT TRIGGER ON public.notes TO clerk;
CREATE TABLE public.sales (id int, fence bigint) PARTITION BY RANGE (id);
CREATE TABLE public.sales_1 PARTITION OF public.sales FOR VALUES FROM (0) TO (10);
SELECT fencing.protect('public.sales_1');
GRANT TRIGGER ON public.sales, public.sales_1 TO clerk;
RESET ROLE;
});
my $trigger_before = $node->safe_psql('postgres',
	q{SELECT tgfoid::regproc FROM pg_trigger WHERE tgrelid = 'public.ledger'::regclass});
is($trigger_before, 'fencing.reject_stale', 'the ledger carries the fence trigger');

$err = role_fails('clerk',
	q{CREATE OR REPLACE TRIGGER fencing_reject_stale BEFORE INSERT OR UPDATE OR DELETE ON public.ledger
	  FOR EACH ROW EXECUTE FUNCTION clerk_s.keep_fence()},
	'42501', 'a role with the TRIGGER privilege replaces the fence trigger');
like($err, qr/permission denied to create trigger "fencing_reject_stale" on protected table public\.ledger/,
	'the message names the trigger and the table');
role_fails('clerk',
	q{CREATE TRIGGER a_first BEFORE UPDATE ON public.ledger
	  FOR EACH ROW EXECUTE FUNCTION clerk_s.keep_fence()},
	'42501', 'a role with the TRIGGER privilege adds a trigger that runs before the fence');
role_fails('clerk',
	q{CREATE TRIGGER by_clerk BEFORE UPDATE ON public.sales
	  FOR EACH ROW EXECUTE FUNCTION clerk_s.keep_fence()},
	'42501', "a trigger on a partitioned parent, cloned onto a protected partition");
role_ok('clerk',
	q{CREATE TRIGGER by_clerk BEFORE UPDATE ON public.notes
	  FOR EACH ROW EXECUTE FUNCTION clerk_s.keep_fence()},
	undef, 'on a table that is not protected, the TRIGGER privilege works as before');

# the same with a name that changes while CREATE TRIGGER waits for its lock
like(
	run_while_name_moves(
		'CREATE OR REPLACE TRIGGER fencing_reject_stale BEFORE INSERT OR UPDATE OR DELETE ON ledger FOR EACH ROW EXECUTE FUNCTION clerk_s.keep_fence()',
		'CREATE TRIGGER ... ON ledger'),
	qr/ERROR:  42501: permission denied to create trigger "fencing_reject_stale" on protected table public\.ledger/,
	'when the name moves to the protected table, the trigger is refused');
$mover->quit;
$locker->quit;
is( $node->safe_psql(
		'postgres',
		q{SELECT string_agg(tgrelid::regclass || ':' || tgname || ':' || tgfoid::regproc, ',' ORDER BY tgrelid::regclass::text) FROM pg_trigger WHERE tgrelid IN ('public.ledger'::regclass, 'public.sales_1'::regclass)}),
	'ledger:fencing_reject_stale:fencing.reject_stale,sales_1:fencing_reject_stale:fencing.reject_stale',
	'the protected tables carry only their fence triggers');

# What needs ownership stays with the owner.
role_fails('clerk', 'ALTER TABLE public.ledger DISABLE TRIGGER fencing_reject_stale',
	'42501', 'a role that does not own the table disables the trigger');
role_fails('clerk', 'DROP TRIGGER fencing_reject_stale ON public.ledger',
	'42501', 'a role that does not own the table drops the trigger');
role_fails('clerk', 'ALTER TABLE public.ledger ALTER COLUMN fence SET DEFAULT 0',
	'42501', 'a role that does not own the table gives the fence column a default');
role_fails('clerk', 'SET session_replication_role = replica',
	'42501', 'a role that is not superuser sets session_replication_role');

#
# 5. protect() must own each inheritance child it puts the trigger on.
#
$node->safe_psql(
	'postgres', q{
SET ROLE table_owner;
CREATE TABLE public.tree (id int, fence bigint);
CREATE TABLE public.tree_child () INHERITS (public.tree);
RESET ROLE;
ALTER TABLE public.tree_child OWNER TO stranger;
});
$err = role_fails('table_owner', q{SELECT fencing.protect('public.tree')},
	'42501', "protect() on a parent whose child another role owns");
like($err, qr/must be owner of table tree_child/, 'the message names the child');
is($node->safe_psql('postgres',
		q{SELECT count(*) FROM pg_trigger WHERE tgrelid IN ('public.tree'::regclass, 'public.tree_child'::regclass)}),
	'0', 'nothing was installed');

#
# 6. Logical replication applies changes as replica: the subscriber's ORIGIN
# fence trigger does not fire there (the escape hatch).
#
my $sub = PostgreSQL::Test::Cluster->new('subscriber');
$sub->init;
$sub->append_conf('postgresql.conf', "shared_preload_libraries = 'fencing'");
$sub->start;
$sub->safe_psql('postgres', q{
CREATE EXTENSION fencing;
CREATE TABLE replicated (id int PRIMARY KEY, note text, fence bigint);
SELECT fencing.protect('replicated');
});
$node->safe_psql('postgres', q{
CREATE TABLE replicated (id int PRIMARY KEY, note text, fence bigint);
CREATE PUBLICATION fence_pub FOR TABLE replicated;
});
my $connstr = $node->connstr . ' dbname=postgres';
$sub->safe_psql('postgres',
	"CREATE SUBSCRIPTION fence_sub CONNECTION '$connstr' PUBLICATION fence_pub");
ok( $sub->poll_query_until(
		'postgres', q{SELECT count(*) = 0 FROM pg_subscription_rel WHERE srsubstate NOT IN ('r', 's')}),
	'the subscription is in sync');
$node->safe_psql('postgres', q{INSERT INTO replicated VALUES (1, 'no token', NULL)});
ok( $sub->poll_query_until('postgres', q{SELECT count(*) = 1 FROM replicated WHERE note = 'no token'}),
	'a token-less row replicates into a protected table (apply runs as replica)');
$node->safe_psql('postgres', 'TRUNCATE replicated');
ok($sub->poll_query_until('postgres', 'SELECT count(*) = 0 FROM replicated'),
	'a replicated TRUNCATE empties it too');
my ($sret, $sout, $serr) = $sub->psql('postgres',
	q{INSERT INTO replicated VALUES (2, 'local', NULL)}, extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($serr, qr/ERROR:  FN001:/, 'while a local token-less write on the subscriber is refused');
$sub->safe_psql('postgres', 'DROP SUBSCRIPTION fence_sub');
$sub->stop;

#
# 7. A view's default on the fence column stands in for no token: any role
# may create a temporary view of a table it writes.
#
$node->safe_psql(
	'postgres', q{
SET ROLE table_owner;
CREATE TABLE public.ledger_v (id int PRIMARY KEY, amount int, fence bigint);
SELECT fencing.protect('public.ledger_v');
GRANT SELECT, INSERT, UPDATE, DELETE ON public.ledger_v TO holder;
RESET ROLE;
SELECT fencing.next_token();
});
$err = role_fails('holder',
	q{CREATE TEMP VIEW lv AS SELECT * FROM public.ledger_v;
	  ALTER VIEW lv ALTER COLUMN fence SET DEFAULT fencing.latest_token();},
	'42611', 'a writer gives its temporary view of a protected table a fence default');
like($err, qr/column "fence" of view pg_temp_\d+\.lv cannot have a default/,
	'the message names the view and its column');
like($err, qr/writes fence column "fence" of protected table public\.ledger_v/,
	'the detail names the protected table');
role_fails('holder',
	q{CREATE TEMP VIEW lv AS SELECT * FROM public.ledger_v;
	  INSERT INTO lv (id, amount) VALUES (1, 10);},
	'FN001', 'a token-less INSERT through the view');
is($node->safe_psql('postgres', 'SELECT count(*) FROM public.ledger_v'),
	'0', 'nothing was written');

$node->stop;
done_testing();
