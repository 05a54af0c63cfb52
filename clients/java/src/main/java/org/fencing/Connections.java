// Copyright (c) 2026, the fencing developers

package org.fencing;

import java.sql.Connection;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.Set;
import java.util.concurrent.Executor;
import javax.sql.DataSource;
import org.postgresql.core.BaseConnection;
import org.postgresql.core.TransactionState;

/** What the client asks of the connections it is given and of those it takes. */
final class Connections {
    private Connections() {
    }

    /** The server ended the session: idle in a transaction too long, the transaction's time limit, an administrator. */
    private static final Set<String> SESSION_ENDED = Set.of("25P03", "25P04", "57P01");

    /** The server ended a batch that sat idle in its transaction past the idle limit. */
    static final String IDLE_TIMEOUT = "25P03";

    /** Where an abort of a connection runs: at once, on the thread that aborts it. */
    private static final Executor AT_ONCE = Runnable::run;

    /** A connection of the lease's own from source: each statement commits at once. */
    static Connection open(DataSource source) throws SQLException {
        Connection conn = source.getConnection();
        try {
            if (!conn.getAutoCommit()) {
                conn.setAutoCommit(true);
            }
        } catch (SQLException e) {
            closeQuietly(conn);
            throw e;
        }
        return conn;
    }

    static void closeQuietly(Connection conn) {
        if (conn == null) {
            return;
        }
        try {
            conn.close();
        } catch (SQLException | RuntimeException ignored) {
            // closing is all that is left to do with it
        }
    }

    /** Close conn at once, also while another thread waits in it for the network. */
    static void abort(Connection conn) {
        if (conn == null) {
            return;
        }
        try {
            conn.abort(AT_ONCE);
        } catch (SQLException | RuntimeException ignored) {
            // already closed
        }
    }

    /**
     * Ask the server to cancel what conn runs now (a cancel request, on a
     * connection of its own), whatever PgJDBC thinks statement does; a
     * connection that is not PgJDBC's cancels the statement its own way.
     */
    static void cancel(Connection conn, Statement statement) throws SQLException {
        if (conn.isWrapperFor(BaseConnection.class)) {
            conn.unwrap(BaseConnection.class).cancelQuery();
        } else {
            statement.cancel();
        }
    }

    /** Did this error end the session of conn (so the connection is of no more use)? */
    static boolean sessionEnded(Connection conn, SQLException error) {
        String state = error.getSQLState();
        if (state != null && (SESSION_ENDED.contains(state) || state.startsWith("08"))) {
            return true;
        }
        try {
            return conn.isClosed();
        } catch (SQLException e) {
            return true;
        }
    }

    /** Refuse a connection in auto-commit mode: the statement would be its own transaction. */
    static void requireTransaction(Connection conn, String what) throws SQLException {
        if (conn.getAutoCommit()) {
            throw new NotInTransactionException(what + " needs a transaction: this connection is in auto-commit mode, "
                    + "where the lock, the fence and fencing.token would end with the statement; "
                    + "call setAutoCommit(false) first", null);
        }
    }

    /** PgJDBC's own view of the connection's transaction, or null when conn is not PgJDBC's. */
    static TransactionState state(Connection conn) {
        try {
            if (conn.isWrapperFor(BaseConnection.class)) {
                return conn.unwrap(BaseConnection.class).getTransactionState();
            }
        } catch (SQLException | RuntimeException e) {
            return null;
        }
        return null;
    }

    /**
     * Has an error failed the transaction on conn? A COMMIT of such a
     * transaction rolls it back, and PgJDBC reports that as a success.
     * Without PgJDBC's view, a statement that takes no snapshot asks.
     */
    static boolean failed(Connection conn) throws SQLException {
        TransactionState state = state(conn);
        if (state != null) {
            return state == TransactionState.FAILED;
        }
        try {
            Sql.one(conn, Sql.REPLACE_PORTAL, row -> row.getString(1), false);
            return false;
        } catch (SQLException e) {
            if ("25P02".equals(e.getSQLState())) {
                return true;
            }
            throw e;
        }
    }
}
