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
     the fence written is the writer's token.

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
                                "commits", "audit", "resource_fences", "triggers")}
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
            self.r.phases.append({"mode": e["mode"], "start": e["mono"] if i else NEG, "end": stop,
                                  "faults": 0, "fault_kinds": collections.Counter(),
                                  "failovers": 0, "switchovers": 0, "grants": 0,
                                  "acknowledged": 0, "unknown": 0, "unknown_committed": 0,
                                  "rejected": 0, "lost_acknowledged": 0, "lost_explained": 0,
                                  "months": 0, "repairs": 0, "unrecovered": 0, "violations": 0})
        if not self.r.phases:
            self.r.phases.append({"mode": (self.run.get("modes") or ["?"])[0], "start": NEG,
                                  "end": float("inf"), "faults": 0, "fault_kinds": collections.Counter(),
                                  "failovers": 0, "switchovers": 0, "grants": 0, "acknowledged": 0,
                                  "unknown": 0, "unknown_committed": 0, "rejected": 0,
                                  "lost_acknowledged": 0, "lost_explained": 0, "months": 0,
                                  "repairs": 0, "unrecovered": 0, "violations": 0})
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
        broken = [t for t in self.db["triggers"] if t[2] == "D"]
        if len(self.db["triggers"]) < 3 and not self.run.get("break_"):
            self.r.notes.append("only %d fence triggers in the final database" % len(self.db["triggers"]))
        if broken:
            self.r.notes.append("disabled fence triggers: %s" % broken)
        return self.r


def check(results):
    return Checker(results).checks()


if __name__ == "__main__":
    paths = [a for a in sys.argv[1:] if not a.startswith("--")]
    if len(paths) != 1:
        sys.exit("usage: checker.py [--tap] RESULTS_DIR")
    rep = check(paths[0])
    rep.print(tap="--tap" in sys.argv)
    sys.exit(1 if rep.violations else 0)
