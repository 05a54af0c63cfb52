# Copyright (c) 2026, the fencing developers
#
# test_readme.py -- the README's Python must keep working, as
# test/t/091_readme.pl keeps its SQL working: every ```python block of
# README.md (FENCING_README) runs, in order, with /usr/bin/python3 and
# psycopg 3, in a database of its own that holds what the README's blocks
# assume (the extension, and the ledger table of "The pattern").  Each
# block must exit 0 and print nothing on standard error; the invoice block
# must have billed its customers, fenced with one token.

import os
import re
import subprocess

import pytest

from conftest import connect, server_conninfo

DB = "readme_python"


def readme_blocks(language):
    """(line, text) of every ```language block of the README."""
    blocks, body, start = [], None, 0
    with open(os.environ["FENCING_README"], encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if body is None and re.fullmatch(rf"```{language}\s*", line.rstrip("\n")):
                body, start = [], number + 1
            elif body is not None and re.fullmatch(r"```\s*", line.rstrip("\n")):
                blocks.append((start, "".join(body)))
                body = None
            elif body is not None:
                body.append(line)
    assert body is None, "README.md ends inside a code block"
    return blocks


def ledger_sql():
    """The README's block that creates and protects the ledger table."""
    found = [text for _, text in readme_blocks("sql") if "CREATE TABLE ledger (" in text]
    assert len(found) == 1
    return found[0]


@pytest.fixture(scope="module")
def readme_db():
    with connect(autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {DB}")
        admin.execute(f"CREATE DATABASE {DB}")
    with connect(server_conninfo(dbname=DB), autocommit=True) as conn:
        conn.execute("CREATE EXTENSION fencing")
        conn.execute(ledger_sql())
    return DB


BLOCKS = readme_blocks("python")


def test_readme_has_python_blocks():
    assert len(BLOCKS) >= 2


@pytest.mark.parametrize("line, code", BLOCKS, ids=[f"README.md:{b[0]}" for b in BLOCKS])
def test_readme_python_block_runs(readme_db, line, code):
    out = subprocess.run(
        ["/usr/bin/python3", "-c", code],
        env={**os.environ, "PGDATABASE": readme_db},
        capture_output=True, text=True, timeout=60,
    )
    assert (out.returncode, out.stderr) == (0, ""), f"README.md line {line}:\n{code}"


def test_readme_invoice_billed_each_customer_once(readme_db):
    with connect(server_conninfo(dbname=readme_db)) as conn:
        rows = conn.execute(
            "SELECT customer_id, fence FROM ledger WHERE month = '2026-12'"
            " AND customer_id IN (1, 2) ORDER BY customer_id"
        ).fetchall()
    assert [r[0] for r in rows] == [1, 2]
    assert rows[0][1] is not None and rows[0][1] == rows[1][1]
