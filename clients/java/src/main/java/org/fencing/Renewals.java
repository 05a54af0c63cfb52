// Copyright (c) 2026, the fencing developers

package org.fencing;

import java.util.ArrayList;
import java.util.List;

/**
 * A lease's deadline on the monotonic clock ({@link System#nanoTime()}):
 * when the lease has surely expired on the server without a renewal.
 *
 * <p>A renewal (the background's, {@code renew()}, {@code use()}) sets the
 * server's expiry to when it runs plus its ttl, replacing the expiry before
 * it, also a later one; it runs after it was sent, so the expiry it sets is
 * at or after sent + ttl here. A reply that arrives late never moves the
 * deadline past that. Renewals overlap and the server may apply them in
 * another order than their answers come back, so the deadline is the
 * earliest sent + ttl of the renewals that may have been the last one
 * applied: each one from when it is sent until a successful renewal sent
 * after its answer came back (which ran after it).
 */
final class Renewals {
    /** One renewal (or the acquisition): when it was sent, its ttl, when its answer came back. */
    static final class Renewal {
        final long sent;
        final long ttl;
        long answered = Long.MAX_VALUE; // in flight; guarded by the Renewals

        Renewal(long sent, long ttl) {
            this.sent = sent;
            this.ttl = ttl;
        }
    }

    private final List<Renewal> open = new ArrayList<>();
    private long deadline;

    /** The acquisition, sent at sent with the lease's ttl, was granted. */
    Renewals(long sent, long ttl) {
        Renewal granted = new Renewal(sent, ttl);
        granted.answered = System.nanoTime();
        open.add(granted);
        settle();
    }

    /** A renewal for ttl nanoseconds is sent now; the deadline may come sooner from now on. */
    synchronized Renewal renewing(long ttl) {
        Renewal renewal = new Renewal(System.nanoTime(), ttl);
        open.add(renewal);
        settle();
        return renewal;
    }

    /** Its answer or its error came back: it ran before that, or not at all. */
    synchronized void answered(Renewal renewal) {
        renewal.answered = System.nanoTime();
    }

    /** It succeeded: it ran after every renewal answered before it was sent, none of which is the last one applied. */
    synchronized void renewed(Renewal renewal) {
        open.removeIf(r -> r != renewal && r.answered - renewal.sent < 0);
        settle();
    }

    private void settle() {
        long earliest = 0;
        boolean first = true;
        for (Renewal r : open) {
            long end = r.sent + r.ttl;
            if (first || end - earliest < 0) {
                earliest = end;
                first = false;
            }
        }
        deadline = earliest;
    }

    /** Nanoseconds until the deadline; zero or less once it has passed. */
    synchronized long remaining() {
        return deadline - System.nanoTime();
    }

    boolean overdue() {
        return remaining() <= 0;
    }
}
