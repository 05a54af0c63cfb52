# Copyright (c) 2026, the fencing developers
#
# worker.py CONNINFO -- a lease holder in a process of its own, for the
# tests that need real processes (a race, a holder stopped with SIGSTOP).
# It reads one command per line on stdin and answers one line on stdout:
#
#   acquire NAME TTL      "granted TOKEN" or "busy" (tries once)
#   acquire_wait NAME TTL TIMEOUT
#                         the same, waiting up to TIMEOUT seconds in the server
#   write TABLE ID        a batch: lease.transaction(conn), then one UPDATE
#                         of row ID; "ok", or the pgfencing exception's name
#   write_old TABLE ID    the same UPDATE with the lease's token set by hand
#                         (fencing.set_token), as a holder that ignores
#                         LeaseLost would write; "ok" or the exception's name
#   frozen TABLE ID       a batch: lease.transaction(conn), one UPDATE of row
#                         ID, then "paused"; it reads one more line (the test
#                         stops this process meanwhile) and sends a second
#                         UPDATE in the same batch; then, for the error the
#                         batch raised: its name, whether lost.is_set() and
#                         the event behind lost.wait() were set when it came,
#                         how many on_lost callbacks had run, what the
#                         callback saw (the flag and the event), and the
#                         type of its __cause__ ("psycopg" for a driver error)
#   lost                  "yes" or "no"
#   release               "released" or the exception's name

import sys
import threading

import psycopg

import pgfencing


def yes(flag):
    return "yes" if flag else "no"


def frozen(lease, conn, seen, table, row):
    """The frozen-holder batch; its answer line."""
    try:
        with lease.transaction(conn):
            conn.execute(f"UPDATE {table} SET amount = amount + 1 WHERE id = %s", (row,))
            print("paused", flush=True)
            sys.stdin.readline()
            conn.execute(f"UPDATE {table} SET amount = amount + 1 WHERE id = %s", (row,))
    except Exception as err:
        cause = err.__cause__
        cause = "psycopg" if isinstance(cause, psycopg.Error) else type(cause).__name__
        fired = threading.Event.wait(lease.lost, 0)
        return (f"{type(err).__name__} lost={yes(lease.lost.is_set())} fired={yes(fired)} "
                f"callbacks={len(seen)} callback_saw={','.join(seen)} cause={cause}")
    return "ok"


def main():
    conn = psycopg.connect(sys.argv[1])
    lease = None
    token = None
    seen = []

    def on_lost(lost):
        seen.append(f"flag:{yes(lost.lost.is_set())}/event:{yes(threading.Event.wait(lost.lost, 0))}")

    for line in sys.stdin:
        words = line.split()
        command = words[0]
        try:
            if command in ("acquire", "acquire_wait"):
                lease = pgfencing.Lease(conn, words[1], ttl=float(words[2]), on_lost=on_lost)
                if lease.acquire(timeout=float(words[3]) if command == "acquire_wait" else 0):
                    token = lease.token
                    answer = f"granted {token}"
                else:
                    answer = "busy"
            elif command == "write":
                with lease.transaction(conn):
                    conn.execute(f"UPDATE {words[1]} SET amount = amount + 1 WHERE id = %s",
                                 (int(words[2]),))
                answer = "ok"
            elif command == "write_old":
                with pgfencing.translated(), conn.transaction():
                    conn.execute("SELECT fencing.set_token(%s)", (token,))
                    conn.execute(f"UPDATE {words[1]} SET amount = amount + 1 WHERE id = %s",
                                 (int(words[2]),))
                answer = "ok"
            elif command == "frozen":
                answer = frozen(lease, conn, seen, words[1], int(words[2]))
            elif command == "lost":
                answer = "yes" if lease.lost.is_set() else "no"
            elif command == "release":
                lease.release()
                answer = "released"
            else:
                answer = f"unknown command {command}"
        except pgfencing.FencingError as err:
            answer = type(err).__name__
        print(answer, flush=True)


if __name__ == "__main__":
    main()
