
# Copyright (c) 2026, the fencing developers
#
# src/ is built in layers (src/README.md): base, tokens, locks, fence,
# module, each a folder with one header, every file calling only files of
# its own folder or of folders below, and no circle of calls anywhere.
# test/tools/check_layers.pl checks the includes and, with nm, the symbols
# of the objects the suite built in this tree; every line it prints is a
# violation.  It is first shown a small tree that breaks each rule, so
# that a checker that sees nothing cannot pass.

use strict;
use warnings;

use File::Path qw(make_path);
use File::Temp qw(tempdir);
use FindBin;
use Test::More;

my $tree = "$FindBin::RealBin/../..";
my $checker = "$tree/test/tools/check_layers.pl";


# Run the checker on a tree: its exit status and its lines.
sub check
{
	my ($dir) = @_;
	my $output = `perl "$checker" "$dir" 2>&1`;
	return ($? >> 8, split(/\n/, $output));
}

# --- a tree that breaks the rules --------------------------------------------

my $bad = tempdir(CLEANUP => 1);
my %files = (
	'src/base/base.h' => "/* base */\n",
	'src/base/low.c' => "#include \"tokens/tokens.h\"\n"
	  . "extern int fencing_high(void);\n"
	  . "int fencing_low(void) { return fencing_high(); }\n",
	'src/tokens/tokens.h' => "/* tokens */\n",
	'src/tokens/high.c' => "int helper(void) { return 1; }\n"
	  . "int fencing_high(void) { return helper(); }\n",
	'src/tokens/a.c' => "extern int fencing_b(void);\n"
	  . "int fencing_a(void) { return fencing_b(); }\n",
	'src/tokens/b.c' => "extern int fencing_a(void);\n"
	  . "int fencing_b(void) { return fencing_a(); }\n",
	'src/flat.c' => "int fencing_flat(void) { return 0; }\n");
for my $path (sort keys %files)
{
	my $full = "$bad/$path";
	(my $dir = $full) =~ s{/[^/]+$}{};
	make_path($dir);
	open(my $fh, '>', $full) or die "$full: $!";
	print $fh $files{$path};
	close $fh;
}
for my $path (grep { /\.c$/ } sort keys %files)
{
	(my $obj = "$bad/$path") =~ s/\.c$/.o/;
	my $cc = $ENV{CC} // 'cc';
	system($cc, '-c', "-I$bad/src", "$bad/$path", '-o', $obj) == 0
	  or BAIL_OUT("could not compile $path with $cc");
}

my ($status, @lines) = check($bad);
is($status, 1, 'a tree that breaks the rules: check_layers.pl exits 1');
my %want = (
	'a file outside the layer folders' => qr{^src/flat\.c: outside every layer folder$},
	'an include from a layer above' =>
	  qr{^src/base/low\.c:1: includes "tokens/tokens\.h" of layer tokens, above base$},
	'a call into a layer above' =>
	  qr{^src/base/low\.c: uses fencing_high of src/tokens/high\.c \(layer tokens, above base\)$},
	'a circle of calls inside a folder' =>
	  qr{^circle of calls: src/tokens/a\.c -\(fencing_b\)-> src/tokens/b\.c -\(fencing_a\)-> src/tokens/a\.c$},
	'a global symbol that the call rules would not see' =>
	  qr{^src/tokens/high\.c: defines global symbol helper, not named fencing_\*$});
for my $what (sort keys %want)
{
	ok((grep { $_ =~ $want{$what} } @lines), "a tree that breaks the rules: $what is reported")
	  or diag(join("\n", @lines));
}

# --- this tree ------------------------------------------------------------------

# The checker reads the objects this run built.  A run that tests a build
# made elsewhere (FENCING_SKIP_BUILD, as make test-asan does with its
# sanitized build) has none in this tree: make test checks the layers.
if (($ENV{FENCING_SKIP_BUILD} // '') eq '1' && !-e "$tree/src/module/fencing.o")
{
  SKIP:
	{
		skip 'this run did not build the tree (FENCING_SKIP_BUILD): make test checks the layers', 1;
	}
	done_testing();
	exit 0;
}

($status, @lines) = check($tree);
my @violations = grep { !/^layers: / } @lines;

isnt($status, 2, 'the tree is built, so the objects can be checked')
  or diag(join("\n", @lines));
is(scalar(@violations), 0, 'no file includes or calls a layer above its own, and no calls go in a circle')
  or diag(join("\n", @violations));
is($lines[-1] // '', 'layers: ok', 'check_layers.pl says ok');
is($status, 0, 'check_layers.pl exits 0');

# A header change rebuilds every object: one built against the header's old
# version would be linked in as it is, reading a changed struct wrong.
# make -n -W HEADER says what make would do were HEADER newer.
my @objects = map { (my $o = $_) =~ s/^\Q$tree\E\///; $o =~ s/\.c$/.o/; $o }
  glob("$tree/src/*/*.c");
foreach my $header (map { s/^\Q$tree\E\///r } glob("$tree/src/*/*.h"))
{
	my $plan = `make -s -n -C "$tree" -W "$header" 2>&1`;
	my @stale = grep { $plan !~ /-o \Q$_\E\b/ } @objects;
	is(scalar(@stale), 0, "a change of $header rebuilds every object")
	  or diag("not rebuilt: @stale");
}

done_testing();
