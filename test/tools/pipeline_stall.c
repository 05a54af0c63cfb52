/*-------------------------------------------------------------------------
 *
 * pipeline_stall.c
 *		A libpq client in pipeline mode that takes a lease and stalls
 *		without sending Sync, for test/t/031_lease_pipeline.pl.
 *
 *	pipeline_stall CONNINFO NAME TTL STALL_SECONDS [after-error | renew | use-lease]
 *
 * Sends BEGIN and SELECT fencing.lease(NAME, TTL) as Parse/Bind/Execute
 * messages (and, with "after-error", SAVEPOINT s and a statement that fails
 * in it, so that the server discards messages up to the next Sync), then a
 * Flush, never a Sync; with "use-lease", first takes a lease that outlives
 * the transaction, fencing.acquire_lease(NAME, TTL), outside the pipeline,
 * and then sends BEGIN and SELECT fencing.use_lease(NAME, its token)
 * instead of lease(); prints the backend's pid and the token; sleeps
 * STALL_SECONDS (with "renew", sends SELECT fencing.held_token(NAME) and a
 * Flush every 300 ms meanwhile, reading each answer); then sends SELECT
 * fencing.held_token(NAME) and a Sync and prints what came back.  One line
 * each:
 *
 *	pid <pid>
 *	token <token>
 *	error <sqlstate>				(after-error only)
 *	after <sqlstate or "ok"> <message or token>
 *
 * Not part of the build; the test compiles it:
 *
 *	gcc -I$(pg_config --includedir) test/tools/pipeline_stall.c \
 *		-L$(pg_config --libdir) -lpq -o pipeline_stall
 *
 * Copyright (c) 2026, the fencing developers
 *
 * IDENTIFICATION
 *		test/tools/pipeline_stall.c
 *
 *-------------------------------------------------------------------------
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "libpq-fe.h"

static void
die(PGconn *conn, const char *what)
{
	fprintf(stderr, "pipeline_stall: %s: %s", what, PQerrorMessage(conn));
	exit(2);
}

/* Send one statement with text parameters, without waiting. */
static void
send_query(PGconn *conn, const char *sql, int nparams, const char *const *params)
{
	if (!PQsendQueryParams(conn, sql, nparams, NULL, params, NULL, NULL, 0))
		die(conn, sql);
}

/*
 * The result of the next statement of the pipeline, and the NULL that ends
 * it.
 */
static PGresult *
next_result(PGconn *conn)
{
	PGresult   *res = PQgetResult(conn);
	PGresult   *end;

	if (res == NULL)
		die(conn, "no result");
	end = PQgetResult(conn);
	if (end != NULL)
		die(conn, "more than one result");
	return res;
}

/* A line "<label> <sqlstate> <primary message>" for a failed result. */
static void
print_error(const char *label, const PGresult *res)
{
	const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
	const char *msg = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);

	printf("%s %s %s\n", label, state ? state : "none",
		   msg ? msg : PQresultErrorMessage(res));
}

int
main(int argc, char **argv)
{
	PGconn	   *conn;
	PGresult   *res;
	const char *lease_params[2];
	const char *held_params[1];
	int			after_error;
	int			renew;
	int			use_lease;
	char	   *acquired = NULL;

	if (argc < 5)
	{
		fprintf(stderr, "usage: %s CONNINFO NAME TTL STALL_SECONDS [after-error | renew | use-lease]\n",
				argv[0]);
		return 2;
	}
	after_error = argc > 5 && strcmp(argv[5], "after-error") == 0;
	renew = argc > 5 && strcmp(argv[5], "renew") == 0;
	use_lease = argc > 5 && strcmp(argv[5], "use-lease") == 0;
	setvbuf(stdout, NULL, _IOLBF, 0);

	conn = PQconnectdb(argv[1]);
	if (PQstatus(conn) != CONNECTION_OK)
		die(conn, "connect");

	lease_params[0] = argv[2];
	lease_params[1] = argv[3];
	if (use_lease)
	{
		res = PQexecParams(conn, "SELECT fencing.acquire_lease($1, $2::interval)",
						   2, NULL, lease_params, NULL, NULL, 0);
		if (PQresultStatus(res) != PGRES_TUPLES_OK || PQgetisnull(res, 0, 0))
			die(conn, "acquire_lease");
		acquired = strdup(PQgetvalue(res, 0, 0));
		PQclear(res);
		lease_params[1] = acquired;
	}
	if (!PQenterPipelineMode(conn))
		die(conn, "pipeline mode");

	send_query(conn, "BEGIN", 0, NULL);
	send_query(conn, use_lease ?
			   "SELECT pg_backend_pid(), fencing.use_lease($1, $2::bigint)" :
			   "SELECT pg_backend_pid(), fencing.lease($1, $2::interval)",
			   2, lease_params);
	if (after_error)
	{
		send_query(conn, "SAVEPOINT s", 0, NULL);
		send_query(conn, "SELECT fencing.try_lock(NULL)", 0, NULL);
	}
	if (!PQsendFlushRequest(conn) || PQflush(conn) != 0)
		die(conn, "flush");

	res = next_result(conn);
	if (PQresultStatus(res) != PGRES_COMMAND_OK)
		die(conn, "BEGIN");
	PQclear(res);
	res = next_result(conn);
	if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1)
		die(conn, "lease");
	printf("pid %s\n", PQgetvalue(res, 0, 0));
	printf("token %s\n", PQgetvalue(res, 0, 1));
	PQclear(res);
	if (after_error)
	{
		res = next_result(conn);
		if (PQresultStatus(res) != PGRES_COMMAND_OK)
			die(conn, "SAVEPOINT");
		PQclear(res);
		res = next_result(conn);
		if (PQresultStatus(res) != PGRES_FATAL_ERROR)
			die(conn, "the failing statement did not fail");
		printf("error %s\n", PQresultErrorField(res, PG_DIAG_SQLSTATE));
		PQclear(res);
	}

	held_params[0] = argv[2];
	if (renew)
	{
		int			i;

		for (i = 0; i < atoi(argv[4]) * 10 / 3; i++)
		{
			usleep(300 * 1000);
			send_query(conn, "SELECT fencing.held_token($1)", 1, held_params);
			if (!PQsendFlushRequest(conn) || PQflush(conn) != 0)
				die(conn, "flush");
			res = next_result(conn);
			if (PQresultStatus(res) != PGRES_TUPLES_OK)
			{
				print_error("after", res);
				return 0;
			}
			PQclear(res);
		}
	}
	else
		sleep((unsigned int) atoi(argv[4]));

	if (!PQsendQueryParams(conn, "SELECT fencing.held_token($1)", 1, NULL,
						   held_params, NULL, NULL, 0) ||
		!PQpipelineSync(conn) || PQflush(conn) != 0)
	{
		printf("after none %s", PQerrorMessage(conn));
		return 0;
	}
	while ((res = PQgetResult(conn)) != NULL ||
		   PQstatus(conn) == CONNECTION_OK)
	{
		if (res == NULL)
			continue;
		switch (PQresultStatus(res))
		{
			case PGRES_TUPLES_OK:
				printf("after ok %s\n", PQgetvalue(res, 0, 0));
				break;
			case PGRES_FATAL_ERROR:
				print_error("after", res);
				PQclear(res);
				return 0;
			case PGRES_PIPELINE_ABORTED:
				printf("after aborted %s\n", PQresultErrorMessage(res));
				break;
			case PGRES_PIPELINE_SYNC:
				PQclear(res);
				return 0;
			default:
				break;
		}
		PQclear(res);
	}
	printf("after none %s", PQerrorMessage(conn));
	return 0;
}
