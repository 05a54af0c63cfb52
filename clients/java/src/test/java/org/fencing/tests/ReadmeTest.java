// Copyright (c) 2026, the fencing developers

package org.fencing.tests;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * The code blocks of clients/java/README.md, run as a reader would run
 * them, in a database of their own, in the page's order. Only the two
 * adapters (ShedLock's and Spring Integration's, which Debian does not
 * ship) are not run; each says so on its first line.
 */
@Timeout(240)
class ReadmeTest {
    @Test
    void theReadmeBlocksRun(@TempDir Path dir) throws Exception {
        List<Blocks.Block> blocks = Blocks.of(Path.of(System.getProperty("fencing.readme")));
        assertTrue(blocks.stream().filter(Blocks.Block::isJava).count() >= 5);
        assertEquals(2, blocks.stream().filter(b -> b.isJava() && !b.runs()).count(),
                "the two adapters are the java blocks not run");
        String db = "readme_java";
        Blocks.createDatabase(db);
        Blocks.runAll(blocks, dir, db, false);
        String url = Blocks.urlOf(db);
        try (var conn = Db.source(url).getConnection()) {
            assertEquals(List.of(2500L, 1L), List.of(
                    Db.value(conn, "SELECT count(*) FROM invoices WHERE month = '2026-10'"),
                    Db.value(conn, "SELECT count(DISTINCT fence) FROM invoices WHERE month = '2026-10'")),
                    "the batch job billed every customer once, under one token");
            assertEquals(0L, Db.value(conn, "SELECT count(*) FROM fencing.leases"), "every lease was released");
        }
    }
}
