// Copyright (c) 2026, the fencing developers

package org.fencing.tests;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.sql.SQLException;
import java.time.Duration;
import java.time.Instant;
import java.util.Optional;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import org.fencing.Lease;
import org.fencing.LeaseLostException;
import org.fencing.LeaseOptions;
import org.fencing.Leases;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.postgresql.ds.PGSimpleDataSource;

/**
 * What the README's ShedLock LockProvider and Spring Integration
 * LockRegistry call, called the way they call it (ShedLock and Spring are
 * not in Debian, so the adapters themselves are not run here).
 */
@Timeout(60)
class AdaptersTest {
    @Test
    void shedLockLocksUnlocksAndKeepsTheLockAtLeastFor() throws Exception {
        // lock(): tryAcquire for lockAtMostFor; unlock(): releaseAfter(what is left of lockAtLeastFor)
        String name = Db.unique("shedlock");
        PGSimpleDataSource source = Db.source();
        Duration lockAtMostFor = Duration.ofSeconds(30);
        Instant lockAtLeastUntil = Instant.now().plusMillis(2500);
        Optional<Lease> locked = Leases.tryAcquire(source, name, lockAtMostFor);
        assertTrue(locked.isPresent());
        assertEquals(Optional.empty(), Leases.tryAcquire(source, name, lockAtMostFor), "a second node skips the run");
        Lease lease = locked.get();
        lease.releaseAfter(Duration.between(Instant.now(), lockAtLeastUntil));
        assertEquals(lease.token(), Db.leaseToken(name), "kept until lockAtLeastFor has passed");
        assertEquals(Optional.empty(), Leases.tryAcquire(source, name, lockAtMostFor));
        Object renewed = Db.value("SELECT renewed_at FROM fencing.leases WHERE name = ?", name);
        // the next node gets it when lockAtLeastFor ends, waiting for it in the server
        try (Lease next = Leases.acquire(source, name, lockAtMostFor,
                LeaseOptions.defaults().timeout(Duration.ofSeconds(10)))) {
            assertFalse(Instant.now().isBefore(lockAtLeastUntil.minusMillis(100)), "released before lockAtLeastFor");
            assertTrue(next.token() > lease.token());
        }
        assertTrue(renewed != null);
        lease.close(); // released already: nothing happens
        assertFalse(lease.isLost());
        assertThrows(SQLException.class, () -> lease.use(Db.admin()), "a released lease is not used");
    }

    @Test
    void shedLockUnlockAfterLockAtLeastForReleasesAtOnce() throws SQLException {
        String name = Db.unique("shedlock-past");
        PGSimpleDataSource source = Db.source();
        Lease lease = Leases.tryAcquire(source, name, Duration.ofSeconds(30)).orElseThrow();
        lease.releaseAfter(Duration.ZERO);
        assertEquals(null, Db.leaseToken(name));
    }

    @Test
    void springTryLockWithATimeoutWaitsForTheHolder() throws Exception {
        // tryLock(time, unit): tryAcquire with a timeout; unlock(): close()
        String name = Db.unique("spring");
        PGSimpleDataSource source = Db.source();
        Lease first = Leases.tryAcquire(source, name, Duration.ofSeconds(30)).orElseThrow();
        assertEquals(Optional.empty(), Leases.tryAcquire(source, name, Duration.ofSeconds(30),
                LeaseOptions.defaults().timeout(Duration.ofMillis(200))), "tryLock(200 ms) while held");
        ExecutorService thread = Executors.newSingleThreadExecutor();
        try {
            Future<Optional<Lease>> second = thread.submit(() -> Leases.tryAcquire(source, name, Duration.ofSeconds(30),
                    LeaseOptions.defaults().timeout(Duration.ofSeconds(20))));
            Db.sleep(Duration.ofMillis(300));
            assertFalse(second.isDone());
            first.close();
            try (Lease got = second.get().orElseThrow()) {
                assertTrue(got.token() > first.token());
                assertFalse(got.isLost());
            }
        } finally {
            thread.shutdownNow();
        }
    }

    @Test
    void springUnlockOfALostLockSaysSo() throws SQLException {
        String name = Db.unique("spring-lost");
        Lease lease = Leases.tryAcquire(Db.source(), name, Duration.ofSeconds(30)).orElseThrow();
        Db.value("SELECT fencing.break_lease(?)", name);
        assertThrows(LeaseLostException.class, lease::close);
    }
}
