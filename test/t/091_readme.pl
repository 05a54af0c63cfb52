# Copyright (c) 2026, the fencing developers

# The README's SQL must keep matching the extension.  Every ```sql block of
# README.md is run, in the order it appears, with psql against one
# throwaway server (the preload and nothing else), in one database, as a
# superuser, as a reader who pastes the blocks into psql one by one would.
#
# Conventions the README follows, so that a reader sees them too:
#   - a block whose first line starts with "-- fragment" is not meant to be
#     run as it stands (it uses names of the reader's own application) and
#     is skipped;
#   - a statement that is meant to fail carries "-- ERROR <SQLSTATE>" on its
#     line (or on the line after it).  Each block must raise exactly the
#     errors its annotations list, in that order, and no other.
# A block that errs where it should not, or does not err where it says it
# will, fails this test, naming the block's first line in README.md.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $root = $ENV{TESTDIR} // '.';
my $readme = slurp_file("$root/README.md");

# The blocks: (line number, text) for every ```sql fence.
my @blocks;
{
	my @lines = split /\n/, $readme, -1;
	my ($in, $start, @body);
	for my $i (0 .. $#lines)
	{
		my $line = $lines[$i];
		if (!$in && $line =~ /^```sql\s*$/)
		{
			($in, $start, @body) = (1, $i + 2);
		}
		elsif ($in && $line =~ /^```\s*$/)
		{
			push @blocks, [ $start, join("\n", @body) . "\n" ];
			$in = 0;
		}
		elsif ($in)
		{
			push @body, $line;
		}
	}
	BAIL_OUT('README.md ends inside a ```sql block') if $in;
}
cmp_ok(scalar(@blocks), '>=', 20, 'README.md has its SQL blocks');

my $node = PostgreSQL::Test::Cluster->new('readme');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'fencing'");
$node->start;
# A UTF-8 database whatever the environment's locale, as the README's
# normalisation examples assume; psql sends the README's UTF-8 as it is.
$node->safe_psql('postgres',
	"CREATE DATABASE readme TEMPLATE template0 ENCODING 'UTF8' LC_COLLATE 'C' LC_CTYPE 'C'");
$ENV{PGCLIENTENCODING} = 'UTF8';

my ($run, $skipped) = (0, 0);
foreach my $block (@blocks)
{
	my ($line, $sql) = @$block;
	if ($sql =~ /^\s*-- fragment/)
	{
		$skipped++;
		next;
	}
	$run++;

	my @expected = ($sql =~ /-- ERROR ([0-9A-Z]{5})\b/g);
	my ($stdout, $stderr) = ('', '');
	IPC::Run::run(
		[
			'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=0', '-v',
			'VERBOSITY=verbose', '-d', $node->connstr('readme')
		],
		'<', \$sql, '>', \$stdout, '2>', \$stderr);
	my @raised = ($stderr =~ /^(?:psql:\S+ )?ERROR:  ([0-9A-Z]{5}):/mg);
	my @psql_errors =
	  grep { !/^(?:ERROR:  [0-9A-Z]{5}:|(?:WARNING|NOTICE|INFO):  [0-9A-Z]{5}:|(?:DETAIL|HINT|LOCATION|CONTEXT|QUERY|STATEMENT):|(?:SCHEMA|TABLE|COLUMN|DATATYPE|CONSTRAINT) NAME:|LINE \d+:|\s)/ }
	  map { s/^psql:\S+ //r } grep { length } split /\n/, $stderr;

	is(join(' ', @raised), join(' ', @expected),
		"README.md line $line: the block raises exactly the errors it announces")
	  or diag("--- block ---\n$sql--- stderr ---\n$stderr");
	is(join("\n", @psql_errors), '',
		"README.md line $line: psql reports nothing else (syntax, meta-commands)")
	  or diag("--- block ---\n$sql--- stderr ---\n$stderr");
}
cmp_ok($run, '>=', 15, "ran $run README blocks ($skipped fragments skipped)");

$node->stop;
done_testing();
