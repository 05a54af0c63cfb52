// Copyright (c) 2026, the fencing developers

package org.fencing.tests;

import java.io.FileOutputStream;
import java.io.IOException;
import java.io.PrintStream;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.ConcurrentHashMap;
import org.junit.platform.engine.TestExecutionResult;
import org.junit.platform.launcher.TestExecutionListener;
import org.junit.platform.launcher.TestIdentifier;
import org.junit.platform.launcher.TestPlan;

/**
 * One TAP line per test, in the file the system property fencing.tap
 * names, for test/clients/run.sh to count (registered through
 * META-INF/services, so JUnit's console launcher loads it). Each line
 * says "N" for its number, as the node reporter's do; run.sh numbers them.
 * The time each test took goes to standard output.
 */
public final class TapListener implements TestExecutionListener {
    private final Map<String, Long> started = new ConcurrentHashMap<>();
    private PrintStream tap;
    private TestPlan plan;

    @Override
    public void testPlanExecutionStarted(TestPlan testPlan) {
        String file = System.getProperty("fencing.tap");
        plan = testPlan;
        if (file == null) {
            return;
        }
        try {
            tap = new PrintStream(new FileOutputStream(file, true), true, StandardCharsets.UTF_8);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    @Override
    public void testPlanExecutionFinished(TestPlan testPlan) {
        if (tap != null) {
            tap.close();
        }
    }

    @Override
    public void executionSkipped(TestIdentifier test, String reason) {
        line("ok N - java " + name(test) + " # SKIP " + oneLine(reason));
    }

    @Override
    public void executionStarted(TestIdentifier test) {
        started.put(test.getUniqueId(), System.nanoTime());
    }

    @Override
    public void executionFinished(TestIdentifier test, TestExecutionResult result) {
        Long since = started.remove(test.getUniqueId());
        if (test.isTest() && since != null) {
            System.out.printf("%7.2f s  %s%n", (System.nanoTime() - since) / 1e9, name(test));
        }
        if (result.getStatus() == TestExecutionResult.Status.ABORTED) {
            // an assumption that did not hold: the test does not apply here
            line("ok N - java " + name(test) + " # SKIP "
                    + oneLine(result.getThrowable().map(Throwable::getMessage).orElse("aborted")));
            return;
        }
        boolean passed = result.getStatus() == TestExecutionResult.Status.SUCCESSFUL;
        if (test.isTest()) {
            line((passed ? "ok" : "not ok") + " N - java " + name(test)
                    + (passed ? "" : " (" + oneLine(result.getThrowable().map(Throwable::toString).orElse("failed")) + ")"));
        } else if (!passed) {
            // a class whose setup failed: its tests did not run
            line("not ok N - java " + name(test) + " ("
                    + oneLine(result.getThrowable().map(Throwable::toString).orElse("failed")) + ")");
        }
    }

    private void line(String line) {
        if (tap != null) {
            tap.println(line);
        }
    }

    private String name(TestIdentifier test) {
        List<String> names = new ArrayList<>();
        for (Optional<TestIdentifier> at = Optional.of(test); at.isPresent(); at = plan.getParent(at.get())) {
            if (at.get().getParentId().isPresent()) {
                names.add(at.get().getDisplayName());
            }
        }
        Collections.reverse(names);
        return String.join(" > ", names);
    }

    private static String oneLine(String text) {
        String line = text == null ? "" : text.replaceAll("\\s+", " ").trim();
        return line.length() > 300 ? line.substring(0, 300) + "..." : line;
    }
}
