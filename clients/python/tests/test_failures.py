# Copyright (c) 2026, the fencing developers
#
# When the work fails: the body's exception comes out of a with block as
# it was, and the lease is released all the same (the lease is held by the
# server, not by the caller's failed transaction); a release that did not
# get through keeps the token for another try; a batch whose block caught
# an error of its own transaction is rolled back by the server and must
# not come out as a success.

import asyncio

import psycopg
import pytest
from psycopg import pq

import pgfencing
import pgfencing.aio
from conftest import conninfo, unique, wait_for


def held(admin, name):
    return admin.execute("SELECT count(*) FROM fencing.leases WHERE name = %s", (name,)).fetchone()[0]


def test_a_failed_body_on_the_lease_connection_comes_out_as_it_was(admin):
    name = unique("failed-body")
    with psycopg.connect(conninfo()) as conn:
        with pytest.raises(psycopg.errors.DivisionByZero):
            with pgfencing.Lease(conn, name, ttl=600) as lease:
                conn.execute("SELECT 1/0")
        assert held(admin, name) == 0
        assert lease.token is None
        # the failed transaction is the caller's: left for the caller to end
        assert conn.info.transaction_status == pq.TransactionStatus.INERROR
        conn.rollback()


def test_async_a_failed_body_on_the_lease_connection_comes_out_as_it_was(admin):
    name = unique("failed-body-aio")

    async def main():
        async with await psycopg.AsyncConnection.connect(conninfo()) as conn:
            with pytest.raises(psycopg.errors.DivisionByZero):
                async with pgfencing.aio.Lease(conn, name, ttl=600) as lease:
                    await conn.execute("SELECT 1/0")
            assert conn.info.transaction_status == pq.TransactionStatus.INERROR
            await conn.rollback()
            return lease

    lease = asyncio.run(main())
    assert held(admin, name) == 0
    assert lease.token is None


def test_a_release_that_did_not_get_through_keeps_the_token(admin):
    name = unique("release-again")
    app = unique("releaser")
    lease = pgfencing.Lease(conninfo(application_name=app), name, ttl=600, renew=False)
    assert lease.acquire(blocking=False)
    token = lease.token
    admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s", (app,))
    wait_for(lambda: admin.execute("SELECT count(*) = 0 FROM pg_stat_activity WHERE application_name = %s",
                                   (app,)).fetchone()[0], 10, "the lease's connection ended")
    with pytest.raises(psycopg.OperationalError):
        lease.release()
    assert lease.token == token
    assert held(admin, name) == 1
    lease.release()
    assert lease.token is None
    assert held(admin, name) == 0
