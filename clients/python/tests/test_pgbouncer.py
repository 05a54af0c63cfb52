# Copyright (c) 2026, the fencing developers
#
# A lease's whole life through PgBouncer in transaction pooling mode:
# every transaction may run on another server connection, so nothing may
# live in the session (and nothing may be prepared on one).

import psycopg
import pytest
from psycopg_pool import ConnectionPool

import pgfencing
from conftest import bouncer_conninfo, unique


def test_lease_through_pgbouncer(ledger, admin):
    name = unique("bouncer")
    with ConnectionPool(bouncer_conninfo(), min_size=2, max_size=4) as pool:
        with pgfencing.Lease(pool, name, ttl=3) as lease:
            token = lease.token
            for i in range(8):
                with pool.connection() as conn, lease.transaction(conn):
                    conn.execute(f"UPDATE {ledger} SET amount = amount + 1 WHERE id = %s", (1 + i % 2,))
                    assert conn.execute("SELECT current_setting('fencing.token')").fetchone() == (str(lease.token),)
            # after each COMMIT, no session of the pooler keeps the token
            for _ in range(4):
                with pool.connection() as conn:
                    assert conn.execute("SELECT current_setting('fencing.token', true)").fetchone()[0] in (None, "")
                    conn.rollback()
            lease.lost.wait(4)
            assert not lease.lost.is_set()
            other = pgfencing.Lease(bouncer_conninfo(), name)
            assert not other.acquire(blocking=False)
    rows = admin.execute(f"SELECT amount, fence FROM {ledger} ORDER BY id").fetchall()
    assert rows == [(4, token), (4, token)]
    with pgfencing.Lease(bouncer_conninfo(), name) as again:
        assert again.token > token


def test_stale_holder_through_pgbouncer(ledger):
    name = unique("bouncer-stale")
    with psycopg.connect(bouncer_conninfo()) as conn:
        old = pgfencing.Lease(bouncer_conninfo(), name, ttl=1, renew=False, raise_on_release_error=False)
        assert old.acquire(blocking=False)
        newer = pgfencing.Lease(bouncer_conninfo(), name, ttl=30)
        assert newer.acquire(timeout=10)
        with newer.transaction(conn):
            conn.execute(f"UPDATE {ledger} SET amount = 1 WHERE id = 1")
        with pytest.raises(pgfencing.LeaseLost):
            with old.transaction(conn):
                conn.execute(f"UPDATE {ledger} SET amount = 2 WHERE id = 1")
        newer.release()
