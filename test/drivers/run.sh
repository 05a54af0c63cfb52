#!/bin/bash
#
# test/drivers/run.sh -- the driver suite: the guarantees through the client
# libraries applications use, against a server and a PgBouncer this script
# starts.
#
#   test/drivers/run.sh WORKDIR [FILE...]
#
# Every suite of make test but this one talks to the server through psql,
# which speaks the simple query protocol.  Applications do not: psycopg 3
# and node-postgres send every call with bound parameters through the
# extended protocol, psycopg and libpq pipeline, pools hand out autocommit
# connections, and JavaScript reads a bigint as a string.  Here:
#
#   test_*.py             pytest files, psycopg 3 (Debian's python3-psycopg,
#                         run by /usr/bin/python3) and the libpq pipeline
#                         program below
#   pipeline.c            a libpq client in pipeline mode (PQenterPipelineMode),
#                         built here with gcc
#   node/*.test.js        node --test files, node-postgres from npm at the
#                         versions node/package-lock.json pins (npm ci)
#
# WORKDIR (new or empty) receives the server's data directory, its socket,
# its log, PgBouncer's, the built program and node_modules.  FILE names
# test files to run (default: all).  Run it as the user who owns the
# servers (test/run_all.sh runs it as postgres); the PostgreSQL on PATH or
# named by PG_CONFIG / PG_MAJOR is the one tested, with fencing installed.
#
# Output: what pytest and node print, then one TAP line per test ("ok N",
# "not ok N", "# SKIP"), which test/lib/suites.sh counts.  Exit status 0
# when every test passed.

set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
# shellcheck source=test/lib/common.sh
. "$ROOT/test/lib/common.sh"

WORK=${1:?usage: test/drivers/run.sh WORKDIR [FILE...]}
shift
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)

PY_FILES=()
JS_FILES=()
for f in "$@"; do
	case $f in
	*.py) PY_FILES+=("$ROOT/${f#"$ROOT"/}") ;;
	*.js) JS_FILES+=("$ROOT/${f#"$ROOT"/}") ;;
	esac
done
if [ $# -eq 0 ]; then
	PY_FILES=("$HERE")
	JS_FILES=("$HERE"/node/*.test.js)
fi

export PATH="$PG_BINDIR:$PATH"
PORT=$(free_port)
BOUNCER_PORT=$(free_port)
while [ "$BOUNCER_PORT" = "$PORT" ]; do
	BOUNCER_PORT=$(free_port)
done
DB=drivers
SERVER_UP=0
BOUNCER_PID=

stop_all()
{
	if [ -n "$BOUNCER_PID" ]; then
		kill -INT "$BOUNCER_PID" 2>/dev/null || true
		wait "$BOUNCER_PID" 2>/dev/null || true
	fi
	if [ "$SERVER_UP" = 1 ]; then
		pg_ctl -D "$WORK/data" -m immediate -w stop >/dev/null 2>&1 || true
	fi
}
trap stop_all EXIT

# Print a TAP line for a step of the setup that failed, and stop: the tests
# cannot run without it.
setup_failed()
{
	echo "not ok 1 - driver suite setup: $1"
	[ -z "${2:-}" ] || tail -n 40 "$2" || true
	exit 1
}

# --- the server ------------------------------------------------------------

initdb -D "$WORK/data" -A trust -E UTF8 --no-instructions >"$WORK/initdb.log" 2>&1 ||
	setup_failed "initdb" "$WORK/initdb.log"
cat >>"$WORK/data/postgresql.conf" <<EOF
port = $PORT
listen_addresses = ''
unix_socket_directories = '$WORK'
fsync = off
max_connections = 100
log_line_prefix = '%m [%p] %q%a '
include '$ROOT/test/regress.conf'
EOF
pg_ctl -D "$WORK/data" -l "$WORK/server.log" -w -t 60 start >/dev/null 2>&1 ||
	setup_failed "the server did not start" "$WORK/server.log"
SERVER_UP=1
psql -X -q -v ON_ERROR_STOP=1 -h "$WORK" -p "$PORT" -d postgres \
	-c "CREATE DATABASE $DB" >"$WORK/setup.log" 2>&1 &&
	psql -X -q -v ON_ERROR_STOP=1 -h "$WORK" -p "$PORT" -d "$DB" \
		-c "CREATE EXTENSION fencing" >>"$WORK/setup.log" 2>&1 ||
	setup_failed "CREATE EXTENSION fencing" "$WORK/setup.log"

# --- PgBouncer in transaction pooling mode -----------------------------------
#
# Database "drivers" has a pool of 20 server connections (enough for every
# racer of a race to hold its transaction at once); "single" has one, so
# that its clients take turns on one server connection.

USER_NAME=$(id -un)
cat >"$WORK/pgbouncer.ini" <<EOF
[databases]
$DB = host=$WORK port=$PORT dbname=$DB user=$USER_NAME pool_size=20
single = host=$WORK port=$PORT dbname=$DB user=$USER_NAME pool_size=1

[pgbouncer]
listen_addr =
listen_port = $BOUNCER_PORT
unix_socket_dir = $WORK
auth_type = any
pool_mode = transaction
max_client_conn = 100
logfile = $WORK/pgbouncer.log
pidfile = $WORK/pgbouncer.pid
ignore_startup_parameters = extra_float_digits
EOF
/usr/sbin/pgbouncer "$WORK/pgbouncer.ini" >"$WORK/pgbouncer.out" 2>&1 &
BOUNCER_PID=$!
for _ in $(seq 1 100); do
	if psql -X -q -h "$WORK" -p "$BOUNCER_PORT" -d "$DB" -c 'SELECT 1' >/dev/null 2>&1; then
		break
	fi
	kill -0 "$BOUNCER_PID" 2>/dev/null || setup_failed "pgbouncer exited" "$WORK/pgbouncer.out"
	sleep 0.1
done
psql -X -q -h "$WORK" -p "$BOUNCER_PORT" -d "$DB" -c 'SELECT 1' >/dev/null 2>&1 ||
	setup_failed "pgbouncer does not accept connections" "$WORK/pgbouncer.log"

# --- the libpq program and node-postgres -----------------------------------------

gcc -Wall -Wextra -Werror -I"$(pg_config --includedir)" -o "$WORK/pipeline" \
	"$HERE/pipeline.c" -L"$(pg_config --libdir)" -lpq >"$WORK/gcc.log" 2>&1 ||
	setup_failed "building pipeline.c" "$WORK/gcc.log"

# npm ci installs exactly what package-lock.json pins, into a copy of the
# package next to the other build products, with a cache of its own.
if [ ${#JS_FILES[@]} -gt 0 ]; then
	mkdir -p "$WORK/node"
	cp "$HERE/node/package.json" "$HERE/node/package-lock.json" "$WORK/node/"
	(cd "$WORK/node" && npm ci --no-audit --no-fund --ignore-scripts \
		--cache "$WORK/npm-cache" >"$WORK/npm.log" 2>&1) ||
		setup_failed "npm ci (node-postgres from the npm registry)" "$WORK/npm.log"
fi

# --- the tests -----------------------------------------------------------------

export PGHOST=$WORK PGPORT=$PORT PGDATABASE=$DB
export FENCING_BOUNCER_PORT=$BOUNCER_PORT
export FENCING_PIPELINE=$WORK/pipeline
export FENCING_DRIVERS_TAP=$WORK/pytest.tap
export NODE_PATH=$WORK/node/node_modules
export PYTHONDONTWRITEBYTECODE=1
unset PGOPTIONS PGSERVICE

rc=0
if [ ${#PY_FILES[@]} -gt 0 ]; then
	: >"$FENCING_DRIVERS_TAP"
	(cd "$HERE" && /usr/bin/python3 -m pytest -p no:cacheprovider -v \
		--rootdir="$HERE" "${PY_FILES[@]}") || rc=1
fi
if [ ${#JS_FILES[@]} -gt 0 ]; then
	(cd "$HERE/node" && node --test --test-reporter=tap "${JS_FILES[@]}") \
		>"$WORK/node.tap" 2>&1 || rc=1
fi

# The counted lines: pytest's (written by conftest.py), then node's.
if [ ${#PY_FILES[@]} -gt 0 ]; then
	echo "--- pytest, one TAP line per test ---"
	cat "$FENCING_DRIVERS_TAP"
fi
if [ ${#JS_FILES[@]} -gt 0 ]; then
	echo "--- node --test ---"
	cat "$WORK/node.tap"
fi
if [ "$rc" -ne 0 ]; then
	echo "--- tail of the server log ($WORK/server.log) ---"
	tail -n 40 "$WORK/server.log" || true
fi
exit "$rc"
