# Copyright (c) 2026, the fencing developers
#
# worker.py CONNINFO -- a lease holder in a process of its own, for the
# tests that need real processes (a race, a holder stopped with SIGSTOP).
# It reads one command per line on stdin and answers one line on stdout:
#
#   acquire NAME TTL      "granted TOKEN" or "busy" (tries once)
#   write TABLE ID        a batch: lease.transaction(conn), then one UPDATE
#                         of row ID; "ok", or the pgfencing exception's name
#   write_old TABLE ID    the same UPDATE with the lease's token set by hand
#                         (fencing.set_token), as a holder that ignores
#                         LeaseLost would write; "ok" or the exception's name
#   lost                  "yes" or "no"
#   release               "released" or the exception's name

import sys

import psycopg

import pgfencing


def main():
    conn = psycopg.connect(sys.argv[1])
    lease = None
    token = None
    for line in sys.stdin:
        words = line.split()
        command = words[0]
        try:
            if command == "acquire":
                lease = pgfencing.Lease(conn, words[1], ttl=float(words[2]))
                if lease.acquire(blocking=False):
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
