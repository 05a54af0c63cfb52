
# Copyright (c) 2026, the fencing developers
#
# Lock names do not depend on the database (DESIGN.md L1, L2): the same name
# gives the same canonical UTF-8 name and the same lock key in a LATIN1, an
# SQL_ASCII, a UTF8 (C.utf8) and a UTF8 database whose default collation is
# ICU Turkish.  Then a property check on random Unicode strings: the
# canonical name is a fixed point, the key is the hash of the canonical
# name, case and white-space variants are the same lock, and names that
# normalise to nothing or to too much raise the documented errors without
# harming the server.
#
# All SQL sent to the server is ASCII: names travel as hex of their UTF-8
# bytes, so the test does not depend on psql's client encoding.

use strict;
use warnings;
use feature 'fc';
use utf8;

use Encode qw(encode_utf8 decode_utf8);
use Unicode::Normalize qw(NFC NFD NFKC);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use FencingTest qw(sql_text @WHITE_SPACE @IGNORABLE);

my $node = PostgreSQL::Test::Cluster->new('encodings');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'fencing'");
$node->start;

# One database per encoding and locale behaviour.
my %create = (
	l1 => "ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C'",
	sa => "ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C'",
	u8 => "ENCODING 'UTF8' LC_COLLATE 'C.utf8' LC_CTYPE 'C.utf8'",
	tr => "ENCODING 'UTF8' LOCALE_PROVIDER icu ICU_LOCALE 'tr-TR' "
	  . "LC_COLLATE 'C.utf8' LC_CTYPE 'C.utf8'",);
for my $db (sort keys %create)
{
	$node->safe_psql('postgres',
		"CREATE DATABASE $db $create{$db} TEMPLATE template0");
	$node->safe_psql($db, 'CREATE EXTENSION fencing');
}

# The Turkish database really folds differently on its own: lower('I') is
# dotless there, so agreement below is not an accident of the locale.
is($node->safe_psql('tr', "SELECT lower('I') = 'i'"),
	'f', 'ICU Turkish default collation lower-cases I to dotless i');

# hex of the UTF-8 bytes of an SQL text expression
sub utf8_hex_sql
{
	my ($expr) = @_;
	return "encode(convert_to($expr, 'UTF8'), 'hex')";
}

# A plpgsql probe that runs normalize_name, returning the canonical name as
# hex of its UTF-8 bytes, or "!" and the SQLSTATE when it fails.
my $probe_function = q{
CREATE FUNCTION name_probe(n text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
	RETURN encode(convert_to(fencing.normalize_name(n), 'UTF8'), 'hex');
EXCEPTION WHEN OTHERS THEN
	RETURN '!' || SQLSTATE;
END
$$;
CREATE FUNCTION key_probe(n text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
	RETURN fencing.lock_key(n)::text;
EXCEPTION WHEN OTHERS THEN
	RETURN '!' || SQLSTATE;
END
$$;
};
$node->safe_psql($_, $probe_function) for sort keys %create;

#
# Part 1: names made of Latin-1 characters, the same in every database.
#
my @latin1_names = (
	'Straße', 'STRASSE', 'ÉTÉ  Été', "\x{a0}Été\t", 'Ærø', 'ÆRØ',
	'ÞÓRR', 'þórr', 'ÿ', 'µ', 'ª', 'º', '½', '¼ ¾', '²³¹',
	"soft\x{ad}hyphen", 'x¨y', 'x´y', '¸', 'Invoice-Run:2026-10', 'I',
	'ÀÉÎÕÜ', 'àéîõü', 'Ð', 'ð', "\x{a0}\x{a0}", "\x{ad}");
# and every Latin-1 character between two letters
push @latin1_names, map { 'x' . chr($_) . 'Y' } (0xa0 .. 0xff);

my $values = join(",\n",
	map { "($_, " . sql_text($latin1_names[$_]) . ')' } 0 .. $#latin1_names);
my $latin1_query = "SELECT string_agg(i || ' ' || key_probe(n) || ' ' || "
  . "name_probe(n), E'\\n' ORDER BY i) FROM (VALUES $values) v(i, n)";

my %latin1_result;
for my $db (sort keys %create)
{
	my %rows;
	for my $line (split /\n/, $node->safe_psql($db, $latin1_query))
	{
		my ($i, $key, $name) = split / /, $line;
		$rows{$i} = { key => $key, name => $name };
	}
	$latin1_result{$db} = \%rows;
}

my $u8 = $latin1_result{u8};
is(scalar(keys %$u8), scalar(@latin1_names), 'every Latin-1 name probed');
for my $i (0 .. $#latin1_names)
{
	my $label = sprintf('Latin-1 name %d (%s)', $i,
		join(' ', map { sprintf 'U+%04X', ord } split //, $latin1_names[$i]));
	my $expected = $u8->{$i};
	like($expected->{key}, qr/^(-?\d+|!22023)$/,
		"$label: key or empty-name error in UTF8 database");
	for my $db (qw(l1 sa tr))
	{
		is($latin1_result{$db}{$i}{key}, $expected->{key},
			"$label: same key in $db");
	}
	is($latin1_result{$_}{$i}{name}, $expected->{name},
		"$label: same canonical name in $_")
	  for qw(sa tr);

	# In LATIN1 the canonical name comes back converted, or, when it holds
	# a character LATIN1 lacks (µ folds to Greek mu, ½ has a fraction
	# slash, ¨ a combining diaeresis), as PostgreSQL's conversion error.
	my $canonical = decode_utf8(pack('H*', $expected->{name}));
	if ($canonical =~ /[^\x00-\xff]/)
	{
		is($latin1_result{l1}{$i}{name}, '!22P05',
			"$label: untranslatable canonical name is an error in LATIN1");
	}
	else
	{
		is($latin1_result{l1}{$i}{name}, $expected->{name},
			"$label: same canonical name in LATIN1");
	}
}

# Absolute values, computed without the server: the canonical name by
# Perl's own Unicode tables (NFKC of the full case folding, default-ignorable
# code points dropped, White_Space runs collapsed to one space, trimmed),
# and the key by core's hashtextextended() of that name.  Every database,
# the UTF8 one included, must agree with them; the comparisons above only
# show that the databases agree with each other.
sub perl_canonical
{
	my ($name) = @_;
	my $canonical = NFKC(fc(NFKC(fc(NFD($name)))));
	$canonical =~ s/\p{Default_Ignorable_Code_Point}//g;
	$canonical =~ s/\p{White_Space}+/ /g;
	$canonical =~ s/^ | $//g;
	return $canonical;
}
my @perl_canonical = map { perl_canonical($_) } @latin1_names;
my $hash_values = join(",\n",
	map { "($_, " . sql_text($perl_canonical[$_]) . ')' }
	  grep { $perl_canonical[$_] ne '' } 0 .. $#latin1_names);
my %perl_key = split /[ \n]/, $node->safe_psql('u8',
	"SELECT string_agg(i || ' ' || hashtextextended(c, 0), E'\\n' ORDER BY i) "
	  . "FROM (VALUES $hash_values) v(i, c)");
for my $i (0 .. $#latin1_names)
{
	my $label = sprintf('Latin-1 name %d (%s)', $i,
		join(' ', map { sprintf 'U+%04X', ord } split //, $latin1_names[$i]));
	my $canonical = $perl_canonical[$i];
	if ($canonical eq '')
	{
		is($latin1_result{$_}{$i}{key}, '!22023',
			"$label: white space and ignorables only, an empty name in $_")
		  for qw(u8 l1);
		next;
	}
	my $hex = unpack('H*', encode_utf8($canonical));
	is($latin1_result{$_}{$i}{name}, $hex,
		"$label: canonical name in $_ is Perl's NFKC_Casefold")
	  for ($canonical =~ /[^\x00-\xff]/ ? qw(u8) : qw(u8 l1));
	is($latin1_result{$_}{$i}{key}, $perl_key{$i},
		"$label: key in $_ is hashtextextended of Perl's canonical name")
	  for qw(u8 l1);
}

# Spot checks against the contract's own examples.
my %by_name = map { $latin1_names[$_] => $u8->{$_} } 0 .. $#latin1_names;
is(decode_utf8(pack('H*', $by_name{'Straße'}{name})),
	'strasse', 'Straße is strasse');
is($by_name{"\x{a0}\x{a0}"}{key}, '!22023',
	'two no-break spaces are an empty name');
is($by_name{"\x{ad}"}{key}, '!22023', 'a soft hyphen alone is an empty name');
is($by_name{'Straße'}{key}, $by_name{'STRASSE'}{key},
	'Straße and STRASSE are one lock');
is(decode_utf8(pack('H*', $by_name{'ÉTÉ  Été'}{name})),
	'été été', 'ÉTÉ  Été is "été été"');
is(decode_utf8(pack('H*', $by_name{'µ'}{name})), "\x{3bc}",
	'micro sign folds to Greek small mu');
is($by_name{'I'}{key}, $node->safe_psql('u8', "SELECT fencing.lock_key('i')"),
	'I is the lock i, also in the Turkish database');
is( $node->safe_psql(
		'u8',
		"SELECT hashtextextended('invoice-run:2026-10', 0)"),
	$by_name{'Invoice-Run:2026-10'}{key},
	'L2: key equals hashtextextended of the canonical name');

# The conversion error in LATIN1 says where it came from.
my ($ret, $stdout, $stderr) =
  $node->psql('l1', 'SELECT fencing.normalize_name(' . sql_text('µ') . ')');
isnt($ret, 0, 'normalize_name of micro sign fails in LATIN1');
like(
	$stderr,
	qr/has no equivalent in encoding "LATIN1".*converting the canonical lock name from UTF-8 to the database encoding "LATIN1"/s,
	'conversion error carries the normalize_name context');
is($node->safe_psql('l1', 'SELECT fencing.lock_key(' . sql_text('µ') . ')'),
	$node->safe_psql('u8', 'SELECT fencing.lock_key(' . sql_text("\x{3bc}") . ')'),
	'lock_key of micro sign in LATIN1 is the key of Greek mu');

#
# Part 2: property check on random Unicode strings in the UTF8 database.
#
my $seed = $ENV{FENCING_PROPERTY_SEED} || 20261129;
note "random seed $seed (set FENCING_PROPERTY_SEED to vary)";
srand($seed);

my @white_space = @WHITE_SPACE;
my @ignorable = @IGNORABLE;
my @combining = (0x300 .. 0x36f, 0x1ab0 .. 0x1abe, 0x1dc0 .. 0x1dff,
	0x20d0 .. 0x20f0, 0xfe20 .. 0xfe2f, 0x0591 .. 0x05bd, 0x0e31 .. 0x0e3a);
my @cased = (
	0x41 .. 0x5a, 0x61 .. 0x7a, 0xc0 .. 0x24f, 0x370 .. 0x3ff,
	0x400 .. 0x52f, 0x531 .. 0x587, 0x10a0 .. 0x10ff, 0x13a0 .. 0x13fd,
	0x1c80 .. 0x1c88, 0x1c90 .. 0x1cbf, 0x1e00 .. 0x1fff, 0x2126, 0x212a,
	0x212b, 0x2160 .. 0x2188, 0x24b6 .. 0x24e9, 0x2c00 .. 0x2c7f,
	0xa640 .. 0xa69d, 0xab70 .. 0xabbf, 0xfb00 .. 0xfb06, 0xfb13 .. 0xfb17,
	0xff21 .. 0xff3a, 0xff41 .. 0xff5a, 0x10400 .. 0x1044f, 0x1e900 .. 0x1e943);
my @compat = (
	0x2460 .. 0x24ff, 0x3300 .. 0x33ff, 0xfb50 .. 0xfdff, 0xfe30 .. 0xfe6b,
	0xff01 .. 0xffee, 0x1d400 .. 0x1d7ff, 0x1f100 .. 0x1f1ff, 0xf900 .. 0xfaff,
	0x2f800 .. 0x2fa1d, 0x1100 .. 0x11ff, 0x3131 .. 0x318e, 0xac00 .. 0xd7a3);

sub random_code_point
{
	my $class = rand();
	my @pool;
	if    ($class < 0.25) { @pool = (0x21 .. 0x7e) }
	elsif ($class < 0.35) { @pool = @white_space }
	elsif ($class < 0.43) { @pool = @ignorable }
	elsif ($class < 0.53) { @pool = @combining }
	elsif ($class < 0.70) { @pool = @cased }
	elsif ($class < 0.82) { @pool = @compat }
	else
	{
		# anything: every plane, assigned or not, no surrogates, no NUL
		my $cp;
		do
		{
			$cp =
			  rand() < 0.5
			  ? 1 + int(rand(0xffff))
			  : 0x10000 + int(rand(0x100000));
		} while ($cp >= 0xd800 && $cp <= 0xdfff);
		return $cp;
	}
	return $pool[ int(rand(@pool)) ];
}

sub random_name
{
	my $shape = rand();
	my $length =
	    $shape < 0.05 ? 0
	  : $shape < 0.90 ? 1 + int(rand(24))
	  :                 40 + int(rand(120));
	return join('', map { chr(random_code_point()) } 1 .. $length);
}

# Perl's own reading of White_Space and Default_Ignorable_Code_Point.
sub is_blank_for_perl
{
	my ($str) = @_;
	$str =~ s/[\p{White_Space}\p{Default_Ignorable_Code_Point}]//g;
	return $str eq '';
}

# A variant that differs only by case (per character upper, lower, title or
# unchanged), kept only when full case folding says it is the same name.
sub case_variant
{
	my ($str) = @_;
	my $variant = join('',
		map { my $r = rand(); $r < 0.3 ? uc($_) : $r < 0.6 ? lc($_) : $r < 0.7 ? ucfirst($_) : $_ }
		  split //, $str);
	return fc($variant) eq fc($str) ? $variant : undef;
}

# A variant with every white-space run replaced by another run of other
# white space, and ignorables inserted between code points.
sub space_variant
{
	my ($str) = @_;
	my $variant = $str;
	$variant =~ s{[\t\n\x0b\f\r \x{85}\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}]+}
	  {join('', map { chr($white_space[int(rand(@white_space))]) } 0 .. int(rand(3)))}ge;
	$variant =~ s{(?<=.)(?=.)}{rand() < 0.1 ? chr((0x200b, 0x200d, 0x2060, 0xfeff, 0xad)[int(rand(5))]) : ''}gse;
	return $variant;
}

my $count = 2000;
my @names = map { random_name() } 1 .. $count;
# plus some that must hit each limit
push @names, ("\x{fdfa}" x 20, 'ß' x 101, ('x' x 100) . "\x{3000}" x 500 . ('x' x 100),
	"\x{200d}" x 50, "\x{3000}\t\x{2028}", 'Ａ' x 1400);

my (@variant_sql, %variant_of);
for my $i (0 .. $#names)
{
	my $case  = case_variant($names[$i]);
	my $space = space_variant($names[$i]);
	push @variant_sql,
	  "($i, " . sql_text($names[$i]) . ', '
	  . (defined $case ? sql_text($case) : 'NULL') . ', '
	  . sql_text($space) . ')';
}

$node->safe_psql(
	'u8', qq{
CREATE TABLE names (i int PRIMARY KEY, n text, case_variant text, space_variant text);
INSERT INTO names VALUES @{[ join(",\n", @variant_sql) ]};
CREATE FUNCTION property_probe(n text, case_variant text, space_variant text)
RETURNS text LANGUAGE plpgsql AS \$\$
DECLARE
	canonical text;
	key bigint;
	name_error text := '';
	key_error text := '';
BEGIN
	BEGIN
		canonical := fencing.normalize_name(n);
	EXCEPTION WHEN OTHERS THEN
		name_error := SQLSTATE;
	END;
	BEGIN
		key := fencing.lock_key(n);
	EXCEPTION WHEN OTHERS THEN
		key_error := SQLSTATE;
	END;
	IF name_error <> '' OR key_error <> '' THEN
		RETURN 'error ' || name_error || ' ' || key_error || ' '
			|| octet_length(n) || ' '
			|| coalesce(key_probe(case_variant), '') || ' '
			|| key_probe(space_variant);
	END IF;
	RETURN 'ok ' || encode(convert_to(canonical, 'UTF8'), 'hex') || ' '
		|| (fencing.normalize_name(canonical) = canonical) || ' '
		|| (fencing.lock_key(canonical) = key) || ' '
		|| (hashtextextended(canonical, 0) = key) || ' '
		|| coalesce((key_probe(case_variant) = key::text)::text, 'none') || ' '
		|| (key_probe(space_variant) = key::text);
END
\$\$;
});

my $output = $node->safe_psql('u8',
	"SELECT string_agg(i || ' ' || property_probe(n, case_variant, space_variant), "
	  . "E'\\n' ORDER BY i) FROM names");
my @lines = split /\n/, $output;
is(scalar(@lines), scalar(@names), 'every random name probed');

my %failures;
my %seen = (ok => 0, empty => 0, too_long => 0, case_checked => 0);
sub fail_with
{
	my ($property, $i) = @_;
	push @{ $failures{$property} },
	  join(' ', map { sprintf 'U+%04X', ord } split //, $names[$i]);
}

for my $line (@lines)
{
	my ($i, $status, @f) = split / /, $line;
	my $name = $names[$i];
	if ($status eq 'error')
	{
		my ($name_error, $key_error, $bytes, $case_key, $space_key) = @f;
		fail_with('normalize_name and lock_key raise the same error', $i)
		  unless $name_error eq $key_error;
		if ($name_error eq '22023')
		{
			$seen{empty}++;
			fail_with('empty only when Perl sees only white space and ignorables', $i)
			  unless is_blank_for_perl($name);
			fail_with('space variant of an empty name is empty', $i)
			  unless $space_key eq '!22023';
			fail_with('case variant of an empty name is empty', $i)
			  unless $case_key eq '!22023' || $case_key eq '';
		}
		elsif ($name_error eq '42622')
		{
			$seen{too_long}++;
		}
		else
		{
			fail_with("unexpected SQLSTATE $name_error", $i);
		}
		next;
	}

	my ($hex, $idempotent, $key_of_canonical, $hash, $case_same, $space_same) = @f;
	$seen{ok}++;
	my $canonical = decode_utf8(pack('H*', $hex));
	fail_with('canonical name is a fixed point', $i) unless $idempotent eq 'true';
	fail_with('lock_key(x) = lock_key(normalize_name(x))', $i)
	  unless $key_of_canonical eq 'true';
	fail_with('lock_key(x) = hashtextextended(normalize_name(x), 0)', $i)
	  unless $hash eq 'true';
	fail_with('case variant has the same key', $i)
	  unless $case_same eq 'true' || $case_same eq 'none';
	$seen{case_checked}++ if $case_same eq 'true';
	fail_with('white-space and ignorable variant has the same key', $i)
	  unless $space_same eq 'true';
	fail_with('canonical name is at most 200 bytes and not empty', $i)
	  unless length($hex) / 2 <= 200 && length($hex) > 0;
	fail_with('no white space but single inner ASCII spaces', $i)
	  if $canonical =~ /^ | $|  |[^\P{White_Space} ]/;
	fail_with('no default-ignorable code points left', $i)
	  if $canonical =~ /\p{Default_Ignorable_Code_Point}/;
	# full case folding can decompose (U+0390 folds to three code points),
	# and the canonical name is composed again
	fail_with('case folded and composed', $i)
	  unless NFC(fc($canonical)) eq $canonical;

	# for ASCII the rule is simple enough to state in Perl
	if ($name =~ /^[\x00-\x7f]*$/)
	{
		my $expected = lc($name);
		$expected =~ s/[\t\n\x0b\f\r ]+/ /g;
		$expected =~ s/^ | $//g;
		fail_with('ASCII name is lower-cased and white space collapsed', $i)
		  unless $canonical eq $expected;
	}
}

for my $property (sort keys %failures)
{
	my @examples = @{ $failures{$property} };
	diag("$property: " . scalar(@examples) . " failures, first: $examples[0]");
}
is(scalar(keys %failures), 0, 'every property holds for every random name');
note "names: $seen{ok} valid, $seen{empty} empty, $seen{too_long} too long, "
  . "$seen{case_checked} case variants checked";
cmp_ok($seen{ok}, '>', $count / 2, 'most random names are valid');
cmp_ok($seen{empty}, '>', 0, 'some random names are empty');
cmp_ok($seen{too_long}, '>', 0, 'some random names are too long');
cmp_ok($seen{case_checked}, '>', $count / 2, 'most case variants were checked');

# The server is still up and no backend crashed.
is($node->safe_psql('u8', 'SELECT 1'), '1', 'server still answers');
my $log = slurp_file($node->logfile);
unlike($log, qr/terminated by signal|server process .* was terminated/,
	'no backend crashed');

$node->stop;
done_testing();
