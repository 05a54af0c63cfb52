# Copyright (c) 2026, the fencing developers
#
# pgfencing.aio, the asyncio twin: the same life of a lease on
# AsyncConnection and AsyncConnectionPool, renewed from a task while the
# work connection awaits a long statement.

import asyncio

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

import pgfencing
import pgfencing.aio
from conftest import conninfo, unique


def run(coro):
    return asyncio.run(coro)


def test_async_lease_life(ledger, admin):
    name = unique("aio")

    async def main():
        async with AsyncConnectionPool(conninfo(), min_size=2, max_size=4) as pool:
            async with pgfencing.aio.Lease(pool, name, ttl=2.5) as lease:
                assert isinstance(lease.token, int)
                other = pgfencing.aio.Lease(pool, name)
                assert not await other.acquire(blocking=False)
                async with pool.connection() as conn:
                    async with lease.transaction(conn):
                        await conn.execute("SELECT pg_sleep(5.5)")
                        await conn.execute(f"UPDATE {ledger} SET amount = 9 WHERE id = 1")
                assert not lease.lost.is_set()
                assert await lease.owned()
                return lease.token

    token = run(main())
    assert admin.execute(f"SELECT amount, fence FROM {ledger} WHERE id = 1").fetchone() == (9, token)
    assert admin.execute("SELECT count(*) FROM fencing.leases WHERE name = %s", (name,)).fetchone() == (0,)


def test_async_lost_on_break_and_errors(ledger, admin):
    name = unique("aio-break")

    async def main():
        conn = await psycopg.AsyncConnection.connect(conninfo())
        try:
            lease = pgfencing.aio.Lease(conn, name, ttl=2.5, raise_on_release_error=False)
            async with lease:
                admin.execute("SELECT fencing.break_lease(%s)", (name,))
                await asyncio.wait_for(lease.lost.wait(), 8)
                with pytest.raises(pgfencing.LeaseLost):
                    async with lease.transaction(conn):
                        pass
            auto = await psycopg.AsyncConnection.connect(conninfo(), autocommit=True)
            async with auto:
                with pytest.raises(pgfencing.NotInTransaction):
                    await pgfencing.aio.try_lock(auto, name)
                async with auto.transaction():
                    assert await pgfencing.aio.try_lock(auto, name) > 0
                    with pytest.raises(pgfencing.Busy):
                        async with pgfencing.aio.Lease(conninfo(), name):
                            pass
        finally:
            await conn.close()

    run(main())


def test_async_stale_write_is_stale_token(ledger, admin):
    name = unique("aio-stale")

    async def main():
        async with await psycopg.AsyncConnection.connect(conninfo()) as conn:
            lease = pgfencing.aio.Lease(conninfo(), name, ttl=30)
            async with lease:
                admin.execute(f"UPDATE {ledger} SET fence = fencing.next_token() WHERE id = 2")
                with pytest.raises(pgfencing.StaleToken):
                    async with lease.transaction(conn):
                        await conn.execute(f"UPDATE {ledger} SET amount = 5 WHERE id = 2")
                assert lease.lost.is_set()

    run(main())
