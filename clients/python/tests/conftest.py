# Copyright (c) 2026, the fencing developers
#
# conftest.py -- what pgfencing's tests share: the server and the PgBouncer
# that test/clients/run.sh started (PGHOST, PGPORT, PGDATABASE;
# FENCING_BOUNCER_PORT), names no other test uses, a protected table,
# worker processes that run tests/worker.py, a quiet database where VACUUM
# shows what an idle transaction holds back, and a proxy whose traffic can
# be stopped.

import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid

import psycopg
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


def conninfo(**overrides):
    """libpq keywords of the server (or, with port=..., of PgBouncer)."""
    info = {
        "host": os.environ["PGHOST"],
        "port": os.environ["PGPORT"],
        "dbname": os.environ["PGDATABASE"],
    }
    info.update(overrides)
    return " ".join(f"{k}={v}" for k, v in info.items())


def bouncer_conninfo():
    return conninfo(port=os.environ["FENCING_BOUNCER_PORT"])


def unique(prefix):
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def wait_for(condition, timeout, what):
    """Poll condition() until true; fail after timeout seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {timeout} s")
        time.sleep(0.05)


@pytest.fixture
def admin():
    """An autocommit connection for setup and for looking from outside."""
    with psycopg.connect(conninfo(), autocommit=True) as conn:
        yield conn


@pytest.fixture(scope="session")
def quiet_db():
    """A database of its own, with fencing and a table "churn" that
    autovacuum leaves alone: VACUUM's horizon for a table counts only the
    sessions of the table's database, and only the tests that watch it
    connect to this one.  Its name."""
    name = unique("quiet").replace("-", "_")
    with psycopg.connect(conninfo(), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    with psycopg.connect(conninfo(dbname=name), autocommit=True) as conn:
        conn.execute("CREATE EXTENSION fencing")
        conn.execute("CREATE TABLE churn (id int) WITH (autovacuum_enabled = off)")
    yield name
    with psycopg.connect(conninfo(), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE {name} WITH (FORCE)")


VACUUMED = re.compile(r"tuples: (\d+) removed, \d+ remain, (\d+) are dead but not yet removable")

# What an idle READ COMMITTED transaction holding a lock or a lease must hold
# back: nothing (DESIGN T5).
HOLDS_BACK_NOTHING = {"backend_xid": None, "backend_xmin": None,
                      "removed": 1, "dead but not yet removable": 0}


def held_back(db, pid):
    """What session pid, idle in its transaction, holds back, seen from db
    (an autocommit connection to the quiet database): its backend_xid and
    backend_xmin, and what VACUUM (VERBOSE) of churn does with a row deleted
    after the session's last statement."""
    wait_for(lambda: db.execute("SELECT state FROM pg_stat_activity WHERE pid = %s",
                                (pid,)).fetchone() == ("idle in transaction",),
             10, f"session {pid} idle in transaction")
    xid, xmin = db.execute("SELECT backend_xid, backend_xmin FROM pg_stat_activity WHERE pid = %s",
                           (pid,)).fetchone()
    db.execute("VACUUM churn")      # rows an earlier check left, deleted before pid's statement
    db.execute("INSERT INTO churn VALUES (1)")
    db.execute("DELETE FROM churn")
    said = []

    def hear(diag):
        said.append(diag.message_primary or "")

    db.add_notice_handler(hear)
    try:
        db.execute("VACUUM (VERBOSE) churn")
    finally:
        db.remove_notice_handler(hear)
    found = VACUUMED.search("\n".join(said))
    assert found, f"VACUUM (VERBOSE) said no tuple counts: {said}"
    return {"backend_xid": xid, "backend_xmin": xmin,
            "removed": int(found[1]), "dead but not yet removable": int(found[2])}


@pytest.fixture
def ledger(admin):
    """A protected table (id, amount, fence) with rows 1 and 2; its name."""
    name = unique("ledger").replace("-", "_")
    admin.execute(f"CREATE TABLE {name} (id int PRIMARY KEY, amount int NOT NULL, fence bigint)")
    admin.execute("SELECT fencing.protect(%s)", (name,))
    admin.execute(f"INSERT INTO {name} VALUES (1, 0, fencing.next_token()), (2, 0, fencing.next_token())")
    yield name
    admin.execute(f"DROP TABLE {name}")


class Worker:
    """A python process running tests/worker.py: it reads one command per
    line on stdin and answers one line on stdout."""

    def __init__(self, *args):
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "worker.py"), conninfo(), *args],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)

    def send(self, line):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def read(self):
        line = self.proc.stdout.readline()
        if not line:
            raise AssertionError(f"worker {self.proc.pid} exited ({self.proc.wait()})")
        return line.strip()

    def ask(self, line):
        self.send(line)
        return self.read()

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


@pytest.fixture
def workers():
    started = []

    def start(*args):
        w = Worker(*args)
        started.append(w)
        return w

    yield start
    for w in started:
        w.close()


class StallingProxy:
    """A proxy in front of the server, on a unix socket of its own, whose
    traffic can be stopped as a network that swallows packets stops it:
    after stall() nothing it receives goes on, until resume().  holding is
    set once something it received since stall() waits there.  ready counts
    the ReadyForQuery messages the server sent: one per round trip."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="pgstall-")
        self.port = os.environ["PGPORT"]
        self.target = os.path.join(os.environ["PGHOST"], f".s.PGSQL.{self.port}")
        self.flowing = threading.Event()
        self.flowing.set()
        self.holding = threading.Event()
        self.ready = 0
        self.sockets = []
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(os.path.join(self.dir, f".s.PGSQL.{self.port}"))
        self.listener.listen(16)
        threading.Thread(target=self._accept, daemon=True).start()

    def conninfo(self, **overrides):
        return conninfo(host=self.dir, **overrides)

    def stall(self):
        self.holding.clear()
        self.flowing.clear()

    def resume(self):
        self.flowing.set()

    def close(self):
        self.resume()
        self.listener.close()
        for s in self.sockets:
            s.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            server.connect(self.target)
            self.sockets += [client, server]
            for src, dst, count in ((client, server, False), (server, client, True)):
                threading.Thread(target=self._pump, args=(src, dst, count), daemon=True).start()

    def _pump(self, src, dst, count):
        pending = b""
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if count:  # the server's messages: a type byte and a length each
                    pending += data
                    while len(pending) >= 5 and len(pending) >= 1 + int.from_bytes(pending[1:5], "big"):
                        if pending[:1] == b"Z":
                            self.ready += 1
                        pending = pending[1 + int.from_bytes(pending[1:5], "big"):]
                if not self.flowing.is_set():
                    self.holding.set()
                self.flowing.wait()
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


@pytest.fixture
def stalling_proxy():
    proxy = StallingProxy()
    yield proxy
    proxy.close()
