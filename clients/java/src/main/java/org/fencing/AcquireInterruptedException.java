// Copyright (c) 2026, the fencing developers

package org.fencing;

/**
 * The thread that waited for a lease was interrupted: the wait was
 * cancelled in the server and nothing is held. Its SQLState is
 * {@code 57014} (query_canceled), its cause the
 * {@link InterruptedException}, and the thread's interrupt status is set
 * again, so that code further up still sees the interruption.
 */
public class AcquireInterruptedException extends FencingException {
    private static final long serialVersionUID = 1L;

    /** The SQLState of a cancelled wait. */
    public static final String SQLSTATE = "57014";

    public AcquireInterruptedException(String message, InterruptedException cause) {
        super(message, SQLSTATE, cause);
    }
}
