/*-------------------------------------------------------------------------
 *
 * args.c
 *		The arguments of the lock functions: a name that must not be null,
 *		a timeout that bounds a wait, a lease's ttl.
 *
 * Every lock function reads them the same way, so each has one reading:
 * the messages, the rounding and the limits are those of every function
 * that takes the argument.
 *
 * Copyright (c) 2026, the fencing developers
 *
 * IDENTIFICATION
 *		src/locks/args.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "utils/timestamp.h"

#include "locks/locks.h"

/*
 * The error of fencing_error_if_null_name: a NULL lock name would silently
 * mean "no lock".
 */
void
fencing_report_null_name(void)
{
	ereport(ERROR,
			(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
			 errmsg("lock name must not be null")));
}

/*
 * The timeout argument (number argno) of the waiting functions: false when
 * the wait has no bound (NULL, 'infinity', or longer than a timestamp can
 * count, some hundred thousand years), else true with *timeout_ms set,
 * rounded up to whole milliseconds.  Negative (also '-infinity') is an
 * error.
 */
bool
fencing_timeout_arg(FunctionCallInfo fcinfo, int argno, int64 *timeout_ms)
{
	double		usecs;

	*timeout_ms = 0;
	if (PG_ARGISNULL(argno))
		return false;
	usecs = fencing_interval_usecs(PG_GETARG_INTERVAL_P(argno));
	if (usecs < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("lock timeout must not be negative"),
				 errhint("Pass NULL to wait without a timeout, or zero to try once.")));
	if (usecs > (double) (PG_INT64_MAX / 2))
		return false;
	*timeout_ms = (int64) ceil(usecs / 1000.0);
	return true;
}

/*
 * A lease's ttl in milliseconds, rounded down (a lease never lasts longer
 * than asked): between 1 millisecond and INT_MAX milliseconds, the range
 * of idle_in_transaction_session_timeout.
 */
int
fencing_ttl_arg_ms(const Interval *ttl)
{
	double		usecs = fencing_interval_usecs(ttl);

	if (usecs <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("lease ttl must be positive")));
	if (usecs < 1000.0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("lease ttl must be at least 1 millisecond")));
	if (usecs / 1000.0 > (double) INT_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("lease ttl must be at most %d milliseconds", INT_MAX)));
	return (int) floor(usecs / 1000.0);
}
