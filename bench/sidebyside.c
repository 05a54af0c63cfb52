/*-------------------------------------------------------------------------
 *
 * sidebyside.c
 *		Latencies of several SQL statements measured side by side: every
 *		client connection runs all of them in turn, each execution timed
 *		with the monotonic clock (bench/run.sh, "make bench").
 *
 * usage: sidebyside CLIENTS SECONDS MODE STATEMENT...
 *
 *	 MODE		simple (PQexec), extended (PQexecParams: parse, bind and
 *				execute an unnamed statement each time, as most drivers do) or
 *				prepared (PQprepare once per connection, then PQexecPrepared)
 *	 SECONDS	how long the clients run; 0 runs every statement once on
 *				each connection and counts nothing (a probe: does each work?)
 *
 * ":n" in a statement stands for a random integer from 1 to 100000, drawn
 * afresh for every execution: a literal in simple mode, parameter $1 in the
 * others; every ":n" of one execution is the same number.
 *
 * Why not pgbench: PostgreSQL 15's pgbench reads the clock lazily, once per
 * pass of its state machine, so an execution whose reply is already there
 * when pgbench first looks for it (its thread was descheduled after
 * sending) is timed as 0 ms.  On a loaded 2-core machine that is 14-20 % of
 * the executions of a fast statement, in every query mode (pgbench -l), so
 * -r's per-statement latencies read short by a share that differs between
 * statements.  And whole pgbench runs of one statement each, compared by
 * their tps, see different load from other processes: two runs of the same
 * SELECT 1 differed by up to 2.3 times.  Here each connection alternates
 * the statements, so any change of load falls on all of them alike, and
 * every execution is timed from before its query is sent to after its
 * result is read.
 *
 * Each connection shuffles the order of the statements for every round, so
 * that no statement always follows the same one (work a statement leaves
 * behind after its reply delays whichever comes next).  Its first round is
 * a warm-up (catalog caches, plans) and is not counted.
 *
 * Prints one line per statement, in the order given:
 *
 *	 INDEX EXECUTIONS MEAN_MS TRIMMED_MEAN_MS
 *
 * where the trimmed mean leaves out the slowest 1 % of the executions
 * (see histogram_print).
 *
 * The connection comes from the environment (PGHOST, PGPORT, PGDATABASE,
 * PGUSER, PGOPTIONS).  Exit status: 0 on success, 1 when a statement
 * fails (the error goes to stderr), 2 on bad usage or a failed connection.
 *
 * Copyright (c) 2026, the fencing developers
 *
 * IDENTIFICATION
 *		bench/sidebyside.c
 *
 *-------------------------------------------------------------------------
 */
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>

#define MAX_STATEMENTS	32
#define MAX_CLIENTS		64
#define RANDOM_MAX		100000

/*
 * Latencies are counted in buckets 0.5 % wide, from 1 us (bucket 0) to
 * 1000 s, so that the trimmed mean can be computed without keeping every
 * sample.
 */
#define BUCKET_GROWTH	1.005
#define NBUCKETS		5600
#define TRIM_SHARE		0.01

typedef enum
{
	MODE_SIMPLE,
	MODE_EXTENDED,
	MODE_PREPARED
} QueryMode;

#define MAX_PARTS	9

typedef struct
{
	const char *text;			/* as given */
	char	   *parts[MAX_PARTS];	/* the text between its ":n"s */
	int			nparts;			/* 1: no ":n" */
	char	   *with_param;		/* every ":n" replaced by $1 */
} Statement;

typedef struct
{
	uint64_t	count[NBUCKETS];
	uint64_t	sum_ns[NBUCKETS];
} Histogram;

static Statement statements[MAX_STATEMENTS];
static int	nstatements;
static QueryMode mode;

static uint64_t
now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t) ts.tv_sec * 1000000000 + (uint64_t) ts.tv_nsec;
}

static void
histogram_add(Histogram *hist, uint64_t ns)
{
	int			b = 0;

	if (ns >= 1000)
		b = 1 + (int) (log((double) ns / 1000.0) / log(BUCKET_GROWTH));
	if (b >= NBUCKETS)
		b = NBUCKETS - 1;
	hist->count[b]++;
	hist->sum_ns[b] += ns;
}

/*
 * Prints "INDEX EXECUTIONS MEAN_MS TRIMMED_MEAN_MS".  The trimmed mean
 * leaves out the slowest TRIM_SHARE of the executions: on a shared
 * machine they are mostly a process descheduled mid-statement, which hits
 * one statement of a round at random and makes a plain mean jump between
 * runs.  It leaves them out of every statement alike, and keeps a cost that
 * comes more often than that (a sequence's WAL flush every 32 calls).
 */
static void
histogram_print(int index, const Histogram *hist)
{
	uint64_t	total = 0;
	uint64_t	total_ns = 0;
	uint64_t	keep;
	uint64_t	kept = 0;
	double		kept_ns = 0;
	int			b;

	for (b = 0; b < NBUCKETS; b++)
	{
		total += hist->count[b];
		total_ns += hist->sum_ns[b];
	}
	keep = total - (uint64_t) (total * TRIM_SHARE);
	for (b = 0; b < NBUCKETS && kept < keep; b++)
	{
		uint64_t	take = hist->count[b];

		if (take == 0)
			continue;
		if (kept + take > keep)
		{
			/* part of this bucket: its mean times the share taken */
			kept_ns += (double) hist->sum_ns[b] * (keep - kept) / take;
			take = keep - kept;
		}
		else
			kept_ns += hist->sum_ns[b];
		kept += take;
	}
	printf("%d %" PRIu64 " %.6f %.6f\n", index, total,
		   total ? total_ns / 1e6 / total : 0.0,
		   kept ? kept_ns / 1e6 / kept : 0.0);
}

/*
 * xorshift64*: each client draws its own random numbers (names, the order
 * of a round) without sharing state or calling into libc's locked PRNG.
 */
static uint64_t
next_random(uint64_t *state)
{
	*state ^= *state >> 12;
	*state ^= *state << 25;
	*state ^= *state >> 27;
	return *state * UINT64_C(2685821657736338717);
}

/*
 * Is p, in text, a ":n" (not part of "::n" nor of a longer name)?
 */
static int
is_placeholder(const char *text, const char *p)
{
	char		next = p[2];

	return !((p > text && p[-1] == ':') ||
			 (next == '_' || (next >= 'a' && next <= 'z') ||
			  (next >= 'A' && next <= 'Z') || (next >= '0' && next <= '9')));
}

/*
 * Splits a statement at its ":n"s, so that an execution only has to print
 * one number between the parts (every ":n" of an execution is the same
 * number).
 */
static void
parse_statement(Statement *stmt, const char *text)
{
	const char *start = text;
	const char *p;
	size_t		len;
	int			i;

	stmt->text = text;
	stmt->nparts = 0;
	for (p = text; (p = strstr(p, ":n")) != NULL; p++)
	{
		if (!is_placeholder(text, p))
			continue;
		if (stmt->nparts == MAX_PARTS - 1)
		{
			fprintf(stderr, "sidebyside: more than %d \":n\" in a statement\n", MAX_PARTS - 1);
			exit(2);
		}
		stmt->parts[stmt->nparts++] = strndup(start, p - start);
		start = p + 2;
	}
	stmt->parts[stmt->nparts++] = strdup(start);

	len = strlen(text) + 1;
	stmt->with_param = malloc(len + stmt->nparts);
	stmt->with_param[0] = '\0';
	for (i = 0; i < stmt->nparts; i++)
	{
		if (i > 0)
			strcat(stmt->with_param, "$1");
		strcat(stmt->with_param, stmt->parts[i]);
	}
}

/*
 * Runs statement i once; returns its time in nanoseconds, or exits the
 * client with status 1 when it fails.
 */
static uint64_t
execute(PGconn *conn, int i, uint64_t *rng, char *buffer, size_t buffer_size)
{
	Statement  *stmt = &statements[i];
	char		value[16];
	const char *params[1] = {value};
	int			nparams = stmt->nparts > 1 ? 1 : 0;
	char		name[16];
	uint64_t	start;
	uint64_t	elapsed;
	PGresult   *res;
	ExecStatusType status;

	snprintf(value, sizeof(value), "%d", (int) (next_random(rng) % RANDOM_MAX) + 1);
	if (mode == MODE_SIMPLE && nparams > 0)
	{
		size_t		used = 0;
		int			k;

		for (k = 0; k < stmt->nparts; k++)
			used += snprintf(buffer + used, buffer_size - used, "%s%s",
							 k > 0 ? value : "", stmt->parts[k]);
	}

	start = now_ns();
	switch (mode)
	{
		case MODE_SIMPLE:
			res = PQexec(conn, nparams > 0 ? buffer : stmt->text);
			break;
		case MODE_EXTENDED:
			res = PQexecParams(conn, stmt->with_param, nparams, NULL, params,
							   NULL, NULL, 0);
			break;
		default:
			snprintf(name, sizeof(name), "s%d", i);
			res = PQexecPrepared(conn, name, nparams, params, NULL, NULL, 0);
			break;
	}
	elapsed = now_ns() - start;

	status = PQresultStatus(res);
	if (status != PGRES_TUPLES_OK && status != PGRES_COMMAND_OK)
	{
		fprintf(stderr, "sidebyside: statement %d (%s) failed: %s",
				i + 1, stmt->text, PQerrorMessage(conn));
		exit(1);
	}
	PQclear(res);
	return elapsed;
}

/*
 * One client: connect (and prepare), tell the parent, wait for the start,
 * then run rounds until the deadline, counting into hist, its own
 * histograms in memory shared with the parent.
 */
static void
run_client(int client, int ready_fd, int go_fd, Histogram *hist, double seconds)
{
	PGconn	   *conn;
	uint64_t	rng = (uint64_t) getpid() * UINT64_C(0x9E3779B97F4A7C15) ^ now_ns();
	int			order[MAX_STATEMENTS];
	size_t		buffer_size = 0;
	char	   *buffer;
	char		byte = 'r';
	uint64_t	deadline;
	int			i;

	conn = PQconnectdb("");
	if (PQstatus(conn) != CONNECTION_OK)
	{
		fprintf(stderr, "sidebyside: client %d: %s", client, PQerrorMessage(conn));
		exit(2);
	}
	for (i = 0; i < nstatements; i++)
	{
		size_t		len = strlen(statements[i].text) + 16 * statements[i].nparts;

		if (len > buffer_size)
			buffer_size = len;
		order[i] = i;
		if (mode == MODE_PREPARED)
		{
			char		name[16];
			PGresult   *res;

			snprintf(name, sizeof(name), "s%d", i);
			res = PQprepare(conn, name, statements[i].with_param,
							statements[i].nparts > 1 ? 1 : 0, NULL);
			if (PQresultStatus(res) != PGRES_COMMAND_OK)
			{
				fprintf(stderr, "sidebyside: statement %d (%s) failed: %s",
						i + 1, statements[i].text, PQerrorMessage(conn));
				exit(1);
			}
			PQclear(res);
		}
	}
	buffer = malloc(buffer_size);

	/* the warm-up round, in the order given */
	for (i = 0; i < nstatements; i++)
		(void) execute(conn, i, &rng, buffer, buffer_size);
	if (seconds <= 0)
	{
		PQfinish(conn);
		exit(0);
	}

	/*
	 * Ready.  Closing ready_fd lets the parent see the end of the pipe
	 * once every client is ready or dead; it closes go_fd to start us.
	 */
	if (write(ready_fd, &byte, 1) != 1)
		exit(2);
	close(ready_fd);
	if (read(go_fd, &byte, 1) < 0)
		exit(2);
	deadline = now_ns() + (uint64_t) (seconds * 1e9);

	while (now_ns() < deadline)
	{
		/* Fisher-Yates: a fresh order every round */
		for (i = nstatements - 1; i > 0; i--)
		{
			int			j = (int) (next_random(&rng) % (uint64_t) (i + 1));
			int			tmp = order[i];

			order[i] = order[j];
			order[j] = tmp;
		}
		for (i = 0; i < nstatements; i++)
			histogram_add(&hist[order[i]],
						  execute(conn, order[i], &rng, buffer, buffer_size));
	}
	PQfinish(conn);
	exit(0);
}

int
main(int argc, char **argv)
{
	int			clients;
	double		seconds;
	int			ready[2];
	int			go[2];
	pid_t		pids[MAX_CLIENTS];
	Histogram  *shared;
	Histogram  *hist;
	int			failed = 0;
	int			status;
	int			c;
	int			i;
	int			b;
	char		byte;

	if (argc < 5)
	{
		fprintf(stderr, "usage: sidebyside CLIENTS SECONDS simple|extended|prepared STATEMENT...\n");
		return 2;
	}
	clients = atoi(argv[1]);
	seconds = atof(argv[2]);
	if (strcmp(argv[3], "simple") == 0)
		mode = MODE_SIMPLE;
	else if (strcmp(argv[3], "extended") == 0)
		mode = MODE_EXTENDED;
	else if (strcmp(argv[3], "prepared") == 0)
		mode = MODE_PREPARED;
	else
	{
		fprintf(stderr, "sidebyside: unknown mode \"%s\"\n", argv[3]);
		return 2;
	}
	nstatements = argc - 4;
	if (clients < 1 || clients > MAX_CLIENTS || nstatements > MAX_STATEMENTS || seconds < 0)
	{
		fprintf(stderr, "sidebyside: 1 to %d clients, at most %d statements, SECONDS >= 0\n",
				MAX_CLIENTS, MAX_STATEMENTS);
		return 2;
	}
	for (i = 0; i < nstatements; i++)
		parse_statement(&statements[i], argv[4 + i]);
	hist = calloc(nstatements, sizeof(Histogram));
	shared = mmap(NULL, sizeof(Histogram) * nstatements * clients,
				  PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (hist == NULL || shared == MAP_FAILED)
	{
		perror("sidebyside: memory");
		return 2;
	}

	if (pipe(ready) != 0 || pipe(go) != 0)
	{
		perror("sidebyside: pipe");
		return 2;
	}
	fflush(NULL);
	for (c = 0; c < clients; c++)
	{
		pids[c] = fork();
		if (pids[c] < 0)
		{
			perror("sidebyside: fork");
			return 2;
		}
		if (pids[c] == 0)
		{
			close(ready[0]);
			close(go[1]);
			run_client(c, ready[1], go[0], shared + (size_t) c * nstatements, seconds);
		}
	}
	close(ready[1]);
	close(go[0]);

	/* start together: once every client has connected and warmed up */
	if (seconds > 0)
		for (c = 0; c < clients; c++)
			if (read(ready[0], &byte, 1) != 1)
				break;			/* a client died: its status tells */
	close(go[1]);

	for (c = 0; c < clients; c++)
	{
		if (waitpid(pids[c], &status, 0) < 0 || !WIFEXITED(status))
			failed = 2;
		else if (WEXITSTATUS(status) != 0 && failed == 0)
			failed = WEXITSTATUS(status);
	}
	if (failed)
		return failed;
	for (c = 0; c < clients; c++)
		for (i = 0; i < nstatements; i++)
			for (b = 0; b < NBUCKETS; b++)
			{
				hist[i].count[b] += shared[c * nstatements + i].count[b];
				hist[i].sum_ns[b] += shared[c * nstatements + i].sum_ns[b];
			}
	if (seconds > 0)
		for (i = 0; i < nstatements; i++)
			histogram_print(i + 1, &hist[i]);
	return 0;
}
