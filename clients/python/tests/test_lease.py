# Copyright (c) 2026, the fencing developers
#
# pgfencing.Lease: its redis-py shape, use() and transaction(), bind(),
# the three kinds of source (conninfo, connection, pool), and the errors.

import datetime

import psycopg
import pytest
from psycopg_pool import ConnectionPool

import pgfencing
from conftest import conninfo, unique


def test_with_acquires_and_releases(admin):
    name = unique("with")
    with pgfencing.Lease(conninfo(), name, ttl=30, holder="test job") as lease:
        assert isinstance(lease.token, int)
        assert lease.token > 2**53
        row = admin.execute(
            "SELECT token, holder FROM fencing.leases WHERE name = %s", (name,)).fetchone()
        assert row == (lease.token, "test job")
        assert lease.owned()
        assert lease.locked()
    assert lease.token is None
    assert admin.execute("SELECT count(*) FROM fencing.leases WHERE name = %s", (name,)).fetchone() == (0,)


def test_with_raises_busy_when_held():
    name = unique("busy")
    with pgfencing.Lease(conninfo(), name):
        with pytest.raises(pgfencing.Busy):
            with pgfencing.Lease(conninfo(), name):
                raise AssertionError("granted a held lease")
        other = pgfencing.Lease(conninfo(), name)
        assert other.acquire(blocking=False) is False
        assert other.acquire(timeout=0.3) is False
        assert not other.owned()
        assert other.locked()


def test_names_are_normalised_as_the_server_does():
    name = unique("Straße")
    with pgfencing.Lease(conninfo(), name):
        assert not pgfencing.Lease(conninfo(), "  " + name.upper() + " ").acquire(blocking=False)


def test_acquire_twice_on_one_handle_is_an_error():
    lease = pgfencing.Lease(conninfo(), unique("twice"))
    assert lease.acquire(blocking=False)
    with pytest.raises(pgfencing.FencingError, match="already acquired"):
        lease.acquire(blocking=False)
    lease.release()
    with pytest.raises(pgfencing.FencingError, match="not acquired"):
        lease.release()


def test_use_fences_the_batch_and_sets_the_token(ledger):
    name = unique("use")
    with pgfencing.Lease(conninfo(), name) as lease, psycopg.connect(conninfo()) as conn:
        assert lease.use(conn) == lease.token
        conn.execute(f"UPDATE {ledger} SET amount = 5 WHERE id = 1")
        assert conn.execute("SELECT current_setting('fencing.token')").fetchone() == (str(lease.token),)
        conn.commit()
        assert conn.execute(f"SELECT fence FROM {ledger} WHERE id = 1").fetchone() == (lease.token,)
        assert conn.execute(
            "SELECT fence FROM fencing.resource_fences WHERE resource = fencing.normalize_name(%s)",
            (name,)).fetchone() == (lease.token,)
        conn.commit()


def test_use_refuses_autocommit_outside_a_transaction_block():
    with pgfencing.Lease(conninfo(), unique("autocommit")) as lease, \
            psycopg.connect(conninfo(), autocommit=True) as conn:
        with pytest.raises(pgfencing.NotInTransaction, match="autocommit"):
            lease.use(conn)
        with pytest.raises(pgfencing.NotInTransaction):
            lease.bind(conn)
        with conn.transaction():
            assert lease.use(conn) == lease.token


def test_use_refuses_a_pool():
    with ConnectionPool(conninfo(), min_size=1, max_size=2) as pool, \
            pgfencing.Lease(pool, unique("pool-use")) as lease:
        with pytest.raises(TypeError, match="not a pool"):
            lease.use(pool)


def test_transaction_commits_and_rolls_back(ledger):
    with pgfencing.Lease(conninfo(), unique("tx")) as lease, psycopg.connect(conninfo()) as conn:
        with lease.transaction(conn):
            conn.execute(f"UPDATE {ledger} SET amount = 7 WHERE id = 2")
        with pytest.raises(ZeroDivisionError):
            with lease.transaction(conn):
                conn.execute(f"UPDATE {ledger} SET amount = 8 WHERE id = 2")
                1 / 0
        assert conn.execute(f"SELECT amount, fence FROM {ledger} WHERE id = 2").fetchone() == (7, lease.token)
        conn.rollback()
        conn.execute("SELECT 1")
        with pytest.raises(pgfencing.FencingError, match="already in one"):
            with lease.transaction(conn):
                pass
        conn.rollback()


def test_a_stale_write_inside_a_batch_is_stale_token_and_loses_the_lease(ledger, admin):
    name = unique("stale")
    with pgfencing.Lease(conninfo(), name) as lease, psycopg.connect(conninfo()) as conn:
        # a newer token reached the row first
        admin.execute(f"UPDATE {ledger} SET amount = 1, fence = fencing.next_token() WHERE id = 1")
        with pytest.raises(pgfencing.StaleToken) as caught:
            with lease.transaction(conn):
                conn.execute(f"UPDATE {ledger} SET amount = 99 WHERE id = 1")
        assert isinstance(caught.value.__cause__, psycopg.Error)
        assert caught.value.__cause__.sqlstate == "FN001"
        assert caught.value.sqlstate == "FN001"
        assert lease.lost.is_set()
        with pytest.raises(pgfencing.LeaseLost):
            lease.use(conn)
        lease.raise_on_release_error = False
    assert admin.execute(f"SELECT amount FROM {ledger} WHERE id = 1").fetchone() == (1,)


def test_transaction_in_pipeline_mode(ledger, admin):
    with pgfencing.Lease(conninfo(), unique("pipeline")) as lease, psycopg.connect(conninfo()) as conn:
        with conn.pipeline():
            with lease.transaction(conn):
                conn.execute(f"UPDATE {ledger} SET amount = 11 WHERE id = 1")
            token = lease.token
            admin.execute(f"UPDATE {ledger} SET fence = fencing.next_token() WHERE id = 2")
            with pytest.raises(pgfencing.StaleToken):
                with lease.transaction(conn):
                    conn.execute(f"UPDATE {ledger} SET amount = 12 WHERE id = 2")
        assert lease.lost.is_set()
        lease.raise_on_release_error = False
    assert admin.execute(f"SELECT amount FROM {ledger} ORDER BY id").fetchall() == [(11,), (0,)]
    assert admin.execute(f"SELECT fence FROM {ledger} WHERE id = 1").fetchone() == (token,)


def test_bind_sets_only_the_token(ledger):
    name = unique("bind")
    with pgfencing.Lease(conninfo(), name) as lease, psycopg.connect(conninfo()) as conn:
        with conn.transaction():
            assert lease.bind(conn) == lease.token
            conn.execute(f"UPDATE {ledger} SET amount = 3 WHERE id = 1")
        assert conn.execute(f"SELECT fence FROM {ledger} WHERE id = 1").fetchone() == (lease.token,)
        assert conn.execute(
            "SELECT count(*) FROM fencing.resource_fences WHERE resource = fencing.normalize_name(%s)",
            (name,)).fetchone() == (0,)
        conn.rollback()


def test_renew_returns_the_new_expiry(admin):
    name = unique("renew")
    with pgfencing.Lease(conninfo(), name, ttl=5, renew=False) as lease:
        expires = lease.renew(ttl=120)
        assert isinstance(expires, datetime.datetime)
        assert admin.execute("SELECT expires_at FROM fencing.leases WHERE name = %s", (name,)).fetchone() == (expires,)
        assert expires - datetime.datetime.now(expires.tzinfo) > datetime.timedelta(seconds=100)


def test_renew_after_break_raises_lease_lost(admin):
    name = unique("broken")
    lease = pgfencing.Lease(conninfo(), name, ttl=30, renew=False, raise_on_release_error=False)
    with lease:
        assert admin.execute("SELECT fencing.break_lease(%s)", (name,)).fetchone() == (lease.token,)
        with pytest.raises(pgfencing.LeaseLost) as caught:
            lease.renew()
        assert caught.value.__cause__.sqlstate == "FN004"
        assert lease.lost.is_set()
        assert not lease.owned()


def test_a_connection_as_source(ledger):
    """acquire and release on the caller's connection, in whatever state it
    is; the renewals on another one."""
    with psycopg.connect(conninfo()) as conn:
        lease = pgfencing.Lease(conn, unique("conn"), ttl=3)
        assert lease.acquire(blocking=False)
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        with lease.transaction(conn):
            conn.execute(f"UPDATE {ledger} SET amount = 4 WHERE id = 1")
        lease.lost.wait(4)
        assert not lease.lost.is_set(), "the renewals did not keep the lease"
        lease.release()
        assert not conn.closed


def test_a_pool_as_source(ledger):
    with ConnectionPool(conninfo(), min_size=2, max_size=4) as pool:
        with pgfencing.Lease(pool, unique("pool"), ttl=3) as lease:
            for i in range(3):
                with pool.connection() as conn, lease.transaction(conn):
                    conn.execute(f"UPDATE {ledger} SET amount = %s WHERE id = 1", (i,))
            lease.lost.wait(4)
            assert not lease.lost.is_set()


def test_translate_maps_each_sqlstate(admin):
    cases = {
        "FN001": pgfencing.StaleToken,
        "FN002": pgfencing.NameCollision,
        "FN003": pgfencing.NotPreloaded,
        "FN004": pgfencing.LeaseLost,
        "25P01": pgfencing.NotInTransaction,
    }
    for state, cls in cases.items():
        with pytest.raises(psycopg.Error) as caught:
            admin.execute(
                "DO $$ BEGIN RAISE EXCEPTION 'x' USING ERRCODE = '%s'; END $$" % state)
        assert isinstance(pgfencing.translate(caught.value), cls)
    with pytest.raises(psycopg.Error) as caught:
        admin.execute("DO $$ BEGIN RAISE EXCEPTION 'x' USING ERRCODE = '57P01'; END $$")
    assert pgfencing.translate(caught.value) is None
    assert isinstance(pgfencing.translate(caught.value, lock_held=True), pgfencing.LeaseLost)


def test_bad_arguments():
    with pytest.raises(ValueError):
        pgfencing.Lease(conninfo(), "x", ttl=0)
    with pytest.raises(TypeError):
        pgfencing.Lease(conninfo(), "x", ttl="30")
    with pytest.raises(TypeError):
        pgfencing.Lease(42, "x")
    with pytest.raises(psycopg.Error):
        pgfencing.Lease(conninfo(), "", ttl=1).acquire(blocking=False)
