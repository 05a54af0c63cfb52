// Copyright (c) 2026, the fencing developers

package org.fencing.tests;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.sql.Connection;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;
import org.fencing.FencingException;
import org.fencing.Lease;
import org.fencing.LeaseListener;
import org.fencing.LeaseLostException;
import org.fencing.LeaseOptions;
import org.fencing.Leases;
import org.fencing.NameCollisionException;
import org.fencing.NotPreloadedException;
import org.fencing.SqlFunction;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.postgresql.ds.PGSimpleDataSource;

/**
 * The client's error rule: FN004 is always a LeaseLostException, which
 * reaches the caller only after the loss has run (flag, listeners,
 * signal); once the lease is lost or past its deadline every error of a
 * batch is a LeaseLostException with the driver's error as its cause; the
 * server's end of a batch idle past the ttl (25P03) is one that says so;
 * before that, errors come as the driver raised them or mapped by SQLState.
 */
@Timeout(60)
class ErrorRuleTest {
    private static void execute(Connection conn, String sql) throws SQLException {
        try (Statement st = conn.createStatement()) {
            st.execute(sql);
        }
    }

    /** The LeaseLostException that a batch of lease on source must end with. */
    private static LeaseLostException lostIn(Lease lease, PGSimpleDataSource source, SqlFunction<Connection, Void> body) {
        return assertThrows(LeaseLostException.class, () -> lease.transaction(source, body));
    }

    /** A listener that takes its time, so that an error raised before the loss ran would be seen. */
    private static LeaseListener slowListener(AtomicBoolean done) {
        return LeaseListener.onLost(reason -> {
            Db.sleep(Duration.ofMillis(300));
            done.set(true);
        });
    }

    @Test
    void fn004OfABatchIsLeaseLostOnlyAfterTheLossHasRun() throws SQLException {
        String name = Db.unique("fn004");
        AtomicBoolean listened = new AtomicBoolean();
        PGSimpleDataSource source = Db.source();
        Lease lease = Leases.acquire(source, name, Duration.ofSeconds(30),
                LeaseOptions.defaults().renewal(false).listener(slowListener(listened)));
        Db.value("SELECT fencing.break_lease(?)", name);
        LeaseLostException lost = lostIn(lease, source, c -> null);
        assertTrue(listened.get(), "the error reached the caller before the listeners ran");
        assertTrue(lease.lost().isDone(), "the error reached the caller before the signal");
        assertEquals("FN004", lost.getSQLState());
        assertEquals("FN004", ((SQLException) lost.getCause()).getSQLState());
        assertFalse(lost.getCause() instanceof FencingException, "the cause is the driver's error");
        lease.close();
    }

    @Test
    void onceLostEveryErrorOfTheBatchIsLeaseLostWithTheDriversErrorAsCause() throws SQLException {
        String name = Db.unique("after-loss");
        PGSimpleDataSource source = Db.source();
        Lease lease = Leases.acquire(source, name, Duration.ofMillis(1500));
        LeaseLostException lost = lostIn(lease, source, conn -> {
            Db.value("SELECT fencing.break_lease(?)", name);
            try {
                assertTrue(lease.awaitLoss(Duration.ofSeconds(5)), "the renewal found the lease broken");
            } catch (InterruptedException e) {
                throw new IllegalStateException(e);
            }
            execute(conn, "SELECT 1/0");
            return null;
        });
        assertEquals("22012", ((SQLException) lost.getCause()).getSQLState());
        assertTrue(lost.getMessage().contains("division by zero"), lost.getMessage());
        lease.close();
    }

    @Test
    void pastTheDeadlineEveryErrorIsLeaseLostAfterTheLossHasRun() throws SQLException {
        String name = Db.unique("past-deadline");
        AtomicBoolean listened = new AtomicBoolean();
        PGSimpleDataSource source = Db.source();
        Lease lease = Leases.acquire(source, name, Duration.ofMillis(1500),
                LeaseOptions.defaults().renewal(false).listener(slowListener(listened)));
        LeaseLostException lost = lostIn(lease, source, conn -> {
            execute(conn, "SELECT pg_sleep(2)"); // busy, not idle: the server lets the batch go on
            execute(conn, "SELECT 1/0");
            return null;
        });
        assertTrue(listened.get(), "the error reached the caller before the listeners ran");
        assertTrue(lease.isLost());
        assertEquals("22012", ((SQLException) lost.getCause()).getSQLState());
        lease.close();
    }

    @Test
    void aBatchIdlePastTheTtlIsLeaseLostThatSaysSo() throws SQLException {
        String name = Db.unique("idle");
        PGSimpleDataSource source = Db.source();
        Lease lease = Leases.acquire(source, name, Duration.ofMillis(1500));
        LeaseLostException lost = lostIn(lease, source, conn -> {
            Db.sleep(Duration.ofMillis(2500)); // idle in the batch's transaction for longer than the ttl
            execute(conn, "SELECT 1");
            return null;
        });
        assertEquals("25P03", ((SQLException) lost.getCause()).getSQLState());
        assertTrue(lost.getMessage().contains("idle in its transaction for longer than the lease's ttl"),
                lost.getMessage());
        assertTrue(lease.isLost());
        lease.close();
    }

    @Test
    void beforeTheDeadlineErrorsComeAsTheDriverRaisedThemOrMappedBySqlState() throws SQLException {
        String name = Db.unique("live");
        PGSimpleDataSource source = Db.source();
        try (Lease lease = Leases.acquire(source, name, Duration.ofSeconds(30))) {
            SQLException plain = assertThrows(SQLException.class,
                    () -> lease.transaction(source, conn -> {
                        execute(conn, "SELECT 1/0");
                        return null;
                    }));
            assertEquals("22012", plain.getSQLState());
            assertFalse(plain instanceof FencingException);
            assertInstanceOf(NameCollisionException.class, assertThrows(SQLException.class,
                    () -> lease.transaction(source, conn -> {
                        execute(conn, "DO $$ BEGIN RAISE EXCEPTION 'x' USING ERRCODE = 'FN002'; END $$");
                        return null;
                    })));
            assertInstanceOf(NotPreloadedException.class, assertThrows(SQLException.class,
                    () -> lease.transaction(source, conn -> {
                        execute(conn, "DO $$ BEGIN RAISE EXCEPTION 'x' USING ERRCODE = 'FN003'; END $$");
                        return null;
                    })));
            assertFalse(lease.isLost());
            assertTrue(lease.owned());
        }
    }

    @Test
    void aBodyThatCaughtAnErrorOfItsBatchDoesNotCommit() throws SQLException {
        String ledger = Db.ledger();
        PGSimpleDataSource source = Db.source();
        try (Lease lease = Leases.acquire(source, Db.unique("caught"), Duration.ofSeconds(30))) {
            AtomicReference<String> caught = new AtomicReference<>();
            SQLException rolledBack = assertThrows(SQLException.class, () -> lease.transaction(source, conn -> {
                Db.update(conn, ledger, 1, 7);
                try {
                    execute(conn, "SELECT 1/0");
                } catch (SQLException e) {
                    caught.set(e.getSQLState());
                }
                return null;
            }));
            assertEquals("22012", caught.get());
            assertEquals("25P02", rolledBack.getSQLState());
            assertEquals(0, Db.amount(ledger, 1), "nothing of the batch was committed");
            assertFalse(lease.isLost());
            lease.transaction(source, conn -> {
                Db.update(conn, ledger, 1, 8);
                return null;
            });
        }
        assertEquals(8, Db.amount(ledger, 1));
    }

    @Test
    void aBodyThatCaughtTheLossOfItsLeaseGetsLeaseLost() throws SQLException {
        String ledger = Db.ledger();
        String name = Db.unique("caught-lost");
        PGSimpleDataSource source = Db.source();
        Lease lease = Leases.acquire(source, name, Duration.ofSeconds(30), LeaseOptions.defaults().renewal(false));
        AtomicReference<String> caught = new AtomicReference<>();
        lostIn(lease, source, conn -> {
            Db.update(conn, ledger, 1, 7);
            Db.value("SELECT fencing.break_lease(?)", name);
            try {
                execute(conn, "SELECT fencing.use_lease('" + name + "', " + lease.token() + ")");
            } catch (SQLException e) {
                caught.set(e.getSQLState());
            }
            return null;
        });
        assertEquals("FN004", caught.get());
        assertTrue(lease.isLost());
        assertEquals(0, Db.amount(ledger, 1));
        lease.close();
    }
}
