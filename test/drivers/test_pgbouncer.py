# Copyright (c) 2026, the fencing developers
#
# test_pgbouncer.py -- psycopg 3 through PgBouncer in transaction pooling
# mode, where a server connection serves one client's transaction and then
# another's.  Pool "drivers" has 20 server connections, pool "single" one,
# so that two clients of "single" are certain to meet on one server
# connection.  Protocol-level prepared statements are not used
# (prepare_threshold=None): PgBouncer before 1.21 cannot route them.

import psycopg
import pytest

from conftest import bouncer_conninfo, connect, unique
from test_psycopg import assert_one_winner, collect_notices, run_race

POOLED = {"prepare_threshold": None}


def pooled(dbname="drivers", **kwargs):
    return psycopg.connect(bouncer_conninfo(dbname), **POOLED, **kwargs)


def test_race_one_winner_through_the_pool():
    got = run_race(bouncer_conninfo(), ["transaction", "pipeline"], POOLED)
    assert_one_winner(got)


def test_lock_ends_with_the_transaction_on_a_shared_server_connection():
    name = unique("pooled")
    with pooled("single") as a, pooled("single") as b:
        with a.transaction():
            token = a.execute("SELECT fencing.try_lock(%s)", (name,)).fetchone()[0]
            server = a.execute("SELECT pg_backend_pid()").fetchone()[0]
        assert token is not None
        with b.transaction():
            assert b.execute("SELECT pg_backend_pid()").fetchone()[0] == server
            assert b.execute("SELECT fencing.held_token(%s)", (name,)).fetchone()[0] is None
            newer = b.execute("SELECT fencing.try_lock(%s)", (name,)).fetchone()[0]
        assert newer > token


def test_token_of_one_client_never_reaches_another(protected_table):
    table = protected_table
    with pooled("single") as a, pooled("single") as b:
        with a.transaction():
            token = a.execute("SELECT fencing.next_token()").fetchone()[0]
            a.execute("SELECT fencing.set_token(%s)", (token,))
            a.execute(f"UPDATE {table} SET amount = %s WHERE id = 1", (18,))
        # a session-level value left on the server connection
        a.execute("SELECT set_config('fencing.token', %s, false)", (str(token),))
        a.commit()
        with pytest.raises(psycopg.Error) as e:
            with b.transaction():
                b.execute(f"UPDATE {table} SET amount = %s WHERE id = 1", (19,))
        assert e.value.diag.sqlstate == "FN001"
        with b.transaction():
            b.execute("SELECT fencing.set_token(%s)", (token,))
            b.execute(f"UPDATE {table} SET amount = %s WHERE id = 1", (20,))
    with connect() as conn:
        row = conn.execute(f"SELECT amount, fence FROM {table} WHERE id = 1").fetchone()
    assert (int(row[0]), row[1]) == (20, token)


def test_autocommit_warning_through_the_pool():
    with pooled(autocommit=True) as conn:
        notices = collect_notices(conn)
        assert conn.execute("SELECT fencing.try_lock(%s)", (unique("pooled"),)).fetchone()[0]
        assert [(s, c) for s, c, _ in notices] == [("WARNING", "25P01")]


def test_set_token_outside_a_transaction_through_the_pool():
    with pooled(autocommit=True) as conn:
        token = conn.execute("SELECT fencing.next_token()").fetchone()[0]
        with pytest.raises(psycopg.errors.NoActiveSqlTransaction):
            conn.execute("SELECT fencing.set_token(%s)", (token,))
