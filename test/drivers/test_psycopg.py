# Copyright (c) 2026, the fencing developers
#
# test_psycopg.py -- the guarantees through psycopg 3, straight to the
# server: every call carries bound parameters (the extended protocol,
# unnamed statements; named ones with prepare=True), in autocommit, in
# transactions, in pipeline mode, and through server-side cursors.

import multiprocessing

import psycopg
import pytest

from conftest import connect, server_conninfo, unique

RACERS = 12


# --- L4: of N racers, exactly one wins ------------------------------------------


def race_one(conninfo, name, mode, barrier, results, connect_kwargs):
    """One racer: take the lock in a transaction the way mode says, report
    the token (or None), and hold the transaction until every racer has
    tried."""
    try:
        with psycopg.connect(conninfo, **connect_kwargs) as conn:
            if mode == "pipeline":
                with conn.pipeline(), conn.transaction():
                    token = conn.execute("SELECT fencing.try_lock(%s)", (name,)).fetchone()[0]
                    results.put(token)
                    barrier.wait(60)
            else:
                with conn.transaction():
                    token = conn.execute(
                        "SELECT fencing.try_lock(%s)", (name,), prepare=(mode == "prepared")
                    ).fetchone()[0]
                    results.put(token)
                    barrier.wait(60)
    except Exception as e:  # the parent reports it
        results.put(f"error: {e!r}")


def run_race(conninfo, modes, connect_kwargs=None):
    """RACERS processes race for one name under several spellings; returns
    what each got."""
    base = unique("race")
    spellings = [base, f"  {base.upper()}  ", base.title(), f"{base}\u3000"]
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(RACERS)
    results = ctx.Queue()
    procs = [
        ctx.Process(
            target=race_one,
            args=(conninfo, spellings[i % len(spellings)], modes[i % len(modes)],
                  barrier, results, connect_kwargs or {}),
        )
        for i in range(RACERS)
    ]
    for p in procs:
        p.start()
    got = [results.get(timeout=90) for _ in procs]
    for p in procs:
        p.join(60)
    return got


def assert_one_winner(got):
    errors = [g for g in got if isinstance(g, str)]
    assert errors == []
    winners = [g for g in got if g is not None]
    assert len(got) == RACERS
    assert len(winners) == 1, f"tokens: {got}"


def test_race_one_winner_through_transactions_prepared_and_pipelines():
    got = run_race(server_conninfo(), ["transaction", "prepared", "pipeline"])
    assert_one_winner(got)


# --- F1, F2: FN001 on the driver's error object -----------------------------------


def test_stale_update_is_rejected_with_fn001(protected_table):
    name = unique("fence")
    table = protected_table
    with connect() as old, connect() as new:
        with old.transaction():
            t_old = old.execute("SELECT fencing.try_lock(%s)", (name,)).fetchone()[0]
        with new.transaction():
            t_new = new.execute("SELECT fencing.try_lock(%s)", (name,)).fetchone()[0]
            new.execute(f"UPDATE {table} SET amount = %s, fence = %s WHERE id = 1", (2, t_new))
        assert t_new > t_old

        # F1: a token below the row's fence, as a bound parameter
        with pytest.raises(psycopg.Error) as e:
            with old.transaction():
                old.execute(f"UPDATE {table} SET amount = %s, fence = %s WHERE id = 1", (3, t_old))
        assert e.value.diag.sqlstate == "FN001"
        assert e.value.diag.table_name == table
        assert str(t_old) in e.value.diag.message_primary

        # the same through a named statement
        with pytest.raises(psycopg.Error) as e:
            with old.transaction():
                old.execute(
                    f"UPDATE {table} SET amount = %s, fence = %s WHERE id = 1", (3, t_old),
                    prepare=True,
                )
        assert e.value.diag.sqlstate == "FN001"

        # F2: no token at all
        with pytest.raises(psycopg.Error) as e:
            with old.transaction():
                old.execute(f"UPDATE {table} SET amount = %s WHERE id = 1", (4,))
        assert e.value.diag.sqlstate == "FN001"

        row = new.execute(f"SELECT amount, fence FROM {table} WHERE id = 1").fetchone()
        assert (int(row[0]), row[1]) == (2, t_new)


def test_stale_write_in_a_pipeline_is_rejected_with_fn001(protected_table):
    table = protected_table
    with connect() as conn:
        with pytest.raises(psycopg.Error) as e:
            with conn.pipeline(), conn.transaction():
                conn.execute(f"UPDATE {table} SET amount = %s, fence = %s WHERE id = 1", (5, 1))
                conn.execute(f"UPDATE {table} SET amount = %s WHERE id = 1", (6,))
        assert e.value.diag.sqlstate == "FN001"
        with pytest.raises(psycopg.Error) as e:
            with conn.pipeline(), conn.transaction():
                conn.execute(f"DELETE FROM {table} WHERE id = %s", (1,))
        assert e.value.diag.sqlstate == "FN001"
        assert conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0] == 1


# --- set_token: fencing.token from a bound parameter --------------------------------


def test_set_token_stamps_like_set_local(protected_table):
    table = protected_table
    name = unique("set-token")
    with connect() as conn:
        with conn.transaction():
            token = conn.execute("SELECT fencing.try_lock(%s)", (name,)).fetchone()[0]
            assert conn.execute("SELECT fencing.set_token(%s)", (token,)).fetchone()[0] == token
            assert conn.execute("SELECT current_setting('fencing.token')").fetchone()[0] == str(token)
            conn.execute(f"UPDATE {table} SET amount = %s WHERE id = 1", (7,))
            conn.execute(f"INSERT INTO {table} (id, amount) VALUES (%s, %s)", (2, 8))
        fences = conn.execute(f"SELECT id, fence FROM {table} ORDER BY id").fetchall()
        assert fences == [(1, token), (2, token)]

        # F6: it counted only in that transaction
        with pytest.raises(psycopg.Error) as e:
            with conn.transaction():
                conn.execute(f"UPDATE {table} SET amount = %s WHERE id = 1", (9,))
        assert e.value.diag.sqlstate == "FN001"

        # a named statement, and DELETE checked against it (F3)
        with conn.transaction():
            newer = conn.execute("SELECT fencing.try_lock(%s)", (name,)).fetchone()[0]
            conn.execute("SELECT fencing.set_token(%s)", (newer,), prepare=True)
            conn.execute(f"DELETE FROM {table} WHERE id = %s", (2,))
            conn.execute(f"UPDATE {table} SET amount = %s WHERE id = 1", (10,))
        assert conn.execute(f"SELECT id, fence FROM {table}").fetchall() == [(1, newer)]
        # a stale token set this way is rejected like any other
        with pytest.raises(psycopg.Error) as e:
            with conn.transaction():
                conn.execute("SELECT fencing.set_token(%s)", (token,), prepare=True)
                conn.execute(f"UPDATE {table} SET amount = %s WHERE id = 1", (11,))
        assert e.value.diag.sqlstate == "FN001"


def test_set_token_follows_savepoints_like_set_local(protected_table):
    table = protected_table
    with connect() as conn:
        with pytest.raises(psycopg.Error) as e:
            with conn.transaction():
                token = conn.execute("SELECT fencing.next_token()").fetchone()[0]
                with pytest.raises(psycopg.errors.DivisionByZero):
                    with conn.transaction():
                        conn.execute("SELECT fencing.set_token(%s)", (token,))
                        conn.execute("SELECT 1 / 0")
                # rolled back with its savepoint: no token any more
                assert conn.execute("SELECT current_setting('fencing.token')").fetchone()[0] == ""
                conn.execute(f"UPDATE {table} SET amount = %s WHERE id = 1", (11,))
        assert e.value.diag.sqlstate == "FN001"


def test_set_token_in_a_pipeline(protected_table):
    table = protected_table
    with connect() as conn:
        token = conn.execute("SELECT fencing.next_token()").fetchone()[0]
        conn.commit()
        with conn.pipeline(), conn.transaction():
            conn.execute("SELECT fencing.set_token(%s)", (token,))
            conn.execute(f"UPDATE {table} SET amount = %s WHERE id = 1", (12,))
        assert conn.execute(f"SELECT fence FROM {table} WHERE id = 1").fetchone()[0] == token


@pytest.mark.parametrize(
    "value, sqlstate",
    [(0, "22023"), (-1, "22023"), (None, "22004"), ("latest + 1", "22023")],
)
def test_set_token_refuses_what_is_not_an_issued_token(value, sqlstate):
    with connect() as conn:
        if value == "latest + 1":
            value = conn.execute("SELECT fencing.next_token()").fetchone()[0] + 1000000
        with pytest.raises(psycopg.Error) as e:
            with conn.transaction():
                conn.execute("SELECT fencing.set_token(%s::bigint)", (value,))
        assert e.value.diag.sqlstate == sqlstate


def test_set_token_outside_a_transaction_block_is_an_error():
    with connect(autocommit=True) as conn:
        token = conn.execute("SELECT fencing.next_token()").fetchone()[0]
        for prepare in (False, True):
            with pytest.raises(psycopg.errors.NoActiveSqlTransaction) as e:
                conn.execute("SELECT fencing.set_token(%s)", (token,), prepare=prepare)
            assert e.value.diag.sqlstate == "25P01"
        with pytest.raises(psycopg.errors.NoActiveSqlTransaction):
            conn.execute("SELECT fencing.set_token(fencing.latest_token())")
        # allowed where SET LOCAL is: in a DO block, and in an implicit
        # transaction block of several statements
        conn.execute("DO $$ BEGIN PERFORM fencing.set_token(fencing.latest_token()); END $$")
        conn.execute("SELECT fencing.set_token(fencing.latest_token()); SELECT 1")


# --- 25P01: the autocommit warning reaches the notice handler ------------------------


def collect_notices(conn):
    notices = []
    conn.add_notice_handler(
        lambda d: notices.append((d.severity_nonlocalized, d.sqlstate, d.message_primary))
    )
    return notices


LOCK_CALLS = [
    ("SELECT fencing.try_lock(%s)", lambda n: (n,)),
    ("SELECT fencing.lock(%s, %s::interval)", lambda n: (n, "1 second")),
    ("SELECT fencing.lease(%s, %s::interval)", lambda n: (n, "30 seconds")),
    ("SELECT fencing.try_lock_all(%s::text[])", lambda n: ([n, n + "-2"],)),
    ("SELECT fencing.lock_all(%s::text[], %s::interval)", lambda n: ([n, n + "-2"], "1 second")),
    ("SELECT fencing.try_lock_shared(%s)", lambda n: (n,)),
    ("SELECT fencing.lock_shared(%s, %s::interval)", lambda n: (n, "1 second")),
    ("SELECT fencing.try_acquire(%s, %s)", lambda n: (n, 2)),
    ("SELECT fencing.acquire(%s, %s, %s::interval)", lambda n: (n, 2, "1 second")),
]


@pytest.mark.parametrize("prepare", [False, True], ids=["unnamed", "named"])
@pytest.mark.parametrize("sql, args", LOCK_CALLS, ids=[c[0].split("(")[0][15:] for c in LOCK_CALLS])
def test_autocommit_warning_with_bound_parameters(sql, args, prepare):
    name = unique("autocommit")
    with connect(autocommit=True) as conn:
        notices = collect_notices(conn)
        token = conn.execute(sql, args(name), prepare=prepare).fetchone()[0]
        assert token is not None
        assert [(s, c) for s, c, _ in notices] == [("WARNING", "25P01")]
        assert "released at the end of this statement" in notices[0][2]
        assert name in notices[0][2]


def test_autocommit_warning_in_simple_query_and_pipeline():
    with connect(autocommit=True) as conn:
        notices = collect_notices(conn)
        conn.execute(f"SELECT fencing.try_lock('{unique('literal')}')")
        assert [c for _, c, _ in notices] == ["25P01"]
        notices.clear()
        with conn.pipeline():
            conn.execute("SELECT fencing.try_lock(%s)", (unique("pipelined"),))
        assert [c for _, c, _ in notices] == ["25P01"]


def test_no_autocommit_warning_inside_a_transaction_or_a_function():
    with connect(autocommit=True) as conn:
        conn.execute(
            "CREATE OR REPLACE FUNCTION public.take_in_function(name text) RETURNS bigint"
            " LANGUAGE plpgsql AS $$ BEGIN RETURN fencing.try_lock(name); END $$"
        )
        notices = collect_notices(conn)
        with conn.transaction():
            conn.execute("SELECT fencing.try_lock(%s)", (unique("in-transaction"),))
            conn.execute("SELECT fencing.try_lock(%s)", (unique("named"),), prepare=True)
        with conn.pipeline(), conn.transaction():
            conn.execute("SELECT fencing.try_lock(%s)", (unique("pipelined"),))
        conn.execute("SELECT public.take_in_function(%s)", (unique("in-function"),))
        conn.execute("SELECT public.take_in_function(%s)", (unique("in-function"),), prepare=True)
        assert notices == []


# --- a lock taken through a portal fetched in parts, inside a savepoint ----------------


def held_names(admin, prefix):
    return admin.execute(
        "SELECT count(*) FROM fencing.locks WHERE name LIKE %s AND granted",
        (prefix + "%",),
    ).fetchone()[0]


def test_locks_through_a_server_side_cursor_in_a_savepoint(admin):
    prefix = unique("cursor")
    query = "SELECT i, fencing.try_lock(%s || i) FROM generate_series(1, 10) AS i"
    with connect() as conn:
        with conn.transaction():
            # rolled back with the savepoint: the locks its rows took go too
            with conn.transaction(force_rollback=True):
                cur = conn.cursor(name="locks_in_parts")
                cur.execute(query, (prefix + "-a-",))
                first = cur.fetchmany(3)
                assert [r[0] for r in first] == [1, 2, 3]
                # only the rows fetched so far have taken their locks
                assert held_names(admin, prefix + "-a-") == 3
                for i, token in first:
                    assert token is not None
                    held = conn.execute("SELECT fencing.held_token(%s)", (f"{prefix}-a-{i}",))
                    assert held.fetchone()[0] == token
                rest = cur.fetchmany(100)
                assert len(rest) == 7
                assert held_names(admin, prefix + "-a-") == 10
                cur.close()
            assert held_names(admin, prefix + "-a-") == 0
            assert conn.execute("SELECT fencing.held_token(%s)", (prefix + "-a-1",)).fetchone()[0] is None

            # released savepoint: the locks stay until the transaction ends
            with conn.transaction():
                cur = conn.cursor(name="locks_in_parts_2")
                cur.execute(query, (prefix + "-b-",))
                assert len(cur.fetchmany(4)) == 4
                cur.close()
            assert held_names(admin, prefix + "-b-") == 4
            busy = admin.execute("SELECT fencing.try_lock(%s)", (prefix + "-b-2",))
            assert busy.fetchone()[0] is None
        assert held_names(admin, prefix + "-b-") == 0
