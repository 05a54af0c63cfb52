#!/usr/bin/python3
"""The minimal psycopg 3 pattern for a correctness lock with a fence.

Copy this when duplicate work would corrupt data.  In one transaction:
take fencing.try_lock(name) (None: busy, roll back and leave), check
fencing.held_token(name) before each side effect, write the protected row
with fence = token, commit.  SQLSTATE FN001 from the fence trigger means a
newer holder has written: stop and do not retry.  For a lock the server
takes away from a stalled holder, use fencing.lease(name, '30s') in place of
fencing.try_lock(name) and call fencing.held_token about every third of the
ttl.

usage: correctness_lock.py LOCK_NAME ACCOUNT_ID AMOUNT [PAUSE_SECONDS]
    The connection comes from the PG* environment variables; the table from
    examples/ledger.sql.  PAUSE_SECONDS sleeps between taking the lock and
    writing, to try the stale path by hand (write the row with a newer token
    from another session meanwhile).

Output and exit status, as examples/correctness_lock.c:
    got token N for 'NAME'                        (then one of:)
    committed: account ID +AMOUNT with fence N    exit 0
    busy: 'NAME' is held by another transaction   exit 2
    stale: SQLSTATE FN001: MESSAGE                exit 3
      detail: DETAIL
    stopping: a newer holder exists; no retry
    lost: ...                                     exit 4
    error: ...                                    exit 1

Needs Debian's python3-psycopg.
"""

import sys
import time

import psycopg

EXIT_COMMITTED, EXIT_ERROR, EXIT_BUSY, EXIT_STALE, EXIT_LOST = 0, 1, 2, 3, 4

# Our own SQLSTATE for a stale or missing token.  It is not in class 40, so
# retry decorators that retry serialization failures leave it alone.
STALE_TOKEN = "FN001"


def bill(conn, name, account, amount, pause_seconds):
    """Take the lock, write under it with the token as fence, commit.

    Returns the exit status.  conn.transaction() commits when the block ends
    normally (after "busy" or "lost" there is nothing to commit) and rolls
    back on any exception; either way the lock ends with the transaction.
    """
    with conn.transaction():
        token = conn.execute("SELECT fencing.try_lock(%s)", (name,)).fetchone()[0]
        if token is None:
            print(f"busy: '{name}' is held by another transaction")
            return EXIT_BUSY
        print(f"got token {token} for '{name}'", flush=True)

        if pause_seconds > 0:
            time.sleep(pause_seconds)

        # before each side effect: do we still hold the lock?
        held = conn.execute("SELECT fencing.held_token(%s)", (name,)).fetchone()[0]
        if held != token:
            print(f"lost: fencing.held_token('{name}') no longer returns our token; stopping")
            return EXIT_LOST

        # the side effect, carrying the token; the trigger checks it
        cur = conn.execute(
            "UPDATE example.accounts"
            "   SET balance = balance + %s::numeric, fence = %s"
            " WHERE id = %s",
            (amount, token, account))
        if cur.rowcount != 1:
            print(f"error: no account {account}")
            return EXIT_ERROR
    print(f"committed: account {account} +{amount} with fence {token}")
    return EXIT_COMMITTED


def main():
    """Parse the arguments, connect and classify the outcome."""
    if len(sys.argv) not in (4, 5):
        print(f"usage: {sys.argv[0]} LOCK_NAME ACCOUNT_ID AMOUNT [PAUSE_SECONDS]",
              file=sys.stderr)
        return EXIT_ERROR
    name, account, amount = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    pause_seconds = int(sys.argv[4]) if len(sys.argv) == 5 else 0

    try:
        conn = psycopg.connect("")
    except psycopg.Error as e:
        print(f"error: {e}")
        return EXIT_ERROR
    try:
        with conn:
            return bill(conn, name, account, amount, pause_seconds)
    except psycopg.Error as e:
        if e.sqlstate == STALE_TOKEN:
            print(f"stale: SQLSTATE {e.sqlstate}: {e.diag.message_primary}")
            if e.diag.message_detail:
                print(f"  detail: {e.diag.message_detail}")
            print("stopping: a newer holder exists; no retry")
            return EXIT_STALE
        if isinstance(e, psycopg.OperationalError):
            print(f"lost: the session ended, and the lock with it: {e}")
            return EXIT_LOST
        print(f"error: {e}")
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
