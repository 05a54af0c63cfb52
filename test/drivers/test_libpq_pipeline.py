# Copyright (c) 2026, the fencing developers
#
# test_libpq_pipeline.py -- the guarantees through libpq's pipeline mode
# (PQenterPipelineMode), from C: pipeline.c sends the steps each test
# lists, with or without Sync between statements, and prints what came
# back.  FENCING_PIPELINE is the program test/drivers/run.sh built.
#
# What a pipeline's implicit transaction counts as: every statement up to
# the next Sync runs in one transaction, as several statements of one
# simple query do.  When its first statement runs, the server cannot tell
# whether more follow before the Sync, so a lock that statement takes is
# warned about (25P01), and set_token there is refused, as for a lone
# statement; from the second statement on, the statement shares its
# transaction with the ones before it (PostgreSQL 18 calls that an
# implicit transaction block), so neither happens.

import os
import subprocess

import pytest

from conftest import connect, next_token, server_conninfo, unique, wait_for

RACERS = 12


def run_pipeline(*steps, timeout=60):
    """Run pipeline.c with the steps and return its output lines."""
    out = subprocess.run(
        [os.environ["FENCING_PIPELINE"], server_conninfo(), *steps],
        capture_output=True, text=True, timeout=timeout,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


def start_pipeline(*steps, conninfo=None):
    return subprocess.Popen(
        [os.environ["FENCING_PIPELINE"], conninfo or server_conninfo(), *steps],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def results(lines):
    """(status, sqlstate, value) of each statement."""
    return [tuple(line.split(" ", 3)[1:4]) for line in lines if line.startswith("result ")]


def notices(lines):
    """(severity, sqlstate) of each notice."""
    return [tuple(line.split(" ", 3)[1:3]) for line in lines if line.startswith("notice ")]


# --- 25P01 through the pipeline --------------------------------------------------


def test_autocommit_warning_first_statement_unnamed():
    name = unique("pipe")
    lines = run_pipeline(f"SELECT fencing.try_lock($1)|{name}", "sync")
    assert notices(lines) == [("WARNING", "25P01")]
    assert results(lines)[0][0] == "PGRES_TUPLES_OK"
    assert lines[-1] == "done"


def test_autocommit_warning_named_statement():
    name = unique("pipe")
    lines = run_pipeline(
        "prepare:take:SELECT fencing.lease($1, $2)",
        f"execute:take|{name}|30 seconds",
        "sync",
    )
    assert notices(lines) == [("WARNING", "25P01")]
    assert [r[0] for r in results(lines)] == ["PGRES_COMMAND_OK", "PGRES_TUPLES_OK"]


def test_autocommit_warning_once_per_pipeline_transaction_and_again_after_sync():
    a, b = unique("pipe"), unique("pipe")
    lines = run_pipeline(
        f"SELECT fencing.try_lock($1)|{a}", "sync",
        f"SELECT fencing.try_lock($1)|{b}", "sync",
    )
    assert notices(lines) == [("WARNING", "25P01"), ("WARNING", "25P01")]


def test_no_warning_in_an_explicit_transaction():
    name = unique("pipe")
    lines = run_pipeline(
        "BEGIN", f"SELECT fencing.try_lock($1)|{name}",
        f"SELECT fencing.held_token($1)|{name}", "COMMIT", "sync",
    )
    assert notices(lines) == []
    r = results(lines)
    assert r[1][2] == r[2][2] != "null"


def test_later_statements_share_the_pipeline_transaction():
    # not the first statement: the lock lives until the Sync, with the
    # statements around it, and no warning is given
    name = unique("pipe")
    lines = run_pipeline(
        "SELECT 1", f"SELECT fencing.try_lock($1)|{name}",
        f"SELECT fencing.held_token($1)|{name}", "sync",
        f"SELECT fencing.held_token($1)|{name}", "sync",
    )
    assert notices(lines) == []
    r = results(lines)
    assert r[1][2] == r[2][2] != "null"
    assert r[3][2] == "null"


# --- set_token ---------------------------------------------------------------------


def test_set_token_in_a_pipeline(protected_table):
    table = protected_table
    token = next_token()
    lines = run_pipeline(
        "BEGIN", f"SELECT fencing.set_token($1)|{token}",
        f"UPDATE {table} SET amount = $1 WHERE id = 1|13", "COMMIT", "sync",
        # refused as the first statement of a pipeline without BEGIN
        f"SELECT fencing.set_token($1)|{token}",
        f"UPDATE {table} SET amount = $1 WHERE id = 1|14", "sync",
    )
    r = results(lines)
    assert r[1] == ("PGRES_TUPLES_OK", "-", str(token))
    assert r[2][0] == "PGRES_COMMAND_OK"
    assert r[4][:2] == ("PGRES_FATAL_ERROR", "25P01")
    assert r[5][0] == "PGRES_PIPELINE_ABORTED"
    with connect() as conn:
        row = conn.execute(f"SELECT amount, fence FROM {table} WHERE id = 1").fetchone()
    assert (int(row[0]), row[1]) == (13, token)


def test_set_token_later_in_a_pipeline_without_begin(protected_table):
    table = protected_table
    token = next_token()
    lines = run_pipeline(
        "SELECT 1", f"SELECT fencing.set_token($1)|{token}",
        f"UPDATE {table} SET amount = $1 WHERE id = 1|15", "sync",
        f"UPDATE {table} SET amount = $1 WHERE id = 1|16", "sync",
    )
    r = results(lines)
    assert r[1] == ("PGRES_TUPLES_OK", "-", str(token))
    assert r[2][0] == "PGRES_COMMAND_OK"
    # F6: after the Sync the token no longer counts
    assert r[3][:2] == ("PGRES_FATAL_ERROR", "FN001")


def test_stale_write_in_a_pipeline_is_fn001(protected_table):
    table = protected_table
    lines = run_pipeline(
        "BEGIN", f"UPDATE {table} SET amount = $1, fence = $2 WHERE id = 1|17|1",
        "COMMIT", "sync",
    )
    r = results(lines)
    assert r[1][:2] == ("PGRES_FATAL_ERROR", "FN001")
    assert r[2][0] == "PGRES_PIPELINE_ABORTED"


# --- L4 ---------------------------------------------------------------------------------


def test_race_one_winner():
    base = unique("pipe-race")
    spellings = [base, base.upper(), f" {base} "]
    racers = [
        start_pipeline("BEGIN", f"SELECT fencing.try_lock($1)|{spellings[i % 3]}",
                       "sync", "wait", "COMMIT", "sync")
        for i in range(RACERS)
    ]
    tokens = []
    for p in racers:
        lines = []
        while not lines or lines[-1] != "waiting":
            line = p.stdout.readline()
            assert line, p.stderr.read()
            lines.append(line.rstrip("\n"))
        tokens.append(results(lines)[1][2])
    for p in racers:
        p.stdin.write("\n")
        p.stdin.flush()
    for p in racers:
        assert p.wait(60) == 0
    assert len(tokens) == RACERS
    assert len([t for t in tokens if t != "null"]) == 1, tokens


# --- a lease's ttl ends a pipelining client that stalls without Sync -------------------


@pytest.mark.parametrize("begin", [True, False], ids=["begin", "implicit"])
def test_lease_ttl_ends_a_client_that_stalls_without_sync(begin):
    # The holder takes a lease with a ttl of 3 s, reads the token (a Flush,
    # no Sync), then sends nothing more: its transaction stays open, and
    # the server, which has not seen a Sync, never saw it idle.
    name = unique("pipe-lease")
    steps = (["BEGIN"] if begin else []) + [
        f"SELECT fencing.lease($1, $2)|{name}|3 seconds", "flush", "stall",
    ]
    holder = start_pipeline(*steps)
    try:
        lines = []
        while not lines or lines[-1] != "stalled":
            line = holder.stdout.readline()
            assert line, holder.stderr.read()
            lines.append(line.rstrip("\n"))
        token = results(lines)[-1][2]
        assert token not in ("null", "-")

        with connect(autocommit=True) as other:
            def taken():
                with other.transaction():
                    return other.execute("SELECT fencing.try_lock(%s)", (name,)).fetchone()[0]

            # held while the ttl runs (a lease is not released at the end
            # of its statement), free once it has passed
            assert taken() is None
            newer = wait_for(taken, 20, "the lease of a stalled pipelining client ends")
        assert newer > int(token)

        # the holder's session was ended, not merely its lock
        out, _ = holder.communicate(timeout=15)
        lost = [line for line in out.splitlines() if line.startswith("lost ")]
        assert lost, out
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
