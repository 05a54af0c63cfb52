/*-------------------------------------------------------------------------
 *
 * correctness_lock.c
 *		The minimal libpq pattern for a correctness lock with a fence.
 *
 * Copy this when duplicate work would corrupt data.  In one transaction:
 *
 *	BEGIN;
 *	SELECT fencing.try_lock($name);            -- NULL: busy, ROLLBACK, exit
 *	SELECT fencing.held_token($name);          -- before each side effect
 *	SELECT fencing.check_fence($name, $token); -- first in every transaction
 *	                                           -- that writes; FN001: stop
 *	UPDATE example.accounts
 *	   SET balance = balance + $amount, fence = $token
 *	 WHERE id = $id;                           -- FN001: a newer holder exists
 *	COMMIT;
 *
 * The lock keeps healthy pods apart; the fences stop a pod whose lock was
 * lost while it was paused.  There are two, and both are needed:
 *
 *	- the run's fence, fencing.check_fence($name, $token), on the lock's
 *	  resource, before the first write of every transaction that writes for
 *	  it.  The newest holder's check raised the resource's watermark, so an
 *	  older holder fails here before it writes anything, including rows the
 *	  newer holder has not written yet.  A row's own fence cannot stop that:
 *	  it only knows the holders that wrote the row.
 *	- the row's fence (fencing.protect on the table): each write carries the
 *	  token, and the trigger refuses one below the row's fence, whoever
 *	  wrote it.
 *
 * SQLSTATE FN001 from either means "stop": a newer holder exists, so this
 * pod must not retry.  EXECUTE on fencing.check_fence is revoked from
 * PUBLIC (fencing 1.1): the role this runs as needs it granted
 * (examples/ledger.sql grants it to role example_worker; run as a member of
 * it), or it fails with "permission denied for function check_fence".
 * For a lock the server takes away from a stalled holder, use
 * fencing.lease($name, '30s') in place of fencing.try_lock($name) and call
 * fencing.held_token about every third of the ttl.
 *
 * usage: correctness_lock LOCK_NAME ACCOUNT_ID AMOUNT [PAUSE_SECONDS]
 *		The connection comes from the PG* environment variables.  The table
 *		comes from examples/ledger.sql.  PAUSE_SECONDS sleeps between taking
 *		the lock and writing, to try the stale paths by hand: while it
 *		sleeps, play a newer holder in another session, e.g.
 *		BEGIN; SELECT fencing.check_fence('invoice-run:2026-10',
 *		fencing.next_token()); COMMIT;   (the check fails: FN001)
 *		or write the row with a newer token:
 *		UPDATE example.accounts SET fence = fencing.next_token() WHERE id = 1;
 *
 * Output and exit status:
 *		got token N for 'NAME'                         (then one of:)
 *		committed: account ID +AMOUNT with fence N     exit 0
 *		busy: 'NAME' is held by another transaction    exit 2
 *		stale: SQLSTATE FN001: MESSAGE                 exit 3
 *		  detail: DETAIL
 *		stopping: a newer holder exists; no retry
 *		lost: ...                                      exit 4
 *		error: ...                                     exit 1
 *
 * Build:
 *		gcc -Wall -Wextra -I"$(pg_config --includedir)" correctness_lock.c \
 *			-L"$(pg_config --libdir)" -lpq -o correctness_lock
 *
 * Copyright (c) 2026, the fencing developers
 *
 * IDENTIFICATION
 *		examples/correctness_lock.c
 *
 *-------------------------------------------------------------------------
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <libpq-fe.h>

#define EXIT_COMMITTED	0
#define EXIT_ERROR		1
#define EXIT_BUSY		2
#define EXIT_STALE		3
#define EXIT_LOST		4

/*
 * Report a failed statement and end the process with the status it
 * deserves.  FN001 is not an error to retry: a newer holder has written the
 * resource, so this one stops.  Ending the process closes the connection,
 * which rolls back the transaction and releases the lock.
 */
static void
fail(PGconn *conn, PGresult *res)
{
	const char *sqlstate = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;

	if (sqlstate && strcmp(sqlstate, "FN001") == 0)
	{
		const char *detail = PQresultErrorField(res, PG_DIAG_MESSAGE_DETAIL);

		printf("stale: SQLSTATE FN001: %s\n", PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY));
		if (detail)
			printf("  detail: %s\n", detail);
		printf("stopping: a newer holder exists; no retry\n");
		PQfinish(conn);
		exit(EXIT_STALE);
	}
	if (PQstatus(conn) == CONNECTION_BAD)
	{
		printf("lost: the session ended, and the lock with it: %s", PQerrorMessage(conn));
		PQfinish(conn);
		exit(EXIT_LOST);
	}
	printf("error: %s", res ? PQresultErrorMessage(res) : PQerrorMessage(conn));
	PQfinish(conn);
	exit(EXIT_ERROR);
}

/*
 * Run one statement and return its result, or fail() if it did not
 * produce the expected status.
 */
static PGresult *
run(PGconn *conn, const char *sql, int nparams, const char *const *params,
	ExecStatusType expected)
{
	PGresult   *res = PQexecParams(conn, sql, nparams, NULL, params, NULL, NULL, 0);

	if (PQresultStatus(res) != expected)
		fail(conn, res);
	return res;
}

/*
 * Take the lock, check the run's fence, write under it with the token as
 * the row's fence, commit.
 */
int
main(int argc, char **argv)
{
	const char *name;
	const char *account;
	const char *amount;
	int			pause_seconds = 0;
	PGconn	   *conn;
	PGresult   *res;
	char		token[32];

	if (argc < 4 || argc > 5)
	{
		fprintf(stderr, "usage: %s LOCK_NAME ACCOUNT_ID AMOUNT [PAUSE_SECONDS]\n", argv[0]);
		return EXIT_ERROR;
	}
	name = argv[1];
	account = argv[2];
	amount = argv[3];
	if (argc == 5)
		pause_seconds = atoi(argv[4]);

	conn = PQconnectdb("");
	if (PQstatus(conn) != CONNECTION_OK)
	{
		printf("error: %s", PQerrorMessage(conn));
		return EXIT_ERROR;
	}

	PQclear(run(conn, "BEGIN", 0, NULL, PGRES_COMMAND_OK));

	/* the lock: a fresh fence token, or NULL when another transaction has it */
	{
		const char *params[1] = {name};

		res = run(conn, "SELECT fencing.try_lock($1)", 1, params, PGRES_TUPLES_OK);
	}
	if (PQgetisnull(res, 0, 0))
	{
		PQclear(res);
		PQclear(run(conn, "ROLLBACK", 0, NULL, PGRES_COMMAND_OK));
		printf("busy: '%s' is held by another transaction\n", name);
		PQfinish(conn);
		return EXIT_BUSY;
	}
	snprintf(token, sizeof(token), "%s", PQgetvalue(res, 0, 0));
	PQclear(res);
	printf("got token %s for '%s'\n", token, name);
	fflush(stdout);

	if (pause_seconds > 0)
		sleep(pause_seconds);

	/* before each side effect: do we still hold the lock? */
	{
		const char *params[1] = {name};

		res = run(conn, "SELECT fencing.held_token($1)", 1, params, PGRES_TUPLES_OK);
	}
	if (PQgetisnull(res, 0, 0) || strcmp(PQgetvalue(res, 0, 0), token) != 0)
	{
		printf("lost: fencing.held_token('%s') no longer returns our token; stopping\n", name);
		PQclear(res);
		PQfinish(conn);
		return EXIT_LOST;
	}
	PQclear(res);

	/*
	 * The run's fence, before the first write of this transaction: fails
	 * with FN001 if a newer holder has checked it (and waits for that
	 * holder's transaction if it is still open).
	 */
	{
		const char *params[2] = {name, token};

		PQclear(run(conn, "SELECT fencing.check_fence($1, $2::bigint)", 2, params,
					PGRES_TUPLES_OK));
	}

	/* the side effect, carrying the token; the trigger checks it */
	{
		const char *params[3] = {amount, token, account};

		res = run(conn,
				  "UPDATE example.accounts"
				  "   SET balance = balance + $1::numeric, fence = $2::bigint"
				  " WHERE id = $3::int",
				  3, params, PGRES_COMMAND_OK);
	}
	if (strcmp(PQcmdTuples(res), "1") != 0)
	{
		printf("error: no account %s\n", account);
		PQclear(res);
		PQfinish(conn);
		return EXIT_ERROR;
	}
	PQclear(res);

	PQclear(run(conn, "COMMIT", 0, NULL, PGRES_COMMAND_OK));
	printf("committed: account %s +%s with fence %s\n", account, amount, token);
	PQfinish(conn);
	return EXIT_COMMITTED;
}
