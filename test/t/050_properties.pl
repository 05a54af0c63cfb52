
# Copyright (c) 2026, the fencing developers
#
# Property test of lock names at scale: 100,000 random Unicode
# strings from every plane (combining marks, white space, default
# ignorables, cased and compatibility characters, anything else that is a
# Unicode scalar value except NUL), loaded with one COPY and checked with one
# query over the table:
#
#   - normalize_name is idempotent;
#   - lock_key(x) = lock_key(normalize_name(x)) = hashtextextended(canonical, 0);
#   - a case variant (kept only when Perl's fc says it is the same string)
#     and a width variant (ASCII U+0021..U+007E swapped with fullwidth
#     U+FF01..U+FF5E) give the same key, or the same error;
#   - inputs that fail raise only 22023 (empty) or 42622 (too long), and
#     normalize_name and lock_key agree on which;
#   - the server survives (same node up, no "terminated by signal" in the
#     log), and normalising 100k strings twice in one backend does not grow
#     its memory contexts (no leak per call).
#
# The seed is fixed; FENCING_PROPERTY_SEED=<n> draws another sample (and
# FENCING_PROPERTY_COUNT=<n> another size, for a quick run).  A
# failure prints the code points of the first offending strings, and the
# seed, so that it can be replayed.

use strict;
use warnings;
use feature 'fc';

use Encode qw(encode_utf8);
use Time::HiRes qw(time);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use FencingTest qw(@WHITE_SPACE @IGNORABLE);

my $started = time();
my $seed = $ENV{FENCING_PROPERTY_SEED} || 50050;
note "random seed $seed (set FENCING_PROPERTY_SEED to vary)";
srand($seed);

my $node = PostgreSQL::Test::Cluster->new('properties');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'fencing'");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION fencing');
my $pid_before = $node->safe_psql('postgres',
	"SELECT pid FROM pg_stat_activity WHERE backend_type = 'checkpointer'");

#
# The sample.
#
my @white_space = @WHITE_SPACE;
my @ignorable = @IGNORABLE;
my @combining = (
	0x300 .. 0x36f, 0x483 .. 0x489, 0x591 .. 0x5bd, 0x610 .. 0x61a,
	0x64b .. 0x65f, 0x93c, 0x941 .. 0x948, 0xe31 .. 0xe3a, 0x1ab0 .. 0x1abe,
	0x1dc0 .. 0x1dff, 0x20d0 .. 0x20f0, 0x302a .. 0x302f, 0x3099, 0x309a,
	0xfe20 .. 0xfe2f, 0x101fd, 0x1d165 .. 0x1d169, 0x1e8d0 .. 0x1e8d6);
my @cased = (
	0x41 .. 0x5a, 0x61 .. 0x7a, 0xb5, 0xc0 .. 0x24f, 0x345, 0x370 .. 0x3ff,
	0x400 .. 0x52f, 0x531 .. 0x587, 0x10a0 .. 0x10ff, 0x13a0 .. 0x13fd,
	0x1c80 .. 0x1c88, 0x1c90 .. 0x1cbf, 0x1e00 .. 0x1fff, 0x2126, 0x212a,
	0x212b, 0x2160 .. 0x2188, 0x24b6 .. 0x24e9, 0x2c00 .. 0x2c7f,
	0xa640 .. 0xa69d, 0xab70 .. 0xabbf, 0xfb00 .. 0xfb06, 0xfb13 .. 0xfb17,
	0x10400 .. 0x1044f, 0x10c80 .. 0x10cf2, 0x118a0 .. 0x118df,
	0x16e40 .. 0x16e7f, 0x1e900 .. 0x1e943);
my @compat = (
	0xa8, 0xaa, 0xb2, 0xb3, 0xb9, 0xbc .. 0xbe, 0x132, 0x1c4 .. 0x1cc,
	0x2460 .. 0x24ff, 0x3300 .. 0x33ff, 0xfb50 .. 0xfdff, 0xfe30 .. 0xfe6b,
	0xff01 .. 0xffee, 0x1d400 .. 0x1d7ff, 0x1f100 .. 0x1f1ff, 0xf900 .. 0xfaff,
	0x2f800 .. 0x2fa1d, 0x1100 .. 0x11ff, 0x3131 .. 0x318e, 0xac00 .. 0xd7a3);

# Any Unicode scalar value but NUL, in any plane, assigned or not.
sub any_code_point
{
	my $cp;
	do
	{
		my $plane = rand() < 0.5 ? 0 : int(rand(17));
		$cp = $plane * 0x10000 + int(rand(0x10000));
	} while ($cp == 0 || ($cp >= 0xd800 && $cp <= 0xdfff));
	return $cp;
}

# Classes of code points and the chance of each; the rest is any_code_point.
my @classes = (
	[ 0.22, [ 0x21 .. 0x7e ] ],
	[ 0.32, \@white_space ],
	[ 0.40, \@ignorable ],
	[ 0.50, \@combining ],
	[ 0.66, \@cased ],
	[ 0.78, \@compat ]);

sub random_code_point
{
	my $class = rand();
	for my $c (@classes)
	{
		return $c->[1][ int(rand(@{ $c->[1] })) ] if $class < $c->[0];
	}
	return any_code_point();
}

# Drawing every character of 100k names one by one is slow in Perl, so
# names are random slices of one long random sequence: one draw per name.
my @pool = map { chr(random_code_point()) } 1 .. 300_000;

sub random_name
{
	my $shape = rand();
	my $length =
	    $shape < 0.02  ? 0
	  : $shape < 0.93  ? 1 + int(rand(24))
	  : $shape < 0.995 ? 40 + int(rand(120))
	  :                  200 + int(rand(1000));
	my $start = int(rand(@pool - $length));
	return join('', @pool[ $start .. $start + $length - 1 ]);
}

# Upper, lower or title case of the whole string, or (one time in five)
# per character; kept only when full case folding says it is the same
# string.
sub case_variant
{
	my ($str) = @_;
	my $r = rand();
	my $variant =
	    $r < 0.25 ? uc($str)
	  : $r < 0.50 ? lc($str)
	  : $r < 0.80 ? ucfirst(lc($str))
	  : join('', map { rand() < 0.5 ? uc($_) : lc($_) } split //, $str);
	return fc($variant) eq fc($str) ? $variant : undef;
}

# ASCII U+0021..U+007E and fullwidth U+FF01..U+FF5E swapped at random.
sub width_variant
{
	my ($str) = @_;
	$str =~ s{([\x21-\x7e])}{rand() < 0.5 ? chr(ord($1) + 0xfee0) : $1}ge;
	$str =~ s{([\x{ff01}-\x{ff5e}])}{rand() < 0.5 ? chr(ord($1) - 0xfee0) : $1}ge;
	return $str;
}

my $count = $ENV{FENCING_PROPERTY_COUNT} || 100_000;
my @names = map { random_name() } 1 .. $count;
# and some that must hit each limit
push @names, ('x' x 4097, "\x{fdfa}" x 20, 'ß' x 101, "\x{3000}\t\x{2028}",
	"\x{200d}" x 50, "\x{ff21}" x 201, "\x{ff21}" x 200, "e\x{301}" x 100);

my $copy_file = "${PostgreSQL::Test::Utils::tmp_check}/names_$seed.copy";
open(my $fh, '>', $copy_file) or die "cannot write $copy_file: $!";
my $case_variants = 0;
for my $i (0 .. $#names)
{
	my $case = case_variant($names[$i]);
	$case_variants++ if defined $case;
	print $fh join("\t",
		$i,
		unpack('H*', encode_utf8($names[$i])),
		defined $case ? unpack('H*', encode_utf8($case)) : '\N',
		unpack('H*', encode_utf8(width_variant($names[$i])))),
	  "\n";
}
close($fh);
chmod(0644, $copy_file);
note sprintf('%d names (%d with a case variant) generated in %.1f s',
	scalar(@names), $case_variants, time() - $started);

$node->safe_psql(
	'postgres', qq{
CREATE TABLE raw_names (i int, n text, c text, w text);
COPY raw_names FROM '$copy_file';
CREATE TABLE names AS
	SELECT i, convert_from(decode(n, 'hex'), 'UTF8') AS n,
	       convert_from(decode(c, 'hex'), 'UTF8') AS c,
	       convert_from(decode(w, 'hex'), 'UTF8') AS w
	FROM raw_names;
DROP TABLE raw_names;
-- 'ok:' and the value, or 'error:' and the SQLSTATE
CREATE FUNCTION name_probe(n text) RETURNS text LANGUAGE plpgsql AS \$\$
BEGIN
	RETURN 'ok:' || fencing.normalize_name(n);
EXCEPTION WHEN OTHERS THEN
	RETURN 'error:' || SQLSTATE;
END
\$\$;
CREATE FUNCTION key_probe(n text) RETURNS text LANGUAGE plpgsql AS \$\$
BEGIN
	RETURN 'ok:' || fencing.lock_key(n);
EXCEPTION WHEN OTHERS THEN
	RETURN 'error:' || SQLSTATE;
END
\$\$;
});
is($node->safe_psql('postgres', 'SELECT count(*) FROM names'),
	scalar(@names), 'every name loaded');

#
# One query over the table: per property, how many rows break it, and the
# first few of them.
#
my $check_started = time();
my $result = $node->safe_psql(
	'postgres', q{
CREATE FUNCTION row_probe(n text, c text, w text,
	OUT name text, OUT key text, OUT case_key text, OUT width_key text,
	OUT canonical_name text, OUT canonical_key text)
LANGUAGE plpgsql AS $$
DECLARE
	canonical text;
BEGIN
	-- one subtransaction for the common case of a valid name ...
	BEGIN
		canonical := fencing.normalize_name(n);
		name := 'ok:' || canonical;
		key := 'ok:' || fencing.lock_key(n);
		case_key := 'ok:' || fencing.lock_key(c);
		width_key := 'ok:' || fencing.lock_key(w);
		canonical_name := 'ok:' || fencing.normalize_name(canonical);
		canonical_key := 'ok:' || fencing.lock_key(canonical);
		RETURN;
	EXCEPTION WHEN OTHERS THEN
		NULL;
	END;
	-- ... and each call on its own when something failed
	name := name_probe(n);
	key := key_probe(n);
	case_key := key_probe(c);
	width_key := key_probe(w);
	IF name LIKE 'ok:%' THEN
		canonical_name := name_probe(substr(name, 4));
		canonical_key := key_probe(substr(name, 4));
	END IF;
END
$$;
CREATE TABLE checked AS
	SELECT i, c IS NOT NULL AS has_case_variant, p.*,
	       CASE WHEN p.name LIKE 'ok:%' THEN substr(p.name, 4) END AS canonical
	FROM names, LATERAL row_probe(n, c, w) AS p;
WITH props AS (
	SELECT i,
		name LIKE 'error:%' AND name NOT IN ('error:22023', 'error:42622') AS undocumented_sqlstate,
		(name LIKE 'error:%' OR key LIKE 'error:%') AND name <> key AS name_and_key_disagree,
		canonical IS NOT NULL AND canonical_name IS DISTINCT FROM name AS not_idempotent,
		canonical IS NOT NULL AND canonical_key IS DISTINCT FROM key AS key_of_canonical_differs,
		canonical IS NOT NULL AND 'ok:' || hashtextextended(canonical, 0) <> key AS key_not_hash_of_canonical,
		has_case_variant AND case_key IS DISTINCT FROM key AS case_variant_differs,
		width_key IS DISTINCT FROM key AS width_variant_differs
	FROM checked)
SELECT prop || ' ' || count(*) FILTER (WHERE bad) || ' '
	|| coalesce(string_agg(i::text, ',' ORDER BY i) FILTER (WHERE bad AND rn <= 5), '-')
FROM (SELECT i, prop, bad,
             row_number() OVER (PARTITION BY prop, bad ORDER BY i) AS rn
      FROM props,
      LATERAL (VALUES ('undocumented_sqlstate', undocumented_sqlstate),
                      ('name_and_key_disagree', name_and_key_disagree),
                      ('not_idempotent', not_idempotent),
                      ('key_of_canonical_differs', key_of_canonical_differs),
                      ('key_not_hash_of_canonical', key_not_hash_of_canonical),
                      ('case_variant_differs', case_variant_differs),
                      ('width_variant_differs', width_variant_differs)) AS v(prop, bad)) AS x
GROUP BY prop ORDER BY prop;
});
note sprintf('properties checked in %.1f s', time() - $check_started);

sub code_points
{
	my ($i) = @_;
	my $s = join(' ', map { sprintf 'U+%04X', ord } split //, $names[$i]);
	return length($s) > 200 ? substr($s, 0, 200) . '...' : $s;
}

my %seen;
for my $line (split /\n/, $result)
{
	my ($prop, $bad, $examples) = split / /, $line;
	$seen{$prop} = 1;
	my @detail =
	  $examples eq '-' ? () : map { "  #$_: " . code_points($_) } split /,/, $examples;
	is($bad, 0, "$prop: no row breaks it") or diag join("\n", "seed $seed", @detail);
}
is(scalar(keys %seen), 7, 'every property was evaluated');

# The sample reaches every outcome, so the properties above are not vacuous.
my %outcome = map { split / / } split /\n/, $node->safe_psql(
	'postgres', q{
SELECT name_kind || ' ' || count(*) FROM (
	SELECT CASE WHEN name LIKE 'ok:%' THEN 'ok' ELSE name END AS name_kind FROM checked) AS k
GROUP BY name_kind
UNION ALL
SELECT 'case_checked ' || count(*) FROM checked WHERE canonical IS NOT NULL AND case_key IS NOT NULL AND case_key = key
UNION ALL
SELECT 'width_changed ' || count(*) FROM names WHERE w <> n
UNION ALL
SELECT 'non_bmp ' || count(*) FROM checked WHERE canonical ~ '[\U00010000-\U0010FFFF]'
});
note join(', ', map { "$_ $outcome{$_}" } sort keys %outcome);
cmp_ok($outcome{ok} // 0, '>', $count * 0.8, 'most names are valid lock names');
cmp_ok($outcome{'error:22023'} // 0, '>', 100, 'empty names were drawn and refused with 22023');
cmp_ok($outcome{'error:42622'} // 0, '>', 100, 'long names were drawn and refused with 42622');
cmp_ok($outcome{case_checked} // 0, '>', $count * 0.3, 'many case variants were compared');
cmp_ok($outcome{width_changed} // 0, '>', $count * 0.3, 'many width variants differ from their name');
cmp_ok($outcome{non_bmp} // 0, '>', 1000, 'canonical names outside the BMP were produced');

#
# Memory: in one backend, normalise and hash every name twice (the ok ones
# directly, then all of them through the probes, errors included) and
# compare the total of its memory contexts before and after.  A leak of even
# a few bytes per call would show as hundreds of kilobytes.
#
my $memory = $node->safe_psql(
	'postgres', q{
CREATE TEMP TABLE ok_names AS SELECT n FROM names WHERE i IN (SELECT i FROM checked WHERE canonical IS NOT NULL);
CREATE FUNCTION context_bytes() RETURNS bigint LANGUAGE sql
	AS 'SELECT sum(used_bytes)::bigint FROM pg_backend_memory_contexts';
CREATE FUNCTION one_pass() RETURNS bigint LANGUAGE sql AS $$
	SELECT (SELECT count(fencing.normalize_name(n)) + count(fencing.lock_key(n)) FROM ok_names)
	     + (SELECT count(name_probe(n)) + count(key_probe(n)) FROM names)
$$;
SELECT one_pass();
SELECT context_bytes() AS before \gset
SELECT one_pass();
SELECT context_bytes() AS middle \gset
SELECT one_pass();
SELECT context_bytes() AS after \gset
-- and inside one statement, where memory a call leaves in a per-query
-- context would pile up until the statement ends
CREATE FUNCTION in_statement_growth() RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
	r record;
	canonical text;
	key bigint;
	samples bigint[] := '{}';
BEGIN
	-- one statement takes every sample, so that its own plan is made
	-- before the first one
	FOR pass IN 1 .. 3 LOOP
		FOR r IN SELECT n FROM ok_names LOOP
			canonical := fencing.normalize_name(r.n);
			key := fencing.lock_key(r.n);
		END LOOP;
		samples := samples || context_bytes();
	END LOOP;
	RETURN samples[3] - samples[1];
END
$$;
SELECT :before || ' ' || :middle || ' ' || :after || ' ' || in_statement_growth();
});
my ($before, $middle, $after, $in_statement) =
  (split /\n/, $memory)[-1] =~ /^(\d+) (\d+) (\d+) (-?\d+)$/
  or die "unexpected output: $memory";
note "memory growth within one statement over two more passes: $in_statement bytes";
cmp_ok(abs($in_statement), '<', 128 * 1024,
	'two passes inside one statement grow the backend memory by less than 128 kB');
note "memory contexts: before $before, after one pass $middle, after two $after bytes";
cmp_ok(abs($after - $before), '<', 1024 * 1024,
	'two passes over every name change the backend memory by less than 1 MB');
cmp_ok(abs($after - $middle), '<', 256 * 1024,
	'the second pass adds less than 256 kB over the first');

#
# The server survived everything.
#
is($node->safe_psql('postgres', 'SELECT 1'), '1', 'server still answers');
is( $node->safe_psql('postgres',
		"SELECT pid FROM pg_stat_activity WHERE backend_type = 'checkpointer'"),
	$pid_before,
	'no crash-restart happened (same checkpointer)');
my $log = slurp_file($node->logfile);
unlike($log, qr/terminated by signal|server process .* was terminated|PANIC/,
	'no backend was terminated by a signal');

note sprintf('total %.1f s', time() - $started);
$node->stop;
done_testing();
