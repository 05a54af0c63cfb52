// Copyright (c) 2026, the fencing developers

package org.fencing.tests;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.util.ArrayList;
import java.util.List;
import java.util.TreeSet;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * The Java of the project's documentation, run as a reader would run it:
 * for README.md and every page of doc/ that has java blocks, a database of
 * its own, where the page's blocks run in order (the sql blocks with psql,
 * whose announced errors test/t/091_readme.pl checks; each java block a
 * program of its own, which must exit 0 and say nothing on stderr). Every
 * invoice run a java block bills (a name "invoice-run:YYYY-MM") must have
 * billed each customer of the ledger once, under one token. FENCING_DOCS
 * names the top of the tree (test/clients/run.sh sets it).
 */
@Timeout(300)
class DocsTest {
    private static final Pattern RUN = Pattern.compile("invoice-run:(\\d{4}-\\d{2})");

    @Test
    void theJavaBlocksOfTheDocsRun(@TempDir Path dir) throws Exception {
        Path docs = Path.of(System.getenv("FENCING_DOCS"));
        List<Path> pages = new ArrayList<>(List.of(docs.resolve("README.md")));
        try (Stream<Path> more = Files.list(docs.resolve("doc"))) {
            more.filter(p -> p.toString().endsWith(".md")).sorted().forEach(pages::add);
        }
        List<Path> withJava = new ArrayList<>();
        for (Path page : pages) {
            if (Blocks.of(page).stream().anyMatch(b -> b.isJava() && b.runs())) {
                withJava.add(page);
            }
        }
        assumeTrue(!withJava.isEmpty(), "no page of README.md and doc/ has java blocks");
        for (Path page : withJava) {
            String name = docs.relativize(page).toString();
            String db = "docs_java_" + name.toLowerCase().replaceAll("\\W", "_");
            Path own = Files.createDirectory(dir.resolve(db));
            List<Blocks.Block> blocks = Blocks.of(page);
            Blocks.createDatabase(db);
            Blocks.runAll(blocks, own, db, true);
            TreeSet<String> months = new TreeSet<>();
            for (Blocks.Block block : blocks) {
                Matcher m = RUN.matcher(block.code);
                while (block.isJava() && block.runs() && m.find()) {
                    months.add(m.group(1));
                }
            }
            try (Connection conn = Db.source(Blocks.urlOf(db)).getConnection()) {
                for (String month : months) {
                    assertEquals(List.of(Db.value(conn, "SELECT count(*) FROM customers"), 1L), List.of(
                            Db.value(conn, "SELECT count(*) FROM ledger WHERE month = ?", month),
                            Db.value(conn, "SELECT count(DISTINCT fence) FROM ledger WHERE month = ?", month)),
                            name + ": the run of " + month + " billed every customer once, under one token");
                }
                assertEquals(0L, Db.value(conn, "SELECT count(*) FROM fencing.leases"), name + ": a lease was left");
            }
        }
    }
}
