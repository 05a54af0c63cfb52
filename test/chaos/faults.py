"""
test/chaos/faults.py -- the faults of the chaos test, seeded and bounded.

  kill9         kill -9 of the primary's postmaster (Patroni fails over:
                primary_start_timeout is 0)
  stop_primary  SIGSTOP of the primary's postmaster and all its children
                (its PostgreSQL, not Patroni: the HA loop blocks on it)
                for longer than Patroni's ttl, then SIGCONT: the old primary
                wakes up while its clients still hold connections
  partition     the primary's cluster link cut at the bridge: it loses etcd
                and the replicas, its clients still reach it
  stop_worker   SIGSTOP of a worker, preferably one that holds a lock or a
                lease, for longer than its lease, then SIGCONT
  clock         the clock of one node (the one started under libfaketime)
                set off by a fraction of a second for a while; a switchover
                during that window promotes that node when it can
  switchover    patronictl switchover to a replica, under load

Each fault is one record in faults.jsonl: kind, target, start and end
(true monotonic seconds), and what was done.  The schedule is a seeded
shuffle of the kinds, reshuffled every round, or the list CHAOS_FAULTS
names, cycled.
"""

import json
import os
import random
import signal
import subprocess
import threading
import time

import cluster as C

KINDS = ["kill9", "stop_primary", "partition", "stop_worker", "clock", "switchover"]

# Seconds a fault takes, with the cluster's recovery after it, as seen on a
# loaded two-core machine: a fault starts only when it fits in what is left
# of its phase, so that a run ends on time.
ESTIMATE = {"kill9": 18, "stop_primary": 36, "partition": 36, "stop_worker": 11,
            "clock": 2, "switchover": 18}


def children_of(pid):
    """Direct children of pid, from /proc (postgres children each call
    setsid(), so a process group would not reach them)."""
    kids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry) as f:
                stat = f.read()
        except OSError:
            continue
        # the command may contain spaces and parentheses: ppid follows the last ")"
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) > 1 and fields[1] == str(pid):
            kids.append(int(entry))
    return kids


class Injector:
    def __init__(self, clu, rng, out_path, log, netns_prefix, workers, lease_ttl,
                 clock_files, fake_node, kinds=None):
        self.c = clu
        self.rng = rng
        self.out = open(out_path, "a")
        self.log = log
        self.prefix = netns_prefix
        self.workers = workers          # name -> Popen
        self.lease_ttl = lease_ttl
        self.clock_files = clock_files  # node -> path of its libfaketime file
        self.fake_node = fake_node
        self.kinds = kinds
        self.round = []
        self.clock_until = 0.0
        self.clock_timer = None
        self.stopped = []               # pids to continue if we are interrupted
        self.cut_links = []

    def record(self, **fields):
        self.out.write(json.dumps(fields, separators=(",", ":")) + "\n")
        self.out.flush()

    def next_kind(self, seconds_left):
        """The next fault of the schedule that fits in seconds_left (the
        ones skipped stay first in line), or None."""
        if self.kinds:
            for i, kind in enumerate(self.kinds):
                if ESTIMATE[kind] <= seconds_left:
                    self.kinds = self.kinds[:i] + self.kinds[i + 1:] + [kind]
                    return kind
            return None
        if not self.round:
            self.round = list(KINDS)
            self.rng.shuffle(self.round)
        for i, kind in enumerate(self.round):
            if ESTIMATE[kind] <= seconds_left:
                return self.round.pop(i)
        return None

    def inject(self, kind, phase):
        start = C.mono()
        leader = self.c.leader()
        info = getattr(self, "do_" + kind)(leader)
        end = C.mono()
        if info is None:
            self.log("fault %s: skipped (no target)" % kind)
            return None
        info.update(kind=kind, phase=phase, start=start, end=end)
        self.record(**info)
        self.log("fault %-12s %s" % (kind, info.get("what", "")))
        return info

    # --- the primary ---------------------------------------------------------

    def do_kill9(self, leader):
        pid = leader and self.c.postmaster_pid(leader)
        if not pid:
            return None
        os.kill(pid, signal.SIGKILL)
        return {"target": leader, "what": "kill -9 of %s's postmaster (pid %d)" % (leader, pid)}

    def do_stop_primary(self, leader):
        pid = leader and self.c.postmaster_pid(leader)
        if not pid:
            return None
        hold = C.TTL + self.rng.uniform(3, 6)
        # the postmaster first, so that it forks nothing we would miss
        os.kill(pid, signal.SIGSTOP)
        pids = [pid] + children_of(pid)
        self.stopped = pids
        for p in pids[1:]:
            try:
                os.kill(p, signal.SIGSTOP)
            except OSError:
                pass
        time.sleep(hold)
        self.cont_all()
        return {"target": leader, "hold": hold,
                "what": "SIGSTOP of %s's PostgreSQL (%d processes) for %.1f s > ttl %d s, then SIGCONT"
                        % (leader, len(pids), hold, C.TTL)}

    def cont_all(self):
        for p in reversed(self.stopped):
            try:
                os.kill(p, signal.SIGCONT)
            except OSError:
                pass
        self.stopped = []

    def link(self, node, state):
        subprocess.run(C.netns_exec(self.prefix, "hub") + ["ip", "link", "set", "c%s" % node, state],
                       check=True)

    def do_partition(self, leader):
        if not leader:
            return None
        hold = C.TTL + self.rng.uniform(3, 6)
        self.cut_links.append(leader)
        self.link(leader, "down")
        time.sleep(hold)
        self.heal()
        return {"target": leader, "hold": hold,
                "what": "%s cut from etcd and the replicas for %.1f s (its clients still reach it)"
                        % (leader, hold)}

    def heal(self):
        for node in self.cut_links:
            self.link(node, "up")
        self.cut_links = []

    def do_switchover(self, leader):
        if not leader:
            return None
        view = self.c.cluster_view() or {}
        members = [m for m in view.get("members", [])
                   if m["name"] != leader and C.member_up(m)]
        # in synchronous mode Patroni switches over only to the synchronous
        # standby ("candidate name does not match with sync_standby")
        if self.c.mode == "sync":
            members = [m for m in members if m.get("role") == "sync_standby"]
        replicas = [m["name"] for m in members]
        if not replicas:
            return None
        if self.clock_active() and self.fake_node in replicas:
            candidate = self.fake_node
        else:
            candidate = self.rng.choice(sorted(replicas))
        r = self.c.patronictl("switchover", "--leader", leader, "--candidate", candidate, "--force")
        out = (r.stdout + r.stderr).strip().splitlines()
        return {"target": candidate, "from": leader, "rc": r.returncode,
                "what": "patronictl switchover %s -> %s: %s" % (leader, candidate,
                                                                out[-1] if out else r.returncode)}

    # --- clocks ----------------------------------------------------------------

    def clock_active(self):
        return C.mono() < self.clock_until

    def set_clock(self, node, offset):
        path = self.clock_files[node]
        with open(path + ".tmp", "w") as f:
            f.write("%+.3f\n" % offset)
        os.chmod(path + ".tmp", 0o644)
        os.replace(path + ".tmp", path)

    def do_clock(self, leader):
        if not self.fake_node:
            return None
        offset = self.rng.choice([-1, 1]) * self.rng.uniform(0.3, 0.8)
        hold = self.rng.uniform(25, 40)
        self.set_clock(self.fake_node, offset)
        self.clock_until = C.mono() + hold
        if self.clock_timer:
            self.clock_timer.cancel()
        self.clock_timer = threading.Timer(hold, self.clock_off)
        self.clock_timer.daemon = True
        self.clock_timer.start()
        return {"target": self.fake_node, "offset": offset, "hold": hold,
                "what": "clock of %s set off by %+.3f s for %.0f s (%s)"
                        % (self.fake_node, offset, hold,
                           "it is the primary" if leader == self.fake_node else "a replica now")}

    def clock_off(self):
        if self.fake_node:
            self.set_clock(self.fake_node, 0.0)
            self.record(kind="clock_end", target=self.fake_node, start=C.mono(), end=C.mono())
        self.clock_until = 0.0

    # --- workers ------------------------------------------------------------------

    def do_stop_worker(self, leader):
        names = sorted(self.workers)
        holders = []
        if leader:
            try:
                with self.c.connect(leader, "chaos", timeout=2) as conn:
                    holders = [r[0] for r in conn.execute(
                        "SELECT a.application_name FROM fencing.locks l"
                        " JOIN pg_stat_activity a USING (pid) WHERE l.granted"
                        " UNION SELECT holder FROM fencing.leases"
                        " WHERE expires_at > now()").fetchall()]
            except Exception:
                holders = []
        holders = sorted({h for h in holders if h in self.workers})
        name = self.rng.choice(holders or names)
        proc = self.workers[name]
        hold = self.lease_ttl + self.rng.uniform(2, 4)
        self.stopped = [proc.pid]
        os.kill(proc.pid, signal.SIGSTOP)
        time.sleep(hold)
        self.cont_all()
        return {"target": name, "hold": hold, "held_lock": name in holders,
                "what": "SIGSTOP of worker %s%s for %.1f s > lease %.0f s, then SIGCONT"
                        % (name, " (holding a %s)" % ("lease" if name.startswith("l") else "lock")
                           if name in holders else "", hold,
                           self.lease_ttl)}

    # --- cleanup --------------------------------------------------------------------

    def undo(self):
        """Leave nothing stopped, cut or skewed (also after an interrupt)."""
        self.cont_all()
        try:
            self.heal()
        except Exception:
            pass
        if self.clock_timer:
            self.clock_timer.cancel()
        if self.clock_until:
            self.clock_off()
