/*-------------------------------------------------------------------------
 *
 * token_setting.c
 *		The fencing.token setting, which reject_stale() falls back on,
 *		fencing.set_token(), which sets it from a bound parameter, and
 *		fencing.token_in_force(), which reads it as the trigger does.
 *
 * The setting is meant for SET LOCAL, and any role may set it: it only
 * tells the trigger which token the caller claims, and a claim is checked
 * against the row like any other.  It counts only in the transaction that
 * set it, and the check hook refuses every source but SET itself (F6): a
 * token from postgresql.conf, a role, a database, a function or a
 * connection would stand in for the token of writes that carry none, and
 * turn F2 off.  The value is parsed once when it is set, not per row: the
 * trigger reads fencing_token_setting.
 *
 * Drivers send every value as a bound parameter, and SET LOCAL takes
 * none: "SET LOCAL fencing.token = $1" is a syntax error in any driver.
 * set_token() sets the setting the way SET LOCAL does (the same GUC
 * action, source and context, so the check hook sees a SET and records
 * this transaction), which keeps every rule of the trigger about
 * fencing.token as it is: it counts only in this transaction, a savepoint
 * rolled back takes it back, RESET and a later SET LOCAL replace it.  Two
 * refusals SET LOCAL does not make, because a token set by mistake fails
 * later and further from its cause: outside a transaction block the token
 * would count for this one statement, which writes nothing (25P01; SET
 * LOCAL only warns); and a value that is not an issued token, below 1 or
 * above latest_token(), which the trigger would refuse at the first row
 * (22023, as check_fence() does).
 *
 * Copyright (c) 2026, the fencing developers
 *
 * IDENTIFICATION
 *		src/fence/token_setting.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>

#include "storage/proc.h"
#include "utils/builtins.h"
#include "utils/guc.h"

#include "fence/fence.h"

PG_FUNCTION_INFO_V1(fencing_set_token);
PG_FUNCTION_INFO_V1(fencing_token_in_force);

/* fencing.token: the raw string the GUC machinery owns ... */
static char *fence_token_string = NULL;

/* ... and the value in force, parsed (the assign hook keeps it). */
FenceTokenSetting fencing_token_setting = {false, 0, InvalidLocalTransactionId};

static bool fence_token_check_hook(char **newval, void **extra, GucSource source);
static void fence_token_assign_hook(const char *newval, void *extra);

/*
 * Define fencing.token; called from _PG_init.
 */
void
fencing_token_setting_init(void)
{
	DefineCustomStringVariable("fencing.token",
							   "Fence token that reject_stale() uses for writes that do not assign the fence column.",
							   "Counts only in the transaction that set it. Empty means unset: such writes, "
							   "and every DELETE on a protected table, are rejected. "
							   "Use SET LOCAL in the transaction that writes.",
							   &fence_token_string,
							   "",
							   PGC_USERSET,
							   GUC_NOT_IN_SAMPLE | GUC_DISALLOW_IN_FILE,
							   fence_token_check_hook,
							   fence_token_assign_hook,
							   NULL);
}

/*
 * Where a refused fencing.token came from, for the check hook's message.
 */
static const char *
fence_token_source_name(GucSource source)
{
	switch (source)
	{
		case PGC_S_FILE:
			return "the configuration file";
		case PGC_S_ARGV:
			return "the server's command line";
		case PGC_S_ENV_VAR:
			return "the server's environment";
		case PGC_S_GLOBAL:
		case PGC_S_DATABASE:
		case PGC_S_USER:
		case PGC_S_DATABASE_USER:
			return "ALTER ROLE or ALTER DATABASE ... SET";
		case PGC_S_CLIENT:
			return "the connection's options";
		case PGC_S_TEST:
			return "ALTER ROLE, ALTER DATABASE or a function's SET clause";
		default:
			return "a setting that outlives the transaction";
	}
}

/*
 * Parse a value of fencing.token: an empty string (unset, *is_set false)
 * or a non-negative bigint.  False, with the GUC error set, for anything
 * else.
 */
static bool
fence_token_parse(const char *str, int64 *value, bool *is_set)
{
	char	   *end;

	*value = 0;
	*is_set = false;
	if (str != NULL)
	{
		while (isspace((unsigned char) *str))
			str++;
	}
	if (str == NULL || *str == '\0')
		return true;

	errno = 0;
	*value = strtoi64(str, &end, 10);
	while (isspace((unsigned char) *end))
		end++;

	if (end == str || *end != '\0' || !isdigit((unsigned char) *str))
	{
		GUC_check_errcode(ERRCODE_INVALID_PARAMETER_VALUE);
		GUC_check_errdetail("fencing.token must be a non-negative integer (a fence token from fencing.next_token() or a lock function), or empty to unset it.");
		return false;
	}
	if (errno == ERANGE)
	{
		GUC_check_errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE);
		GUC_check_errdetail("fencing.token must fit in a bigint.");
		return false;
	}
	*is_set = true;
	return true;
}

/*
 * Accept an empty string (unset) or a non-negative bigint, and hand the
 * parsed value to the assign hook, so that a bad value fails at SET time
 * with a clear message rather than at some later row.  A token is taken
 * only from SET, set_config() and their like (PGC_S_SESSION), and remembers
 * the transaction that set it; from any other source it is refused (an
 * error for ALTER ROLE/DATABASE/FUNCTION ... SET and connection options; a
 * WARNING or LOG line, and the value ignored, for stored settings and
 * postgresql.conf).  Unsetting is allowed from everywhere.  What it hands
 * on comes from fencing_guc_extra_alloc (base.h): GUC frees it.
 */
static bool
fence_token_check_hook(char **newval, void **extra, GucSource source)
{
	FenceTokenSetting *setting;
	int64		value;
	bool		is_set;

	if (!fence_token_parse(*newval, &value, &is_set))
		return false;

	if (is_set && source != PGC_S_SESSION)
	{
		GUC_check_errcode(ERRCODE_CANT_CHANGE_RUNTIME_PARAM);
		GUC_check_errmsg("fencing.token can only be set in the transaction that writes");
		GUC_check_errdetail("A value from %s would outlive that transaction and stand in for the token of later writes.",
							fence_token_source_name(source));
		GUC_check_errhint("Run SET LOCAL fencing.token = <token of the lock you hold> in the transaction that writes.");
		return false;
	}

	setting = (FenceTokenSetting *) fencing_guc_extra_alloc(sizeof(FenceTokenSetting));
	if (setting == NULL)
	{
		GUC_check_errcode(ERRCODE_OUT_OF_MEMORY);
		return false;
	}
	setting->is_set = is_set;
	setting->value = value;
	/* the postmaster defines the setting before it has a PGPROC */
	setting->lxid = MyProc != NULL ? FENCING_MY_LXID : InvalidLocalTransactionId;
	*extra = setting;
	return true;
}

/*
 * Keep the parsed token in plain variables: the trigger reads them per
 * row instead of parsing a string.
 */
static void
fence_token_assign_hook(const char *newval, void *extra)
{
	FenceTokenSetting *setting = (FenceTokenSetting *) extra;

	if (setting == NULL)
	{
		fencing_token_setting.is_set = false;
		fencing_token_setting.value = 0;
		fencing_token_setting.lxid = InvalidLocalTransactionId;
		return;
	}
	fencing_token_setting = *setting;
}

/*
 * Refuse a token that no lock call can have returned: the trigger's rule
 * (F8), 1 <= token <= latest_token().
 */
static void
set_token_check_issued(int64 token)
{
	int64		latest;

	if (token < 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("fencing.set_token(): token " INT64_FORMAT " has not been issued", token),
				 errdetail("Fence tokens start at 1."),
				 errhint("Pass the token your lock call returned.")));

	latest = fencing_read_latest_token();
	if (token > latest)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("fencing.set_token(): token " INT64_FORMAT " has not been issued", token),
				 errdetail("The highest token issued so far is " INT64_FORMAT ".", latest),
				 errhint("Pass the token your lock call returned.")));
}

/*
 * fencing.set_token(token bigint) returns bigint: SET LOCAL fencing.token
 * = token, for the rest of this transaction.  Returns the token.
 */
Datum
fencing_set_token(PG_FUNCTION_ARGS)
{
	char		value[32];
	int64		token;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("fencing.set_token(): token must not be null"),
				 errhint("Pass the token your lock call returned; RESET fencing.token unsets it.")));

	if (fencing_outside_transaction_block())
		ereport(ERROR,
				(errcode(ERRCODE_NO_ACTIVE_SQL_TRANSACTION),
				 errmsg("fencing.set_token() can only be used in transaction blocks"),
				 errdetail("Outside a transaction block the token would count only for the statement that sets it."),
				 errhint("Call it after BEGIN, in the transaction that writes.")));

	/* before judging the token: on a standby, "not issued" would hide why */
	fencing_error_if_standby("fencing.set_token()");

	token = PG_GETARG_INT64(0);
	set_token_check_issued(token);

	snprintf(value, sizeof(value), INT64_FORMAT, token);
	(void) set_config_option("fencing.token", value, PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_LOCAL, true, 0, false);
	PG_RETURN_INT64(token);
}

/*
 * fencing.token_in_force() returns bigint: the token the trigger takes for
 * a write of this transaction that carries none, or NULL when there is
 * none (unset, or set where it does not count).  stamp.c puts a call to it
 * in place of the fence column an INSERT does not name, so that the row is
 * built with its token and the trigger has nothing to stamp; a caller may
 * read it too.  Cheap: it runs once per row.
 */
Datum
fencing_token_in_force(PG_FUNCTION_ARGS)
{
	if (!fencing_token_counts())
		PG_RETURN_NULL();
	PG_RETURN_INT64(fencing_token_setting.value);
}
