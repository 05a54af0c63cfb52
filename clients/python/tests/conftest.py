# Copyright (c) 2026, the fencing developers
#
# conftest.py -- what pgfencing's tests share: the server and the PgBouncer
# that test/clients/run.sh started (PGHOST, PGPORT, PGDATABASE;
# FENCING_BOUNCER_PORT), names no other test uses, a protected table, and
# worker processes that run tests/worker.py.

import os
import subprocess
import sys
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
