# Copyright (c) 2026, the fencing developers
#
# The transaction locks: pgfencing.try_lock and pgfencing.lock, which end
# with the transaction and refuse what would end them at once.

import threading

import psycopg
import pytest
from psycopg_pool import ConnectionPool

import pgfencing
from conftest import conninfo, unique


def test_try_lock_in_a_transaction(admin):
    name = unique("try")
    with psycopg.connect(conninfo()) as a, psycopg.connect(conninfo()) as b:
        token = pgfencing.try_lock(a, name)
        assert isinstance(token, int) and token > 0
        assert pgfencing.try_lock(b, name) is None
        b.rollback()
        a.commit()
        assert pgfencing.try_lock(b, name) > token
        b.rollback()


def test_lock_waits_then_raises_busy():
    name = unique("wait")
    with psycopg.connect(conninfo()) as a, psycopg.connect(conninfo()) as b:
        pgfencing.try_lock(a, name)
        with pytest.raises(pgfencing.Busy):
            pgfencing.lock(b, name, timeout=0.3)
        b.rollback()
        got = {}
        thread = threading.Thread(target=lambda: got.update(token=pgfencing.lock(b, name, timeout=30)))
        thread.start()
        thread.join(0.5)
        assert thread.is_alive()
        a.commit()
        thread.join(30)
        assert got["token"] > 0
        b.rollback()


def test_locks_refuse_autocommit_and_pools():
    name = unique("refuse")
    with psycopg.connect(conninfo(), autocommit=True) as conn:
        with pytest.raises(pgfencing.NotInTransaction):
            pgfencing.try_lock(conn, name)
        with pytest.raises(pgfencing.NotInTransaction):
            pgfencing.lock(conn, name)
        with conn.transaction():
            assert pgfencing.try_lock(conn, name) is not None
    with ConnectionPool(conninfo(), min_size=1, max_size=1) as pool:
        with pytest.raises(TypeError, match="not a pool"):
            pgfencing.try_lock(pool, name)


def test_a_terminated_lock_holder_gets_lease_lost(admin):
    name = unique("terminated")
    with psycopg.connect(conninfo()) as conn:
        pgfencing.try_lock(conn, name)
        admin.execute("SELECT pg_terminate_backend(%s)", (conn.info.backend_pid,))
        with pytest.raises(pgfencing.LeaseLost) as caught:
            pgfencing.try_lock(conn, name)
        # libpq reads the FATAL as the connection closing: no SQLSTATE
        assert isinstance(caught.value.__cause__, psycopg.OperationalError)
        assert conn.broken
