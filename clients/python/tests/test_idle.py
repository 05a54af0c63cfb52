# Copyright (c) 2026, the fencing developers
#
# A READ COMMITTED transaction that holds a lock or a lease and sits idle
# holds back no VACUUM (DESIGN T5), whatever pgfencing sent in it (D1): for
# each call that runs in the caller's transaction, the transaction waits
# idle after it while another session looks at its backend_xid and
# backend_xmin and vacuums a row deleted meanwhile.

import asyncio
import contextlib

import psycopg
import pytest

import pgfencing
import pgfencing.aio
from conftest import HOLDS_BACK_NOTHING, conninfo, held_back, unique


def lease_on(db):
    """A lease of the quiet database that no renewal touches during a check."""
    return pgfencing.Lease(conninfo(dbname=db), unique("idle-lease"), ttl=60, renew=False)


@contextlib.contextmanager
def after_try_lock(conn, db):
    with conn.transaction():
        assert pgfencing.try_lock(conn, unique("idle")) is not None
        yield


@contextlib.contextmanager
def after_lock(conn, db):
    with conn.transaction():
        assert pgfencing.lock(conn, unique("idle")) > 0
        yield


@contextlib.contextmanager
def after_lock_with_timeout(conn, db):
    with conn.transaction():
        assert pgfencing.lock(conn, unique("idle"), timeout=5) > 0
        yield


@contextlib.contextmanager
def after_use(conn, db):
    with lease_on(db) as lease, conn.transaction():
        assert lease.use(conn) == lease.token
        yield


@contextlib.contextmanager
def after_bind(conn, db):
    with lease_on(db) as lease, conn.transaction():
        assert lease.bind(conn) == lease.token
        yield


@contextlib.contextmanager
def inside_lease_transaction(conn, db):
    with lease_on(db) as lease, lease.transaction(conn):
        yield


@contextlib.contextmanager
def after_acquire_in_a_transaction(conn, db):
    lease = pgfencing.Lease(conn, unique("idle-lease"), ttl=60, renew=False)
    with conn.transaction():
        assert lease.acquire(blocking=False)
        yield
    lease.release()


@contextlib.contextmanager
def after_release_in_a_transaction(conn, db):
    lease = pgfencing.Lease(conn, unique("idle-lease"), ttl=60, renew=False)
    with conn.transaction():
        assert lease.acquire(blocking=False)
        lease.release()
        yield


@contextlib.contextmanager
def after_try_lock_in_a_pipeline(conn, db):
    with conn.transaction():
        with conn.pipeline():
            assert pgfencing.try_lock(conn, unique("idle")) is not None
        yield


def held_back_after(hold, db):
    with psycopg.connect(conninfo(dbname=db), autocommit=True) as looker, \
            psycopg.connect(conninfo(dbname=db)) as conn:
        with hold(conn, db):
            return held_back(looker, conn.info.backend_pid)


@pytest.mark.parametrize("hold", [
    after_try_lock, after_lock, after_lock_with_timeout, after_bind,
    after_acquire_in_a_transaction, after_release_in_a_transaction, after_try_lock_in_a_pipeline,
], ids=lambda hold: hold.__name__)
def test_an_idle_holder_holds_back_no_vacuum(hold, quiet_db):
    assert held_back_after(hold, quiet_db) == HOLDS_BACK_NOTHING


# use() raises the fence of the lease's name, a row of
# fencing.resource_fences: from then on the transaction has the xid of that
# write, as it has one for its own writes, and holds back VACUUM as every
# writing transaction does.  What pgfencing sent leaves no snapshot behind.
@pytest.mark.parametrize("hold", [after_use, inside_lease_transaction], ids=lambda hold: hold.__name__)
def test_an_idle_batch_holds_no_snapshot(hold, quiet_db):
    held = held_back_after(hold, quiet_db)
    assert held["backend_xmin"] is None, held


def async_lease_on(db):
    return pgfencing.aio.Lease(conninfo(dbname=db), unique("idle-lease"), ttl=60, renew=False)


@contextlib.asynccontextmanager
async def async_after_try_lock(conn, db):
    async with conn.transaction():
        assert await pgfencing.aio.try_lock(conn, unique("idle")) is not None
        yield


@contextlib.asynccontextmanager
async def async_after_lock(conn, db):
    async with conn.transaction():
        assert await pgfencing.aio.lock(conn, unique("idle"), timeout=5) > 0
        yield


@contextlib.asynccontextmanager
async def async_after_use(conn, db):
    async with async_lease_on(db) as lease, conn.transaction():
        assert await lease.use(conn) == lease.token
        yield


@contextlib.asynccontextmanager
async def async_after_bind(conn, db):
    async with async_lease_on(db) as lease, conn.transaction():
        assert await lease.bind(conn) == lease.token
        yield


@contextlib.asynccontextmanager
async def async_inside_lease_transaction(conn, db):
    async with async_lease_on(db) as lease, lease.transaction(conn):
        yield


@contextlib.asynccontextmanager
async def async_after_acquire_in_a_transaction(conn, db):
    lease = pgfencing.aio.Lease(conn, unique("idle-lease"), ttl=60, renew=False)
    async with conn.transaction():
        assert await lease.acquire(blocking=False)
        yield
    await lease.release()


def async_held_back_after(hold, db):
    async def main():
        conn = await psycopg.AsyncConnection.connect(conninfo(dbname=db))
        async with conn:
            async with hold(conn, db):
                with psycopg.connect(conninfo(dbname=db), autocommit=True) as looker:
                    return held_back(looker, conn.info.backend_pid)

    return asyncio.run(main())


@pytest.mark.parametrize("hold", [
    async_after_try_lock, async_after_lock, async_after_bind, async_after_acquire_in_a_transaction,
], ids=lambda hold: hold.__name__)
def test_an_idle_async_holder_holds_back_no_vacuum(hold, quiet_db):
    assert async_held_back_after(hold, quiet_db) == HOLDS_BACK_NOTHING


@pytest.mark.parametrize("hold", [async_after_use, async_inside_lease_transaction],
                         ids=lambda hold: hold.__name__)
def test_an_idle_async_batch_holds_no_snapshot(hold, quiet_db):
    held = async_held_back_after(hold, quiet_db)
    assert held["backend_xmin"] is None, held
