# Copyright (c) 2026, the fencing developers
#
# The renewal from the background: it keeps a lease while the work
# connection is busy for longer than the ttl (and, without it, the lease is
# lost), it survives losing its own connection, and it stops, sets lost and
# calls on_lost when the lease is broken; a renewal that cannot get
# through loses the lease no later than the server's expiry, also while
# another renewal, sent after it, got through with a shorter ttl.

import asyncio
import contextlib
import threading
import time

import psycopg
import pytest

import pgfencing
import pgfencing.aio
from conftest import conninfo, unique, wait_for

TTL = 2.5
BUSY = 5.5  # over two ttls


def busy_batch(lease, conn, ledger):
    with lease.transaction(conn):
        conn.execute("SELECT pg_sleep(%s)", (BUSY,))
        conn.execute(f"UPDATE {ledger} SET amount = amount + 1 WHERE id = 1")


def test_renewal_keeps_the_lease_while_the_work_connection_is_busy(ledger, admin):
    name = unique("busy")
    with pgfencing.Lease(conninfo(), name, ttl=TTL) as lease, psycopg.connect(conninfo()) as conn:
        busy_batch(lease, conn, ledger)
        assert not lease.lost.is_set()
        renewed = admin.execute(
            "SELECT renewed_at - acquired_at FROM fencing.leases WHERE name = %s AND token = %s",
            (name, lease.token)).fetchone()
        assert renewed is not None and renewed[0].total_seconds() > BUSY - TTL
        # the next batch goes ahead
        with lease.transaction(conn):
            conn.execute(f"UPDATE {ledger} SET amount = amount + 1 WHERE id = 1")
        assert lease.owned()
    assert admin.execute(f"SELECT amount FROM {ledger} WHERE id = 1").fetchone() == (2,)


def test_without_renewal_the_busy_holder_loses_its_lease(ledger):
    name = unique("unrenewed")
    lease = pgfencing.Lease(conninfo(), name, ttl=TTL, renew=False, raise_on_release_error=False)
    with lease, psycopg.connect(conninfo()) as conn:
        busy_batch(lease, conn, ledger)
        with pytest.raises(pgfencing.LeaseLost):
            with lease.transaction(conn):
                conn.execute(f"UPDATE {ledger} SET amount = amount + 1 WHERE id = 1")
        assert lease.lost.is_set()


def test_renewal_survives_losing_its_connection(admin):
    name = unique("reconnect")
    ttl = 3
    with pgfencing.Lease(conninfo(application_name="renewer"), name, ttl=ttl) as lease:
        pids = wait_for(lambda: admin.execute(
            "SELECT array_agg(pid) FROM pg_stat_activity WHERE application_name = 'renewer'"
            " AND pid <> pg_backend_pid()").fetchone()[0], 10, "the renewal's connection")
        for pid in pids:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        time.sleep(2 * ttl)
        assert not lease.lost.is_set()
        assert lease.owned()


def test_a_broken_lease_is_lost_and_calls_on_lost(admin):
    name = unique("break")
    called = threading.Event()
    seen = []

    def on_lost(lease):
        seen.append(lease)
        called.set()

    lease = pgfencing.Lease(conninfo(), name, ttl=TTL, on_lost=on_lost, raise_on_release_error=False)
    with lease, psycopg.connect(conninfo()) as conn:
        admin.execute("SELECT fencing.break_lease(%s)", (name,))
        assert lease.lost.wait(3 * TTL), "the renewal did not notice the break"
        assert called.wait(1) and seen == [lease]
        late = []
        lease.on_lost(late.append)
        assert late == [lease]
        with pytest.raises(pgfencing.LeaseLost):
            lease.use(conn)
        conn.rollback()


def test_a_stalled_renewal_loses_the_lease_by_the_servers_expiry(admin, stalling_proxy):
    """renew(ttl=60) by hand, then the background renewals (ttl NULL) put
    the server's expiry back to the lease's own ttl from each renewal: when
    the network stalls, the lease must be lost within that ttl of the last
    renewal, not 60 s after the manual one."""
    name = unique("stalled")
    ttl = 3
    lost_at = []
    called = threading.Event()

    def on_lost(_):
        lost_at.append(time.monotonic())
        called.set()

    lease = pgfencing.Lease(stalling_proxy.conninfo(), name, ttl=ttl, raise_on_release_error=False,
                            on_lost=on_lost)
    assert lease.acquire(blocking=False)
    try:
        lease.renew(ttl=60)
        wait_for(lambda: admin.execute(
            "SELECT expires_at - now() < interval '10 s' FROM fencing.leases WHERE name = %s",
            (name,)).fetchone()[0], 3 * ttl, "a background renewal with the lease's own ttl")
        stalling_proxy.stall()
        stalled = time.monotonic()
        expiry = admin.execute(
            "SELECT extract(epoch FROM expires_at - clock_timestamp()) FROM fencing.leases WHERE name = %s",
            (name,)).fetchone()[0]
        assert float(expiry) <= ttl
        assert called.wait(ttl + 2), \
            f"not lost {ttl + 2} s after the stall (the server's lease expired {float(expiry):.1f} s after it)"
        assert lost_at[0] - stalled <= ttl + 2
        assert lease.lost.is_set()
    finally:
        stalling_proxy.resume()
        with contextlib.suppress(pgfencing.FencingError):
            lease.release()


def test_a_watchdog_timer_that_fires_early_still_loses_the_lease(monkeypatch, stalling_proxy):
    """A timer may run a little before the monotonic clock reaches the
    moment it was set for.  Here the lease's timers fire 5 ms early: the
    watchdog, set for the deadline while the renewal is stalled, must not
    give up because the deadline has not quite come."""
    real_timer = threading.Timer

    class EarlyTimer(real_timer):
        def __init__(self, interval, function, *args, **kwargs):
            super().__init__(max(0.0, interval - 0.005), function, *args, **kwargs)

    monkeypatch.setattr(pgfencing.lease.threading, "Timer", EarlyTimer)
    name = unique("early")
    lease = pgfencing.Lease(stalling_proxy.conninfo(), name, ttl=2, renew=False,
                            raise_on_release_error=False)
    assert lease.acquire(blocking=False)

    def renew():
        with contextlib.suppress(pgfencing.FencingError):
            lease.renew()

    stalled = threading.Thread(target=renew, daemon=True)
    try:
        stalling_proxy.stall()
        stalled.start()
        assert lease.lost.wait(6), "not lost 6 s after the stall of a lease of 2 s"
    finally:
        stalling_proxy.resume()
        stalled.join(10)
        with contextlib.suppress(pgfencing.FencingError):
            lease.release()


def test_overlapping_renewals_never_hold_the_lease_past_the_servers_expiry(admin, stalling_proxy):
    """renew(ttl=60) is sent and stalls on its way; before its answer, use()
    renews for the lease's own ttl on another connection and gets through.
    Either may be the renewal the server applied last: the handle must
    count the lease as lost once the server let it go and another holder
    took it, not 60 s after the stalled renewal was sent."""
    name = unique("overlap")
    ttl = 2
    lease = pgfencing.Lease(stalling_proxy.conninfo(), name, ttl=ttl, renew=False,
                            raise_on_release_error=False)

    def renew_for_a_minute():
        with contextlib.suppress(pgfencing.FencingError):
            lease.renew(ttl=60)

    stalled = threading.Thread(target=renew_for_a_minute, daemon=True)
    other = None
    assert lease.acquire(blocking=False)
    try:
        stalling_proxy.stall()
        stalled.start()
        assert stalling_proxy.holding.wait(10), "renew(ttl=60) did not reach the proxy"
        with psycopg.connect(conninfo()) as conn:
            with conn.transaction():
                lease.use(conn)
            other = admin.execute("SELECT fencing.acquire_lease(%s, '30 s', '10 s', 'the next holder')",
                                  (name,)).fetchone()[0]
            assert other is not None, "the server kept the lease for longer than use()'s ttl"
            with pytest.raises(pgfencing.LeaseLost):
                with conn.transaction():
                    lease.bind(conn)
        assert lease.lost.is_set()
    finally:
        stalling_proxy.resume()
        stalled.join(10)
        with contextlib.suppress(pgfencing.FencingError):
            lease.release()
        if other is not None:
            admin.execute("SELECT fencing.release_lease(%s, %s)", (name, other))


def test_async_a_stalled_renewal_loses_the_lease_by_the_servers_expiry(admin, stalling_proxy):
    name = unique("stalled-aio")
    ttl = 3
    back = "SELECT expires_at - now() < interval '10 s' FROM fencing.leases WHERE name = %s"

    async def main():
        lease = pgfencing.aio.Lease(stalling_proxy.conninfo(), name, ttl=ttl, raise_on_release_error=False)
        assert await lease.acquire(blocking=False)
        try:
            await lease.renew(ttl=60)
            until = time.monotonic() + 3 * ttl
            while not admin.execute(back, (name,)).fetchone()[0]:
                assert time.monotonic() < until, "no background renewal with the lease's own ttl"
                await asyncio.sleep(0.05)
            stalling_proxy.stall()
            await asyncio.wait_for(lease.lost.wait(), ttl + 2)
        finally:
            stalling_proxy.resume()
            with contextlib.suppress(Exception):  # the stalled renewal's connection may be unusable
                await lease.release()

    asyncio.run(main())
