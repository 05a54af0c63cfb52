# Copyright (c) 2026, the fencing developers
#
# The guide's three tests, through pgfencing, with real processes: the
# concurrency test (N >= 10 racers, one winner), the expiry test (the
# holder stopped with SIGSTOP past its ttl: its next use() raises
# LeaseLost, its write is rejected with StaleToken) and the release test
# (a stale release frees nobody else's lease).

import os
import signal
import threading
import time

import psycopg
import pytest

import pgfencing
from conftest import conninfo, unique

RACERS = 12


def test_race_of_twelve_processes_has_one_winner(workers, admin, ledger):
    name = unique("race")
    racers = [workers() for _ in range(RACERS)]
    for rnd in range(2):
        for w in racers:
            w.send(f"acquire {name} 30")
        answers = [w.read() for w in racers]
        winners = [w for w, a in zip(racers, answers) if a.startswith("granted")]
        assert len(winners) == 1, answers
        assert answers.count("busy") == RACERS - 1, answers
        assert winners[0].ask(f"write {ledger} 1") == "ok"
        assert winners[0].ask("release") == "released"
    amount = admin.execute(f"SELECT amount FROM {ledger} WHERE id = 1").fetchone()[0]
    assert amount == 2


def test_holder_stopped_past_its_ttl_is_fenced_out(workers, admin, ledger):
    name = unique("expiry")
    ttl = 2
    holder = workers()
    answer = holder.ask(f"acquire {name} {ttl}")
    assert answer.startswith("granted"), answer
    old = int(answer.split()[1])
    assert holder.ask(f"write {ledger} 1") == "ok"

    os.kill(holder.proc.pid, signal.SIGSTOP)
    stopped = time.monotonic()
    try:
        newer = pgfencing.Lease(conninfo(), name, ttl=30)
        # waits (in the server, not polling) until the stopped holder's lease expires
        assert newer.acquire(timeout=ttl + 15)
        assert time.monotonic() - stopped >= ttl - 1.0
        assert newer.token > old
        with psycopg.connect(conninfo()) as conn, newer.transaction(conn):
            conn.execute(f"UPDATE {ledger} SET amount = amount + 100 WHERE id = 1")
    finally:
        os.kill(holder.proc.pid, signal.SIGCONT)

    assert holder.ask(f"write {ledger} 1") == "LeaseLost"
    assert holder.ask(f"write_old {ledger} 1") == "StaleToken"
    assert holder.ask("lost") == "yes"
    assert holder.ask("release") == "LeaseLost"
    row = admin.execute(f"SELECT amount, fence FROM {ledger} WHERE id = 1").fetchone()
    assert row == (101, newer.token)
    assert newer.owned()
    newer.release()


def test_stale_release_frees_nobody_elses_lease(admin):
    name = unique("release")
    first = pgfencing.Lease(conninfo(), name, ttl=1, renew=False)
    assert first.acquire(blocking=False)
    second = pgfencing.Lease(conninfo(), name, ttl=30)
    assert second.acquire(timeout=10)
    try:
        assert second.token > first.token
        with pytest.raises(pgfencing.LeaseLost):
            first.release()
        assert second.owned()
        third = pgfencing.Lease(conninfo(), name, ttl=30)
        assert not third.acquire(blocking=False)
        held = admin.execute("SELECT token FROM fencing.leases WHERE name = %s", (name,)).fetchone()
        assert held == (second.token,)
    finally:
        second.release()
    assert third.acquire(blocking=False)
    third.release()


def test_release_hands_the_name_on_to_a_waiter_at_once():
    name = unique("handover")
    first = pgfencing.Lease(conninfo(), name, ttl=60)
    assert first.acquire(blocking=False)
    waiter = pgfencing.Lease(conninfo(), name, ttl=60)
    result = {}

    def wait():
        result["granted"] = waiter.acquire(timeout=30)
        result["at"] = time.monotonic()

    thread = threading.Thread(target=wait)
    thread.start()
    time.sleep(0.5)
    assert thread.is_alive(), "the waiter was granted a held lease"
    released = time.monotonic()
    first.release()
    thread.join(35)
    assert result["granted"]
    # a ttl of 60 s: only the release can have let it in this soon
    assert result["at"] - released < 10
    assert waiter.token > 0
    waiter.release()
