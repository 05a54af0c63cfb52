// Copyright (c) 2026, the fencing developers

package org.fencing.tests;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.TimeUnit;

/**
 * Worker processes ({@link Worker}), each a JVM of its own, started with
 * the classpath and JVM options that "make check" passes down
 * (-Dfencing.classpath, -Dfencing.jvm).
 */
final class Workers implements AutoCloseable {
    /** One worker: a process, its stdin and its stdout. */
    static final class Handle {
        final Process process;
        private final Writer in;
        private final BufferedReader out;

        Handle(Process process) {
            this.process = process;
            this.in = new OutputStreamWriter(process.getOutputStream(), StandardCharsets.UTF_8);
            this.out = new BufferedReader(new InputStreamReader(process.getInputStream(), StandardCharsets.UTF_8));
        }

        void send(String line) throws IOException {
            in.write(line + "\n");
            in.flush();
        }

        String read() throws IOException {
            String line = out.readLine();
            if (line == null) {
                throw new IOException("worker " + process.pid() + " exited");
            }
            return line;
        }

        String ask(String line) throws IOException {
            send(line);
            return read();
        }

        /** SIGSTOP or SIGCONT, sent by the shell's own kill (a new root may have no kill(1)). */
        void signal(String name) throws IOException, InterruptedException {
            Process kill = new ProcessBuilder("/bin/sh", "-c", "kill -s " + name + " " + process.pid()).inheritIO()
                    .start();
            if (kill.waitFor() != 0) {
                throw new IOException("kill -" + name + " " + process.pid() + " failed");
            }
        }
    }

    private final List<Handle> started = new ArrayList<>();

    /** Start n workers at once and wait until each says it is ready. */
    List<Handle> start(int n) throws IOException {
        String classpath = System.getProperty("fencing.classpath", System.getProperty("java.class.path"));
        String jvm = System.getProperty("fencing.jvm", "");
        List<Handle> handles = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            List<String> command = new ArrayList<>();
            command.add(System.getProperty("java.home") + "/bin/java");
            command.addAll(Arrays.asList(jvm.trim().isEmpty() ? new String[0] : jvm.trim().split("\\s+")));
            command.addAll(List.of("-cp", classpath, Worker.class.getName(), Db.url()));
            Handle handle = new Handle(new ProcessBuilder(command).redirectError(ProcessBuilder.Redirect.INHERIT).start());
            started.add(handle);
            handles.add(handle);
        }
        for (Handle handle : handles) {
            String line = handle.read();
            if (!line.equals("ready")) {
                throw new IOException("worker " + handle.process.pid() + " said " + line);
            }
        }
        return handles;
    }

    Handle start() throws IOException {
        return start(1).get(0);
    }

    @Override
    public void close() {
        for (Handle handle : started) {
            try {
                handle.signal("CONT");
            } catch (IOException e) {
                // it is gone already
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            handle.process.destroyForcibly();
            try {
                handle.process.waitFor(10, TimeUnit.SECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return;
            }
        }
    }
}
