/*-------------------------------------------------------------------------
 *
 * peers.c
 *		The same acquire + token + release cycle against fencing, a raw
 *		advisory lock, Redis and etcd, from N client processes that each keep
 *		one connection open for the whole run ("make bench-peers").
 *
 * usage: peers MODE CLIENTS SECONDS TARGET
 *
 *	 fencing		TARGET is a libpq conninfo; a cycle is three prepared
 *					statements, one round trip each:
 *					BEGIN; SELECT fencing.try_lock($1); COMMIT
 *	 fencing-1rt	SELECT fencing.try_lock($1) in autocommit: the implicit
 *					transaction takes the lock, returns the token and releases
 *					the lock at its commit, all in one round trip
 *	 advisory		BEGIN; SELECT pg_try_advisory_xact_lock(hashtextextended
 *					($1, 0)); COMMIT (no token), the reference for "fencing"
 *	 advisory-1rt	the same SELECT in autocommit, the reference for
 *					"fencing-1rt"
 *	 lease			a lease cycle, three prepared statements in autocommit:
 *					SELECT fencing.acquire_lease($1, '30 s') (the token);
 *					UPDATE bench_peers.counters SET n = n + 1, fence = token
 *					(a fenced, durable INCR: the fence trigger checks the
 *					token, the commit is flushed); SELECT
 *					fencing.release_lease($1, token)
 *	 lease-nosync	the same with synchronous_commit = off for the session:
 *					the INCR's commit is not waited for (it reaches disk
 *					within wal_writer_delay), to show what the flush costs
 *	 incr			the fenced, durable INCR alone, always with the token the
 *					row already carries (no lease, no new token): what the
 *					write of a lease cycle costs by itself
 *	 redis			TARGET is host:port; a cycle is SET lock:NAME OWNER NX
 *					PX 30000; INCR fence:NAME (the "token"); EVALSHA of a
 *					compare-and-delete script loaded once with SCRIPT LOAD
 *	 etcd			TARGET is the base URL of the v3 JSON gateway; one lease
 *					per client process (granted before the run, revoked
 *					after it); a cycle is POST /v3/lock/lock and
 *					POST /v3/lock/unlock
 *	 etcd-lease		as etcd, but every cycle also grants its own lease first
 *					and revokes it last (4 HTTP requests)
 *	 lease-1rt		the lease cycle as the clients send a job that fits one
 *					batch (pg-fencing's Lease.runOnce, pgfencing's once()):
 *					BEGIN, acquire_lease (its token kept in a setting of the
 *					session), use_lease, the same durable INCR (the trigger
 *					stamps the token and checks it), COMMIT, release_lease,
 *					all in one query string: one round trip
 *	 redis-pg		TARGET is "host:port;conninfo": what a user of Redis
 *					would do for the same job: SET lock:NAME OWNER NX PX
 *					30000 in Redis, the same durable INCR in PostgreSQL (a
 *					table without a fence: Redis gives no token to check),
 *					the compare-and-delete release in Redis: three round
 *					trips
 *	 etcd-pg		TARGET is "url;conninfo": the same with etcd's lock and
 *					unlock (under one lease per process) around the
 *					PostgreSQL INCR: three round trips
 *
 * Every client process uses one lock name of its own for the whole run, so
 * no client ever waits for another: the numbers are the cost of the cycle,
 * not of contention.  Every cycle must be granted and must return a token
 * greater than the previous one this client saw (except for the advisory
 * modes, which have no token); a cycle that does not is an error.
 *
 * Prints one line:
 *
 *	 MODE CLIENTS CYCLES_PER_SECOND P50_MS P99_MS CYCLES ERRORS [STEP=US ...]
 *
 * where each STEP=US is the mean time of one step of the cycle in
 * microseconds, for the modes whose cycle has several (lease: acquire, incr,
 * release; redis: set, incr, release; etcd: lock, unlock; redis-pg: set,
 * incr, release; etcd-pg: lock, incr, unlock).
 *
 * Copyright (c) 2026, the fencing developers
 *
 * IDENTIFICATION
 *		bench/peers/peers.c
 *
 *-------------------------------------------------------------------------
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <hiredis/hiredis.h>
#include <libpq-fe.h>

/* 2M samples of 4 bytes per client: far more cycles than a run can do */
#define MAX_SAMPLES_PER_CLIENT	2000000
#define MAX_CLIENTS				64
#define ERROR_LEN				240
#define MAX_STEPS				4

/* One client's counters, in memory shared with the parent. */
typedef struct ClientResult
{
	long		cycles;
	long		errors;
	long		samples;
	double		step_seconds[MAX_STEPS];
	char		first_error[ERROR_LEN];
} ClientResult;

/* What one mode needs: set up a connection, run a cycle, tear down. */
typedef struct Mode
{
	const char *name;
	int			(*setup) (char *err, size_t errlen);
	int			(*cycle) (int64_t *token, char *err, size_t errlen);
	void		(*teardown) (void);
	int			has_token;
	const char *steps[MAX_STEPS];	/* names of the timed steps, if any */
} Mode;

static const char *target;
static int	client_number;
static char lock_name[64];

/* the durations of the steps of the cycle that just ran */
static double step_seconds[MAX_STEPS];
static double step_started;
static int	step_index;

/* ----------------------------------------------------------------------
 * Time
 * ---------------------------------------------------------------------- */

/*
 * Monotonic seconds: cycle latencies must not jump when the wall clock is
 * adjusted during a run.
 */
static double
monotonic_seconds(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Start timing the steps of a cycle. */
static void
steps_begin(void)
{
	step_index = 0;
	step_started = monotonic_seconds();
}

/* The step that just ended: record how long it took. */
static void
step_done(void)
{
	double		now = monotonic_seconds();

	if (step_index < MAX_STEPS)
		step_seconds[step_index++] = now - step_started;
	step_started = now;
}

/* ----------------------------------------------------------------------
 * PostgreSQL: fencing and the raw advisory lock
 * ---------------------------------------------------------------------- */

static PGconn *pg;

/*
 * Prepare one statement.  Everything a cycle sends is prepared once, so a
 * cycle costs exactly one Bind/Execute/Sync round trip per statement and no
 * parsing or planning, the way a pooled application would run it.
 */
static int
pg_prepare(const char *statement_name, const char *sql, int nparams,
		   char *err, size_t errlen)
{
	PGresult   *res = PQprepare(pg, statement_name, sql, nparams, NULL);
	int			ok = PQresultStatus(res) == PGRES_COMMAND_OK;

	if (!ok)
		snprintf(err, errlen, "prepare %s: %s", sql, PQerrorMessage(pg));
	PQclear(res);
	return ok ? 0 : -1;
}

/*
 * Notices are not printed: fencing.try_lock in autocommit (fencing-1rt)
 * warns at every call that its lock ends with the statement, and printing
 * that a million times would measure the terminal.  The server still sends
 * each one, which the cycle pays for, as an application would.
 */
static void
ignore_notice(void *arg, const char *message)
{
	(void) arg;
	(void) message;
}

/*
 * Connect and prepare both the transaction-control statements and the
 * lock statements of both kinds, so every PostgreSQL mode starts from the
 * same session state.
 */
static int
pg_setup(char *err, size_t errlen)
{
	pg = PQconnectdb(target);
	if (PQstatus(pg) != CONNECTION_OK)
	{
		snprintf(err, errlen, "connect: %s", PQerrorMessage(pg));
		return -1;
	}
	PQsetNoticeProcessor(pg, ignore_notice, NULL);
	if (pg_prepare("begin", "BEGIN", 0, err, errlen) != 0 ||
		pg_prepare("commit", "COMMIT", 0, err, errlen) != 0 ||
		pg_prepare("fencing", "SELECT fencing.try_lock($1)", 1, err, errlen) != 0 ||
		pg_prepare("advisory",
				   "SELECT pg_try_advisory_xact_lock(hashtextextended($1, 0))",
				   1, err, errlen) != 0)
		return -1;
	return 0;
}

/*
 * The lease modes also prepare the lease cycle's statements and make sure
 * this client's counter row exists (its fence a token, as the protected
 * table wants; the first cycle's token is above it).
 */
static int
pg_lease_setup(char *err, size_t errlen)
{
	const char *params[1] = {lock_name};
	PGresult   *res;
	int			ok;

	if (pg_setup(err, errlen) != 0 ||
		pg_prepare("acquire", "SELECT fencing.acquire_lease($1, '30 seconds')", 1, err, errlen) != 0 ||
		pg_prepare("incr",
				   "UPDATE bench_peers.counters SET n = n + 1, fence = $2::bigint WHERE name = $1",
				   2, err, errlen) != 0 ||
		pg_prepare("release", "SELECT fencing.release_lease($1, $2::bigint)", 2, err, errlen) != 0)
		return -1;
	res = PQexecParams(pg,
					   "INSERT INTO bench_peers.counters (name, n, fence)"
					   " VALUES ($1, 0, fencing.next_token()) ON CONFLICT DO NOTHING",
					   1, NULL, params, NULL, NULL, 0);
	ok = PQresultStatus(res) == PGRES_COMMAND_OK;
	if (!ok)
		snprintf(err, errlen, "counter row: %s", PQerrorMessage(pg));
	PQclear(res);
	return ok ? 0 : -1;
}

/* incr: the row's own fence, the token every INCR of this client carries. */
static int64_t incr_token;

static int
pg_incr_setup(char *err, size_t errlen)
{
	const char *params[1] = {lock_name};
	PGresult   *res;
	int			ok;

	if (pg_lease_setup(err, errlen) != 0)
		return -1;
	res = PQexecParams(pg, "SELECT fence FROM bench_peers.counters WHERE name = $1",
					   1, NULL, params, NULL, NULL, 0);
	ok = PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1;
	if (ok)
		incr_token = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
	else
		snprintf(err, errlen, "counter row's fence: %s", PQerrorMessage(pg));
	PQclear(res);
	return ok ? 0 : -1;
}

/* lease-nosync: the same, the INCR's commit not waited for. */
static int
pg_lease_nosync_setup(char *err, size_t errlen)
{
	PGresult   *res;
	int			ok;

	if (pg_lease_setup(err, errlen) != 0)
		return -1;
	res = PQexec(pg, "SET synchronous_commit = off");
	ok = PQresultStatus(res) == PGRES_COMMAND_OK;
	if (!ok)
		snprintf(err, errlen, "SET synchronous_commit: %s", PQerrorMessage(pg));
	PQclear(res);
	return ok ? 0 : -1;
}

static void
pg_teardown(void)
{
	PQfinish(pg);
	pg = NULL;
}

/* Execute a prepared statement without rows to look at; 0 on success. */
static int
pg_command(const char *statement_name, char *err, size_t errlen)
{
	PGresult   *res = PQexecPrepared(pg, statement_name, 0, NULL, NULL, NULL, 0);
	int			ok = PQresultStatus(res) == PGRES_COMMAND_OK;

	if (!ok)
		snprintf(err, errlen, "%s: %s", statement_name, PQerrorMessage(pg));
	PQclear(res);
	return ok ? 0 : -1;
}

/*
 * Execute a prepared lock statement.  fencing.try_lock answers a token
 * (NULL when busy); the raw advisory lock answers a boolean.  Either way a
 * busy lock is an error here, since no other client uses this name.
 */
static int
pg_lock(const char *statement_name, int64_t *token, char *err, size_t errlen)
{
	const char *params[1] = {lock_name};
	PGresult   *res = PQexecPrepared(pg, statement_name, 1, params, NULL, NULL, 0);
	int			ok = 0;

	if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1)
		snprintf(err, errlen, "%s: %s", statement_name, PQerrorMessage(pg));
	else if (PQgetisnull(res, 0, 0))
		snprintf(err, errlen, "%s: not granted (NULL)", statement_name);
	else if (token != NULL)
	{
		*token = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
		ok = 1;
	}
	else if (strcmp(PQgetvalue(res, 0, 0), "t") == 0)
		ok = 1;
	else
		snprintf(err, errlen, "%s: not granted", statement_name);
	PQclear(res);
	return ok ? 0 : -1;
}

/* BEGIN, lock, COMMIT: COMMIT releases the lock; three round trips. */
static int
pg_xact_cycle(const char *statement_name, int64_t *token, char *err, size_t errlen)
{
	int			rc;

	if (pg_command("begin", err, errlen) != 0)
		return -1;
	rc = pg_lock(statement_name, token, err, errlen);
	/* commit even after a failed lock, so the next cycle starts clean */
	if (pg_command("commit", err, errlen) != 0)
		return -1;
	return rc;
}

static int
fencing_cycle(int64_t *token, char *err, size_t errlen)
{
	return pg_xact_cycle("fencing", token, err, errlen);
}

static int
fencing_1rt_cycle(int64_t *token, char *err, size_t errlen)
{
	return pg_lock("fencing", token, err, errlen);
}

static int
advisory_cycle(int64_t *token, char *err, size_t errlen)
{
	(void) token;
	return pg_xact_cycle("advisory", NULL, err, errlen);
}

static int
advisory_1rt_cycle(int64_t *token, char *err, size_t errlen)
{
	(void) token;
	return pg_lock("advisory", NULL, err, errlen);
}

/* Execute a prepared statement of the lease cycle: ($1, $2) = (name, token). */
static PGresult *
pg_exec_with_token(const char *statement_name, int64_t token)
{
	char		token_text[24];
	const char *params[2] = {lock_name, token_text};

	snprintf(token_text, sizeof(token_text), "%" PRId64, token);
	return PQexecPrepared(pg, statement_name, 2, params, NULL, NULL, 0);
}

/*
 * The fenced INCR: the protected table's trigger checks that the token is
 * not below the row's fence and stamps it; autocommit, so the commit is
 * this statement's (flushed unless synchronous_commit is off).
 */
static int
pg_incr(int64_t token, char *err, size_t errlen)
{
	PGresult   *res = pg_exec_with_token("incr", token);
	int			ok;

	ok = PQresultStatus(res) == PGRES_COMMAND_OK && strcmp(PQcmdTuples(res), "1") == 0;
	if (!ok)
		snprintf(err, errlen, "incr: %s%s", PQerrorMessage(pg),
				 PQresultStatus(res) == PGRES_COMMAND_OK ? "no row updated" : "");
	PQclear(res);
	return ok ? 0 : -1;
}

/* release_lease must answer true: nobody else could have taken the name. */
static int
pg_release(int64_t token, char *err, size_t errlen)
{
	PGresult   *res = pg_exec_with_token("release", token);
	int			ok;

	ok = PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1 &&
		strcmp(PQgetvalue(res, 0, 0), "t") == 0;
	if (!ok)
		snprintf(err, errlen, "release: %s", PQresultStatus(res) == PGRES_TUPLES_OK ?
				 "not released" : PQerrorMessage(pg));
	PQclear(res);
	return ok ? 0 : -1;
}

/* The fenced INCR alone, one round trip (the same token: equal is allowed). */
static int
incr_cycle(int64_t *token, char *err, size_t errlen)
{
	(void) token;
	return pg_incr(incr_token, err, errlen);
}

/* acquire_lease, the fenced INCR, release_lease: three round trips. */
static int
lease_cycle(int64_t *token, char *err, size_t errlen)
{
	int			rc;

	steps_begin();
	if (pg_lock("acquire", token, err, errlen) != 0)
		return -1;
	step_done();
	rc = pg_incr(*token, err, errlen);
	step_done();
	/* release even after a failed INCR, so the next cycle can acquire */
	if (pg_release(*token, err, errlen) != 0)
		return -1;
	step_done();
	return rc;
}

/*
 * lease-1rt: the whole cycle in one query string, as pg-fencing's
 * Lease.runOnce sends it.  The name is this client's, plain ASCII, written
 * into the statement.
 */
static char lease_1rt_query[2048];

static int
pg_lease_1rt_setup(char *err, size_t errlen)
{
	if (pg_lease_setup(err, errlen) != 0)
		return -1;
	snprintf(lease_1rt_query, sizeof(lease_1rt_query),
			 "BEGIN;"
			 " SELECT pg_catalog.set_config('pgfencing.lease', coalesce(fencing.acquire_lease("
			 "'%s', '30 seconds', '0'::interval)::pg_catalog.text, '0'), false);"
			 " SELECT fencing.use_lease('%s', pg_catalog.current_setting('pgfencing.lease')::bigint);"
			 " UPDATE bench_peers.counters SET n = n + 1 WHERE name = '%s';"
			 " COMMIT;"
			 " SELECT fencing.release_lease('%s', pg_catalog.current_setting('pgfencing.lease')::bigint),"
			 " pg_catalog.set_config('pgfencing.lease', '', false)",
			 lock_name, lock_name, lock_name, lock_name);
	return 0;
}

/*
 * One round trip; the results in order: BEGIN, the token, use_lease, the
 * INCR (one row), COMMIT, the release (true).
 */
static int
lease_1rt_cycle(int64_t *token, char *err, size_t errlen)
{
	PGresult   *res;
	int			i = 0;
	int			ok = 1;

	if (!PQsendQuery(pg, lease_1rt_query))
	{
		snprintf(err, errlen, "send: %s", PQerrorMessage(pg));
		return -1;
	}
	while ((res = PQgetResult(pg)) != NULL)
	{
		ExecStatusType status = PQresultStatus(res);

		if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK)
		{
			if (ok)
				snprintf(err, errlen, "statement %d: %s", i + 1, PQresultErrorMessage(res));
			ok = 0;
		}
		else if (i == 1)
			*token = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
		else if (i == 3 && strcmp(PQcmdTuples(res), "1") != 0)
		{
			snprintf(err, errlen, "incr: no row updated");
			ok = 0;
		}
		else if (i == 5 && strcmp(PQgetvalue(res, 0, 0), "t") != 0)
		{
			snprintf(err, errlen, "release: not released");
			ok = 0;
		}
		PQclear(res);
		i++;
	}
	if (ok && i != 6)
	{
		snprintf(err, errlen, "%d results, not 6", i);
		ok = 0;
	}
	if (!ok && PQtransactionStatus(pg) != PQTRANS_IDLE)
		PQclear(PQexec(pg, "ROLLBACK"));
	return ok ? 0 : -1;
}

/*
 * redis-pg and etcd-pg: the durable INCR of a table without a fence, in
 * autocommit, between the peer's lock and unlock.  TARGET is the peer's
 * address, ";", and the conninfo.
 */
static const char *pg_target;

static int
pg_plain_setup(char *err, size_t errlen)
{
	const char *params[1] = {lock_name};
	char	   *semicolon = strchr(target, ';');
	PGresult   *res;
	int			ok;

	if (semicolon == NULL)
	{
		snprintf(err, errlen, "target must be \"PEER;CONNINFO\", not \"%s\"", target);
		return -1;
	}
	*semicolon = '\0';
	pg_target = semicolon + 1;
	pg = PQconnectdb(pg_target);
	if (PQstatus(pg) != CONNECTION_OK)
	{
		snprintf(err, errlen, "connect: %s", PQerrorMessage(pg));
		return -1;
	}
	PQsetNoticeProcessor(pg, ignore_notice, NULL);
	if (pg_prepare("plain_incr", "UPDATE bench_peers.plain SET n = n + 1 WHERE name = $1",
				   1, err, errlen) != 0)
		return -1;
	res = PQexecParams(pg, "INSERT INTO bench_peers.plain (name, n) VALUES ($1, 0) ON CONFLICT DO NOTHING",
					   1, NULL, params, NULL, NULL, 0);
	ok = PQresultStatus(res) == PGRES_COMMAND_OK;
	if (!ok)
		snprintf(err, errlen, "plain row: %s", PQerrorMessage(pg));
	PQclear(res);
	return ok ? 0 : -1;
}

static int
pg_plain_incr(char *err, size_t errlen)
{
	const char *params[1] = {lock_name};
	PGresult   *res = PQexecPrepared(pg, "plain_incr", 1, params, NULL, NULL, 0);
	int			ok = PQresultStatus(res) == PGRES_COMMAND_OK && strcmp(PQcmdTuples(res), "1") == 0;

	if (!ok)
		snprintf(err, errlen, "plain incr: %s", PQerrorMessage(pg));
	PQclear(res);
	return ok ? 0 : -1;
}

/* ----------------------------------------------------------------------
 * Redis
 * ---------------------------------------------------------------------- */

static redisContext *redis;
static char redis_release_sha[64];
static char redis_owner_prefix[40];
static unsigned long redis_owner_serial;

/*
 * The release every Redis lock recipe prescribes: delete the lock key only
 * if it still holds our value, so a holder whose key expired cannot delete
 * the next holder's lock.
 */
static const char *redis_release_script =
"if redis.call('get', KEYS[1]) == ARGV[1] then "
"return redis.call('del', KEYS[1]) else return 0 end";

/*
 * A random owner prefix per process (from /dev/urandom, as the recipe
 * asks), so owner values are unique across processes and runs.
 */
static int
redis_random_prefix(char *err, size_t errlen)
{
	unsigned char bytes[16];
	int			fd = open("/dev/urandom", O_RDONLY);
	int			i;

	if (fd < 0 || read(fd, bytes, sizeof(bytes)) != (ssize_t) sizeof(bytes))
	{
		snprintf(err, errlen, "/dev/urandom: %s", strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	close(fd);
	for (i = 0; i < 16; i++)
		sprintf(redis_owner_prefix + 2 * i, "%02x", bytes[i]);
	return 0;
}

static int
redis_setup(char *err, size_t errlen)
{
	char		host[128];
	const char *colon = strrchr(target, ':');
	redisReply *reply;
	int			ok;

	if (colon == NULL || (size_t) (colon - target) >= sizeof(host))
	{
		snprintf(err, errlen, "redis target must be host:port, not \"%s\"", target);
		return -1;
	}
	memcpy(host, target, colon - target);
	host[colon - target] = '\0';
	redis = redisConnect(host, atoi(colon + 1));
	if (redis == NULL || redis->err)
	{
		snprintf(err, errlen, "connect: %s", redis ? redis->errstr : "out of memory");
		return -1;
	}
	if (redis_random_prefix(err, errlen) != 0)
		return -1;

	reply = redisCommand(redis, "SCRIPT LOAD %s", redis_release_script);
	ok = reply != NULL && reply->type == REDIS_REPLY_STRING &&
		reply->len < (int) sizeof(redis_release_sha);
	if (ok)
		memcpy(redis_release_sha, reply->str, reply->len + 1);
	else
		snprintf(err, errlen, "SCRIPT LOAD: %s",
				 reply && reply->str ? reply->str : redis->errstr);
	if (reply)
		freeReplyObject(reply);
	return ok ? 0 : -1;
}

static void
redis_teardown(void)
{
	redisFree(redis);
	redis = NULL;
}

/* Describe a failed reply for the error message. */
static const char *
redis_reply_text(redisReply *reply)
{
	if (reply == NULL)
		return redis->errstr;
	if (reply->type == REDIS_REPLY_NIL)
		return "nil";
	if (reply->str != NULL)
		return reply->str;
	return "unexpected reply";
}

/* SET NX PX, INCR, EVALSHA release: three round trips. */
static int
redis_cycle(int64_t *token, char *err, size_t errlen)
{
	redisReply *reply;
	char		owner[64];
	int			ok;

	snprintf(owner, sizeof(owner), "%s-%lu", redis_owner_prefix, ++redis_owner_serial);

	steps_begin();
	reply = redisCommand(redis, "SET lock:%s %s NX PX 30000", lock_name, owner);
	ok = reply != NULL && reply->type == REDIS_REPLY_STATUS &&
		strcmp(reply->str, "OK") == 0;
	if (!ok)
		snprintf(err, errlen, "SET NX: %s", redis_reply_text(reply));
	if (reply)
		freeReplyObject(reply);
	if (!ok)
		return -1;
	step_done();

	reply = redisCommand(redis, "INCR fence:%s", lock_name);
	ok = reply != NULL && reply->type == REDIS_REPLY_INTEGER;
	if (ok)
		*token = reply->integer;
	else
		snprintf(err, errlen, "INCR: %s", redis_reply_text(reply));
	if (reply)
		freeReplyObject(reply);
	step_done();

	/* release even if INCR failed, so the next cycle can lock */
	reply = redisCommand(redis, "EVALSHA %s 1 lock:%s %s",
						 redis_release_sha, lock_name, owner);
	if (reply == NULL || reply->type != REDIS_REPLY_INTEGER || reply->integer != 1)
	{
		if (ok)
			snprintf(err, errlen, "EVALSHA release: %s", redis_reply_text(reply));
		ok = 0;
	}
	if (reply)
		freeReplyObject(reply);
	step_done();
	return ok ? 0 : -1;
}

/*
 * redis-pg: SET NX PX, the durable INCR in PostgreSQL, EVALSHA release:
 * three round trips, two to Redis and one to PostgreSQL.
 */
static int
redis_pg_setup(char *err, size_t errlen)
{
	if (pg_plain_setup(err, errlen) != 0)
		return -1;
	return redis_setup(err, errlen);
}

static void
redis_pg_teardown(void)
{
	redis_teardown();
	pg_teardown();
}

static int
redis_pg_cycle(int64_t *token, char *err, size_t errlen)
{
	redisReply *reply;
	char		owner[64];
	int			ok;

	(void) token;
	snprintf(owner, sizeof(owner), "%s-%lu", redis_owner_prefix, ++redis_owner_serial);
	steps_begin();
	reply = redisCommand(redis, "SET lock:%s %s NX PX 30000", lock_name, owner);
	ok = reply != NULL && reply->type == REDIS_REPLY_STATUS && strcmp(reply->str, "OK") == 0;
	if (!ok)
		snprintf(err, errlen, "SET NX: %s", redis_reply_text(reply));
	if (reply)
		freeReplyObject(reply);
	if (!ok)
		return -1;
	step_done();
	ok = pg_plain_incr(err, errlen) == 0;
	step_done();
	/* release even if the INCR failed, so the next cycle can lock */
	reply = redisCommand(redis, "EVALSHA %s 1 lock:%s %s", redis_release_sha, lock_name, owner);
	if (reply == NULL || reply->type != REDIS_REPLY_INTEGER || reply->integer != 1)
	{
		if (ok)
			snprintf(err, errlen, "EVALSHA release: %s", redis_reply_text(reply));
		ok = 0;
	}
	if (reply)
		freeReplyObject(reply);
	step_done();
	return ok ? 0 : -1;
}

/* ----------------------------------------------------------------------
 * etcd, through its v3 JSON gateway (grpc-gateway)
 * ---------------------------------------------------------------------- */

static CURL *curl;
static struct curl_slist *curl_headers;
static char response[8192];
static size_t response_len;
static char lock_name_base64[128];
static int64_t process_lease;

/* libcurl write callback: keep the (small) reply body in response[]. */
static size_t
collect_response(char *data, size_t size, size_t nmemb, void *userdata)
{
	size_t		n = size * nmemb;
	size_t		room = sizeof(response) - 1 - response_len;
	size_t		take = n < room ? n : room;

	(void) userdata;
	memcpy(response + response_len, data, take);
	response_len += take;
	response[response_len] = '\0';
	return n;
}

/*
 * POST a JSON body to TARGET + path on the one easy handle, which keeps its
 * TCP connection open between requests (HTTP/1.1 keep-alive).
 */
static int
etcd_post(const char *path, const char *body, char *err, size_t errlen)
{
	char		url[512];
	CURLcode	rc;
	long		status = 0;

	snprintf(url, sizeof(url), "%s%s", target, path);
	response_len = 0;
	response[0] = '\0';
	curl_easy_setopt(curl, CURLOPT_URL, url);
	curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body);
	rc = curl_easy_perform(curl);
	if (rc != CURLE_OK)
	{
		snprintf(err, errlen, "%s: %s", path, curl_easy_strerror(rc));
		return -1;
	}
	curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
	if (status != 200)
	{
		snprintf(err, errlen, "%s: HTTP %ld: %.160s", path, status, response);
		return -1;
	}
	return 0;
}

/*
 * The integer value of "field" in response[].  grpc-gateway writes int64
 * fields as JSON strings ("ID":"7587...") but accept a bare number too.
 */
static int
json_int64(const char *field, int64_t *value)
{
	char		pattern[64];
	const char *p;
	char	   *end;

	snprintf(pattern, sizeof(pattern), "\"%s\":", field);
	p = strstr(response, pattern);
	if (p == NULL)
		return -1;
	p += strlen(pattern);
	while (*p == ' ' || *p == '"')
		p++;
	errno = 0;
	*value = strtoll(p, &end, 10);
	return end == p || errno != 0 ? -1 : 0;
}

/* The string value of "field" in response[]; 0 if found. */
static int
json_string(const char *field, char *out, size_t outlen)
{
	char		pattern[64];
	const char *p;
	size_t		n = 0;

	snprintf(pattern, sizeof(pattern), "\"%s\":\"", field);
	p = strstr(response, pattern);
	if (p == NULL)
		return -1;
	p += strlen(pattern);
	while (p[n] != '"' && p[n] != '\0')
		n++;
	if (p[n] != '"' || n + 1 > outlen)
		return -1;
	memcpy(out, p, n);
	out[n] = '\0';
	return 0;
}

/* bytes fields travel base64-encoded in the JSON gateway */
static void
base64_encode(const char *in, char *out)
{
	static const char alphabet[] =
		"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	size_t		len = strlen(in);
	size_t		i;
	char	   *o = out;

	for (i = 0; i < len; i += 3)
	{
		uint32_t	v = (uint32_t) (unsigned char) in[i] << 16;

		if (i + 1 < len)
			v |= (uint32_t) (unsigned char) in[i + 1] << 8;
		if (i + 2 < len)
			v |= (uint32_t) (unsigned char) in[i + 2];
		*o++ = alphabet[(v >> 18) & 63];
		*o++ = alphabet[(v >> 12) & 63];
		*o++ = i + 1 < len ? alphabet[(v >> 6) & 63] : '=';
		*o++ = i + 2 < len ? alphabet[v & 63] : '=';
	}
	*o = '\0';
}

static int
etcd_lease_grant(int64_t *lease, char *err, size_t errlen)
{
	if (etcd_post("/v3/lease/grant", "{\"TTL\":30}", err, errlen) != 0)
		return -1;
	if (json_int64("ID", lease) != 0 || *lease == 0)
	{
		snprintf(err, errlen, "lease grant: no ID in %.160s", response);
		return -1;
	}
	return 0;
}

static int
etcd_lease_revoke(int64_t lease, char *err, size_t errlen)
{
	char		body[64];

	snprintf(body, sizeof(body), "{\"ID\":\"%" PRId64 "\"}", lease);
	return etcd_post("/v3/lease/revoke", body, err, errlen);
}

static int
etcd_setup(char *err, size_t errlen)
{
	curl = curl_easy_init();
	if (curl == NULL)
	{
		snprintf(err, errlen, "curl_easy_init failed");
		return -1;
	}
	curl_headers = curl_slist_append(NULL, "Content-Type: application/json");
	/* no "Expect: 100-continue" round trip, ever */
	curl_headers = curl_slist_append(curl_headers, "Expect:");
	curl_easy_setopt(curl, CURLOPT_HTTPHEADER, curl_headers);
	curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, collect_response);
	curl_easy_setopt(curl, CURLOPT_TCP_NODELAY, 1L);
	curl_easy_setopt(curl, CURLOPT_TIMEOUT, 10L);
	curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
	base64_encode(lock_name, lock_name_base64);
	return 0;
}

/* The "etcd" mode also holds one lease for the whole run. */
static int
etcd_setup_with_lease(char *err, size_t errlen)
{
	if (etcd_setup(err, errlen) != 0)
		return -1;
	return etcd_lease_grant(&process_lease, err, errlen);
}

static void
etcd_teardown(void)
{
	char		err[ERROR_LEN];

	if (process_lease != 0)
		(void) etcd_lease_revoke(process_lease, err, sizeof(err));
	process_lease = 0;
	curl_easy_cleanup(curl);
	curl_slist_free_all(curl_headers);
	curl = NULL;
}

/*
 * Lock and unlock under a lease.  The lock reply's header.revision is the
 * token: when the lock is free it is the revision of the transaction that
 * created this holder's key (the key's create_revision); when the holder
 * had to wait, it is the revision at which the previous holder's key went
 * away.  Either way it is greater than every earlier holder's.
 */
static int
etcd_lock_unlock(int64_t lease, int64_t *token, int (*work) (char *, size_t),
				 char *err, size_t errlen)
{
	char		body[512];
	char		key[256];
	int			rc = 0;

	snprintf(body, sizeof(body), "{\"name\":\"%s\",\"lease\":\"%" PRId64 "\"}",
			 lock_name_base64, lease);
	steps_begin();
	if (etcd_post("/v3/lock/lock", body, err, errlen) != 0)
		return -1;
	step_done();
	if (json_string("key", key, sizeof(key)) != 0 ||
		json_int64("revision", token) != 0)
	{
		snprintf(err, errlen, "lock: no key or revision in %.160s", response);
		return -1;
	}
	if (work != NULL)
	{
		rc = work(err, errlen);
		step_done();
	}
	/* unlock even if the work failed, so the next cycle can lock */
	snprintf(body, sizeof(body), "{\"key\":\"%s\"}", key);
	if (etcd_post("/v3/lock/unlock", body, err, errlen) != 0)
		return -1;
	step_done();
	return rc;
}

static int
etcd_cycle(int64_t *token, char *err, size_t errlen)
{
	return etcd_lock_unlock(process_lease, token, NULL, err, errlen);
}

static int
etcd_lease_cycle(int64_t *token, char *err, size_t errlen)
{
	int64_t		lease;
	int			rc;

	if (etcd_lease_grant(&lease, err, errlen) != 0)
		return -1;
	rc = etcd_lock_unlock(lease, token, NULL, err, errlen);
	if (etcd_lease_revoke(lease, err, errlen) != 0)
		return -1;
	return rc;
}

/* etcd-pg: lock, the durable INCR in PostgreSQL, unlock. */
static int
etcd_pg_setup(char *err, size_t errlen)
{
	if (pg_plain_setup(err, errlen) != 0)
		return -1;
	return etcd_setup_with_lease(err, errlen);
}

static void
etcd_pg_teardown(void)
{
	etcd_teardown();
	pg_teardown();
}

static int
etcd_pg_cycle(int64_t *token, char *err, size_t errlen)
{
	return etcd_lock_unlock(process_lease, token, pg_plain_incr, err, errlen);
}

/* ----------------------------------------------------------------------
 * Driver
 * ---------------------------------------------------------------------- */

static const Mode modes[] = {
	{"fencing", pg_setup, fencing_cycle, pg_teardown, 1, {NULL}},
	{"fencing-1rt", pg_setup, fencing_1rt_cycle, pg_teardown, 1, {NULL}},
	{"advisory", pg_setup, advisory_cycle, pg_teardown, 0, {NULL}},
	{"advisory-1rt", pg_setup, advisory_1rt_cycle, pg_teardown, 0, {NULL}},
	{"lease", pg_lease_setup, lease_cycle, pg_teardown, 1, {"acquire", "incr", "release"}},
	{"lease-nosync", pg_lease_nosync_setup, lease_cycle, pg_teardown, 1,
	{"acquire", "incr", "release"}},
	{"incr", pg_incr_setup, incr_cycle, pg_teardown, 0, {NULL}},
	{"redis", redis_setup, redis_cycle, redis_teardown, 1, {"set", "incr", "release"}},
	{"etcd", etcd_setup_with_lease, etcd_cycle, etcd_teardown, 1, {"lock", "unlock"}},
	{"etcd-lease", etcd_setup, etcd_lease_cycle, etcd_teardown, 1, {"lock", "unlock"}},
	{"lease-1rt", pg_lease_1rt_setup, lease_1rt_cycle, pg_teardown, 1, {NULL}},
	{"redis-pg", redis_pg_setup, redis_pg_cycle, redis_pg_teardown, 0, {"set", "incr", "release"}},
	{"etcd-pg", etcd_pg_setup, etcd_pg_cycle, etcd_pg_teardown, 1, {"lock", "incr", "unlock"}},
};

static int
compare_floats(const void *a, const void *b)
{
	float		x = *(const float *) a;
	float		y = *(const float *) b;

	return (x > y) - (x < y);
}

/* Remember an error; only the first one's text is kept. */
static void
record_error(ClientResult *result, const char *err)
{
	if (result->errors++ == 0)
		snprintf(result->first_error, sizeof(result->first_error), "%s", err);
}

/*
 * One client process: connect, wait for the common start, run cycles until
 * the deadline and record each cycle's latency.  A token that does not go
 * up is counted as an error: a fencing token that can repeat is useless.
 * The loop ends at the deadline; errors do not stop it, but a client whose
 * connection broke stops after too many of them.
 */
static void
run_client(const Mode *mode, double start, double deadline,
		   ClientResult *result, float *samples)
{
	char		err[ERROR_LEN] = "";
	int64_t		last_token = 0;
	int			step;

	if (mode->setup(err, sizeof(err)) != 0)
	{
		record_error(result, err);
		return;
	}
	while (monotonic_seconds() < start)
		usleep(1000);

	for (;;)
	{
		double		t0 = monotonic_seconds();
		double		t1;
		int64_t		token = 0;
		int			rc;

		if (t0 >= deadline || result->errors > 1000)
			break;
		err[0] = '\0';
		rc = mode->cycle(&token, err, sizeof(err));
		t1 = monotonic_seconds();
		if (rc != 0)
		{
			record_error(result, err);
			continue;
		}
		if (mode->has_token)
		{
			if (token <= last_token)
			{
				snprintf(err, sizeof(err), "token %" PRId64 " not greater than %" PRId64,
						 token, last_token);
				record_error(result, err);
				continue;
			}
			last_token = token;
		}
		/* a cycle that ended past the deadline still counts: it was started */
		result->cycles++;
		for (step = 0; step < MAX_STEPS && mode->steps[step] != NULL; step++)
			result->step_seconds[step] += step_seconds[step];
		if (result->samples < MAX_SAMPLES_PER_CLIENT)
			samples[result->samples++] = (float) ((t1 - t0) * 1000.0);
	}
	mode->teardown();
}

int
main(int argc, char **argv)
{
	const Mode *mode = NULL;
	int			clients;
	double		seconds;
	double		start;
	ClientResult *results;
	float	   *samples;
	float	   *all;
	long		cycles = 0;
	long		errors = 0;
	long		n = 0;
	size_t		i;
	int			c;

	if (argc != 5)
	{
		fprintf(stderr, "usage: %s MODE CLIENTS SECONDS TARGET\nmodes:", argv[0]);
		for (i = 0; i < sizeof(modes) / sizeof(modes[0]); i++)
			fprintf(stderr, " %s", modes[i].name);
		fprintf(stderr, "\n");
		return 2;
	}
	for (i = 0; i < sizeof(modes) / sizeof(modes[0]); i++)
		if (strcmp(argv[1], modes[i].name) == 0)
			mode = &modes[i];
	clients = atoi(argv[2]);
	seconds = atof(argv[3]);
	target = argv[4];
	if (mode == NULL)
	{
		fprintf(stderr, "peers: unknown mode \"%s\"\n", argv[1]);
		return 2;
	}
	if (clients < 1 || clients > MAX_CLIENTS || seconds <= 0 || seconds > 600)
	{
		fprintf(stderr, "peers: CLIENTS must be 1..%d and SECONDS in (0, 600]\n",
				MAX_CLIENTS);
		return 2;
	}
	curl_global_init(CURL_GLOBAL_DEFAULT);

	results = mmap(NULL, sizeof(ClientResult) * clients, PROT_READ | PROT_WRITE,
				   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	samples = mmap(NULL, sizeof(float) * MAX_SAMPLES_PER_CLIENT * clients,
				   PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE,
				   -1, 0);
	if (results == MAP_FAILED || samples == MAP_FAILED)
	{
		fprintf(stderr, "peers: mmap: %s\n", strerror(errno));
		return 2;
	}
	memset(results, 0, sizeof(ClientResult) * clients);

	/* every client connects first; all start cycling together */
	start = monotonic_seconds() + 1.0;
	for (c = 0; c < clients; c++)
	{
		pid_t		pid = fork();

		if (pid < 0)
		{
			fprintf(stderr, "peers: fork: %s\n", strerror(errno));
			return 2;
		}
		if (pid == 0)
		{
			client_number = c;
			snprintf(lock_name, sizeof(lock_name), "bench peers %d/%d",
					 (int) getppid(), client_number);
			run_client(mode, start, start + seconds, &results[c],
					   samples + (size_t) c * MAX_SAMPLES_PER_CLIENT);
			_exit(0);
		}
	}
	while (wait(NULL) > 0)
		;

	for (c = 0; c < clients; c++)
	{
		cycles += results[c].cycles;
		errors += results[c].errors;
		n += results[c].samples;
		if (results[c].errors > 0)
			fprintf(stderr, "peers: %s client %d: %ld errors, first: %s\n",
					mode->name, c, results[c].errors, results[c].first_error);
	}
	all = malloc(sizeof(float) * (n > 0 ? n : 1));
	if (all == NULL)
	{
		fprintf(stderr, "peers: out of memory\n");
		return 2;
	}
	n = 0;
	for (c = 0; c < clients; c++)
	{
		memcpy(all + n, samples + (size_t) c * MAX_SAMPLES_PER_CLIENT,
			   sizeof(float) * results[c].samples);
		n += results[c].samples;
	}
	qsort(all, n, sizeof(float), compare_floats);

	printf("%s %d %.1f %.3f %.3f %ld %ld", mode->name, clients,
		   cycles / seconds,
		   n > 0 ? all[n / 2] : 0.0,
		   n > 0 ? all[(n * 99) / 100] : 0.0,
		   cycles, errors);
	for (i = 0; i < MAX_STEPS && mode->steps[i] != NULL; i++)
	{
		double		sum = 0;

		for (c = 0; c < clients; c++)
			sum += results[c].step_seconds[i];
		printf(" %s=%.1f", mode->steps[i], cycles > 0 ? sum / cycles * 1e6 : 0.0);
	}
	printf("\n");
	return errors > 0 ? 1 : 0;
}
