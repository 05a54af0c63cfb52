/*-------------------------------------------------------------------------
 *
 * invoice_worker.c
 *		One pod of the nightly invoice job, as a libpq client of fencing.
 *
 * This is the worker that examples/demo.sh starts ten times over to play the
 * guide's failure sentence: "two pods run the nightly invoice job and
 * customers get billed twice".  Each run:
 *
 *	1. connects and (with --gate) waits for SIGUSR1, so that every pod asks
 *	   for the lock at the same instant;
 *	2. in one transaction takes the correctness lock for the run with
 *	   fencing.try_lock(name), or fencing.lease(name, ttl) for a lease the
 *	   server enforces, and gets a fence token; NULL means another pod has
 *	   the run and this one exits;
 *	3. before its first write, calls fencing.check_fence(name, token): the
 *	   run's fence.  It raises the run's watermark to this token, or fails
 *	   with SQLSTATE FN001 if a newer holder has already raised it;
 *	4. bills every customer: before each side effect it checks
 *	   fencing.held_token(name), then updates billing.accounts with
 *	   fence = token (the fencing.reject_stale trigger refuses a token below
 *	   the row's fence) and inserts the invoice line in the same statement;
 *	5. commits.
 *
 * Why the run's fence as well as the rows' fences: a row's fence only knows
 * the holders that have written that row.  A stale pod that wakes while the
 * new holder is half way through the run would find the customers the new
 * holder has not reached yet without a newer fence, bill them with its old
 * token, and the new holder would then bill them again.  check_fence on the
 * run's resource, first in every transaction that writes for the run, lets
 * one newer holder fence out every older one for the whole run: the new
 * holder's first check raised the watermark (and keeps its row locked until
 * its transaction ends, so a stale pod's check waits for it and then fails).
 * EXECUTE on check_fence is revoked from PUBLIC in fencing 1.1: the role the
 * pods run as needs GRANT EXECUTE ON FUNCTION fencing.check_fence(text,
 * bigint) (examples/demo.sh grants it to its worker role).
 *
 * With --naive-resume the worker behaves like a pod that was paused and
 * does not know it lost its lease: when its session turns out to be gone it
 * reconnects and carries on with its pending bill (the first customer it has
 * not billed) with the token it already has.  The fence at the resource is
 * what stops it: its check_fence (or, failing that, the row's fence) fails
 * with SQLSTATE FN001, and the worker stops for good (a stale holder must
 * never retry).  Without --naive-resume a lost session simply ends the run,
 * which is what a real job should do.
 *
 * With --hold-after N the worker stops after billing N customers, its
 * transaction open, until it gets SIGUSR1: the demo uses it to wake a stale
 * pod in the middle of this pod's run.
 *
 * With --batch N the worker runs the job the way a long job must, on a lease
 * that outlives its transactions (README.md, "The invoice pattern, in SQL"): it takes the run
 * with fencing.acquire_lease(name, ttl, timeout, holder) outside any
 * transaction (waiting up to --wait for it, without polling), then bills N
 * customers per transaction.  Each batch starts with
 * fencing.use_lease(name, token), which fails with SQLSTATE FN004 once the
 * lease is lost, renews it otherwise, raises the run's fence to the token
 * and sets fencing.token; the batch then bills the next customers the
 * ledger shows unbilled (so a pod that takes over from a lost one goes on
 * where the committed batches end) and commits.  On FN004 the worker stops
 * at once: no retry, no reconnect.  After the last batch it releases the
 * lease.  Here --hold-after N holds after N batches, between transactions.
 *
 * Output: one event per line on stdout, tab-separated, for the driver to
 * assemble into a timeline:
 *		microseconds-since-epoch  worker  event  token|-  text
 * Events: ready, wait, got, check, busy, bill, hold, commit, lost, resume,
 * rejected, fn004, release, stop, error.
 *
 * Exit status: 0 billed and committed, 2 busy, 3 stale write rejected
 * (FN001), 4 lost the lock and stopped, 5 lost the lease (FN004) and
 * stopped, 1 anything else.
 *
 * Connection parameters come from the usual PG* environment variables (or
 * --dsn).  Build:
 *		gcc -Wall -Wextra -I"$(pg_config --includedir)" invoice_worker.c \
 *			-L"$(pg_config --libdir)" -lpq -o invoice_worker
 *
 * Copyright (c) 2026, the fencing developers
 *
 * IDENTIFICATION
 *		examples/invoice_worker.c
 *
 *-------------------------------------------------------------------------
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>

#define EXIT_BILLED		0
#define EXIT_FAILED		1
#define EXIT_BUSY		2
#define EXIT_STALE		3
#define EXIT_LOST		4
#define EXIT_LEASE_LOST	5

#define MAX_CUSTOMERS	64
#define STALE_SQLSTATE	"FN001"
#define LEASE_LOST_SQLSTATE "FN004"

/* which fence rejected a statement, for the timeline */
#define RUN_FENCE		"the run's fence (check_fence)"
#define ROW_FENCE		"the row's fence"
#define RUN_FENCE_LEASE	"the run's fence (use_lease)"

typedef struct Customer
{
	char		id[16];
	char		name[64];
	int			billed;			/* billed in the current transaction */
} Customer;

typedef struct WorkerOptions
{
	const char *worker;			/* label in the timeline, e.g. "w03" */
	const char *lock_name;		/* as this pod spells it */
	const char *period;			/* billing period, e.g. "2026-10" */
	const char *lease_ttl;		/* NULL: fencing.try_lock; else a lease */
	const char *dsn;			/* NULL: PG* environment */
	int			step_ms;		/* pause between customers (work time) */
	int			gate;			/* wait for SIGUSR1 before asking */
	int			hold_after;		/* >0: wait for SIGUSR1 after this many bills
								 * (batches, with --batch) */
	int			naive_resume;	/* play the stale pod after losing the session */
	int			batch;			/* >0: customers per transaction, on a lease */
	const char *wait;			/* acquire_lease's timeout (NULL: no wait) */
} WorkerOptions;

static WorkerOptions opts;
static Customer customers[MAX_CUSTOMERS];
static int	ncustomers = 0;
static char token[32] = "-";

static volatile sig_atomic_t go_received = 0;
static sigset_t go_unblocked;	/* the signal mask with SIGUSR1 deliverable */

/*
 * Print one event line stamped with "at" (microseconds since the epoch).
 * The line is formatted first and written with one fputs+fflush, so lines
 * of concurrent workers that share one file opened for appending never
 * interleave.
 */
static void
report_va(const char *at, const char *event, const char *fmt, va_list args)
{
	char		text[1024];
	char		line[1400];
	char	   *p;

	vsnprintf(text, sizeof(text), fmt, args);
	/* keep one event on one line: server messages may contain newlines */
	for (p = text; *p; p++)
		if (*p == '\n' || *p == '\t')
			*p = ' ';
	snprintf(line, sizeof(line), "%s\t%s\t%s\t%s\t%s\n",
			 at, opts.worker, event, token, text);
	fputs(line, stdout);
	fflush(stdout);
}

/*
 * Report an event that happened now, by this process's clock.
 */
static void
report(const char *event, const char *fmt,...)
{
	struct timeval now;
	char		at[32];
	va_list		args;

	gettimeofday(&now, NULL);
	snprintf(at, sizeof(at), "%lld%06ld", (long long) now.tv_sec, (long) now.tv_usec);
	va_start(args, fmt);
	report_va(at, event, fmt, args);
	va_end(args);
}

/*
 * Report an event at a time the server measured.  The lock outcomes use
 * the server's clock: a winner whose process is scheduled late must not
 * appear in the timeline after the pods that found its lock busy.
 */
static void
report_at(const char *at, const char *event, const char *fmt,...)
{
	va_list		args;

	va_start(args, fmt);
	report_va(at, event, fmt, args);
	va_end(args);
}

/*
 * The first line of a libpq error message, without "ERROR:  " noise, for
 * one-line timeline entries.
 */
static const char *
first_line(const char *msg, char *buf, size_t len)
{
	size_t		n;

	if (msg == NULL)
		msg = "";
	while (*msg == ' ' || *msg == '\n')
		msg++;
	n = strcspn(msg, "\n");
	if (n >= len)
		n = len - 1;
	memcpy(buf, msg, n);
	buf[n] = '\0';
	return buf;
}

/*
 * Sleep in milliseconds; nanosleep restarts after a stop/continue, so a
 * SIGSTOP from the driver lengthens the pause exactly as a GC pause would.
 */
static void
sleep_ms(int ms)
{
	struct timespec ts;

	ts.tv_sec = ms / 1000;
	ts.tv_nsec = (long) (ms % 1000) * 1000000L;
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/*
 * Connect with the worker's label as application_name, so that the demo's
 * operator can recognise the pods in pg_stat_activity and fencing.locks.
 */
static PGconn *
connect_worker(void)
{
	const char *keywords[] = {"dbname", "application_name", NULL};
	const char *values[] = {opts.dsn ? opts.dsn : "", opts.worker, NULL};
	PGconn	   *conn;

	conn = PQconnectdbParams(keywords, values, 1);
	if (PQstatus(conn) != CONNECTION_OK)
	{
		char		buf[512];

		report("error", "cannot connect: %s",
			   first_line(PQerrorMessage(conn), buf, sizeof(buf)));
		PQfinish(conn);
		exit(EXIT_FAILED);
	}
	return conn;
}

/*
 * Run a command that must succeed (BEGIN, ROLLBACK, the customer list);
 * anything else here is a setup problem, not part of the scenario.
 */
static PGresult *
exec_or_die(PGconn *conn, const char *sql, int nparams, const char *const *params,
			ExecStatusType expected)
{
	PGresult   *res = PQexecParams(conn, sql, nparams, NULL, params, NULL, NULL, 0);

	if (PQresultStatus(res) != expected)
	{
		char		buf[512];

		report("error", "%s failed: %s", sql,
			   first_line(PQerrorMessage(conn), buf, sizeof(buf)));
		exit(EXIT_FAILED);
	}
	return res;
}

/*
 * Read the customers to bill.  This happens before the lock is taken, as a
 * real job reads its input, and it is not a side effect.
 */
static void
load_customers(PGconn *conn)
{
	PGresult   *res;
	int			i;

	res = exec_or_die(conn,
					  "SELECT customer_id, name FROM billing.accounts ORDER BY customer_id",
					  0, NULL, PGRES_TUPLES_OK);
	for (i = 0; i < PQntuples(res) && i < MAX_CUSTOMERS; i++)
	{
		snprintf(customers[i].id, sizeof(customers[i].id), "%s", PQgetvalue(res, i, 0));
		snprintf(customers[i].name, sizeof(customers[i].name), "%s", PQgetvalue(res, i, 1));
		customers[i].billed = 0;
	}
	ncustomers = i;
	PQclear(res);
}

/*
 * SIGUSR1 handler: the driver's "go" (at the start gate, or after a hold).
 * Only sets a flag.
 */
static void
on_go_signal(int signo)
{
	(void) signo;
	go_received = 1;
}

/*
 * Install the SIGUSR1 handler and keep the signal blocked from now on except
 * while waiting for it, so a "go" that arrives before the wait (the driver
 * reacts to the line we print just before waiting) is kept pending rather
 * than lost.
 */
static void
arm_go_signal(void)
{
	struct sigaction sa;
	sigset_t	block;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_go_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGUSR1, &sa, NULL);
	sigemptyset(&block);
	sigaddset(&block, SIGUSR1);
	sigprocmask(SIG_BLOCK, &block, &go_unblocked);
	sigdelset(&go_unblocked, SIGUSR1);
}

/*
 * Block until the driver sends SIGUSR1, then get ready for the next one.
 */
static void
wait_for_go(void)
{
	while (!go_received)
		sigsuspend(&go_unblocked);
	go_received = 0;
}

/*
 * Say we are connected (the driver reads our backend pid from this line)
 * and, with --gate, wait for the driver's signal to ask for the lock.
 */
static void
wait_at_gate(PGconn *conn)
{
	report("ready", "backend pid %d; will ask for '%s'", PQbackendPID(conn),
		   opts.lock_name);
	if (opts.gate)
		wait_for_go();
}

/*
 * Tell who holds the run when our try was refused: fencing.locks names the
 * holder's pid and token.  The holder appears in the view a moment after
 * its lock is granted, so look a few times.  Purely informative: errors
 * are ignored.
 */
static void
report_busy(PGconn *conn, const char *at)
{
	const char *params[1] = {opts.lock_name};
	PGresult   *res = NULL;
	int			attempt;

	for (attempt = 0; attempt < 5; attempt++)
	{
		if (attempt > 0)
			sleep_ms(10);
		PQclear(res);
		res = PQexecParams(conn,
						   "SELECT pid, token FROM fencing.locks"
						   " WHERE key = fencing.lock_key($1) AND granted LIMIT 1",
						   1, NULL, params, NULL, NULL, 0);
		if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1)
			break;
	}
	if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1)
		report_at(at, "busy", "'%s' is busy: held by backend %s with token %s; not billing",
				  opts.lock_name, PQgetvalue(res, 0, 0), PQgetvalue(res, 0, 1));
	else
		report_at(at, "busy", "'%s' is busy: another pod holds the run; not billing",
				  opts.lock_name);
	PQclear(res);
}

/*
 * Take the lock (or lease) in the open transaction.  Returns 1 when granted
 * and stores the fence token, 0 when another transaction holds it.
 *
 * "at" receives a server-side time for the timeline: for a grant, the
 * "since" of our row in fencing.locks, which is no later than the grant, so
 * a winner that is scheduled late (say, while its backend flushes a token
 * reservation) still shows before the pods that found its lock busy; for a
 * refusal, the server's clock just after the attempt.
 */
static int
take_lock(PGconn *conn, char *at, size_t at_len)
{
	const char *params[2] = {opts.lock_name, opts.lease_ttl};
	char		sql[512];
	PGresult   *res;

	snprintf(sql, sizeof(sql),
			 "SELECT t.token,"
			 " (extract(epoch FROM coalesce("
			 "   (SELECT l.since FROM fencing.locks l"
			 "     WHERE t.token IS NOT NULL AND l.granted"
			 "       AND l.pid = pg_backend_pid() AND l.key = fencing.lock_key($1)),"
			 "   clock_timestamp())) * 1000000)::bigint"
			 " FROM %s AS t(token)",
			 opts.lease_ttl ? "fencing.lease($1, $2::interval)" : "fencing.try_lock($1)");
	res = exec_or_die(conn, sql, opts.lease_ttl ? 2 : 1, params, PGRES_TUPLES_OK);
	snprintf(at, at_len, "%s", PQgetvalue(res, 0, 1));
	if (PQgetisnull(res, 0, 0))
	{
		PQclear(res);
		return 0;
	}
	snprintf(token, sizeof(token), "%s", PQgetvalue(res, 0, 0));
	PQclear(res);
	return 1;
}

/*
 * The check before each side effect: does this transaction still hold the
 * lock, with our token?  Returns 1 if so.  (It also renews a lease, since
 * any statement resets the idle-in-transaction timer.)
 */
static int
still_holder(PGconn *conn, PGresult **failed)
{
	const char *params[1] = {opts.lock_name};
	PGresult   *res;
	int			ok;

	res = PQexecParams(conn, "SELECT fencing.held_token($1)",
					   1, NULL, params, NULL, NULL, 0);
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
	{
		*failed = res;
		return 0;
	}
	ok = !PQgetisnull(res, 0, 0) && strcmp(PQgetvalue(res, 0, 0), token) == 0;
	PQclear(res);
	*failed = NULL;
	return ok;
}

/*
 * Run a check that takes the lock's name and our token ($1, $2): NULL when
 * it passed, else the failed result for the caller to classify.
 */
static PGresult *
call_with_token(PGconn *conn, const char *sql)
{
	const char *params[2] = {opts.lock_name, token};
	PGresult   *res;

	res = PQexecParams(conn, sql, 2, NULL, params, NULL, NULL, 0);
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
		return res;
	PQclear(res);
	return NULL;
}

/*
 * The run's fence, first in every transaction that writes for the run:
 * fencing.check_fence(lock name, token) raises the watermark of the run's
 * resource (the lock's name, normalised like the lock) to our token, and
 * keeps its row locked until this transaction ends.  If a newer holder has
 * raised it, it fails with SQLSTATE FN001 before we write anything, also to
 * customers that holder has not reached yet (their rows carry no newer
 * fence).  If a newer holder's transaction is still open, it waits for it.
 * Returns NULL when the check passed, else the failed result.
 */
static PGresult *
check_run_fence(PGconn *conn)
{
	return call_with_token(conn, "SELECT fencing.check_fence($1, $2::bigint)");
}

/*
 * Bill one customer: raise the balance, stamp the row's fence with our
 * token and write the invoice line, in one statement.  The fence trigger on
 * billing.accounts rejects the statement if a newer token already billed
 * the row; the invoice line, in the same statement, goes with it.
 * Returns the result for the caller to classify.
 */
static PGresult *
bill_customer(PGconn *conn, const Customer *c, char *amount, size_t amount_len)
{
	const char *params[4] = {token, c->id, opts.period, opts.worker};
	PGresult   *res;

	res = PQexecParams(conn,
					   "WITH billed AS ("
					   "  UPDATE billing.accounts"
					   "     SET balance = balance + monthly_fee, fence = $1::bigint"
					   "   WHERE customer_id = $2::int"
					   "  RETURNING customer_id, monthly_fee)"
					   " INSERT INTO billing.invoices (customer_id, period, amount, token, worker)"
					   " SELECT customer_id, $3, monthly_fee, $1::bigint, $4 FROM billed"
					   " RETURNING amount",
					   4, NULL, params, NULL, NULL, 0);
	if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1)
		snprintf(amount, amount_len, "%s", PQgetvalue(res, 0, 0));
	return res;
}

/*
 * Classify a failed statement: SQLSTATE FN001 means a newer holder has
 * passed the fence ("fence" names which one the statement checked), and
 * FN004 that the lease is lost, so this pod must stop and never retry; a
 * dead connection means the session (and with it the lock) is gone.  Returns the exit status the worker should end
 * with, or -1 if the connection is lost and the caller may decide what to do.
 */
static int
classify_failure(PGconn *conn, PGresult *res, const char *fence)
{
	const char *sqlstate = PQresultErrorField(res, PG_DIAG_SQLSTATE);
	char		buf[512];

	if (sqlstate && strcmp(sqlstate, LEASE_LOST_SQLSTATE) == 0)
	{
		const char *detail = PQresultErrorField(res, PG_DIAG_MESSAGE_DETAIL);

		report("fn004", "use_lease REJECTED, SQLSTATE %s: %s%s%s",
			   sqlstate, PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY),
			   detail ? " | DETAIL: " : "", detail ? detail : "");
		return EXIT_LEASE_LOST;
	}
	if (sqlstate && strcmp(sqlstate, STALE_SQLSTATE) == 0)
	{
		const char *detail = PQresultErrorField(res, PG_DIAG_MESSAGE_DETAIL);
		const char *hint = PQresultErrorField(res, PG_DIAG_MESSAGE_HINT);

		report("rejected", "REJECTED by %s, SQLSTATE %s: %s%s%s%s%s",
			   fence, sqlstate,
			   PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY),
			   detail ? " | DETAIL: " : "", detail ? detail : "",
			   hint ? " | HINT: " : "", hint ? hint : "");
		return EXIT_STALE;
	}
	if (PQstatus(conn) == CONNECTION_BAD)
	{
		report("lost", "its session is gone: %s",
			   first_line(PQerrorMessage(conn), buf, sizeof(buf)));
		return -1;
	}
	report("error", "SQLSTATE %s: %s", sqlstate ? sqlstate : "?",
		   first_line(PQresultErrorMessage(res), buf, sizeof(buf)));
	return EXIT_FAILED;
}

/*
 * Play the paused pod after its session was ended: reconnect and carry on
 * with the pending bill, the first customer it has not billed, with the
 * token it still has, without taking the lock again (it believes it holds
 * it; the server rolled back what it had billed, which it does not know
 * either).  It does check the run's fence first, as every transaction that
 * writes for the run must: that check is what must stop it.
 */
static int
resume_naively(void)
{
	PGconn	   *conn = connect_worker();
	PGresult   *res;
	const char *fence;
	int			first = 0;
	int			i;

	while (first < ncustomers && customers[first].billed)
		first++;
	if (first == ncustomers)
	{
		report("stop", "nothing left to bill");
		PQfinish(conn);
		return EXIT_LOST;
	}
	report("resume", "reconnected as backend %d; resumes its pending bill (%s) with its old token",
		   PQbackendPID(conn), customers[first].name);
	PQclear(exec_or_die(conn, "BEGIN", 0, NULL, PGRES_COMMAND_OK));
	report("check", "fencing.check_fence('%s', %s) before writing ...", opts.lock_name, token);
	res = check_run_fence(conn);
	fence = RUN_FENCE;
	for (i = first; res == NULL && i < ncustomers; i++)
	{
		char		amount[32] = "";

		fence = ROW_FENCE;
		res = bill_customer(conn, &customers[i], amount, sizeof(amount));
		if (PQresultStatus(res) != PGRES_TUPLES_OK)
			break;
		report("bill", "billed %s %s (fence = own token) -- the fence let a stale write through!",
			   customers[i].name, amount);
		PQclear(res);
		res = NULL;
	}
	if (res != NULL)
	{
		int			status = classify_failure(conn, res, fence);

		PQclear(res);
		PQclear(PQexec(conn, "ROLLBACK"));
		PQfinish(conn);
		if (status == EXIT_STALE)
			report("stop", "stops: a newer holder exists; no retry, nothing of its bill was written");
		return status < 0 ? EXIT_LOST : status;
	}
	PQclear(exec_or_die(conn, "COMMIT", 0, NULL, PGRES_COMMAND_OK));
	report("commit", "COMMIT of a stale bill: customers are billed twice");
	PQfinish(conn);
	return EXIT_BILLED;
}

/*
 * A statement of the billing run failed: a stale fence or another known
 * outcome ends the worker with its exit status; a lost connection ends it
 * as lost, or, for the demo's paused pod, reconnects and tries its pending
 * bill with the old token as a stale pod would.
 */
static int
end_after_failure(PGconn *conn, PGresult *res, const char *fence)
{
	int			status = classify_failure(conn, res, fence);

	PQclear(res);
	if (status >= 0)
		return status;
	return opts.naive_resume ? resume_naively() : EXIT_LOST;
}

/*
 * Bill every customer under the lock: the run's fence first, then the lock
 * checked before each side effect; commit.
 */
static int
run_billing(PGconn *conn)
{
	PGresult   *res;
	int			i;

	res = check_run_fence(conn);
	if (res != NULL)
		return end_after_failure(conn, res, RUN_FENCE);
	report("check", "fencing.check_fence('%s', token) ok: the run's fence is now this token; older holders are refused from here on",
		   opts.lock_name);

	for (i = 0; i < ncustomers; i++)
	{
		char		amount[32] = "";
		PGresult   *failed;

		if (i > 0 && opts.step_ms > 0)
			sleep_ms(opts.step_ms);

		if (!still_holder(conn, &failed))
		{
			if (failed == NULL)
			{
				report("stop", "fencing.held_token no longer returns its token: stops");
				return EXIT_LOST;
			}
			return end_after_failure(conn, failed, ROW_FENCE);
		}

		res = bill_customer(conn, &customers[i], amount, sizeof(amount));
		if (PQresultStatus(res) != PGRES_TUPLES_OK)
			return end_after_failure(conn, res, ROW_FENCE);
		PQclear(res);
		customers[i].billed = 1;
		report("bill", "held_token ok; billed %s %s with fence = token: accepted, no newer token on the row (uncommitted)",
			   customers[i].name, amount);
		if (i + 1 == opts.hold_after && i + 1 < ncustomers)
		{
			report("hold", "holds after %d of %d customers, its transaction open, until SIGUSR1",
				   i + 1, ncustomers);
			wait_for_go();
		}
	}

	if (opts.step_ms > 0)
		sleep_ms(opts.step_ms);
	res = PQexec(conn, "COMMIT");
	if (PQresultStatus(res) != PGRES_COMMAND_OK)
		return end_after_failure(conn, res, ROW_FENCE);
	PQclear(res);
	report("commit", "COMMIT accepted: %d invoices; every account's fence is now this token",
		   ncustomers);
	return EXIT_BILLED;
}

/*
 * Take the run with a lease that outlives this pod's transactions:
 * fencing.acquire_lease outside any transaction, waiting up to --wait for a
 * holder to release it or let it lapse (the server wakes the waiter; it
 * does not poll).  Returns 1 and stores the token when granted, 0 when the
 * run stayed busy.  "at" gets the server's clock just after the call.
 */
static int
acquire_run_lease(PGconn *conn, char *at, size_t at_len)
{
	const char *params[4] = {opts.lock_name, opts.lease_ttl, opts.wait, opts.worker};
	PGresult   *res;
	int			granted;

	res = exec_or_die(conn,
					  "SELECT t.token, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint"
					  " FROM fencing.acquire_lease($1, $2::interval, $3::interval, $4) AS t(token)",
					  4, params, PGRES_TUPLES_OK);
	snprintf(at, at_len, "%s", PQgetvalue(res, 0, 1));
	granted = !PQgetisnull(res, 0, 0);
	if (granted)
		snprintf(token, sizeof(token), "%s", PQgetvalue(res, 0, 0));
	PQclear(res);
	return granted;
}

/*
 * The first statement of every batch: fencing.use_lease(name, token).  It
 * fails with FN004 when the lease is lost (lapsed, taken over, released);
 * otherwise it renews the lease, raises the run's fence to our token (FN001
 * if a newer holder raised it) and sets fencing.token for the transaction.
 * Returns NULL when it passed, else the failed result.
 */
static PGresult *
use_run_lease(PGconn *conn)
{
	return call_with_token(conn, "SELECT fencing.use_lease($1, $2::bigint)");
}

/*
 * The next customers the ledger shows unbilled for the period, at most
 * --batch of them, in order.  Read after use_lease, in the batch's own
 * transaction, so the batches an earlier holder committed are seen and not
 * billed again.  Returns how many, or -1 with the failed result.
 */
static int
next_batch(PGconn *conn, Customer *batch, PGresult **failed)
{
	char		limit[16];
	const char *params[2] = {opts.period, limit};
	PGresult   *res;
	int			i;

	snprintf(limit, sizeof(limit), "%d", opts.batch);
	res = PQexecParams(conn,
					   "SELECT a.customer_id, a.name FROM billing.accounts a"
					   " WHERE NOT EXISTS (SELECT FROM billing.invoices i"
					   "                    WHERE i.customer_id = a.customer_id AND i.period = $1)"
					   " ORDER BY a.customer_id LIMIT $2::int",
					   2, NULL, params, NULL, NULL, 0);
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
	{
		*failed = res;
		return -1;
	}
	for (i = 0; i < PQntuples(res) && i < opts.batch && i < MAX_CUSTOMERS; i++)
	{
		snprintf(batch[i].id, sizeof(batch[i].id), "%s", PQgetvalue(res, i, 0));
		snprintf(batch[i].name, sizeof(batch[i].name), "%s", PQgetvalue(res, i, 1));
	}
	PQclear(res);
	return i;
}

/*
 * The run is done: give the lease back, so the next run need not wait for
 * the ttl.  release_lease frees only the lease held with our token.
 */
static int
release_run_lease(PGconn *conn)
{
	const char *params[2] = {opts.lock_name, token};
	PGresult   *res;

	res = exec_or_die(conn, "SELECT fencing.release_lease($1, $2::bigint)",
					  2, params, PGRES_TUPLES_OK);
	report("release", "fencing.release_lease('%s', token) = %s: the run is done, the next one may start at once",
		   opts.lock_name, strcmp(PQgetvalue(res, 0, 0), "t") == 0 ? "true" : "false");
	PQclear(res);
	return EXIT_BILLED;
}

/*
 * Bill one batch in its own transaction: use_lease, the next unbilled
 * customers, their bills, COMMIT.  Returns -1 after a committed batch,
 * EXIT_BILLED when nothing was left to bill, or the exit status the worker
 * must end with (FN004: stop at once; FN001; a lost session).
 */
static int
bill_one_batch(PGconn *conn, int number)
{
	Customer	batch[MAX_CUSTOMERS];
	char		names[512] = "";
	PGresult   *res;
	int			n;
	int			i;

	PQclear(exec_or_die(conn, "BEGIN", 0, NULL, PGRES_COMMAND_OK));
	res = use_run_lease(conn);
	if (res != NULL)
	{
		int			status = classify_failure(conn, res, RUN_FENCE_LEASE);

		PQclear(res);
		PQclear(PQexec(conn, "ROLLBACK"));
		if (status == EXIT_LEASE_LOST)
			report("stop", "stops at once: no retry, no reconnect; this batch wrote nothing");
		return status < 0 ? EXIT_LOST : status;
	}
	n = next_batch(conn, batch, &res);
	if (n < 0)
		return end_after_failure(conn, res, ROW_FENCE);
	if (n == 0)
	{
		PQclear(exec_or_die(conn, "COMMIT", 0, NULL, PGRES_COMMAND_OK));
		report("check", "batch %d: fencing.use_lease ok; nothing left to bill", number);
		return release_run_lease(conn);
	}
	report("check", "batch %d: BEGIN; fencing.use_lease('%s', token) ok: lease renewed for %s, the run's fence is this token; next unbilled: %s",
		   number, opts.lock_name, opts.lease_ttl, batch[0].name);
	for (i = 0; i < n; i++)
	{
		char		amount[32] = "";

		res = bill_customer(conn, &batch[i], amount, sizeof(amount));
		if (PQresultStatus(res) != PGRES_TUPLES_OK)
			return end_after_failure(conn, res, ROW_FENCE);
		PQclear(res);
		report("bill", "billed %s %s with fence = token (uncommitted)", batch[i].name, amount);
		snprintf(names + strlen(names), sizeof(names) - strlen(names), "%s%s",
				 i > 0 ? ", " : "", batch[i].name);
	}
	res = PQexec(conn, "COMMIT");
	if (PQresultStatus(res) != PGRES_COMMAND_OK)
		return end_after_failure(conn, res, ROW_FENCE);
	PQclear(res);
	report("commit", "COMMIT of batch %d (%s); the lease stays held after the commit", number, names);
	return -1;
}

/*
 * The job on a lease: batch after batch, each its own transaction, the
 * lease renewed by each batch's use_lease (a batch every --step-ms, well
 * within a third of the ttl).
 */
static int
run_batches(PGconn *conn)
{
	int			number;

	for (number = 1;; number++)
	{
		int			status;

		if (number > 1 && opts.step_ms > 0)
			sleep_ms(opts.step_ms);
		status = bill_one_batch(conn, number);
		if (status >= 0)
			return status;
		if (number == opts.hold_after)
		{
			report("hold", "holds after batch %d, between transactions, until SIGUSR1", number);
			wait_for_go();
		}
	}
}

/*
 * The job on a lease, from acquire_lease to the last batch.
 */
static int
run_on_lease(PGconn *conn)
{
	char		at[32];
	int			status;

	if (opts.wait)
		report("wait", "fencing.acquire_lease('%s', '%s', timeout => '%s') waits for the run (asleep until the lease is released or lapses; no polling)",
			   opts.lock_name, opts.lease_ttl, opts.wait);
	if (!acquire_run_lease(conn, at, sizeof(at)))
	{
		report_at(at, "busy", "'%s' is busy: another pod holds the run's lease; not billing",
				  opts.lock_name);
		PQfinish(conn);
		return EXIT_BUSY;
	}
	report_at(at, "got", "fencing.acquire_lease('%s', '%s', holder => '%s') granted: token %s, held by the server across this pod's transactions",
			  opts.lock_name, opts.lease_ttl, opts.worker, token);
	status = run_batches(conn);
	PQfinish(conn);
	return status;
}

/*
 * Explain the command line.
 */
static void
usage(const char *progname)
{
	fprintf(stderr,
			"usage: %s --worker LABEL --lock NAME [--period P] [--lease TTL]\n"
			"          [--step-ms N] [--gate] [--hold-after N] [--naive-resume]\n"
			"          [--batch N [--wait TIMEOUT]] [--dsn CONNINFO]\n",
			progname);
	exit(EXIT_FAILED);
}

/*
 * Parse options, connect, take the lock and bill.
 */
int
main(int argc, char **argv)
{
	static const struct option long_options[] = {
		{"worker", required_argument, NULL, 'w'},
		{"lock", required_argument, NULL, 'l'},
		{"period", required_argument, NULL, 'p'},
		{"lease", required_argument, NULL, 't'},
		{"step-ms", required_argument, NULL, 's'},
		{"gate", no_argument, NULL, 'g'},
		{"hold-after", required_argument, NULL, 'h'},
		{"naive-resume", no_argument, NULL, 'n'},
		{"dsn", required_argument, NULL, 'd'},
		{"batch", required_argument, NULL, 'b'},
		{"wait", required_argument, NULL, 'a'},
		{NULL, 0, NULL, 0}
	};
	PGconn	   *conn;
	char		at[32];
	int			c;
	int			status;

	opts.worker = "worker";
	opts.period = "2026-10";
	while ((c = getopt_long(argc, argv, "", long_options, NULL)) != -1)
	{
		switch (c)
		{
			case 'w':
				opts.worker = optarg;
				break;
			case 'l':
				opts.lock_name = optarg;
				break;
			case 'p':
				opts.period = optarg;
				break;
			case 't':
				opts.lease_ttl = optarg;
				break;
			case 's':
				opts.step_ms = atoi(optarg);
				break;
			case 'g':
				opts.gate = 1;
				break;
			case 'h':
				opts.hold_after = atoi(optarg);
				break;
			case 'n':
				opts.naive_resume = 1;
				break;
			case 'd':
				opts.dsn = optarg;
				break;
			case 'b':
				opts.batch = atoi(optarg);
				break;
			case 'a':
				opts.wait = optarg;
				break;
			default:
				usage(argv[0]);
		}
	}
	if (opts.lock_name == NULL || optind != argc ||
		(opts.batch != 0 && (opts.batch < 1 || opts.lease_ttl == NULL)))
		usage(argv[0]);

	arm_go_signal();
	conn = connect_worker();
	load_customers(conn);
	wait_at_gate(conn);
	if (opts.batch > 0)
		return run_on_lease(conn);

	PQclear(exec_or_die(conn, "BEGIN", 0, NULL, PGRES_COMMAND_OK));
	if (!take_lock(conn, at, sizeof(at)))
	{
		report_busy(conn, at);
		PQclear(exec_or_die(conn, "ROLLBACK", 0, NULL, PGRES_COMMAND_OK));
		PQfinish(conn);
		return EXIT_BUSY;
	}
	if (opts.lease_ttl)
		report_at(at, "got", "fencing.lease('%s', '%s') granted: token %s", opts.lock_name,
				  opts.lease_ttl, token);
	else
		report_at(at, "got", "fencing.try_lock('%s') granted: token %s", opts.lock_name,
				  token);

	status = run_billing(conn);
	PQfinish(conn);
	return status;
}
