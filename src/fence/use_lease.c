/*-------------------------------------------------------------------------
 *
 * use_lease.c
 *		fencing.use_lease(name, token): the first statement of each
 *		transaction of a lease holder's work.
 *
 * A job that holds a lease (locks/leases.c) commits its work in batches;
 * each batch must prove, in its own transaction, that the lease is still
 * its own, and must be rejected by the resource once a newer holder has
 * come.  use_lease() does both in one round trip: it checks the lease
 * (FN004 when it is not held with the token), raises the resource fence
 * of the lease's name to the token as fencing.check_fence(name, token)
 * does (FN001 when a newer holder passed it), sets this transaction's
 * fencing.token as fencing.set_token() does, so that the batch's writes
 * to protected tables carry the token, and renews the lease.  The renewal
 * comes last: a use_lease() that fails in any step leaves the lease as it
 * was, so a holder fenced out by a newer one does not keep the name
 * blocked with every failed batch.
 *
 * The raised fence keeps its row of fencing.resource_fences locked until
 * the batch's transaction ends, so for the rest of that transaction the
 * holder may sit idle for at most the lease's ttl, as in a transaction
 * that holds fencing.lease() (locks/tx_lease.c): a holder frozen in the
 * middle of a batch has its session ended and the row lock freed, and the
 * next holder's use_lease() does not wait for it for ever.
 *
 * The fence is raised by fencing.check_fence() itself, called by its OID:
 * the same SECURITY DEFINER code writes the watermark.  Holding the lease
 * is what lets the caller raise the fence of its name, and of no other
 * name: the right to call use_lease() is EXECUTE on it, which PUBLIC lacks
 * since 1.3.  Where PUBLIC may still execute it (an extension created
 * before 1.3 and not yet updated, or a grant to PUBLIC), that right says
 * nothing about the caller, and the caller needs EXECUTE on check_fence()
 * as well (F9: PUBLIC may not raise fences).
 *
 * Copyright (c) 2026, the fencing developers
 *
 * IDENTIFICATION
 *		src/fence/use_lease.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "nodes/value.h"
#include "parser/parse_func.h"
#include "utils/acl.h"
#include "utils/builtins.h"

#include "fence/fence.h"

PG_FUNCTION_INFO_V1(fencing_use_lease);

/*
 * The OID of fencing.check_fence(text, bigint), through which use_lease()
 * raises the fence.  When PUBLIC may execute use_lease (use_lease_oid),
 * the caller must also be allowed to execute check_fence (see the file
 * header); checked before the lease is touched, and refused in
 * use_lease()'s own terms: the caller asked for use_lease(), and must
 * learn which right it lacks and how to get it.
 */
static Oid
check_fence_function(Oid use_lease_oid)
{
	Oid			argtypes[2] = {TEXTOID, INT8OID};
	Oid			fnoid;
	Oid			roleid = GetUserId();
	const char *role;

	fnoid = LookupFuncName(list_make2(makeString("fencing"),
									  makeString("check_fence")),
						   2, argtypes, false);
	if (fencing_function_aclcheck(use_lease_oid, ACL_ID_PUBLIC) != ACLCHECK_OK ||
		fencing_function_aclcheck(fnoid, roleid) == ACLCHECK_OK)
		return fnoid;
	role = GetUserNameFromId(roleid, false);
	ereport(ERROR,
			(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			 errmsg("permission denied to raise the resource fence of a lease"),
			 errdetail("PUBLIC may execute fencing.use_lease(), so it raises the resource fence of the lease's name only for roles that may execute fencing.check_fence(text, bigint), and role \"%s\" may not.",
					   role),
			 errhint("Update the extension (ALTER EXTENSION fencing UPDATE), which revokes use_lease from PUBLIC, and grant it to the role that holds the lease: GRANT EXECUTE ON FUNCTION fencing.use_lease(text, bigint) TO %s;",
					 quote_identifier(role))));
	return InvalidOid;			/* keep the compiler quiet */
}

/*
 * SQL: fencing.use_lease(name, token).  The first statement of each
 * transaction of the holder's work: FN004 unless the lease is held with
 * token; raises the resource fence of name to token, as check_fence(name,
 * token) does (FN001 when a newer holder passed it); sets this
 * transaction's fencing.token; then renews the lease.  For the rest of
 * the transaction the holder may sit idle for at most the lease's ttl.
 * Returns the token.
 */
Datum
fencing_use_lease(PG_FUNCTION_ARGS)
{
	int64		token;
	int			ttl_ms;
	Oid			check_fence;

	fencing_error_if_standby("fencing.use_lease()");
	if (fencing_outside_transaction_block())
		ereport(ERROR,
				(errcode(ERRCODE_NO_ACTIVE_SQL_TRANSACTION),
				 errmsg("fencing.use_lease() can only be used in transaction blocks"),
				 errdetail("It raises the resource fence and sets fencing.token for the transaction that does the work; outside a transaction block that transaction ends with the statement."),
				 errhint("Start each batch with BEGIN, call fencing.use_lease() first, do the work, then COMMIT.")));

	check_fence = check_fence_function(fcinfo->flinfo->fn_oid);

	ttl_ms = fencing_lease_check_for_use(fcinfo, &token);
	fencing_lease_idle_limit_for_use(ttl_ms);
	(void) OidFunctionCall2(check_fence, PG_GETARG_DATUM(0),
							Int64GetDatum(token));
	(void) DirectFunctionCall1(fencing_set_token, Int64GetDatum(token));
	fencing_lease_renew_for_use(fcinfo);
	PG_RETURN_INT64(token);
}
