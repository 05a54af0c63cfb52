# Copyright (c) 2026, the fencing developers
#
# What users of redis-py's Lock, Curator and ShedLock expect of a lease:
# acquire() honours the constructor's timeout; extend(), reacquire();
# cancel() of a waiting acquire (a thread-safe one, and the asyncio task's
# cancel), which never leaves the lease taken; on_suspended/on_resumed
# around a failing renewal; at_most and at_least; and the round trips:
# BEGIN with use_lease in one, a job that fits one batch in one
# (Lease.once), which the server's idle limit still ends when it stalls.

import asyncio
import threading
import time

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

import pgfencing
import pgfencing.aio
from conftest import conninfo, unique, wait_for


def held_by(admin, name):
    row = admin.execute("SELECT token FROM fencing.leases WHERE name = fencing.normalize_name(%s)",
                        (name,)).fetchone()
    return row and row[0]


def seconds_left(admin, name):
    return float(admin.execute(
        "SELECT extract(epoch FROM expires_at - clock_timestamp()) FROM fencing.leases"
        " WHERE name = fencing.normalize_name(%s)", (name,)).fetchone()[0])


def waiting_acquires(admin, name):
    return admin.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query LIKE %s"
        " AND pid <> pg_backend_pid()",
        (f"%acquire_lease('{name}'%",)).fetchone()[0]


def in_thread(fn):
    """Run fn in a thread; its result or exception in a list once done."""
    out = []

    def run():
        try:
            out.append(("ok", fn()))
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            out.append(("raised", exc))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def test_acquire_honours_the_constructors_timeout():
    name = unique("ctor-timeout")
    with pgfencing.Lease(conninfo(), name):
        other = pgfencing.Lease(conninfo(), name, timeout=0.5)
        thread, out = in_thread(other.acquire)
        thread.join(10)
        assert out == [("ok", False)], "acquire() did not stop after the constructor's timeout"


def test_extend_and_reacquire(admin):
    name = unique("extend")
    with pgfencing.Lease(conninfo(), name, ttl=5, renew=False) as lease:
        before = seconds_left(admin, name)
        lease.extend(10)
        assert before + 9 <= seconds_left(admin, name) <= before + 10.5
        lease.extend(3, replace_ttl=True)
        assert 2 <= seconds_left(admin, name) <= 3
        lease.reacquire()
        assert 4 <= seconds_left(admin, name) <= 5
        assert not lease.lost.is_set()


def test_cancel_stops_a_waiting_acquire(admin):
    name = unique("cancel")
    with pgfencing.Lease(conninfo(), name):
        waiter = pgfencing.Lease(conninfo(), name, timeout=None)
        thread, out = in_thread(waiter.acquire)
        wait_for(lambda: waiting_acquires(admin, name) == 1, 10, "the acquire waiting in the server")
        waiter.cancel()
        thread.join(10)
        assert len(out) == 1 and isinstance(out[0][1], pgfencing.Cancelled), out
        assert isinstance(out[0][1].__cause__, psycopg.errors.QueryCanceled)
        assert waiting_acquires(admin, name) == 0
        assert waiter.token is None
    assert held_by(admin, name) is None


def test_a_cancel_that_comes_after_the_grant_releases_it(admin, monkeypatch):
    """The server granted the lease before the cancel reached it: the
    acquire must not leave it taken."""
    name = unique("cancel-late")
    lease = pgfencing.Lease(conninfo(), name)
    real_one = pgfencing.lease._one

    def granted_then_cancelled(conn, query):
        value = real_one(conn, query)
        if "acquire_lease" in query:
            canceller = threading.Thread(target=lease.cancel)
            canceller.start()
            canceller.join()
        return value

    monkeypatch.setattr(pgfencing.lease, "_one", granted_then_cancelled)
    with pytest.raises(pgfencing.Cancelled):
        lease.acquire()
    assert held_by(admin, name) is None
    monkeypatch.undo()
    assert lease.acquire(blocking=False), "the handle cannot acquire again after a cancel"
    lease.release()


def test_a_cancel_that_comes_before_the_statement_reached_the_server_stops_it(admin, monkeypatch):
    """cancel() comes while the acquisition's statement is still on its
    way: a cancel request that reaches the session before it is ignored
    there, and the statement then waits in the server all the same.  The
    acquire must still end, holding nothing."""
    name = unique("cancel-early")
    real_one = pgfencing.lease._one
    reached = threading.Event()
    gate = threading.Event()

    def on_its_way(conn, query):
        if "acquire_lease" in query:
            reached.set()
            gate.wait(30)
        return real_one(conn, query)

    with pgfencing.Lease(conninfo(), name):
        monkeypatch.setattr(pgfencing.lease, "_one", on_its_way)
        waiter = pgfencing.Lease(conninfo(), name, timeout=None)
        thread, out = in_thread(waiter.acquire)
        assert reached.wait(10)
        waiter.cancel()
        gate.set()
        thread.join(10)
        if thread.is_alive():
            admin.execute("SELECT pg_cancel_backend(pid) FROM pg_stat_activity"
                          " WHERE pid <> pg_backend_pid() AND query LIKE %s", (f"%acquire_lease('{name}'%",))
            thread.join(10)
            pytest.fail("a cancel that came before the statement reached the server did not stop the acquire")
        assert len(out) == 1 and isinstance(out[0][1], pgfencing.Cancelled), out
        assert waiting_acquires(admin, name) == 0
        assert waiter.token is None
    assert held_by(admin, name) is None


def test_cancelling_the_task_of_an_async_acquire(admin):
    name = unique("cancel-aio")

    async def main():
        async with AsyncConnectionPool(conninfo(), min_size=1, max_size=2) as pool:
            async with pgfencing.aio.Lease(pool, name):
                waiter = pgfencing.aio.Lease(pool, name, timeout=None)
                task = asyncio.ensure_future(waiter.acquire())
                until = time.monotonic() + 10
                while waiting_acquires(admin, name) == 0:
                    assert time.monotonic() < until, "the acquire is not waiting in the server"
                    await asyncio.sleep(0.05)
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                assert waiting_acquires(admin, name) == 0
                assert waiter.token is None
            # the pool's connection is usable again, and the name free
            assert await waiter.acquire(blocking=False)
            await waiter.release()

    asyncio.run(main())
    assert held_by(admin, name) is None


def test_cancelling_an_async_acquire_before_its_statement_reached_the_server(admin, monkeypatch):
    """The task is cancelled while the acquisition's statement is still on
    its way: a cancel request that reaches the session before it is
    ignored there, and the statement then waits in the server all the
    same.  The acquire must still end, holding nothing."""
    name = unique("cancel-aio-early")
    real_one = pgfencing.aio._one

    async def main():
        reached = asyncio.Event()
        gate = asyncio.Event()

        async def on_its_way(conn, query):
            if "acquire_lease" in query:
                reached.set()
                await gate.wait()
            return await real_one(conn, query)

        monkeypatch.setattr(pgfencing.aio, "_one", on_its_way)
        async with AsyncConnectionPool(conninfo(), min_size=1, max_size=2) as pool:
            waiter = pgfencing.aio.Lease(pool, name, timeout=None)
            task = asyncio.ensure_future(waiter.acquire())
            await asyncio.wait_for(reached.wait(), 10)
            task.cancel()
            await asyncio.sleep(0.5)
            gate.set()
            try:
                with pytest.raises(asyncio.CancelledError):
                    await asyncio.wait_for(asyncio.shield(task), 10)
            finally:
                admin.execute("SELECT pg_cancel_backend(pid) FROM pg_stat_activity"
                              " WHERE pid <> pg_backend_pid() AND query LIKE %s", (f"%acquire_lease('{name}'%",))
            assert waiting_acquires(admin, name) == 0
            assert waiter.token is None

    with pgfencing.Lease(conninfo(), name):
        asyncio.run(main())
    assert held_by(admin, name) is None


def test_a_failing_renewal_suspends_and_the_next_one_resumes(admin):
    name = unique("suspend")
    app = unique("suspender")
    events = []
    suspended = threading.Event()
    resumed = threading.Event()

    def on_suspended(lease, err):
        events.append(("suspended", type(err).__name__, lease.lost.is_set()))
        suspended.set()

    def on_resumed(lease):
        events.append(("resumed", lease.suspended))
        resumed.set()

    lease = pgfencing.Lease(conninfo(application_name=app), name, ttl=6,
                            on_suspended=on_suspended, on_resumed=on_resumed)
    with lease:
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
                      (app,))
        assert suspended.wait(6), "no suspension after the renewal's connection was ended"
        assert resumed.wait(6), "no resumption"
        assert not lease.lost.is_set()
        assert lease.owned()
    assert events == [("suspended", "OperationalError", False), ("resumed", False)]


def test_at_most_caps_the_lease_however_often_it_is_renewed(admin):
    name = unique("at-most")
    lease = pgfencing.Lease(conninfo(), name, ttl=1.5, at_most=3, raise_on_release_error=False)
    started = time.monotonic()
    with lease, psycopg.connect(conninfo()) as conn:
        spans = []
        while not lease.lost.is_set() and time.monotonic() - started < 8:
            row = admin.execute("SELECT extract(epoch FROM expires_at - acquired_at) FROM fencing.leases"
                                " WHERE name = %s AND token = %s", (name, lease.token)).fetchone()
            if row:
                spans.append(float(row[0]))
            if time.monotonic() - started > 2:
                try:
                    with lease.transaction(conn):   # a batch near the ceiling renews only to it
                        pass
                except pgfencing.LeaseLost:
                    pass
            time.sleep(0.2)
        lost_after = time.monotonic() - started
    assert lease.lost.is_set()
    assert 2.5 <= lost_after <= 4.5, f"lost {lost_after:.1f} s after the acquisition"
    assert max(spans) <= 3.1, f"the server's lease lasted {max(spans):.2f} s past its acquisition"


def test_at_least_keeps_the_name_taken_after_an_early_release(admin):
    name = unique("at-least")
    released_at = None
    with pgfencing.Lease(conninfo(), name, ttl=30, at_least=2):
        pass
    released_at = time.monotonic()
    assert held_by(admin, name) is not None, "the name was freed at once"
    assert 1 <= seconds_left(admin, name) <= 2
    other = pgfencing.Lease(conninfo(), name, timeout=10)
    assert other.acquire()
    assert time.monotonic() - released_at >= 1
    other.release()
    # a release after at_least frees the name at once
    late = pgfencing.Lease(conninfo(), name, ttl=30, at_least=0.2)
    assert late.acquire()
    time.sleep(0.3)
    late.release()
    assert held_by(admin, name) is None


def test_a_batch_sends_begin_and_use_lease_in_one_round_trip(ledger, stalling_proxy):
    name = unique("one-rt")
    with pgfencing.Lease(conninfo(), name) as lease, \
            psycopg.connect(stalling_proxy.conninfo()) as conn:
        before = stalling_proxy.ready
        with lease.transaction(conn):
            conn.execute(f"UPDATE {ledger} SET amount = 3 WHERE id = 1")
        # BEGIN + use_lease, the UPDATE, COMMIT
        assert stalling_proxy.ready - before == 3


def test_once_runs_the_job_in_one_round_trip(ledger, admin, stalling_proxy):
    name = unique("once")
    with psycopg.connect(stalling_proxy.conninfo()) as conn:
        lease = pgfencing.Lease(conn, name, ttl=30)
        before = stalling_proxy.ready
        with lease.once(conn):
            cur = conn.execute(f"UPDATE {ledger} SET amount = 4 WHERE id = 1")
        assert stalling_proxy.ready - before == 1
        assert cur.rowcount == 1
        assert lease.token is None
    amount, fence = admin.execute(f"SELECT amount, fence FROM {ledger} WHERE id = 1").fetchone()
    assert amount == 4
    assert fence == admin.execute("SELECT fence FROM fencing.resource_fences"
                                  " WHERE resource = fencing.normalize_name(%s)", (name,)).fetchone()[0]
    assert held_by(admin, name) is None


def test_once_is_busy_when_the_name_is_held_and_releases_after_a_failed_job(ledger, admin):
    name = unique("once-busy")
    with psycopg.connect(conninfo()) as conn:
        with pgfencing.Lease(conninfo(), name):
            with pytest.raises(pgfencing.Busy):
                with pgfencing.Lease(conn, name).once(conn):
                    conn.execute(f"UPDATE {ledger} SET amount = 5 WHERE id = 1")
        with pytest.raises(psycopg.errors.DivisionByZero):
            with pgfencing.Lease(conn, name).once(conn):
                conn.execute(f"UPDATE {ledger} SET amount = 6 WHERE id = 1")
                conn.execute("SELECT 1/0")
        assert held_by(admin, name) is None
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert admin.execute(f"SELECT amount FROM {ledger} WHERE id = 1").fetchone() == (0,)


def test_a_once_job_that_stalls_past_the_ttl_is_ended_by_the_server(ledger, admin):
    """once() sends its statements as they come, in pipeline mode, and its
    Sync at the end: a job that stalls in between holds a batch open
    without a Sync, which the server's idle limit ends all the same (D1)."""
    name = unique("once-stall")
    with psycopg.connect(conninfo()) as conn:
        with pytest.raises(pgfencing.LeaseLost, match="idled in its transaction past|ran past the lease's ttl"):
            with pgfencing.Lease(conn, name, ttl=1).once(conn):
                conn.execute(f"UPDATE {ledger} SET amount = 7 WHERE id = 1")
                time.sleep(3)
    assert admin.execute(f"SELECT amount FROM {ledger} WHERE id = 1").fetchone() == (0,)
