# Copyright (c) 2026, the fencing developers
#
# The code blocks of README.md, run as a reader would run them, in a
# database of their own: the sql blocks with psql, each python block as a
# program of its own (the PG* variables name the server), in the page's
# order.  Only the redis-py block
# of the side-by-side is not run (it needs a Redis server); it is marked so
# on its first line.

import os
import re
import subprocess
import sys

import psycopg
import pytest

from conftest import conninfo

README = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "README.md")
NOT_RUN = "# redis-py, for comparison (not run here"
DB = "readme_py"


def blocks():
    with open(README, encoding="utf-8") as f:
        text = f.read()
    return re.findall(r"^```(\w+)\n(.*?)^```$", text, flags=re.S | re.M)


def test_readme_blocks_run(admin):
    found = blocks()
    python = [code for lang, code in found if lang == "python"]
    assert len(python) >= 5
    assert sum(code.startswith(NOT_RUN) for code in python) == 1
    admin.execute(f"DROP DATABASE IF EXISTS {DB}")
    admin.execute(f"CREATE DATABASE {DB}")
    env = dict(os.environ, PGDATABASE=DB)
    subprocess.run(["psql", "-X", "-q", "-c", "CREATE EXTENSION fencing"], env=env, check=True)
    for number, (lang, code) in enumerate(found, 1):
        if lang == "sql":
            done = subprocess.run(["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1"], input=code, env=env,
                                  text=True, capture_output=True, timeout=60)
        elif lang == "python" and not code.startswith(NOT_RUN):
            done = subprocess.run([sys.executable, "-c", code], env=env, text=True,
                                  capture_output=True, timeout=90)
        else:
            continue
        if done.returncode != 0:
            pytest.fail(f"README block {number} ({lang}) failed:\n{code}\n{done.stdout}{done.stderr}")
    with psycopg.connect(conninfo(dbname=DB), autocommit=True) as db:
        check(db)


def check(db):
    billed = db.execute(
        "SELECT count(*), count(DISTINCT fence) FROM invoices WHERE month = '2026-10'").fetchone()
    assert billed == (2500, 1)
    assert db.execute(
        "SELECT count(*) FROM invoices WHERE month IN ('2026-11', '2026-12')").fetchone() == (4,)
    assert db.execute("SELECT count(*) FROM fencing.leases").fetchone() == (0,)
