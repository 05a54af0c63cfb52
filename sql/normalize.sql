--
-- fencing.normalize_name and fencing.lock_key (DESIGN.md contract L1, L2).
--
-- The suite runs in a UTF8 database of its own with the C collation, so that
-- its output does not depend on the locale or encoding of the instance that
-- runs it.  test/t/020_encodings.pl covers LATIN1 and other collations.
--
\set suite_db :DBNAME
CREATE DATABASE regress_fencing_normalize
	ENCODING 'UTF8' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0;
\c regress_fencing_normalize
SET client_encoding = 'UTF8';
CREATE EXTENSION fencing;

-- Full case folding: every spelling of "Straße" is one lock.
SELECT n, fencing.normalize_name(n) AS canonical
FROM (VALUES ('STRASSE'), ('strasse'), ('straße'), ('Straße'), ('STRAẞE')) v(n);
SELECT count(DISTINCT fencing.lock_key(n)) AS distinct_keys
FROM (VALUES ('STRASSE'), ('strasse'), ('straße'), ('Straße'), ('STRAẞE')) v(n);

-- Compatibility forms: ligatures, fullwidth letters, circled and
-- superscript digits, squared units, roman numerals, vulgar fractions.
SELECT n, fencing.normalize_name(n) AS canonical
FROM (VALUES ('ﬁle'), ('ﬀ'), ('ＩＮＶＯＩＣＥ'), ('Ｉｎｖｏｉｃｅ－１'), ('①②'), ('x²'),
			 ('㎏'), ('Ⅻ'), ('½')) v(n);

-- Composition: precomposed and decomposed forms are the same name, and
-- conjoining Hangul jamo compose to the syllable.
SELECT fencing.normalize_name(U&'\00E9t\00E9') = U&'\00E9t\00E9' AS composed_kept,
	   fencing.normalize_name(U&'e\0301te\0301') = U&'\00E9t\00E9' AS decomposed_composed,
	   fencing.normalize_name(U&'E\0301TE\0301') = U&'\00E9t\00E9' AS upper_decomposed,
	   fencing.lock_key('ÉTÉ') = fencing.lock_key(U&'e\0301te\0301') AS same_key,
	   fencing.normalize_name(U&'\1100\1161') = U&'\AC00' AS jamo_composed;

-- White space: any Unicode White_Space (tab, line feed, vertical tab, form
-- feed, carriage return, NEL, no-break space, ideographic space, line and
-- paragraph separators, en and em spaces) is trimmed at both ends and every
-- run of it becomes one ASCII space.
SELECT label, fencing.normalize_name(n) AS canonical,
	   fencing.normalize_name(n) = 'invoice run' AS is_invoice_run
FROM (VALUES ('plain', 'invoice run'),
			 ('padded', '   Invoice Run   '),
			 ('tabs', E'\tinvoice\t\trun\t'),
			 ('newlines', E'\ninvoice\r\n\nrun\n'),
			 ('vt ff', E'invoice\x0b\x0crun'),
			 ('nbsp', U&'invoice\00A0run'),
			 ('nel', U&'invoice\0085run'),
			 ('ideographic', U&'\3000invoice\3000\3000run\3000'),
			 ('separators', U&'\2028invoice\2029run'),
			 ('en em thin', U&'invoice\2002\2003\2009run'),
			 ('mixed run', U&'invoice \00A0\3000\0009\2028 run')) v(label, n);

-- Default-ignorable code points are removed: zero width joiner and
-- non-joiner, zero width space, soft hyphen, byte order mark, word joiner.
SELECT label, fencing.normalize_name(n) = 'invoice' AS is_invoice,
	   length(fencing.normalize_name(n)) AS chars
FROM (VALUES ('zwj', U&'in\200Dvoice'),
			 ('zwnj', U&'in\200Cvoice'),
			 ('zwsp', U&'in\200Bvoice'),
			 ('soft hyphen', U&'in\00ADvoice'),
			 ('bom', U&'\FEFFinvoice'),
			 ('word joiner', U&'invoice\2060')) v(label, n);

-- A character removed between two white-space runs leaves one run.
SELECT fencing.normalize_name(U&'invoice \200D run') AS canonical;

-- Greek: capital and both small sigmas fold to the same letter.
SELECT n, fencing.normalize_name(n) AS canonical
FROM (VALUES ('ΟΔΟΣ'), ('οδος'), ('οδοσ')) v(n);
SELECT count(DISTINCT fencing.lock_key(n)) AS distinct_keys
FROM (VALUES ('ΟΔΟΣ'), ('οδος'), ('οδοσ')) v(n);

-- Turkish dotted capital I: NFKC_Casefold (like full case folding, without
-- the Turkic option) gives "i" followed by U+0307 COMBINING DOT ABOVE, so
-- 'İ' is not the lock 'i'; dotless 'ı' stays itself and 'I' folds to 'i'.
SELECT fencing.normalize_name(U&'\0130') = U&'i\0307' AS dotted_capital_i,
	   fencing.normalize_name(U&'\0131') = U&'\0131' AS dotless_small_i,
	   fencing.normalize_name('I') = 'i' AS capital_i,
	   fencing.lock_key(U&'\0130') <> fencing.lock_key('i') AS dotted_is_other_lock;

-- The ASCII fast path (no ICU) agrees with the ICU path for every ASCII
-- character: the ICU path is forced by a leading 'é'.  Expect no rows.
SELECT i, fencing.normalize_name('é' || chr(i) || 'a') AS icu,
	   'é' || substr(fencing.normalize_name('b' || chr(i) || 'a'), 2) AS ascii
FROM generate_series(1, 127) i
WHERE fencing.normalize_name('é' || chr(i) || 'a')
	  <> 'é' || substr(fencing.normalize_name('b' || chr(i) || 'a'), 2);
-- The same for all of ASCII in one name, on both sides of a white-space run.
SELECT fencing.normalize_name('é' || s || 'é')
	   = 'é' || substr(fencing.normalize_name('b' || s || 'b'), 2,
					   length(fencing.normalize_name('b' || s || 'b')) - 2) || 'é'
	   AS ascii_agrees_with_icu
FROM (SELECT string_agg(chr(i), '' ORDER BY i) AS s
	  FROM generate_series(1, 127) i) a;
-- ASCII control characters other than white space are kept as they are.
SELECT fencing.normalize_name(E'a\x01\x1fb\x7f') = E'a\x01\x1fb\x7f' AS controls_kept;

-- Canonical names are fixed points, and the key is the hash of the name.
SELECT n, fencing.normalize_name(fencing.normalize_name(n)) = fencing.normalize_name(n) AS idempotent,
	   fencing.lock_key(n) = hashtextextended(fencing.normalize_name(n), 0) AS key_is_hash,
	   fencing.lock_key(n) = fencing.lock_key(fencing.normalize_name(n)) AS key_of_canonical
FROM (VALUES ('invoice-run:2026-10'), ('Invoice-Run:2026-10'), ('  A  b  '), ('Straße'),
			 ('ﬁle'), ('ＩＮＶＯＩＣＥ'), (U&'e\0301te\0301'), ('ΟΔΟΣ'), (U&'\0130'),
			 ('日本語 ロック'), ('🔒 lock'), (U&'\FDFA')) v(n);

-- L2: a raw advisory lock on hashtextextended of the canonical name and
-- fencing.lock_key of any spelling of it use the same key.
SELECT fencing.lock_key('Invoice-Run:2026-10') = hashtextextended('invoice-run:2026-10', 0) AS l2_interop,
	   fencing.lock_key('  INVOICE-RUN:2026-10 ') = hashtextextended('invoice-run:2026-10', 0) AS l2_spelling;

-- NULL in, NULL out (STRICT).
SELECT fencing.normalize_name(NULL) IS NULL AS name_null,
	   fencing.lock_key(NULL) IS NULL AS key_null;

-- Byte limits: at most 200 bytes of canonical UTF-8, at most 4096 bytes of
-- input.  Names longer than 200 bytes can still be valid when they shrink.
SELECT octet_length(fencing.normalize_name(repeat('x', 200))) AS ascii_200,
	   octet_length(fencing.normalize_name(repeat('é', 100))) AS utf8_200,
	   octet_length(fencing.normalize_name(repeat('ß', 100))) AS folded_200,
	   fencing.normalize_name('a' || repeat(' ', 4094) || 'b') AS input_4096,
	   fencing.normalize_name('a' || repeat(U&'\200D', 1364) || 'b') AS ignorables_4094;

-- Errors, with their SQLSTATEs.
CREATE FUNCTION pg_temp.key_error(n text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
	state text;
	message text;
	detail text;
BEGIN
	PERFORM fencing.lock_key(n);
	RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
	GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE,
		message = MESSAGE_TEXT, detail = PG_EXCEPTION_DETAIL;
	RETURN state || ': ' || message || ' / ' || detail;
END
$$;
SELECT label, pg_temp.key_error(n) AS error
FROM (VALUES ('empty', ''),
			 ('blank', '   '),
			 ('white space only', E'\t\n\r ' || U&'\00A0\3000\2028'),
			 ('ignorables only', U&'\200D\00AD\FEFF'),
			 ('201 ascii bytes', repeat('x', 201)),
			 ('201 after folding', repeat('x', 199) || 'ß'),
			 ('202 after folding', repeat('ß', 101)),
			 ('201 utf8 bytes', 'x' || repeat('é', 100)),
			 ('201 after collapse', repeat('x', 100) || E' \t ' || repeat('x', 100)),
			 ('expands past 200', repeat(U&'\FDFA', 12)),
			 ('4097 input bytes', 'a' || repeat(' ', 4095) || 'b'),
			 ('5000 bytes', repeat('x', 5000)),
			 ('10 MB', repeat('x', 10 * 1024 * 1024))) v(label, n);

-- The same errors as clients see them.
SELECT fencing.normalize_name('');
SELECT fencing.lock_key(repeat('x', 201));
SELECT fencing.lock_key(repeat('x', 10 * 1024 * 1024));

-- A 10 MB name stored in a table (compressed and toasted) is refused from
-- its raw size, before it is detoasted.
CREATE TABLE big_name (n text);
INSERT INTO big_name VALUES (repeat('x', 10 * 1024 * 1024));
SELECT pg_column_size(n) < 1024 * 1024 AS stored_compressed FROM big_name;
SELECT fencing.lock_key(n) FROM big_name;
SELECT fencing.normalize_name(n) FROM big_name;
-- The same stored out of line without compression.
ALTER TABLE big_name ALTER n SET STORAGE EXTERNAL;
TRUNCATE big_name;
INSERT INTO big_name VALUES (repeat('y', 10 * 1024 * 1024));
SELECT pg_column_size(n) = 10 * 1024 * 1024 AS stored_uncompressed FROM big_name;
SELECT fencing.lock_key(n) FROM big_name;
-- A short name read from the table through a TOAST pointer works.
TRUNCATE big_name;
INSERT INTO big_name VALUES ('Straße' || repeat(' ', 3000) || 'X');
SELECT pg_column_size(n) > 3000 AS stored_out_of_line,
	   fencing.normalize_name(n) AS canonical,
	   fencing.lock_key(n) = hashtextextended('strasse x', 0) AS same_key
FROM big_name;
DROP TABLE big_name;

\c :suite_db
DROP DATABASE regress_fencing_normalize;
