/*-------------------------------------------------------------------------
 *
 * set_token.c
 *		fencing.set_token(): the transaction's fencing.token from a bound
 *		parameter.
 *
 * Drivers send every value as a bound parameter, and SET LOCAL takes
 * none: "SET LOCAL fencing.token = $1" is a syntax error in any driver.
 * set_token() sets the setting the way SET LOCAL does (the same GUC
 * action, source and context, so fence_trigger.c's check hook sees a SET
 * and records this transaction), which keeps every rule of the trigger
 * about fencing.token as it is: it counts only in this transaction, a
 * savepoint rolled back takes it back, RESET and a later SET LOCAL replace
 * it.
 *
 * Two refusals SET LOCAL does not make, because a token set by mistake
 * fails later and further from its cause: outside a transaction block the
 * token would count for this one statement, which writes nothing (25P01;
 * SET LOCAL only warns); and a value that is not an issued token, below 1
 * or above latest_token(), which the trigger would refuse at the first row
 * (22023, as check_fence() does).
 *
 * Copyright (c) 2026, the fencing developers
 *
 * IDENTIFICATION
 *		src/set_token.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/guc.h"

#include "fencing.h"

PG_FUNCTION_INFO_V1(fencing_set_token);

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
