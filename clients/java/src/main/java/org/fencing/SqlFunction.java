// Copyright (c) 2026, the fencing developers

package org.fencing;

import java.sql.SQLException;

/**
 * A function that may throw {@link SQLException}: the body of a batch
 * ({@link Lease#transaction(javax.sql.DataSource, SqlFunction)}).
 */
@FunctionalInterface
public interface SqlFunction<T, R> {
    R apply(T value) throws SQLException;
}
