# bench/lib.sh -- helpers of bench/run.sh (sourced, not run)
#
# Messages, running commands as the server's owner, and a throwaway
# PostgreSQL server (or the one PGHOST/PGPORT name) with fencing preloaded.
# The caller sets PGBIN.
#
# Copyright (c) 2026, the fencing developers

say()
{
	printf '%s\n' "$*" >&2
}

die()
{
	say "bench: $*"
	exit 2
}

is_root()
{
	[ "$(id -u)" -eq 0 ]
}

# ---------------------------------------------------------------------------
# Server
# ---------------------------------------------------------------------------

WORK=
DATA=
OWN_SERVER=0
SCRATCH_DB=

# Run a command as the server's owner: postgres when we are root.
as_owner()
{
	if is_root; then
		runuser -u postgres -- "$@"
	else
		"$@"
	fi
}

cleanup()
{
	local rc=$?

	if [ "$OWN_SERVER" = 1 ] && [ -n "$DATA" ] && [ -f "$DATA/postmaster.pid" ]; then
		as_owner "$PGBIN/pg_ctl" -D "$DATA" -m fast -w stop >/dev/null 2>&1 || true
	elif [ -n "$SCRATCH_DB" ]; then
		"$PGBIN/psql" -X -q -d postgres -c "DROP DATABASE IF EXISTS $SCRATCH_DB" >/dev/null 2>&1 || true
	fi
	if [ -n "$WORK" ] && [ -d "$WORK" ]; then
		rm -rf "$WORK"
	fi
	exit $rc
}

# A port nobody listens on.  The server listens only on a Unix socket in
# our private directory, so this matters only for its shared-memory key
# and for not confusing anyone who looks at "ss -l".
free_port()
{
	local port tries=0

	while [ $tries -lt 50 ]; do
		port=$((20000 + RANDOM % 30000))
		if ! (command -v ss >/dev/null && ss -Hlnx 2>/dev/null | grep -q "\.s\.PGSQL\.$port\b") &&
			! (command -v ss >/dev/null && ss -Hltn "sport = :$port" 2>/dev/null | grep -q .); then
			echo "$port"
			return
		fi
		tries=$((tries + 1))
	done
	die "no free port found"
}

start_server()
{
	local port

	WORK=$(mktemp -d /tmp/fencing-bench.XXXXXX)
	chmod 755 "$WORK"
	is_root && chown postgres: "$WORK"
	DATA=$WORK/data
	port=$(free_port)

	as_owner "$PGBIN/initdb" -D "$DATA" --auth=trust --encoding=UTF8 \
		--locale=C -U postgres -N >"$WORK/initdb.log" 2>&1 ||
		{ cat "$WORK/initdb.log" >&2; die "initdb failed"; }

	cat >>"$DATA/postgresql.conf" <<EOF

# fencing bench (bench/run.sh)
listen_addresses = ''
unix_socket_directories = '$WORK'
port = $port
shared_preload_libraries = 'fencing'
fsync = on
synchronous_commit = on
max_connections = 100
shared_buffers = 128MB
max_wal_size = 2GB
checkpoint_timeout = 30min
# room for the lease groups' 50,000 leases held
fencing.max_leases = 60000
# the per-call lock statements run outside transaction blocks on purpose,
# and fencing warns about each; do not write that warning to the log
log_min_messages = error
EOF
	OWN_SERVER=1
	as_owner "$PGBIN/pg_ctl" -D "$DATA" -l "$WORK/server.log" -w start >/dev/null ||
		{ cat "$WORK/server.log" >&2; die "server did not start"; }

	export PGHOST=$WORK PGPORT=$port PGUSER=postgres PGDATABASE=postgres
}

use_existing_server()
{
	local exists

	SCRATCH_DB=fencing_bench_$$
	"$PGBIN/psql" -X -q -d postgres -c "CREATE DATABASE $SCRATCH_DB" >/dev/null ||
		die "cannot create database $SCRATCH_DB on ${PGHOST:-local}:${PGPORT:-5432}"
	export PGDATABASE=$SCRATCH_DB
	exists=$("$PGBIN/psql" -X -qAt -c "SHOW shared_preload_libraries")
	case ",$exists," in
		*fencing*) ;;
		*) die "fencing is not in shared_preload_libraries of ${PGHOST:-local}:${PGPORT:-5432}" ;;
	esac
	WORK=$(mktemp -d /tmp/fencing-bench.XXXXXX)
}

sql()
{
	"$PGBIN/psql" -X -q -v ON_ERROR_STOP=1 -At "$@"
}
