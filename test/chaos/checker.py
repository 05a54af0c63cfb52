#!/usr/bin/python3
"""
test/chaos/checker.py -- what a chaos run did, and whether it broke anything.

Reads a results directory (the workers' logs, the monitor's role changes,
the faults, the final database and every node's timeline history) and
checks, for every phase (mode) of the run:

  1. exactly once: every month that has a run has exactly one run, and
     every customer exactly one invoice and one ledger row for it, all
     carrying the run's token; a month without a run has none; every
     balance is the sum of its ledger rows;
  2. acknowledged commits: every commit a worker saw acknowledged is in the
     final database (each transaction inserted its attempt into
     chaos.commits).  Synchronous mode: none may be lost.  Asynchronous
     mode: a lost commit must be one the old primary acknowledged after the
     point where the surviving timeline forked from its own (the part of
     its WAL the promoted standby never received), and every commit
     acknowledged after that point must be lost: exactly the risk the
     README states, nothing worse;
  3. per row, the fences the audit trail shows accepted never go down, and
     each version starts where the previous one ended;
  4. every token granted by a primary promoted at a failover, or by any
     later one, is above every token acknowledged (and every token granted
     at all) before that promotion began; and on each primary incarnation,
     every token granted is above every token acknowledged there before it
     was asked for (T1, also across a crash restart in place);
  5. no write carrying a token below the row's fence was accepted, on any
     node, at any time: the audit rows of the final database and those each
     worker read back inside its transactions before committing (also the
     ones later lost in a failover) all have token >= the old fence, and
     the fence written is the writer's token;
  6. leases: every token acquire_lease granted is unique (no other grant
     of any kind has it), and on one primary no lease was held with a token
     after a newer token of its name was granted there (a renewal or a
     use_lease that succeeded although sent after that grant's answer);
  7. no two lease runs ever wrote under one lease at once, by the resource
     fence: on one primary, no batch committed with a token after a newer
     token's batch of the same job had passed use_lease or committed; in
     the final database the batches of each job, in the order they
     committed, never go down in token, each saw the job's resource fence
     and fencing.token at its own token, and the job's resource fence is
     its newest batch's token;
  8. the same by the rows' fences: across each whole job, in the order
     its rows were written, the fences never go down, and each row's fence
     is the token of the batch that wrote it last.

A violation prints the history around it.  Run by hand:
    /usr/bin/python3 test/chaos/checker.py RESULTS_DIR
"""

import collections
import glob
import json
import os
import sys
from bisect import bisect_left

NEG = float("-inf")
SHOW_PER_CHECK = 5


def lsn(text):
    if text is None:
        return None
    hi, lo = text.split("/")
    return (int(hi, 16) << 32) | int(lo, 16)


def fmt_lsn(n):
    return "%X/%X" % (n >> 32, n & 0xFFFFFFFF)


def read_jsonl(path):
    out = []
    if not os.path.exists(path):
        return out
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass        # a line cut by SIGKILL
    return out


def read_json(path, default=None):
    if not os.path.exists(path):
        return default
    with open(path) as f:
        return json.load(f)


PHASE_COUNTS = ("faults", "failovers", "switchovers", "grants", "acknowledged", "unknown",
                "unknown_committed", "rejected", "lost_acknowledged", "lost_explained", "months",
                "lease_grants", "lease_batches", "lease_renewals", "lease_done", "lease_fn004",
                "lease_stopped", "lease_released", "repairs", "unrecovered", "violations")


def new_phase(mode, start, end):
    p = {k: 0 for k in PHASE_COUNTS}
    p.update(mode=mode, start=start, end=end, fault_kinds=collections.Counter())
    return p


class Report:
    def __init__(self, results):
        self.results = results
        self.violations = []         # (check, phase, text, history lines)
        self.phases = []             # [{mode, start, end, ...figures}]
        self.notes = []
        self.png = None
        self.tap = []                # (ok, description)

    def violation(self, check, phase, text, history=()):
        self.violations.append((check, phase, text, list(history)))

    def phase_of(self, t):
        for p in self.phases:
            if p["start"] <= t < p["end"]:
                return p
        return self.phases[-1] if t >= self.phases[-1]["start"] else self.phases[0]

    def print(self, tap=False, out=sys.stdout):
        w = out.write
        run = self.run
        w("\n=== chaos: %s mode%s, seed %s, %d workers, %s s of faults, DCS %s ===\n"
          % ("+".join(p["mode"] for p in self.phases), "s" if len(self.phases) > 1 else "",
             run.get("seed"), run.get("workers", 0), int(run.get("seconds", 0)), run.get("dcs")))
        if run.get("break_"):
            w("BROKEN ON PURPOSE: %s\n" % run["break_"])
        names = [p["mode"] for p in self.phases]
        rows = [("faults injected", "faults")]
        kinds = sorted({k for p in self.phases for k in p["fault_kinds"]})
        rows += [("  " + k, ("fault_kinds", k)) for k in kinds]
        rows += [("failovers (new primaries)", "failovers"),
                 ("  of them switchovers", "switchovers"),
                 ("token grants", "grants"),
                 ("commits acknowledged", "acknowledged"),
                 ("outcome unknown (commit cut off)", "unknown"),
                 ("  of them in the database", "unknown_committed"),
                 ("stale writes rejected (FN001)", "rejected"),
                 ("lost acknowledged commits", "lost_acknowledged"),
                 ("  explained by the async risk", "lost_explained"),
                 ("months billed", "months"),
                 ("lease runs (acquire_lease granted)", "lease_grants"),
                 ("  lease batches acknowledged", "lease_batches"),
                 ("  renewals from the second connection", "lease_renewals"),
                 ("  runs that did all their batches", "lease_done"),
                 ("  runs stopped by FN004", "lease_fn004"),
                 ("  runs stopped by a lost connection or error", "lease_stopped"),
                 ("  releases that freed the lease", "lease_released"),
                 ("Patroni repairs by the harness", "repairs"),
                 ("cluster not whole in time", "unrecovered"),
                 ("violations", "violations")]
        width = max(len(r[0]) for r in rows) + 2
        w("%-*s%s\n" % (width, "", "".join("%12s" % n for n in names)))
        for label, key in rows:
            vals = []
            for p in self.phases:
                v = p["fault_kinds"].get(key[1], 0) if isinstance(key, tuple) else p.get(key, 0)
                vals.append("%12s" % v)
            w("%-*s%s\n" % (width, label, "".join(vals)))
        for note in self.notes:
            w("note: %s\n" % note)
        shown = collections.Counter()
        for check, phase, text, history in self.violations:
            shown[check] += 1
            if shown[check] > SHOW_PER_CHECK:
                continue
            w("\nVIOLATION (check %s, %s mode): %s\n" % (check, phase, text))
            for line in history[:40]:
                w("    %s\n" % line)
        if self.violations:
            w("\nviolations by check: %s%s\n" % (
                ", ".join("%s: %d" % (c, shown[c]) for c in sorted(shown)),
                " (the first %d of each shown)" % SHOW_PER_CHECK
                if max(shown.values()) > SHOW_PER_CHECK else ""))
        if self.png:
            w("\ntimeline: %s\n" % self.png)
        w("results: %s\n" % self.results)
        if tap:
            for i, (ok, desc) in enumerate(self.tap, 1):
                w("%s %d - %s\n" % ("ok" if ok else "not ok", i, desc))
            w("1..%d\n" % len(self.tap))
        w("\n")
        for p in self.phases:
            w("mode: %s\n" % p["mode"])
            w("faults: %d\n" % p["faults"])
            w("failovers: %d\n" % p["failovers"])
            w("acknowledged: %d\n" % p["acknowledged"])
            w("lost_acknowledged: %d\n" % p["lost_acknowledged"])
            w("lease_runs: %d\n" % p["lease_grants"])
            w("lease_batches: %d\n" % p["lease_batches"])
            w("violations: %d\n" % p["violations"])
        out.flush()


class Checker:
    def __init__(self, results):
        self.r = Report(results)
        self.dir = results
        self.run = read_json(os.path.join(results, "run.json"), {})
        self.r.run = self.run
        self.events = read_jsonl(os.path.join(results, "events.jsonl"))
        self.faults = read_jsonl(os.path.join(results, "faults.jsonl"))
        self.monitor = read_jsonl(os.path.join(results, "monitor.jsonl"))
        self.log = []
        for path in sorted(glob.glob(os.path.join(results, "workers", "*.jsonl"))):
            self.log.extend(read_jsonl(path))
        self.log.sort(key=lambda e: e.get("recv", e["mono"]))
        self.by_attempt = collections.defaultdict(list)
        by_worker = collections.defaultdict(list)
        for e in self.log:
            if e.get("attempt"):
                self.by_attempt[e["attempt"]].append(e)
            by_worker[e["w"]].append(e)
        self.by_worker = {w: ([e.get("recv", e["mono"]) for e in evs], evs)
                          for w, evs in by_worker.items()}
        db = os.path.join(results, "db")
        self.db = {name: read_json(os.path.join(db, name + ".json"), [])
                   for name in ("customers", "accounts", "runs", "ledger", "invoices", "statements",
                                "commits", "audit", "resource_fences", "triggers", "job_rows",
                                "lease_batches", "leases")}
        self.cluster = read_json(os.path.join(db, "cluster.json"), {})
        self.t0 = self.run.get("t0", 0.0)

    # --- helpers ------------------------------------------------------------------

    def rel(self, t):
        return "%+8.3fs" % (t - self.t0) if t is not None else "       ?"

    def describe(self, e):
        t = e.get("recv", e.get("mono"))
        bits = [self.rel(t), e.get("w", ""), e["ev"]]
        for k in ("kind", "attempt", "token", "node", "tl", "phase", "sqlstate", "msg", "lsn_lo", "lsn_hi"):
            if e.get(k) is not None:
                bits.append("%s=%s" % (k, self.node_name(e[k]) if k == "node" else e[k]))
        return " ".join(str(b) for b in bits)

    def around(self, t, span=3.0, worker=None, attempts=()):
        """The history around time t: faults, role changes, and the events
        of the given worker or attempts."""
        lines = []
        for f in self.faults:
            if f["start"] - span * 3 <= t <= f["end"] + span * 3:
                lines.append((f["start"], "%s fault %s: %s" % (self.rel(f["start"]), f["kind"],
                                                               f.get("what", f.get("target")))))
        for m in self.monitor:
            if t - span * 5 <= m["mono"] <= t + span * 3:
                lines.append((m["mono"], "%s monitor: %s is %s%s (was %s, last seen so at %s)"
                              % (self.rel(m["mono"]), m["node"], m["role"],
                                 " on timeline %s" % m["tl"] if m["tl"] else "", m["prev_role"],
                                 self.rel(m["prev"]) if m["prev"] else "start")))
        for att in attempts:
            for e in self.by_attempt.get(att, ()):
                lines.append((e.get("recv", e["mono"]), self.describe(e)))
        if worker:
            times, events = self.by_worker.get(worker, ([], []))
            for e in events[bisect_left(times, t - span):bisect_left(times, t + span)]:
                if e.get("attempt") not in attempts:
                    lines.append((e.get("recv", e["mono"]), self.describe(e)))
        lines.sort(key=lambda x: x[0])
        return [l for _, l in lines]

    # --- phases and failovers ----------------------------------------------------------

    def build_phases(self):
        starts = [e for e in self.events if e["ev"] == "phase"]
        end = next((e["mono"] for e in self.events if e["ev"] == "end"), None)
        if end is None:
            end = max([e.get("recv", e["mono"]) for e in self.log] + [self.t0]) + 1
        for i, e in enumerate(starts):
            stop = starts[i + 1]["mono"] if i + 1 < len(starts) else float("inf")
            self.r.phases.append(new_phase(e["mode"], e["mono"] if i else NEG, stop))
        if not self.r.phases:
            self.r.phases.append(new_phase((self.run.get("modes") or ["?"])[0], NEG, float("inf")))
        self.end = end
        for f in self.faults:
            if f["kind"] == "clock_end":
                continue
            p = self.r.phase_of(f["start"])
            p["faults"] += 1
            p["fault_kinds"][f["kind"]] += 1
        for e in self.events:
            if e["ev"] == "repair":
                self.r.phase_of(e["mono"])["repairs"] += 1
                self.r.notes.append("repair at %s: %s %s" % (self.rel(e["mono"]), e["node"], e["what"]))
            elif e["ev"] == "not_recovered":
                self.r.phase_of(e["mono"])["unrecovered"] += 1
            if e["ev"] == "fault_static":
                p = self.r.phases[0]
                p["faults"] += 1
                p["fault_kinds"][e["kind"]] += 1
                self.r.notes.append("%s ran with its clock %+d s off for the whole run"
                                    % (e["target"], e["offset"]))

    def build_incarnations(self):
        """Primary incarnations (node, timeline), each with the latest time at
        which it was certainly not yet primary (the monitor's last poll that
        saw the node in another state)."""
        self.incarnations = {}
        for m in self.monitor:
            if m["role"] == "primary":
                key = (m["node"], m["tl"])
                lower = m["prev"] if m["prev"] is not None and m["prev_role"] is not None else NEG
                if key not in self.incarnations:
                    self.incarnations[key] = {"lower": lower, "seen": m["mono"]}
        # incarnations the workers met that the monitor never saw primary
        for e in self.log:
            if e["ev"] in ("grant", "ack") and (self.node_name(e["node"]), e["tl"]) not in self.incarnations:
                self.incarnations[(self.node_name(e["node"]), e["tl"])] = {"lower": NEG, "seen": e["sent"]}
                self.r.notes.append("the monitor never saw %s primary on timeline %s"
                                    % (self.node_name(e["node"]), e["tl"]))
        firsts = sorted(self.incarnations.items(), key=lambda kv: kv[1]["seen"])
        for i, (key, inc) in enumerate(firsts):
            inc["first"] = (i == 0)
            inc["switchover"] = False
            if i == 0:
                inc["lower"] = NEG
                continue
            self.r.phase_of(inc["seen"])["failovers"] += 1
        # a switchover's promotion: the first one after it, of its candidate
        for f in self.faults:
            if f["kind"] != "switchover":
                continue
            nxt = next(((k, inc) for k, inc in firsts if inc["seen"] >= f["start"]), None)
            if nxt and nxt[0][0] == f.get("target") and nxt[1]["seen"] - f["start"] < 30 \
                    and not nxt[1]["switchover"]:
                nxt[1]["switchover"] = True
                self.r.phase_of(nxt[1]["seen"])["switchovers"] += 1

    @staticmethod
    def node_name(ip):
        if ip is None:
            return "?"
        if "." in str(ip):
            return "n%d" % (int(str(ip).split(".")[-1]) - 10)
        return ip

    # --- 1. exactly once ---------------------------------------------------------------

    def check_exactly_once(self):
        fees = {c[0]: c[1] for c in self.db["customers"]}
        runs = collections.defaultdict(list)
        for r in self.db["runs"]:
            runs[r[1]].append(r)
        inv = collections.defaultdict(list)
        for i in self.db["invoices"]:
            inv[(i[1], i[0])].append(i)
        led = collections.defaultdict(list)
        for l in self.db["ledger"]:
            led[(l[1], l[0])].append(l)
        by_attempt = {e["attempt"]: e for e in self.log if e["ev"] == "ack"}

        def hist(period):
            atts = {r[4] for r in runs.get(period, [])} | {i[5] for k, v in inv.items() if k[0] == period for i in v}
            t = min([by_attempt[a]["recv"] for a in atts if a in by_attempt] or [self.end])
            return self.around(t, attempts=atts)

        ack_time = {e["attempt"]: e["recv"] for e in self.log if e["ev"] == "ack"}
        months = 0
        for period, rs in sorted(runs.items()):
            months += 1
            self.r.phase_of(ack_time.get(rs[0][4], self.end))["months"] += 1
            if len(rs) != 1:
                self.fail(1, self.end, "month %s was billed by %d runs (tokens %s)"
                          % (period, len(rs), ", ".join(str(r[2]) for r in rs)), hist(period))
                continue
            run = rs[0]
            for cid in fees:
                i = inv.get((period, cid), [])
                l = led.get((period, cid), [])
                if len(i) != 1 or len(l) != 1:
                    self.fail(1, self.end, "customer %s has %d invoices and %d ledger rows for %s"
                              % (cid, len(i), len(l), period), hist(period))
                    continue
                if i[0][3] != run[2] or l[0][3] != run[2] or l[0][4] != run[2] or i[0][5] != run[4]:
                    self.fail(1, self.end, "customer %s's %s invoice/ledger carry token %s/%s, the run %s"
                              % (cid, period, i[0][3], l[0][3], run[2]), hist(period))
        for (period, cid), i in sorted(inv.items()):
            if period not in runs:
                self.fail(1, self.end, "customer %s has %d invoices for %s, a month without a run"
                          % (cid, len(i), period), hist(period))
        balance = collections.defaultdict(float)
        for l in self.db["ledger"]:
            balance[l[0]] += float(l[2])
        for a in self.db["accounts"]:
            if abs(float(a[1]) - balance[a[0]]) > 0.005:
                self.fail(1, self.end, "customer %s's balance %s is not the sum of its ledger rows %.2f"
                          % (a[0], a[1], balance[a[0]]))
        self.months = months

    # --- 2. acknowledged commits ----------------------------------------------------------

    def timeline_tree(self):
        """{tl: (parent, switchpoint)} from every history file we found, and
        the chain of the final timeline."""
        tree = {}
        for name, text in (self.cluster.get("histories") or {}).items():
            tl = int(name[:8], 16)
            lines = [l.split() for l in text.splitlines() if l.strip() and not l.startswith("#")]
            if lines:
                parent, point = int(lines[-1][0]), lsn(lines[-1][1])
                tree[tl] = (parent, point)
        final = self.cluster.get("final_tl", 1)
        chain = {final: None}
        tl = final
        # the switchpoint at which the chain leaves each ancestor
        while tl in tree:
            parent, point = tree[tl]
            chain[parent] = point
            tl = parent
        return tree, chain, final

    def check_acks(self):
        present = {c[0] for c in self.db["commits"]}
        tree, chain, final = self.timeline_tree()
        self.lost = set()
        acks = [e for e in self.log if e["ev"] == "ack"]
        self.acks = acks
        for e in acks:
            p = self.r.phase_of(e["recv"])
            p["acknowledged"] += 1
            if e["attempt"] in present:
                continue
            self.lost.add(e["attempt"])
            p["lost_acknowledged"] += 1
            tl, lo, hi = e["tl"], lsn(e.get("lsn_lo")), lsn(e.get("lsn_hi"))
            hist = self.around(e["recv"], attempts={e["attempt"]})
            if p["mode"] == "sync":
                self.fail(2, e["recv"], "%s's commit %s (token %s, %s timeline %s) was acknowledged in "
                          "synchronous mode and is not in the final database"
                          % (e["w"], e["attempt"], e["token"], self.node_name(e["node"]), tl), hist)
                continue
            if tl == final:
                self.fail(2, e["recv"], "commit %s acknowledged on the final timeline %s is missing"
                          % (e["attempt"], tl), hist)
            elif tl in chain:
                fork = chain[tl]
                if hi is not None and hi <= fork:
                    self.fail(2, e["recv"], "commit %s (timeline %s, WAL up to %s) ended before timeline "
                              "%s's fork at %s, yet it is lost: worse than the async risk"
                              % (e["attempt"], tl, fmt_lsn(hi), tl, fmt_lsn(fork)), hist)
                else:
                    p["lost_explained"] += 1
            else:
                # a timeline that is not an ancestor of the final one: abandoned whole
                p["lost_explained"] += 1
        # the converse: every commit acknowledged past a fork must be gone
        for e in acks:
            tl, lo = e["tl"], lsn(e.get("lsn_lo"))
            if e["attempt"] in present and tl in chain and chain[tl] is not None and lo is not None \
                    and lo >= chain[tl]:
                self.fail(2, e["recv"], "commit %s was written on timeline %s at %s, past that timeline's "
                          "fork at %s, yet the final database has it: the checker's view of the "
                          "timelines is wrong" % (e["attempt"], tl, fmt_lsn(lo), fmt_lsn(chain[tl])),
                          self.around(e["recv"], attempts={e["attempt"]}))
        # unknown outcomes: cut off during COMMIT
        for e in self.log:
            if e["ev"] == "fail" and e.get("outcome") == "unknown":
                p = self.r.phase_of(e["mono"])
                p["unknown"] += 1
                if e["attempt"] in present:
                    p["unknown_committed"] += 1
            elif e["ev"] == "rejected":
                self.r.phase_of(e["mono"])["rejected"] += 1
            elif e["ev"] == "grant":
                self.r.phase_of(e["recv"])["grants"] += 1
        self.tree, self.chain, self.final_tl = tree, chain, final

    # --- 3 and 5. fences -------------------------------------------------------------------

    def check_fences(self):
        tokens = {}
        for e in self.log:
            if e.get("attempt") and e.get("token") is not None:
                tokens.setdefault(e["attempt"], e["token"])
        attempt_time = {}
        for e in self.log:
            if e.get("attempt"):
                attempt_time.setdefault(e["attempt"], e.get("recv", e["mono"]))

        def when(att):
            return attempt_time.get(att, self.end)

        # 3: the final audit trail, per row, in the order the row's writers held its lock
        rows = collections.defaultdict(list)
        for a in self.db["audit"]:
            rows[(a[1], a[2])].append(a)
        self.audited = len(self.db["audit"])
        for key, versions in rows.items():
            prev = None
            for i, a in enumerate(versions):
                old, new = a[4], a[5]
                bad = None
                if a[3] == "UPDATE" and old is not None and new is not None and new < old:
                    bad = "its fence went down from %s to %s" % (old, new)
                elif prev is not None and a[3] == "UPDATE" and old != prev[5]:
                    bad = "version %d starts at fence %s, the previous one ended at %s" % (i, old, prev[5])
                if bad:
                    hist = ["audit %s %s %s/%s %s fence %s -> %s (attempt %s, token %s)"
                            % (v[0], v[3], v[1], v[2], v[9], v[4], v[5], v[7], tokens.get(v[7]))
                            for v in versions[max(0, i - 3):i + 3]]
                    hist += self.around(when(a[7]), attempts={a[7], prev[7] if prev else None})
                    self.fail(3, when(a[7]), "row %s of %s: %s (attempt %s)" % (key[1], key[0], bad, a[7]),
                              hist)
                prev = a

        # 5: every accepted write: the final trail, and what the workers read
        # back inside their transactions (including those lost later)
        accepted = []
        for a in self.db["audit"]:
            accepted.append((a[7], a[1], a[2], a[3], a[4], a[5], "final database"))
        for e in self.log:
            if e["ev"] == "commit_sent":
                for t in e.get("audit", []):
                    accepted.append((e["attempt"], t[0], t[1], t[2], t[3], t[4],
                                     "read back by %s on %s" % (e["w"], self.node_name(e["node"]))))
        seen = set()
        self.accepted_writes = 0
        for att, tbl, key, op, old, new, where in accepted:
            if (att, tbl, key, old, new) in seen:
                continue
            seen.add((att, tbl, key, old, new))
            self.accepted_writes += 1
            tok = tokens.get(att)
            if tok is None or op == "DELETE":
                continue
            if old is not None and tok < old:
                self.fail(5, when(att), "%s row %s accepted a write with token %s below its fence %s "
                          "(attempt %s, %s)" % (tbl, key, tok, old, att, where),
                          self.around(when(att), attempts={att}))
            elif new != tok:
                self.fail(5, when(att), "%s row %s was written with fence %s by a holder of token %s "
                          "(attempt %s, %s)" % (tbl, key, new, tok, att, where),
                          self.around(when(att), attempts={att}))

    # --- 4. tokens across failovers ---------------------------------------------------------

    def check_tokens(self):
        acks = sorted(self.acks, key=lambda e: e["recv"])
        grants = [e for e in self.log if e["ev"] == "grant"]
        # T1 per incarnation
        by_inc = collections.defaultdict(list)
        for e in acks:
            by_inc[(self.node_name(e["node"]), e["tl"])].append(e)
        for key, lst in by_inc.items():
            times = [e["recv"] for e in lst]
            pmax, best = [], None
            for e in lst:
                best = e if best is None or e["token"] > best["token"] else best
                pmax.append(best)
            for g in grants:
                if (self.node_name(g["node"]), g["tl"]) != key:
                    continue
                i = bisect_left(times, g["sent"])
                if i and pmax[i - 1]["token"] >= g["token"]:
                    a = pmax[i - 1]
                    self.fail(4, g["sent"], "%s granted token %s on %s timeline %s after %s's commit with "
                              "token %s was acknowledged there" % (g["w"], g["token"], key[0], key[1],
                                                                     a["w"], a["token"]),
                              self.around(g["sent"], attempts={g["attempt"], a["attempt"]}))
        # across failovers: every token granted by the promoted primary, or a
        # later one, against every token acknowledged (check 4 proper) and
        # every token handed out at all (T3) before the promotion began
        handed = sorted(acks + grants, key=lambda e: e["recv"])
        times = [e["recv"] for e in handed]
        pmax, best = [], None
        for e in handed:
            best = e if best is None or e["token"] > best["token"] else best
            pmax.append(best)
        order = sorted(self.incarnations.items(), key=lambda kv: kv[1]["seen"])
        self.failover_checks = 0
        for i, (key, inc) in enumerate(order):
            if inc["first"]:
                continue
            later = {k for k, v in order[i:]}
            j = bisect_left(times, inc["lower"])
            if not j:
                continue
            before = pmax[j - 1]
            what = "acknowledged" if before["ev"] == "ack" else "granted"
            for g in grants:
                if (self.node_name(g["node"]), g["tl"]) in later:
                    self.failover_checks += 1
                    if g["token"] <= before["token"]:
                        self.fail(4, g["sent"], "token %s granted by %s (timeline %s, promoted at %s or "
                                  "later) is not above token %s %s before that promotion"
                                  % (g["token"], self.node_name(g["node"]), g["tl"],
                                     self.rel(inc["lower"]), before["token"], what),
                                  self.around(inc["lower"], attempts={g["attempt"], before["attempt"]}))
                        break

    # --- 6 and 7. leases -------------------------------------------------------------------------

    def incarnation(self, e):
        return (self.node_name(e.get("node")), e.get("tl"))

    @staticmethod
    def newest_before(events, time_of):
        """For events sorted by time_of: (times, running maximum by token)."""
        times, pmax, best = [], [], None
        for e in events:
            best = e if best is None or e["token"] > best["token"] else best
            times.append(time_of(e))
            pmax.append(best)
        return times, pmax

    def count_leases(self):
        self.lease_runs = 0
        self.lease_holds = 0
        for e in self.log:
            ev, kind = e["ev"], e.get("kind")
            if ev == "grant" and kind == "lease":
                self.lease_runs += 1
                self.r.phase_of(e["recv"])["lease_grants"] += 1
            elif ev == "ack" and kind == "lease_batch":
                self.r.phase_of(e["recv"])["lease_batches"] += 1
            elif ev == "renew":
                self.lease_holds += 1
                self.r.phase_of(e["recv"])["lease_renewals"] += 1
            elif ev == "use":
                self.lease_holds += 1
            elif ev == "lease_end":
                p = self.r.phase_of(e["mono"])
                if e.get("sqlstate") == "FN004":
                    p["lease_fn004"] += 1
                elif e.get("by") == "end":
                    p["lease_done"] += 1
                else:
                    p["lease_stopped"] += 1
            elif ev == "release" and e.get("released"):
                self.r.phase_of(e["mono"])["lease_released"] += 1

    def check_lease_tokens(self, grants, lease_grants):
        """6: no token granted twice, and a lease held by one token at a
        time per name on each primary."""
        by_token = collections.defaultdict(list)
        for g in grants:
            by_token[g["token"]].append(g)
        for token, same in sorted(by_token.items()):
            if len(same) > 1 and any(g.get("kind") == "lease" for g in same):
                self.fail(6, same[1]["recv"], "token %s was granted %d times: %s"
                          % (token, len(same), ", ".join("%s %s of %s on %s" % (
                              g["w"], g.get("kind"), g.get("name", "?"), self.node_name(g["node"]))
                              for g in same)),
                          self.around(same[1]["recv"], attempts={g["attempt"] for g in same}))
        per = collections.defaultdict(list)
        for g in lease_grants:
            per[(g["name"],) + self.incarnation(g)].append(g)
        index = {}
        for key, lst in per.items():
            lst.sort(key=lambda e: e["recv"])
            index[key] = self.newest_before(lst, lambda e: e["recv"])
        for h in self.log:
            if h["ev"] not in ("renew", "use"):
                continue
            times, pmax = index.get((h["name"],) + self.incarnation(h), ([], []))
            i = bisect_left(times, h["sent"])
            if i and pmax[i - 1]["token"] > h["token"]:
                g = pmax[i - 1]
                self.fail(6, h["sent"], "%s's %s of %s with token %s succeeded on %s timeline %s, "
                          "sent after %s had been granted the newer token %s there"
                          % (h["w"], "renewal" if h["ev"] == "renew" else "use_lease", h["name"],
                             h["token"], self.node_name(h["node"]), h["tl"], g["w"], g["token"]),
                          self.around(h["sent"], attempts={h["attempt"], g["attempt"]}))

    def check_lease_writes_live(self, present):
        """7, as the workers saw it: on one primary, no batch of a job
        committed with a token after a newer token's batch of that job had
        passed use_lease (which holds the job's resource fence until its
        batch ends) or committed."""
        names = {}
        for e in self.log:
            if e.get("kind") == "lease_batch" and e.get("name"):
                names[e["attempt"]] = e["name"]
        for row in self.db["lease_batches"]:
            names.setdefault(row[0], row[1])
        acked = {e["attempt"] for e in self.log if e["ev"] == "ack" and e.get("kind") == "lease_batch"}
        starts = collections.defaultdict(list)
        for e in self.log:
            if e.get("kind") == "lease_batch" and (e["ev"] == "use" or e["ev"] == "ack"):
                starts[(names.get(e["attempt"]),) + self.incarnation(e)].append(e)
        index = {}
        for key, lst in starts.items():
            lst.sort(key=lambda e: e["recv"])
            index[key] = self.newest_before(lst, lambda e: e["recv"])
        for c in self.log:
            if c["ev"] != "commit_sent" or c.get("kind") != "lease_batch":
                continue
            if c["attempt"] not in acked and c["attempt"] not in present:
                continue
            times, pmax = index.get((names.get(c["attempt"]),) + self.incarnation(c), ([], []))
            i = bisect_left(times, c["sent"])
            if i and pmax[i - 1]["token"] > c["token"]:
                n = pmax[i - 1]
                self.fail(7, c["sent"], "%s's batch %s of %s with token %s committed on %s timeline %s "
                          "after %s's batch %s with the newer token %s had %s there"
                          % (c["w"], c["attempt"], names.get(c["attempt"]), c["token"],
                             self.node_name(c["node"]), c["tl"], n["w"], n["attempt"], n["token"],
                             "passed use_lease" if n["ev"] == "use" else "committed"),
                          self.around(c["sent"], attempts={c["attempt"], n["attempt"]}))

    def check_lease_writes_final(self):
        """7, in the final database: the batches of each job in the order
        they committed (seq), the fence and token each saw, and the job's
        resource fence at the end."""
        last = {}
        newest = {}
        unfenced = collections.defaultdict(list)
        for att, name, token, worker, fence_seen, token_setting, seq in self.db["lease_batches"]:
            if fence_seen != token or token_setting != str(token):
                unfenced[name].append((att, token, fence_seen, token_setting))
            if name in last and token < last[name][2]:
                self.fail(7, self.end, "batch %s of %s (%s, token %s) committed after batch %s (%s, token %s)"
                          % (att, name, worker, token, last[name][0], last[name][3], last[name][2]),
                          self.around(self.end, attempts={att, last[name][0]}))
            else:
                last[name] = (att, seq, token, worker)
            newest[name] = max(newest.get(name, token), token)
        for name, bad in sorted(unfenced.items()):
            att, token, fence_seen, token_setting = bad[0]
            self.fail(7, self.end, "%d batches of %s did not write at their own token: the first, %s with "
                      "token %s, saw the job's resource fence at %s and fencing.token = %r"
                      % (len(bad), name, att, token, fence_seen, token_setting))
        fences = {r[0]: r[1] for r in self.db["resource_fences"]}
        for name, token in sorted(newest.items()):
            if fences.get(name) != token:
                self.fail(7, self.end, "the resource fence of %s is %s, its newest committed batch's token %s"
                          % (name, fences.get(name), token))

    def check_lease_rows(self):
        """8, the rows' fences: across each whole job, in the order its
        rows were written (the final audit trail), the fences never go
        down, and each row's fence is the token of its last writer."""
        token_of = {row[0]: row[2] for row in self.db["lease_batches"]}
        self.job_row_versions = 0
        job_last = {}
        for a in self.db["audit"]:
            if a[1] != "job_rows" or a[3] == "DELETE" or a[5] is None:
                continue
            self.job_row_versions += 1
            job = a[2].split("/")[0]
            p = job_last.get(job)
            if p is not None and a[5] < p[5]:
                self.fail(8, self.end, "job %s's row %s took fence %s (attempt %s) after row %s had taken "
                          "fence %s (attempt %s)" % (job, a[2], a[5], a[7], p[2], p[5], p[7]),
                          self.around(self.end, attempts={a[7], p[7]}))
            else:
                job_last[job] = a
        for job, item, generation, worker, att, fence in self.db["job_rows"]:
            if att in token_of and fence != token_of[att]:
                self.fail(8, self.end, "job %s's row %s has fence %s, but batch %s that wrote it last "
                          "holds token %s" % (job, item, fence, att, token_of[att]))

    def check_leases(self):
        self.count_leases()
        grants = [e for e in self.log if e["ev"] == "grant"]
        lease_grants = [e for e in grants if e.get("kind") == "lease"]
        present = {c[0] for c in self.db["commits"]}
        self.check_lease_tokens(grants, lease_grants)
        self.check_lease_writes_live(present)
        self.check_lease_writes_final()
        self.check_lease_rows()

    # --- all -------------------------------------------------------------------------------------

    def fail(self, check, t, text, history=()):
        p = self.r.phase_of(t)
        p["violations"] += 1
        self.r.violation(check, p["mode"], text, history)

    def checks(self):
        self.build_phases()
        self.build_incarnations()
        self.check_exactly_once()
        self.check_acks()
        self.check_fences()
        self.check_tokens()
        self.check_leases()
        counts = collections.Counter(v[0] for v in self.r.violations)
        modes = "+".join(p["mode"] for p in self.r.phases)
        tap = self.r.tap
        tap.append((sum(p["faults"] for p in self.r.phases) > 0, "%s: faults injected" % modes))
        tap.append((sum(p["acknowledged"] for p in self.r.phases) > 0, "%s: commits acknowledged" % modes))
        tap.append((counts[1] == 0, "%s: check 1, every customer billed exactly once per month (%d months)"
                    % (modes, self.months)))
        for p in self.r.phases:
            if p["mode"] == "sync":
                tap.append((p["lost_acknowledged"] == 0,
                            "sync: check 2, no acknowledged commit lost (%d acknowledged)" % p["acknowledged"]))
            else:
                tap.append((p["lost_acknowledged"] == p["lost_explained"],
                            "async: check 2, the %d lost acknowledged commits are exactly the async risk"
                            % p["lost_acknowledged"]))
        tap.append((counts[3] == 0, "%s: check 3, no row's fence went down (%d audited versions)"
                    % (modes, self.audited)))
        tap.append((counts[4] == 0, "%s: check 4, tokens rise across %d failovers (%d grant checks)"
                    % (modes, sum(p["failovers"] for p in self.r.phases), self.failover_checks)))
        tap.append((counts[5] == 0, "%s: check 5, no stale write accepted (%d accepted writes)"
                    % (modes, self.accepted_writes)))
        if self.run.get("lease_workers"):
            tap.append((self.lease_runs > 0, "%s: lease runs granted (%d runs, %d batches acknowledged)"
                        % (modes, self.lease_runs, sum(p["lease_batches"] for p in self.r.phases))))
        tap.append((counts[6] == 0, "%s: check 6, every lease token unique, one holder per name "
                    "(%d lease grants, %d renewals and uses)" % (modes, self.lease_runs, self.lease_holds)))
        tap.append((counts[7] == 0, "%s: check 7, no two lease runs wrote under one lease at once, "
                    "by the resource fence (%d batches committed)" % (modes, len(self.db["lease_batches"]))))
        tap.append((counts[8] == 0, "%s: check 8, no two lease runs wrote under one lease at once, "
                    "by the rows' fences (%d job row versions)" % (modes, self.job_row_versions)))
        broken = [t for t in self.db["triggers"] if t[2] == "D"]
        if len(self.db["triggers"]) < 4 and not self.run.get("break_"):
            self.r.notes.append("only %d fence triggers in the final database" % len(self.db["triggers"]))
        if broken:
            self.r.notes.append("disabled fence triggers: %s" % broken)
        return self.r


def check(results):
    return Checker(results).checks()


def self_test():
    """The lease checks (6 to 8) on a made-up run in which they must fail:
    a token granted twice, a renewal that succeeded after a newer grant of
    its name, a batch committed after a newer token's use_lease, and a final
    database whose batches, resource fence and job rows are out of order.
    Returns (ok, description) for a TAP line."""
    import shutil
    import tempfile

    d = tempfile.mkdtemp(prefix="chaos-checker-selftest.")
    try:
        os.makedirs(os.path.join(d, "workers"))
        os.makedirs(os.path.join(d, "db"))
        node = "198.18.1.11"

        def lines(path, events):
            with open(os.path.join(d, path), "w") as f:
                for e in events:
                    f.write(json.dumps(e) + "\n")

        def ev(w, what, mono, **kw):
            kw.update(ev=what, w=w, mono=mono)
            kw.setdefault("node", node)
            kw.setdefault("tl", 1)
            return kw

        with open(os.path.join(d, "run.json"), "w") as f:
            json.dump({"seed": "self-test", "workers": 0, "lease_workers": 3, "seconds": 0,
                       "dcs": "etcd", "t0": 0.0}, f)
        lines("events.jsonl", [{"ev": "phase", "mode": "sync", "mono": 0.0},
                               {"ev": "end", "mono": 100.0}])
        lines("monitor.jsonl", [{"node": "n1", "role": "primary", "tl": 1, "prev_role": None,
                                 "prev_tl": None, "prev": None, "mono": 0.5, "sent": 0.5}])
        job = {"name": "batch-job:1"}
        lines("workers/l1.jsonl", [
            ev("l1", "grant", 1.1, kind="lease", attempt="l1-L1", token=100, sent=1.0, recv=1.1, **job),
            ev("l1", "use", 2.1, kind="lease_batch", attempt="l1-j2", run="l1-L1", token=100,
               sent=2.0, recv=2.1, **job),
            ev("l1", "renew", 8.1, kind="lease", attempt="l1-L1", token=100, sent=8.0, recv=8.1, **job),
            ev("l1", "commit_sent", 9.0, kind="lease_batch", attempt="l1-j2", token=100, sent=9.0,
               audit=[], **job),
            ev("l1", "ack", 9.2, kind="lease_batch", attempt="l1-j2", token=100, sent=9.0, recv=9.2,
               **job)])
        lines("workers/l2.jsonl", [
            ev("l2", "grant", 5.1, kind="lease", attempt="l2-L1", token=200, sent=5.0, recv=5.1, **job),
            ev("l2", "use", 6.1, kind="lease_batch", attempt="l2-j2", run="l2-L1", token=200,
               sent=6.0, recv=6.1, **job),
            ev("l2", "commit_sent", 6.2, kind="lease_batch", attempt="l2-j2", token=200, sent=6.2,
               audit=[], **job),
            ev("l2", "ack", 6.3, kind="lease_batch", attempt="l2-j2", token=200, sent=6.2, recv=6.3,
               **job)])
        lines("workers/l3.jsonl", [
            ev("l3", "grant", 7.1, kind="lease", attempt="l3-L1", token=200, sent=7.0, recv=7.1,
               name="batch-job:2")])
        db = {"commits": [["l1-j2", "l1", "lease_batch", 100, node],
                          ["l2-j2", "l2", "lease_batch", 200, node]],
              "lease_batches": [["l2-j2", "batch-job:1", 200, "l2", 200, "200", 1],
                                ["l1-j2", "batch-job:1", 100, "l1", 200, "100", 2]],
              "resource_fences": [["batch-job:1", 150]],
              "audit": [[1, "job_rows", "1/1", "INSERT", None, 200, "200", "l2-j2", "1", node],
                        [2, "job_rows", "1/2", "INSERT", None, 100, "100", "l1-j2", "2", node]],
              "job_rows": [[1, 1, 1, "l2", "l2-j2", 200], [1, 2, 1, "l1", "l1-j2", 200]]}
        for name, rows in db.items():
            with open(os.path.join(d, "db", name + ".json"), "w") as f:
                json.dump(rows, f)
        with open(os.path.join(d, "db", "cluster.json"), "w") as f:
            json.dump({"final_leader": "n1", "final_tl": 1, "histories": {}}, f)

        rep = check(d)
        texts = [(c, t) for c, _, t, _ in rep.violations]
        wanted = [(6, "token 200 was granted 2 times"),
                  (6, "renewal of batch-job:1 with token 100 succeeded"),
                  (7, "batch l1-j2 of batch-job:1 with token 100 committed on n1 timeline 1 after"),
                  (7, "saw the job's resource fence at 200 and fencing.token = '100'"),
                  (7, "(l1, token 100) committed after batch l2-j2"),
                  (7, "the resource fence of batch-job:1 is 150"),
                  (8, "took fence 100 (attempt l1-j2) after row 1/1"),
                  (8, "row 2 has fence 200, but batch l1-j2")]
        missing = [w for w in wanted if not any(c == w[0] and w[1] in t for c, t in texts)]
        desc = "checker self-test: checks 6 to 8 report each of %d broken lease histories" % len(wanted)
        if missing:
            desc += " (not reported: %s)" % "; ".join("check %d: %s" % m for m in missing)
        return (not missing, desc)
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        ok, desc = self_test()
        print("%s 1 - %s\n1..1" % ("ok" if ok else "not ok", desc))
        sys.exit(0 if ok else 1)
    paths = [a for a in sys.argv[1:] if not a.startswith("--")]
    if len(paths) != 1:
        sys.exit("usage: checker.py [--tap] RESULTS_DIR | --self-test")
    rep = check(paths[0])
    rep.print(tap="--tap" in sys.argv)
    sys.exit(1 if rep.violations else 0)
