# Copyright (c) 2026, the fencing developers
#
# conftest.py -- what the driver suite's pytest files share: connections to
# the server and to PgBouncer that test/drivers/run.sh started (PGHOST,
# PGPORT and PGDATABASE name the server, FENCING_BOUNCER_PORT the pooler),
# names no other test uses, a wait for a condition, and one TAP line per
# test in FENCING_DRIVERS_TAP for test/lib/suites.sh to count.

import os
import time
import uuid

import psycopg
import pytest


def server_conninfo(**overrides):
    """libpq keywords of the server itself."""
    info = {
        "host": os.environ["PGHOST"],
        "port": os.environ["PGPORT"],
        "dbname": os.environ["PGDATABASE"],
    }
    info.update(overrides)
    return " ".join(f"{k}={v}" for k, v in info.items())


def bouncer_conninfo(dbname="drivers"):
    """libpq keywords of PgBouncer: "drivers" has a pool of 20 server
    connections, "single" a pool of one."""
    return server_conninfo(port=os.environ["FENCING_BOUNCER_PORT"], dbname=dbname)


def connect(conninfo=None, **kwargs):
    return psycopg.connect(conninfo or server_conninfo(), **kwargs)


def unique(prefix):
    """A lock, table or resource name that no other test shares."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def next_token():
    """A fresh token, issued in a transaction of its own."""
    with connect(autocommit=True) as conn:
        return conn.execute("SELECT fencing.next_token()").fetchone()[0]


def wait_for(condition, timeout, what):
    """Poll condition() until it returns a true value and return that value;
    fail when timeout seconds pass first."""
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
    """An autocommit connection to the server, for setup and for looking
    at fencing.locks from outside the transaction under test."""
    with connect(autocommit=True) as conn:
        yield conn


@pytest.fixture
def protected_table(admin):
    """A protected table with one row (id 1, fence NULL); its name."""
    name = unique("ledger").replace("-", "_")
    admin.execute(
        f"CREATE TABLE {name} (id int PRIMARY KEY, amount numeric NOT NULL, fence bigint)"
    )
    admin.execute("SELECT fencing.protect(%s)", (name,))
    admin.execute(f"INSERT INTO {name} VALUES (1, 0, fencing.next_token())")
    yield name
    admin.execute(f"DROP TABLE {name}")


# --- one TAP line per test ---------------------------------------------------

_tap_number = 0


def _tap(ok, nodeid, directive=""):
    global _tap_number
    path = os.environ.get("FENCING_DRIVERS_TAP")
    if not path:
        return
    _tap_number += 1
    line = f"{'ok' if ok else 'not ok'} {_tap_number} - {nodeid}{directive}\n"
    with open(path, "a", encoding="utf-8") as f:
        f.write(line)


def pytest_runtest_logreport(report):
    if report.when == "call":
        if report.skipped:
            _tap(True, report.nodeid, " # SKIP")
        else:
            _tap(report.passed, report.nodeid)
    elif report.failed:
        # a fixture that failed in setup or teardown fails the test
        _tap(False, f"{report.nodeid} ({report.when})")
    elif report.when == "setup" and report.skipped:
        _tap(True, report.nodeid, " # SKIP")
