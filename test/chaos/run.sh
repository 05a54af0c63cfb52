#!/bin/bash
#
# test/chaos/run.sh -- "make chaos": fencing through real failovers.
#
# Three etcd members and three Patroni-managed PostgreSQL nodes (the
# server under test), each in a network namespace of its own
# (test/chaos/netns.sh), K invoice workers, L lease-holding batch workers,
# seeded faults (kill -9 and SIGSTOP of the primary, a partition, a paused
# worker, a skewed clock, a switchover), and a checker that reads the final
# database and the workers' logs (test/chaos/checker.py). See
# test/chaos/README.md.
#
#   test/chaos/run.sh            a full run (make chaos)
#   test/chaos/run.sh --short    the short seeded run of "make test":
#                                both modes on one cluster, at most three
#                                minutes, TAP lines for the harness
#
# Environment:
#   CHAOS_SECONDS   seconds of faults, shared by the modes (default 300;
#                   --short: 110)
#   CHAOS_SEED      the seed (default: random, printed; --short: 20261130)
#   CHAOS_MODE      sync, async or both (default both)
#   CHAOS_WORKERS   invoice workers (default 8)
#   CHAOS_LEASE_WORKERS  lease workers (default 3), on two jobs
#   CHAOS_FAULTS    comma-separated fault kinds to cycle through instead of
#                   the seeded shuffle (kill9, stop_primary, partition,
#                   stop_worker, clock, switchover); "a,b/c,d" gives each
#                   mode its own list
#   CHAOS_DCS       etcd (default: etcd's v2 API) or etcd3 (see
#                   test/chaos/README.md: Debian's Patroni 3.0.2 loses
#                   acknowledged commits with it)
#   CHAOS_BREAK     accept-all: build fencing with a trigger that accepts
#                   every write; no-trigger: leave the tables unprotected;
#                   lease-no-fence: the lease workers write without
#                   use_lease and carry on after a failed renewal or a
#                   rejected batch.  Each must make the checker report
#                   violations.
#   CHAOS_RESULTS   where results go (default test/results)
#   CHAOS_KEEP=1    keep the run directory (data directories, logs)
#   FENCING_SKIP_BUILD=1  test the fencing.so installed in the system's
#                   PostgreSQL (what make test does) instead of building
#                   this tree
#
# Needs root (network namespaces).  Installs its Debian packages if they
# are missing.  Everything it starts runs inside its own namespaces and is
# stopped, and the namespaces, links and directories removed, at the end,
# also after a failure or Ctrl-C.  Exit status: 0 no violation, 1
# violations, 2 the run could not be done, 77 skipped (not root).

set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)

# shellcheck source=test/lib/common.sh
. "$ROOT/test/lib/common.sh"
# shellcheck source=test/chaos/netns.sh
. "$HERE/netns.sh"

SHORT=0
if [ "${1:-}" = --short ]; then
	SHORT=1
fi

if [ "$SHORT" = 1 ]; then
	# The whole short run, from taking the lock to its last line, fits in
	# three minutes: its phases end CHAOS_SHORT_AFTER seconds (the end of
	# the last fault, the dump, the teardown, the checks) before that, and
	# shrink when the cluster was slow to start.
	CHAOS_SHORT_BUDGET=180
	CHAOS_SHORT_AFTER=25
	CHAOS_SECONDS=${CHAOS_SECONDS:-110}
	CHAOS_SEED=${CHAOS_SEED:-20261130}
	# synchronous: the paused primary that wakes up, a paused lock holder;
	# asynchronous: the partitioned primary that keeps acknowledging, a crash
	CHAOS_FAULTS=${CHAOS_FAULTS-stop_primary,stop_worker,clock/partition,kill9,stop_worker}
else
	CHAOS_SECONDS=${CHAOS_SECONDS:-300}
	CHAOS_SEED=${CHAOS_SEED:-$((RANDOM * 32768 + RANDOM))}
	CHAOS_FAULTS=${CHAOS_FAULTS:-}
fi
CHAOS_MODE=${CHAOS_MODE:-both}
CHAOS_WORKERS=${CHAOS_WORKERS:-8}
CHAOS_LEASE_WORKERS=${CHAOS_LEASE_WORKERS:-3}
CHAOS_DCS=${CHAOS_DCS:-etcd}
CHAOS_BREAK=${CHAOS_BREAK:-}
CHAOS_RESULTS=${CHAOS_RESULTS:-$ROOT/test/results}

case $CHAOS_MODE in
sync | async) MODES=$CHAOS_MODE ;;
both) MODES=sync,async ;;
*)
	echo "chaos: CHAOS_MODE must be sync, async or both, not '$CHAOS_MODE'" >&2
	exit 2
	;;
esac
case $CHAOS_BREAK in
'' | accept-all | no-trigger | lease-no-fence) ;;
*)
	echo "chaos: CHAOS_BREAK must be accept-all, no-trigger or lease-no-fence, not '$CHAOS_BREAK'" >&2
	exit 2
	;;
esac

if ! is_root; then
	echo "chaos: skipped: network namespaces need root (run make chaos as root)"
	exit 77
fi

# --- one run at a time per machine --------------------------------------------

# True when one of our ancestors holds the test lock already (the brief way
# to run this by hand is "flock /tmp/fencing-test.lock make chaos"):
# taking it again from here would wait for ourselves.
lock_held_by_ancestor()
{
	local lock=$1 inode pid holders

	inode=$(stat -c %i "$lock" 2>/dev/null) || return 1
	holders=$(awk -v ino="$inode" '$2 == "FLOCK" { split($6, f, ":"); if (f[3] == ino) print $5 }' /proc/locks)
	[ -n "$holders" ] || return 1
	pid=$$
	while [ -n "$pid" ] && [ "$pid" -gt 1 ]; do
		if grep -qx "$pid" <<<"$holders"; then
			return 0
		fi
		pid=$(awk '{ print $4 }' "/proc/$pid/stat" 2>/dev/null || true)
	done
	return 1
}

TEST_LOCK=${FENCING_TEST_LOCK:-/tmp/fencing-test.lock}
if [ -z "${FENCING_TEST_LOCKED:-}" ] && ! lock_held_by_ancestor "$TEST_LOCK"; then
	[ -e "$TEST_LOCK" ] || { : >"$TEST_LOCK" && chmod 666 "$TEST_LOCK"; } 2>/dev/null || true
	if ! flock -n "$TEST_LOCK" true 2>/dev/null; then
		echo "chaos: waiting for another test run on this machine to finish ($TEST_LOCK) ..."
	fi
	FENCING_TEST_LOCKED=1 exec flock -o "$TEST_LOCK" "$0" "$@"
fi

START_SECONDS=$SECONDS

# --- packages and kernel features ------------------------------------------------

# What the run needs (test/lib/common.sh, group "chaos"); as root it is
# installed with apt-get when missing.
if ! ensure_requirements chaos; then
	exit 2
fi
FAKETIME_LIB=$(ls /usr/lib/*/faketime/libfaketime.so.1 | head -n 1)
PYTHON=/usr/bin/python3

# Network, IPC and mount namespaces: a container may refuse them even to
# root.  Without them there is nothing to test here: skipped, not failed.
NETNS_PROBE=fch$$-probe
if ! { ip netns add "$NETNS_PROBE" && nsenter --net="/run/netns/$NETNS_PROBE" \
	unshare --ipc --mount --propagation unchanged true; } >/dev/null 2>&1; then
	ip netns del "$NETNS_PROBE" >/dev/null 2>&1 || true
	echo "chaos: skipped: network, IPC or mount namespaces are not available here (ip netns add, unshare)"
	exit 77
fi
ip netns del "$NETNS_PROBE"

# --- the run directory and the private server tree --------------------------------

# A run killed with SIGKILL (or a machine reset) cannot clean up: its empty
# namespaces stay.  We hold the test lock, so no other chaos run is live:
# remove those whose run.sh is gone and in which nothing runs any more.
for ns in $(ip netns list 2>/dev/null | awk '$1 ~ /^fch[0-9]+-(hub|n[1-3]|e[1-3]|cl|probe)$/ { print $1 }'); do
	pid=${ns#fch}
	pid=${pid%%-*}
	if ! kill -0 "$pid" 2>/dev/null && [ -z "$(ip netns pids "$ns" 2>/dev/null)" ]; then
		log "chaos: removing namespace $ns, left by an earlier run that was killed"
		ip netns del "$ns" || true
	fi
done

RUN=$(mktemp -d /tmp/fencing-chaos.XXXXXX)
ETCD_DIR=/dev/shm/$(basename "$RUN")
NETNS_PREFIX=fch$$
NETNS_STATE=$RUN/netns
: >"$NETNS_STATE"
chmod 755 "$RUN"

CHAOS_PID=

cleanup()
{
	local rc=$?

	trap - EXIT INT TERM
	netns_down || true
	if [ "${CHAOS_KEEP:-0}" = 1 ]; then
		log "chaos: run directory kept: $RUN" >&2
	else
		rm -rf "$RUN"
	fi
	rm -rf "$ETCD_DIR"
	exit "$rc"
}
# On Ctrl-C or a timeout's SIGTERM the orchestrator stops its workers and
# cluster first (it is waited for), then netns_down removes the rest.
on_signal()
{
	if [ -n "$CHAOS_PID" ]; then
		kill -TERM "$CHAOS_PID" 2>/dev/null || true
		wait "$CHAOS_PID" 2>/dev/null || true
	fi
	exit 130
}
trap cleanup EXIT
trap on_signal INT TERM

PG_CONFIG_BIN=$PG_BINDIR/pg_config
CONFIG_BINDIR=$("$PG_CONFIG_BIN" --bindir)
CONFIG_PKGLIBDIR=$("$PG_CONFIG_BIN" --pkglibdir)
CONFIG_SHAREDIR=$("$PG_CONFIG_BIN" --sharedir)
PREFIX=$RUN/pg

# The servers run from a private copy of PostgreSQL (it finds lib/ and
# share/ relative to its binary), so that no other test installing its
# fencing.so into the system's library directory changes what this run's
# nodes load, and so that a broken build never leaves this run.
mkdir -p "$PREFIX$(dirname "$CONFIG_BINDIR")" "$PREFIX$(dirname "$CONFIG_SHAREDIR")" \
	"$PREFIX$(dirname "$CONFIG_PKGLIBDIR")"
cp -a "$(dirname "$CONFIG_BINDIR")/." "$PREFIX$(dirname "$CONFIG_BINDIR")/"
[ -d "$PREFIX$CONFIG_PKGLIBDIR" ] || cp -a "$CONFIG_PKGLIBDIR" "$PREFIX$(dirname "$CONFIG_PKGLIBDIR")/"
cp -a "$CONFIG_SHAREDIR" "$PREFIX$(dirname "$CONFIG_SHAREDIR")/"

build_into_prefix()
{
	local src=$RUN/src copt=

	mkdir -p "$src"
	copy_tree "$ROOT" "$src"
	if [ "$CHAOS_BREAK" = accept-all ]; then
		cp "$HERE/accept_all_trigger.c" "$src/src/fence/zz_chaos_accept_all.c"
		copt=-Dfencing_reject_stale=fencing_reject_stale_replaced
	fi
	if ! make -C "$src" -s -j"$(nproc 2>/dev/null || echo 2)" PG_CONFIG="$PG_CONFIG_BIN" \
		${copt:+COPT="$copt"} >"$RUN/build.log" 2>&1 ||
		! make -C "$src" -s install PG_CONFIG="$PG_CONFIG_BIN" DESTDIR="$PREFIX" \
			>>"$RUN/build.log" 2>&1; then
		cat "$RUN/build.log"
		log "chaos: build FAILED"
		return 1
	fi
	rm -rf "$src"
}

if [ "$CHAOS_BREAK" = accept-all ]; then
	log "chaos: building fencing with a trigger that accepts every write (CHAOS_BREAK=accept-all), into $PREFIX only"
	build_into_prefix || exit 2
elif [ "${FENCING_SKIP_BUILD:-0}" != 1 ]; then
	log "chaos: building this tree into the run's private server tree"
	build_into_prefix || exit 2
else
	log "chaos: testing the installed $CONFIG_PKGLIBDIR/fencing.so"
fi
if [ ! -f "$PREFIX$CONFIG_PKGLIBDIR/fencing.so" ]; then
	log "chaos: no fencing.so in $PREFIX$CONFIG_PKGLIBDIR (make install first, or unset FENCING_SKIP_BUILD)"
	exit 2
fi
chown -R postgres: "$RUN"

# --- the run -------------------------------------------------------------------------

STAMP=$(date +%Y%m%d-%H%M%S)
RESULTS=$CHAOS_RESULTS/chaos-${CHAOS_MODE}-seed${CHAOS_SEED}-$STAMP${CHAOS_BREAK:+-broken-$CHAOS_BREAK}
mkdir -p "$RESULTS"
log "chaos: mode $CHAOS_MODE, seed $CHAOS_SEED, $CHAOS_SECONDS s of faults, $CHAOS_WORKERS workers, $CHAOS_LEASE_WORKERS lease workers; results in $RESULTS"
log "chaos: network namespaces $NETNS_PREFIX-*; run directory $RUN"

netns_up

# In the background, so that a signal reaches on_signal at once ("wait"
# returns for it; a foreground command would be waited for first).
rc=0
netns_exec cl "$PYTHON" "$HERE/chaos.py" \
	--run-dir "$RUN" --etcd-dir "$ETCD_DIR" --results "$RESULTS" \
	--netns-prefix "$NETNS_PREFIX" \
	--bindir "$PREFIX$CONFIG_BINDIR" --fake-bindir "$RUN/bin-faketime" --faketime-lib "$FAKETIME_LIB" \
	--modes "$MODES" --seconds "$CHAOS_SECONDS" --seed "$CHAOS_SEED" \
	--workers "$CHAOS_WORKERS" --lease-workers "$CHAOS_LEASE_WORKERS" \
	--faults "$CHAOS_FAULTS" --dcs "$CHAOS_DCS" \
	--break "$CHAOS_BREAK" \
	$([ "$SHORT" = 1 ] && echo --tap --recover-timeout 40 \
		--end-by $((CHAOS_SHORT_BUDGET - CHAOS_SHORT_AFTER - (SECONDS - START_SECONDS)))) &
CHAOS_PID=$!
wait "$CHAOS_PID" || rc=$?
CHAOS_PID=

# on stderr: the last lines on stdout are the summary's "mode: ..." lines
log "chaos: finished in $((SECONDS - START_SECONDS)) s (exit status $rc)" >&2
exit "$rc"
