# Copyright (c) 2026, the fencing developers
#
# The Python of the project's documentation, run as a reader would run it:
# for README.md and every page of doc/ that has ```python blocks, a
# database of its own, where the page's blocks run in order: the sql
# blocks with psql (their errors are announced, and test/t/091_readme.pl
# checks them), each python block as a program of its own with the
# client installed.  A python block must exit 0 and print nothing on
# standard error; a block whose first line says "not run here" is skipped.
# FENCING_DOCS names the top of the tree (test/clients/run.sh sets it).

import glob
import os
import re
import subprocess
import sys

import psycopg
import pytest

from conftest import conninfo

HERE = os.path.dirname(os.path.abspath(__file__))
DOCS = os.environ.get("FENCING_DOCS", os.path.join(HERE, "..", "..", ".."))
NOT_RUN = "not run here"


def pages():
    found = [os.path.join(DOCS, "README.md")] + sorted(glob.glob(os.path.join(DOCS, "doc", "*.md")))
    assert os.path.exists(found[0]), f"no README.md in {DOCS}"
    return found


def blocks(page):
    with open(page, encoding="utf-8") as f:
        text = f.read()
    return re.findall(r"^```(\w+)\n(.*?)^```$", text, flags=re.S | re.M)


PAGES = [p for p in pages() if any(lang == "python" for lang, _ in blocks(p))]


def test_docs_have_python():
    names = {os.path.relpath(p, DOCS) for p in PAGES}
    assert {"README.md", "doc/choosing.md", "doc/reference.md"} <= names


@pytest.mark.parametrize("page", PAGES, ids=[os.path.relpath(p, DOCS) for p in PAGES])
def test_page_python_blocks_run(admin, page):
    name = os.path.relpath(page, DOCS)
    db = "docs_py_" + re.sub(r"\W", "_", name.lower())
    admin.execute(f"DROP DATABASE IF EXISTS {db}")
    admin.execute(f"CREATE DATABASE {db}")
    env = dict(os.environ, PGDATABASE=db)
    for lang, code in blocks(page):
        if lang == "sql" and not code.lstrip().startswith("-- fragment"):
            done = subprocess.run(["psql", "-X", "-q", "-v", "ON_ERROR_STOP=0"], input=code, env=env,
                                  text=True, capture_output=True, timeout=60)
            assert done.returncode == 0, f"{name}: psql failed:\n{code}\n{done.stderr}"
        elif lang == "python" and NOT_RUN not in code.split("\n", 1)[0]:
            done = subprocess.run([sys.executable, "-c", code], env=env, text=True,
                                  capture_output=True, timeout=90)
            assert (done.returncode, done.stderr) == (0, ""), f"{name}: python block failed:\n{code}\n{done.stdout}"
    with psycopg.connect(conninfo(dbname=db), autocommit=True) as conn:
        CHECKS.get(name, lambda c: None)(conn)


def check_readme(conn):
    # the client billed December: every customer once, under one token
    billed = conn.execute(
        "SELECT count(*), count(DISTINCT fence), (SELECT count(*) FROM customers)"
        " FROM ledger WHERE month = '2026-12'").fetchone()
    assert billed[0] == billed[2] and billed[1] == 1
    assert conn.execute("SELECT count(*) FROM fencing.leases").fetchone() == (0,)


def check_reference(conn):
    # the driver example billed customers 1 and 2, fenced with one token
    rows = conn.execute(
        "SELECT customer_id, fence FROM ledger WHERE month = '2026-12'"
        " AND customer_id IN (1, 2) ORDER BY customer_id").fetchall()
    assert [r[0] for r in rows] == [1, 2]
    assert rows[0][1] is not None and rows[0][1] == rows[1][1]


def check_choosing(conn):
    # the queue worker took a job nobody had, and the charge went in once
    assert conn.execute("SELECT count(*) FROM jobs WHERE done").fetchone() == (3,)
    assert conn.execute("SELECT count(*) FROM charges WHERE idempotency_key = 'order-43'").fetchone() == (1,)


CHECKS = {"README.md": check_readme, "doc/reference.md": check_reference, "doc/choosing.md": check_choosing}
