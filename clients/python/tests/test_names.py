# Copyright (c) 2026, the fencing developers
#
# Names and holders that try to break out of the statement pgfencing
# writes: quotes, backslashes, a semicolon and SQL, placeholders, non-ASCII,
# a NUL, very long ones; also on a session with a client encoding whose
# characters end in a backslash byte (SJIS) and without
# standard_conforming_strings.  Each reaches the server as it was given
# (checked through bound parameters), or is refused with a clear error.

import psycopg
import pytest
from psycopg import pq

import pgfencing
import pgfencing.aio
from conftest import conninfo, unique

HOSTILE = [
    "it's",
    "back\\slash",
    "trailing backslash\\",
    "x'); DROP TABLE canary; --",
    "\\'); DROP TABLE canary; --",
    "x' || (SELECT 'y') || '",
    "$$; DROP TABLE canary; $$",
    "%s %(name)s %% {} {0}",
    "E'\\x27'",
    "stra\u00dfe \u2603 \U0001d11e \u8868",
    "\u8868'\\'); DROP TABLE canary; --",
    "tab\tnew\nline\r",
    "\u3000ideographic\u3000space",
    "\u00e9" * 100,
    "'" * 200,
]


@pytest.fixture
def canary(admin):
    admin.execute("CREATE TABLE IF NOT EXISTS canary (id int)")
    yield
    assert admin.execute("SELECT to_regclass('canary') IS NOT NULL").fetchone() == (True,)


def holding(admin, pid, name):
    """The token of the lock that session pid holds on name, looked up
    with name as a bound parameter."""
    row = admin.execute(
        "SELECT token FROM fencing.locks WHERE pid = %s AND granted"
        " AND name = fencing.normalize_name(%s)", (pid, name)).fetchone()
    return row and row[0]


@pytest.mark.parametrize("encoding", ["UTF8", "SJIS"])
def test_hostile_names_reach_the_server_as_given(admin, canary, encoding):
    with psycopg.connect(conninfo(), autocommit=True) as conn:
        if encoding == "SJIS":
            conn.execute("SET client_encoding = 'SJIS'")
            conn.execute("SET standard_conforming_strings = off")
        assert conn.execute("SELECT current_setting('client_encoding'),"
                            " current_setting('standard_conforming_strings')").fetchone() == \
            ((encoding, "off") if encoding == "SJIS" else (encoding, "on"))
        pid = conn.info.backend_pid
        for name in HOSTILE:
            with conn.transaction():
                token = pgfencing.try_lock(conn, name)
                assert token is not None and holding(admin, pid, name) == token, name
            with conn.transaction():
                token = pgfencing.lock(conn, name, timeout=1)
                assert holding(admin, pid, name) == token, name
            with conn.transaction(), pgfencing.Lease(conn, name, holder=name, renew=False) as lease:
                row = admin.execute(
                    "SELECT token, holder FROM fencing.leases WHERE name = fencing.normalize_name(%s)",
                    (name,)).fetchone()
                assert row == (lease.token, name), name
                assert lease.use(conn) == lease.token
                assert conn.execute("SELECT current_setting('fencing.token')").fetchone() == (str(lease.token),)


def test_a_nul_is_refused_before_anything_is_sent(admin):
    name = unique("nul") + "\x00'); DROP TABLE canary; --"
    with psycopg.connect(conninfo()) as conn:
        conn.execute("SELECT 1")
        for call in (lambda: pgfencing.try_lock(conn, name),
                     lambda: pgfencing.lock(conn, name, timeout=1),
                     lambda: pgfencing.Lease(conn, name).acquire(),
                     lambda: pgfencing.Lease(conn, unique("nul"), holder="a\x00b").acquire()):
            with pytest.raises(ValueError, match="NUL"):
                call()
            # nothing reached the server: the transaction is still fine
            assert conn.info.transaction_status == pq.TransactionStatus.INTRANS
        conn.rollback()
    assert admin.execute("SELECT count(*) FROM fencing.leases WHERE name LIKE 'nul-%'").fetchone() == (0,)


def test_names_must_be_text():
    with psycopg.connect(conninfo()) as conn:
        with pytest.raises(TypeError, match="str"):
            pgfencing.try_lock(conn, 42)
        with pytest.raises(TypeError, match="str"):
            pgfencing.lock(conn, b"bytes")


def test_names_over_the_limit_get_the_servers_error():
    with psycopg.connect(conninfo()) as conn:
        for name in ("x" * 5000, "\u00e9'\\" * 2000, "\u00e9" * 101):
            with pytest.raises(psycopg.errors.NameTooLong):
                pgfencing.try_lock(conn, name)
            conn.rollback()


def test_async_hostile_names(admin, canary):
    import asyncio

    async def main():
        conn = await psycopg.AsyncConnection.connect(conninfo(), autocommit=True)
        async with conn:
            pid = conn.info.backend_pid
            for name in HOSTILE:
                async with conn.transaction():
                    token = await pgfencing.aio.try_lock(conn, name)
                    assert token is not None and holding(admin, pid, name) == token, name
            async with conn.transaction():
                with pytest.raises(ValueError, match="NUL"):
                    await pgfencing.aio.lock(conn, "a\x00b")

    asyncio.run(main())
