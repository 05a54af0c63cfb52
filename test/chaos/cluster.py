"""
test/chaos/cluster.py -- etcd and Patroni for the chaos test.

Three etcd members and three Patroni-managed PostgreSQL nodes (the server
under test), each in the network namespace run.sh made for it (netns.sh has
the addresses). The orchestrator runs in the client namespace, which is on
both networks, so it reaches etcd and Patroni's REST API over TCP, and every
node's PostgreSQL over its unix socket (a path in the file system, which no
partition cuts).

Daemons run as user postgres (initdb and postgres refuse root) through
"nsenter --net=... unshare ... setpriv ...", each of which execs, so the pid
we keep is the daemon's own.  Each is started in a session of its own, so a Ctrl-C in the
terminal reaches only the orchestrator, which then stops them in order.
"""

import json
import os
import signal
import subprocess
import time
import urllib.request

import psycopg

NODES = ["n1", "n2", "n3"]
ETCDS = ["e1", "e2", "e3"]
PG_PORT = 5432
REST_PORT = 8008

# The states Patroni gives a member whose PostgreSQL is up: "running";
# newer Patroni (4.x in Debian 13 and forky) says "streaming" for a replica
# that receives WAL from the leader.
UP_STATES = ("running", "streaming")


def member_up(member):
    """Is this member of Patroni's cluster view up (leader or replica)?"""
    return member.get("state") in UP_STATES


# Patroni's timing: a primary that cannot renew its leader key demotes
# itself after retry_timeout; the key expires after ttl, and only then may a
# replica take over (loop_wait + 2 * retry_timeout <= ttl, as Patroni asks).
TTL = 10
LOOP_WAIT = 1
RETRY_TIMEOUT = 4

# DCS_NOTE: Patroni 3.0.2 (Debian 12) with the etcd3 DCS overwrites the
# leader key unconditionally when its own lease has expired (fixed upstream
# in 3.0.3, patroni/patroni#2689).  A primary whose HA loop was blocked
# longer than ttl (its PostgreSQL stopped, the whole node paused) then takes
# the leader key back from the replica promoted meanwhile, and that new
# primary is rewound: commits it acknowledged, with synchronous replication
# too, are lost.  The chaos test finds that (CHAOS_DCS=etcd3); by default it
# uses the v2 "etcd" DCS, whose leader update is a compare-and-swap on the
# holder's name.


def cluster_ip(name):
    """Address on the cluster net (198.18.0.0/24): n1 .11, e1 .21."""
    base = {"n": 10, "e": 20}[name[0]]
    return "198.18.0.%d" % (base + int(name[1:]))


def app_ip(node):
    """Address of a node on the app net (198.18.1.0/24), for clients."""
    return "198.18.1.%d" % (10 + int(node[1:]))


def node_of_app_ip(ip):
    """The node that owns an app-net address (inet_server_addr())."""
    for node in NODES:
        if app_ip(node) == str(ip):
            return node
    return "?"


def worker_dsn(dbname, user, application_name):
    """What the workers use: libpq multi-host, read-write only."""
    hosts = ",".join(app_ip(n) for n in NODES)
    return ("host=%s port=%d dbname=%s user=%s target_session_attrs=read-write "
            "connect_timeout=2 application_name=%s keepalives=1 keepalives_idle=2 "
            "keepalives_interval=1 keepalives_count=3"
            % (hosts, PG_PORT, dbname, user, application_name))


def mono():
    return time.monotonic()


class Cluster:
    """The etcd members and Patroni nodes of one run."""

    def __init__(self, run_dir, netns_prefix, bindir, mode, log, fake_node=None,
                 fake_bindir=None, etcd_dir=None, dcs="etcd"):
        self.run_dir = run_dir
        self.prefix = netns_prefix
        self.bindir = bindir
        self.mode = mode
        self.log = log
        self.fake_node = fake_node
        self.fake_bindir = fake_bindir
        self.etcd_dir = etcd_dir or os.path.join(run_dir, "etcd")
        self.dcs = dcs
        self.procs = {}

    # --- processes --------------------------------------------------------

    def _spawn(self, key, ns, argv, logfile, env=None):
        """Start argv as user postgres inside network namespace ns."""
        out = open(logfile, "ab")
        cmd = netns_exec(self.prefix, ns) + private_shm_and_ipc(argv)
        full_env = {"PATH": "/usr/bin:/bin:/usr/sbin:/sbin", "LANG": "C.UTF-8",
                    "LC_ALL": "C.UTF-8", "HOME": self.run_dir}
        full_env.update(env or {})
        self.procs[key] = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                           stdin=subprocess.DEVNULL, env=full_env,
                                           start_new_session=True)
        out.close()
        return self.procs[key]

    def node_dir(self, node):
        return os.path.join(self.run_dir, node)

    def socket_dir(self, node):
        return os.path.join(self.run_dir, node, "sock")

    def data_dir(self, node):
        return os.path.join(self.run_dir, node, "data")

    def etcd_hosts(self):
        return ",".join("%s:2379" % cluster_ip(e) for e in ETCDS)

    def start_etcd(self):
        initial = ",".join("%s=http://%s:2380" % (e, cluster_ip(e)) for e in ETCDS)
        for e in ETCDS:
            ip = cluster_ip(e)
            data = os.path.join(self.etcd_dir, e)
            os.makedirs(data, exist_ok=True)
            os.chmod(data, 0o700)
            shutil_chown(data)
            self._spawn(e, e, [
                "etcd", "--name", e, "--data-dir", data,
                "--listen-peer-urls", "http://%s:2380" % ip,
                "--initial-advertise-peer-urls", "http://%s:2380" % ip,
                "--listen-client-urls", "http://%s:2379" % ip,
                "--advertise-client-urls", "http://%s:2379" % ip,
                "--initial-cluster", initial,
                "--initial-cluster-state", "new",
                "--initial-cluster-token", "fencing-chaos-%s" % os.path.basename(self.run_dir),
                # two busy cores: do not hold elections over scheduling hiccups
                "--heartbeat-interval", "200", "--election-timeout", "2000",
                # Patroni's "etcd" DCS speaks the v2 API (see DCS_NOTE)
                "--enable-v2=true",
                "--logger", "zap", "--log-level", "warn"],
                os.path.join(self.run_dir, "%s.log" % e),
                env={"ETCD_UNSUPPORTED_ARCH": ""})

    def wait_etcd(self, timeout=60):
        deadline = mono() + timeout
        while mono() < deadline:
            r = subprocess.run(["etcdctl", "--endpoints", self.etcd_hosts(),
                                "--command-timeout=2s", "endpoint", "health"],
                               capture_output=True, text=True,
                               env={"ETCDCTL_API": "3", "PATH": os.environ["PATH"]})
            if r.returncode == 0 and (r.stdout + r.stderr).count("is healthy") == len(ETCDS):
                return True
            time.sleep(0.3)
        raise RuntimeError("etcd did not become healthy in %d s" % timeout)

    def patroni_config(self, node):
        sync = self.mode == "sync"
        bindir = self.fake_bindir if node == self.fake_node else self.bindir
        etcd_hosts = [("%s:2379" % cluster_ip(e)) for e in ETCDS]
        conf = {
            "scope": "chaos",
            "namespace": "/fencing-chaos/",
            "name": node,
            "log": {"level": "INFO", "dir": os.path.join(self.node_dir(node), "patroni-log"),
                    "file_num": 2, "file_size": 50000000},
            "restapi": {"listen": "%s:%d" % (cluster_ip(node), REST_PORT),
                        "connect_address": "%s:%d" % (cluster_ip(node), REST_PORT)},
            self.dcs: {"hosts": etcd_hosts},
            "bootstrap": {
                "dcs": {
                    "ttl": TTL,
                    "loop_wait": LOOP_WAIT,
                    "retry_timeout": RETRY_TIMEOUT,
                    "maximum_lag_on_failover": 1048576,
                    # a crashed primary fails over instead of restarting in place
                    "primary_start_timeout": 0,
                    "synchronous_mode": sync,
                    "postgresql": {
                        "use_pg_rewind": True,
                        "use_slots": True,
                        "remove_data_directory_on_rewind_failure": True,
                        "remove_data_directory_on_diverged_timelines": True,
                        "parameters": {
                            "shared_preload_libraries": "fencing",
                            "wal_level": "replica",
                            "wal_log_hints": "on",
                            "hot_standby": "on",
                            "max_connections": 100,
                            "max_wal_senders": 10,
                            "max_replication_slots": 10,
                            "wal_keep_size": "512MB",
                            "logging_collector": "on",
                            "log_directory": "pg-log",
                            "log_min_messages": "warning",
                            "log_line_prefix": "%m [%p] %a ",
                        },
                    },
                },
                "initdb": [{"encoding": "UTF8"}, {"locale": "C.UTF-8"}],
                "pg_hba": [
                    "local all all trust",
                    "host replication replicator 198.18.0.0/24 trust",
                    "host all all 198.18.0.0/15 trust",
                ],
            },
            "postgresql": {
                "listen": "0.0.0.0:%d" % PG_PORT,
                "connect_address": "%s:%d" % (cluster_ip(node), PG_PORT),
                "data_dir": self.data_dir(node),
                "bin_dir": bindir,
                "pgpass": os.path.join(self.node_dir(node), "pgpass"),
                "use_unix_socket": True,
                "authentication": {
                    "superuser": {"username": "postgres", "password": "chaos"},
                    "replication": {"username": "replicator", "password": "chaos"},
                    "rewind": {"username": "postgres", "password": "chaos"},
                },
                "parameters": {"unix_socket_directories": self.socket_dir(node)},
                "basebackup": [{"checkpoint": "fast"}],
            },
        }
        return conf

    def start_patroni(self):
        for node in NODES:
            d = self.node_dir(node)
            for sub in ("", "sock", "patroni-log"):
                os.makedirs(os.path.join(d, sub), exist_ok=True)
                shutil_chown(os.path.join(d, sub))
            path = os.path.join(d, "patroni.yml")
            # JSON is YAML
            with open(path, "w") as f:
                json.dump(self.patroni_config(node), f, indent=1)
            self._spawn(node, node, ["patroni", path], os.path.join(d, "patroni.out"))

    def patronictl(self, *args, timeout=60):
        """Run patronictl with the first node's configuration (it only needs
        the DCS settings from it)."""
        return subprocess.run(["patronictl", "-c", os.path.join(self.node_dir("n1"), "patroni.yml")]
                              + list(args), capture_output=True, text=True, timeout=timeout,
                              env={"PATH": os.environ["PATH"], "LANG": "C.UTF-8",
                                   "LC_ALL": "C.UTF-8", "HOME": self.run_dir})

    # --- state ------------------------------------------------------------

    def rest(self, node, path, timeout=1.0):
        url = "http://%s:%d%s" % (cluster_ip(node), REST_PORT, path)
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return json.loads(r.read().decode())

    def cluster_view(self):
        """Patroni's /cluster from the first node that answers, or None."""
        for node in NODES:
            try:
                return self.rest(node, "/cluster")
            except Exception:
                continue
        return None

    def history(self):
        for node in NODES:
            try:
                return self.rest(node, "/history", timeout=2.0)
            except Exception:
                continue
        return None

    def leader(self):
        view = self.cluster_view()
        if not view:
            return None
        for m in view.get("members", []):
            if m.get("role") == "leader" and m.get("state") == "running":
                return m["name"]
        return None

    def connect(self, node, dbname="postgres", timeout=2):
        """Superuser connection over the node's unix socket."""
        conn = psycopg.connect(host=self.socket_dir(node), port=PG_PORT, user="postgres",
                               dbname=dbname, connect_timeout=timeout, autocommit=True,
                               application_name="chaos-harness")
        return conn

    def healthy(self):
        """One running leader whose PostgreSQL streams to both replicas, all
        three members running, and in synchronous mode a sync standby."""
        view = self.cluster_view()
        if not view:
            return False, "no Patroni answers"
        members = view.get("members", [])
        leaders = [m for m in members if m.get("role") == "leader" and m.get("state") == "running"]
        if len(leaders) != 1:
            return False, "leaders: %s" % [(m["name"], m.get("state")) for m in leaders]
        if len(members) != len(NODES) or not all(member_up(m) for m in members):
            return False, "members: %s" % [(m["name"], m.get("role"), m.get("state")) for m in members]
        if self.mode == "sync" and not any(m.get("role") == "sync_standby" for m in members):
            return False, "no sync standby yet"
        leader = leaders[0]["name"]
        try:
            with self.connect(leader, timeout=2) as conn:
                row = conn.execute(
                    "SELECT pg_is_in_recovery(), count(*) FILTER (WHERE state = 'streaming')"
                    " FROM pg_stat_replication").fetchone()
        except Exception as e:
            return False, "leader %s: %s" % (leader, str(e).strip().splitlines()[0] if str(e) else e)
        if row[0] or row[1] < len(NODES) - 1:
            return False, "leader %s: in recovery %s, %d streaming" % (leader, row[0], row[1])
        return True, leader

    def wait_healthy(self, timeout, on_repair=None):
        """Wait until healthy().  With on_repair, the two states Patroni
        3.0.2 leaves behind and never leaves are repaired on the way, and
        each repair reported to on_repair(node, what): a postmaster it lost
        track of is stopped (see orphan_postmasters), and a member that has
        been running without streaming for 20 s is re-initialised (see
        stranded_replicas)."""
        deadline = mono() + timeout
        why = "?"
        started = mono()
        reinit = set()
        while mono() < deadline:
            ok, why = self.healthy()
            if ok:
                return why
            if on_repair and mono() - started > 5:
                for node, pid, owner in self.orphan_postmasters():
                    for sig in (signal.SIGCONT, signal.SIGQUIT):
                        try:
                            os.kill(pid, sig)
                        except OSError:
                            pass
                    on_repair(node, "stopped postmaster %d, which its data directory does not name (%s):"
                              " Patroni started two at a double demotion (patroni/patroni#3649)"
                              % (pid, owner))
            if on_repair and mono() - started > 20:
                for node in self.stranded_replicas():
                    if node not in reinit:
                        reinit.add(node)
                        r = self.patronictl("reinit", "chaos", node, "--force", timeout=60)
                        on_repair(node, "running but not streaming for 20 s: patronictl reinit (%s)"
                                  % ((r.stdout + r.stderr).strip().splitlines() or ["?"])[-1])
            time.sleep(0.5)
        raise TimeoutError("cluster not healthy after %d s: %s" % (timeout, why))

    def stranded_replicas(self):
        """Members Patroni reports as running replicas that the leader does
        not stream to.  Seen after a double demotion: Patroni re-cloned the
        node, then ran crash recovery on the fresh copy in single-user
        mode, whose shutdown checkpoint put its WAL ahead of the leader's;
        it asks for WAL the leader does not have yet, for ever."""
        view = self.cluster_view() or {}
        members = view.get("members", [])
        leader = next((m["name"] for m in members if m.get("role") == "leader"
                       and m.get("state") == "running"), None)
        if not leader:
            return []
        try:
            with self.connect(leader, timeout=2) as conn:
                streaming = {r[0] for r in conn.execute(
                    "SELECT application_name FROM pg_stat_replication WHERE state = 'streaming'")}
        except Exception:
            return []
        return [m["name"] for m in members if m["name"] != leader
                and member_up(m) and m["name"] not in streaming]

    def orphan_postmasters(self):
        """Postmasters running in a node's namespace that are not the one
        its data directory names.  Patroni 3.0.2 can start two: when a
        primary that lost the DCS is slow to shut down, the next HA loop
        demotes it again from the main thread while the first demotion is
        still running (patroni/patroni#3649, #3372).  The loser of the
        data directory's lock keeps running on the old listen socket;
        Patroni then rewinds or re-clones the node, cannot start it (the
        port is taken), and reports the orphan, which its queries reach,
        as a running replica.  Only this test's namespaces are looked at."""
        orphans = []
        for node in NODES:
            r = subprocess.run(["ip", "netns", "pids", "%s-%s" % (self.prefix, node)],
                               capture_output=True, text=True)
            owner = self.postmaster_pid(node)
            for pid in (int(p) for p in r.stdout.split()):
                try:
                    with open("/proc/%d/comm" % pid) as f:
                        comm = f.read().strip()
                    with open("/proc/%d/cmdline" % pid, "rb") as f:
                        argv = f.read().split(b"\0")
                except OSError:
                    continue
                # a postmaster that has run for ten seconds has long written
                # its pid into its data directory; single-user runs are Patroni's
                if comm == "postgres" and b"-D" in argv and b"--single" not in argv \
                        and pid != owner and alive(pid) and process_age(pid) > 10:
                    orphans.append((node, pid, owner))
        return orphans

    def wait_leader(self, timeout):
        """The running leader, waiting for one at most timeout seconds."""
        deadline = mono() + timeout
        while mono() < deadline:
            leader = self.leader()
            if leader:
                return leader
            time.sleep(0.5)
        raise TimeoutError("no leader after %d s" % timeout)

    def postmaster_pid(self, node):
        """The pid the node's postmaster.pid names, if that process is a
        postgres running in the node's network namespace; else None.  A
        postmaster killed with -9 leaves the file behind, and on this
        machine (pid_max 32768, other tests running) its pid is soon
        another process's: signalling it blindly killed another run's
        flock, which released the machine's test lock."""
        try:
            with open(os.path.join(self.data_dir(node), "postmaster.pid")) as f:
                pid = int(f.readline())
        except (OSError, ValueError):
            return None
        return pid if in_namespace(pid, self.netns_path(node), "postgres") else None

    def netns_path(self, node):
        return "/run/netns/%s-%s" % (self.prefix, node)

    # --- teardown -----------------------------------------------------------

    def stop(self, timeout=10):
        """Stop everything quickly: the results are taken already.  Patroni
        is killed first, so that it restarts nothing; each postmaster gets
        SIGQUIT (immediate shutdown, which removes its shared memory); etcd
        is killed.  Whatever is still running after that is left to
        run.sh's netns_down, which kills everything in the namespaces."""
        postmasters = [self.postmaster_pid(node) for node in NODES]
        for node in NODES:
            p = self.procs.get(node)
            if p and p.poll() is None:
                p.kill()
        for node in NODES:
            p = self.procs.get(node)
            if p:
                p.wait()
        for pid in postmasters:
            if pid:
                for sig in (signal.SIGCONT, signal.SIGQUIT):
                    try:
                        os.kill(pid, sig)
                    except OSError:
                        pass
        deadline = mono() + timeout
        for pid in postmasters:
            while pid and mono() < deadline and alive(pid):
                time.sleep(0.1)
        # etcd's graceful stop takes seconds, and its data is thrown away
        for e in ETCDS:
            p = self.procs.get(e)
            if p:
                p.kill()
                p.wait()


def netns_exec(prefix, ns):
    """The command prefix that runs a command in one of our network
    namespaces (nsenter: see netns.sh on why not "ip netns exec")."""
    return ["nsenter", "--net=/run/netns/%s-%s" % (prefix, ns)]


def private_shm_and_ipc(argv):
    """argv run as user postgres with an IPC namespace and a /dev/shm of its
    own: whatever a killed process leaves there (a postmaster's System V
    segment or POSIX segments, libfaketime's semaphore and shared memory
    files) goes away with the last process, and nothing it does can touch
    another test's.  The tmpfs is mounted in a mount namespace of its own
    over /dev/shm made private there, so it is not seen outside; where
    /dev/shm is not a mount point of its own the process uses the shared
    one."""
    return (["unshare", "--ipc", "--mount", "--propagation", "unchanged", "--", "sh", "-c",
             "if mount --make-rprivate /dev/shm 2>/dev/null; then"
             " mount -t tmpfs -o mode=1777,size=512m fencing-chaos-shm /dev/shm || exit 1; fi;"
             " exec \"$@\"", "sh",
             "setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups", "--"]
            + list(argv))


def alive(pid):
    """True while pid runs (a zombie nobody has reaped yet does not)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2:].split()[0] != "Z"


def in_namespace(pid, netns_path, comm):
    """True when pid is a live process named comm in the network namespace
    bound at netns_path (the same nsfs inode)."""
    try:
        with open("/proc/%d/comm" % pid) as f:
            if f.read().strip() != comm:
                return False
        mine = os.stat("/proc/%d/ns/net" % pid)
        ns = os.stat(netns_path)
    except OSError:
        return False
    return (mine.st_dev, mine.st_ino) == (ns.st_dev, ns.st_ino) and alive(pid)


def process_age(pid):
    """Seconds since pid started (0 when it is gone)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            stat = f.read()
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
    except OSError:
        return 0.0
    start_ticks = int(stat[stat.rfind(")") + 2:].split()[19])
    return uptime - start_ticks / os.sysconf("SC_CLK_TCK")


def shutil_chown(path):
    import shutil
    shutil.chown(path, "postgres", "postgres")
