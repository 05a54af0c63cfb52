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


def end_sessions(admin, app):
    """Terminate the sessions of application_name app (the lease's own
    connection), and wait until they are gone."""
    admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s", (app,))
    wait_for(lambda: admin.execute("SELECT count(*) = 0 FROM pg_stat_activity WHERE application_name = %s",
                                   (app,)).fetchone()[0], 10, "the lease's connection ended")


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
    end_sessions(admin, app)
    with pytest.raises(psycopg.OperationalError):
        lease.release()
    assert lease.token == token
    assert held(admin, name) == 1
    lease.release()
    assert lease.token is None
    assert held(admin, name) == 0


def test_async_a_release_that_did_not_get_through_keeps_the_token(admin):
    name = unique("release-again-aio")
    app = unique("releaser-aio")

    async def main():
        lease = pgfencing.aio.Lease(conninfo(application_name=app), name, ttl=600, renew=False)
        assert await lease.acquire(blocking=False)
        token = lease.token
        end_sessions(admin, app)
        with pytest.raises(psycopg.OperationalError):
            await lease.release()
        assert lease.token == token
        assert held(admin, name) == 1
        await lease.release()
        assert lease.token is None

    asyncio.run(main())
    assert held(admin, name) == 0


def test_a_lease_whose_release_did_not_get_through_is_lost_at_its_deadline(admin):
    # the handle keeps the token, and nothing renews it any more: its
    # deadline still loses it, with the callbacks before the event
    name = unique("release-failed-lapse")
    app = unique("releaser-lapse")
    told = []
    lease = pgfencing.Lease(conninfo(application_name=app), name, ttl=2,
                            on_lost=lambda l: told.append(l.lost.is_set()))
    assert lease.acquire(blocking=False)
    end_sessions(admin, app)
    with pytest.raises(psycopg.OperationalError):
        lease.release()
    assert not lease.lost.is_set()
    assert lease.lost.wait(timeout=10), "the lease was not lost at its deadline"
    assert told == [True]
    with psycopg.connect(conninfo()) as conn:
        with pytest.raises(pgfencing.LeaseLost):
            with lease.transaction(conn):
                pass


def test_async_a_lease_whose_release_did_not_get_through_is_lost_at_its_deadline(admin):
    name = unique("release-failed-lapse-aio")
    app = unique("releaser-lapse-aio")
    told = []

    async def main():
        lease = pgfencing.aio.Lease(conninfo(application_name=app), name, ttl=2,
                                    on_lost=lambda l: told.append(l.lost.is_set()))
        assert await lease.acquire(blocking=False)
        end_sessions(admin, app)
        with pytest.raises(psycopg.OperationalError):
            await lease.release()
        assert not lease.lost.is_set()
        await asyncio.wait_for(lease.lost.wait(), 10)
        assert told == [True]

    asyncio.run(main())


def test_a_batch_whose_block_caught_its_failure_is_not_a_success(ledger, admin):
    name = unique("caught")
    with pgfencing.Lease(conninfo(), name, ttl=30) as lease, psycopg.connect(conninfo()) as conn:
        admin.execute(f"UPDATE {ledger} SET fence = fencing.next_token() WHERE id = 2")  # a newer holder's row
        with pytest.raises(psycopg.Error) as raised:
            with lease.transaction(conn):
                conn.execute(f"UPDATE {ledger} SET amount = 7 WHERE id = 1")
                try:
                    conn.execute(f"UPDATE {ledger} SET amount = 9 WHERE id = 2")
                except psycopg.Error as exc:
                    caught = exc.sqlstate
        assert caught == "FN001"
        assert raised.value.sqlstate == "25P02"
        assert conn.info.transaction_status == pq.TransactionStatus.IDLE
        assert admin.execute(f"SELECT amount FROM {ledger} ORDER BY id").fetchall() == [(0,), (0,)]
        # the lease itself is still held: the next batch goes on
        with lease.transaction(conn):
            conn.execute(f"UPDATE {ledger} SET amount = 8 WHERE id = 1")
    assert admin.execute(f"SELECT amount FROM {ledger} WHERE id = 1").fetchone() == (8,)


def test_a_batch_whose_block_caught_the_lease_lost_raises_lease_lost(ledger, admin):
    name = unique("caught-lost")
    lease = pgfencing.Lease(conninfo(), name, ttl=30, raise_on_release_error=False)
    with lease, psycopg.connect(conninfo()) as conn:
        with pytest.raises(pgfencing.LeaseLost):
            with lease.transaction(conn):
                conn.execute(f"UPDATE {ledger} SET amount = 7 WHERE id = 1")
                admin.execute("SELECT fencing.break_lease(%s)", (name,))
                try:
                    conn.execute("SELECT fencing.use_lease(%s, %s)", (name, lease.token))
                except psycopg.Error as exc:
                    caught = exc.sqlstate
        assert caught == "FN004"
        assert lease.lost.is_set()
        assert conn.info.transaction_status == pq.TransactionStatus.IDLE
    assert admin.execute(f"SELECT amount FROM {ledger} WHERE id = 1").fetchone() == (0,)


def test_a_savepoint_the_block_rolled_back_to_leaves_a_batch_that_commits(ledger, admin):
    name = unique("savepoint")
    with pgfencing.Lease(conninfo(), name, ttl=30) as lease, psycopg.connect(conninfo()) as conn:
        with lease.transaction(conn):
            conn.execute(f"UPDATE {ledger} SET amount = 7 WHERE id = 1")
            with pytest.raises(psycopg.errors.DivisionByZero):
                with conn.transaction():
                    conn.execute("SELECT 1/0")
        assert not lease.lost.is_set()
    assert admin.execute(f"SELECT amount FROM {ledger} WHERE id = 1").fetchone() == (7,)


def test_async_a_batch_whose_block_caught_its_failure_is_not_a_success(ledger, admin):
    name = unique("caught-aio")

    async def main():
        async with pgfencing.aio.Lease(conninfo(), name, ttl=30) as lease:
            admin.execute(f"UPDATE {ledger} SET fence = fencing.next_token() WHERE id = 2")  # a newer holder's row
            async with await psycopg.AsyncConnection.connect(conninfo()) as conn:
                with pytest.raises(psycopg.Error) as raised:
                    async with lease.transaction(conn):
                        await conn.execute(f"UPDATE {ledger} SET amount = 7 WHERE id = 1")
                        try:
                            await conn.execute(f"UPDATE {ledger} SET amount = 9 WHERE id = 2")
                        except psycopg.Error as exc:
                            caught = exc.sqlstate
                assert caught == "FN001"
                assert raised.value.sqlstate == "25P02"
                assert conn.info.transaction_status == pq.TransactionStatus.IDLE

    asyncio.run(main())
    assert admin.execute(f"SELECT amount FROM {ledger} ORDER BY id").fetchall() == [(0,), (0,)]
