// Copyright (c) 2026, the fencing developers

package org.fencing;

/**
 * The lease, or the transaction lock, is gone: stop the work. Acquire again
 * to start over; never reconnect and carry on with the old token.
 *
 * <p>A lease raises it for {@code FN004} (it expired, was released, broken
 * or taken over, or was lost in a crash), when its deadline passed without a
 * renewal, when the server ended a batch that sat idle in its transaction
 * for longer than the ttl ({@code 25P03}), and for every error of any of its
 * operations once it is lost or past its deadline. A transaction lock
 * raises it when the server ended the session that held it. The driver's
 * error, where there was one, is the cause.
 */
public class LeaseLostException extends FencingException {
    private static final long serialVersionUID = 1L;

    /** The SQLState of a lost lease. */
    public static final String SQLSTATE = "FN004";

    public LeaseLostException(String message, Throwable cause) {
        super(message, SQLSTATE, cause);
    }
}
