// Copyright (c) 2026, the fencing developers

package org.fencing;

import java.io.IOException;
import java.net.InetAddress;
import java.net.UnknownHostException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.Objects;
import java.util.Optional;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import javax.sql.DataSource;

/**
 * Acquiring a lease ({@code fencing.acquire_lease}).
 *
 * <pre>{@code
 * try (Lease lease = Leases.acquire(dataSource, "invoice-run:2026-10", Duration.ofSeconds(30))) {
 *     lease.transaction(dataSource, conn -> ...);     // each batch: use_lease first
 * } catch (BusyException e) {
 *     // another worker has it
 * }
 * }</pre>
 *
 * <p>The acquisition runs on a connection of the data source that the lease
 * keeps for its renewals and its release. Waiting (a timeout in the options)
 * happens in the server, which wakes the waiter when the name is released or
 * its lease expires; interrupting the waiting thread cancels the wait.
 */
public final class Leases {
    private Leases() {
    }

    /** How soon a waiting acquisition that an interrupt cancelled is cancelled again while it runs on. */
    private static final Duration CANCEL_AGAIN = Duration.ofMillis(100);

    /** The threads a waiting acquisition runs its statement on, so that the caller's wait can be interrupted. */
    private static final ExecutorService WAITERS = Executors.newCachedThreadPool(task -> {
        Thread thread = new Thread(task, "fencing lease acquisition");
        thread.setDaemon(true);
        return thread;
    });

    /** Take the lease, trying once; a {@link BusyException} when another holder has it. */
    public static Lease acquire(DataSource source, String name, Duration ttl) throws SQLException {
        return acquire(source, name, ttl, LeaseOptions.defaults());
    }

    /** Take the lease, waiting as the options say; a {@link BusyException} when the name stayed held. */
    public static Lease acquire(DataSource source, String name, Duration ttl, LeaseOptions options)
            throws SQLException {
        Optional<Lease> lease = tryAcquire(source, name, ttl, options);
        if (lease.isPresent()) {
            return lease.get();
        }
        Duration timeout = options.timeout();
        throw new BusyException("fencing lease \"" + name + "\" is held by another holder"
                + (timeout == null || timeout.isZero() ? "" : ", for all of " + Lease.describe(timeout)));
    }

    /** Take the lease, trying once: empty when another holder has it. */
    public static Optional<Lease> tryAcquire(DataSource source, String name, Duration ttl) throws SQLException {
        return tryAcquire(source, name, ttl, LeaseOptions.defaults());
    }

    /** Take the lease, waiting as the options say: empty when the name stayed held. */
    public static Optional<Lease> tryAcquire(DataSource source, String name, Duration ttl, LeaseOptions options)
            throws SQLException {
        Objects.requireNonNull(source, "source");
        Objects.requireNonNull(name, "name");
        Objects.requireNonNull(ttl, "ttl");
        Objects.requireNonNull(options, "options");
        if (ttl.isNegative() || ttl.isZero()) {
            throw new IllegalArgumentException("the ttl must be positive");
        }
        String holder = options.holder() != null ? options.holder() : defaultHolder();
        Duration timeout = options.timeout();
        long started = System.nanoTime();
        Connection conn = Connections.open(source);
        boolean kept = false;
        try {
            while (true) {
                Duration wait = timeout == null ? Sql.LONGEST_WAIT : min(remaining(timeout, started), Sql.LONGEST_WAIT);
                String sql = Sql.acquire(name, ttl, wait, holder);
                long sent = System.nanoTime();
                Long token;
                try {
                    token = wait.isZero() ? Sql.one(conn, sql, Sql.LONG, false) : waitFor(conn, sql, name);
                } catch (SQLException e) {
                    throw FencingException.translate(e);
                }
                if (token != null) {
                    Lease lease = new Lease(source, conn, name, ttl, options, holder, token, sent);
                    kept = true;
                    lease.start();
                    return Optional.of(lease);
                }
                if (timeout != null && remaining(timeout, started).isZero()) {
                    return Optional.empty();
                }
            }
        } finally {
            if (!kept) {
                Connections.closeQuietly(conn);
            }
        }
    }

    private static Duration remaining(Duration timeout, long started) {
        Duration left = timeout.minusNanos(System.nanoTime() - started);
        return left.isNegative() ? Duration.ZERO : left;
    }

    private static Duration min(Duration a, Duration b) {
        return a.compareTo(b) <= 0 ? a : b;
    }

    /**
     * Run a waiting acquire_lease on another thread while this one waits for
     * it, interruptibly. An interrupt cancels the statement in the server
     * (cancelled()); a token granted before the cancel came is released
     * again.
     */
    private static Long waitFor(Connection conn, String sql, String name) throws SQLException {
        try (Statement statement = conn.createStatement()) {
            Future<Long> result = WAITERS.submit(() -> Sql.one(statement, sql, Sql.LONG));
            try {
                return result.get();
            } catch (InterruptedException interrupted) {
                Long granted = null;
                try {
                    granted = cancelled(conn, statement, result);
                } catch (ExecutionException ignored) {
                    // cancelled in the server: nothing held
                }
                if (granted != null) {
                    Sql.one(conn, Sql.release(name, granted), Sql.BOOLEAN, false);
                }
                Thread.currentThread().interrupt();
                throw new AcquireInterruptedException("waiting for fencing lease \"" + name
                        + "\" was interrupted: the wait was cancelled and nothing is held", interrupted);
            } catch (ExecutionException e) {
                Throwable cause = e.getCause();
                if (cause instanceof SQLException) {
                    throw (SQLException) cause;
                }
                if (cause instanceof RuntimeException) {
                    throw (RuntimeException) cause;
                }
                throw new SQLException("waiting for fencing lease \"" + name + "\" failed", null, cause);
            }
        }
    }

    /**
     * Cancel the statement of result in the server and return what it
     * returned, uninterruptibly. A cancel request has been acted on when
     * it returns: a statement still waiting ends with 57014, and a session
     * that is idle ignores it, also one whose statement has not reached it
     * yet (an interrupt that came before the statement was sent, when
     * PgJDBC's Statement.cancel() sends nothing at all). So a cancel is sent
     * again every CANCEL_AGAIN until the statement has ended.
     */
    private static Long cancelled(Connection conn, Statement statement, Future<Long> result)
            throws ExecutionException {
        boolean interrupted = false;
        try {
            while (true) {
                try {
                    Connections.cancel(conn, statement);
                } catch (SQLException e) {
                    // no cancel got through this time: it is sent again
                }
                try {
                    return result.get(CANCEL_AGAIN.toNanos(), TimeUnit.NANOSECONDS);
                } catch (TimeoutException e) {
                    // still running: the cancel came before its statement
                } catch (InterruptedException e) {
                    interrupted = true;
                }
            }
        } finally {
            if (interrupted) {
                Thread.currentThread().interrupt();
            }
        }
    }

    private static volatile String defaultHolder;

    /** What fencing.leases shows as the holder when none is given: the host and the process (found once). */
    static String defaultHolder() {
        String holder = defaultHolder;
        if (holder == null) {
            holder = hostName() + " pid " + ProcessHandle.current().pid();
            defaultHolder = holder;
        }
        return holder;
    }

    /** The host's name, without asking a name service when the kernel can tell (the extension runs on Linux). */
    private static String hostName() {
        String host = System.getenv("HOSTNAME");
        if (host != null && !host.isEmpty()) {
            return host;
        }
        try {
            host = Files.readString(Path.of("/proc/sys/kernel/hostname"), StandardCharsets.US_ASCII).trim();
            if (!host.isEmpty()) {
                return host;
            }
        } catch (IOException | RuntimeException e) {
            // not Linux: ask the name service
        }
        try {
            return InetAddress.getLocalHost().getHostName();
        } catch (UnknownHostException e) {
            return "unknown host";
        }
    }
}
