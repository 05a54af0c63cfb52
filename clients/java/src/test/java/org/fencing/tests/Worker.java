// Copyright (c) 2026, the fencing developers

package org.fencing.tests;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.Optional;
import org.fencing.FencingException;
import org.fencing.Lease;
import org.fencing.Leases;
import org.postgresql.ds.PGSimpleDataSource;

/**
 * A lease holder in a JVM of its own, for the tests that need real
 * processes (a race, a holder stopped with SIGSTOP). Started as
 * {@code java ... org.fencing.tests.Worker JDBC_URL}, it says "ready" once
 * connected, then reads one command per line on stdin and answers one line
 * on stdout:
 *
 * <pre>
 *   acquire NAME TTL_MS     "granted TOKEN" or "busy" (tries once)
 *   write TABLE ID          a batch (lease.transaction): one UPDATE of row ID; "ok" or the error
 *   write_paused TABLE ID   a batch that updates row ID, says "mid", waits for a line on stdin
 *                           and updates row ID again; "ok" or the error
 *   write_old TABLE ID      the UPDATE with the lease's token set by hand (fencing.set_token), as a
 *                           holder that ignores a lost lease would write; "ok" or the error
 *   lost                    "yes" or "no"
 *   release                 "released" or the error
 * </pre>
 *
 * An error is answered as its class's simple name and the SQLState of its
 * cause, if it has one with a SQLState.
 */
public final class Worker {
    private Worker() {
    }

    public static void main(String[] args) throws Exception {
        PGSimpleDataSource source = new PGSimpleDataSource();
        source.setUrl(args[0]);
        PrintStream out = new PrintStream(System.out, true, StandardCharsets.UTF_8);
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        source.getConnection().close();
        out.println("ready");
        Lease lease = null;
        String line;
        while ((line = in.readLine()) != null) {
            String[] words = line.trim().split(" ");
            String answer;
            try {
                switch (words[0]) {
                    case "acquire": {
                        Optional<Lease> got = Leases.tryAcquire(source, words[1],
                                Duration.ofMillis(Long.parseLong(words[2])));
                        lease = got.orElse(null);
                        answer = got.map(l -> "granted " + l.token()).orElse("busy");
                        break;
                    }
                    case "write":
                        lease.transaction(source, conn -> update(conn, words[1], words[2]));
                        answer = "ok";
                        break;
                    case "write_paused":
                        lease.transaction(source, conn -> {
                            update(conn, words[1], words[2]);
                            out.println("mid");
                            awaitLine(in);
                            return update(conn, words[1], words[2]);
                        });
                        answer = "ok";
                        break;
                    case "write_old":
                        writeOld(source, lease.token(), words[1], words[2]);
                        answer = "ok";
                        break;
                    case "lost":
                        answer = lease.isLost() ? "yes" : "no";
                        break;
                    case "release":
                        lease.close();
                        answer = "released";
                        break;
                    default:
                        answer = "unknown command " + words[0];
                }
            } catch (SQLException | java.io.UncheckedIOException e) {
                answer = describe(e);
            }
            out.println(answer);
        }
    }

    private static void awaitLine(BufferedReader in) {
        try {
            in.readLine();
        } catch (java.io.IOException e) {
            throw new java.io.UncheckedIOException(e);
        }
    }

    private static Integer update(Connection conn, String table, String id) throws SQLException {
        try (Statement st = conn.createStatement()) {
            return st.executeUpdate("UPDATE " + table + " SET amount = amount + 1 WHERE id = " + Integer.parseInt(id));
        }
    }

    private static void writeOld(PGSimpleDataSource source, long token, String table, String id) throws SQLException {
        try (Connection conn = source.getConnection()) {
            conn.setAutoCommit(false);
            try (Statement st = conn.createStatement()) {
                st.execute("SELECT fencing.set_token(" + token + ")");
                update(conn, table, id);
                conn.commit();
            } catch (SQLException e) {
                conn.rollback();
                throw FencingException.translate(e);
            }
        }
    }

    private static String describe(Exception e) {
        String answer = e.getClass().getSimpleName();
        for (Throwable cause = e.getCause(); cause != null; cause = cause.getCause()) {
            if (cause instanceof SQLException && ((SQLException) cause).getSQLState() != null
                    && !(cause instanceof FencingException)) {
                return answer + " " + ((SQLException) cause).getSQLState();
            }
        }
        return answer;
    }
}
