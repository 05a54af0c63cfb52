// Copyright (c) 2026, the fencing developers

package org.fencing.tests;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.sql.SQLException;
import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import org.fencing.AcquireInterruptedException;
import org.fencing.Lease;
import org.fencing.LeaseOptions;
import org.fencing.Leases;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.postgresql.ds.PGSimpleDataSource;

/** An interrupt of a thread waiting for a lease cancels the wait in the server, and holds nothing. */
@Timeout(60)
class CancelTest {
    private static int waiters(String app) throws SQLException {
        return ((Number) Db.value("SELECT count(*) FROM pg_stat_activity WHERE application_name = ?"
                + " AND wait_event_type = 'Extension' AND query LIKE '%acquire_lease%'", app)).intValue();
    }

    private void interruptAWaiter(LeaseOptions options) throws Exception {
        String name = Db.unique("cancel");
        String app = Db.unique("waiter");
        PGSimpleDataSource source = Db.source();
        try (Lease held = Leases.acquire(source, name, Duration.ofSeconds(60))) {
            CompletableFuture<Throwable> outcome = new CompletableFuture<>();
            CompletableFuture<Boolean> interruptedAfter = new CompletableFuture<>();
            Thread waiter = new Thread(() -> {
                try {
                    Leases.acquire(Db.named(app), name, Duration.ofSeconds(60), options).close();
                    outcome.complete(null);
                } catch (Throwable e) {
                    interruptedAfter.complete(Thread.currentThread().isInterrupted());
                    outcome.complete(e);
                }
            });
            waiter.start();
            Db.waitFor(Db.sql(() -> waiters(app) == 1), Duration.ofSeconds(10), "the waiter waits in the server");
            long interrupted = System.nanoTime();
            waiter.interrupt();
            Throwable thrown = outcome.get(10, TimeUnit.SECONDS);
            assertTrue(thrown instanceof AcquireInterruptedException, String.valueOf(thrown));
            assertEquals("57014", ((SQLException) thrown).getSQLState());
            assertTrue(thrown.getCause() instanceof InterruptedException);
            assertTrue(interruptedAfter.get(), "the interrupt status is set again");
            assertTrue(System.nanoTime() - interrupted < Duration.ofSeconds(5).toNanos());
            assertEquals(0, waiters(app), "the server still waits");
            assertEquals(held.token(), Db.leaseToken(name));
            assertFalse(held.isLost());
        }
        try (Lease next = Leases.acquire(source, name, Duration.ofSeconds(5))) {
            assertTrue(next.token() > 0, "the name is free after the holder's release");
        }
    }

    @Test
    void anInterruptThatCameBeforeTheWaitWasSentCancelsIt() throws Exception {
        // the thread is interrupted already: the statement may not have
        // reached the server when the client cancels it
        String name = Db.unique("cancel-early");
        String app = Db.unique("early");
        try (Lease held = Leases.acquire(Db.source(), name, Duration.ofSeconds(60))) {
            CompletableFuture<Throwable> outcome = new CompletableFuture<>();
            Thread waiter = new Thread(() -> {
                Thread.currentThread().interrupt();
                try {
                    Leases.acquire(Db.named(app), name, Duration.ofSeconds(60), LeaseOptions.defaults().waitForever())
                            .close();
                    outcome.complete(null);
                } catch (Throwable e) {
                    outcome.complete(e);
                }
            });
            waiter.start();
            Throwable thrown;
            try {
                thrown = outcome.get(10, TimeUnit.SECONDS);
            } catch (TimeoutException e) {
                Db.exec("SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE application_name = '" + app + "'");
                throw new AssertionError("an acquisition interrupted before its wait was sent waits on", e);
            }
            assertTrue(thrown instanceof AcquireInterruptedException, String.valueOf(thrown));
            assertEquals(0, waiters(app), "the server still waits");
            assertEquals(held.token(), Db.leaseToken(name));
        }
    }

    @Test
    void anInterruptCancelsAWaitWithATimeout() throws Exception {
        interruptAWaiter(LeaseOptions.defaults().timeout(Duration.ofSeconds(30)));
    }

    @Test
    void anInterruptCancelsAWaitWithoutATimeout() throws Exception {
        interruptAWaiter(LeaseOptions.defaults().waitForever());
    }
}
