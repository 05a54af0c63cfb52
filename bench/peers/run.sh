#!/bin/bash
#
# bench/peers/run.sh -- the same acquire + token + release cycle against
#                       fencing, a raw advisory lock, Redis and etcd, and
#                       a lease cycle with a fenced write against Redis and
#                       etcd ("make bench-peers"; see bench/peers/README.md)
#
# Starts, on this machine, on 127.0.0.1 only, and all thrown away at exit:
#   - PostgreSQL 15 with shared_preload_libraries = 'fencing' (initdb in a
#     temporary directory, Unix socket there, TCP on a free loopback port),
#     unless PGHOST/PGPORT is set: then that server is used, in a scratch
#     database created and dropped here;
#   - redis-server on a free loopback port, persistence off;
#   - etcd (Debian package etcd-server), one member, client and peer URLs on
#     free loopback ports, data directory in the temporary directory.
# Builds bench/peers/peers.c and runs every mode for PEERS_TIME seconds at
# each client count in PEERS_CLIENTS, then prints a table and says which
# system gives a usable fencing token and where it is checked.
#
# Environment: PEERS_TIME (seconds per run, 5), PEERS_RUNS (rounds, 3;
#   medians over rounds are printed), PEERS_CLIENTS ("1 4"),
#   PEERS_MODES (all: fencing fencing-1rt advisory advisory-1rt lease
#   lease-nosync incr redis etcd etcd-lease lease-1rt redis-pg etcd-pg), PEERS_PG_SOCKET (1: the client reaches a server this
#   script started over its Unix socket instead of loopback TCP),
#   PEERS_RESULTS (where the table is copied, bench/peers/results).
#
# As root, missing Debian packages are installed (apt-get update only when
# apt knows no candidate for one of them) and every server and client runs
# as user postgres.  As another user, the script says what to install.  If
# etcd-server cannot be had, the etcd rows are skipped and the output says
# why.
#
# Copyright (c) 2026, the fencing developers

set -euo pipefail

PEERS_DIR=$(cd "$(dirname "$0")" && pwd)
PEERS_TIME=${PEERS_TIME:-5}
PEERS_RUNS=${PEERS_RUNS:-3}
PEERS_CLIENTS=${PEERS_CLIENTS:-"1 4"}
PEERS_MODES=${PEERS_MODES:-"fencing fencing-1rt advisory advisory-1rt lease lease-nosync incr redis etcd etcd-lease lease-1rt redis-pg etcd-pg"}
PEERS_PG_SOCKET=${PEERS_PG_SOCKET:-0}
PEERS_RESULTS=${PEERS_RESULTS:-$PEERS_DIR/results}
# the newest installed Debian server, as make test chooses
PGBIN=${PGBIN:-$(dirname "$(ls -d /usr/lib/postgresql/*/bin/postgres 2>/dev/null | sort -V | tail -n 1)")}

PACKAGES=(gcc redis-server libhiredis-dev etcd-server libcurl4-openssl-dev libpq-dev)

WORK=
PG_STARTED=0
SCRATCH_DB=
MAINTENANCE_DB=
ETCD_MISSING=
PEER_PIDS=()

say() { echo "$*" >&2; }
die() { say "bench-peers: $*"; exit 1; }

is_root() { [ "$(id -u)" -eq 0 ]; }

# Servers refuse root (PostgreSQL) or should not need it (Redis, etcd).
RUN_AS=$(id -un)
is_root && RUN_AS=postgres

as_user()
{
	if is_root; then
		runuser -u "$RUN_AS" -- "$@"
	else
		"$@"
	fi
}

# ----------------------------------------------------------------------
# Packages
# ----------------------------------------------------------------------

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }

# A package apt can install (it has a candidate version).
# grep reads all of apt-cache's output: with -q it could stop first, and
# apt-cache's SIGPIPE would fail the pipeline (pipefail)
installable() { apt-cache policy "$1" 2>/dev/null | grep 'Candidate: [^(]' >/dev/null; }

ensure_packages()
{
	local pkg missing=() policy_written=0 rc=0

	for pkg in "${PACKAGES[@]}"; do
		installed "$pkg" || missing+=("$pkg")
	done
	[ ${#missing[@]} -eq 0 ] && return 0
	if ! is_root; then
		# etcd is optional: without it the etcd rows are skipped, not faked
		if [ "${missing[*]}" = etcd-server ]; then
			ETCD_MISSING="etcd-server is not installed and this is not root (as root: apt-get install etcd-server)"
			say "bench-peers: $ETCD_MISSING; etcd is skipped"
			return 0
		fi
		die "missing Debian packages: ${missing[*]} (as root: apt-get install ${missing[*]})"
	fi

	# refresh the package lists only if apt does not know a package yet
	for pkg in "${missing[@]}"; do
		if ! installable "$pkg"; then
			say "bench-peers: apt-get update ($pkg has no candidate)"
			apt-get update -q >/dev/null || die "apt-get update failed"
			break
		fi
	done
	if [[ " ${missing[*]} " == *" etcd-server "* ]] && ! installable etcd-server; then
		ETCD_MISSING="the Debian package etcd-server is not available on $(. /etc/os-release && echo "$PRETTY_NAME") (apt-cache policy etcd-server: no candidate)"
		say "bench-peers: $ETCD_MISSING; etcd is skipped"
		local keep=()
		for pkg in "${missing[@]}"; do
			[ "$pkg" = etcd-server ] || keep+=("$pkg")
		done
		missing=("${keep[@]}")
		[ ${#missing[@]} -eq 0 ] && return 0
	fi
	# Keep the packages from starting their own system-wide redis/etcd
	# services (ours are throwaway instances on ports of our own): a
	# policy-rc.d that denies every start, only for the install, and only
	# if the machine has none already.
	if [ ! -e /usr/sbin/policy-rc.d ]; then
		printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
		chmod 755 /usr/sbin/policy-rc.d
		policy_written=1
	fi
	say "bench-peers: apt-get install ${missing[*]}"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >/dev/null || rc=$?
	[ $policy_written = 1 ] && rm -f /usr/sbin/policy-rc.d
	[ $rc = 0 ] || die "apt-get install ${missing[*]} failed"
}

# ----------------------------------------------------------------------
# Processes and cleanup
# ----------------------------------------------------------------------

# A TCP port on 127.0.0.1 that nobody listens on and we have not handed out.
USED_PORTS=" "
free_port()
{
	local port tries=0

	while [ $tries -lt 200 ]; do
		port=$((20000 + RANDOM % 30000))
		tries=$((tries + 1))
		case $USED_PORTS in *" $port "*) continue ;; esac
		if ! ss -Hltn "sport = :$port" 2>/dev/null | grep -q .; then
			USED_PORTS="$USED_PORTS$port "
			echo "$port"
			return
		fi
	done
	die "no free TCP port found"
}

# Start a server in the background as RUN_AS; its own pid (the shell execs
# it) is written to WORK/NAME.pid so cleanup stops exactly that process.
start_peer()
{
	local name=$1 tries=0
	shift

	as_user sh -c 'echo $$ > "$0"; exec "$@"' "$WORK/$name.pid" "$@" \
		>"$WORK/$name.log" 2>&1 &
	while [ ! -s "$WORK/$name.pid" ] && [ $tries -lt 50 ]; do
		sleep 0.1
		tries=$((tries + 1))
	done
	[ -s "$WORK/$name.pid" ] || die "$name did not start (see $WORK/$name.log)"
	PEER_PIDS+=("$(cat "$WORK/$name.pid")")
}

cleanup()
{
	local rc=$? pid tries

	trap - EXIT INT TERM
	for pid in "${PEER_PIDS[@]}"; do
		kill "$pid" 2>/dev/null || true
	done
	for pid in "${PEER_PIDS[@]}"; do
		tries=0
		while kill -0 "$pid" 2>/dev/null && [ $tries -lt 100 ]; do
			sleep 0.1
			tries=$((tries + 1))
		done
		kill -KILL "$pid" 2>/dev/null || true
	done
	if [ "$PG_STARTED" = 1 ]; then
		as_user "$PGBIN/pg_ctl" -D "$WORK/pgdata" -m fast -w stop >/dev/null 2>&1 || true
	fi
	if [ -n "$SCRATCH_DB" ]; then
		psql -X -q -d "$MAINTENANCE_DB" -c "DROP DATABASE IF EXISTS $SCRATCH_DB" >/dev/null 2>&1 || true
	fi
	[ -n "$WORK" ] && rm -rf "$WORK"
	exit $rc
}

# Poll a check up to 20 s; bounded, so a peer that never comes up fails.
wait_until()
{
	local what=$1 tries=0
	shift

	until "$@" >/dev/null 2>&1; do
		tries=$((tries + 1))
		[ $tries -lt 100 ] || die "$what did not come up (log: $(tail -n 5 "$WORK/$what.log" 2>/dev/null))"
		sleep 0.2
	done
}

redis_up()
{
	local reply

	exec 3<>"/dev/tcp/127.0.0.1/$REDIS_PORT" || return 1
	printf 'PING\r\n' >&3
	read -r -t 2 reply <&3 || true
	exec 3<&-
	[[ $reply == +PONG* ]]
}

etcd_up()
{
	local rc

	# /health answers {"health":"true"} once the member is its own leader
	exec 3<>"/dev/tcp/127.0.0.1/$ETCD_PORT" || return 1
	printf 'GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3
	timeout 2 grep -q '"health":"true"' <&3
	rc=$?
	exec 3<&-
	return $rc
}

# ----------------------------------------------------------------------
# PostgreSQL
# ----------------------------------------------------------------------

start_postgres()
{
	local port

	port=$(free_port)
	as_user "$PGBIN/initdb" -D "$WORK/pgdata" -A trust -U postgres --no-sync \
		>"$WORK/initdb.log" 2>&1 || die "initdb failed (see $WORK/initdb.log)"
	cat >>"$WORK/pgdata/postgresql.conf" <<EOF
shared_preload_libraries = 'fencing'
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$WORK'
max_connections = 40
EOF
	as_user "$PGBIN/pg_ctl" -D "$WORK/pgdata" -l "$WORK/postgres.log" -w start >/dev/null ||
		die "postgres did not start: $(tail -n 5 "$WORK/postgres.log")"
	PG_STARTED=1
	export PGHOST=$WORK PGPORT=$port PGUSER=postgres PGDATABASE=postgres
	if [ "$PEERS_PG_SOCKET" = 1 ]; then
		PG_CONNINFO="host=$WORK port=$port user=postgres dbname=postgres"
	else
		PG_CONNINFO="host=127.0.0.1 port=$port user=postgres dbname=postgres"
	fi
	PG_WHERE="throwaway PostgreSQL $(as_user "$PGBIN/postgres" -V | awk '{print $3}'), ${PG_CONNINFO%% port*}, fsync on"
}

# PGHOST/PGPORT given: a scratch database there, dropped at exit.
use_existing_postgres()
{
	local db=bench_peers_$$

	MAINTENANCE_DB=${PGDATABASE:-postgres}
	if psql -X -q -d "$MAINTENANCE_DB" -c "CREATE DATABASE $db" >/dev/null 2>&1; then
		SCRATCH_DB=$db
	else
		db=${PGDATABASE:-postgres}
		say "bench-peers: could not create a scratch database, using $db"
	fi
	PG_CONNINFO="dbname=$db"
	PGDATABASE=$db
	export PGDATABASE
	PG_WHERE="existing server PGHOST=${PGHOST:-default} PGPORT=${PGPORT:-default}, database $db"
}

# ----------------------------------------------------------------------
# Main
# ----------------------------------------------------------------------

describe()
{
	case $1 in
		fencing) echo "BEGIN; SELECT fencing.try_lock(\$1); COMMIT   3 round trips" ;;
		fencing-1rt) echo "SELECT fencing.try_lock(\$1), autocommit   1 round trip" ;;
		advisory) echo "BEGIN; SELECT pg_try_advisory_xact_lock(hashtextextended(\$1,0)); COMMIT   3" ;;
		advisory-1rt) echo "the same SELECT, autocommit   1 round trip" ;;
		lease) echo "acquire_lease(\$1, '30 s'); UPDATE counter SET n = n + 1, fence = token (fenced, commit flushed); release_lease   3" ;;
		lease-nosync) echo "the same, synchronous_commit = off (the INCR's commit not waited for)   3" ;;
		incr) echo "the fenced UPDATE alone, autocommit, commit flushed (no lease)   1" ;;
		redis) echo "SET lock:k v NX PX 30000; INCR fence:k; EVALSHA compare-and-delete   3" ;;
		etcd) echo "POST /v3/lock/lock; POST /v3/lock/unlock (one lease per process)   2" ;;
		etcd-lease) echo "lease grant; lock; unlock; lease revoke   4 HTTP requests" ;;
		lease-1rt) echo "BEGIN; acquire_lease; use_lease; UPDATE counter (fenced, commit flushed); COMMIT; release_lease   1 round trip" ;;
		redis-pg) echo "SET NX PX (redis); the same UPDATE, commit flushed, no fence (postgres); EVALSHA release (redis)   3" ;;
		etcd-pg) echo "lock (etcd); the same UPDATE, commit flushed, no fence (postgres); unlock (etcd)   3" ;;
	esac
}

# The median over rounds of MODE's cycles/s over BASE's, in the same
# round at CLIENTS clients ("-" when either did not run).
median_ratio()
{
	awk -v m="$1" -v b="$2" -v c="$3" '
		$3 == c && $2 == b { base[$1] = $4 }
		$3 == c && $2 == m { rps[$1] = $4 }
		END {
			n = 0
			for (r in rps) if (r in base && base[r] > 0) ratio[++n] = rps[r] / base[r]
			for (i = 2; i <= n; i++)
				for (j = i; j > 1 && ratio[j - 1] > ratio[j]; j--) {
					t = ratio[j]; ratio[j] = ratio[j - 1]; ratio[j - 1] = t
				}
			print n ? sprintf("%.2f", ratio[int((n + 1) / 2)]) : "-"
		}' "$WORK/runs.txt"
}

# "met" or "MISSED" for a ratio and a minimum ("-": not measured).
verdict()
{
	if [ "$1" = - ]; then
		echo "not measured"
	elif awk -v r="$1" -v t="$2" 'BEGIN { exit !(r >= t) }'; then
		echo met
	else
		echo MISSED
	fi
}

# The lease cycle against the peers, with the targets of the lease design:
# at least 1.5 times Redis's cycles/s and 20 times etcd's.
print_lease_ratios()
{
	local clients vs_redis vs_etcd nosync_redis

	[[ " $PEERS_MODES " == *" lease "* ]] || return 0
	echo
	echo "lease cycle (acquire_lease, fenced durable INCR, release_lease) against the peers,"
	echo "median over rounds of the ratio within a round:"
	printf '  %-8s %-22s %-22s %s\n' clients "vs redis (>= 1.5)" "vs etcd (>= 20)" "lease-nosync vs redis"
	for clients in $PEERS_CLIENTS; do
		vs_redis=$(median_ratio lease redis "$clients")
		vs_etcd=$(median_ratio lease etcd "$clients")
		nosync_redis=$(median_ratio lease-nosync redis "$clients")
		printf '  %-8s %-22s %-22s %s\n' "$clients" \
			"${vs_redis}x $(verdict "$vs_redis" 1.5)" "${vs_etcd}x $(verdict "$vs_etcd" 20)" \
			"${nosync_redis}x"
	done
	for clients in $PEERS_CLIENTS; do
		echo "lease_ratios clients=$clients vs_redis=$(median_ratio lease redis "$clients") vs_etcd=$(median_ratio lease etcd "$clients") nosync_vs_redis=$(median_ratio lease-nosync redis "$clients")"
	done
}

# The job as the clients send it in one round trip (lease-1rt) against
# what a user of Redis or etcd would do for the same job: the peer's lock
# around the same durable PostgreSQL write (redis-pg, etcd-pg); target at
# least 1.5 times their cycles/s.
print_job_ratios()
{
	local clients vs_redis vs_etcd

	[[ " $PEERS_MODES " == *" lease-1rt "* ]] || return 0
	echo
	echo "a job in one round trip (lease-1rt: acquire, use_lease, fenced durable UPDATE, COMMIT,"
	echo "release) against the peers' lock around the same durable UPDATE, median over rounds"
	echo "of the ratio within a round:"
	printf '  %-8s %-14s %-14s %-26s %-14s %s\n' clients "lease-1rt" "redis-pg" "vs redis-pg (>= 1.5)" "etcd-pg" "vs etcd-pg (>= 1.5)"
	for clients in $PEERS_CLIENTS; do
		vs_redis=$(median_ratio lease-1rt redis-pg "$clients")
		vs_etcd=$(median_ratio lease-1rt etcd-pg "$clients")
		printf '  %-8s %-14s %-14s %-26s %-14s %s\n' "$clients" \
			"$(median_rate lease-1rt "$clients")" "$(median_rate redis-pg "$clients")" \
			"${vs_redis}x $(verdict "$vs_redis" 1.5)" "$(median_rate etcd-pg "$clients")" \
			"${vs_etcd}x $(verdict "$vs_etcd" 1.5)"
	done
	for clients in $PEERS_CLIENTS; do
		echo "job_ratios clients=$clients vs_redis_pg=$(median_ratio lease-1rt redis-pg "$clients") vs_etcd_pg=$(median_ratio lease-1rt etcd-pg "$clients")"
	done
}

# The median cycles/s over rounds of MODE at CLIENTS clients ("-": not run).
median_rate()
{
	awk -v m="$1" -v c="$2" '
		$3 == c && $2 == m { rps[++n] = $4 }
		END {
			for (i = 2; i <= n; i++)
				for (j = i; j > 1 && rps[j - 1] > rps[j]; j--) {
					t = rps[j]; rps[j] = rps[j - 1]; rps[j - 1] = t
				}
			print n ? sprintf("%.0f", rps[int((n + 1) / 2)]) : "-"
		}' "$WORK/runs.txt"
}

main()
{
	local peers_bin mode clients line target
	local -a lines=()

	[ "$PEERS_TIME" -ge 1 ] 2>/dev/null && [ "$PEERS_TIME" -le 600 ] ||
		die "PEERS_TIME must be 1..600 seconds"
	[ "$PEERS_RUNS" -ge 1 ] 2>/dev/null && [ "$PEERS_RUNS" -le 9 ] ||
		die "PEERS_RUNS must be 1..9"
	ensure_packages
	trap cleanup EXIT INT TERM

	WORK=$(mktemp -d /tmp/bench-peers.XXXXXX)
	chmod 700 "$WORK"
	is_root && chown "$RUN_AS" "$WORK"

	# build first: nothing to start if the client does not compile
	peers_bin=$WORK/peers
	gcc -O2 -Wall -Wextra -Werror -I"$(pg_config --includedir)" \
		"$PEERS_DIR/peers.c" -o "$peers_bin" -lhiredis -lcurl -lpq ||
		die "could not build bench/peers/peers.c"

	if [ -n "${PGHOST:-}${PGPORT:-}" ]; then
		use_existing_postgres
	else
		start_postgres
	fi
	psql -X -q -v ON_ERROR_STOP=1 -c "SET client_min_messages = warning; CREATE EXTENSION IF NOT EXISTS fencing" >/dev/null ||
		die "CREATE EXTENSION fencing failed"
	psql -X -q -v ON_ERROR_STOP=1 -c "SET client_min_messages = error" -c "SELECT fencing.try_lock('bench peers probe')" >/dev/null ||
		die "fencing.try_lock does not work on this server (is fencing in shared_preload_libraries?)"
	# the lease modes' counters: one row per client process, fenced
	psql -X -q -v ON_ERROR_STOP=1 >/dev/null <<'EOF' || die "could not create bench_peers.counters"
SET client_min_messages = warning;
CREATE SCHEMA IF NOT EXISTS bench_peers;
CREATE TABLE IF NOT EXISTS bench_peers.counters (name text PRIMARY KEY, n bigint NOT NULL, fence bigint);
SELECT fencing.protect('bench_peers.counters')
 WHERE NOT EXISTS (SELECT FROM pg_trigger
                    WHERE tgrelid = 'bench_peers.counters'::regclass AND tgname = 'fencing_reject_stale');
-- the same write for the peers' locks, which give no token to check
CREATE TABLE IF NOT EXISTS bench_peers.plain (name text PRIMARY KEY, n bigint NOT NULL);
EOF

	# only the peers that PEERS_MODES asks for are started
	REDIS_PORT=
	if [[ " $PEERS_MODES " == *" redis"* ]]; then
		REDIS_PORT=$(free_port)
		mkdir "$WORK/redis"
		is_root && chown "$RUN_AS" "$WORK/redis"
		start_peer redis redis-server --bind 127.0.0.1 --port "$REDIS_PORT" \
			--save '' --appendonly no --dir "$WORK/redis" --daemonize no
		wait_until redis redis_up
	fi

	if [[ " $PEERS_MODES " != *" etcd"* ]]; then
		ETCD_MISSING="not asked for (PEERS_MODES)"
	fi
	if [ -z "$ETCD_MISSING" ] && ! command -v etcd >/dev/null; then
		ETCD_MISSING="the etcd binary is not on PATH although etcd-server is installed"
	fi
	if [ -z "$ETCD_MISSING" ]; then
		ETCD_PORT=$(free_port)
		local etcd_peer_port
		etcd_peer_port=$(free_port)
		start_peer etcd etcd --name bench --data-dir "$WORK/etcd" \
			--listen-client-urls "http://127.0.0.1:$ETCD_PORT" \
			--advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
			--listen-peer-urls "http://127.0.0.1:$etcd_peer_port" \
			--initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer_port" \
			--initial-cluster "bench=http://127.0.0.1:$etcd_peer_port"
		wait_until etcd etcd_up
	fi

	# Each round runs every mode once, starting one mode further along
	# each time, so a burst of noise from other work on the machine lands
	# on different modes in different rounds.  Every run is one line of
	# WORK/runs.txt: ROUND MODE CLIENTS CYCLES/S P50 P99 CYCLES ERRORS.
	local round
	local -a rotation order
	read -r -a order <<<"$PEERS_MODES"
	: >"$WORK/runs.txt"
	for ((round = 0; round < PEERS_RUNS; round++)); do
		rotation=("${order[@]:round % ${#order[@]}}" "${order[@]:0:round % ${#order[@]}}")
		for clients in $PEERS_CLIENTS; do
			for mode in "${rotation[@]}"; do
				case $mode in
					fencing*|advisory*|lease*|incr) target=$PG_CONNINFO ;;
					redis) target=127.0.0.1:$REDIS_PORT ;;
					redis-pg) target="127.0.0.1:$REDIS_PORT;$PG_CONNINFO" ;;
					etcd-pg)
						[ -n "$ETCD_MISSING" ] && continue
						target="http://127.0.0.1:$ETCD_PORT;$PG_CONNINFO" ;;
					etcd*)
						[ -n "$ETCD_MISSING" ] && continue
						target=http://127.0.0.1:$ETCD_PORT ;;
					*) die "unknown mode $mode" ;;
				esac
				say "bench-peers: round $((round + 1))/$PEERS_RUNS: $mode, $clients client(s), ${PEERS_TIME}s"
				line=$(as_user "$peers_bin" "$mode" "$clients" "$PEERS_TIME" "$target") ||
					die "the $mode run failed: $line"
				echo "$round $line" >>"$WORK/runs.txt"
			done
		done
	done

	# Per mode and client count: the run with the median cycles/s (its
	# p50/p99 are printed), and the median over rounds of cycles/s divided
	# by the fencing run's cycles/s of the same round and client count.
	for clients in $PEERS_CLIENTS; do
		for mode in $PEERS_MODES; do
			if [[ $mode == etcd* && -n $ETCD_MISSING ]]; then
				lines+=("$mode $clients skipped")
				continue
			fi
			line=$(awk -v m="$mode" -v c="$clients" '
				$3 == c && $2 == "fencing" { base[$1] = $4 }
				$3 == c && $2 == m { rps[$1] = $4; row[$1] = $0 }
				function median(a, sorted, n, i, j, t) {
					n = 0
					for (i in a) sorted[++n] = a[i]
					for (i = 2; i <= n; i++)
						for (j = i; j > 1 && sorted[j - 1] > sorted[j]; j--) {
							t = sorted[j]; sorted[j] = sorted[j - 1]; sorted[j - 1] = t
						}
					return n ? sorted[int((n + 1) / 2)] : ""
				}
				END {
					mid = median(rps)
					for (r in rps) if (rps[r] == mid) { pick = r; break }
					n = 0
					for (r in rps) if (r in base && base[r] > 0) ratio[++n] = rps[r] / base[r]
					ratio_mid = median(ratio)
					nf = split(row[pick], f, " ")
					steps = ""
					for (i = 9; i <= nf; i++) steps = steps " " f[i]
					printf "%s %s %s %s %s %s %s %s%s\n", f[2], f[3], f[4], f[5], f[6], f[8],
						ratio_mid == "" ? "-" : sprintf("%.2f", ratio_mid), f[7], steps
				}' "$WORK/runs.txt")
			lines+=("$line")
		done
	done

	mkdir -p "$PEERS_RESULTS"
	{
		echo
		echo "acquire + token + release cycles: median of $PEERS_RUNS runs of ${PEERS_TIME}s, $(nproc) CPUs, one keep-alive"
		echo "connection per client process, a lock name of its own per process (no waiting)"
		echo "postgres: $PG_WHERE"
		[ -n "$REDIS_PORT" ] &&
			echo "redis:    $(redis-server --version | awk '{ sub("v=", "", $3); print $3 }'), 127.0.0.1:$REDIS_PORT, no RDB, no AOF"
		if [ -n "$ETCD_MISSING" ]; then
			echo "etcd:     skipped: $ETCD_MISSING"
		else
			echo "etcd:     $(etcd --version | awk '/^etcd Version/ {print $3}'), one member, 127.0.0.1:$ETCD_PORT, v3 JSON gateway, fsync per write"
		fi
		echo
		printf '%-13s %7s %10s %9s %9s %7s %10s\n' mode clients "cycles/s" "p50 ms" "p99 ms" errors "vs fencing"
		for line in "${lines[@]}"; do
			set -- $line
			if [ "$3" = skipped ]; then
				printf '%-13s %7s %10s\n' "$1" "$2" "skipped"
				continue
			fi
			printf '%-13s %7s %10s %9s %9s %7s %10s\n' "$1" "$2" "$3" "$4" "$5" "$6" "${7}x"
		done
		echo
		echo "vs fencing: cycles/s over those of the fencing run of the same round and clients,"
		echo "median over rounds (p50/p99 are from the run with the median cycles/s)."
		print_lease_ratios
		print_job_ratios
		echo
		echo "where a cycle's time goes (mean microseconds per step, the run with the median cycles/s):"
		for line in "${lines[@]}"; do
			set -- $line
			[ $# -gt 8 ] || continue
			printf '  %-13s %s client(s): %s\n' "$1" "$2" "$(shift 8; echo "$*" | sed 's/=/ /g; s/ \([a-z]\)/, \1/g')"
		done
		echo
		echo "cycle per mode:"
		for mode in $PEERS_MODES; do
			printf '  %-13s %s\n' "$mode" "$(describe "$mode")"
		done
		cat <<'EOF'

usable fencing token? and where is it checked?
  fencing   YES. try_lock returns the token with the lock: cluster-wide, strictly
            increasing, durable (WAL-reserved before it is handed out) and carried
            by failover. The database that holds the data checks it, in the
            writer's own transaction: the fencing.reject_stale trigger on
            protected tables, fencing.check_fence(resource, token) for anything
            else. A stale writer gets SQLSTATE FN001 and its transaction aborts.
  lease     YES, the same token, held across transactions: acquire_lease returns it;
            the INCR writes it into the row's fence and the fence trigger rejects a
            token below the row's (FN001), in the writer's own transaction, with the
            row's commit flushed (durable). A lapsed holder's renew_lease and
            use_lease raise FN004; the lease survives restarts and failover (LL5).
  advisory  NO token. pg_try_advisory_xact_lock gives mutual exclusion only while
            the session lives; nothing tells a paused or partitioned ex-holder
            that it lost the lock.
  redis     NOT A SAFE ONE. INCR fence:k gives a number, but it is a separate key,
            not tied to the lock atomically; the lock (SET NX PX) is not
            consistent under failover (asynchronous replication can hand the
            same lock to two clients) and with persistence off the counter
            restarts after a restart. Nothing checks the number: the resource
            would have to.
  etcd      YES, but checked by nobody else. The lock key's revision
            (header.revision of the lock reply; create_revision when not
            contended) is raft-ordered, durable and increasing. etcd itself
            checks it only for keys in etcd (a txn comparing the lock key);
            any other resource must store and compare it itself.
EOF
		echo
		for line in "${lines[@]}"; do
			set -- $line
			[ "$3" = skipped ] && continue
			echo "peer $1 clients=$2 cycles_per_sec=$3 p50_ms=$4 p99_ms=$5 errors=$6 vs_fencing=$7"
		done
	} | tee "$PEERS_RESULTS/peers.txt"
}

main "$@"
