// Copyright (c) 2026, the fencing developers

package org.fencing;

import java.lang.System.Logger.Level;
import java.sql.Connection;
import java.sql.SQLException;
import java.time.Duration;
import java.time.Instant;
import java.time.OffsetDateTime;
import java.util.List;
import java.util.Objects;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicReference;
import javax.sql.DataSource;
import org.postgresql.core.TransactionState;

/**
 * A lease on a name, held by the server across commits, rollbacks and
 * connections until it is closed or its ttl passes without a renewal, and
 * its fence token. Get one from {@link Leases}; try-with-resources releases
 * it.
 *
 * <p>While it is held, a scheduler renews it every ttl/3 on a connection of
 * the lease's own, taken from the data source it was acquired from and kept
 * until it is closed. The lease keeps a deadline on the monotonic clock:
 * the moment just before its acquisition or a renewal was sent, plus the
 * ttl granted; a reply that arrives late never moves it further. The lease
 * is lost when a renewal or a batch gets {@code FN004}, when the deadline
 * passes without a successful renewal (a watchdog fires then), when a batch
 * gets {@code FN001} (a newer holder passed the fence), or when the server
 * ends a batch that sat idle in its transaction for longer than the ttl
 * ({@code 25P03}). Losing it runs in this order: {@link #isLost()} becomes
 * true, the renewals stop, the listeners run, then {@link #lost()}
 * completes. From then on, and as soon as the deadline has passed, every
 * error of any of its operations reaches the caller as a
 * {@link LeaseLostException} with the driver's error as its cause, and
 * only once the listeners have run.
 */
public final class Lease implements AutoCloseable {
    private static final System.Logger LOG = System.getLogger("org.fencing");

    /** A renewal that failed for another reason than FN004 is tried again this soon, until the deadline. */
    private static final long RETRY_NANOS = TimeUnit.MILLISECONDS.toNanos(500);

    private final DataSource source;
    private final String name;
    private final Duration ttl;
    private final long ttlNanos;
    private final long renewEvery;
    private final boolean renewsInBackground;
    private final String holder;
    private final long token;
    private final Renewals renewals;
    private final List<LeaseListener> listeners = new CopyOnWriteArrayList<>();
    private final ScheduledExecutorService scheduler;
    private final boolean ownScheduler;

    private final Object connectionLock = new Object();
    private final Object closeLock = new Object();
    private volatile Connection own;
    private volatile boolean calling;

    private final AtomicReference<LeaseLostException> lostReason = new AtomicReference<>();
    private final CompletableFuture<LeaseLostException> signal = new CompletableFuture<>();
    private volatile Thread losing;
    private boolean told; // the loss took its list of listeners; guarded by listeners

    private volatile boolean stopped; // no more renewals
    private volatile boolean unwatched; // no more watchdog
    private volatile boolean released;
    private volatile boolean suspended;
    private volatile Instant expiresAt;
    private ScheduledFuture<?> renewalTask; // guarded by this
    private ScheduledFuture<?> watchdog; // guarded by this

    Lease(DataSource source, Connection own, String name, Duration ttl, LeaseOptions options, String holder,
            long token, long sent) {
        this.source = source;
        this.own = own;
        this.name = name;
        this.ttl = ttl;
        this.ttlNanos = ttl.toNanos();
        this.renewEvery = ttlNanos / 3;
        this.renewsInBackground = options.renewal();
        this.holder = holder;
        this.token = token;
        this.renewals = new Renewals(sent, ttlNanos);
        this.listeners.addAll(options.listeners());
        if (options.scheduler() != null) {
            this.scheduler = options.scheduler();
            this.ownScheduler = false;
        } else {
            this.scheduler = newScheduler(name);
            this.ownScheduler = true;
        }
    }

    private static ScheduledExecutorService newScheduler(String name) {
        ScheduledThreadPoolExecutor executor = new ScheduledThreadPoolExecutor(2, task -> {
            Thread thread = new Thread(task, "fencing lease " + name);
            thread.setDaemon(true);
            return thread;
        });
        executor.setKeepAliveTime(10, TimeUnit.SECONDS);
        executor.allowCoreThreadTimeOut(true);
        executor.setRemoveOnCancelPolicy(true);
        return executor;
    }

    /** Arm the watchdog and the renewal: the lease is granted. */
    void start() {
        armWatchdog();
        if (renewsInBackground) {
            scheduleRenewal(renewEvery);
        }
    }

    // --- what it is -------------------------------------------------------------

    /** The name, as it was given. */
    public String name() {
        return name;
    }

    /** The fence token of this holding. Tokens exceed 2^53: keep them as a long, or as text in JSON. */
    public long token() {
        return token;
    }

    /** The token as its decimal digits, for JSON and for languages without 64-bit integers. */
    public String tokenText() {
        return Long.toString(token);
    }

    public Duration ttl() {
        return ttl;
    }

    /** What {@code fencing.leases} shows as the holder. */
    public String holder() {
        return holder;
    }

    /** The server's expiry after the last renewal this handle made, if it has renewed. */
    public Optional<Instant> expiresAt() {
        return Optional.ofNullable(expiresAt);
    }

    @Override
    public String toString() {
        return "Lease[" + name + ", token " + token + (isLost() ? ", lost" : "") + (released ? ", released" : "")
                + "]";
    }

    // --- loss ---------------------------------------------------------------------

    /** True once the lease is lost. */
    public boolean isLost() {
        return lostReason.get() != null;
    }

    /** Why the lease was lost, once it is. */
    public Optional<LeaseLostException> lossReason() {
        return Optional.ofNullable(lostReason.get());
    }

    /**
     * A future that completes, with the reason, when the lease is lost,
     * after the listeners have run. Each call returns a copy: completing it
     * does not lose the lease.
     */
    public CompletableFuture<LeaseLostException> lost() {
        return signal.copy();
    }

    /** Wait up to timeout for the loss: true when the lease is lost (and its listeners have run). */
    public boolean awaitLoss(Duration timeout) throws InterruptedException {
        try {
            signal.get(timeout.toNanos(), TimeUnit.NANOSECONDS);
            return true;
        } catch (TimeoutException e) {
            return false;
        } catch (ExecutionException e) {
            throw new IllegalStateException(e);
        }
    }

    /** Add a listener; one added once the loss has begun hears it at once (when the loss has run). */
    public void addListener(LeaseListener listener) {
        Objects.requireNonNull(listener, "listener");
        synchronized (listeners) {
            if (!told) {
                listeners.add(listener);
                return;
            }
        }
        awaitLossProcedure();
        tell(listener, lostReason.get());
    }

    /** Lose the lease (once), in the order the class comment gives; return when that has run. */
    void lose(LeaseLostException reason) {
        if (!lostReason.compareAndSet(null, reason)) {
            awaitLossProcedure();
            return;
        }
        losing = Thread.currentThread();
        try {
            stopTimers();
            if (calling) {
                Connections.abort(own); // a renewal that hangs on the network
            }
            LOG.log(Level.WARNING, reason.getMessage());
            List<LeaseListener> hearing;
            synchronized (listeners) {
                told = true;
                hearing = List.copyOf(listeners);
            }
            for (LeaseListener listener : hearing) {
                tell(listener, reason);
            }
        } finally {
            losing = null;
            signal.complete(reason);
            if (ownScheduler) {
                scheduler.shutdown();
            }
        }
    }

    private void tell(LeaseListener listener, LeaseLostException reason) {
        try {
            listener.lost(this, reason);
        } catch (RuntimeException e) {
            LOG.log(Level.ERROR, "a listener of fencing lease \"" + name + "\" failed", e);
        }
    }

    /** Return once the loss has run, unless this thread is the one running it (a listener's call). */
    private void awaitLossProcedure() {
        if (Thread.currentThread() != losing) {
            signal.join();
        }
    }

    private LeaseLostException notRenewed(SQLException cause) {
        return new LeaseLostException("fencing lease \"" + name + "\" was not renewed within its ttl of "
                + describe(ttl) + ": it may have expired", cause);
    }

    static String describe(Duration d) {
        long ms = d.toMillis();
        return ms % 1000 == 0 ? ms / 1000 + " s" : ms + " ms";
    }

    /**
     * What an error of an operation of this lease reaches the caller as:
     * FN004 and the idle-limit termination are a LeaseLostException, FN001
     * a StaleTokenException, each after the loss has run; once the lease is
     * lost or past its deadline, any error is a LeaseLostException; else
     * the error as the driver raised it, or mapped by its SQLState.
     */
    SQLException failed(SQLException error) {
        if (error instanceof LeaseLostException) {
            return error;
        }
        String state = error.getSQLState();
        if (error instanceof StaleTokenException || StaleTokenException.SQLSTATE.equals(state)) {
            lose(new LeaseLostException("fencing lease \"" + name + "\": a newer holder fenced this one out ("
                    + error.getMessage() + ")", error));
            return error instanceof StaleTokenException ? error : new StaleTokenException(error.getMessage(), error);
        }
        if (LeaseLostException.SQLSTATE.equals(state)) {
            LeaseLostException lost = new LeaseLostException(error.getMessage(), error);
            lose(lost);
            return lost;
        }
        if (Connections.IDLE_TIMEOUT.equals(state)) {
            LeaseLostException lost = new LeaseLostException("fencing lease \"" + name
                    + "\": the server ended the batch, which sat idle in its transaction for longer than the lease's ttl of "
                    + describe(ttl) + " (" + error.getMessage() + ")", error);
            lose(lost);
            return lost;
        }
        if (!isLost() && renewals.overdue()) {
            lose(notRenewed(null));
        }
        LeaseLostException reason = lostReason.get();
        if (reason != null) {
            awaitLossProcedure();
            return new LeaseLostException(reason.getMessage() + "; the error: " + error.getMessage(), error);
        }
        return FencingException.translate(error);
    }

    /** The token, or why this lease may not be used now. */
    private void checkUsable(String what) throws SQLException {
        if (released) {
            throw new FencingException(what + ": fencing lease \"" + name + "\" is released", "55000", null);
        }
        if (!isLost() && renewals.overdue()) {
            lose(notRenewed(null));
        }
        LeaseLostException reason = lostReason.get();
        if (reason != null) {
            awaitLossProcedure();
            throw new LeaseLostException(reason.getMessage(), reason);
        }
    }

    // --- the work -------------------------------------------------------------------

    /**
     * The first statement of each batch transaction on conn:
     * {@code fencing.use_lease} checks that the lease is held with this
     * token, renews it, raises the fence of the lease's name to the token
     * and sets the transaction's {@code fencing.token}, so that every row
     * the transaction writes to a protected table is stamped and checked.
     * Refuses a connection in auto-commit mode. Returns the token.
     */
    public long use(Connection conn) throws SQLException {
        Objects.requireNonNull(conn, "conn");
        checkUsable("use()");
        Connections.requireTransaction(conn, "use()");
        Renewals.Renewal renewal = renewing(ttlNanos);
        try {
            Sql.one(conn, Sql.use(name, token), Sql.LONG, true);
        } catch (SQLException e) {
            renewals.answered(renewal);
            throw failed(e);
        }
        renewals.answered(renewal);
        renewed(renewal, null);
        return token;
    }

    /**
     * One batch on a connection of source, returned to it at the end: see
     * {@link #transaction(Connection, SqlFunction)}.
     */
    public <T> T transaction(DataSource source, SqlFunction<Connection, T> body) throws SQLException {
        Objects.requireNonNull(source, "source");
        Objects.requireNonNull(body, "body");
        checkUsable("transaction()");
        Connection conn;
        try {
            conn = source.getConnection();
        } catch (SQLException e) {
            throw failed(e);
        }
        try {
            return transaction(conn, body);
        } finally {
            Connections.closeQuietly(conn);
        }
    }

    /**
     * One batch: a transaction on conn that starts with {@link #use}, runs
     * body, and commits; it rolls back when body throws. Returns what body
     * returned. A connection in auto-commit mode is put out of it for the
     * batch and back afterwards; one already in a transaction is refused.
     * Every SQLException of the batch reaches the caller by the rule of the
     * class comment. A body that caught an error of the batch's transaction
     * and went on has not done its work: the server would roll the
     * transaction back at COMMIT (which PgJDBC reports as a success), so the
     * batch is rolled back and raises {@code 25P02}, or a
     * LeaseLostException when the lease is gone by then.
     */
    public <T> T transaction(Connection conn, SqlFunction<Connection, T> body) throws SQLException {
        Objects.requireNonNull(conn, "conn");
        Objects.requireNonNull(body, "body");
        checkUsable("transaction()");
        boolean autoCommit;
        try {
            autoCommit = conn.getAutoCommit();
            if (!autoCommit) {
                TransactionState state = Connections.state(conn);
                if (state != null && state != TransactionState.IDLE) {
                    throw new FencingException("transaction() starts a transaction of its own, and this connection "
                            + "is already in one: commit or roll it back first", "25001", null);
                }
            } else {
                conn.setAutoCommit(false);
            }
        } catch (SQLException e) {
            throw failed(e);
        }
        try {
            use(conn);
            T result = body.apply(conn);
            if (Connections.failed(conn)) {
                conn.rollback();
                throw swallowed();
            }
            conn.commit();
            return result;
        } catch (SQLException e) {
            rollbackQuietly(conn, e);
            throw failed(e);
        } catch (RuntimeException | Error e) {
            rollbackQuietly(conn, e);
            throw e;
        } finally {
            if (autoCommit) {
                try {
                    conn.setAutoCommit(true);
                } catch (SQLException ignored) {
                    // a connection the batch's error closed
                }
            }
        }
    }

    /** The error of a batch whose body caught an error of its transaction and went on. */
    private SQLException swallowed() {
        if (!ownedOrUnknown()) {
            LeaseLostException lost = new LeaseLostException("fencing lease \"" + name + "\" is not held with token "
                    + token + " any more (the batch's transaction failed in its body and was rolled back)", null);
            lose(lost);
            return lost;
        }
        return new SQLException("fencing lease \"" + name + "\": the body caught an error of the batch's transaction "
                + "and went on; the transaction was rolled back, nothing of the batch was committed", "25P02");
    }

    private boolean ownedOrUnknown() {
        try {
            return owned();
        } catch (SQLException e) {
            return true;
        }
    }

    private static void rollbackQuietly(Connection conn, Throwable failure) {
        try {
            if (!conn.isClosed()) {
                conn.rollback();
            }
        } catch (SQLException e) {
            failure.addSuppressed(e);
        }
    }

    // --- renewal ------------------------------------------------------------------------

    /** Renew now, for the lease's ttl; the new expiry. */
    public Instant renew() throws SQLException {
        return renew(null);
    }

    /**
     * Renew now, for ttl from now (null: the lease's own); the new expiry.
     * The next renewal (the background's, or a batch's) sets it back to the
     * lease's own ttl from then, as the server does.
     */
    public Instant renew(Duration ttl) throws SQLException {
        if (ttl != null && (ttl.isNegative() || ttl.isZero())) {
            throw new IllegalArgumentException("the ttl must be positive");
        }
        checkUsable("renew()");
        Renewals.Renewal renewal = renewing(ttl == null ? ttlNanos : ttl.toNanos());
        OffsetDateTime expiry;
        try {
            expiry = call(Sql.renew(name, token, ttl), Sql.TIMESTAMPTZ);
        } catch (SQLException e) {
            renewals.answered(renewal);
            throw failed(e);
        }
        renewals.answered(renewal);
        renewed(renewal, expiry);
        return expiry.toInstant();
    }

    /** True when the server holds the lease with this token. */
    public boolean owned() throws SQLException {
        if (released || isLost()) {
            return false;
        }
        try {
            return Boolean.TRUE.equals(call(Sql.owned(name, token), Sql.BOOLEAN));
        } catch (SQLException e) {
            throw FencingException.translate(e);
        }
    }

    private Renewals.Renewal renewing(long ttl) {
        Renewals.Renewal renewal = renewals.renewing(ttl);
        armWatchdog();
        return renewal;
    }

    private void renewed(Renewals.Renewal renewal, OffsetDateTime expiry) {
        renewals.renewed(renewal);
        if (expiry != null) {
            expiresAt = expiry.toInstant();
        }
        armWatchdog();
    }

    private synchronized void scheduleRenewal(long delay) {
        if (stopped) {
            return;
        }
        try {
            renewalTask = scheduler.schedule(this::renewOnce, delay, TimeUnit.NANOSECONDS);
        } catch (RejectedExecutionException e) {
            LOG.log(Level.WARNING, "fencing lease \"" + name + "\": its scheduler refused the renewal", e);
        }
    }

    private void renewOnce() {
        if (stopped || isLost()) {
            return;
        }
        Renewals.Renewal renewal = renewing(ttlNanos);
        OffsetDateTime expiry;
        try {
            expiry = call(Sql.renew(name, token, null), Sql.TIMESTAMPTZ);
        } catch (SQLException | RuntimeException e) {
            renewals.answered(renewal);
            renewalFailed(e);
            return;
        }
        renewals.answered(renewal);
        renewed(renewal, expiry);
        if (suspended) {
            suspended = false;
            for (LeaseListener listener : listeners) {
                try {
                    listener.resumed(this);
                } catch (RuntimeException e) {
                    LOG.log(Level.ERROR, "a listener of fencing lease \"" + name + "\" failed", e);
                }
            }
        }
        scheduleRenewal(renewEvery);
    }

    private void renewalFailed(Exception e) {
        if (stopped) {
            return; // lost or released meanwhile (a release aborts a renewal in flight)
        }
        SQLException error = e instanceof SQLException ? (SQLException) e
                : new SQLException("the renewal failed: " + e, null, e);
        if (LeaseLostException.SQLSTATE.equals(error.getSQLState())) {
            lose(new LeaseLostException(error.getMessage(), error));
            return;
        }
        if (renewals.overdue()) {
            lose(notRenewed(error));
            return;
        }
        LOG.log(Level.WARNING, "fencing lease \"" + name + "\": renewal failed, trying again: " + error.getMessage());
        suspended = true;
        for (LeaseListener listener : listeners) {
            try {
                listener.suspended(this, error);
            } catch (RuntimeException failure) {
                LOG.log(Level.ERROR, "a listener of fencing lease \"" + name + "\" failed", failure);
            }
        }
        scheduleRenewal(Math.min(renewEvery, RETRY_NANOS));
    }

    /**
     * Set the watchdog for the deadline, so that the lease is lost then even
     * if the renewal hangs (a network that swallows packets).
     */
    private synchronized void armWatchdog() {
        if (unwatched) {
            return;
        }
        if (watchdog != null) {
            watchdog.cancel(false);
        }
        try {
            watchdog = scheduler.schedule(this::deadlinePassed, Math.max(0, renewals.remaining()),
                    TimeUnit.NANOSECONDS);
        } catch (RejectedExecutionException e) {
            LOG.log(Level.WARNING, "fencing lease \"" + name + "\": its scheduler refused the watchdog", e);
        }
    }

    /** The watchdog ran. A timer may run a little before its time: it is then set again for what is left. */
    private void deadlinePassed() {
        if (unwatched || isLost()) {
            return;
        }
        if (renewals.overdue()) {
            lose(notRenewed(null));
        } else {
            armWatchdog();
        }
    }

    private synchronized void stopTimers() {
        stopped = true;
        unwatched = true;
        if (renewalTask != null) {
            renewalTask.cancel(false);
        }
        if (watchdog != null) {
            watchdog.cancel(false);
        }
        renewalTask = null;
        watchdog = null;
    }

    private synchronized void restartTimers() {
        if (isLost() || released) {
            return;
        }
        stopped = false;
        unwatched = false;
        armWatchdog();
        if (renewsInBackground) {
            scheduleRenewal(renewEvery);
        }
    }

    /**
     * After a release that did not get through: the lease is still this
     * handle's, renewed no more, and its deadline still loses it.
     */
    private synchronized void watchAgain() {
        if (isLost() || released) {
            return;
        }
        unwatched = false;
        armWatchdog();
    }

    /** One statement on the lease's own connection (opened again from the data source when it broke). */
    private <T> T call(String sql, Sql.Reader<T> reader) throws SQLException {
        synchronized (connectionLock) {
            Connection conn = own;
            if (conn == null || conn.isClosed()) {
                own = null;
                conn = Connections.open(source);
                own = conn;
            }
            calling = true;
            try {
                return Sql.one(conn, sql, reader, false);
            } catch (SQLException e) {
                if (Connections.sessionEnded(conn, e)) {
                    own = null;
                    Connections.closeQuietly(conn);
                }
                throw e;
            } finally {
                calling = false;
            }
        }
    }

    // --- the end ---------------------------------------------------------------------

    /**
     * Stop renewing and let the lease run out keep from now, without
     * releasing it: what ShedLock's {@code lockAtLeastFor} asks at unlock.
     * The handle is released by then; a zero keep releases at once.
     */
    public void releaseAfter(Duration keep) throws SQLException {
        Objects.requireNonNull(keep, "keep");
        if (keep.isNegative()) {
            throw new IllegalArgumentException("keep must not be negative");
        }
        if (keep.isZero()) {
            close();
            return;
        }
        synchronized (closeLock) {
            if (released) {
                return;
            }
            checkUsable("releaseAfter()");
            stopTimers();
            try {
                call(Sql.renew(name, token, keep), Sql.TIMESTAMPTZ);
            } catch (SQLException e) {
                SQLException mapped = failed(e);
                restartTimers();
                throw mapped;
            }
            finish();
        }
    }

    /**
     * Release the lease. Closing a released lease does nothing. Raises a
     * LeaseLostException when the server no longer held it with this token
     * and the lease was not known to be lost (it lapsed or was broken: work
     * after that may have been fenced out); the loss runs first. A release
     * that did not get through (a broken connection) keeps the lease
     * releasable: close it again; meanwhile nothing renews it, and its
     * deadline loses it as ever.
     */
    @Override
    public void close() throws SQLException {
        synchronized (closeLock) {
            if (released) {
                return;
            }
            boolean knownLost = isLost();
            stopTimers();
            if (calling) {
                Connections.abort(own); // a renewal that hangs on the network
            }
            Boolean freed;
            try {
                freed = call(Sql.release(name, token), Sql.BOOLEAN);
            } catch (SQLException e) {
                watchAgain();
                throw FencingException.translate(e);
            }
            finish();
            if (!Boolean.TRUE.equals(freed) && !knownLost) {
                LeaseLostException gone = new LeaseLostException("fencing lease \"" + name
                        + "\" was not held with token " + token + " any more: it lapsed or was broken", null);
                lose(gone);
                throw gone;
            }
        }
    }

    private void finish() {
        released = true;
        synchronized (connectionLock) {
            Connections.closeQuietly(own);
            own = null;
        }
        if (ownScheduler) {
            scheduler.shutdown();
        }
    }
}
