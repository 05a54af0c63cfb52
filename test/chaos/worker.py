#!/usr/bin/python3
"""
test/chaos/worker.py -- one worker of the chaos test (a real process).

It runs the invoice job of examples/ and the README's pattern, against
whichever node is primary (libpq multi-host, target_session_attrs=
read-write), in a loop until SIGTERM:

  invoice run   one transaction: fencing.lease('invoice-run:<month>', ttl);
                fencing.check_fence on the same name; if the month has no
                run yet, for every customer: fencing.held_token (stop when
                NULL), then the account's balance and fence (= token), the
                ledger row (fence = token) and the invoice in one statement;
                the run's row; COMMIT.  A lost session or FN001 ends the
                attempt: the worker never carries on with that token.

  statement     the holder pattern that spans transactions: one short
  sweep         transaction claims "statements:<k>" (lease + check_fence)
                and commits, which ends the lock; the token is then carried
                into later transactions, one per batch of customers, each
                writing billing.statements with SET LOCAL fencing.token.
                Nothing but the rows' fences protects those batches: when a
                newer claimer has written a row, the old holder's batch
                fails with FN001 and the sweep stops.  A lost connection
                does not end the sweep (the token, not the session, is the
                holder's identity): it reconnects and goes on.

With --job lease the worker runs the lease-holding batch job instead:

  lease run     fencing.acquire_lease('batch-job:<k>', ttl, timeout,
                holder => the worker's name), outside any transaction; a
                thread renews the lease every ttl/3 on a connection of its
                own (fencing.renew_lease); then batch after batch, each one
                transaction that starts with fencing.use_lease (which renews
                the lease, raises the job's resource fence to the token and
                sets fencing.token, so the fence trigger stamps every row)
                and upserts a few of the job's rows (billing.job_rows, in
                an order of the run's own).  The run ends
                when use_lease or a renewal raises FN004 (or FN001, 25P03,
                25P04, 57P01, any error), when either connection is lost or
                silent (never reconnect and carry on with the token), or
                after its last batch (release_lease); the next run acquires
                the lease again, with a new token.  A run that lost its
                connection releases its token once it has a new one (a
                release frees nothing that is not held with that token).

Every transaction also inserts its attempt id into chaos.commits, and
reads back the chaos.audit rows its writes produced before it commits.

Each event is one JSON line in the worker's log: attempts, grants (token,
node, timeline), refusals, acknowledged commits (token, node, timeline, WAL
positions around the commit, the audit rows), failures with their SQLSTATE,
and stale writes rejected.  Times: "mono" is CLOCK_MONOTONIC read with a
raw system call, so that it is the machine's true clock even in the worker
that runs with libfaketime (which fakes the libc calls), and comparable
between processes; "wall" is time.time(), which is what the faked worker
believes.
"""

import argparse
import ctypes
import json
import os
import random
import signal
import socket
import sys
import threading
import time

import psycopg

STALE = "FN001"
LEASE_LOST = "FN004"

_libc = ctypes.CDLL(None, use_errno=True)


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


_libc.syscall.argtypes = [ctypes.c_long, ctypes.c_int, ctypes.POINTER(_Timespec)]
_SYS_CLOCK_GETTIME = 228        # x86_64
_CLOCK_MONOTONIC = 1


def true_mono():
    """CLOCK_MONOTONIC from the kernel, bypassing libc (and libfaketime)."""
    ts = _Timespec()
    if _libc.syscall(_SYS_CLOCK_GETTIME, _CLOCK_MONOTONIC, ctypes.byref(ts)) != 0:
        return time.monotonic()
    return ts.tv_sec + ts.tv_nsec / 1e9


class Stop(Exception):
    pass


class ClientTimeout(psycopg.OperationalError):
    """No answer within the worker's client-side timeout: the connection
    is given up, as a driver's socket timeout would."""


def _on_alarm(signo, frame):
    raise ClientTimeout("no answer from the server within the client timeout")


class Attempt:
    """One transaction a worker tries: its id (in chaos.commits and the
    audit trail), what it is for, the token it writes with, where it runs,
    and how far it got (the phase a failure is logged with)."""

    def __init__(self, attempt_id, kind, token=None):
        self.id = attempt_id
        self.kind = kind
        self.token = token
        self.node = None
        self.tl = None
        self.phase = "begin"
        self.began = None


class Renewer(threading.Thread):
    """The lease's heartbeat: fencing.renew_lease every ttl/3 on a
    connection of its own, from the start of a run to its end.  The first
    failure (FN004, any error, the connection lost, or, with the worker's
    client timeout, a server silent for that long) ends the heartbeat and
    sets lost = (sqlstate, message): the run stops before its next batch.
    It never reconnects: a run whose renewals fail is over."""

    def __init__(self, worker, run, name):
        super().__init__(name="renewer-" + run.id, daemon=True)
        self.w = worker
        self.run_id = run.id
        self.token = run.token
        self.name_ = name
        self.halt = threading.Event()
        self.lost = None
        self.renewals = 0
        self.conn = None
        self.cut = False

    def finish(self):
        """Stop the heartbeat; a renewal still waiting for a silent server
        is left to its daemon thread (its token is the ended run's)."""
        self.halt.set()
        if self.is_alive():
            self.join(2 * self.w.args.lease_ttl)

    def cut_connection(self):
        """The client timeout: shut the socket down under the statement
        that waits (closing the connection from this thread would free it
        under the other)."""
        self.cut = True
        try:
            s = socket.socket(fileno=os.dup(self.conn.pgconn.socket))
            s.shutdown(socket.SHUT_RDWR)
            s.close()
        except (OSError, psycopg.Error):
            pass

    def call(self, sql, params=None):
        timer = None
        if self.w.args.client_timeout:
            timer = threading.Timer(self.w.args.client_timeout, self.cut_connection)
            timer.daemon = True
            timer.start()
        try:
            return self.conn.execute(sql, params).fetchone()
        finally:
            if timer is not None:
                timer.cancel()

    def give_up(self, sqlstate, msg, sent):
        self.lost = (sqlstate, msg)
        self.w.emit("renew_failed", kind="lease", attempt=self.run_id, name=self.name_,
                    token=self.token, sqlstate=sqlstate, msg=msg, sent=sent, recv=true_mono())

    def run(self):
        interval = self.w.args.lease_ttl / 3.0
        sent = true_mono()
        try:
            self.conn = psycopg.connect(self.w.args.dsn, autocommit=True)
        except psycopg.Error as e:
            # every host's answer: the first line is only the first host's
            self.give_up(getattr(e, "sqlstate", None),
                         "renewer cannot connect: " + " | ".join(str(e).split("\n")), sent)
            return
        try:
            while not self.halt.wait(interval):
                sent = true_mono()
                try:
                    row = self.call("SELECT fencing.renew_lease(%s, %s)::text, inet_server_addr()::text,"
                                    " pg_walfile_name(pg_current_wal_lsn())", (self.name_, self.token))
                except psycopg.Error as e:
                    msg = first_line(e)
                    if self.cut:
                        msg = "no answer within the client timeout: " + msg
                    self.give_up(getattr(e, "sqlstate", None), msg, sent)
                    return
                self.renewals += 1
                self.w.emit("renew", kind="lease", attempt=self.run_id, name=self.name_, token=self.token,
                            node=row[1].split("/")[0], tl=int(row[2][:8], 16), expires=row[0],
                            sent=sent, recv=true_mono())
        finally:
            try:
                self.conn.close()
            except Exception:
                pass


class Worker:
    def __init__(self, args):
        self.args = args
        self.name = args.name
        self.rng = random.Random("%s/%s" % (args.seed, args.name))
        self.fd = os.open(args.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.conn = None
        self.node = None
        self.seq = 0
        self.stopping = False
        self.customers = []
        self.warnings = []
        self.timed_out = False
        self.left_over = None
        self.batch_at = None
        signal.signal(signal.SIGTERM, self._on_term)
        signal.signal(signal.SIGALRM, _on_alarm)

    def _on_term(self, signo, frame):
        self.stopping = True

    # --- the log -------------------------------------------------------------

    def emit(self, ev, **fields):
        fields["ev"] = ev
        fields["w"] = self.name
        fields.setdefault("mono", true_mono())
        fields["wall"] = time.time()
        os.write(self.fd, (json.dumps(fields, separators=(",", ":")) + "\n").encode())

    def next_attempt(self, kind):
        self.seq += 1
        return "%s-%s%d" % (self.name, kind, self.seq)

    # --- the connection -------------------------------------------------------

    def _notice(self, diag):
        if diag.severity_nonlocalized in ("WARNING", "ERROR"):
            self.warnings.append("%s %s: %s" % (diag.severity_nonlocalized, diag.sqlstate,
                                                diag.message_primary))

    def connect(self):
        backoff = 0.2
        while not self.stopping:
            t = true_mono()
            try:
                conn = psycopg.connect(self.args.dsn, autocommit=True)
                conn.add_notice_handler(self._notice)
                node = conn.execute("SELECT inet_server_addr()::text, pg_backend_pid()").fetchone()
                self.conn = conn
                self.node = node[0].split("/")[0]
                self.emit("connect", node=self.node, pid=node[1], sent=t)
                return
            except psycopg.Error as e:
                self.emit("connect_failed", msg=first_line(e), sent=t)
                time.sleep(backoff)
                backoff = min(backoff * 2, 2.0)
        raise Stop()

    def drop(self):
        self.timed_out = False
        if self.conn is not None:
            try:
                self.conn.close()
            except Exception:
                pass
        self.conn = None

    def q(self, sql, params=None):
        """One statement; with --client-timeout, given up (ClientTimeout)
        when the server does not answer in time: a paused server's kernel
        keeps the connection open, so only the client's own clock can."""
        if not self.args.client_timeout:
            return self.conn.execute(sql, params)
        signal.setitimer(signal.ITIMER_REAL, self.args.client_timeout)
        try:
            return self.conn.execute(sql, params)
        except ClientTimeout:
            self.timed_out = True
            raise
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)

    def rollback(self):
        try:
            if self.conn is not None and not self.conn.closed:
                self.conn.execute("ROLLBACK")
        except psycopg.Error:
            self.drop()

    def broken(self):
        return self.conn is None or self.conn.closed or self.conn.broken or self.timed_out

    def sleep(self, seconds):
        end = true_mono() + seconds
        while not self.stopping:
            left = end - true_mono()
            if left <= 0:
                return
            time.sleep(min(left, 0.2))

    # --- pieces shared by every transaction ---------------------------------------

    def begin(self, at):
        """BEGIN the attempt's transaction, labelled for the audit trigger;
        with the attempt's token already known (a sweep's batch), as
        fencing.token for this transaction only."""
        at.phase = "begin"
        at.began = true_mono()
        self.q("BEGIN")
        self.q("SELECT set_config('chaos.attempt', %s, true)", (at.id,))
        if at.token is not None:
            # literally SET LOCAL: the value counts for this transaction only
            self.q("SET LOCAL fencing.token = %d" % int(at.token))
            row = self.q("SELECT inet_server_addr()::text, pg_walfile_name(pg_current_wal_lsn())"
                         ).fetchone()
            at.node, at.tl = row[0].split("/")[0], int(row[1][:8], 16)

    def take(self, at, name):
        """BEGIN, fencing.lease(name) and fencing.check_fence(name) for the
        attempt.  False when the name is busy (the transaction is rolled
        back); raises when anything fails."""
        self.begin(at)
        at.phase = "lease"
        sent = true_mono()
        row = self.q("SELECT fencing.lease(%s, make_interval(secs => %s)),"
                     " inet_server_addr()::text, pg_walfile_name(pg_current_wal_lsn())",
                     (name, self.args.lease_ttl)).fetchone()
        recv = true_mono()
        at.node, at.tl = row[1].split("/")[0], int(row[2][:8], 16)
        if row[0] is None:
            self.emit("busy", kind=at.kind, attempt=at.id, name=name, node=at.node, tl=at.tl,
                      sent=sent, recv=recv)
            self.q("ROLLBACK")
            return False
        at.token = row[0]
        self.emit("grant", kind=at.kind, attempt=at.id, name=name, token=at.token, node=at.node,
                  tl=at.tl, sent=sent, recv=recv)
        at.phase = "check_fence"
        self.q("SELECT fencing.check_fence(%s, %s)", (name, at.token))
        return True

    def commit(self, at, **extra):
        """Mark the attempt, read back its audit rows, COMMIT, and log the
        acknowledgement.  Raises on any failure (the caller logs it)."""
        at.phase = "mark"
        lsn_lo = self.q("INSERT INTO chaos.commits (attempt, worker, kind, token, node)"
                        " VALUES (%s, %s, %s, %s, inet_server_addr())"
                        " RETURNING pg_current_wal_insert_lsn()::text",
                        (at.id, self.name, at.kind, at.token)).fetchone()[0]
        audit = self.q("SELECT tbl, row_key, op, old_fence, new_fence FROM chaos.audit"
                       " WHERE xid = pg_current_xact_id() ORDER BY audit_id").fetchall()
        self.warnings = []
        at.phase = "commit"
        sent = true_mono()
        self.emit("commit_sent", kind=at.kind, attempt=at.id, token=at.token, node=at.node,
                  tl=at.tl, lsn_lo=lsn_lo, audit=[list(a) for a in audit], sent=sent, **extra)
        status = self.q("COMMIT").statusmessage
        recv = true_mono()
        if status != "COMMIT":
            raise RuntimeError("COMMIT answered %s" % status)
        lsn_hi = None
        try:
            lsn_hi = self.q("SELECT pg_current_wal_insert_lsn()::text").fetchone()[0]
        except psycopg.Error:
            pass
        self.emit("ack", kind=at.kind, attempt=at.id, token=at.token, node=at.node, tl=at.tl,
                  lsn_lo=lsn_lo, lsn_hi=lsn_hi, sent=sent, recv=recv, began=at.began,
                  warnings=self.warnings, **extra)

    def failed(self, at, e):
        """Log a failed attempt and end its transaction.  Returns True when
        it was a stale write (FN001), after which the holder must stop."""
        sqlstate = getattr(e, "sqlstate", None)
        if sqlstate == STALE:
            self.emit("rejected", kind=at.kind, attempt=at.id, token=at.token, phase=at.phase,
                      sqlstate=sqlstate, msg=first_line(e), node=self.node)
        else:
            self.emit("fail", kind=at.kind, attempt=at.id, token=at.token, phase=at.phase,
                      sqlstate=sqlstate, msg=first_line(e), node=self.node,
                      outcome="unknown" if at.phase == "commit" else "aborted")
        if self.broken():
            self.drop()
        else:
            self.rollback()
        return sqlstate == STALE

    # --- the invoice run ---------------------------------------------------------------

    def bill_once(self):
        periods = [r[0] for r in self.q(
            "SELECT period FROM billing.periods p WHERE NOT EXISTS"
            " (SELECT FROM billing.runs r WHERE r.period = p.period)"
            " ORDER BY period LIMIT 4").fetchall()]
        if not periods:
            return self.sweep_once()
        period = self.rng.choice(periods)
        name = "invoice-run:%s" % period
        at = Attempt(self.next_attempt("b"), "bill")
        try:
            if not self.take(at, name):
                return
            if self.q("SELECT EXISTS (SELECT FROM billing.runs WHERE period = %s)",
                      (period,)).fetchone()[0]:
                self.emit("already_billed", attempt=at.id, period=period, token=at.token)
                self.q("ROLLBACK")
                return
            for cid in self.customers:
                at.phase = "bill"
                self.sleep(self.args.step_ms / 1000.0)
                if self.stopping:
                    raise Stop()
                held = self.q("SELECT fencing.held_token(%s)", (name,)).fetchone()[0]
                if held != at.token:
                    self.emit("lost_lock", attempt=at.id, token=at.token, held=held)
                    self.q("ROLLBACK")
                    return
                self.q("WITH acct AS ("
                       "  UPDATE billing.accounts a SET balance = a.balance + c.monthly_fee, fence = %(t)s"
                       "    FROM billing.customers c"
                       "   WHERE a.customer_id = c.customer_id AND a.customer_id = %(c)s"
                       "  RETURNING a.customer_id, c.monthly_fee),"
                       " led AS ("
                       "  INSERT INTO billing.ledger (customer_id, period, amount, token, fence, attempt)"
                       "  SELECT customer_id, %(p)s, monthly_fee, %(t)s, %(t)s, %(a)s FROM acct)"
                       " INSERT INTO billing.invoices (customer_id, period, amount, token, worker, attempt)"
                       " SELECT customer_id, %(p)s, monthly_fee, %(t)s, %(w)s, %(a)s FROM acct",
                       {"t": at.token, "c": cid, "p": period, "a": at.id, "w": self.name})
            at.phase = "run"
            self.q("INSERT INTO billing.runs (period, token, worker, attempt) VALUES (%s, %s, %s, %s)",
                   (period, at.token, self.name, at.id))
            self.commit(at, period=period)
        except Stop:
            self.rollback()
            raise
        except (psycopg.Error, RuntimeError) as e:
            self.failed(at, e)

    # --- the sweep: one token across many transactions ------------------------------------

    def sweep_once(self):
        sweep = self.rng.randint(1, self.args.sweeps)
        claim = Attempt(self.next_attempt("c"), "claim")
        try:
            if not self.take(claim, "statements:%d" % sweep):
                return
            self.commit(claim, sweep=sweep)
        except Stop:
            self.rollback()
            raise
        except (psycopg.Error, RuntimeError) as e:
            self.failed(claim, e)
            return

        order = list(self.customers)
        self.rng.shuffle(order)
        batch = self.args.batch
        for i in range(0, len(order), batch):
            self.sleep(self.rng.uniform(0.5, 1.5) * self.args.step_ms * 2 / 1000.0)
            if self.stopping:
                raise Stop()
            if self.broken():
                self.drop()
                self.connect()
            at = Attempt(self.next_attempt("s"), "batch", token=claim.token)
            try:
                self.begin(at)
                at.phase = "write"
                self.q("INSERT INTO billing.statements AS s (sweep, customer_id, generation, worker, attempt)"
                       " SELECT %(k)s, c, 1, %(w)s, %(a)s FROM unnest(%(ids)s::int[]) AS c"
                       " ON CONFLICT (sweep, customer_id) DO UPDATE"
                       " SET generation = s.generation + 1, worker = EXCLUDED.worker,"
                       "     attempt = EXCLUDED.attempt",
                       {"k": sweep, "w": self.name, "a": at.id, "ids": order[i:i + batch]})
                self.commit(at, sweep=sweep)
            except Stop:
                self.rollback()
                raise
            except (psycopg.Error, RuntimeError) as e:
                if self.failed(at, e):
                    return          # fenced out: a newer holder exists
                if at.phase != "commit" and self.conn is not None:
                    return          # an error that is not the connection's: give up

    # --- the lease job: one lease across many transactions, renewed from another connection ---

    def release_left_over(self):
        """After a run that lost its connection: release its token on the
        new one.  Safe whatever became of the lease: release_lease frees
        only a lease held with that very token, and the run is over."""
        if self.left_over is None:
            return
        run_id, name, token = self.left_over
        self.left_over = None
        sent = true_mono()
        try:
            released = self.q("SELECT fencing.release_lease(%s, %s)", (name, token)).fetchone()[0]
            self.emit("release", attempt=run_id, name=name, token=token, released=released,
                      after="a lost connection", node=self.node, sent=sent, recv=true_mono())
        except psycopg.Error as e:
            self.emit("error", msg=first_line(e), sqlstate=getattr(e, "sqlstate", None))
            if self.broken():
                self.drop()

    def acquire(self, run, name):
        """fencing.acquire_lease, waiting up to one ttl for the name; the
        token, or None when it stayed busy."""
        sent = true_mono()
        row = self.q("SELECT fencing.acquire_lease(%s, make_interval(secs => %s),"
                     " make_interval(secs => %s), %s),"
                     " inet_server_addr()::text, pg_walfile_name(pg_current_wal_lsn())",
                     (name, self.args.lease_ttl, self.args.lease_ttl, self.name)).fetchone()
        recv = true_mono()
        run.node, run.tl = row[1].split("/")[0], int(row[2][:8], 16)
        if row[0] is None:
            self.emit("busy", kind="lease", attempt=run.id, name=name, node=run.node, tl=run.tl,
                      sent=sent, recv=recv)
            return None
        self.emit("grant", kind="lease", attempt=run.id, name=name, token=row[0], node=run.node,
                  tl=run.tl, sent=sent, recv=recv)
        return row[0]

    def lease_batch(self, run, name, job, ids):
        """One batch transaction of a lease run: use_lease first, then the
        job's rows, the batch's row in chaos.lease_batches, COMMIT.  Raises
        on any failure."""
        at = Attempt(self.next_attempt("j"), "lease_batch")
        self.batch_at = at
        at.phase = "begin"
        at.began = true_mono()
        self.q("BEGIN")
        self.q("SELECT set_config('chaos.attempt', %s, true)", (at.id,))
        at.token = run.token
        sent = true_mono()
        if self.args.break_lease:
            at.phase = "set_token"
            self.q("SET LOCAL fencing.token = %d" % int(run.token))
            row = self.q("SELECT inet_server_addr()::text, pg_walfile_name(pg_current_wal_lsn())"
                         ).fetchone()
        else:
            at.phase = "use_lease"
            row = self.q("SELECT inet_server_addr()::text, pg_walfile_name(pg_current_wal_lsn()),"
                         " fencing.use_lease(%s, %s)", (name, run.token)).fetchone()
        at.node, at.tl = row[0].split("/")[0], int(row[1][:8], 16)
        used = true_mono()
        if not self.args.break_lease:
            self.emit("use", kind="lease_batch", attempt=at.id, run=run.id, name=name, token=run.token,
                      node=at.node, tl=at.tl, sent=sent, recv=used)
        at.phase = "write"
        self.q("INSERT INTO billing.job_rows AS j (job, item, generation, worker, attempt)"
               " SELECT %(k)s, i, 1, %(w)s, %(a)s FROM unnest(%(ids)s::int[]) AS i"
               " ON CONFLICT (job, item) DO UPDATE"
               " SET generation = j.generation + 1, worker = EXCLUDED.worker,"
               "     attempt = EXCLUDED.attempt",
               {"k": job, "w": self.name, "a": at.id, "ids": ids})
        self.q("INSERT INTO chaos.lease_batches (attempt, name, token, worker, resource_fence, token_setting)"
               " SELECT %(a)s, %(n)s, %(t)s, %(w)s,"
               "        (SELECT fence FROM fencing.resource_fences"
               "          WHERE resource = fencing.normalize_name(%(n)s)),"
               "        current_setting('fencing.token', true)",
               {"a": at.id, "n": name, "t": run.token, "w": self.name})
        self.commit(at, name=name, run=run.id, used=used)

    def lease_once(self):
        """One run of the lease job, from acquire_lease to its end."""
        self.release_left_over()
        job = self.rng.randint(1, self.args.jobs)
        name = "batch-job:%d" % job
        run = Attempt(self.next_attempt("L"), "lease")
        try:
            run.token = self.acquire(run, name)
        except psycopg.Error as e:
            # the lease may have been granted with a token nobody knows: it
            # lapses one ttl later
            self.emit("acquire_failed", kind="lease", attempt=run.id, name=name,
                      sqlstate=getattr(e, "sqlstate", None), msg=first_line(e), node=self.node)
            if self.broken():
                self.drop()
            self.sleep(0.2)
            return
        if run.token is None:
            self.sleep(self.rng.uniform(0.1, 0.5))
            return

        renewer = Renewer(self, run, name)
        order = list(range(1, self.args.job_items + 1))
        self.rng.shuffle(order)
        batches = self.rng.randint(max(1, self.args.lease_batches // 2), self.args.lease_batches)
        done = 0
        why = None
        try:
            renewer.start()
            for b in range(batches):
                self.sleep(self.rng.uniform(0.5, 1.5) * self.args.step_ms * 4 / 1000.0)
                if self.stopping:
                    raise Stop()
                if renewer.lost and not self.args.break_lease:
                    why = {"by": "renew", "sqlstate": renewer.lost[0], "msg": renewer.lost[1]}
                    break
                if self.broken():
                    why = {"by": "batch", "sqlstate": None, "msg": "connection lost"}
                    break
                i = (b * self.args.batch) % len(order)
                ids = (order + order)[i:i + self.args.batch]
                try:
                    self.lease_batch(run, name, job, ids)
                    done += 1
                except (psycopg.Error, RuntimeError) as e:
                    if self.failed(self.batch_at, e) and self.args.break_lease:
                        continue        # broken on purpose: a stale write does not stop it
                    why = {"by": self.batch_at.phase, "sqlstate": getattr(e, "sqlstate", None),
                           "msg": first_line(e)}
                    break
        except Stop:
            renewer.finish()
            self.rollback()
            raise
        renewer.finish()
        if why is None:
            why = {"by": "end", "sqlstate": None, "msg": "all batches done"}
        lost_conn = self.conn is None or self.broken()
        self.emit("lease_end", attempt=run.id, name=name, token=run.token, batches=done,
                  renewals=renewer.renewals, connection_lost=lost_conn, **why)
        if lost_conn:
            self.left_over = (run.id, name, run.token)
            return
        sent = true_mono()
        try:
            released = self.q("SELECT fencing.release_lease(%s, %s)", (name, run.token)).fetchone()[0]
            self.emit("release", attempt=run.id, name=name, token=run.token, released=released,
                      after=why["msg"], node=self.node, sent=sent, recv=true_mono())
        except psycopg.Error as e:
            self.emit("error", msg=first_line(e), sqlstate=getattr(e, "sqlstate", None))
            if self.broken():
                self.drop()
                self.left_over = (run.id, name, run.token)

    # --- main loop ---------------------------------------------------------------------------

    def run(self):
        self.emit("start", pid=os.getpid(), wall_offset=time.time() - time.clock_gettime(time.CLOCK_REALTIME))
        try:
            while not self.stopping:
                if self.broken():
                    self.drop()
                    self.connect()
                    if not self.customers:
                        self.customers = [r[0] for r in self.q(
                            "SELECT customer_id FROM billing.customers ORDER BY customer_id").fetchall()]
                try:
                    if self.args.job == "lease":
                        self.lease_once()
                    elif self.rng.random() < self.args.bill_share:
                        self.bill_once()
                    else:
                        self.sweep_once()
                except psycopg.Error as e:
                    # outside any attempt (the month list, a reconnect)
                    self.emit("error", msg=first_line(e), sqlstate=getattr(e, "sqlstate", None))
                    if self.broken():
                        self.drop()
                    else:
                        self.rollback()
                    self.sleep(0.2)
        except Stop:
            pass
        self.emit("exit")


def first_line(e):
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--name", required=True)
    p.add_argument("--dsn", required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--seed", default="1")
    p.add_argument("--lease-ttl", type=float, default=5.0)
    p.add_argument("--step-ms", type=int, default=60)
    p.add_argument("--sweeps", type=int, default=3)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--bill-share", type=float, default=0.5)
    p.add_argument("--job", default="invoice", choices=["invoice", "lease"])
    p.add_argument("--jobs", type=int, default=2, help="lease job: how many jobs (lease names)")
    p.add_argument("--job-items", type=int, default=64,
                   help="lease job: rows per job; a run writes --batch of them per batch")
    p.add_argument("--lease-batches", type=int, default=30,
                   help="lease job: batches per run, at most (each run draws 1/2 to all of them)")
    p.add_argument("--break-lease", action="store_true",
                   help="lease job, broken on purpose: batches skip use_lease (only SET LOCAL"
                        " fencing.token), and neither a failed renewal nor a batch rejected"
                        " with FN001 stops the run")
    p.add_argument("--client-timeout", type=float, default=0.0,
                   help="seconds without an answer after which the connection is given up (0: never)")
    args = p.parse_args()
    Worker(args).run()


if __name__ == "__main__":
    sys.exit(main())
