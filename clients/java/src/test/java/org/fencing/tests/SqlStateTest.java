// Copyright (c) 2026, the fencing developers

package org.fencing.tests;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.sql.Connection;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.Map;
import org.fencing.FencingException;
import org.fencing.LeaseLostException;
import org.fencing.NameCollisionException;
import org.fencing.NotInTransactionException;
import org.fencing.NotPreloadedException;
import org.fencing.StaleTokenException;
import org.junit.jupiter.api.Test;

/** Each SQLState of fencing becomes its exception, with the driver's error as the cause. */
class SqlStateTest {
    private static SQLException raised(Connection conn, String state) {
        return assertThrows(SQLException.class, () -> {
            try (Statement st = conn.createStatement()) {
                st.execute("DO $$ BEGIN RAISE EXCEPTION 'raised %', '" + state + "' USING ERRCODE = '" + state
                        + "'; END $$");
            }
        });
    }

    @Test
    void translateMapsEachSqlState() throws SQLException {
        Map<String, Class<? extends FencingException>> cases = Map.of(
                "FN001", StaleTokenException.class,
                "FN002", NameCollisionException.class,
                "FN003", NotPreloadedException.class,
                "FN004", LeaseLostException.class,
                "25P01", NotInTransactionException.class);
        try (Connection conn = Db.admin()) {
            for (Map.Entry<String, Class<? extends FencingException>> c : cases.entrySet()) {
                SQLException driver = raised(conn, c.getKey());
                SQLException mapped = FencingException.translate(driver);
                assertEquals(c.getValue(), mapped.getClass(), c.getKey());
                assertEquals(c.getKey(), mapped.getSQLState());
                assertSame(driver, mapped.getCause());
                assertTrue(mapped.getMessage().contains("raised " + c.getKey()), mapped.getMessage());
                assertSame(mapped, FencingException.translate(mapped), "already the client's");
            }
            SQLException other = raised(conn, "57P01");
            assertSame(other, FencingException.translate(other), "not fencing's: as it was");
        }
    }

    @Test
    void theServersOwnErrorsAreMappedToo() throws SQLException {
        try (Connection conn = Db.admin(); Statement st = conn.createStatement()) {
            SQLException lost = FencingException.translate(assertThrows(SQLException.class,
                    () -> st.execute("SELECT fencing.renew_lease('" + Db.unique("never") + "', 1)")));
            assertEquals(LeaseLostException.class, lost.getClass());
            SQLException outside = FencingException.translate(assertThrows(SQLException.class,
                    () -> st.execute("SELECT fencing.set_token(fencing.next_token())")));
            assertEquals(NotInTransactionException.class, outside.getClass());
        }
    }
}
