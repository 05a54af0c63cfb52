
# Copyright (c) 2026, the fencing developers
#
# 016_not_preloaded.pl -- without shared_preload_libraries = 'fencing',
# CREATE EXTENSION and every call fail with SQLSTATE FN003, a message naming
# the setting and a hint saying what to add and that a restart is needed.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

# Check one failed psql call for the not-preloaded error.
sub check_not_preloaded
{
	my ($what, $ret, $stderr) = @_;

	isnt($ret, 0, "$what: fails");
	like($stderr, qr/ERROR:\s+FN003:/, "$what: SQLSTATE FN003");
	like($stderr, qr/shared_preload_libraries/, "$what: message names shared_preload_libraries");
	like($stderr, qr/HINT:.*Add 'fencing' to shared_preload_libraries/,
		"$what: hint says to add 'fencing'");
	like($stderr, qr/HINT:.*restart/, "$what: hint says a restart is needed");
	return;
}

my @verbose = (extra_params => [ '-v', 'VERBOSITY=verbose' ]);

# A server that never preloaded the library.
my $plain = PostgreSQL::Test::Cluster->new('plain');
$plain->init;
$plain->start;

my ($ret, $stdout, $stderr) =
  $plain->psql('postgres', 'CREATE EXTENSION fencing', @verbose);
check_not_preloaded('CREATE EXTENSION without preload', $ret, $stderr);
is($plain->safe_psql('postgres',
		"SELECT count(*) FROM pg_extension WHERE extname = 'fencing'"),
	'0', 'the extension was not created');
is($plain->safe_psql('postgres',
		"SELECT count(*) FROM pg_namespace WHERE nspname = 'fencing'"),
	'0', 'no schema fencing left behind');
$plain->stop;

# A server with the extension created under the preload, restarted without
# it: every call raises the same error, and again on a second call in the
# same session (a failed load is not remembered).
my $node = PostgreSQL::Test::Cluster->new('was_preloaded');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'fencing'");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION fencing');
my $before = $node->safe_psql('postgres', 'SELECT fencing.next_token()');
like($before, qr/^\d+$/, 'tokens are served while preloaded');

$node->adjust_conf('postgresql.conf', 'shared_preload_libraries', "''");
$node->restart;
is($node->safe_psql('postgres', 'SHOW shared_preload_libraries'),
	'', 'restarted without the preload');

foreach my $call ('SELECT fencing.next_token()',
	'SELECT fencing.latest_token()',
	'SELECT fencing.advance_token(1)',
	'SELECT * FROM fencing.status()',
	'SELECT * FROM fencing.stats')
{
	($ret, $stdout, $stderr) = $node->psql('postgres', $call, @verbose);
	check_not_preloaded("$call without preload", $ret, $stderr);
	is($stdout, '', "$call without preload: no result");
}

($ret, $stdout, $stderr) = $node->psql('postgres',
	"SELECT fencing.next_token();\nSELECT fencing.next_token();",
	@verbose, on_error_stop => 0);
my @errors = ($stderr =~ /ERROR:\s+FN003:/g);
is(scalar @errors, 2, 'a second call in the same session fails the same way');
is($stdout, '', 'no token from either call');

# Preloaded again, tokens continue above the ones served before.
$node->adjust_conf('postgresql.conf', 'shared_preload_libraries', "'fencing'");
$node->restart;
my $after = $node->safe_psql('postgres', 'SELECT fencing.next_token()');
cmp_ok($after, '>', $before, 'preloaded again: tokens continue above');
$node->stop;

done_testing();
