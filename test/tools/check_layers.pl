#!/usr/bin/perl
#
# test/tools/check_layers.pl -- the layer rules of src/ (src/README.md),
# checked on the source and on the built objects.
#
#   test/tools/check_layers.pl [TREE]      (default: the tree it is in)
#
# src/ has one folder per layer, lowest first: base, tokens, locks, fence,
# module.  The rules:
#
#   1. each folder has exactly one header, named after the folder, and
#      every source file is in a layer folder;
#   2. a .c or .h file includes (with "...") only headers of its own
#      folder or of a folder below;
#   3. every fencing_* symbol an object file uses but does not define
#      (nm) is defined in its own folder or in one below: no upward call;
#   4. no circle in the graph of calls between files, inside a folder too;
#   5. every global symbol an object defines is fencing_*, pg_finfo_*,
#      _PG_init or Pg_magic_func, so that no call between files escapes
#      rules 3 and 4.
#
# Rules 3 to 5 need the objects (src/*/*.o): run it after the build.  On a
# tree whose files are not in layer folders yet, rules 3 to 5 still run
# (rule 3 only where both files are in layer folders).
# Prints one line per violation and "layers: ok" or "layers: N
# violation(s)"; exits 1 when there is any, 2 when the tree is not built.

use strict;
use warnings;
use File::Basename qw(basename dirname);
use File::Spec;

my @LAYERS = qw(base tokens locks fence module);
my %rank;
@rank{@LAYERS} = (0 .. $#LAYERS);

my $tree = $ARGV[0] // File::Spec->rel2abs(dirname(__FILE__) . '/../..');
$tree =~ s{/+$}{};
my $src = "$tree/src";
my @problems;

die "check_layers.pl: no directory $src\n" unless -d $src;

# The layer folder of a path under src/, or undef for a file directly in
# src/ (or anywhere else).
sub layer_of
{
	my ($path) = @_;
	return $1 if $path =~ m{(?:^|/)src/([^/]+)/[^/]+$};
	return undef;
}

sub relative
{
	my ($path) = @_;
	return substr($path, length($tree) + 1);
}

# --- rules 1 and 2: folders, headers and includes ----------------------------

for my $layer (@LAYERS)
{
	next unless -d "$src/$layer";
	my @headers = map { basename($_) } glob("$src/$layer/*.h");
	push @problems, "src/$layer/: no header $layer.h" unless grep { $_ eq "$layer.h" } @headers;
	push @problems, "src/$layer/: more than one header (@headers)" if @headers > 1;
}
for my $dir (glob("$src/*"))
{
	next unless -d $dir;
	my $name = basename($dir);
	push @problems, "src/$name/: not a layer (known: @LAYERS)" unless exists $rank{$name};
}
for my $file (glob("$src/*.c"), glob("$src/*.h"))
{
	push @problems, "src/" . basename($file) . ": outside every layer folder";
}

# The layer a quoted include names: "layer/x.h", or a bare "x.h" found in
# the including file's own folder or in a layer folder (found through some
# -I); undef for a server header.
sub include_target
{
	my ($file, $inc) = @_;

	return $1 if $inc =~ m{^([^/]+)/[^/]+\.h$} && exists $rank{$1};
	return layer_of($file) if -e dirname($file) . "/$inc";
	for my $layer (@LAYERS)
	{
		return $layer if -e "$src/$layer/$inc";
	}
	return undef;
}

for my $file (glob("$src/*/*.c"), glob("$src/*/*.h"))
{
	my $layer = layer_of($file);
	next unless defined $layer && exists $rank{$layer};
	open(my $fh, '<', $file) or die "$file: $!";
	while (my $line = <$fh>)
	{
		next unless $line =~ /^\s*#\s*include\s+"([^"]+)"/;
		my $inc = $1;
		my $target = include_target($file, $inc);
		next unless defined $target;
		push @problems, relative($file) . ":$.: includes \"$inc\" of layer $target, above $layer"
		  if $rank{$target} > $rank{$layer};
	}
	close $fh;
}

# --- rules 3 to 5: symbols of the built objects --------------------------------

my @objects = (glob("$src/*.o"), glob("$src/*/*.o"));
my @sources = (glob("$src/*.c"), glob("$src/*/*.c"));
my @unbuilt = grep { !-e substr($_, 0, -2) . '.o' } @sources;
if (@unbuilt)
{
	print "layers: the tree is not built (no object for "
	  . join(', ', map { relative($_) } @unbuilt) . "); run make first\n";
	exit 2;
}

my (%defines, %uses);
for my $obj (@objects)
{
	my $rel = relative($obj);
	$rel =~ s/\.o$/.c/;
	open(my $nm, '-|', 'nm', $obj) or die "nm $obj: $!";
	while (<$nm>)
	{
		if (/^\s+U (fencing_\w+)$/)
		{
			$uses{$rel}{$1} = 1;
		}
		elsif (/^[0-9a-f]+ [TDBRCGSVW] (\w+)$/)
		{
			my $sym = $1;
			$defines{$sym} = $rel;
			push @problems, "$rel: defines global symbol $sym, not named fencing_*"
			  unless $sym =~ /^(fencing_|pg_finfo_fencing_)/
			  || $sym eq '_PG_init' || $sym eq 'Pg_magic_func';
		}
	}
	close $nm or die "nm $obj failed\n";
}

my %calls;
for my $file (sort keys %uses)
{
	for my $sym (sort keys %{ $uses{$file} })
	{
		my $where = $defines{$sym} or next;
		next if $where eq $file;
		my ($from, $to) = (layer_of($file), layer_of($where));
		push @problems, "$file: uses $sym of $where (layer $to, above $from)"
		  if defined $from && defined $to && exists $rank{$from} && exists $rank{$to}
		  && $rank{$to} > $rank{$from};
		$calls{$file}{$where} //= $sym;
	}
}

# A circle is found by depth-first search: an edge back to a file still on
# the path closes one.  Each circle is reported once, starting at its
# smallest file name, with the symbol behind each step.
my (%state, @path, %seen_circle);

sub report_circle
{
	my @cycle = @_;    # files, the last one calls the first
	my $start = 0;
	for my $i (1 .. $#cycle)
	{
		$start = $i if $cycle[$i] lt $cycle[$start];
	}
	@cycle = (@cycle[ $start .. $#cycle ], @cycle[ 0 .. $start - 1 ]);
	my $key = join(' ', @cycle);
	return if $seen_circle{$key}++;
	my @steps;
	for my $i (0 .. $#cycle)
	{
		my $next = $cycle[ ($i + 1) % @cycle ];
		push @steps, "$cycle[$i] -($calls{$cycle[$i]}{$next})->";
	}
	push @problems, "circle of calls: @steps $cycle[0]";
}

sub visit
{
	my ($file) = @_;
	$state{$file} = 1;
	push @path, $file;
	for my $next (sort keys %{ $calls{$file} // {} })
	{
		if (($state{$next} // 0) == 1)
		{
			my ($at) = grep { $path[$_] eq $next } 0 .. $#path;
			report_circle(@path[ $at .. $#path ]);
		}
		elsif (!$state{$next})
		{
			visit($next);
		}
	}
	pop @path;
	$state{$file} = 2;
}
visit($_) for sort keys %calls;

print "$_\n" for @problems;
if (@problems)
{
	printf "layers: %d violation(s)\n", scalar(@problems);
	exit 1;
}
print "layers: ok\n";
exit 0;
