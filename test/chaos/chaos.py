#!/usr/bin/python3
"""
test/chaos/chaos.py -- the orchestrator of one chaos run (started by run.sh
inside the client network namespace, as root).

  1. start three etcd members and three Patroni nodes (cluster.py), the
     node that will get the clock fault under libfaketime;
  2. create database "chaos" (schema.sql) on the primary;
  3. start the monitor (every node's role and timeline, ten times a second,
     over its unix socket), K invoice workers (worker.py), one of them with
     its clock set off for the whole run, and L lease workers (worker.py
     --job lease);
  4. for each mode (phase) of the run, inject faults (faults.py) one after
     another, waiting after each for the cluster to be whole again, until
     the phase's share of the time is used; between phases switch Patroni's
     synchronous_mode;
  5. stop the workers, dump the final database and every node's timeline
     history into the results directory, stop the cluster;
  6. run the checker (checker.py) and the plotter (plot.py) on the results.

Exit status: 0 no violation, 1 violations, 2 the run itself failed (the
cluster did not come up, a tool is missing ...).
"""

import argparse
import glob
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import cluster as C            # noqa: E402
import faults as F             # noqa: E402
import checker                 # noqa: E402
import plot                    # noqa: E402

LEASE_TTL = 5.0
CLIENT_TIMEOUT = 6.0


class Interrupted(Exception):
    pass


def on_signal(signo, frame):
    raise Interrupted("signal %d" % signo)


class Run:
    def __init__(self, args):
        self.a = args
        self.rng = random.Random("chaos/%s" % args.seed)
        self.results = args.results
        os.makedirs(os.path.join(self.results, "workers"), exist_ok=True)
        os.makedirs(os.path.join(self.results, "db"), exist_ok=True)
        self.events = open(os.path.join(self.results, "events.jsonl"), "a")
        self.t0 = C.mono()
        self.workers = {}
        self.monitor_stop = threading.Event()
        self.monitor_threads = []
        self.injector = None
        self.fake_node = self.rng.choice(C.NODES)
        self.worker_names = ["w%d" % (i + 1) for i in range(args.workers)]
        self.lease_names = ["l%d" % (i + 1) for i in range(args.lease_workers)]
        self.clock_worker = self.rng.choice(self.worker_names)
        self.worker_offset = self.rng.choice([-1, 1]) * self.rng.randint(30, 120)
        self.clu = C.Cluster(args.run_dir, args.netns_prefix, args.bindir, args.modes[0],
                             self.log, fake_node=self.fake_node, fake_bindir=args.fake_bindir,
                             etcd_dir=args.etcd_dir, dcs=args.dcs)

    def log(self, msg):
        print("[%6.1fs] %s" % (C.mono() - self.t0, msg), flush=True)

    def event(self, ev, **fields):
        fields.update(ev=ev, mono=C.mono())
        self.events.write(json.dumps(fields, separators=(",", ":")) + "\n")
        self.events.flush()

    # --- setup ---------------------------------------------------------------

    def clock_file(self, who):
        return os.path.join(self.a.run_dir, "clock", who)

    def start_cluster(self):
        os.makedirs(os.path.join(self.a.run_dir, "clock"), exist_ok=True)
        with open(self.clock_file(self.fake_node), "w") as f:
            f.write("+0\n")
        os.chmod(self.clock_file(self.fake_node), 0o644)
        self.write_fake_wrapper()
        # "postgres (PostgreSQL) 17.12 (Debian ...)": the server under test
        version = subprocess.run([os.path.join(self.a.bindir, "postgres"), "--version"],
                                 capture_output=True, text=True).stdout.split()
        self.log("etcd: 3 members (%s DCS); Patroni: 3 PostgreSQL %s nodes, %s mode first; "
                 "%s runs under libfaketime"
                 % (self.a.dcs, version[2] if len(version) > 2 else "?",
                    self.a.modes[0], self.fake_node))
        self.clu.start_etcd()
        self.clu.wait_etcd()
        self.clu.start_patroni()
        leader = self.clu.wait_healthy(self.a.start_timeout)
        self.log("cluster up: %s is primary (%.0f s)" % (leader, C.mono() - self.t0))
        self.event("cluster_up", leader=leader)
        return leader

    def write_fake_wrapper(self):
        """A bin directory whose postgres runs the real one with libfaketime
        preloaded, reading its offset from a file we can change at any time
        (only the server processes of that node: Patroni keeps the true
        clock)."""
        d = self.a.fake_bindir
        os.makedirs(d, exist_ok=True)
        for name in os.listdir(self.a.bindir):
            link = os.path.join(d, name)
            if name != "postgres" and not os.path.lexists(link):
                os.symlink(os.path.join(self.a.bindir, name), link)
        wrapper = os.path.join(d, "postgres")
        with open(wrapper, "w") as f:
            f.write("#!/bin/sh\n"
                    "# chaos test: this node's server processes read their clock offset from a file\n"
                    "LD_PRELOAD=%s\nFAKETIME_TIMESTAMP_FILE=%s\nFAKETIME_CACHE_DURATION=1\n"
                    "export LD_PRELOAD FAKETIME_TIMESTAMP_FILE FAKETIME_CACHE_DURATION\n"
                    "exec %s \"$@\"\n"
                    % (self.a.faketime_lib, self.clock_file(self.fake_node),
                       os.path.join(self.a.bindir, "postgres")))
        os.chmod(wrapper, 0o755)

    def create_schema(self, leader):
        psql = [os.path.join(self.a.bindir, "psql"), "-X", "-q", "-h", self.clu.socket_dir(leader),
                "-p", str(C.PG_PORT), "-U", "postgres"]
        env = {"PATH": os.environ["PATH"], "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
        subprocess.run(psql + ["-d", "postgres", "-c", "CREATE DATABASE chaos"], check=True, env=env)
        subprocess.run(psql + ["-d", "chaos", "-v", "customers=%d" % self.a.customers,
                               "-v", "periods=%d" % self.a.periods,
                               "-v", "unprotect=%s" % ("on" if self.a.break_ == "no-trigger" else "off"),
                               "-f", os.path.join(HERE, "schema.sql")],
                       check=True, env=env, stdout=subprocess.DEVNULL)
        if self.a.break_ == "no-trigger":
            self.log("BROKEN ON PURPOSE: the fence triggers were removed (CHAOS_BREAK=no-trigger)")

    # --- monitor ---------------------------------------------------------------

    def monitor(self, node, out):
        """Poll one node's role and timeline; write each change with the time
        of the last poll that saw the old state (prev) and the first that saw
        the new one: a promotion happened between the two."""
        conn = None
        last = None
        last_t = None
        while not self.monitor_stop.is_set():
            t = C.mono()
            state = None
            try:
                if conn is None:
                    conn = self.clu.connect(node, timeout=1)
                row = conn.execute("SELECT pg_is_in_recovery(), CASE WHEN NOT pg_is_in_recovery()"
                                   " THEN pg_walfile_name(pg_current_wal_lsn()) END").fetchone()
                state = ("replica", None) if row[0] else ("primary", int(row[1][:8], 16))
            except Exception:
                state = ("down", None)
                if conn is not None:
                    try:
                        conn.close()
                    except Exception:
                        pass
                conn = None
            t_seen = C.mono()
            if state != last:
                rec = {"node": node, "role": state[0], "tl": state[1], "prev_role": last and last[0],
                       "prev_tl": last and last[1], "prev": last_t, "mono": t_seen, "sent": t}
                with self.monitor_lock:
                    out.write(json.dumps(rec, separators=(",", ":")) + "\n")
                    out.flush()
                last = state
            last_t = t_seen
            self.monitor_stop.wait(0.1)
        if conn is not None:
            conn.close()

    def start_monitor(self):
        self.monitor_lock = threading.Lock()
        self.monitor_out = open(os.path.join(self.results, "monitor.jsonl"), "a")
        for node in C.NODES:
            th = threading.Thread(target=self.monitor, args=(node, self.monitor_out), daemon=True)
            th.start()
            self.monitor_threads.append(th)

    # --- workers ---------------------------------------------------------------

    def start_worker(self, name, extra):
        wdir = os.path.join(self.results, "workers")
        env = {"PATH": os.environ["PATH"], "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
               "HOME": self.a.run_dir}
        argv = [sys.executable, os.path.join(HERE, "worker.py"),
                "--name", name, "--dsn", C.worker_dsn("chaos", "chaos_worker", name),
                "--log", os.path.join(wdir, name + ".jsonl"),
                "--seed", str(self.a.seed), "--lease-ttl", str(LEASE_TTL),
                "--step-ms", str(self.a.step_ms)] + extra
        # every other worker gives a silent server up after a while, as a
        # driver's socket timeout does, and reconnects to whichever node
        # is primary now; the others hold their connections to a paused
        # primary until it wakes up
        if int(name[1:]) % 2 == 0:
            argv += ["--client-timeout", str(CLIENT_TIMEOUT)]
        if name == self.clock_worker:
            # set after the uid change: libfaketime must not load into setpriv
            argv = ["env", "LD_PRELOAD=" + self.a.faketime_lib,
                    "FAKETIME=%+d" % self.worker_offset] + argv
        # already in the client's network namespace
        cmd = C.private_shm_and_ipc(argv)
        err = open(os.path.join(wdir, name + ".stderr"), "ab")
        self.workers[name] = subprocess.Popen(cmd, env=env, stdout=err, stderr=subprocess.STDOUT,
                                              stdin=subprocess.DEVNULL, start_new_session=True)
        err.close()

    def start_workers(self):
        os.chmod(os.path.join(self.results, "workers"), 0o777)
        for name in self.worker_names:
            self.start_worker(name, [])
        lease_args = ["--job", "lease", "--jobs", str(self.a.lease_jobs)]
        if self.a.break_ == "lease-no-fence":
            lease_args.append("--break-lease")
            self.log("BROKEN ON PURPOSE: the lease workers skip use_lease and carry on after FN004 "
                     "and FN001 (CHAOS_BREAK=lease-no-fence)")
        for name in self.lease_names:
            self.start_worker(name, lease_args)
        self.event("fault_static", kind="clock_worker", target=self.clock_worker,
                   offset=self.worker_offset)
        self.log("%d workers started (the even ones give a silent server up after %.0f s); "
                 "%s runs with its clock %+d s off for the whole run"
                 % (len(self.worker_names), CLIENT_TIMEOUT, self.clock_worker, self.worker_offset))
        if self.lease_names:
            self.log("%d lease workers started on %d jobs (acquire_lease, renewals every %.1f s on a "
                     "second connection, use_lease per batch)"
                     % (len(self.lease_names), self.a.lease_jobs, LEASE_TTL / 3))

    def stop_workers(self, grace=5.0):
        for p in self.workers.values():
            if p.poll() is None:
                try:
                    os.kill(p.pid, signal.SIGCONT)
                    p.send_signal(signal.SIGTERM)
                except OSError:
                    pass
        deadline = C.mono() + grace
        for p in self.workers.values():
            try:
                p.wait(max(0.1, deadline - C.mono()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    # --- the phases ---------------------------------------------------------------

    def switch_mode(self, mode):
        r = self.clu.patronictl("edit-config", "--force", "--set",
                                "synchronous_mode=%s" % ("true" if mode == "sync" else "false"))
        if r.returncode != 0:
            raise RuntimeError("patronictl edit-config failed: %s" % (r.stdout + r.stderr))
        self.clu.mode = mode
        self.clu.wait_healthy(60)

    def wait_recovered(self, kind, limit=None):
        """Wait until the cluster is whole again, at most recover_timeout
        (and at most limit) seconds; a cluster that stays broken is noted,
        not a violation: the checks hold or fail on their own."""
        timeout = self.a.recover_timeout if limit is None else min(self.a.recover_timeout, limit)
        try:
            leader = self.clu.wait_healthy(timeout, on_repair=self.repaired)
            self.event("recovered", after=kind, leader=leader)
            return True
        except TimeoutError as e:
            self.event("not_recovered", after=kind, why=str(e), diagnosis=self.diagnose())
            self.log("WARNING: %s (diagnosis in events.jsonl, logs in logs/)" % e)
            return False

    def repaired(self, node, what):
        self.event("repair", node=node, what=what)
        self.log("repair: %s %s" % (node, what))

    def diagnose(self):
        """What the cluster looks like when it does not come back whole."""
        out = {}
        try:
            r = self.clu.patronictl("list", timeout=15)
            out["patronictl list"] = r.stdout + r.stderr
        except Exception as e:
            out["patronictl list"] = str(e)
        for node in C.NODES:
            try:
                with self.clu.connect(node, timeout=2) as conn:
                    out[node] = {
                        "in_recovery": conn.execute("SELECT pg_is_in_recovery()").fetchone()[0],
                        "replication": [list(map(str, r)) for r in conn.execute(
                            "SELECT application_name, state, sent_lsn, replay_lsn, sync_state"
                            " FROM pg_stat_replication").fetchall()],
                        "wal_receiver": [list(map(str, r)) for r in conn.execute(
                            "SELECT status, received_tli, flushed_lsn, sender_host, slot_name"
                            " FROM pg_stat_wal_receiver").fetchall()],
                    }
            except Exception as e:
                out[node] = str(e).strip().splitlines()[0] if str(e) else repr(e)
        return out

    def run_phases(self):
        per_phase = self.a.seconds / len(self.a.modes)
        # "a,b/c,d": the faults of each phase; "a,b": the same for all
        plans = [p.split(",") if p else None for p in self.a.faults.split("/")]
        kinds = plans[0]
        self.injector = F.Injector(self.clu, self.rng, os.path.join(self.results, "faults.jsonl"),
                                   self.log, self.a.netns_prefix, self.workers, LEASE_TTL,
                                   {self.fake_node: self.clock_file(self.fake_node)},
                                   self.fake_node, kinds)
        for i, mode in enumerate(self.a.modes):
            if i > 0:
                self.injector.undo()
                self.switch_mode(mode)
                if len(plans) > 1:
                    self.injector.kinds = plans[i % len(plans)]
            # a slow start (the cluster, a mode switch) shortens the phases
            # rather than the run overrunning its budget (--end-by)
            seconds = per_phase
            if self.a.end_by:
                left = self.t0 + self.a.end_by - C.mono()
                seconds = max(0.0, min(per_phase, left / (len(self.a.modes) - i)))
            self.event("phase", mode=mode)
            self.log("=== phase %d: %s mode, %.0f s ===" % (i + 1, mode, seconds))
            end = C.mono() + seconds
            # let the workers run a little before the first fault
            time.sleep(min(3.0, max(0.0, end - C.mono())))
            while True:
                kind = self.injector.next_kind(end - C.mono())
                if kind is None:
                    break
                self.injector.inject(kind, mode)
                # the next phase and the end need the time: wait no longer
                # than this phase lasts, and ten seconds more
                self.wait_recovered(kind, max(10.0, end - C.mono() + 10))
                time.sleep(min(self.rng.uniform(2, 4), max(0.0, end - C.mono())))
            time.sleep(max(0.0, end - C.mono()))
        self.injector.undo()
        self.wait_recovered("end", 30)
        time.sleep(2)
        self.event("end")

    # --- results ---------------------------------------------------------------

    def dump(self):
        """The final database and every node's timeline history, as JSON."""
        leader = self.clu.wait_leader(60)
        self.event("dump", leader=leader)
        queries = {
            "customers": "SELECT customer_id, monthly_fee::text FROM billing.customers",
            "accounts": "SELECT customer_id, balance::text, fence FROM billing.accounts",
            "runs": "SELECT run_id, period, token, worker, attempt FROM billing.runs",
            "ledger": "SELECT customer_id, period, amount::text, token, fence, attempt FROM billing.ledger",
            "invoices": "SELECT customer_id, period, amount::text, token, worker, attempt FROM billing.invoices",
            "statements": "SELECT sweep, customer_id, generation, worker, attempt, fence FROM billing.statements",
            "job_rows": "SELECT job, item, generation, worker, attempt, fence FROM billing.job_rows",
            "lease_batches": "SELECT attempt, name, token, worker, resource_fence, token_setting, seq"
                             " FROM chaos.lease_batches ORDER BY seq",
            "leases": "SELECT name, token, holder, expires_at::text FROM fencing.leases",
            "commits": "SELECT attempt, worker, kind, token, host(node) FROM chaos.commits",
            "audit": "SELECT audit_id, tbl, row_key, op, old_fence, new_fence, token_setting, attempt,"
                     " xid::text, host(node) FROM chaos.audit ORDER BY audit_id",
            "resource_fences": "SELECT resource, fence FROM fencing.resource_fences",
            "triggers": "SELECT tgrelid::regclass::text, tgname, tgenabled FROM pg_trigger"
                        " WHERE tgname = 'fencing_reject_stale'",
        }
        with self.clu.connect(leader, "chaos", timeout=5) as conn:
            for name, sql in queries.items():
                rows = conn.execute(sql).fetchall()
                with open(os.path.join(self.results, "db", name + ".json"), "w") as f:
                    json.dump([list(r) for r in rows], f)
            tl = conn.execute("SELECT pg_walfile_name(pg_current_wal_lsn())").fetchone()[0]
        stats = {}
        for node in C.NODES:
            try:
                with self.clu.connect(node, "chaos", timeout=3) as conn:
                    stats[node] = dict(zip(("tokens_issued", "stale_writes_rejected"), conn.execute(
                        "SELECT tokens_issued, stale_writes_rejected FROM fencing.stats").fetchone()))
            except Exception as e:
                stats[node] = {"error": str(e).strip().splitlines()[0] if str(e) else "?"}
        histories = {}
        for node in C.NODES:
            wal = os.path.join(self.clu.data_dir(node), "pg_wal")
            try:
                for name in sorted(os.listdir(wal)):
                    if name.endswith(".history"):
                        with open(os.path.join(wal, name)) as f:
                            histories.setdefault(name, f.read())
            except OSError:
                pass
        with open(os.path.join(self.results, "db", "cluster.json"), "w") as f:
            json.dump({"final_leader": leader, "final_tl": int(tl[:8], 16), "histories": histories,
                       "stats": stats, "patroni_history": self.clu.history()}, f, indent=1)

    def main(self):
        params = {k: v for k, v in vars(self.a).items()}
        params.update(fake_node=self.fake_node, clock_worker=self.clock_worker,
                      worker_offset=self.worker_offset, ttl=C.TTL, loop_wait=C.LOOP_WAIT,
                      retry_timeout=C.RETRY_TIMEOUT, lease_ttl=LEASE_TTL, t0=self.t0)
        with open(os.path.join(self.results, "run.json"), "w") as f:
            json.dump(params, f, indent=1)
        leader = self.start_cluster()
        self.create_schema(leader)
        self.start_monitor()
        self.start_workers()
        self.run_phases()
        self.stop_workers()
        self.dump()

    def save_logs(self):
        """Patroni's, PostgreSQL's and etcd's logs, into results/logs."""
        import shutil
        dest = os.path.join(self.results, "logs")
        os.makedirs(dest, exist_ok=True)
        for node in C.NODES:
            nd = self.clu.node_dir(node)
            for src in glob.glob(os.path.join(nd, "patroni-log", "*")) + \
                    glob.glob(os.path.join(nd, "data", "pg-log", "*")) + [os.path.join(nd, "patroni.out")]:
                if os.path.isfile(src):
                    shutil.copy(src, os.path.join(dest, "%s-%s" % (node, os.path.basename(src))))
        for e in C.ETCDS:
            src = os.path.join(self.a.run_dir, "%s.log" % e)
            if os.path.isfile(src):
                shutil.copy(src, dest)

    def cleanup(self):
        try:
            self.save_logs()
        except Exception as e:
            self.log("saving the logs: %s" % e)
        if self.injector:
            try:
                self.injector.undo()
            except Exception as e:
                self.log("undoing faults: %s" % e)
        self.log("stopping the workers")
        self.stop_workers(grace=2.0)
        self.monitor_stop.set()
        for th in self.monitor_threads:
            th.join(3)
        self.log("stopping the cluster")
        self.clu.stop()
        self.log("stopped")


def parse_args(argv):
    p = argparse.ArgumentParser(description="one chaos run (see test/chaos/run.sh)")
    p.add_argument("--run-dir", required=True)
    p.add_argument("--etcd-dir", required=True)
    p.add_argument("--results", required=True)
    p.add_argument("--netns-prefix", required=True)
    p.add_argument("--bindir", required=True)
    p.add_argument("--fake-bindir", required=True)
    p.add_argument("--faketime-lib", required=True)
    p.add_argument("--modes", type=lambda s: s.split(","), default=["sync"])
    p.add_argument("--seconds", type=float, default=300)
    p.add_argument("--seed", default="1")
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--lease-workers", type=int, default=3)
    p.add_argument("--lease-jobs", type=int, default=2)
    p.add_argument("--customers", type=int, default=8)
    p.add_argument("--periods", type=int, default=6000)
    p.add_argument("--step-ms", type=int, default=60)
    p.add_argument("--faults", default="")
    p.add_argument("--dcs", default="etcd", choices=["etcd", "etcd3"])
    p.add_argument("--break", dest="break_", default="", choices=["", "no-trigger", "accept-all", "lease-no-fence"])
    p.add_argument("--start-timeout", type=float, default=150)
    p.add_argument("--recover-timeout", type=float, default=90)
    p.add_argument("--end-by", type=float, default=0,
                   help="seconds after the start by which the last phase must end (0: no limit)")
    p.add_argument("--tap", action="store_true")
    return p.parse_args(argv)


def main(argv):
    args = parse_args(argv)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    run = Run(args)
    failed = None
    try:
        run.main()
    except Interrupted as e:
        failed = "interrupted (%s)" % e
    except Exception as e:
        import traceback
        traceback.print_exc()
        failed = "%s: %s" % (type(e).__name__, e)
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        run.cleanup()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if failed:
        run.log("the run failed: %s" % failed)
        if args.tap:
            print("not ok 1 - chaos run (%s): %s" % (",".join(args.modes), failed))
        return 2
    run.log("checking (results in %s)" % args.results)
    report = checker.check(args.results)
    report.tap.append(checker.self_test())
    try:
        png = plot.plot(args.results, report)
        report.png = png
    except Exception as e:
        run.log("plot failed: %s" % e)
    report.print(tap=args.tap)
    return 1 if report.violations else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
