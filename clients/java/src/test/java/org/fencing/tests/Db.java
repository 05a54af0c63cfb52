// Copyright (c) 2026, the fencing developers

package org.fencing.tests;

import static org.junit.jupiter.api.Assertions.fail;

import com.zaxxer.hikari.HikariConfig;
import com.zaxxer.hikari.HikariDataSource;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.UUID;
import java.util.function.BooleanSupplier;
import org.postgresql.ds.PGSimpleDataSource;

/**
 * What the tests share: data sources on the server and on the PgBouncer
 * that test/clients/run.sh started (JDBC_URL, FENCING_BOUNCER_URL), names
 * no other test uses, a protected table, and queries from outside.
 */
final class Db {
    private Db() {
    }

    static String url() {
        String url = System.getenv("JDBC_URL");
        if (url == null) {
            throw new IllegalStateException("JDBC_URL names the server under test (test/clients/run.sh sets it)");
        }
        return url;
    }

    static String bouncerUrl() {
        String url = System.getenv("FENCING_BOUNCER_URL");
        if (url == null) {
            throw new IllegalStateException("FENCING_BOUNCER_URL names the PgBouncer of test/clients/run.sh");
        }
        return url;
    }

    /** PgJDBC's own data source: a new server connection for each getConnection(). */
    static PGSimpleDataSource source() {
        return source(url());
    }

    static PGSimpleDataSource source(String url) {
        PGSimpleDataSource source = new PGSimpleDataSource();
        source.setUrl(url);
        return source;
    }

    /** A source whose connections say application_name, to find them in pg_stat_activity. */
    static PGSimpleDataSource named(String applicationName) {
        PGSimpleDataSource source = source();
        source.setApplicationName(applicationName);
        return source;
    }

    /** A HikariCP pool of at most max connections on url, not in auto-commit mode (as many applications set it). */
    static HikariDataSource pool(String url, int max) {
        HikariConfig config = new HikariConfig();
        config.setJdbcUrl(url);
        config.setMaximumPoolSize(max);
        config.setMinimumIdle(1);
        config.setAutoCommit(false);
        config.setConnectionTimeout(10_000);
        config.setPoolName("test-" + unique("pool"));
        return new HikariDataSource(config);
    }

    static String unique(String prefix) {
        return prefix + "-" + UUID.randomUUID().toString().substring(0, 10);
    }

    /** An auto-commit connection for setting up and looking from outside. */
    static Connection admin() throws SQLException {
        return source().getConnection();
    }

    /** Run statements in auto-commit mode. */
    static void exec(String... statements) throws SQLException {
        try (Connection conn = admin(); Statement st = conn.createStatement()) {
            for (String sql : statements) {
                st.execute(sql);
            }
        }
    }

    /** The first column of the first row of a query with parameters, or null. */
    static Object value(String sql, Object... params) throws SQLException {
        try (Connection conn = admin()) {
            return value(conn, sql, params);
        }
    }

    static Object value(Connection conn, String sql, Object... params) throws SQLException {
        try (PreparedStatement st = conn.prepareStatement(sql)) {
            for (int i = 0; i < params.length; i++) {
                st.setObject(i + 1, params[i]);
            }
            try (ResultSet rs = st.executeQuery()) {
                return rs.next() ? rs.getObject(1) : null;
            }
        }
    }

    /** Every row of a query, as lists of their columns. */
    static List<List<Object>> rows(String sql, Object... params) throws SQLException {
        try (Connection conn = admin(); PreparedStatement st = conn.prepareStatement(sql)) {
            for (int i = 0; i < params.length; i++) {
                st.setObject(i + 1, params[i]);
            }
            List<List<Object>> rows = new ArrayList<>();
            try (ResultSet rs = st.executeQuery()) {
                int n = rs.getMetaData().getColumnCount();
                while (rs.next()) {
                    List<Object> row = new ArrayList<>();
                    for (int i = 1; i <= n; i++) {
                        row.add(rs.getObject(i));
                    }
                    rows.add(row);
                }
            }
            return rows;
        }
    }

    /** A protected table (id, amount, fence) with rows 1 and 2; its name. */
    static String ledger() throws SQLException {
        String name = unique("ledger").replace('-', '_');
        exec("CREATE TABLE " + name + " (id int PRIMARY KEY, amount int NOT NULL, fence bigint)",
                "SELECT fencing.protect('" + name + "')",
                "INSERT INTO " + name + " VALUES (1, 0, fencing.next_token()), (2, 0, fencing.next_token())");
        return name;
    }

    static int amount(String ledger, int id) throws SQLException {
        return ((Number) value("SELECT amount FROM " + ledger + " WHERE id = ?", id)).intValue();
    }

    static long fence(String ledger, int id) throws SQLException {
        return ((Number) value("SELECT fence FROM " + ledger + " WHERE id = ?", id)).longValue();
    }

    /** The token the server holds the lease on name with, or null. */
    static Long leaseToken(String name) throws SQLException {
        Object token = value("SELECT token FROM fencing.leases WHERE name = fencing.normalize_name(?)", name);
        return token == null ? null : ((Number) token).longValue();
    }

    static void update(Connection conn, String ledger, int id, int by) throws SQLException {
        try (Statement st = conn.createStatement()) {
            st.executeUpdate("UPDATE " + ledger + " SET amount = amount + " + by + " WHERE id = " + id);
        }
    }

    /** Poll condition until it holds; fail after timeout. */
    static void waitFor(BooleanSupplier condition, Duration timeout, String what) {
        long until = System.nanoTime() + timeout.toNanos();
        while (!condition.getAsBoolean()) {
            if (System.nanoTime() - until > 0) {
                fail(what + ": not within " + timeout.toMillis() + " ms");
            }
            sleep(Duration.ofMillis(50));
        }
    }

    static void sleep(Duration d) {
        try {
            Thread.sleep(d.toMillis());
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException(e);
        }
    }

    /** A condition that may throw SQLException (an SQL check for waitFor). */
    interface SqlCondition {
        boolean holds() throws SQLException;
    }

    static BooleanSupplier sql(SqlCondition condition) {
        return () -> {
            try {
                return condition.holds();
            } catch (SQLException e) {
                throw new IllegalStateException(e);
            }
        };
    }
}
