// Copyright (c) 2026, the fencing developers

package org.fencing;

/** {@code FN003}: fencing is not in the server's {@code shared_preload_libraries}. */
public class NotPreloadedException extends FencingException {
    private static final long serialVersionUID = 1L;

    /** The SQLState of a server that did not preload fencing. */
    public static final String SQLSTATE = "FN003";

    public NotPreloadedException(String message, Throwable cause) {
        super(message, SQLSTATE, cause);
    }
}
