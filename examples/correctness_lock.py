#!/usr/bin/python3
"""The minimal psycopg 3 pattern for a correctness lock with a fence.

Copy this when duplicate work would corrupt data.  In one transaction:
take fencing.try_lock(name) (None: busy, roll back and leave), check
fencing.held_token(name) before each side effect, call
fencing.check_fence(name, token) before the first write, write the protected
row with fence = token, commit.

Two fences, both needed: check_fence is the run's fence.  The newest
holder's check raised the watermark of the lock's resource, so an older
holder fails there before writing anything, including rows the newer holder
has not written yet (a row's own fence only knows the holders that wrote
that row).  The row's fence (fencing.protect on the table) refuses a write
whose token is below the row's.  SQLSTATE FN001 from either means a newer
holder exists: stop and do not retry.  EXECUTE on fencing.check_fence is
revoked from PUBLIC (fencing 1.1): run as a role it is granted to
(examples/ledger.sql grants it to example_worker), or the check fails with
"permission denied for function check_fence".  For a lock the server takes
away from a stalled holder, use fencing.lease(name, '30s') in place of
fencing.try_lock(name) and call fencing.held_token about every third of the
ttl.

usage: correctness_lock.py LOCK_NAME ACCOUNT_ID AMOUNT [PAUSE_SECONDS]
    The connection comes from the PG* environment variables; the table from
    examples/ledger.sql.  PAUSE_SECONDS sleeps between taking the lock and
    writing, to try the stale paths by hand (meanwhile, from another
    session, check the run's fence with a newer token,
    SELECT fencing.check_fence(LOCK_NAME, fencing.next_token()), or write
    the row with one).

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

# Our own SQLSTATE for a stale or missing token, from the trigger and from
# check_fence.  It is not in class 40, so retry decorators that retry
# serialization failures leave it alone.
STALE_TOKEN = "FN001"


def bill(conn, name, account, amount, pause_seconds):
    """Take the lock, check the run's fence, write with the token, commit.

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

        # the run's fence, before the first write of this transaction: FN001
        # if a newer holder has checked it (waits for that holder's
        # transaction if it is still open)
        conn.execute("SELECT fencing.check_fence(%s, %s)", (name, token))

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
