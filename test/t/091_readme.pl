# Copyright (c) 2026, the fencing developers

# The documentation's SQL must keep matching the extension.  Every ```sql
# block of README.md and of doc/*.md is run with psql against one throwaway
# server (the preload and nothing else), as a superuser, as a reader who
# pastes the blocks into psql one by one would: each page in a database of
# its own, its blocks in the order they appear.  README.md runs twice in
# the same database, because a reader may walk through it twice: its
# second pass must raise exactly the errors the first does.
#
# Conventions the pages follow, so that a reader sees them too:
#   - a block whose first line starts with "-- fragment" is not meant to be
#     run as it stands (it uses names of the reader's own application) and
#     is skipped;
#   - a statement that is meant to fail carries "-- ERROR <SQLSTATE>" on its
#     line (or on the line after it).  Each block must raise exactly the
#     errors its annotations list, in that order, and no other.
# A block that errs where it should not, or does not err where it says it
# will, fails this test, naming its page and the block's first line.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $root = $ENV{TESTDIR} // '.';

# The blocks of one page: (line number, text) for every ```sql fence.
sub sql_blocks
{
	my ($file) = @_;
	my @lines = split /\n/, slurp_file("$root/$file"), -1;
	my ($in, $start, @body, @blocks);
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
	BAIL_OUT("$file ends inside a ```sql block") if $in;
	return @blocks;
}

my @pages = ('README.md', map { s{^\Q$root\E/}{}r } sort glob("$root/doc/*.md"));
cmp_ok(scalar(@pages), '>=', 8, 'README.md and the pages of doc/');
my %blocks = map { $_ => [ sql_blocks($_) ] } @pages;
cmp_ok(scalar(@{ $blocks{'README.md'} }), '>=', 5, 'README.md has its SQL blocks');
cmp_ok(scalar(@{ $blocks{'doc/reference.md'} // [] }), '>=', 20, 'doc/reference.md has its SQL blocks');

my $node = PostgreSQL::Test::Cluster->new('readme');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'fencing'");
$node->start;
$ENV{PGCLIENTENCODING} = 'UTF8';

# Run one page's blocks in database $db; pass names the run in test names.
my ($run, $skipped) = (0, 0);
sub run_page
{
	my ($page, $db, $pass) = @_;
	foreach my $block (@{ $blocks{$page} })
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
				'VERBOSITY=verbose', '-d', $node->connstr($db)
			],
			'<', \$sql, '>', \$stdout, '2>', \$stderr);
		my @raised = ($stderr =~ /^(?:psql:\S+ )?ERROR:  ([0-9A-Z]{5}):/mg);
		my @psql_errors =
		  grep { !/^(?:ERROR:  [0-9A-Z]{5}:|(?:WARNING|NOTICE|INFO):  [0-9A-Z]{5}:|(?:DETAIL|HINT|LOCATION|CONTEXT|QUERY|STATEMENT):|(?:SCHEMA|TABLE|COLUMN|DATATYPE|CONSTRAINT) NAME:|LINE \d+:|\s)/ }
		  map { s/^psql:\S+ //r } grep { length } split /\n/, $stderr;

		is(join(' ', @raised), join(' ', @expected),
			"$page line $line$pass: the block raises exactly the errors it announces")
		  or diag("--- block ---\n$sql--- stderr ---\n$stderr");
		is(join("\n", @psql_errors), '',
			"$page line $line$pass: psql reports nothing else (syntax, meta-commands)")
		  or diag("--- block ---\n$sql--- stderr ---\n$stderr");
	}
}

# A UTF-8 database per page whatever the environment's locale, as the
# normalisation examples assume; psql sends the pages' UTF-8 as it is.
my $n = 0;
foreach my $page (@pages)
{
	my $db = 'page' . $n++;
	$node->safe_psql('postgres',
		"CREATE DATABASE $db TEMPLATE template0 ENCODING 'UTF8' LC_COLLATE 'C' LC_CTYPE 'C'");
	run_page($page, $db, '');
	run_page($page, $db, ' (second pass)') if $page eq 'README.md';
}
cmp_ok($run, '>=', 30, "ran $run blocks ($skipped fragments skipped)");

$node->stop;
done_testing();
