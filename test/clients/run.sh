#!/bin/bash
#
# test/clients/run.sh -- the client suite: pgfencing (clients/python),
# pg-fencing (clients/node), the Go pgfencing (clients/go) and pgfencing
# for Java (clients/java), installed or built as users do, tested against
# a server and a PgBouncer this script starts.
#
#   test/clients/run.sh WORKDIR [FILE...]
#
#   clients/python/tests/test_*.py   pytest, with pgfencing installed from
#                                    the wheel that "pip wheel
#                                    --no-build-isolation --no-index" builds
#                                    of clients/python, into a venv over
#                                    Debian's python3-psycopg,
#                                    python3-psycopg-pool (nothing
#                                    downloaded)
#   clients/node/test/*.test.js      node --test, in an application
#                                    (test/clients/app: pg, typescript and
#                                    the types at the versions its
#                                    package-lock.json pins, "npm ci"),
#                                    where the tarball that "npm pack"
#                                    makes of clients/node is installed
#   clients/go/*_test.go             go vet, then go test -race, in a copy
#                                    of clients/go whose go.mod points at
#                                    Debian's Go sources the way its README
#                                    says (debian-modules.sh), offline:
#                                    GOFLAGS=-mod=mod GOPROXY=off; a file
#                                    runs its own Test functions
#   clients/java/src/test/java/...   JUnit 5's console launcher ("make
#                                    check" in a copy of clients/java, built
#                                    with javac against Debian's PgJDBC,
#                                    JUnit 5 and HikariCP: nothing
#                                    downloaded); the JVM reaches the server
#                                    and PgBouncer over TCP on 127.0.0.1
#                                    (JDBC_URL, FENCING_BOUNCER_URL)
#   the READMEs' code blocks         run by test_readme.py and
#                                    readme.test.js, those of README.md
#                                    and doc/*.md by test_docs.py and
#                                    docs.test.js, the Node ones in that
#                                    application (the TypeScript ones
#                                    compiled with tsc --strict first),
#                                    the Go ones by readme_test.go and
#                                    docs_test.go, the Java ones by
#                                    ReadmeTest and DocsTest
#
# npm installs pg from the npm registry, or only from the npm cache that
# FENCING_NPM_CACHE names (npm's --offline).
#
# WORKDIR (new or empty) receives the server's data directory, its socket
# and log, PgBouncer's, the venv and the node modules.  FILE names test
# files to run (default: all).  Run it as the user who owns the servers
# (test/run_all.sh runs it as postgres); the PostgreSQL on PATH or named by
# PG_CONFIG / PG_MAJOR is tested, with fencing installed.
#
# Output: what pytest, node and go test print, then one TAP line per test,
# which test/lib/suites.sh counts.  Exit status 0 when every test passed.

set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
# shellcheck source=test/lib/common.sh
. "$ROOT/test/lib/common.sh"

WORK=${1:?usage: test/clients/run.sh WORKDIR [FILE...]}
shift
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)
PYDIR=$ROOT/clients/python
NODEDIR=$ROOT/clients/node
GODIR=$ROOT/clients/go
# npm's cache: FENCING_NPM_CACHE names one filled before, which npm then
# uses alone (a machine that reaches the registry only through another);
# else one of this run's own, filled from the registry.
if [ -n "${FENCING_NPM_CACHE:-}" ]; then
	NPM_CACHE=$FENCING_NPM_CACHE
	NPM_SOURCE=--offline
else
	NPM_CACHE=$WORK/npm-cache
	NPM_SOURCE=--prefer-offline
fi

JAVADIR=$ROOT/clients/java

PY_FILES=()
JS_FILES=()
GO_TESTS=()	# Test functions to run; "all" for every one
JAVA_TESTS=()
RUN_JAVA=0
for f in "$@"; do
	case $f in
	*.py) PY_FILES+=("$ROOT/${f#"$ROOT"/}") ;;
	*.js) JS_FILES+=("${f##*/}") ;;
	*clients/go/*_test.go)
		f=$ROOT/clients/go/${f##*/}
		[ -f "$f" ] || { echo "no such file: $f" >&2; exit 2; }
		mapfile -t -O "${#GO_TESTS[@]}" GO_TESTS < <(sed -n 's/^func \(Test[A-Za-z0-9_]*\)(t \*testing\.T).*/\1/p' "$f")
		;;
	*clients/go | *clients/go/) GO_TESTS=(all) ;;
	*Test.java)
		JAVA_TESTS+=("$(basename "$f" .java)")
		RUN_JAVA=1
		;;
	clients/java | clients/java/ | */clients/java | */clients/java/) RUN_JAVA=1 ;;
	esac
done
if [ $# -eq 0 ]; then
	PY_FILES=("$PYDIR/tests")
	for f in "$NODEDIR"/test/*.test.js; do
		JS_FILES+=("${f##*/}")
	done
	GO_TESTS=(all)
	RUN_JAVA=1
fi

export PATH="$PG_BINDIR:$PATH"
PORT=$(free_port)
BOUNCER_PORT=$(free_port)
while [ "$BOUNCER_PORT" = "$PORT" ]; do
	BOUNCER_PORT=$(free_port)
done
DB=clients
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

# A TAP line for a setup step that failed, and stop: no test can run.
setup_failed()
{
	echo "not ok 1 - client suite setup: $1"
	[ -z "${2:-}" ] || tail -n 40 "$2" || true
	exit 1
}

# --- the server and PgBouncer (transaction pooling) ---------------------------

initdb -D "$WORK/data" -A trust -E UTF8 --no-instructions >"$WORK/initdb.log" 2>&1 ||
	setup_failed "initdb" "$WORK/initdb.log"
cat >>"$WORK/data/postgresql.conf" <<EOF
port = $PORT
listen_addresses = '127.0.0.1'
unix_socket_directories = '$WORK'
fsync = off
max_connections = 120
log_line_prefix = '%m [%p] %q%a '
include '$ROOT/test/regress.conf'
EOF
pg_ctl -D "$WORK/data" -l "$WORK/server.log" -w -t 60 start >/dev/null 2>&1 ||
	setup_failed "the server did not start" "$WORK/server.log"
SERVER_UP=1
{ psql -X -q -v ON_ERROR_STOP=1 -h "$WORK" -p "$PORT" -d postgres -c "CREATE DATABASE $DB" &&
	psql -X -q -v ON_ERROR_STOP=1 -h "$WORK" -p "$PORT" -d "$DB" -c "CREATE EXTENSION fencing"; } \
	>"$WORK/setup.log" 2>&1 || setup_failed "CREATE EXTENSION fencing" "$WORK/setup.log"

USER_NAME=$(id -un)
cat >"$WORK/pgbouncer.ini" <<EOF
[databases]
$DB = host=$WORK port=$PORT dbname=$DB user=$USER_NAME pool_size=20

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $BOUNCER_PORT
unix_socket_dir = $WORK
auth_type = any
pool_mode = transaction
max_client_conn = 200
logfile = $WORK/pgbouncer.log
pidfile = $WORK/pgbouncer.pid
ignore_startup_parameters = extra_float_digits
EOF
/usr/sbin/pgbouncer "$WORK/pgbouncer.ini" >"$WORK/pgbouncer.out" 2>&1 &
BOUNCER_PID=$!
for _ in $(seq 1 100); do
	psql -X -q -h "$WORK" -p "$BOUNCER_PORT" -d "$DB" -c 'SELECT 1' >/dev/null 2>&1 && break
	kill -0 "$BOUNCER_PID" 2>/dev/null || setup_failed "pgbouncer exited" "$WORK/pgbouncer.out"
	sleep 0.1
done
psql -X -q -h "$WORK" -p "$BOUNCER_PORT" -d "$DB" -c 'SELECT 1' >/dev/null 2>&1 ||
	setup_failed "pgbouncer does not accept connections" "$WORK/pgbouncer.log"

# --- the clients, installed as a user installs them ------------------------------

# pip builds in the source directory: give it a copy.  The tests import
# pgfencing from the venv, where only the wheel put it.
if [ ${#PY_FILES[@]} -gt 0 ]; then
	cp -r "$PYDIR" "$WORK/python-src"
	rm -rf "$WORK/python-src/build" "$WORK/python-src/dist"
	{ /usr/bin/python3 -m venv --system-site-packages --without-pip "$WORK/venv" &&
		/usr/bin/python3 -m pip wheel --no-index --no-build-isolation --no-deps --no-cache-dir \
			-w "$WORK/dist" "$WORK/python-src" &&
		/usr/bin/python3 -m pip --python "$WORK/venv/bin/python" install --no-index --no-cache-dir \
			"$WORK"/dist/pgfencing-*.whl &&
		rm -rf "$WORK/python-src/src" &&
		"$WORK/venv/bin/python" -c 'import pgfencing, sys; sys.exit("pgfencing is not the installed one" if "/venv/" not in pgfencing.__file__ else 0)'; } \
		>"$WORK/pip.log" 2>&1 || setup_failed "pip wheel / pip install of pgfencing" "$WORK/pip.log"
fi
# The tests run in the application, against the package as npm installs
# it from its tarball (a copy, not a link into the tree).
if [ ${#JS_FILES[@]} -gt 0 ]; then
	cp -r "$NODEDIR" "$WORK/node"
	rm -rf "$WORK/node/node_modules"
	cp -r "$HERE/app" "$WORK/app"
	{ (cd "$WORK/node" && npm pack --ignore-scripts --no-update-notifier --pack-destination "$WORK") &&
		(cd "$WORK/app" && npm ci --no-audit --no-fund --ignore-scripts --no-update-notifier "$NPM_SOURCE" --cache "$NPM_CACHE" &&
			npm install --no-save --no-audit --no-fund --ignore-scripts --no-update-notifier "$NPM_SOURCE" \
				--cache "$NPM_CACHE" "$WORK"/pg-fencing-*.tgz) &&
		[ ! -L "$WORK/app/node_modules/pg-fencing" ] && [ -f "$WORK/app/node_modules/pg-fencing/index.js" ] &&
		cp -r "$WORK/node/test" "$WORK/app/test"; } \
		>"$WORK/npm.log" 2>&1 || setup_failed "npm pack / npm ci / npm install of the tarball" "$WORK/npm.log"
fi
# Go: offline, from Debian's sources, as clients/go/README.md says; the
# build cache and GOPATH are this run's own.
export GOFLAGS=-mod=mod GOPROXY=off GOTOOLCHAIN=local GOCACHE=$WORK/go-cache GOPATH=$WORK/gopath
if [ ${#GO_TESTS[@]} -gt 0 ]; then
	mkdir -p "$WORK/go-src"
	tar -C "$GODIR" --exclude=./debian-modules -cf - . | tar -C "$WORK/go-src" -xf -
	(cd "$WORK/go-src" && ./debian-modules.sh && go build ./...) >"$WORK/go-setup.log" 2>&1 ||
		setup_failed "clients/go: debian-modules.sh and go build" "$WORK/go-setup.log"
fi
# make builds in the source directory: give it a copy.
if [ "$RUN_JAVA" = 1 ]; then
	cp -r "$JAVADIR" "$WORK/java"
	rm -rf "$WORK/java/build"
	make -C "$WORK/java" test-classes >"$WORK/java-build.log" 2>&1 ||
		setup_failed "make -C clients/java test-classes" "$WORK/java-build.log"
fi

# --- the tests ---------------------------------------------------------------------

export PGHOST=$WORK PGPORT=$PORT PGDATABASE=$DB
export FENCING_BOUNCER_PORT=$BOUNCER_PORT
# PgJDBC speaks TCP only; prepared statements stay unnamed through PgBouncer
export JDBC_URL="jdbc:postgresql://127.0.0.1:$PORT/$DB?user=$USER_NAME"
export FENCING_BOUNCER_URL="jdbc:postgresql://127.0.0.1:$BOUNCER_PORT/$DB?user=$USER_NAME&prepareThreshold=0"
export FENCING_README_APP=$WORK/app
export FENCING_DOCS=$ROOT
export PYTHONDONTWRITEBYTECODE=1
unset PGOPTIONS PGSERVICE

rc=0
if [ ${#PY_FILES[@]} -gt 0 ]; then
	py_copies=()
	for f in "${PY_FILES[@]}"; do
		py_copies+=("$WORK/python-src${f#"$PYDIR"}")
	done
	(cd "$WORK/python-src" && "$WORK/venv/bin/python" -m pytest -p no:cacheprovider -v \
		-o console_output_style=classic --rootdir="$WORK/python-src" "${py_copies[@]}") \
		>"$WORK/pytest.log" 2>&1 || rc=1
	cat "$WORK/pytest.log"
fi
if [ ${#JS_FILES[@]} -gt 0 ]; then
	(cd "$WORK/app" && node --test --test-reporter="$HERE/tap_reporter.mjs" \
		"${JS_FILES[@]/#/test/}") >"$WORK/node.tap" 2>"$WORK/node.err" || rc=1
	cat "$WORK/node.err"
fi
if [ ${#GO_TESTS[@]} -gt 0 ]; then
	go_run=()
	if [ "${GO_TESTS[0]}" != all ]; then
		go_run=(-run "^($(IFS='|'; echo "${GO_TESTS[*]}"))\$")
	fi
	go_started=$SECONDS
	vet_rc=0
	(cd "$WORK/go-src" && go vet ./...) >"$WORK/go-vet.log" 2>&1 || vet_rc=$?
	cat "$WORK/go-vet.log"
	go_rc=0
	(cd "$WORK/go-src" && go test -race -count=1 -v -timeout 300s "${go_run[@]}" ./...) \
		>"$WORK/go-test.log" 2>&1 || go_rc=$?
	cat "$WORK/go-test.log"
	echo "(go vet and go test -race took $((SECONDS - go_started)) s)"
	[ "$vet_rc" -eq 0 ] && [ "$go_rc" -eq 0 ] || rc=1
fi

if [ "$RUN_JAVA" = 1 ]; then
	: >"$WORK/java.tap"
	make -C "$WORK/java" -s check TAP="$WORK/java.tap" ${JAVA_TESTS[@]:+TESTS="${JAVA_TESTS[*]}"} \
		>"$WORK/java.log" 2>&1 || rc=1
	cat "$WORK/java.log"
fi

# The counted lines: one per pytest test, then one per node test, then one
# per JUnit test, then go vet and one per Go test (and subtest).
n=0
if [ ${#PY_FILES[@]} -gt 0 ]; then
	echo "--- pytest, one TAP line per test ---"
	while read -r id outcome; do
		n=$((n + 1))
		case $outcome in
		PASSED | XFAIL) echo "ok $n - python $id" ;;
		SKIPPED) echo "ok $n - python $id # SKIP" ;;
		*) echo "not ok $n - python $id ($outcome)" ;;
		esac
	done < <(sed -n 's/^\([^ ]*::[^ ]*\) \(PASSED\|FAILED\|ERROR\|SKIPPED\|XFAIL\|XPASS\).*/\1 \2/p' \
		"$WORK/pytest.log")
	grep -q ' PASSED\| FAILED\| ERROR' "$WORK/pytest.log" || {
		n=$((n + 1))
		echo "not ok $n - python: pytest ran no test"
	}
fi
# TAP lines whose number is "N" (node's reporter, the JUnit listener),
# numbered on; one failure when there is none.  Arguments: the file, what
# ran.
number_tap()
{
	local line

	while read -r line; do
		n=$((n + 1))
		echo "${line/ N / $n }"
	done <"$1"
	grep -q '^ok N\|^not ok N' "$1" || {
		n=$((n + 1))
		echo "not ok $n - $2 ran no test"
	}
}
if [ ${#JS_FILES[@]} -gt 0 ]; then
	echo "--- node --test, one TAP line per test ---"
	number_tap "$WORK/node.tap" "node: node --test"
fi
if [ "$RUN_JAVA" = 1 ]; then
	echo "--- JUnit, one TAP line per test ---"
	number_tap "$WORK/java.tap" "java: the console launcher"
fi
if [ ${#GO_TESTS[@]} -gt 0 ]; then
	echo "--- go vet and go test -race, one TAP line per test ---"
	n=$((n + 1))
	if [ "$vet_rc" -eq 0 ]; then
		echo "ok $n - go vet"
	else
		echo "not ok $n - go vet (exit status $vet_rc)"
	fi
	while read -r outcome id; do
		n=$((n + 1))
		case $outcome in
		PASS) echo "ok $n - go $id" ;;
		SKIP) echo "ok $n - go $id # SKIP" ;;
		*) echo "not ok $n - go $id" ;;
		esac
	done < <(sed -n 's/^ *--- \(PASS\|FAIL\|SKIP\): \([^ ]*\) .*/\1 \2/p' "$WORK/go-test.log")
	if [ "$go_rc" -ne 0 ] && ! grep -q '^ *--- FAIL' "$WORK/go-test.log"; then
		n=$((n + 1))
		echo "not ok $n - go test -race exited with status $go_rc (a build failure, a panic or a timeout)"
	fi
	grep -q '^ *--- \(PASS\|FAIL\)' "$WORK/go-test.log" || {
		n=$((n + 1))
		echo "not ok $n - go: go test ran no test"
	}
fi
if [ "$rc" -ne 0 ]; then
	echo "--- tail of the server log ($WORK/server.log) ---"
	tail -n 40 "$WORK/server.log" || true
fi
exit "$rc"
