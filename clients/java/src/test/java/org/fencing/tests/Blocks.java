// Copyright (c) 2026, the fencing developers

package org.fencing.tests;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.StringWriter;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import javax.tools.JavaCompiler;
import javax.tools.ToolProvider;

/**
 * The code blocks of a page, run as a reader would run them: sql blocks
 * with psql, each java block a program of its own, compiled against the
 * jar and PgJDBC only (what a user's classpath has) and started in a JVM of
 * its own with JDBC_URL naming the page's database. A java block whose
 * first line says "not run here" is left out.
 */
final class Blocks {
    private Blocks() {
    }

    static final String NOT_RUN = "not run here";

    private static final Pattern BLOCK = Pattern.compile("^```(\\w+)\\n(.*?)^```$", Pattern.DOTALL | Pattern.MULTILINE);
    private static final Pattern CLASS = Pattern.compile("^public\\s+(?:final\\s+)?class\\s+(\\w+)", Pattern.MULTILINE);

    /** One block: its language and its code. */
    static final class Block {
        final String lang;
        final String code;

        Block(String lang, String code) {
            this.lang = lang;
            this.code = code;
        }

        boolean isJava() {
            return lang.equals("java");
        }

        boolean runs() {
            return !code.split("\n", 2)[0].contains(NOT_RUN);
        }

        String className() {
            Matcher m = CLASS.matcher(code);
            if (!m.find()) {
                fail("a java block without a public class:\n" + code);
            }
            return m.group(1);
        }
    }

    /** What a program said and how it ended. */
    static final class Outcome {
        final int status;
        final String stdout;
        final String stderr;

        Outcome(int status, String stdout, String stderr) {
            this.status = status;
            this.stdout = stdout;
            this.stderr = stderr;
        }
    }

    static List<Block> of(Path page) throws IOException {
        List<Block> blocks = new ArrayList<>();
        Matcher m = BLOCK.matcher(Files.readString(page, StandardCharsets.UTF_8));
        while (m.find()) {
            blocks.add(new Block(m.group(1), m.group(2)));
        }
        return blocks;
    }

    /** JDBC_URL with another database. */
    static String urlOf(String db) {
        return Db.url().replaceFirst("/[^/?]+(\\?|$)", "/" + db + "$1");
    }

    static void createDatabase(String db) throws Exception {
        Db.exec("DROP DATABASE IF EXISTS " + db + " WITH (FORCE)", "CREATE DATABASE " + db);
        Outcome made = psql(db, "CREATE EXTENSION fencing;", true);
        assertEquals(0, made.status, made.stderr);
    }

    /** Compile the java blocks that run, each into dir as the class it declares. */
    static void compile(List<Block> blocks, Path dir) throws IOException {
        List<String> args = new ArrayList<>(List.of("-d", dir.toString(), "-cp", userClasspath(), "-encoding", "UTF-8"));
        for (Block block : blocks) {
            if (block.isJava() && block.runs()) {
                Path source = dir.resolve(block.className() + ".java");
                assertTrue(!Files.exists(source), "two java blocks declare class " + block.className());
                Files.writeString(source, block.code, StandardCharsets.UTF_8);
                args.add(source.toString());
            }
        }
        JavaCompiler javac = ToolProvider.getSystemJavaCompiler();
        StringWriter said = new StringWriter();
        int status = javac.getTask(said, null, null, args.subList(0, 6), null,
                javac.getStandardFileManager(null, null, StandardCharsets.UTF_8)
                        .getJavaFileObjectsFromStrings(args.subList(6, args.size()))).call() ? 0 : 1;
        assertEquals(0, status, "the java blocks do not compile:\n" + said);
    }

    /** What a user has on the classpath: the jar and PgJDBC. */
    static String userClasspath() {
        return System.getProperty("fencing.userclasspath");
    }

    static Outcome java(Path dir, String className, String db) throws Exception {
        List<String> command = new ArrayList<>(List.of(System.getProperty("java.home") + "/bin/java"));
        String jvm = System.getProperty("fencing.jvm", "").trim();
        if (!jvm.isEmpty()) {
            command.addAll(List.of(jvm.split("\\s+")));
        }
        command.addAll(List.of("-cp", dir + ":" + userClasspath(), className));
        ProcessBuilder builder = new ProcessBuilder(command);
        builder.environment().put("JDBC_URL", urlOf(db));
        builder.environment().put("PGDATABASE", db);
        return run(builder, null);
    }

    static Outcome psql(String db, String code, boolean stopOnError) throws Exception {
        ProcessBuilder builder = new ProcessBuilder("psql", "-X", "-q", "-v", "ON_ERROR_STOP=" + (stopOnError ? 1 : 0));
        builder.environment().put("PGDATABASE", db);
        return run(builder, code);
    }

    private static Outcome run(ProcessBuilder builder, String input) throws Exception {
        Process process = builder.start();
        CompletableFuture<String> out = drain(process.getInputStream());
        CompletableFuture<String> err = drain(process.getErrorStream());
        try (var stdin = process.getOutputStream()) {
            if (input != null) {
                stdin.write(input.getBytes(StandardCharsets.UTF_8));
            }
        }
        if (!process.waitFor(90, TimeUnit.SECONDS)) {
            process.destroyForcibly();
            fail(builder.command() + " did not end within 90 s");
        }
        return new Outcome(process.exitValue(), out.get(), err.get());
    }

    private static CompletableFuture<String> drain(InputStream stream) {
        return CompletableFuture.supplyAsync(() -> {
            try (stream) {
                ByteArrayOutputStream bytes = new ByteArrayOutputStream();
                stream.transferTo(bytes);
                return bytes.toString(StandardCharsets.UTF_8);
            } catch (IOException e) {
                return "(unreadable: " + e + ")";
            }
        });
    }

    /** Run a page's blocks in order in db; each java block must end with status 0; on a page of the docs, whose sql blocks announce their errors, psql goes on after an error and a java block must say nothing on stderr. */
    static void runAll(List<Block> blocks, Path dir, String db, boolean docsPage) throws Exception {
        compile(blocks, dir);
        int number = 0;
        for (Block block : blocks) {
            number++;
            if (block.lang.equals("sql") && !block.code.stripLeading().startsWith("-- fragment")) {
                Outcome done = psql(db, block.code, !docsPage);
                assertEquals(0, done.status, "block " + number + " (sql) failed:\n" + block.code + "\n" + done.stderr);
            } else if (block.isJava() && block.runs()) {
                Outcome done = java(dir, block.className(), db);
                assertEquals(0, done.status, "block " + number + " (java) failed:\n" + block.code + "\n" + done.stdout
                        + done.stderr);
                if (docsPage) {
                    assertEquals("", done.stderr, "block " + number + " (java) wrote to stderr");
                }
            }
        }
    }

}
