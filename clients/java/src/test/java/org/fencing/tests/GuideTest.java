// Copyright (c) 2026, the fencing developers

package org.fencing.tests;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.sql.SQLException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.Callable;
import java.util.concurrent.CountDownLatch;
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
 * The guide's three tests, with real processes and threads: the race (N
 * racers, one winner does the work), the expiry (a holder stopped with
 * SIGSTOP past its ttl is stopped when it wakes, with a LeaseLostException,
 * not a driver's error, also when frozen in the middle of a batch) and the
 * release (an old token frees nothing).
 */
@Timeout(120)
class GuideTest {
    private static final int RACERS = 12;

    @Test
    void aRaceOfTwelveProcessesHasOneWinnerThatDoesTheWork() throws Exception {
        String ledger = Db.ledger();
        String name = Db.unique("race");
        try (Workers workers = new Workers()) {
            List<Workers.Handle> racers = workers.start(RACERS);
            for (int round = 0; round < 2; round++) {
                for (Workers.Handle racer : racers) {
                    racer.send("acquire " + name + " 30000");
                }
                List<Workers.Handle> winners = new ArrayList<>();
                List<String> answers = new ArrayList<>();
                for (Workers.Handle racer : racers) {
                    String answer = racer.read();
                    answers.add(answer);
                    if (answer.startsWith("granted")) {
                        winners.add(racer);
                    }
                }
                assertEquals(1, winners.size(), answers.toString());
                assertEquals(RACERS - 1, answers.stream().filter("busy"::equals).count(), answers.toString());
                assertEquals("ok", winners.get(0).ask("write " + ledger + " 1"));
                assertEquals("released", winners.get(0).ask("release"));
            }
        }
        assertEquals(2, Db.amount(ledger, 1));
    }

    @Test
    void aRaceOfTwelveThreadsOnConnectionsOfTheirOwnHasOneWinner() throws Exception {
        String ledger = Db.ledger();
        String name = Db.unique("threads");
        ExecutorService threads = Executors.newFixedThreadPool(RACERS);
        try {
            for (int round = 0; round < 3; round++) {
                CountDownLatch gate = new CountDownLatch(1);
                List<Future<Optional<Lease>>> racers = new ArrayList<>();
                for (int i = 0; i < RACERS; i++) {
                    PGSimpleDataSource source = Db.source(); // each getConnection() is a server connection of its own
                    Callable<Optional<Lease>> race = () -> {
                        gate.await();
                        return Leases.tryAcquire(source, name, Duration.ofSeconds(30));
                    };
                    racers.add(threads.submit(race));
                }
                gate.countDown();
                List<Lease> winners = new ArrayList<>();
                for (Future<Optional<Lease>> racer : racers) {
                    racer.get().ifPresent(winners::add);
                }
                assertEquals(1, winners.size(), "winners: " + winners);
                try (Lease winner = winners.get(0)) {
                    winner.transaction(Db.source(), conn -> {
                        Db.update(conn, ledger, 1, 1);
                        return null;
                    });
                }
            }
        } finally {
            threads.shutdownNow();
        }
        assertEquals(3, Db.amount(ledger, 1));
    }

    /** The worker takes a lease of 2 s on name; its token. */
    private static long acquire(Workers.Handle worker, String name) throws IOException {
        String granted = worker.ask("acquire " + name + " 2000");
        assertTrue(granted.startsWith("granted"), granted);
        return Long.parseLong(granted.split(" ")[1]);
    }

    /** A newer holder takes the name (waiting in the server for the old lease to end) and adds 100 to row 1. */
    private static Lease takeOver(String name, String ledger) throws SQLException {
        Lease newer = Leases.acquire(Db.source(), name, Duration.ofSeconds(30),
                LeaseOptions.defaults().timeout(Duration.ofSeconds(20)));
        newer.transaction(Db.source(), conn -> {
            Db.update(conn, ledger, 1, 100);
            return null;
        });
        return newer;
    }

    @Test
    void aHolderStoppedPastItsTtlIsFencedOutWhenItWakes() throws Exception {
        String ledger = Db.ledger();
        String name = Db.unique("expiry");
        try (Workers workers = new Workers()) {
            Workers.Handle holder = workers.start();
            long old = acquire(holder, name);
            assertEquals("ok", holder.ask("write " + ledger + " 1"));

            holder.signal("STOP");
            long stopped = System.nanoTime();
            Lease newer;
            try {
                newer = takeOver(name, ledger);
                assertTrue(System.nanoTime() - stopped >= Duration.ofMillis(1000).toNanos());
                assertTrue(newer.token() > old);
            } finally {
                holder.signal("CONT");
            }

            assertEquals("LeaseLostException", holder.ask("write " + ledger + " 1"));
            assertEquals("StaleTokenException FN001", holder.ask("write_old " + ledger + " 1"));
            assertEquals("yes", holder.ask("lost"));
            assertEquals("released", holder.ask("release")); // it knew: closing says nothing more
            assertEquals(101, Db.amount(ledger, 1));
            assertEquals(newer.token(), Db.fence(ledger, 1));
            assertTrue(newer.owned(), "the old holder's release freed the newer lease");
            newer.close();
        }
    }

    @Test
    void aHolderFrozenInTheMiddleOfABatchGetsLeaseLostNotADriverError() throws Exception {
        String ledger = Db.ledger();
        String name = Db.unique("frozen-batch");
        try (Workers workers = new Workers()) {
            Workers.Handle holder = workers.start();
            acquire(holder, name);
            holder.send("write_paused " + ledger + " 1");
            assertEquals("mid", holder.read()); // its first UPDATE is done, its transaction open
            holder.signal("STOP");
            Lease newer;
            try {
                // its use_lease waits for the frozen batch, which the server ends after the ttl
                newer = takeOver(name, ledger);
            } finally {
                holder.signal("CONT");
            }
            holder.send("go");
            assertEquals("LeaseLostException 25P03", holder.read());
            assertEquals("yes", holder.ask("lost"));
            assertEquals(100, Db.amount(ledger, 1), "the frozen batch was rolled back");
            assertEquals(newer.token(), Db.fence(ledger, 1));
            newer.close();
        }
    }

    @Test
    void anOldTokenFreesNothing() throws SQLException, InterruptedException {
        String name = Db.unique("release");
        PGSimpleDataSource source = Db.source();
        Lease first = Leases.acquire(source, name, Duration.ofSeconds(1), LeaseOptions.defaults().renewal(false));
        Lease second = Leases.acquire(source, name, Duration.ofSeconds(30),
                LeaseOptions.defaults().timeout(Duration.ofSeconds(15)));
        try {
            assertTrue(second.token() > first.token());
            assertTrue(first.awaitLoss(Duration.ofSeconds(5)), "the first lease's deadline passed");
            first.close();
            assertTrue(second.owned());
            assertEquals(Optional.empty(), Leases.tryAcquire(source, name, Duration.ofSeconds(30)));
            assertEquals(second.token(), Db.leaseToken(name));
        } finally {
            second.close();
        }
        try (Lease third = Leases.acquire(source, name, Duration.ofSeconds(30))) {
            assertTrue(third.token() > second.token());
        }
    }

    @Test
    void closingABrokenLeaseSaysItWasLostAndFreesNothingElse() throws SQLException {
        String name = Db.unique("broken-release");
        PGSimpleDataSource source = Db.source();
        Lease first = Leases.acquire(source, name, Duration.ofSeconds(30));
        Db.value("SELECT fencing.break_lease(?)", name);
        try (Lease second = Leases.acquire(source, name, Duration.ofSeconds(30))) {
            LeaseLostException lost = assertThrows(LeaseLostException.class, first::close);
            assertTrue(lost.getMessage().contains("not held"), lost.getMessage());
            assertTrue(first.isLost());
            assertTrue(first.lost().isDone());
            assertTrue(second.owned());
            first.close(); // released: nothing more
            assertFalse(second.isLost());
        }
    }

    @Test
    void aReleaseHandsTheNameToAWaiterAtOnce() throws Exception {
        String name = Db.unique("handover");
        PGSimpleDataSource source = Db.source();
        Lease first = Leases.acquire(source, name, Duration.ofSeconds(60));
        ExecutorService thread = Executors.newSingleThreadExecutor();
        try {
            Future<Lease> waiter = thread.submit(() -> Leases.acquire(source, name, Duration.ofSeconds(60),
                    LeaseOptions.defaults().timeout(Duration.ofSeconds(30))));
            Db.waitFor(Db.sql(() -> ((Number) Db.value("SELECT count(*) FROM pg_stat_activity"
                    + " WHERE wait_event_type = 'Extension' AND query LIKE '%acquire_lease%'")).intValue() == 1),
                    Duration.ofSeconds(10), "the waiter waits in the server");
            assertFalse(waiter.isDone(), "the waiter was granted a held lease");
            long released = System.nanoTime();
            first.close();
            try (Lease second = waiter.get()) {
                // a ttl of 60 s: only the release can have let it in this soon
                assertTrue(System.nanoTime() - released < Duration.ofSeconds(10).toNanos());
                assertTrue(second.token() > first.token());
            }
        } finally {
            thread.shutdownNow();
        }
    }
}
