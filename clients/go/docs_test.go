// Copyright (c) 2026, the fencing developers
//
// The Go of the project's documentation, run as a reader would run it:
// for README.md and every page of doc/ that has go blocks, a database of
// its own, where the page's blocks run in order (readme_test.go says
// how).  FENCING_DOCS names the top of the tree (test/clients/run.sh sets
// it).  A page's own check follows, where it has one.

package pgfencing_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v4"
)

// docChecks: what a page's go blocks must have done.
var docChecks = map[string]func(t *testing.T, c *pgx.Conn){
	"README.md": func(t *testing.T, c *pgx.Conn) {
		// the batch example billed February 2027: every customer once,
		// under one token, and released its lease
		var billed, customers, fences, leases int
		one(t, c, &billed, "SELECT count(*) FROM ledger WHERE month = '2027-02'")
		one(t, c, &customers, "SELECT count(*) FROM customers")
		one(t, c, &fences, "SELECT count(DISTINCT fence) FROM ledger WHERE month = '2027-02'")
		one(t, c, &leases, "SELECT count(*) FROM fencing.leases WHERE database = current_database()")
		if billed != customers || fences != 1 || leases != 0 {
			t.Fatalf("README.md: %d of %d customers billed for 2027-02 under %d tokens, %d leases left",
				billed, customers, fences, leases)
		}
	},
}

func TestDocsGoBlocksRun(t *testing.T) {
	t.Parallel()
	root := os.Getenv("FENCING_DOCS")
	if root == "" {
		t.Fatal("FENCING_DOCS names the top of the tree (test/clients/run.sh sets it)")
	}
	pages, err := filepath.Glob(filepath.Join(root, "doc", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	pages = append([]string{filepath.Join(root, "README.md")}, pages...)
	ran := 0
	for _, page := range pages {
		blocks := codeBlocks(t, page)
		hasGo := false
		for _, b := range blocks {
			hasGo = hasGo || b.lang == "go" && !skipped(b.code)
		}
		if !hasGo {
			continue
		}
		ran++
		name, _ := filepath.Rel(root, page)
		t.Run(name, func(t *testing.T) {
			db := "docs_go_" + regexp.MustCompile(`\W`).ReplaceAllString(strings.ToLower(name), "_")
			freshDatabase(t, db)
			runBlocks(t, name, db, blocks, false)
			if check, ok := docChecks[name]; ok {
				check(t, connect(t, connString("dbname="+db)))
			}
		})
	}
	if ran == 0 {
		t.Skip("no go blocks in README.md or doc/*.md yet")
	}
}
