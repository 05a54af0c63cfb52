# Copyright (c) 2026, the fencing developers

# The performance table of doc/performance.md is the benchmark's output,
# not a copy typed by hand: the text between "<!-- bench-table:begin -->"
# and "<!-- bench-table:end -->" must equal bench/results/readme-table.md,
# which bench/run.sh ("make bench") writes and bench/update-readme.sh
# copies in.  The table says when, on which commit and on which PostgreSQL
# it was measured, and committed results name no path of the machine that
# made them.  No server is needed.

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;

my $root = $ENV{TESTDIR} // '.';
my $readme_file = "$root/doc/performance.md";
my $table_file = "$root/bench/results/readme-table.md";
my $update = "$root/bench/update-readme.sh";
my $begin = '<!-- bench-table:begin -->';
my $end = '<!-- bench-table:end -->';

# The text between the marker lines, or undef (and a diagnostic) when the
# markers are not there once each, on lines of their own, in order.
sub between_markers
{
	my ($text) = @_;
	my @begins = ($text =~ /^\Q$begin\E$/mg);
	my @ends = ($text =~ /^\Q$end\E$/mg);

	if (@begins != 1 || @ends != 1)
	{
		diag(sprintf("%d begin and %d end markers", scalar @begins, scalar @ends));
		return undef;
	}
	if ($text !~ /^\Q$begin\E\n(.*?)^\Q$end\E$/ms)
	{
		diag('the end marker comes before the begin marker');
		return undef;
	}
	return $1;
}

my $readme = slurp_file($readme_file);
ok(-f $table_file, 'bench/results/readme-table.md exists');
my $table = -f $table_file ? slurp_file($table_file) : '';

# --- the table itself ---------------------------------------------------------

like($table, qr/\A\| comparison \| ratio \| target \| verdict \|\n\|---\|---\|---\|---\|\n/,
	'the table has the columns comparison, ratio, target, verdict');
like(
	$table,
	qr/^Measured \d{4}-\d\d-\d\d \d\d:\d\d UTC on [0-9a-f]{7,}(?:-dirty)?, PostgreSQL \d+(?:\.\d+)*, \d+ CPUs, by make bench\n\z/m,
	'the table ends with when, on which commit and PostgreSQL and how many CPUs it was measured');
unlike($table, qr/\| (?:MISSED|nan) /, 'no row carries a raw verdict or a missing value');

# --- doc/performance.md carries exactly that table ----------------------------

my $current = between_markers($readme);
ok(defined $current, 'doc/performance.md has the bench-table markers, once each, in order');
ok(defined $current && $current eq $table,
	'doc/performance.md between the markers is bench/results/readme-table.md')
  or diag('run bench/update-readme.sh (after make bench) and commit doc/performance.md with the results');

# --- no path of the machine that measured -------------------------------------

foreach my $file (sort glob("$root/bench/results/*.{txt,md,csv}"))
{
	my $name = $file =~ s{^\Q$root\E/}{}r;
	my @paths = (slurp_file($file) =~ m{(?:^|[\s'"(=:])(/[\w.+-]+/[\w.+/-]*)}mg);
	is_deeply(\@paths, [], "$name names no absolute path");
}

# --- bench/update-readme.sh ---------------------------------------------------

# On a copy: a stale table between the markers is replaced by the file's,
# and a page without markers is refused and left alone.  With no argument
# the script writes doc/performance.md.
my $tmp = PostgreSQL::Test::Utils::tempdir();
my $stale = "# fencing\n\n## Performance\n\nBefore.\n\n$begin\n| a stale | table |\n$end\n\n## Development\n";
open(my $fh, '>', "$tmp/README.md") or die $!;
print $fh $stale;
close($fh);

my ($out, $err) = ('', '');
my $ok = IPC::Run::run([ 'bash', $update, "$tmp/README.md", $table_file ], '>', \$out, '2>', \$err);
ok($ok, 'update-readme.sh succeeds on a page with the markers') or diag($err);
is(slurp_file("$tmp/README.md"),
	"# fencing\n\n## Performance\n\nBefore.\n\n$begin\n$table$end\n\n## Development\n",
	'update-readme.sh replaces exactly the text between the markers');

my $unmarked = "# fencing\n\n## Performance\n\nNo markers.\n";
open($fh, '>', "$tmp/README.md") or die $!;
print $fh $unmarked;
close($fh);
($out, $err) = ('', '');
$ok = IPC::Run::run([ 'bash', $update, "$tmp/README.md", $table_file ], '>', \$out, '2>', \$err);
ok(!$ok, 'update-readme.sh fails on a page without the markers');
like($err, qr/needs the lines/, 'and says which lines it needs');
is(slurp_file("$tmp/README.md"), $unmarked, 'and leaves that page alone');
like(slurp_file($update), qr{^README=\$\{1:-\$ROOT/doc/performance\.md\}$}m,
	'update-readme.sh writes doc/performance.md by default');

done_testing();
