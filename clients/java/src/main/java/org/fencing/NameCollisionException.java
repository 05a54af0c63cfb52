// Copyright (c) 2026, the fencing developers

package org.fencing;

/** {@code FN002}: another name with the same 64-bit key is held; rename one of them. */
public class NameCollisionException extends FencingException {
    private static final long serialVersionUID = 1L;

    /** The SQLState of a key shared by two names. */
    public static final String SQLSTATE = "FN002";

    public NameCollisionException(String message, Throwable cause) {
        super(message, SQLSTATE, cause);
    }
}
