// Copyright (c) 2026, the fencing developers

package org.fencing;

/**
 * {@code FN001}: a newer holder wrote first; this write was rejected and
 * nothing was changed. Stop, do not retry. A batch of a lease that meets it
 * has lost its lease.
 */
public class StaleTokenException extends FencingException {
    private static final long serialVersionUID = 1L;

    /** The SQLState of a stale write. */
    public static final String SQLSTATE = "FN001";

    public StaleTokenException(String message, Throwable cause) {
        super(message, SQLSTATE, cause);
    }
}
