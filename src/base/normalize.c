/*-------------------------------------------------------------------------
 *
 * normalize.c
 *		Lock names: one canonical UTF-8 form per name, and its advisory key.
 *
 * Names that differ only by case (full Unicode case folding), compatibility
 * or composition forms, or white space are the same lock (contract L1).  The
 * canonical name is NFKC_Casefold of the name (ICU), trimmed, with every run
 * of Unicode White_Space collapsed to one ASCII space.  It is computed on the
 * UTF-8 form of the name and never consults the database's collation or
 * ctype, so a LATIN1 database and a UTF8 database give the same name and the
 * same key.  The key is hashtextextended() of the canonical UTF-8 bytes with
 * seed 0 (contract L2), so code that calls pg_try_advisory_xact_lock on that
 * hash directly excludes, and is excluded by, fencing.try_lock.
 *
 * Limits: the canonical name may have at most FENCING_NAME_MAX_BYTES bytes
 * of UTF-8; input over FENCING_NAME_MAX_INPUT_BYTES bytes (in the database
 * encoding) is refused before it is detoasted or normalised, so a huge
 * argument costs nothing.
 *
 * Names made only of ASCII bytes (the common case) take a fast path: for
 * ASCII, NFKC_Casefold only maps A-Z to a-z, and the only ASCII White_Space
 * characters are 0x09-0x0D and 0x20, so the canonical name is built in one
 * pass without ICU and without palloc.  Every server encoding that
 * PostgreSQL supports is ASCII-compatible (a byte below 0x80 is always that
 * ASCII character), so the fast path holds in every database.  Other names
 * go through ICU; that path may palloc (encoding conversion, and names whose
 * UTF-16 forms do not fit the stack buffers) and frees what it allocated.
 *
 * The canonical form depends on the Unicode version of the ICU library the
 * server is linked with: a character unassigned in one version may fold
 * differently in a later one.  Names of assigned characters are stable
 * (Unicode's normalisation stability policy).
 *
 * Copyright (c) 2026, the fencing developers
 *
 * IDENTIFICATION
 *		src/base/normalize.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <unicode/uchar.h>
#include <unicode/unorm2.h>
#include <unicode/ustring.h>
#include <unicode/utf16.h>
#include <unicode/utf8.h>

#include "access/detoast.h"
#include "common/hashfn.h"
#include "mb/pg_wchar.h"
#include "utils/builtins.h"

#include "base/base.h"

PG_FUNCTION_INFO_V1(fencing_normalize_name);
PG_FUNCTION_INFO_V1(fencing_lock_key);

/*
 * UTF-16 buffers on the stack for the ICU path.  The input buffer holds any
 * name that passed the input limit and needs at most one code unit per
 * UTF-8 byte; normalisation can expand (NFKC of U+FDFA is 18 characters),
 * so the output falls back to palloc when it does not fit.
 */
#define NORMALIZE_STACK_UNITS	(FENCING_NAME_MAX_INPUT_BYTES + 1)

/* ICU's NFKC_Casefold normaliser: a process-wide singleton owned by ICU */
static const UNormalizer2 *nfkc_casefold = NULL;

/*
 * What the name being canonicalised names, for the messages: "lock" or
 * "resource" (check_fence).  Set on every entry, so an error that left it
 * set does not matter.
 */
static const char *canonical_name_noun = "lock";

static int	canonical_name_ascii(const char *name, int len, char *buf);
static int	canonical_name_icu(const char *name, int len, char *buf);
static const UNormalizer2 *get_nfkc_casefold(void);
static void canonical_name_error_if_bad_length(int canonical_len);
static void normalize_name_conversion_context(void *arg);

/*
 * Canonical name of "name" (a text Datum in the database encoding, possibly
 * toasted), written NUL-terminated into buf, which must have room for
 * FENCING_NAME_MAX_BYTES + 1 bytes.  Returns its length in bytes.
 *
 * The input limit is checked on the raw size before detoasting, so that a
 * 10 MB argument is refused without being read.  Raises an error for an
 * empty or blank name and for a canonical name over the byte limit.
 */
int
fencing_canonical_name(Datum name, char *buf)
{
	return fencing_canonical_name_of(name, buf, "lock");
}

/*
 * fencing_canonical_name() for a name of something else than a lock:
 * "noun" ("resource") is what its errors call it.
 */
int
fencing_canonical_name_of(Datum name, char *buf, const char *noun)
{
	struct varlena *raw = (struct varlena *) DatumGetPointer(name);
	struct varlena *detoasted;
	int			canonical_len;

	canonical_name_noun = noun;

	/*
	 * An inline short (1-byte header) varlena is at most 126 bytes: nothing
	 * to check.  A TOAST pointer has a 1-byte header too, hence the second
	 * test.
	 */
	if (!VARATT_IS_SHORT(raw) || VARATT_IS_EXTERNAL(raw))
	{
		Size		input_bytes = toast_raw_datum_size(name) - VARHDRSZ;

		if (input_bytes > FENCING_NAME_MAX_INPUT_BYTES)
			ereport(ERROR,
					(errcode(ERRCODE_NAME_TOO_LONG),
					 errmsg("%s name is too long", noun),
					 errdetail("The name is %zu bytes; names over %d bytes are refused before normalising.",
							   input_bytes, FENCING_NAME_MAX_INPUT_BYTES),
					 errhint("A canonical %s name may have at most %d bytes of UTF-8.",
							 noun, FENCING_NAME_MAX_BYTES)));
	}

	detoasted = PG_DETOAST_DATUM_PACKED(name);

	/* most names are ASCII; the fast path gives up at the first other byte */
	canonical_len = canonical_name_ascii(VARDATA_ANY(detoasted),
										 VARSIZE_ANY_EXHDR(detoasted), buf);
	if (canonical_len < 0)
		canonical_len = canonical_name_icu(VARDATA_ANY(detoasted),
										   VARSIZE_ANY_EXHDR(detoasted), buf);

	if ((Pointer) detoasted != DatumGetPointer(name))
		pfree(detoasted);

	return canonical_len;
}

/*
 * The advisory lock key of a canonical name.  hashtextextended() hashes a
 * text's bytes with hash_any_extended() under a deterministic collation, so
 * this equals hashtextextended(canonical, 0) in a UTF8 database (L2).
 */
int64
fencing_key_of_canonical(const char *buf, int len)
{
	return (int64) DatumGetUInt64(hash_any_extended((const unsigned char *) buf,
													len, 0));
}

/*
 * fencing.normalize_name(text) returns text: the canonical name in the
 * database encoding.  In a database whose encoding cannot represent a
 * character of the canonical name (say the Greek mu that the micro sign
 * folds to, in LATIN1), PostgreSQL's conversion error is raised, with a
 * context line saying it came from here; lock_key still works for such a
 * name, as it never leaves UTF-8.
 */
Datum
fencing_normalize_name(PG_FUNCTION_ARGS)
{
	PG_RETURN_TEXT_P(fencing_canonical_text(PG_GETARG_DATUM(0), "lock"));
}

/*
 * The canonical name of "name" in the database encoding, as
 * normalize_name() returns it; "noun" names it in errors ("lock",
 * "resource").
 */
text *
fencing_canonical_text(Datum name, const char *noun)
{
	char		canonical[FENCING_NAME_MAX_BYTES + 1];
	int			canonical_len;
	char	   *converted;
	ErrorContextCallback errcallback;

	canonical_len = fencing_canonical_name_of(name, canonical, noun);

	errcallback.callback = normalize_name_conversion_context;
	errcallback.arg = (void *) noun;
	errcallback.previous = error_context_stack;
	error_context_stack = &errcallback;

	converted = pg_any_to_server(canonical, canonical_len, PG_UTF8);

	error_context_stack = errcallback.previous;

	if (converted == canonical)
		return cstring_to_text_with_len(canonical, canonical_len);
	return cstring_to_text(converted);
}

/*
 * fencing.lock_key(text) returns bigint: the advisory lock key of the name,
 * identical in every database of the cluster whatever its encoding.
 */
Datum
fencing_lock_key(PG_FUNCTION_ARGS)
{
	char		canonical[FENCING_NAME_MAX_BYTES + 1];
	int			canonical_len;

	canonical_len = fencing_canonical_name(PG_GETARG_DATUM(0), canonical);
	PG_RETURN_INT64(fencing_key_of_canonical(canonical, canonical_len));
}

/*
 * White space is collapsed lazily: a run only becomes one space when a
 * character follows it, which trims trailing white space for free.  Bytes
 * past the limit are counted but not stored, so the caller can report the
 * canonical length in its error.
 */
static inline void
flush_pending_space(char *buf, int *out, bool *pending_space)
{
	if (!*pending_space)
		return;
	if (*out < FENCING_NAME_MAX_BYTES)
		buf[*out] = ' ';
	(*out)++;
	*pending_space = false;
}

/*
 * Fast path for a name of ASCII bytes only: lower-case A-Z, drop leading and
 * trailing white space, and turn every inner run of it into one space.  The
 * output length is still counted past the limit, so that the error can say
 * how long the canonical name is.  Returns -1, having raised nothing, at the
 * first byte that is not ASCII: every server encoding is ASCII-compatible,
 * so a byte below 0x80 is always that ASCII character, and any other byte
 * needs the ICU path.
 */
static int
canonical_name_ascii(const char *name, int len, char *buf)
{
	int			out = 0;
	bool		pending_space = false;
	int			i;

	for (i = 0; i < len; i++)
	{
		unsigned char c = (unsigned char) name[i];

		if (unlikely(IS_HIGHBIT_SET(c)))
			return -1;
		if (c == ' ' || (c >= '\t' && c <= '\r'))
		{
			pending_space = (out > 0);
			continue;
		}
		flush_pending_space(buf, &out, &pending_space);
		if (c >= 'A' && c <= 'Z')
			c += 'a' - 'A';
		if (out < FENCING_NAME_MAX_BYTES)
			buf[out] = (char) c;
		out++;
	}

	canonical_name_error_if_bad_length(out);
	buf[out] = '\0';
	return out;
}

/*
 * The name as UTF-16 for ICU, converted through UTF-8 whatever the
 * database encoding: in input_stack, or palloc'd when it does not fit.
 * Sets *units.
 */
static UChar *
name_to_utf16(const char *name, int len, UChar *input_stack, int32_t *units)
{
	UChar	   *input = input_stack;
	char	   *utf8;
	int			utf8_len;
	UErrorCode	status = U_ZERO_ERROR;

	/* to UTF-8, independent of the database encoding */
	utf8 = pg_server_to_any(name, len, PG_UTF8);
	utf8_len = (utf8 == name) ? len : (int) strlen(utf8);

	/* one UTF-16 code unit per UTF-8 byte is always enough */
	if (utf8_len + 1 > NORMALIZE_STACK_UNITS)
		input = palloc(sizeof(UChar) * (utf8_len + 1));
	u_strFromUTF8(input, utf8_len + 1, units, utf8, utf8_len, &status);
	if (U_FAILURE(status))
		ereport(ERROR,
				(errcode(ERRCODE_CHARACTER_NOT_IN_REPERTOIRE),
				 errmsg("%s name is not valid UTF-8", canonical_name_noun),
				 errdetail("ICU could not convert the name to UTF-16: %s.",
						   u_errorName(status))));
	if (utf8 != name)
		pfree(utf8);
	return input;
}

/*
 * NFKC_Casefold of the UTF-16 name (which also removes default-ignorable
 * code points such as U+200D ZERO WIDTH JOINER and U+00AD SOFT HYPHEN): in
 * folded_stack, or palloc'd when the name expanded past it.  Sets *units.
 */
static UChar *
fold_utf16(const UChar *input, int32_t input_units, UChar *folded_stack,
		   int32_t *units)
{
	const UNormalizer2 *normalizer = get_nfkc_casefold();
	UChar	   *folded = folded_stack;
	UErrorCode	status = U_ZERO_ERROR;

	*units = unorm2_normalize(normalizer, input, input_units,
							  folded, NORMALIZE_STACK_UNITS, &status);
	if (status == U_BUFFER_OVERFLOW_ERROR)
	{
		/* the name expanded: retry with exactly the room ICU asked for */
		status = U_ZERO_ERROR;
		folded = palloc(sizeof(UChar) * (*units + 1));
		*units = unorm2_normalize(normalizer, input, input_units,
								  folded, *units + 1, &status);
	}
	if (U_FAILURE(status))
		ereport(ERROR,
				(errcode(ERRCODE_EXTERNAL_ROUTINE_EXCEPTION),
				 errmsg("could not normalise %s name", canonical_name_noun),
				 errdetail("ICU's NFKC_Casefold failed: %s.", u_errorName(status))));
	return folded;
}

/*
 * Write the folded name into buf as UTF-8, dropping leading and trailing
 * White_Space and turning every inner run of it into one space.  Returns
 * the canonical length, counted past the limit as the ASCII path does.
 */
static int
write_canonical_utf8(const UChar *folded, int32_t folded_units, char *buf)
{
	int			out = 0;
	bool		pending_space = false;
	int32_t		i = 0;

	while (i < folded_units)
	{
		UChar32		c;
		int			c_len;

		U16_NEXT(folded, i, folded_units, c);
		if (U_IS_SURROGATE(c))
			ereport(ERROR,
					(errcode(ERRCODE_CHARACTER_NOT_IN_REPERTOIRE),
					 errmsg("%s name is not valid Unicode", canonical_name_noun),
					 errdetail("Normalisation produced the unpaired UTF-16 surrogate U+%04X.",
							   (unsigned int) c)));
		if (u_isUWhiteSpace(c))
		{
			pending_space = (out > 0);
			continue;
		}
		flush_pending_space(buf, &out, &pending_space);
		c_len = U8_LENGTH(c);
		if (out + c_len <= FENCING_NAME_MAX_BYTES)
			U8_APPEND_UNSAFE(buf, out, c);
		else
			out += c_len;
	}
	return out;
}

/*
 * General path: convert the name to UTF-8, then to UTF-16 for ICU, apply
 * NFKC_Casefold, then trim and collapse White_Space while writing UTF-8
 * into buf.
 */
static int
canonical_name_icu(const char *name, int len, char *buf)
{
	UChar		input_stack[NORMALIZE_STACK_UNITS];
	UChar		folded_stack[NORMALIZE_STACK_UNITS];
	UChar	   *input;
	UChar	   *folded;
	int32_t		input_units;
	int32_t		folded_units;
	int			out;

	input = name_to_utf16(name, len, input_stack, &input_units);
	folded = fold_utf16(input, input_units, folded_stack, &folded_units);
	out = write_canonical_utf8(folded, folded_units, buf);

	if (input != input_stack)
		pfree(input);
	if (folded != folded_stack)
		pfree(folded);

	canonical_name_error_if_bad_length(out);
	buf[out] = '\0';
	return out;
}

/*
 * ICU's normaliser instances are created once per process and owned by ICU;
 * keep the pointer so that each call costs no lookup.
 */
static const UNormalizer2 *
get_nfkc_casefold(void)
{
	if (nfkc_casefold == NULL)
	{
		UErrorCode	status = U_ZERO_ERROR;
		const UNormalizer2 *normalizer;

		normalizer = unorm2_getNFKCCasefoldInstance(&status);
		if (U_FAILURE(status))
			ereport(ERROR,
					(errcode(ERRCODE_EXTERNAL_ROUTINE_EXCEPTION),
					 errmsg("could not load ICU's NFKC_Casefold normaliser"),
					 errdetail("ICU reported: %s.", u_errorName(status))));
		nfkc_casefold = normalizer;
	}
	return nfkc_casefold;
}

/*
 * Both paths end here: an empty canonical name would make every blank name
 * one lock, and a long one is over the documented limit.
 */
static void
canonical_name_error_if_bad_length(int canonical_len)
{
	if (canonical_len == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s name must not be empty", canonical_name_noun),
				 errdetail("The name is empty after normalisation: it has only white space or characters that NFKC_Casefold removes."),
				 errhint("Give the %s a name with at least one visible character.", canonical_name_noun)));
	if (canonical_len > FENCING_NAME_MAX_BYTES)
		ereport(ERROR,
				(errcode(ERRCODE_NAME_TOO_LONG),
				 errmsg("%s name is too long", canonical_name_noun),
				 errdetail("The canonical name is %d bytes of UTF-8; the limit is %d bytes.",
						   canonical_len, FENCING_NAME_MAX_BYTES),
				 errhint("Use a shorter name, for example a hash of the long identifier.")));
}

/*
 * Error context for normalize_name's conversion back to the database
 * encoding: the canonical form can hold characters the database encoding
 * lacks even when the input was representable.
 */
static void
normalize_name_conversion_context(void *arg)
{
	errcontext("converting the canonical %s name from UTF-8 to the database encoding \"%s\"",
			   (const char *) arg, GetDatabaseEncodingName());
}
