// Copyright (c) 2026, the fencing developers

package org.fencing.tests;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.sql.Connection;
import java.sql.SQLException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.OptionalLong;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import org.fencing.BusyException;
import org.fencing.Lease;
import org.fencing.LeaseLostException;
import org.fencing.LeaseOptions;
import org.fencing.Leases;
import org.fencing.Locks;
import org.fencing.NotInTransactionException;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The transaction locks: they end with the transaction, refuse auto-commit,
 * exclude each other across connections, and leave nothing behind that holds
 * back VACUUM while their transaction sits idle.
 */
@Timeout(60)
class LocksTest {
    @Test
    void tryLockInATransaction() throws SQLException {
        String name = Db.unique("try");
        try (Connection a = Db.admin(); Connection b = Db.admin()) {
            a.setAutoCommit(false);
            b.setAutoCommit(false);
            long token = Locks.tryLock(a, name).orElseThrow();
            assertTrue(token > 0);
            assertEquals(OptionalLong.empty(), Locks.tryLock(b, name));
            b.rollback();
            a.commit(); // the lock ends here
            assertTrue(Locks.tryLock(b, name).orElseThrow() > token);
            b.rollback();
        }
    }

    @Test
    void lockWaitsThenIsBusy() throws Exception {
        String name = Db.unique("wait");
        ExecutorService thread = Executors.newSingleThreadExecutor();
        try (Connection a = Db.admin(); Connection b = Db.admin()) {
            a.setAutoCommit(false);
            b.setAutoCommit(false);
            Locks.tryLock(a, name).orElseThrow();
            BusyException busy = assertThrows(BusyException.class, () -> Locks.lock(b, name, Duration.ofMillis(300)));
            assertEquals("55P03", busy.getSQLState());
            b.rollback();
            Future<Long> waiting = thread.submit(() -> Locks.lock(b, name, Duration.ofSeconds(30)));
            Db.waitFor(Db.sql(() -> ((Number) Db.value("SELECT count(*) FROM pg_stat_activity"
                    + " WHERE wait_event_type = 'Lock' AND query LIKE '%fencing.lock%'")).intValue() == 1),
                    Duration.ofSeconds(10), "the waiter waits in the lock queue");
            assertFalse(waiting.isDone());
            a.commit();
            assertTrue(waiting.get() > 0);
            b.rollback();
        } finally {
            thread.shutdownNow();
        }
    }

    @Test
    void locksRefuseAutoCommitBeforeSendingAnything() throws SQLException {
        String name = Db.unique("refuse");
        try (Connection conn = Db.admin()) {
            assertThrows(NotInTransactionException.class, () -> Locks.tryLock(conn, name));
            assertThrows(NotInTransactionException.class, () -> Locks.lock(conn, name, Duration.ZERO));
            assertThrows(NotInTransactionException.class, () -> Locks.lock(conn, name));
            assertNull(Db.value("SELECT token FROM fencing.locks WHERE name = fencing.normalize_name(?)", name));
            conn.setAutoCommit(false);
            assertTrue(Locks.tryLock(conn, name).isPresent());
            conn.rollback();
        }
    }

    @Test
    void aTerminatedLockHolderGetsLeaseLost() throws SQLException {
        String name = Db.unique("terminated");
        try (Connection conn = Db.admin()) {
            conn.setAutoCommit(false);
            Locks.tryLock(conn, name).orElseThrow();
            int pid = ((Number) Db.value(conn, "SELECT pg_backend_pid()")).intValue();
            Db.value("SELECT pg_terminate_backend(?)", pid);
            LeaseLostException lost = assertThrows(LeaseLostException.class, () -> Locks.tryLock(conn, name));
            assertTrue(lost.getCause() instanceof SQLException);
            assertTrue(conn.isClosed());
        }
    }

    @Test
    void ofTwelveThreadsOnConnectionsOfTheirOwnOneGetsTheLock() throws Exception {
        String name = Db.unique("lock-race");
        int racers = 12;
        ExecutorService threads = Executors.newFixedThreadPool(racers);
        List<Connection> conns = new ArrayList<>();
        try {
            for (int i = 0; i < racers; i++) {
                Connection conn = Db.admin();
                conn.setAutoCommit(false);
                conns.add(conn);
            }
            CountDownLatch gate = new CountDownLatch(1);
            List<Future<OptionalLong>> tries = new ArrayList<>();
            for (Connection conn : conns) {
                tries.add(threads.submit(() -> {
                    gate.await();
                    return Locks.tryLock(conn, name);
                }));
            }
            gate.countDown();
            int winners = 0;
            for (Future<OptionalLong> t : tries) {
                winners += t.get().isPresent() ? 1 : 0;
            }
            assertEquals(1, winners);
        } finally {
            threads.shutdownNow();
            for (Connection conn : conns) {
                conn.rollback();
                conn.close();
            }
        }
    }

    /** backend_xid and backend_xmin of session pid, once it sits idle in its transaction. */
    private static List<Object> idleHolds(int pid) {
        Db.waitFor(Db.sql(() -> "idle in transaction".equals(
                Db.value("SELECT state FROM pg_stat_activity WHERE pid = ?", pid))), Duration.ofSeconds(10),
                "session " + pid + " idle in its transaction");
        try {
            return Db.rows("SELECT backend_xid::text, backend_xmin::text FROM pg_stat_activity WHERE pid = ?", pid)
                    .get(0);
        } catch (SQLException e) {
            throw new IllegalStateException(e);
        }
    }

    @Test
    void anIdleHolderHoldsNoSnapshot() throws SQLException {
        try (Connection conn = Db.admin()) {
            conn.setAutoCommit(false);
            int pid = ((Number) Db.value(conn, "SELECT pg_backend_pid()")).intValue();
            conn.commit();
            Locks.tryLock(conn, Db.unique("idle"));
            assertEquals(java.util.Arrays.asList(null, null), idleHolds(pid), "after tryLock");
            conn.rollback();
            Locks.lock(conn, Db.unique("idle"), Duration.ofSeconds(5));
            assertEquals(java.util.Arrays.asList(null, null), idleHolds(pid), "after lock");
            conn.rollback();
            // use() raises the fence of the lease's name, a write: the
            // transaction has an xid from then on, but keeps no snapshot
            try (Lease lease = Leases.acquire(Db.source(), Db.unique("idle-lease"), Duration.ofSeconds(60),
                    LeaseOptions.defaults().renewal(false))) {
                lease.use(conn);
                assertNull(idleHolds(pid).get(1), "after use");
                conn.rollback();
            }
        }
    }
}
