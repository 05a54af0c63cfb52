// Copyright (c) 2026, the fencing developers

package org.fencing.tests;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.zaxxer.hikari.HikariDataSource;
import java.sql.Connection;
import java.time.Duration;
import java.util.List;
import java.util.Optional;
import org.fencing.Lease;
import org.fencing.LeaseLostException;
import org.fencing.LeaseOptions;
import org.fencing.Leases;
import org.fencing.Locks;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.postgresql.ds.PGSimpleDataSource;

/**
 * A lease's whole life through PgBouncer in transaction pooling mode, with
 * a HikariCP pool in front of it: every transaction may run on another
 * server connection, so nothing may live in the session, and nothing may
 * be prepared on one.
 */
@Timeout(60)
class PgBouncerTest {
    @Test
    void aLeaseThroughPgBouncer() throws Exception {
        String ledger = Db.ledger();
        String name = Db.unique("bouncer");
        long token;
        try (HikariDataSource pool = Db.pool(Db.bouncerUrl(), 4)) {
            try (Lease lease = Leases.acquire(pool, name, Duration.ofSeconds(3))) {
                token = lease.token();
                for (int i = 0; i < 8; i++) {
                    int id = 1 + i % 2;
                    assertEquals(lease.tokenText(), lease.transaction(pool, conn -> {
                        Db.update(conn, ledger, id, 1);
                        return Db.value(conn, "SELECT current_setting('fencing.token')");
                    }));
                }
                // after each COMMIT, no session of the pooler keeps the token
                for (int i = 0; i < 4; i++) {
                    try (Connection conn = pool.getConnection()) {
                        Object left = Db.value(conn, "SELECT current_setting('fencing.token', true)");
                        assertTrue(left == null || "".equals(left), "a session kept fencing.token = " + left);
                        conn.rollback();
                    }
                }
                assertFalse(lease.awaitLoss(Duration.ofSeconds(4)), "lost through PgBouncer");
                assertEquals(Optional.empty(), Leases.tryAcquire(Db.source(Db.bouncerUrl()), name, Duration.ofSeconds(3)));
                // a transaction lock through the pooler too
                try (Connection conn = pool.getConnection()) {
                    assertTrue(Locks.tryLock(conn, Db.unique("bouncer-lock")).isPresent());
                    conn.commit();
                }
            }
        }
        assertEquals(List.of(List.of(4, token), List.of(4, token)),
                Db.rows("SELECT amount, fence FROM " + ledger + " ORDER BY id"));
        try (Lease again = Leases.acquire(Db.source(Db.bouncerUrl()), name, Duration.ofSeconds(3))) {
            assertTrue(again.token() > token);
        }
    }

    @Test
    void aStaleHolderThroughPgBouncer() throws Exception {
        String ledger = Db.ledger();
        String name = Db.unique("bouncer-stale");
        PGSimpleDataSource source = Db.source(Db.bouncerUrl());
        Lease old = Leases.acquire(source, name, Duration.ofSeconds(1), LeaseOptions.defaults().renewal(false));
        try (Lease newer = Leases.acquire(source, name, Duration.ofSeconds(30),
                LeaseOptions.defaults().timeout(Duration.ofSeconds(10)))) {
            newer.transaction(source, conn -> {
                Db.update(conn, ledger, 1, 1);
                return null;
            });
            assertThrows(LeaseLostException.class, () -> old.transaction(source, conn -> {
                Db.update(conn, ledger, 1, 2);
                return null;
            }));
        }
        old.close();
        assertEquals(1, Db.amount(ledger, 1));
    }
}
