
# Copyright (c) 2026, the fencing developers
#
# Updating a 1.0 database that is in use: 053 checks that the
# update builds the objects a fresh install builds, 052 that tokens survive
# restarts; this one runs ALTER EXTENSION fencing UPDATE on a database that
# holds what a 1.0 user had, while another session holds a lock, and checks:
#
# 1. every row and every resource fence is still there, and tokens continue
#    above every token issued before;
# 2. stale writes are still rejected on every protected table: a ledger, a
#    partitioned table and its partitions, an inheritance parent, its
#    children and grandchild (1.0 did not protect inheritance children; the
#    update must, as 1.1's protect() does), a table with a non-default fence
#    column in 'skip' mode, and the resource fences; fresh writes pass;
# 3. a lease held across the update keeps its token and its exclusion;
# 4. every role keeps exactly its rights on every object of 1.0, also on the
#    views and functions the update drops and creates again, except that a
#    role that had check_fence only through PUBLIC loses it (DESIGN.md F9)
#    while a role it was granted to keeps it;
# 5. pg_dump of the updated database restores into a new database with the
#    rows, the fences and the triggers (children included) intact; that the
#    rights are the same there is a TODO: grants that existed when the
#    update ran on an object it grants or revokes on become the extension's
#    initial privileges, which pg_dump leaves out;
# 6. a second ALTER EXTENSION fencing UPDATE changes nothing, and neither
#    the update nor DROP EXTENSION leaves stray objects behind.
#
# The server runs the current library from the start (a 1.0 database after
# the package upgrade and restart).  Tables are protected by 1.0's
# fencing.protect() where the current library does what 1.0's did; on the
# inheritance parent, the test runs the one statement 1.0's protect() ran
# (protect() of 1.0's library), because the current library's protect()
# also protects the children, which 1.0's never did.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('upgrade_data');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'fencing'");
$node->start;

my $current = $node->safe_psql('postgres',
	"SELECT default_version FROM pg_available_extensions WHERE name = 'fencing'");

# Every protected table of the test: its fence column, whether a stale
# write leaves the row alone silently ('skip') instead of failing, and a
# column a writer changes (the partitioned parent holds no rows itself).
my @protected = (
	[ 'ledger', 'fence', 'error', 'amount' ],
	[ 'events', 'fence', 'error', undef ],
	[ 'events_eu', 'fence', 'error', 'payload' ],
	[ 'events_us', 'fence', 'error', 'payload' ],
	[ 'accounts', 'fence', 'error', 'balance' ],
	[ 'accounts_eu', 'fence', 'error', 'balance' ],
	[ 'accounts_us', 'fence', 'error', 'balance' ],
	[ 'accounts_eu_vip', 'fence', 'error', 'balance' ],
	[ 'jobs', 'epoch', 'skip', 'state' ],);

# Run SQL in database $db as $role; returns (exit code, stdout, stderr).
sub run_as
{
	my ($db, $role, $sql) = @_;
	my ($stdout, $stderr);
	my $ret = $node->psql(
		$db, "SET ROLE $role;\n$sql",
		stdout => \$stdout,
		stderr => \$stderr,
		extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	return ($ret, $stdout, $stderr);
}

# Run SQL as $role in one transaction that holds the lock on $name and has
# its token in fencing.token; returns the token.
sub write_under_lock
{
	my ($db, $role, $name, $sql, $label) = @_;
	my ($ret, $stdout, $stderr) = run_as($db, $role,
		"BEGIN;
		 SELECT set_config('fencing.token', fencing.try_lock('$name')::text, true);
		 $sql;
		 COMMIT;");
	is($ret, 0, "$label: succeeds") or diag $stderr;
	return (split /\n/, $stdout // '')[0];
}

# Every row of every protected table and every resource fence, one line
# each, so that two states compare as strings.
my $contents = <<'SQL';
SELECT 'ledger ' || l::text FROM ONLY ledger l
UNION ALL SELECT tableoid::regclass::text || ' ' || e::text FROM events e
UNION ALL SELECT tableoid::regclass::text || ' ' || a::text FROM accounts a
UNION ALL SELECT 'jobs ' || j::text FROM jobs j
UNION ALL SELECT 'resource ' || resource || ' ' || fence FROM fencing.resource_fences
ORDER BY 1
SQL

# The fence trigger of each table: name, definition and whether it fires.
my $triggers = <<'SQL';
SELECT c.relname || ': ' || coalesce(
         (SELECT string_agg(t.tgname || ' ' || t.tgenabled::text || ' ' ||
                            regexp_replace(pg_get_triggerdef(t.oid), ' ON \S+', ''), '; ')
            FROM pg_trigger t
           WHERE t.tgrelid = c.oid AND t.tgfoid = 'fencing.reject_stale()'::regprocedure),
         'none')
  FROM pg_class c
 WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'p')
 ORDER BY 1
SQL

#
# The 1.0 database.
#
$node->safe_psql('postgres', q{
CREATE ROLE app_owner;
CREATE ROLE writer;
CREATE ROLE reader;
CREATE ROLE monitor;
CREATE DATABASE app OWNER app_owner;
});
$node->safe_psql('app', "CREATE EXTENSION fencing VERSION '1.0'");
is($node->safe_psql('app', "SELECT extversion FROM pg_extension WHERE extname = 'fencing'"),
	'1.0', 'the database starts at 1.0');

# Grants a 1.0 administrator made: check_fence to the workers (PUBLIC had
# it in 1.0), advance_token to the owner, and the lock view and status()
# for monitoring only, taken away from PUBLIC, and leases for the workers
# only (lease is replaced by a three-argument function in 1.1).
$node->safe_psql('app', q{
GRANT CREATE ON SCHEMA public TO app_owner;
GRANT EXECUTE ON FUNCTION fencing.check_fence(text, bigint) TO writer;
GRANT EXECUTE ON FUNCTION fencing.advance_token(bigint) TO app_owner WITH GRANT OPTION;
REVOKE SELECT ON fencing.locks FROM PUBLIC;
GRANT SELECT ON fencing.locks TO monitor;
REVOKE EXECUTE ON FUNCTION fencing.status() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION fencing.status() TO monitor;
GRANT SELECT ON fencing.stats TO monitor;
REVOKE EXECUTE ON FUNCTION fencing.lease(text, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION fencing.lease(text, interval) TO writer;
});

# A token issued before every write: stale for every row written below.
my $stale = $node->safe_psql('app', 'SELECT fencing.next_token()');

my ($ret, $stdout, $stderr) = run_as('app', 'app_owner', q{
CREATE TABLE ledger (id int PRIMARY KEY, account text NOT NULL, amount numeric NOT NULL, fence bigint);
SELECT fencing.protect('ledger');

CREATE TABLE events (id int, region text NOT NULL, payload text, fence bigint,
                     PRIMARY KEY (id, region)) PARTITION BY LIST (region);
CREATE TABLE events_eu PARTITION OF events FOR VALUES IN ('eu');
CREATE TABLE events_us PARTITION OF events FOR VALUES IN ('us');
SELECT fencing.protect('events');

CREATE TABLE accounts (id int PRIMARY KEY, holder text NOT NULL, balance numeric NOT NULL, fence bigint);
CREATE TABLE accounts_eu (vat text) INHERITS (accounts);
CREATE TABLE accounts_us () INHERITS (accounts);
CREATE TABLE accounts_eu_vip (tier int) INHERITS (accounts_eu);
-- what 1.0's fencing.protect('accounts') ran: the parent alone
CREATE OR REPLACE TRIGGER fencing_reject_stale BEFORE INSERT OR UPDATE OR DELETE ON public.accounts
  FOR EACH ROW EXECUTE FUNCTION fencing.reject_stale('fence', 'error');

CREATE TABLE jobs (id int PRIMARY KEY, state text NOT NULL, epoch bigint);
SELECT fencing.protect('jobs', 'epoch', 'skip');

GRANT SELECT, INSERT, UPDATE, DELETE ON ledger, events, events_eu, events_us, accounts, accounts_eu,
      accounts_us, accounts_eu_vip, jobs TO writer;
GRANT SELECT ON ledger, events, accounts, jobs TO reader;
});
is($ret, 0, '1.0 tables created and protected') or diag $stderr;

is( $node->safe_psql('app', $triggers),
	join("\n",
		'accounts: fencing_reject_stale O CREATE TRIGGER fencing_reject_stale BEFORE INSERT OR DELETE OR UPDATE FOR EACH ROW EXECUTE FUNCTION fencing.reject_stale(\'fence\', \'error\')',
		'accounts_eu: none',
		'accounts_eu_vip: none',
		'accounts_us: none',
		map({ "$_: fencing_reject_stale O CREATE TRIGGER fencing_reject_stale BEFORE INSERT OR DELETE OR UPDATE FOR EACH ROW EXECUTE FUNCTION fencing.reject_stale('fence', 'error')" }
			qw(events events_eu events_us)),
		'jobs: fencing_reject_stale O CREATE TRIGGER fencing_reject_stale BEFORE INSERT OR DELETE OR UPDATE FOR EACH ROW EXECUTE FUNCTION fencing.reject_stale(\'epoch\', \'skip\')',
		'ledger: fencing_reject_stale O CREATE TRIGGER fencing_reject_stale BEFORE INSERT OR DELETE OR UPDATE FOR EACH ROW EXECUTE FUNCTION fencing.reject_stale(\'fence\', \'error\')'),
	'the 1.0 state: the inheritance children carry no fence trigger');

# Rows written under tokens, as 1.0 workers wrote them.  Inheritance
# children had no trigger to stamp the fence, so their writers assigned it.
my $t_ledger = write_under_lock('app', 'writer', 'ledger',
	"INSERT INTO ledger VALUES (1, 'alice', 100), (2, 'bob', 200), (3, 'carol', 300)",
	'1.0 ledger rows');
my $t_events = write_under_lock('app', 'writer', 'events',
	"INSERT INTO events VALUES (1, 'eu', 'a'), (2, 'us', 'b'), (3, 'eu', 'c')",
	'1.0 partitioned rows');
my $t_accounts = write_under_lock('app', 'writer', 'accounts',
	"INSERT INTO accounts VALUES (1, 'parent', 10, current_setting('fencing.token')::bigint);
	 INSERT INTO accounts_eu VALUES (2, 'eu', 20, current_setting('fencing.token')::bigint, 'DE1');
	 INSERT INTO accounts_us VALUES (3, 'us', 30, current_setting('fencing.token')::bigint);
	 INSERT INTO accounts_eu_vip VALUES (4, 'vip', 40, current_setting('fencing.token')::bigint, 'FR2', 1)",
	'1.0 inheritance rows');
my $t_jobs = write_under_lock('app', 'writer', 'jobs',
	"INSERT INTO jobs VALUES (1, 'queued'), (2, 'running')", '1.0 jobs rows');
my $t_invoice = write_under_lock('app', 'writer', 'invoice-run:2026-10',
	"SELECT fencing.check_fence('invoice-run:2026-10', current_setting('fencing.token')::bigint)",
	'1.0 resource fence');
write_under_lock('app', 'writer', 'export',
	"SELECT fencing.check_fence('export', current_setting('fencing.token')::bigint)",
	'1.0 second resource fence');
for my $t ($t_ledger, $t_events, $t_accounts, $t_jobs, $t_invoice)
{
	cmp_ok($t // 0, '>', $stale, 'each write ran under a token above the stale one');
}

# Under 1.0 a stale write to an inheritance child went through: the bypass
# the update must close.  (Rolled back: only whether it is refused counts.)
($ret, $stdout, $stderr) = run_as('app', 'writer',
	"BEGIN; SET LOCAL fencing.token = $stale;
	 UPDATE accounts_eu SET balance = 0 WHERE id = 2; ROLLBACK;");
is($ret, 0, 'before the update, a stale write to an inheritance child is not refused');

# Rights of every role on every object of 1.0, before and after.  1.1
# replaces lease(text, interval) by lease(text, interval, interval DEFAULT
# NULL): the rights on the old one are looked up on its successor.
my $members = $node->safe_psql('app', q{
SELECT string_agg(quote_literal(pg_describe_object(classid, objid, 0)) || ',' ||
                  quote_literal(CASE classid WHEN 'pg_proc'::regclass THEN objid::regprocedure::text
                                             ELSE objid::regclass::text END) || ',' ||
                  quote_literal(classid::regclass::text), '), (')
  FROM pg_depend
 WHERE refclassid = 'pg_extension'::regclass AND deptype = 'e'
   AND refobjid = (SELECT oid FROM pg_extension WHERE extname = 'fencing')
   AND classid IN ('pg_proc'::regclass, 'pg_class'::regclass)
});
my $rights = <<"SQL";
SELECT r.rolname || ' ' || o.obj || ' ' || p.priv || ' ' ||
       CASE WHEN o.kind = 'pg_proc' AND to_regprocedure(o.ident) IS NULL THEN 'missing'
            WHEN o.kind = 'pg_proc' THEN has_function_privilege(r.rolname, o.ident, p.priv)::text
            WHEN to_regclass(o.ident) IS NULL THEN 'missing'
            ELSE has_table_privilege(r.rolname, o.ident, p.priv)::text END
  FROM (SELECT obj, kind,
               CASE WHEN ident = 'fencing.lease(text,interval)'
                         AND to_regprocedure(ident) IS NULL
                    THEN 'fencing.lease(text,interval,interval)' ELSE ident END AS ident
          FROM (VALUES ($members)) v(obj, ident, kind)) o
  JOIN (VALUES ('pg_proc', 'EXECUTE'), ('pg_proc', 'EXECUTE WITH GRANT OPTION'),
               ('pg_class', 'SELECT'), ('pg_class', 'INSERT'), ('pg_class', 'UPDATE'),
               ('pg_class', 'DELETE'), ('pg_class', 'SELECT WITH GRANT OPTION')) p(kind, priv)
       USING (kind)
 CROSS JOIN (VALUES ('app_owner'), ('writer'), ('reader'), ('monitor')) r(rolname)
 ORDER BY 1
SQL
my $rights_1_0 = $node->safe_psql('app', $rights);
like($rights_1_0, qr/^monitor view fencing.locks SELECT true$/m, 'monitor reads fencing.locks');
like($rights_1_0, qr/^writer view fencing.locks SELECT false$/m, 'PUBLIC does not');

#
# A worker holds a lease and has written under it when the update runs.
#
my $holder = $node->background_psql('app');
$holder->query_safe('SET ROLE writer');
$holder->query_safe('BEGIN');
my $t_holder = $holder->query_safe("SELECT fencing.lease('nightly-job', '10min')");
$holder->query_safe("SET LOCAL fencing.token = $t_holder");
$holder->query_safe("UPDATE ledger SET amount = amount + 1 WHERE id = 3");

my $contents_1_0 = $node->safe_psql('app', $contents);
my $latest_1_0 = $node->safe_psql('app', 'SELECT fencing.latest_token()');

#
# The update.
#
($ret, $stdout, $stderr) = $node->psql('app', 'ALTER EXTENSION fencing UPDATE');
is($ret, 0, 'ALTER EXTENSION fencing UPDATE with data and a lock held') or diag $stderr;
is($node->safe_psql('app', "SELECT extversion FROM pg_extension WHERE extname = 'fencing'"),
	$current, "the database is at $current");

# 3. The holder keeps its lock and its token, and finishes its write.
is($holder->query_safe("SELECT fencing.held_token('nightly-job')"), $t_holder,
	'the holder keeps its token across the update');
is($node->safe_psql('app', "SELECT fencing.try_lock('nightly-job') IS NULL"),
	't', 'the lock held across the update still excludes others');
is( $node->safe_psql('app',
		"SELECT mode || ' ' || token FROM fencing.locks WHERE name = 'nightly-job'"),
	"exclusive $t_holder",
	"the $current view shows the lock held across the update");
$holder->query_safe('COMMIT');
$holder->quit;
$contents_1_0 =~ s/^(ledger \(3,carol,)300,\d+\)$/${1}301,$t_holder)/m;

# 1. Rows, fences, tokens.
is($node->safe_psql('app', $contents), $contents_1_0,
	'every row and every resource fence is still there');
cmp_ok($node->safe_psql('app', 'SELECT fencing.next_token()'), '>', $latest_1_0,
	'tokens continue above every token issued before the update');

# The fence triggers: the children now follow their parent's fence.
my $triggers_after = $node->safe_psql('app', $triggers);
for my $table (@protected)
{
	my ($name, $column, $mode) = @$table;
	like($triggers_after,
		qr/^$name: fencing_reject_stale O CREATE TRIGGER fencing_reject_stale BEFORE INSERT OR DELETE OR UPDATE FOR EACH ROW EXECUTE FUNCTION fencing.reject_stale\('$column', '$mode'\)$/m,
		"$name carries the fence trigger with column $column and mode $mode");
}

# 2. Stale writes are refused on every protected table, in the updated
# database and (below) in its restored dump.
sub check_stale_writes
{
	my ($db, $label, $fence_role) = @_;

	for my $table (@protected)
	{
		my ($name, $column, $mode, $data) = @$table;
		next unless defined $data;
		for my $write ("UPDATE ONLY $name SET $data = $data", "DELETE FROM ONLY $name")
		{
			my $before = $node->safe_psql($db, "SELECT count(*), sum(hashtext(t::text)) FROM ONLY $name t");
			($ret, $stdout, $stderr) = run_as($db, 'writer',
				"BEGIN; SET LOCAL fencing.token = $stale; $write; COMMIT;");
			if ($mode eq 'error')
			{
				isnt($ret, 0, "$label: stale \"$write\" is refused");
				like($stderr, qr/ERROR:  FN001: stale fence token $stale for table \S*\b$name\b/,
					"$label: stale \"$write\" fails with FN001 naming the table");
			}
			else
			{
				is($ret, 0, "$label: stale \"$write\" does not fail") or diag $stderr;
			}
			is($node->safe_psql($db, "SELECT count(*), sum(hashtext(t::text)) FROM ONLY $name t"),
				$before, "$label: stale \"$write\" changes no row of $name");
		}
	}
	# through the parents, into the partitions' and children's rows
	($ret, $stdout, $stderr) = run_as($db, 'writer',
		"BEGIN; SET LOCAL fencing.token = $stale; UPDATE events SET payload = 'x' WHERE id = 2; COMMIT;");
	like($stderr, qr/FN001: stale fence token $stale for table \S*\bevents_us\b/,
		"$label: a stale write through the partitioned table to a partition's row is refused");
	($ret, $stdout, $stderr) = run_as($db, 'writer',
		"BEGIN; SET LOCAL fencing.token = $stale; UPDATE accounts SET balance = 0 WHERE id = 4; COMMIT;");
	like($stderr, qr/FN001: stale fence token $stale for table \S*\baccounts_eu_vip\b/,
		"$label: a stale write through the parent to a grandchild's row is refused");
	($ret, $stdout, $stderr) = run_as($db, $fence_role,
		"SELECT fencing.check_fence('invoice-run:2026-10', $stale)");
	like($stderr, qr/FN001: stale fence token $stale for resource "invoice-run:2026-10"/,
		"$label: a stale token is refused at the resource fence");
}
check_stale_writes('app', 'updated', 'writer');

# Fresh writes pass, and the fences move up to their token.
my $t_fresh = write_under_lock('app', 'writer', 'after update',
	"UPDATE ledger SET amount = amount + 1;
	 UPDATE events SET payload = payload || '!';
	 UPDATE accounts SET balance = balance + 1;
	 UPDATE jobs SET state = 'done', epoch = current_setting('fencing.token')::bigint;
	 SELECT fencing.check_fence('invoice-run:2026-10', current_setting('fencing.token')::bigint)",
	'fresh writes to every protected table after the update');
cmp_ok($t_fresh // 0, '>', $latest_1_0, 'the fresh token is above every 1.0 token');
$t_fresh //= 0;
is( $node->safe_psql('app', qq{
SELECT (SELECT count(*) FROM ledger WHERE fence = $t_fresh) || ' ' ||
       (SELECT count(*) FROM events WHERE fence = $t_fresh) || ' ' ||
       (SELECT count(*) FROM accounts WHERE fence = $t_fresh) || ' ' ||
       (SELECT count(*) FROM jobs WHERE epoch = $t_fresh) || ' ' ||
       (SELECT fence FROM fencing.resource_fences WHERE resource = 'invoice-run:2026-10')
}),
	"3 3 4 2 $t_fresh", 'the fresh token is every written row\'s fence');

# 4. Rights.  A role that had check_fence through PUBLIC loses it; the role
# it was granted to keeps it; nothing else changes.
my $rights_expected = $rights_1_0;
$rights_expected =~
  s/^((?:app_owner|reader|monitor) function fencing.check_fence\(text,bigint\) EXECUTE) true$/$1 false/mg;
is($node->safe_psql('app', $rights), $rights_expected,
	'every role keeps exactly its rights, but check_fence is no longer PUBLIC\'s');
like($rights_expected, qr/^writer function fencing.check_fence\(text,bigint\) EXECUTE true$/m,
	'the role check_fence was granted to keeps it');
($ret, $stdout, $stderr) = run_as('app', 'reader', "SELECT fencing.check_fence('export', fencing.next_token())");
like($stderr, qr/ERROR:  42501: permission denied for function check_fence/,
	'a role that had check_fence through PUBLIC is refused it after the update');

#
# 6. A second update is a no-op; nothing is left outside the extension.
#
my $stray = q{
SELECT pg_describe_object(classid, objid, 0) FROM (
  SELECT 'pg_class'::regclass AS classid, oid AS objid FROM pg_class WHERE relnamespace = 'fencing'::regnamespace
  UNION ALL SELECT 'pg_proc'::regclass, oid FROM pg_proc WHERE pronamespace = 'fencing'::regnamespace
  UNION ALL SELECT 'pg_type'::regclass, oid FROM pg_type
             WHERE typnamespace = 'fencing'::regnamespace AND typrelid = 0 AND typelem = 0) o
 WHERE NOT EXISTS (SELECT FROM pg_depend d
                    WHERE d.classid = o.classid AND d.objid = o.objid AND d.deptype IN ('e', 'i', 'a'))
UNION ALL
SELECT 'init privs of a missing object ' || objoid FROM pg_init_privs i
 WHERE (classoid = 'pg_class'::regclass AND NOT EXISTS (SELECT FROM pg_class WHERE oid = objoid))
    OR (classoid = 'pg_proc'::regclass AND NOT EXISTS (SELECT FROM pg_proc WHERE oid = objoid))
ORDER BY 1
};
is($node->safe_psql('app', $stray), '', 'the update leaves no object outside the extension');
my $objects = q{
SELECT pg_describe_object(classid, objid, objsubid) FROM pg_depend
 WHERE refobjid = (SELECT oid FROM pg_extension WHERE extname = 'fencing') ORDER BY 1
};
my $objects_before = $node->safe_psql('app', $objects);
($ret, $stdout, $stderr) = $node->psql('app', 'ALTER EXTENSION fencing UPDATE');
is($ret, 0, 'a second ALTER EXTENSION fencing UPDATE succeeds');
like($stderr, qr/version "\Q$current\E" of extension "fencing" is already installed/,
	'and says the extension is already up to date');
is($node->safe_psql('app', $objects), $objects_before, 'the second update changes no object');
is($node->safe_psql('app', $rights), $rights_expected, 'nor any right');

#
# 5. pg_dump of the updated database restores with its fences.
#
my $dump = $node->basedir . '/app.dump';
$node->command_ok(
	[ 'pg_dump', '-Fc', '-f', $dump, '-d', $node->connstr('app') ],
	'pg_dump of the updated database');
$node->safe_psql('postgres', 'CREATE DATABASE restored OWNER app_owner');
$node->command_ok(
	[ 'pg_restore', '--exit-on-error', '-d', $node->connstr('restored'), $dump ],
	'pg_restore into a new database');
is($node->safe_psql('restored', $contents), $node->safe_psql('app', $contents),
	'the restored database holds every row and every resource fence');
is($node->safe_psql('restored', $triggers), $node->safe_psql('app', $triggers),
	'the restored database has the same fence triggers, children included');
# The restored database lacks writer's grant on check_fence (below), so
# the resource fence is checked there by the superuser.
check_stale_writes('restored', 'restored', 'NONE');
TODO:
{
	local $TODO =
	  'PostgreSQL records the GRANTs and REVOKEs that ALTER EXTENSION UPDATE runs as the extension\'s initial privileges (pg_init_privs), with every grant the object had then, and pg_dump leaves initial privileges out';
	is($node->safe_psql('restored', $rights), $rights_expected,
		'every role has the same rights in the restored database');
}

#
# What stops the update, which then names it, and leaves the database at
# 1.0: a view of the database's own on a view whose columns change, and a
# child that 1.1 cannot fence, here for a fence column with a default (1.0
# allowed one; the child inherits it).
#
$node->safe_psql('postgres', 'CREATE DATABASE blocked');
$node->safe_psql('blocked', q{
CREATE EXTENSION fencing VERSION '1.0';
CREATE VIEW my_locks AS SELECT name, pid FROM fencing.locks;
CREATE FUNCTION my_status() RETURNS bigint LANGUAGE sql
  BEGIN ATOMIC SELECT latest_token FROM fencing.status(); END;
CREATE TABLE parent (id int PRIMARY KEY, fence bigint DEFAULT 0);
CREATE TABLE child () INHERITS (parent);
CREATE OR REPLACE TRIGGER fencing_reject_stale BEFORE INSERT OR UPDATE OR DELETE ON public.parent
  FOR EACH ROW EXECUTE FUNCTION fencing.reject_stale('fence', 'error');
});
($ret, $stdout, $stderr) = $node->psql('blocked', 'ALTER EXTENSION fencing UPDATE',
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
isnt($ret, 0, 'the update fails while a view of the database uses fencing.locks');
like($stderr,
	qr/ERROR:  2BP01: cannot update extension fencing: other objects use views or functions whose columns change\nDETAIL:  The update drops and creates again fencing.locks, fencing.stats, fencing.status\(\) and fencing.lease\(text, interval\), which are used by: function (?:public\.)?my_status\(\), view (?:public\.)?my_locks\.\nHINT:  Drop those objects/,
	'and names the objects of the database that use them, with what to do');
$node->safe_psql('blocked', 'DROP VIEW my_locks; DROP FUNCTION my_status()');
($ret, $stdout, $stderr) = $node->psql('blocked', 'ALTER EXTENSION fencing UPDATE',
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
isnt($ret, 0, 'the update fails on a child that cannot be fenced');
like($stderr,
	qr/ERROR:  42611: fencing.protect\(\): fence column "fence" of table public.child has a default/,
	'and names the child and why');
is($node->safe_psql('blocked', "SELECT extversion FROM pg_extension WHERE extname = 'fencing'"),
	'1.0', 'the database stays at 1.0');
$node->safe_psql('blocked', q{
ALTER TABLE parent ALTER COLUMN fence DROP DEFAULT;
ALTER TABLE child ALTER COLUMN fence DROP DEFAULT;
ALTER EXTENSION fencing UPDATE;
});
like($node->safe_psql('blocked', $triggers),
	qr/^child: fencing_reject_stale O CREATE TRIGGER/m,
	'once the default is dropped, the update protects the child');

#
# DROP EXTENSION after the update: the triggers go with it (CASCADE), the
# tables and rows stay, and nothing of the extension is left (but the empty
# schema, which CREATE EXTENSION made and DROP EXTENSION leaves after a
# fresh install too).
#
($ret, $stdout, $stderr) = $node->psql('app', 'DROP EXTENSION fencing');
like($stderr, qr/cannot drop extension fencing because other objects depend on it/,
	'DROP EXTENSION without CASCADE refuses while tables are protected');
my $rows_before_drop = $node->safe_psql('app',
	"SELECT line FROM ($contents) c(line) WHERE line NOT LIKE 'resource %'");
$node->safe_psql('app', 'DROP EXTENSION fencing CASCADE');
is( $node->safe_psql('app', q{
SELECT (SELECT count(*) FROM pg_class WHERE relnamespace = 'fencing'::regnamespace) +
       (SELECT count(*) FROM pg_proc WHERE pronamespace = 'fencing'::regnamespace) +
       (SELECT count(*) FROM pg_type WHERE typnamespace = 'fencing'::regnamespace) || ' ' ||
       (SELECT count(*) FROM pg_trigger WHERE tgname = 'fencing_reject_stale') || ' ' ||
       (SELECT count(*) FROM pg_init_privs i WHERE NOT EXISTS (SELECT FROM pg_proc WHERE oid = i.objoid)
                                              AND NOT EXISTS (SELECT FROM pg_class WHERE oid = i.objoid)
                                              AND NOT EXISTS (SELECT FROM pg_namespace WHERE oid = i.objoid)
                                              AND NOT EXISTS (SELECT FROM pg_type WHERE oid = i.objoid))
}), '0 0 0', 'DROP EXTENSION leaves no object in schema fencing, no trigger and no initial privileges behind');
is($node->safe_psql('app',
		"SELECT line FROM (" . ($contents =~ s/UNION ALL SELECT 'resource .*\n//r) . ") c(line)"),
	$rows_before_drop, 'the tables and their rows stay');

$node->stop;
done_testing();
