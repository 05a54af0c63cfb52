// Copyright (c) 2026, the fencing developers
//
// What pgfencing's tests share: the server and the PgBouncer that
// test/clients/run.sh started (PGHOST, PGPORT, PGDATABASE;
// FENCING_BOUNCER_PORT), pools and connections on them, names no other
// test uses, a protected table, worker processes (this test binary run
// again as a lease holder, worker_test.go), and a proxy whose traffic can
// be stopped.

package pgfencing_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgconn"
	"github.com/jackc/pgx/v4"
	"github.com/jackc/pgx/v4/pgxpool"
)

func TestMain(m *testing.M) {
	if os.Getenv(workerEnv) != "" {
		os.Exit(runWorker())
	}
	os.Exit(m.Run())
}

// connString is the server's libpq keywords, with overrides such as
// "application_name=x" (later ones win).
func connString(overrides ...string) string {
	kv := []string{"host=" + os.Getenv("PGHOST"), "port=" + os.Getenv("PGPORT"),
		"dbname=" + os.Getenv("PGDATABASE")}
	return strings.Join(append(kv, overrides...), " ")
}

func newPool(t testing.TB, cs string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.Connect(context.Background(), cs)
	if err != nil {
		t.Fatalf("pgxpool.Connect(%q): %v", cs, err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func connect(t testing.TB, cs string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), cs)
	if err != nil {
		t.Fatalf("pgx.Connect(%q): %v", cs, err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// admin is a connection for setting up and for looking from outside.
func admin(t testing.TB) *pgx.Conn {
	return connect(t, connString("application_name=admin"))
}

func unique(prefix string) string {
	b := make([]byte, 5)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return prefix + "-" + hex.EncodeToString(b)
}

func ctxFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func mustExec(t testing.TB, db interface {
	Exec(context.Context, string, ...interface{}) (pgconn.CommandTag, error)
}, sql string, args ...interface{}) {
	t.Helper()
	if _, err := db.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// one scans the one row of a query into dest.
func one(t testing.TB, db interface {
	QueryRow(context.Context, string, ...interface{}) pgx.Row
}, dest interface{}, sql string, args ...interface{}) {
	t.Helper()
	if err := db.QueryRow(context.Background(), sql, args...).Scan(dest); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// ledger is a protected table (id, amount, fence) with rows 1 and 2; its
// name.
func ledger(t testing.TB) string {
	t.Helper()
	name := strings.ReplaceAll(unique("ledger"), "-", "_")
	a := admin(t)
	mustExec(t, a, "CREATE TABLE "+name+" (id int PRIMARY KEY, amount int NOT NULL, fence bigint)")
	mustExec(t, a, "SELECT fencing.protect($1)", name)
	mustExec(t, a, "INSERT INTO "+name+" VALUES (1, 0, fencing.next_token()), (2, 0, fencing.next_token())")
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), connString())
		if err == nil {
			_, _ = c.Exec(context.Background(), "DROP TABLE "+name)
			_ = c.Close(context.Background())
		}
	})
	return name
}

// outsideItsBlock is a transaction whose connection left its transaction
// block with a COMMIT of its own, and that connection.
func outsideItsBlock(t testing.TB) (*pgx.Conn, pgx.Tx) {
	t.Helper()
	conn := connect(t, connString())
	tx, err := conn.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	mustExec(t, conn, "COMMIT")
	return conn, tx
}

func amount(t testing.TB, table string, id int) int {
	t.Helper()
	var n int
	one(t, admin(t), &n, "SELECT amount FROM "+table+" WHERE id = $1", id)
	return n
}

// waitFor polls cond until it is true; it fails the test after timeout.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(timeout); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, timeout)
		}
	}
}

// closedWithin: is ch closed within d?
func closedWithin(ch <-chan struct{}, d time.Duration) bool {
	select {
	case <-ch:
		return true
	case <-time.After(d):
		return false
	}
}

// --- worker processes --------------------------------------------------------------

// A worker is this test binary run again with workerEnv set: a lease
// holder in a process of its own (worker_test.go says what it answers).
type worker struct {
	t     testing.TB
	cmd   *exec.Cmd
	in    io.WriteCloser
	lines chan string
}

func startWorker(t testing.TB) *worker {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), workerEnv+"=1")
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w := &worker{t: t, cmd: cmd, in: in, lines: make(chan string, 16)}
	go func() {
		scanner := bufio.NewScanner(out)
		for scanner.Scan() {
			w.lines <- scanner.Text()
		}
		close(w.lines)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return w
}

func (w *worker) send(format string, args ...interface{}) {
	w.t.Helper()
	if _, err := fmt.Fprintf(w.in, format+"\n", args...); err != nil {
		w.t.Fatalf("worker %d: %v", w.cmd.Process.Pid, err)
	}
}

func (w *worker) read() string {
	w.t.Helper()
	select {
	case line, ok := <-w.lines:
		if !ok {
			w.t.Fatalf("worker %d exited", w.cmd.Process.Pid)
		}
		return line
	case <-time.After(60 * time.Second):
		w.t.Fatalf("worker %d: no answer within 60 s", w.cmd.Process.Pid)
		return ""
	}
}

func (w *worker) ask(format string, args ...interface{}) string {
	w.t.Helper()
	w.send(format, args...)
	return w.read()
}

// --- a proxy whose traffic can be stopped --------------------------------------------

// stallingProxy stands in front of the server on a unix socket of its own
// (host: its directory), and stops its traffic as a network that swallows
// packets does: after stall() nothing it receives goes on, until resume().
type stallingProxy struct {
	dir      string
	listener net.Listener
	mu       sync.Mutex
	flowing  *sync.Cond
	stalled  bool
	holding  bool
	conns    []net.Conn
}

func newStallingProxy(t testing.TB) *stallingProxy {
	t.Helper()
	dir, err := os.MkdirTemp("", "pgstall-")
	if err != nil {
		t.Fatal(err)
	}
	port := os.Getenv("PGPORT")
	listener, err := net.Listen("unix", filepath.Join(dir, ".s.PGSQL."+port))
	if err != nil {
		t.Fatal(err)
	}
	p := &stallingProxy{dir: dir, listener: listener}
	p.flowing = sync.NewCond(&p.mu)
	target := filepath.Join(os.Getenv("PGHOST"), ".s.PGSQL."+port)
	go func() {
		for {
			client, err := listener.Accept()
			if err != nil {
				return
			}
			server, err := net.Dial("unix", target)
			if err != nil {
				_ = client.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, client, server)
			p.mu.Unlock()
			go p.pump(client, server)
			go p.pump(server, client)
		}
	}()
	t.Cleanup(p.close)
	return p
}

// connString is the server's keywords through the proxy.
func (p *stallingProxy) connString(overrides ...string) string {
	return connString(append([]string{"host=" + p.dir}, overrides...)...)
}

func (p *stallingProxy) stall() {
	p.mu.Lock()
	p.stalled, p.holding = true, false
	p.mu.Unlock()
}

func (p *stallingProxy) resume() {
	p.mu.Lock()
	p.stalled = false
	p.flowing.Broadcast()
	p.mu.Unlock()
}

// isHolding: has something it received since stall() stopped there?
func (p *stallingProxy) isHolding() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.holding
}

func (p *stallingProxy) pump(from, to net.Conn) {
	buf := make([]byte, 65536)
	for {
		n, err := from.Read(buf)
		if n > 0 {
			p.mu.Lock()
			if p.stalled {
				p.holding = true
			}
			for p.stalled {
				p.flowing.Wait()
			}
			p.mu.Unlock()
			if _, werr := to.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	_ = from.Close()
	_ = to.Close()
}

func (p *stallingProxy) close() {
	p.resume()
	_ = p.listener.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	_ = os.RemoveAll(p.dir)
}
