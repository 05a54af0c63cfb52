// Copyright (c) 2026, the fencing developers

package org.fencing;

import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.time.OffsetDateTime;
import java.util.regex.Pattern;

/**
 * The statements the client sends, and how it sends them.
 *
 * <p>Why every value is written into the statement. A SELECT sent through
 * the extended protocol (PgJDBC sends every statement that way, a plain
 * {@code Statement} too) leaves its unnamed portal open when it completes,
 * and that portal keeps the statement's snapshot registered until the next
 * Bind: a READ COMMITTED transaction that then sits idle holding a lock or
 * a lease keeps {@code backend_xmin} set and holds back VACUUM in its
 * database. So each call that runs in the caller's transaction is followed,
 * in the same round trip, by {@code SHOW transaction_isolation}, whose Bind
 * drops that portal and which takes no snapshot. The values are written
 * into the statement, never bound or prepared: PgBouncer in transaction
 * pooling mode hands each transaction another server connection, where a
 * prepared statement does not exist.
 *
 * <p>A value written into the statement cannot break out of it, whatever
 * the session's {@code client_encoding} and
 * {@code standard_conforming_strings}: text made of printable ASCII other
 * than {@code '} and {@code \} (the only characters with a meaning inside
 * {@code '...'}) is written as it is; any other text goes as the hex digits
 * of its UTF-8 bytes, decoded by the server, so the statement is pure ASCII
 * with no escape that a multibyte client encoding could swallow. A NUL,
 * which PostgreSQL text cannot hold, is refused before anything is sent.
 * The driver's escape processing is off for these statements.
 */
final class Sql {
    private Sql() {
    }

    private static final Pattern PLAIN = Pattern.compile("[\\x20-\\x26\\x28-\\x5b\\x5d-\\x7e]*");

    /** Sent after a call in the caller's transaction: it replaces the call's portal. */
    static final String REPLACE_PORTAL = "SHOW transaction_isolation";

    /** acquire_lease waits at most this long per call (its cap, INT_MAX ms). */
    static final Duration LONGEST_WAIT = Duration.ofMillis(Integer.MAX_VALUE);

    private static final long MICROS_PER_DAY = 86_400_000_000L;

    /** value as an SQL expression of type text. */
    static String text(String value, String what) {
        if (value == null) {
            return "NULL::pg_catalog.text";
        }
        if (value.indexOf('\0') >= 0) {
            throw new IllegalArgumentException(what + " contains a NUL character, which PostgreSQL text cannot hold");
        }
        if (PLAIN.matcher(value).matches()) {
            return "'" + value + "'::pg_catalog.text";
        }
        StringBuilder hex = new StringBuilder();
        for (byte b : value.getBytes(StandardCharsets.UTF_8)) {
            hex.append(Character.forDigit((b >> 4) & 0xf, 16)).append(Character.forDigit(b & 0xf, 16));
        }
        return "pg_catalog.convert_from(pg_catalog.decode('" + hex + "', 'hex'), 'UTF8')";
    }

    static String bigint(long value) {
        return value + "::bigint";
    }

    /** A duration (never negative; rounded up to microseconds) as an SQL expression of type interval. */
    static String interval(Duration value) {
        if (value == null) {
            return "NULL::interval";
        }
        long micros;
        try {
            micros = Math.addExact(Math.multiplyExact(value.getSeconds(), 1_000_000L), (value.getNano() + 999) / 1000);
        } catch (ArithmeticException e) {
            throw new IllegalArgumentException("a duration of " + value + " is out of range", e);
        }
        long days = micros / MICROS_PER_DAY;
        long rest = micros % MICROS_PER_DAY;
        return "'" + days + " days " + rest / 1_000_000L + " seconds " + rest % 1_000_000L + " microseconds'::interval";
    }

    static String name(String name) {
        return text(name, "the name");
    }

    static String acquire(String name, Duration ttl, Duration wait, String holder) {
        return "SELECT fencing.acquire_lease(" + name(name) + ", " + interval(ttl) + ", " + interval(wait) + ", "
                + text(holder, "the holder") + ")";
    }

    static String renew(String name, long token, Duration ttl) {
        return "SELECT fencing.renew_lease(" + name(name) + ", " + bigint(token) + ", " + interval(ttl) + ")";
    }

    static String release(String name, long token) {
        return "SELECT fencing.release_lease(" + name(name) + ", " + bigint(token) + ")";
    }

    static String use(String name, long token) {
        return "SELECT fencing.use_lease(" + name(name) + ", " + bigint(token) + ")";
    }

    static String owned(String name, long token) {
        return "SELECT EXISTS (SELECT 1 FROM fencing.leases WHERE database = pg_catalog.current_database()"
                + " AND name = fencing.normalize_name(" + name(name) + ") AND token = " + bigint(token)
                + " AND expires_at > pg_catalog.clock_timestamp())";
    }

    static String tryLock(String name) {
        return "SELECT fencing.try_lock(" + name(name) + ")";
    }

    static String lock(String name, Duration timeout) {
        return "SELECT fencing.lock(" + name(name) + ", " + interval(timeout) + ")";
    }

    /** What a statement's first column is read as. */
    interface Reader<T> {
        T read(ResultSet row) throws SQLException;
    }

    static final Reader<Long> LONG = row -> row.getObject(1, Long.class);
    static final Reader<Boolean> BOOLEAN = row -> row.getObject(1, Boolean.class);
    static final Reader<OffsetDateTime> TIMESTAMPTZ = row -> row.getObject(1, OffsetDateTime.class);

    /**
     * The first value of a statement run on conn. In the caller's
     * transaction ({@code replacePortal}) the portal of the call is replaced
     * in the same round trip (see above).
     */
    static <T> T one(Connection conn, String sql, Reader<T> reader, boolean replacePortal) throws SQLException {
        try (Statement statement = conn.createStatement()) {
            return one(statement, replacePortal ? sql + "; " + REPLACE_PORTAL : sql, reader);
        }
    }

    static <T> T one(Statement statement, String sql, Reader<T> reader) throws SQLException {
        statement.setEscapeProcessing(false);
        if (!statement.execute(sql)) {
            throw new SQLException("the statement returned no rows: " + sql);
        }
        try (ResultSet row = statement.getResultSet()) {
            if (!row.next()) {
                throw new SQLException("the statement returned no rows: " + sql);
            }
            return reader.read(row);
        }
    }
}
