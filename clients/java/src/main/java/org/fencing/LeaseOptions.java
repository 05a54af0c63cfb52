// Copyright (c) 2026, the fencing developers

package org.fencing;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Objects;
import java.util.concurrent.ScheduledExecutorService;

/**
 * How a lease is acquired and kept. Immutable: each method returns a copy.
 *
 * <pre>{@code
 * LeaseOptions options = LeaseOptions.defaults()
 *         .timeout(Duration.ofSeconds(5))        // wait up to 5 s for the name (default: try once)
 *         .holder("billing pod-7")               // what fencing.leases shows
 *         .listener(LeaseListener.onLost(reason -> stop()));
 * }</pre>
 */
public final class LeaseOptions {
    private static final LeaseOptions DEFAULTS =
            new LeaseOptions(Duration.ZERO, null, Collections.emptyList(), true, null);

    private final Duration timeout;
    private final String holder;
    private final List<LeaseListener> listeners;
    private final boolean renew;
    private final ScheduledExecutorService scheduler;

    private LeaseOptions(Duration timeout, String holder, List<LeaseListener> listeners, boolean renew,
            ScheduledExecutorService scheduler) {
        this.timeout = timeout;
        this.holder = holder;
        this.listeners = listeners;
        this.renew = renew;
        this.scheduler = scheduler;
    }

    /** Try once, the host and process as holder, no listener, renewal on a scheduler of the lease's own. */
    public static LeaseOptions defaults() {
        return DEFAULTS;
    }

    /**
     * Wait up to {@code timeout} for the name, in the server (it wakes the
     * waiter when the holder releases or its lease expires; no polling).
     * {@link Duration#ZERO} tries once. An interrupt of the waiting thread
     * cancels the wait ({@link AcquireInterruptedException}).
     */
    public LeaseOptions timeout(Duration timeout) {
        Objects.requireNonNull(timeout, "timeout");
        if (timeout.isNegative()) {
            throw new IllegalArgumentException("the timeout must not be negative");
        }
        return new LeaseOptions(timeout, holder, listeners, renew, scheduler);
    }

    /** Wait for the name as long as it takes (until an interrupt). */
    public LeaseOptions waitForever() {
        return new LeaseOptions(null, holder, listeners, renew, scheduler);
    }

    /** What {@code fencing.leases} shows as the holder (at most 256 bytes); default: host and pid. */
    public LeaseOptions holder(String holder) {
        return new LeaseOptions(timeout, Objects.requireNonNull(holder, "holder"), listeners, renew, scheduler);
    }

    /** Add a listener (they are called in the order they were added). */
    public LeaseOptions listener(LeaseListener listener) {
        List<LeaseListener> more = new ArrayList<>(listeners);
        more.add(Objects.requireNonNull(listener, "listener"));
        return new LeaseOptions(timeout, holder, Collections.unmodifiableList(more), renew, scheduler);
    }

    /**
     * With {@code false}, nothing renews the lease in the background: only
     * {@link Lease#use}, {@link Lease#transaction} and {@link Lease#renew()}
     * do. The deadline is watched all the same.
     */
    public LeaseOptions renewal(boolean renew) {
        return new LeaseOptions(timeout, holder, listeners, renew, scheduler);
    }

    /**
     * Run the renewals and the deadline's watchdog on this scheduler instead
     * of one of the lease's own (two daemon threads). A renewal that hangs on
     * the network holds one of its threads until the deadline, so give it at
     * least one thread more than the leases that share it. The lease never
     * shuts it down.
     */
    public LeaseOptions scheduler(ScheduledExecutorService scheduler) {
        return new LeaseOptions(timeout, holder, listeners, renew, Objects.requireNonNull(scheduler, "scheduler"));
    }

    /** The timeout; null waits as long as it takes. */
    public Duration timeout() {
        return timeout;
    }

    /** The holder text; null means the default. */
    public String holder() {
        return holder;
    }

    public List<LeaseListener> listeners() {
        return listeners;
    }

    public boolean renewal() {
        return renew;
    }

    /** The scheduler given, or null for one of the lease's own. */
    public ScheduledExecutorService scheduler() {
        return scheduler;
    }
}
