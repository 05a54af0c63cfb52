// Copyright (c) 2026, the fencing developers

package org.fencing;

/**
 * The name is held by another holder, and stayed held for the whole
 * timeout. Its SQLState is {@code 55P03} (lock_not_available), the code of
 * a {@code NOWAIT} lock that is not granted, so that frameworks which map
 * SQLStates (Spring's {@code CannotAcquireLockException}) see it as a busy
 * lock. It never means the lease is lost.
 */
public class BusyException extends FencingException {
    private static final long serialVersionUID = 1L;

    /** The SQLState of a name that stayed held. */
    public static final String SQLSTATE = "55P03";

    public BusyException(String message) {
        super(message, SQLSTATE, null);
    }
}
