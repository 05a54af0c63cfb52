// Copyright (c) 2026, the fencing developers

package org.fencing;

/**
 * {@code 25P01}: the call needs a transaction. On a connection in
 * auto-commit mode the lock, the fence and {@code fencing.token} would end
 * with the statement, so the client refuses it before sending anything;
 * call {@code connection.setAutoCommit(false)} first.
 */
public class NotInTransactionException extends FencingException {
    private static final long serialVersionUID = 1L;

    /** The SQLState of a call outside a transaction block. */
    public static final String SQLSTATE = "25P01";

    public NotInTransactionException(String message, Throwable cause) {
        super(message, SQLSTATE, cause);
    }
}
