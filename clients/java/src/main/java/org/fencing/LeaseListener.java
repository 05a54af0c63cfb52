// Copyright (c) 2026, the fencing developers

package org.fencing;

import java.sql.SQLException;
import java.util.function.Consumer;

/**
 * What a lease tells as it lives, the way Curator's connection states do.
 * Every method has a default that does nothing. They run on the thread that
 * met the event (the lease's scheduler for the renewal and the deadline, the
 * caller's for an error of a batch): return quickly. An exception thrown by
 * one is logged and does not stop the others.
 */
public interface LeaseListener {
    /**
     * The lease is lost: stop the work. By then {@link Lease#isLost()} is
     * true and the renewals have stopped; {@link Lease#lost()} completes
     * after every listener has returned.
     */
    default void lost(Lease lease, LeaseLostException reason) {
    }

    /**
     * A renewal failed for another reason than a lost lease (a broken
     * connection, a pool with no connection to spare); it is tried again
     * until the deadline passes. The lease is still held, as far as the
     * server is known to have said.
     */
    default void suspended(Lease lease, SQLException error) {
    }

    /** A renewal went through again after {@link #suspended}. */
    default void resumed(Lease lease) {
    }

    /** A listener that only hears the loss. */
    static LeaseListener onLost(Consumer<LeaseLostException> action) {
        return new LeaseListener() {
            @Override
            public void lost(Lease lease, LeaseLostException reason) {
                action.accept(reason);
            }
        };
    }
}
