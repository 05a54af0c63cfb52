// Copyright (c) 2026, the fencing developers

package org.fencing;

import java.sql.Connection;
import java.sql.SQLException;
import java.time.Duration;
import java.util.Objects;
import java.util.OptionalLong;

/**
 * Transaction locks ({@code fencing.try_lock}, {@code fencing.lock}): for
 * work that fits in one transaction. A lock ends with its transaction
 * (commit or rollback) and with its connection. Both calls need a
 * connection with {@code autoCommit == false}, and refuse one in auto-commit
 * mode before sending anything: there the lock would end with its own
 * statement (the server warns, {@code 25P01}).
 *
 * <pre>{@code
 * conn.setAutoCommit(false);
 * OptionalLong token = Locks.tryLock(conn, "ledger-fix:acme");
 * if (token.isPresent()) { ... conn.commit(); }   // the lock ends here
 * }</pre>
 */
public final class Locks {
    private Locks() {
    }

    /** The token of the lock taken in conn's transaction, or empty when another holder has the name. */
    public static OptionalLong tryLock(Connection conn, String name) throws SQLException {
        Objects.requireNonNull(conn, "conn");
        Objects.requireNonNull(name, "name");
        Connections.requireTransaction(conn, "tryLock()");
        Long token = run(conn, Sql.tryLock(name), name);
        return token == null ? OptionalLong.empty() : OptionalLong.of(token);
    }

    /**
     * Wait up to timeout for the lock in conn's transaction (in the server's
     * lock queue: first come, first served, with deadlock detection) and
     * return its token; a {@link BusyException} when the timeout passed.
     */
    public static long lock(Connection conn, String name, Duration timeout) throws SQLException {
        Objects.requireNonNull(conn, "conn");
        Objects.requireNonNull(name, "name");
        Objects.requireNonNull(timeout, "timeout");
        if (timeout.isNegative()) {
            throw new IllegalArgumentException("the timeout must not be negative");
        }
        return lockFor(conn, name, timeout);
    }

    /** Wait for the lock as long as it takes (lock_timeout, statement_timeout and a cancel still end the wait). */
    public static long lock(Connection conn, String name) throws SQLException {
        Objects.requireNonNull(conn, "conn");
        Objects.requireNonNull(name, "name");
        return lockFor(conn, name, null);
    }

    private static long lockFor(Connection conn, String name, Duration timeout) throws SQLException {
        Connections.requireTransaction(conn, "lock()");
        Long token = run(conn, Sql.lock(name, timeout), name);
        if (token == null) {
            throw new BusyException("fencing lock \"" + name + "\" stayed held for the timeout of "
                    + Lease.describe(timeout == null ? Duration.ZERO : timeout));
        }
        return token;
    }

    /**
     * One call in conn's transaction. An error that ended the session
     * (25P03, 25P04, 57P01, a broken connection) is a LeaseLostException:
     * the lock ended with it.
     */
    private static Long run(Connection conn, String sql, String name) throws SQLException {
        try {
            return Sql.one(conn, sql, Sql.LONG, true);
        } catch (SQLException e) {
            SQLException mapped = FencingException.translate(e);
            if (mapped == e && Connections.sessionEnded(conn, e)) {
                return lockLost(name, e);
            }
            throw mapped;
        }
    }

    private static Long lockLost(String name, SQLException e) throws LeaseLostException {
        throw new LeaseLostException("fencing lock \"" + name + "\": the server ended the session that held it ("
                + e.getMessage() + ")", e);
    }
}
