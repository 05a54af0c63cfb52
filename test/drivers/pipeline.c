/*-------------------------------------------------------------------------
 *
 * pipeline.c
 *		A libpq client in pipeline mode, driven step by step, for the
 *		driver suite's tests (test/drivers/test_libpq_pipeline.py).
 *
 * libpq's pipeline mode sends statements without waiting for their results
 * and without a Sync between them: every statement up to the next Sync runs
 * in one implicit transaction, and a server that only acts when a client
 * is idle between Syncs never sees this one idle.  The tests describe what
 * the client sends as a list of steps, and read what came back from this
 * program's output, one line per event:
 *
 *	SQL[|param...]	send the statement with PQsendQueryParams (extended
 *					protocol, unnamed statement), each "|" starting a text
 *					parameter
 *	prepare:NAME:SQL	send Parse for a named statement (PQsendPrepare)
 *	execute:NAME[|param...]	send Bind/Execute of it (PQsendQueryPrepared)
 *	sync			send Sync, then read every result up to it
 *	flush			ask the server to send what it has (a Flush message,
 *					no Sync), then read the result of every statement sent
 *	wait			print "waiting", then read one line from standard
 *					input before the next step
 *	stall			print "stalled", then send nothing and wait until
 *					the server ends the connection
 *
 * Output lines:
 *	result STATUS SQLSTATE VALUE	one per statement ("-" for no SQLSTATE or
 *									no value; VALUE is the first column of
 *									the first row, "null" for NULL)
 *	notice SEVERITY SQLSTATE MESSAGE	every notice or warning, as it arrives
 *	waiting / stalled				as above
 *	lost MILLISECONDS SQLSTATE MESSAGE	the server ended a stalled connection,
 *									after so many milliseconds
 *	done							every step ran
 * and on failure "error MESSAGE" on standard error and exit status 1.
 *
 * Usage: pipeline CONNINFO STEP...
 *
 * Copyright (c) 2026, the fencing developers
 *
 * IDENTIFICATION
 *		test/drivers/pipeline.c
 *
 *-------------------------------------------------------------------------
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <time.h>

#include <libpq-fe.h>

#define MAX_PARAMS 8

/* statements sent whose results have not been read yet */
static int	pending = 0;

/* the SQLSTATE and message of the last error the server sent, if any */
static char *last_error_sqlstate = NULL;
static char *last_error_message = NULL;

/*
 * Stop with a message: a step that cannot be carried out is a broken test,
 * not an observation.
 */
static void
fail(const char *fmt,...)
{
	va_list		ap;

	fputs("error ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

/*
 * Print a message on one line: the tests read this output line by line.
 */
static void
print_flat(const char *text)
{
	const char *p;

	for (p = text != NULL ? text : ""; *p != '\0'; p++)
		putchar(*p == '\n' || *p == '\r' ? ' ' : *p);
}

/*
 * Remember an error's SQLSTATE and message: the last one before a lost
 * connection says why the server ended it.
 */
static void
remember_error(const PGresult *res)
{
	const char *sqlstate = PQresultErrorField(res, PG_DIAG_SQLSTATE);

	if (sqlstate == NULL)
		return;
	free(last_error_sqlstate);
	free(last_error_message);
	last_error_sqlstate = strdup(sqlstate);
	last_error_message = strdup(PQresultErrorMessage(res));
}

/*
 * Every notice and warning the server sends, with its SQLSTATE, in the
 * order it arrives among the results.  An error the server sends while no
 * statement is running (a FATAL before it closes the connection) arrives
 * here too.
 */
static void
notice_receiver(void *arg, const PGresult *res)
{
	const char *severity = PQresultErrorField(res, PG_DIAG_SEVERITY_NONLOCALIZED);
	const char *sqlstate = PQresultErrorField(res, PG_DIAG_SQLSTATE);

	(void) arg;
	if (severity != NULL &&
		(strcmp(severity, "ERROR") == 0 || strcmp(severity, "FATAL") == 0 ||
		 strcmp(severity, "PANIC") == 0))
		remember_error(res);
	printf("notice %s %s ", severity ? severity : "-", sqlstate ? sqlstate : "-");
	print_flat(PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY));
	putchar('\n');
	fflush(stdout);
}

/*
 * Milliseconds on a clock that does not jump.
 */
static long long
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/*
 * Print one statement's result line.
 */
static void
print_result(const PGresult *res)
{
	const char *sqlstate = PQresultErrorField(res, PG_DIAG_SQLSTATE);
	const char *value = "-";

	if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) > 0 &&
		PQnfields(res) > 0)
		value = PQgetisnull(res, 0, 0) ? "null" : PQgetvalue(res, 0, 0);
	printf("result %s %s %s\n", PQresStatus(PQresultStatus(res)),
		   sqlstate ? sqlstate : "-", value);
	fflush(stdout);
}

/*
 * Read the result of one statement: its result, then the NULL that ends
 * it.  A statement skipped after an earlier error of the pipeline reports
 * PGRES_PIPELINE_ABORTED.
 */
static void
read_one(PGconn *conn)
{
	PGresult   *res = PQgetResult(conn);

	if (res == NULL)
		fail("no result for a statement sent: %s", PQerrorMessage(conn));
	print_result(res);
	PQclear(res);
	while ((res = PQgetResult(conn)) != NULL)
	{
		print_result(res);
		PQclear(res);
	}
	pending--;
}

/*
 * Read every pending result, then the Sync's own.
 */
static void
read_to_sync(PGconn *conn)
{
	PGresult   *res;

	while (pending > 0)
		read_one(conn);
	res = PQgetResult(conn);
	if (res == NULL || PQresultStatus(res) != PGRES_PIPELINE_SYNC)
		fail("expected the end of the pipeline's Sync: %s", PQerrorMessage(conn));
	PQclear(res);
}

/*
 * Split "SQL|p1|p2" in place into the statement and its parameters.
 */
static int
split_params(char *step, const char **params)
{
	int			n = 0;
	char	   *bar;

	while ((bar = strchr(step, '|')) != NULL)
	{
		if (n == MAX_PARAMS)
			fail("more than %d parameters", MAX_PARAMS);
		*bar = '\0';
		step = bar + 1;
		params[n++] = step;
	}
	return n;
}

/*
 * Wait, sending nothing, until the server ends the connection, and say
 * how long that took and what the server said.  Whatever the server sends
 * meanwhile is printed.
 */
static void
stall(PGconn *conn)
{
	long long	started = now_ms();
	int			sock = PQsocket(conn);

	printf("stalled\n");
	fflush(stdout);
	for (;;)
	{
		fd_set		readable;
		PGresult   *res;

		FD_ZERO(&readable);
		FD_SET(sock, &readable);
		if (select(sock + 1, &readable, NULL, NULL, NULL) < 0 && errno != EINTR)
			fail("select: %s", strerror(errno));
		if (!PQconsumeInput(conn))
			break;
		while (!PQisBusy(conn) && (res = PQgetResult(conn)) != NULL)
		{
			remember_error(res);
			print_result(res);
			PQclear(res);
		}
		if (PQstatus(conn) == CONNECTION_BAD)
			break;
	}
	printf("lost %lld %s ", now_ms() - started,
		   last_error_sqlstate != NULL ? last_error_sqlstate : "-");
	print_flat(last_error_message != NULL ? last_error_message : PQerrorMessage(conn));
	putchar('\n');
	fflush(stdout);
}

/*
 * Carry out one step.  Returns 0 once the connection is gone.
 */
static int
run_step(PGconn *conn, char *step)
{
	const char *params[MAX_PARAMS];
	int			nparams;

	if (strcmp(step, "sync") == 0)
	{
		if (!PQpipelineSync(conn))
			fail("PQpipelineSync: %s", PQerrorMessage(conn));
		read_to_sync(conn);
	}
	else if (strcmp(step, "flush") == 0)
	{
		if (!PQsendFlushRequest(conn) || PQflush(conn) != 0)
			fail("flush: %s", PQerrorMessage(conn));
		while (pending > 0)
			read_one(conn);
	}
	else if (strcmp(step, "wait") == 0)
	{
		char		line[64];

		printf("waiting\n");
		fflush(stdout);
		if (fgets(line, sizeof(line), stdin) == NULL)
			fail("standard input closed while waiting");
	}
	else if (strcmp(step, "stall") == 0)
	{
		stall(conn);
		return 0;
	}
	else if (strncmp(step, "prepare:", 8) == 0)
	{
		char	   *name = step + 8;
		char	   *sql = strchr(name, ':');

		if (sql == NULL)
			fail("prepare:NAME:SQL expected, got \"%s\"", step);
		*sql++ = '\0';
		if (!PQsendPrepare(conn, name, sql, 0, NULL))
			fail("PQsendPrepare: %s", PQerrorMessage(conn));
		pending++;
	}
	else if (strncmp(step, "execute:", 8) == 0)
	{
		nparams = split_params(step + 8, params);
		if (!PQsendQueryPrepared(conn, step + 8, nparams, params, NULL, NULL, 0))
			fail("PQsendQueryPrepared: %s", PQerrorMessage(conn));
		pending++;
	}
	else
	{
		nparams = split_params(step, params);
		if (!PQsendQueryParams(conn, step, nparams, NULL, params, NULL, NULL, 0))
			fail("PQsendQueryParams: %s", PQerrorMessage(conn));
		pending++;
	}
	return 1;
}

int
main(int argc, char **argv)
{
	PGconn	   *conn;
	int			i;

	if (argc < 2)
		fail("usage: %s CONNINFO STEP...", argv[0]);
	conn = PQconnectdb(argv[1]);
	if (PQstatus(conn) != CONNECTION_OK)
		fail("connection failed: %s", PQerrorMessage(conn));
	PQsetNoticeReceiver(conn, notice_receiver, NULL);
	if (!PQenterPipelineMode(conn))
		fail("PQenterPipelineMode: %s", PQerrorMessage(conn));

	for (i = 2; i < argc; i++)
	{
		if (!run_step(conn, argv[i]))
			break;
	}
	if (i == argc)
		printf("done\n");
	PQfinish(conn);
	return 0;
}
