// Copyright (c) 2026, the fencing developers
//
// The code blocks of README.md, run as a reader would run them, in a
// database of their own and in the page's order: the sql blocks with
// psql, each go block as the main.go of an application whose go.mod was
// set up as the README's Install says (debian-modules.sh, then go run
// with GOFLAGS=-mod=mod GOPROXY=off from the environment).  A go block
// whose first line says "not run here" is skipped: only the etcd block of
// the side-by-side (it needs an etcd server).  docs_test.go runs the go
// blocks of the project's README.md and doc/*.md the same way.

package pgfencing_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

const notRun = "not run here"

type codeBlock struct{ lang, code string }

var fence = regexp.MustCompile("(?ms)^```(\\w+)\\n(.*?)^```$")

func codeBlocks(t *testing.T, page string) []codeBlock {
	t.Helper()
	text, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	var blocks []codeBlock
	for _, m := range fence.FindAllStringSubmatch(string(text), -1) {
		blocks = append(blocks, codeBlock{m[1], m[2]})
	}
	return blocks
}

func skipped(code string) bool {
	first := strings.SplitN(code, "\n", 2)[0]
	return strings.Contains(first, notRun)
}

// freshDatabase drops and creates db, with fencing.
func freshDatabase(t *testing.T, db string) {
	t.Helper()
	a := admin(t)
	mustExec(t, a, "DROP DATABASE IF EXISTS "+db+" WITH (FORCE)")
	mustExec(t, a, "CREATE DATABASE "+db)
	c := connect(t, connString("dbname="+db))
	mustExec(t, c, "CREATE EXTENSION fencing")
}

// goApplication is a directory with a go.mod set up as the README says,
// for go blocks to run in.
func goApplication(t *testing.T) string {
	t.Helper()
	app := t.TempDir()
	if err := os.WriteFile(filepath.Join(app, "go.mod"), []byte("module readme\n\ngo 1.19\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	here, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	setup := exec.Command(filepath.Join(here, "debian-modules.sh"))
	setup.Dir = app
	if out, err := setup.CombinedOutput(); err != nil {
		t.Fatalf("debian-modules.sh: %v\n%s", err, out)
	}
	return app
}

// runBlocks runs the blocks of a page in db, in order; psql stops at an
// error when stopOnError (the README of this directory announces none),
// else goes on (the pages of doc/ announce theirs, which
// test/t/091_readme.pl checks).
func runBlocks(t *testing.T, page, db string, blocks []codeBlock, stopOnError bool) {
	t.Helper()
	app := goApplication(t)
	env := append(os.Environ(), "PGDATABASE="+db)
	for i, b := range blocks {
		var cmd *exec.Cmd
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		switch {
		case b.lang == "sql" && !strings.HasPrefix(strings.TrimSpace(b.code), "-- fragment"):
			onError := "0"
			if stopOnError {
				onError = "1"
			}
			cmd = exec.CommandContext(ctx, "psql", "-X", "-q", "-v", "ON_ERROR_STOP="+onError)
			cmd.Stdin = strings.NewReader(b.code)
		case b.lang == "go" && !skipped(b.code):
			if err := os.WriteFile(filepath.Join(app, "main.go"), []byte(b.code), 0o644); err != nil {
				t.Fatal(err)
			}
			cmd = exec.CommandContext(ctx, "go", "run", ".")
			cmd.Dir = app
		default:
			cancel()
			continue
		}
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			t.Fatalf("%s block %d (%s) failed: %v\n%s\n%s", page, i+1, b.lang, err, b.code, out)
		}
	}
}

func TestReadmeBlocksRun(t *testing.T) {
	t.Parallel()
	blocks := codeBlocks(t, "README.md")
	var goBlocks, notRunBlocks int
	for _, b := range blocks {
		if b.lang == "go" {
			goBlocks++
			if skipped(b.code) {
				notRunBlocks++
			}
		}
	}
	if goBlocks < 5 || notRunBlocks != 1 {
		t.Fatalf("README.md: %d go blocks, %d not run; want 5 or more, one not run", goBlocks, notRunBlocks)
	}
	db := "readme_go"
	freshDatabase(t, db)
	runBlocks(t, "README.md", db, blocks, true)
	c := connect(t, connString("dbname="+db))
	var billed, fences, late int
	var leases string
	one(t, c, &billed, "SELECT count(*) FROM invoices WHERE month = '2026-10'")
	one(t, c, &fences, "SELECT count(DISTINCT fence) FROM invoices WHERE month = '2026-10'")
	one(t, c, &late, "SELECT count(*) FROM invoices WHERE month = '2026-12'")
	one(t, c, &leases, "SELECT coalesce(string_agg(name, ', '), '') FROM fencing.leases WHERE database = current_database()")
	if billed != 2500 || fences != 1 || late != 3 || leases != "" {
		t.Fatalf("after the README: %d invoices of 2026-10 under %d fences, %d of 2026-12, leases left: %q; "+
			"want 2500 under 1, 3 and none", billed, fences, late, leases)
	}
}
