// Copyright (c) 2026, the fencing developers

package org.fencing.tests;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.sql.Connection;
import java.sql.SQLException;
import java.sql.Statement;
import java.sql.Timestamp;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.fencing.Lease;
import org.fencing.LeaseListener;
import org.fencing.LeaseLostException;
import org.fencing.LeaseOptions;
import org.fencing.Leases;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The renewal in the background and the deadline: every ttl/3 on the
 * lease's own connection, while the work connection is busy, through a lost
 * connection (suspended, then resumed); and the lease lost by its deadline
 * when renewals cannot get through, even when the watchdog's timer fires a
 * little early, and even while a renewal for a long ttl hangs.
 */
@Timeout(60)
class RenewalTest {
    @Test
    void theBackgroundRenewsEveryThirdOfTheTtl() throws Exception {
        String name = Db.unique("cadence");
        List<Timestamp> renewals = new ArrayList<>();
        try (Lease lease = Leases.acquire(Db.source(), name, Duration.ofSeconds(3)); Connection admin = Db.admin()) {
            long until = System.nanoTime() + Duration.ofMillis(4500).toNanos();
            while (System.nanoTime() - until < 0) {
                Timestamp renewed = (Timestamp) Db.value(admin,
                        "SELECT renewed_at FROM fencing.leases WHERE name = ? AND token = ?", name, lease.token());
                if (renewed != null && (renewals.isEmpty() || !renewed.equals(renewals.get(renewals.size() - 1)))) {
                    renewals.add(renewed);
                }
                Thread.sleep(25);
            }
            assertFalse(lease.isLost());
        }
        // the acquisition, then a renewal about every second
        assertTrue(renewals.size() >= 4, "renewed_at took these values in 4.5 s: " + renewals);
        for (int i = 1; i < renewals.size(); i++) {
            long gap = renewals.get(i).getTime() - renewals.get(i - 1).getTime();
            assertTrue(gap >= 600 && gap <= 1800, "a gap of " + gap + " ms between renewals: " + renewals);
        }
    }

    @Test
    void theRenewalKeepsTheLeaseWhileTheWorkConnectionIsBusy() throws SQLException {
        String ledger = Db.ledger();
        String name = Db.unique("busy");
        try (Lease lease = Leases.acquire(Db.source(), name, Duration.ofMillis(2500))) {
            lease.transaction(Db.source(), conn -> {
                try (Statement st = conn.createStatement()) {
                    st.execute("SELECT pg_sleep(5.5)"); // over two ttls
                }
                Db.update(conn, ledger, 1, 1);
                return null;
            });
            assertFalse(lease.isLost());
            Object held = Db.value("SELECT extract(epoch FROM renewed_at - acquired_at) FROM fencing.leases"
                    + " WHERE name = ? AND token = ?", name, lease.token());
            assertTrue(((Number) held).doubleValue() > 3.0, "renewed for " + held + " s");
            lease.transaction(Db.source(), conn -> {
                Db.update(conn, ledger, 1, 1);
                return null;
            });
            assertTrue(lease.owned());
        }
        assertEquals(2, Db.amount(ledger, 1));
    }

    @Test
    void aLostRenewalConnectionSuspendsThenResumes() throws Exception {
        String name = Db.unique("reconnect");
        String app = Db.unique("renewer");
        CompletableFuture<java.sql.SQLException> suspended = new CompletableFuture<>();
        CompletableFuture<Void> resumed = new CompletableFuture<>();
        LeaseListener listener = new LeaseListener() {
            @Override
            public void suspended(Lease lease, java.sql.SQLException error) {
                suspended.complete(error);
            }

            @Override
            public void resumed(Lease lease) {
                resumed.complete(null);
            }
        };
        try (Lease lease = Leases.acquire(Db.named(app), name, Duration.ofSeconds(3),
                LeaseOptions.defaults().listener(listener))) {
            assertEquals(1L, Db.value("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                    + " WHERE application_name = ?", app));
            assertTrue(suspended.get(5, TimeUnit.SECONDS) instanceof java.sql.SQLException);
            resumed.get(5, TimeUnit.SECONDS);
            assertFalse(lease.isLost());
            assertTrue(lease.owned());
            assertEquals(1L, Db.value("SELECT count(*) FROM pg_stat_activity WHERE application_name = ?", app),
                    "the lease renews on one connection of its own");
        }
    }

    @Test
    void aBrokenLeaseIsLostInOrderFlagListenersThenSignal() throws Exception {
        String name = Db.unique("break");
        List<String> seen = new ArrayList<>();
        Lease[] holder = new Lease[1];
        LeaseListener throwing = LeaseListener.onLost(reason -> {
            throw new IllegalStateException("a listener that fails");
        });
        LeaseListener recording = LeaseListener.onLost(reason -> {
            synchronized (seen) {
                seen.add("listener: lost=" + holder[0].isLost() + " signalled=" + holder[0].lost().isDone()
                        + " state=" + reason.getSQLState());
            }
        });
        Lease lease = Leases.acquire(Db.source(), name, Duration.ofMillis(1500),
                LeaseOptions.defaults().listener(throwing).listener(recording));
        holder[0] = lease;
        CompletableFuture<Void> woken = lease.lost().thenRun(() -> {
            synchronized (seen) {
                seen.add("signal after " + seen.size() + " listener call(s)");
            }
        });
        Db.value("SELECT fencing.break_lease(?)", name);
        woken.get(5, TimeUnit.SECONDS);
        synchronized (seen) {
            assertEquals(List.of("listener: lost=true signalled=false state=FN004", "signal after 1 listener call(s)"),
                    seen);
        }
        LeaseLostException reason = lease.lossReason().orElseThrow();
        assertEquals("FN004", ((SQLException) reason.getCause()).getSQLState());
        AtomicInteger late = new AtomicInteger();
        lease.addListener(LeaseListener.onLost(r -> late.incrementAndGet()));
        assertEquals(1, late.get(), "a listener added after the loss hears it at once");
        lease.close();
    }

    @Test
    void aStalledRenewalLosesTheLeaseByTheServersExpiryWhateverRenewAskedFor() throws Exception {
        String name = Db.unique("stalled");
        try (StallingProxy proxy = new StallingProxy()) {
            CompletableFuture<Long> lostAt = new CompletableFuture<>();
            Lease lease = Leases.acquire(proxy.source(), name, Duration.ofSeconds(3),
                    LeaseOptions.defaults().listener(LeaseListener.onLost(r -> lostAt.complete(System.nanoTime()))));
            try {
                lease.renew(Duration.ofSeconds(60));
                Db.waitFor(Db.sql(() -> Boolean.TRUE.equals(Db.value("SELECT expires_at - now() < interval '10 s'"
                        + " FROM fencing.leases WHERE name = ?", name))), Duration.ofSeconds(9),
                        "a background renewal with the lease's own ttl");
                proxy.stall();
                long stalled = System.nanoTime();
                double expiry = ((Number) Db.value("SELECT extract(epoch FROM expires_at - clock_timestamp())"
                        + " FROM fencing.leases WHERE name = ?", name)).doubleValue();
                assertTrue(expiry <= 3.0, "the server's lease ends in " + expiry + " s");
                long at = lostAt.get(5, TimeUnit.SECONDS);
                assertTrue(at - stalled <= Duration.ofSeconds(5).toNanos());
                assertTrue(lease.isLost());
            } finally {
                proxy.resume();
                lease.close();
            }
        }
    }

    /** A scheduler whose timers fire 5 ms before their time, as timers may. */
    static final class EarlyScheduler extends ScheduledThreadPoolExecutor {
        EarlyScheduler() {
            super(2);
        }

        @Override
        public ScheduledFuture<?> schedule(Runnable task, long delay, TimeUnit unit) {
            return super.schedule(task, Math.max(0, unit.toNanos(delay) - TimeUnit.MILLISECONDS.toNanos(5)),
                    TimeUnit.NANOSECONDS);
        }
    }

    @Test
    void aWatchdogThatFiresEarlyStillLosesTheLease() throws Exception {
        String name = Db.unique("early");
        EarlyScheduler scheduler = new EarlyScheduler();
        try (StallingProxy proxy = new StallingProxy()) {
            Lease lease = Leases.acquire(proxy.source(), name, Duration.ofSeconds(2),
                    LeaseOptions.defaults().renewal(false).scheduler(scheduler));
            CompletableFuture<Void> stalledRenewal = new CompletableFuture<>();
            try {
                proxy.stall();
                new Thread(() -> {
                    try {
                        lease.renew();
                    } catch (SQLException e) {
                        stalledRenewal.complete(null);
                    }
                }).start();
                assertTrue(lease.awaitLoss(Duration.ofSeconds(6)), "not lost 6 s after the stall of a 2 s lease");
            } finally {
                proxy.resume();
                lease.close();
            }
        } finally {
            scheduler.shutdownNow();
        }
    }

    @Test
    void overlappingRenewalsNeverHoldTheLeasePastTheServersExpiry() throws Exception {
        // renew(60 s) is sent and stalls on its way; before its answer, use()
        // renews for the lease's own ttl on another connection and gets
        // through. Either may be the renewal the server applied last: the
        // lease must count as lost once the server let it go and another
        // holder took it, not a minute after the stalled renewal was sent.
        String name = Db.unique("overlap");
        try (StallingProxy proxy = new StallingProxy()) {
            Lease lease = Leases.acquire(proxy.source(), name, Duration.ofSeconds(2),
                    LeaseOptions.defaults().renewal(false));
            Thread stalled = new Thread(() -> {
                try {
                    lease.renew(Duration.ofSeconds(60));
                } catch (SQLException e) {
                    // lost: the watchdog aborted it
                }
            });
            Long other = null;
            try {
                proxy.stall();
                stalled.start();
                Db.waitFor(proxy::holding, Duration.ofSeconds(10), "renew(60 s) reaches the proxy");
                try (Connection conn = Db.admin()) {
                    conn.setAutoCommit(false);
                    lease.use(conn);
                    conn.commit();
                    other = (Long) Db.value("SELECT fencing.acquire_lease(?, '30 s', '10 s', 'the next holder')", name);
                    assertTrue(other != null, "the server kept the lease for longer than use()'s ttl");
                    assertTrue(lease.awaitLoss(Duration.ofSeconds(2)),
                            "the server let the lease go and another holder took it, and the lease is not lost");
                    assertThrows(LeaseLostException.class, () -> lease.use(conn));
                    conn.rollback();
                }
            } finally {
                proxy.resume();
                stalled.join(10_000);
                lease.close();
                if (other != null) {
                    Db.value("SELECT fencing.release_lease(?, ?)", name, other);
                }
            }
        }
    }
}
