
# Copyright (c) 2026, the fencing developers
#
# 036_lock_prepared.pl -- PREPARE TRANSACTION and fencing locks, on a
# server with max_prepared_transactions > 0 (sql/hardening.sql and
# sql/locks.sql show the refusals, which do not depend on that setting;
# make installcheck runs them on servers where it is usually 0).  A
# transaction that holds a fencing lock cannot be prepared (0A000, and it is
# rolled back, its lock free); one without fencing locks, or whose lock a
# ROLLBACK TO SAVEPOINT released, can, tokens drawn or not; a lock kept by
# RELEASE SAVEPOINT blocks it.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('prepared');
$node->init;
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'fencing'\nmax_prepared_transactions = 5");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION fencing');
$node->safe_psql('postgres', 'CREATE TABLE t (id int PRIMARY KEY, v int)');
my $start = $node->safe_psql('postgres', 'SELECT fencing.next_token()');

# Run one script; return the SQLSTATE of its PREPARE TRANSACTION ('' when
# it succeeded).
sub prepare_state
{
	my ($script) = @_;
	my ($out, $err);
	$node->psql('postgres', "$script\n\\echo state=:LAST_ERROR_SQLSTATE",
		stdout => \$out, stderr => \$err, on_error_stop => 0);
	my ($state) = $out =~ /state=(\S+)/;
	return $state // '';
}

sub prepared
{
	return $node->safe_psql('postgres',
		'SELECT coalesce(string_agg(gid, \',\' ORDER BY gid), \'\') FROM pg_prepared_xacts');
}

is(prepare_state("BEGIN;\nSELECT fencing.try_lock('prepared');\nPREPARE TRANSACTION 'with_lock';"),
	'0A000', 'a transaction holding a fencing lock is not prepared (0A000)');
is(prepare_state("BEGIN;\nSELECT fencing.lease('prepared', '1 min');\nPREPARE TRANSACTION 'with_lease';"),
	'0A000', 'nor one holding a lease');
is(prepared(), '', 'neither was prepared');
is($node->safe_psql('postgres', "SELECT count(*) FROM fencing.locks WHERE name = 'prepared'"),
	'0', 'and the lock is free again');

is(prepare_state("BEGIN;\nSELECT fencing.next_token();\nINSERT INTO t VALUES (100, 1);\nPREPARE TRANSACTION 'without_lock';"),
	'00000', 'a transaction that drew tokens but holds no fencing lock is prepared');
is(prepared(), 'without_lock', 'it is in pg_prepared_xacts');
$node->safe_psql('postgres', "COMMIT PREPARED 'without_lock'");
is($node->safe_psql('postgres', 'SELECT v FROM t WHERE id = 100'), '1',
	'COMMIT PREPARED applied its write');

is(prepare_state("BEGIN;\nSAVEPOINT s;\nSELECT fencing.try_lock('prepared');\nROLLBACK TO SAVEPOINT s;\nPREPARE TRANSACTION 'after_savepoint';"),
	'00000', 'a lock released by ROLLBACK TO SAVEPOINT no longer blocks PREPARE');
is(prepared(), 'after_savepoint', 'it is in pg_prepared_xacts');
$node->safe_psql('postgres', "ROLLBACK PREPARED 'after_savepoint'");

is(prepare_state("BEGIN;\nSAVEPOINT s;\nSELECT fencing.try_lock('prepared');\nRELEASE SAVEPOINT s;\nPREPARE TRANSACTION 'after_release';"),
	'0A000', 'a lock kept by RELEASE SAVEPOINT blocks PREPARE');
is(prepared(), '', 'nothing left prepared');
cmp_ok($node->safe_psql('postgres', 'SELECT fencing.next_token()'), '>', $start,
	'tokens keep increasing');

$node->stop;
done_testing();
