# Copyright (c) 2026, the fencing developers
#
# The client error rule (doc/guarantees.md, C1): once a lease is lost or
# past its deadline, every error an operation of it meets reaches the
# application as LeaseLost, with the driver's error as __cause__, and only
# after the loss has run: the flag (lost.is_set()), the renewal stopped,
# the on_lost callbacks, and last the event behind lost.wait().  A holder
# frozen inside a batch (SIGSTOP) past its ttl, whose session the server
# ended and whose name another worker took, gets LeaseLost when it wakes;
# so does a batch that idled past the ttl while the lease was still live.

import os
import signal
import threading
import time

import psycopg
import pytest

import pgfencing
from conftest import conninfo, unique, wait_for


def test_a_holder_frozen_inside_a_batch_gets_lease_lost_when_it_wakes(workers, ledger, admin):
    name = unique("frozen")
    a = workers()
    b = workers()
    assert a.ask(f"acquire {name} 2").startswith("granted")
    a.send(f"frozen {ledger} 1")
    assert a.read() == "paused"
    os.kill(a.proc.pid, signal.SIGSTOP)
    try:
        # B waits in the server until A's lease lapses, and its batch gets
        # past A's fence once the server ended A's idle batch
        assert b.ask(f"acquire_wait {name} 30 30").startswith("granted")
        assert b.ask(f"write {ledger} 2") == "ok"
    finally:
        a.send("go")  # waits in the pipe for A to read it
        os.kill(a.proc.pid, signal.SIGCONT)
    assert a.read() == ("LeaseLost lost=yes fired=yes callbacks=1 "
                        "callback_saw=flag:yes/event:no cause=psycopg")
    assert admin.execute(f"SELECT amount FROM {ledger} ORDER BY id").fetchall() == [(0,), (1,)]
    assert b.ask("release") == "released"


def test_a_batch_that_idles_past_the_ttl_is_lease_lost_while_the_lease_lives(ledger, admin):
    """The renewal keeps the lease, but the server ends the batch's session
    one ttl after its last statement: the batch idled past the ttl."""
    name = unique("idled")
    lease = pgfencing.Lease(conninfo(), name, ttl=1.5, raise_on_release_error=False)
    with lease, psycopg.connect(conninfo()) as conn:
        with pytest.raises(pgfencing.LeaseLost, match="idled in its transaction past") as raised:
            with lease.transaction(conn):
                conn.execute(f"UPDATE {ledger} SET amount = 5 WHERE id = 1")
                time.sleep(4)
                conn.execute(f"UPDATE {ledger} SET amount = 6 WHERE id = 1")
        assert isinstance(raised.value.__cause__, psycopg.Error)
        assert lease.lost.is_set()
        assert lease.lost.wait(0)
        assert lease.owned() is False  # a lost handle owns nothing
    assert admin.execute(f"SELECT amount FROM {ledger} WHERE id = 1").fetchone() == (0,)


def test_any_error_of_a_batch_past_the_deadline_is_lease_lost(ledger):
    """No renewal: the batch works past the ttl inside one statement (it is
    not idle, so the server does not end it), and its next statement
    fails.  The lease is past its deadline: LeaseLost, the division by zero
    as its cause."""
    name = unique("past-deadline")
    lease = pgfencing.Lease(conninfo(), name, ttl=1, renew=False, raise_on_release_error=False)
    with lease, psycopg.connect(conninfo()) as conn:
        with pytest.raises(pgfencing.LeaseLost) as raised:
            with lease.transaction(conn):
                conn.execute("SELECT pg_sleep(1.5)")
                conn.execute("SELECT 1/0")
        assert isinstance(raised.value.__cause__, psycopg.errors.DivisionByZero)
        assert lease.lost.is_set()
        with pytest.raises(pgfencing.LeaseLost):
            lease.renew()


def test_the_loss_runs_flag_callbacks_then_the_event(admin):
    """Whoever wakes on lost.wait() sees what every callback did, also when
    one of them raised; the callbacks see the flag set and the event not
    yet."""
    name = unique("order")
    done = []
    woke_with = []
    seen = []

    def slow(lease):
        seen.append((lease.lost.is_set(), threading.Event.wait(lease.lost, 0)))
        time.sleep(0.5)
        done.append("slow")

    def failing(lease):
        raise RuntimeError("a callback that fails")

    def last(lease):
        done.append("last")

    lease = pgfencing.Lease(conninfo(), name, ttl=1.5, on_lost=slow, raise_on_release_error=False)
    lease.on_lost(failing)
    lease.on_lost(last)
    with lease:
        waiter = threading.Thread(target=lambda: (lease.lost.wait(10), woke_with.append(list(done))))
        waiter.start()
        admin.execute("SELECT fencing.break_lease(%s)", (name,))
        waiter.join(10)
    assert seen == [(True, False)]
    assert woke_with == [["slow", "last"]]


def test_a_stale_write_loses_the_lease_and_tells_the_callbacks(ledger, admin):
    name = unique("stale-lost")
    called = []
    lease = pgfencing.Lease(conninfo(), name, ttl=30, on_lost=called.append, raise_on_release_error=False)
    with lease, psycopg.connect(conninfo()) as conn:
        admin.execute(f"UPDATE {ledger} SET fence = fencing.next_token() WHERE id = 2")
        with pytest.raises(pgfencing.StaleToken):
            with lease.transaction(conn):
                conn.execute(f"UPDATE {ledger} SET amount = 9 WHERE id = 2")
        assert called == [lease]
        assert lease.lost.wait(0)
        # the next batch is refused before anything is sent: the connection
        # is closed, and the answer is still LeaseLost, not a driver error
        conn.close()
        with pytest.raises(pgfencing.LeaseLost, match="newer holder") as raised:
            lease.use(conn)
        assert raised.value.__cause__ is not None and not isinstance(raised.value.__cause__, psycopg.Error)


def test_the_renewal_runs_every_third_of_the_ttl(admin):
    """A ttl of 6 s: a renewal comes about 2 s after the grant, and another
    about 4 s after it; one every ttl would come first at 6 s, when the
    lease has expired."""
    name = unique("cadence")
    with pgfencing.Lease(conninfo(), name, ttl=6):
        time.sleep(4)
        renewed = admin.execute(
            "SELECT extract(epoch FROM renewed_at - acquired_at) FROM fencing.leases WHERE name = %s",
            (name,)).fetchone()[0]
    assert float(renewed) >= 1.5, f"no renewal in the first 4 s of a lease of 6 s (last at {renewed} s)"
