// Copyright (c) 2026, the fencing developers

package org.fencing;

import java.sql.SQLException;

/**
 * The base class of every exception of this client. Each one is an
 * {@link SQLException}: its {@link #getSQLState() SQLState} is the server's
 * when the server raised it, and the driver's exception is its
 * {@link #getCause() cause}.
 */
public class FencingException extends SQLException {
    private static final long serialVersionUID = 1L;

    /** An exception with a message, an SQLState and the error behind it (or null). */
    public FencingException(String message, String sqlState, Throwable cause) {
        super(message, sqlState, cause);
    }

    /**
     * The client's exception for a driver's error, keyed by its SQLState,
     * with the driver's error as its cause: {@code FN001}
     * {@link StaleTokenException}, {@code FN002} {@link NameCollisionException},
     * {@code FN003} {@link NotPreloadedException}, {@code FN004}
     * {@link LeaseLostException}, {@code 25P01} {@link NotInTransactionException}.
     * Any other error, and one of this client already, is returned as it is.
     */
    public static SQLException translate(SQLException error) {
        if (error == null || error instanceof FencingException) {
            return error;
        }
        String state = error.getSQLState();
        if (state == null) {
            return error;
        }
        String message = error.getMessage();
        switch (state) {
            case StaleTokenException.SQLSTATE:
                return new StaleTokenException(message, error);
            case NameCollisionException.SQLSTATE:
                return new NameCollisionException(message, error);
            case NotPreloadedException.SQLSTATE:
                return new NotPreloadedException(message, error);
            case LeaseLostException.SQLSTATE:
                return new LeaseLostException(message, error);
            case NotInTransactionException.SQLSTATE:
                return new NotInTransactionException(message, error);
            default:
                return error;
        }
    }
}
