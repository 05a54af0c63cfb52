// Copyright (c) 2026, the fencing developers

package org.fencing.tests;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.zaxxer.hikari.HikariDataSource;
import java.sql.Connection;
import java.sql.SQLException;
import java.sql.Statement;
import java.sql.Timestamp;
import java.time.Duration;
import java.time.Instant;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.atomic.AtomicBoolean;
import org.fencing.BusyException;
import org.fencing.FencingException;
import org.fencing.Lease;
import org.fencing.LeaseListener;
import org.fencing.LeaseLostException;
import org.fencing.LeaseOptions;
import org.fencing.Leases;
import org.fencing.NotInTransactionException;
import org.fencing.StaleTokenException;
import org.junit.jupiter.api.Test;
import org.postgresql.ds.PGSimpleDataSource;

/** A lease's life through the public API: acquire, busy, use, transaction, renew, release. */
class LeaseTest {
    private static final Duration TTL = Duration.ofSeconds(30);

    @Test
    void tryWithResourcesAcquiresAndReleases() throws SQLException {
        String name = Db.unique("with");
        long token;
        try (Lease lease = Leases.acquire(Db.source(), name, TTL, LeaseOptions.defaults().holder("test job"))) {
            token = lease.token();
            assertTrue(token > (1L << 53), "tokens exceed 2^53");
            assertEquals(Long.toString(token), lease.tokenText());
            assertEquals(List.of(List.of(token, "test job")),
                    Db.rows("SELECT token, holder FROM fencing.leases WHERE name = ?", name));
            assertTrue(lease.owned());
            assertFalse(lease.isLost());
        }
        assertNull(Db.leaseToken(name));
    }

    @Test
    void aHeldNameIsBusyOrEmptyNeverLost() throws SQLException {
        String name = Db.unique("busy");
        PGSimpleDataSource source = Db.source();
        try (Lease held = Leases.acquire(source, name, TTL)) {
            BusyException busy = assertThrows(BusyException.class, () -> Leases.acquire(source, name, TTL));
            assertEquals("55P03", busy.getSQLState());
            assertEquals(Optional.empty(), Leases.tryAcquire(source, name, TTL));
            long before = System.nanoTime();
            assertEquals(Optional.empty(), Leases.tryAcquire(source, name, TTL,
                    LeaseOptions.defaults().timeout(Duration.ofMillis(300))));
            assertTrue(System.nanoTime() - before >= Duration.ofMillis(250).toNanos(), "it did not wait");
            assertFalse(held.isLost());
        }
        assertEquals(0L, Db.value("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Extension'"
                + " AND query LIKE '%acquire_lease%' AND pid <> pg_backend_pid()"));
    }

    @Test
    void namesAreNormalisedAsTheServerDoes() throws SQLException {
        String name = Db.unique("Straße");
        try (Lease lease = Leases.acquire(Db.source(), name, TTL)) {
            assertEquals(Optional.empty(), Leases.tryAcquire(Db.source(), "  " + name.toUpperCase() + " ", TTL));
            assertEquals(lease.token(), Db.leaseToken(name));
            String holder = (String) Db.value("SELECT holder FROM fencing.leases WHERE name = fencing.normalize_name(?)",
                    name);
            assertTrue(holder.endsWith(" pid " + ProcessHandle.current().pid()), "the default holder: " + holder);
            assertEquals(holder, lease.holder());
        }
    }

    @Test
    void useFencesTheBatchAndSetsTheToken() throws SQLException {
        String ledger = Db.ledger();
        String name = Db.unique("use");
        try (Lease lease = Leases.acquire(Db.source(), name, TTL); Connection conn = Db.admin()) {
            conn.setAutoCommit(false);
            assertEquals(lease.token(), lease.use(conn));
            Db.update(conn, ledger, 1, 5);
            assertEquals(lease.tokenText(), Db.value(conn, "SELECT current_setting('fencing.token')"));
            conn.commit();
            assertEquals(lease.token(), Db.fence(ledger, 1));
            assertEquals(lease.token(), ((Number) Db.value(
                    "SELECT fence FROM fencing.resource_fences WHERE resource = fencing.normalize_name(?)", name))
                    .longValue());
        }
    }

    @Test
    void useAndLocksRefuseAutoCommit() throws SQLException {
        try (Lease lease = Leases.acquire(Db.source(), Db.unique("autocommit"), TTL); Connection conn = Db.admin()) {
            NotInTransactionException refused = assertThrows(NotInTransactionException.class, () -> lease.use(conn));
            assertEquals("25P01", refused.getSQLState());
            assertTrue(refused.getMessage().contains("auto-commit"));
            conn.setAutoCommit(false);
            assertEquals(lease.token(), lease.use(conn));
            conn.rollback();
        }
    }

    @Test
    void transactionCommitsRollsBackAndRestoresAutoCommit() throws SQLException {
        String ledger = Db.ledger();
        PGSimpleDataSource source = Db.source();
        try (Lease lease = Leases.acquire(source, Db.unique("tx"), TTL); Connection conn = source.getConnection()) {
            assertEquals(Integer.valueOf(1), lease.transaction(conn, c -> {
                try (Statement st = c.createStatement()) {
                    return st.executeUpdate("UPDATE " + ledger + " SET amount = 7 WHERE id = 2");
                }
            }));
            assertTrue(conn.getAutoCommit(), "auto-commit is back after the batch");
            IllegalStateException thrown = new IllegalStateException("the body failed");
            assertEquals(thrown, assertThrows(IllegalStateException.class, () -> lease.transaction(conn, c -> {
                Db.update(c, ledger, 2, 100);
                throw thrown;
            })));
            assertEquals(7, Db.amount(ledger, 2));
            assertEquals(lease.token(), Db.fence(ledger, 2));
            conn.setAutoCommit(false);
            Db.value(conn, "SELECT 1");
            FencingException inOne = assertThrows(FencingException.class,
                    () -> lease.transaction(conn, c -> null));
            assertTrue(inOne.getMessage().contains("already in one"), inOne.getMessage());
            conn.rollback();
        }
    }

    @Test
    void aStaleWriteOfABatchIsStaleTokenAndLosesTheLease() throws SQLException {
        String ledger = Db.ledger();
        String name = Db.unique("stale");
        PGSimpleDataSource source = Db.source();
        Lease lease = Leases.acquire(source, name, TTL);
        // a newer token reached the row first
        Db.exec("UPDATE " + ledger + " SET amount = 1, fence = fencing.next_token() WHERE id = 1");
        StaleTokenException stale = assertThrows(StaleTokenException.class,
                () -> lease.transaction(source, conn -> {
                    Db.update(conn, ledger, 1, 99);
                    return null;
                }));
        assertEquals("FN001", stale.getSQLState());
        assertInstanceOf(SQLException.class, stale.getCause());
        assertEquals("FN001", ((SQLException) stale.getCause()).getSQLState());
        assertFalse(stale.getCause() instanceof FencingException, "the cause is the driver's error");
        assertTrue(lease.isLost());
        assertTrue(lease.lost().isDone());
        assertThrows(LeaseLostException.class, () -> lease.transaction(source, conn -> null));
        lease.close();
        assertEquals(1, Db.amount(ledger, 1));
    }

    @Test
    void renewReturnsTheNewExpiry() throws SQLException {
        String name = Db.unique("renew");
        try (Lease lease = Leases.acquire(Db.source(), name, Duration.ofSeconds(5),
                LeaseOptions.defaults().renewal(false))) {
            Instant expires = lease.renew(Duration.ofSeconds(120));
            assertEquals(Optional.of(expires), lease.expiresAt());
            assertEquals(expires, ((Timestamp) Db.value(
                    "SELECT expires_at FROM fencing.leases WHERE name = ?", name)).toInstant());
            assertTrue(Duration.between(Instant.now(), expires).getSeconds() > 100);
        }
    }

    @Test
    void renewAfterABreakIsLeaseLostWithTheDriversError() throws SQLException {
        String name = Db.unique("broken");
        Lease lease = Leases.acquire(Db.source(), name, TTL, LeaseOptions.defaults().renewal(false));
        assertEquals(lease.token(), ((Number) Db.value("SELECT fencing.break_lease(?)", name)).longValue());
        LeaseLostException lost = assertThrows(LeaseLostException.class, lease::renew);
        assertEquals("FN004", ((SQLException) lost.getCause()).getSQLState());
        assertTrue(lease.isLost());
        assertFalse(lease.owned());
        lease.close(); // known lost: closing says nothing more
    }

    @Test
    void aLeaseWhoseCloseDidNotGetThroughIsLostAtItsDeadline() throws Exception {
        // the handle keeps the lease, and nothing renews it any more: its
        // deadline still loses it, with the listeners before the signal
        String name = Db.unique("close-failed");
        String app = Db.unique("closer");
        AtomicBoolean listened = new AtomicBoolean();
        Lease lease = Leases.acquire(Db.named(app), name, Duration.ofSeconds(2),
                LeaseOptions.defaults().listener(LeaseListener.onLost(reason -> listened.set(true))));
        Db.exec("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = '" + app + "'");
        Db.waitFor(Db.sql(() -> ((Number) Db.value("SELECT count(*) FROM pg_stat_activity WHERE application_name = ?",
                app)).intValue() == 0), Duration.ofSeconds(10), "the lease's connection ended");
        assertThrows(SQLException.class, lease::close);
        assertFalse(lease.isLost());
        assertTrue(lease.awaitLoss(Duration.ofSeconds(10)), "the lease was not lost at its deadline");
        assertTrue(listened.get(), "the listeners did not run");
        assertThrows(LeaseLostException.class, () -> lease.transaction(Db.source(), conn -> null));
        lease.close();
    }

    @Test
    void aHikariPoolAsTheSource() throws SQLException {
        String ledger = Db.ledger();
        try (HikariDataSource pool = Db.pool(Db.url(), 4);
                Lease lease = Leases.acquire(pool, Db.unique("hikari"), Duration.ofSeconds(3))) {
            for (int i = 0; i < 3; i++) {
                lease.transaction(pool, conn -> {
                    Db.update(conn, ledger, 1, 1);
                    return null;
                });
            }
            assertFalse(lease.awaitLoss(Duration.ofSeconds(4)), "the renewals did not keep the lease");
            assertTrue(lease.owned());
        } catch (InterruptedException e) {
            throw new IllegalStateException(e);
        }
        assertEquals(3, Db.amount(ledger, 1));
    }

    @Test
    void badArguments() {
        PGSimpleDataSource source = Db.source();
        assertThrows(IllegalArgumentException.class, () -> Leases.acquire(source, "x", Duration.ZERO));
        assertThrows(IllegalArgumentException.class, () -> Leases.acquire(source, "x\0y", TTL));
        assertThrows(IllegalArgumentException.class, () -> LeaseOptions.defaults().timeout(Duration.ofSeconds(-1)));
        assertThrows(NullPointerException.class, () -> Leases.acquire(source, null, TTL));
        SQLException empty = assertThrows(SQLException.class, () -> Leases.acquire(source, "", TTL));
        assertFalse(empty instanceof BusyException);
    }
}
