# shellcheck shell=bash disable=SC2034
# test/lib/common.sh -- shared helpers for test/run_all.sh (sourced, not run)
#
# Which PostgreSQL is under test (detected, not assumed), the check of every
# command and module the suites, the demo and the build run (mapped to the
# Debian package that provides it), the scratch copy of the tree, running
# commands as the unprivileged test user, and the pass/fail bookkeeping
# every suite reports into.  examples/demo.sh and test/fresh/ source it too.

# --- the PostgreSQL under test ------------------------------------------------
#
# Nothing assumes a version: the same "make test" and "make demo" run on
# Debian 12 (PostgreSQL 15), 13 (17) and forky (18).  In this order:
#   PG_CONFIG   if given: the server that pg_config belongs to;
#   PG_MAJOR    if given: /usr/lib/postgresql/$PG_MAJOR;
#   PG_BINDIR   if given (test/asan.sh points it at a private server copy);
#   otherwise   the newest /usr/lib/postgresql/*/bin/postgres.
# PG_MAJOR stays empty when no server is installed at all (the demo can
# still use a server it is given; everything else says what to install).

# The major version a pg_config reports ("PostgreSQL 17.12 (Debian ...)" -> 17).
pg_config_major()
{
	"$1" --version 2>/dev/null | sed -n 's/^PostgreSQL \([0-9][0-9]*\).*/\1/p'
}

# The major version of the newest Debian server installation, if any.
newest_server_major()
{
	local postgres

	for postgres in /usr/lib/postgresql/*/bin/postgres; do
		[ -x "$postgres" ] && basename "$(dirname "$(dirname "$postgres")")"
	done | sort -V | tail -n 1
}

# One answer of pg_config, or the Debian default when pg_config is not there
# yet (the package that provides it is installed later).
pg_config_or()
{
	local option=$1 default=$2 answer

	answer=$("$PG_CONFIG" "$option" 2>/dev/null) || answer=
	printf '%s\n' "${answer:-$default}"
}

detect_postgres()
{
	if [ -n "${PG_CONFIG:-}" ]; then
		PG_CONFIG=$(command -v "$PG_CONFIG" 2>/dev/null || printf '%s' "$PG_CONFIG")
		PG_MAJOR=$(pg_config_major "$PG_CONFIG")
		PG_BINDIR=${PG_BINDIR:-$("$PG_CONFIG" --bindir 2>/dev/null)}
	else
		if [ -z "${PG_MAJOR:-}" ] && [ -n "${PG_BINDIR:-}" ]; then
			PG_MAJOR=$(pg_config_major "$PG_BINDIR/pg_config")
		fi
		PG_MAJOR=${PG_MAJOR:-$(newest_server_major)}
		if [ -n "$PG_MAJOR" ]; then
			PG_BINDIR=${PG_BINDIR:-/usr/lib/postgresql/$PG_MAJOR/bin}
			PG_CONFIG=$PG_BINDIR/pg_config
		else
			# no server here: a client-side pg_config (libpq-dev's), if any
			PG_BINDIR=${PG_BINDIR:-}
			PG_CONFIG=$(command -v pg_config 2>/dev/null || echo pg_config)
		fi
	fi
	PG_MAJOR=${PG_MAJOR:-}
	PG_PKGLIBDIR=$(pg_config_or --pkglibdir "/usr/lib/postgresql/$PG_MAJOR/lib")
	PG_SHAREDIR=$(pg_config_or --sharedir "/usr/share/postgresql/$PG_MAJOR")
	PG_INCLUDEDIR=$(pg_config_or --includedir /usr/include/postgresql)
	PG_INCLUDEDIR_SERVER=$(pg_config_or --includedir-server \
		"/usr/include/postgresql/$PG_MAJOR/server")
	PG_PGXS_TEST=${PG_PGXS_TEST:-$PG_PKGLIBDIR/pgxs/src/test}
	PG_REGRESS_BIN=$PG_PGXS_TEST/regress/pg_regress
	PG_ISOLATION_BIN=$PG_PGXS_TEST/isolation/pg_isolation_regress
	PG_TEST_PERL=$PG_PGXS_TEST/perl
	# What the suites' processes find first: this server's programs.
	TEST_PATH=${PG_BINDIR:+$PG_BINDIR:}/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin
}

detect_postgres

# --- what the suites, the demo and the build run ---------------------------------
#
# Checked by what runs (a command, a file, a module that loads), never by
# package name, and each mapped to the Debian package that provides it.
# One line each: group | what | check | Debian packages.  Groups:
#   server  the PostgreSQL under test        build   compiling the extension
#   client  libpq programs (examples/)       suites  make test's suites
#   chaos   the Patroni failover suite       mutants make test-mutants
# Checks: x:FILE is executable, f:FILE exists, cmd:NAME is on the test
# user's PATH, sh:COMMAND succeeds (with the test user's PATH).  Packages:
# the first one apt can install ("pkg-config pkgconf": bookworm has the
# first; later releases keep it as a transitional name for the second).
# Debian ships PGXS, pg_regress, pg_isolation_regress and the TAP modules in
# postgresql-client-NN, the server headers in postgresql-server-dev-NN.
requirements()
{
	cat <<EOF
server|PostgreSQL $PG_MAJOR server (postgres)|x:$PG_BINDIR/postgres|postgresql-$PG_MAJOR
server|pg_config of PostgreSQL $PG_MAJOR|x:$PG_CONFIG|postgresql-client-$PG_MAJOR
server|psql|x:$PG_BINDIR/psql|postgresql-client-$PG_MAJOR
build|gcc|cmd:gcc|gcc
build|make|cmd:make|make
build|pkg-config|cmd:pkg-config|pkg-config pkgconf
build|ICU for pkg-config (icu-uc icu-i18n)|sh:pkg-config --exists icu-uc icu-i18n|libicu-dev
build|PGXS (pgxs.mk)|f:$PG_PKGLIBDIR/pgxs/src/makefiles/pgxs.mk|postgresql-client-$PG_MAJOR
build|server headers (postgres.h)|f:$PG_INCLUDEDIR_SERVER/postgres.h|postgresql-server-dev-$PG_MAJOR
mutants|patch (applies test/mutants/*.patch)|cmd:patch|patch
client|gcc|cmd:gcc|gcc
client|psql|cmd:psql|postgresql-client
client|libpq headers (libpq-fe.h)|f:$PG_INCLUDEDIR/libpq-fe.h|libpq-dev
suites|pg_regress (PGXS)|x:$PG_REGRESS_BIN|postgresql-client-$PG_MAJOR
suites|pg_isolation_regress (PGXS)|x:$PG_ISOLATION_BIN|postgresql-client-$PG_MAJOR
suites|PostgreSQL::Test::Cluster (PGXS)|f:$PG_TEST_PERL/PostgreSQL/Test/Cluster.pm|postgresql-client-$PG_MAJOR
suites|pgTAP extension for PostgreSQL $PG_MAJOR|f:$PG_SHAREDIR/extension/pgtap.control|postgresql-$PG_MAJOR-pgtap
suites|pg_prove|cmd:pg_prove|libtap-parser-sourcehandler-pgtap-perl
suites|prove|cmd:prove|perl
suites|Perl modules of the TAP files|sh:perl -MTest::More -MTime::HiRes -MUnicode::Normalize -MEncode -MList::Util -MFile::Temp -e1|perl
suites|IPC::Run (perl -MIPC::Run -e1)|sh:perl -MIPC::Run -e1|libipc-run-perl
suites|gdb (TAP tests stop a backend at a breakpoint)|cmd:gdb|gdb
suites|libfaketime (TAP tests step a server's clock)|sh:ls /usr/lib/*/faketime/libfaketime.so.1|libfaketime
suites|pgbouncer|x:/usr/sbin/pgbouncer|pgbouncer
suites|psycopg (python3 -c 'import psycopg')|sh:python3 -c 'import psycopg'|python3-psycopg
suites|psycopg for /usr/bin/python3|sh:/usr/bin/python3 -c 'import psycopg'|python3-psycopg
suites|pytest for /usr/bin/python3 (the driver suite)|sh:/usr/bin/python3 -m pytest --version|python3-pytest
suites|node (the driver suite)|cmd:node|nodejs
suites|npm (installs node-postgres for the driver suite)|cmd:npm|npm
suites|gcc (the driver suite's libpq program)|cmd:gcc|gcc
suites|libpq headers (libpq-fe.h, the driver suite)|f:$PG_INCLUDEDIR/libpq-fe.h|libpq-dev
suites|psycopg_pool for /usr/bin/python3 (the client suite)|sh:/usr/bin/python3 -c 'import psycopg, psycopg_pool'|python3-psycopg-pool
suites|pip for /usr/bin/python3 (the client suite installs pgfencing)|sh:/usr/bin/python3 -m pip --version|python3-pip
suites|setuptools for /usr/bin/python3 (builds pgfencing)|sh:/usr/bin/python3 -c 'import setuptools'|python3-setuptools
suites|go (the client suite builds and tests the Go pgfencing)|cmd:go|golang-go
suites|pgx v4's sources for go (the client suite, offline)|f:/usr/share/gocode/src/github.com/jackc/pgx/v4/go.mod|golang-github-jackc-pgx-v4-dev
suites|a wheel builder for setuptools (its own from 70.1, else wheel)|sh:/usr/bin/python3 -c 'import importlib.util as u, sys; sys.exit(not (u.find_spec("wheel") or u.find_spec("setuptools.command.bdist_wheel")))'|python3-wheel
suites|javac and jar of a JDK 17 or later (builds the Java client)|sh:javac --release 17 -version && command -v jar|default-jdk-headless
suites|PgJDBC (/usr/share/java/postgresql.jar, the Java client)|f:/usr/share/java/postgresql.jar|libpostgresql-jdbc-java
suites|JUnit 5's console launcher (the Java client's tests)|f:/usr/share/java/junit-platform-console-standalone.jar|junit5
suites|HikariCP (the Java client's pool tests)|f:/usr/share/java/HikariCP.jar|libhikaricp-java
suites|SLF4J's API and no-op binding (HikariCP logs through it)|sh:test -e /usr/share/java/slf4j-api.jar && test -e /usr/share/java/slf4j-nop.jar|libslf4j-java
chaos|patroni|cmd:patroni|patroni
chaos|etcd|cmd:etcd|etcd-server
chaos|etcdctl|cmd:etcdctl|etcd-client
chaos|patronictl|cmd:patronictl|patroni
chaos|etcd client for Patroni (python3 -c 'import etcd')|sh:python3 -c 'import etcd'|python3-etcd
chaos|ip (iproute2)|cmd:ip|iproute2
chaos|faketime|cmd:faketime|faketime
chaos|libfaketime (LD_PRELOAD library)|sh:ls /usr/lib/*/faketime/libfaketime.so.1|libfaketime
chaos|gnuplot (the timeline PNG)|cmd:gnuplot|gnuplot-nox
chaos|nsenter, unshare, setpriv, flock|sh:command -v nsenter && command -v unshare && command -v setpriv && command -v flock|util-linux
chaos|psycopg for /usr/bin/python3|sh:/usr/bin/python3 -c 'import psycopg'|python3-psycopg
EOF
}

# Per-suite results, filled by record_result.
declare -A SUITE_PASSED=()
declare -A SUITE_FAILED=()
declare -A SUITE_SKIPPED=()
SUITES_RUN=()

log()
{
	printf '%s\n' "$*"
}

section()
{
	printf '\n=== %s ===\n' "$*"
}

is_root()
{
	[ "$(id -u)" -eq 0 ]
}

# Who runs the servers and suites: postgres when we are root (initdb and
# postgres refuse root), ourselves otherwise.
unprivileged_user()
{
	if is_root; then
		echo postgres
	else
		id -un
	fi
}

# Add passed/failed/skipped counts to a suite.
record_result()
{
	local suite=$1 passed=$2 failed=$3 skipped=${4:-0}

	if [ -z "${SUITE_PASSED[$suite]+set}" ]; then
		SUITES_RUN+=("$suite")
		SUITE_PASSED[$suite]=0
		SUITE_FAILED[$suite]=0
		SUITE_SKIPPED[$suite]=0
	fi
	SUITE_PASSED[$suite]=$((SUITE_PASSED[$suite] + passed))
	SUITE_FAILED[$suite]=$((SUITE_FAILED[$suite] + failed))
	SUITE_SKIPPED[$suite]=$((SUITE_SKIPPED[$suite] + skipped))
}

# Is one requirement met?  Its check, as requirements() writes it.
requirement_met()
{
	local check=$1

	case $check in
	x:*) [ -x "${check#x:}" ] ;;
	f:*) [ -e "${check#f:}" ] ;;
	cmd:*) env PATH="$TEST_PATH" sh -c 'command -v "$1"' sh "${check#cmd:}" >/dev/null 2>&1 ;;
	sh:*) env PATH="$TEST_PATH" sh -c "${check#sh:}" >/dev/null 2>&1 ;;
	*) return 1 ;;
	esac
}

# Print "what|packages" for every unmet requirement of the groups named,
# each thing once.
unmet_requirements()
{
	local groups=" $* " group what check packages
	local -A seen=()

	while IFS='|' read -r group what check packages; do
		[[ $groups == *" $group "* ]] || continue
		[ -z "${seen[$what]+set}" ] || continue
		seen[$what]=1
		requirement_met "$check" || printf '%s|%s\n' "$what" "$packages"
	done < <(requirements)
}

# The first of a space-separated list of Debian packages that apt can
# install (it has a candidate); the first of them when apt knows none (apt-get
# then says why).
choose_package()
{
	local package

	for package in $1; do
		if apt-cache policy "$package" 2>/dev/null | grep -q 'Candidate: [^(]'; then
			printf '%s\n' "$package"
			return 0
		fi
	done
	printf '%s\n' "${1%% *}"
}

# apt-get install, with the services the packages bring (pgbouncer, etcd,
# a PostgreSQL cluster) kept from starting system-wide: the suites start
# their own instances.  The policy-rc.d is ours only if there was none.
apt_install()
{
	local rc=0 policy_written=0

	if [ ! -e /usr/sbin/policy-rc.d ]; then
		printf '#!/bin/sh\n# written by fencing test/lib/common.sh during apt-get install\nexit 101\n' \
			>/usr/sbin/policy-rc.d
		chmod 755 /usr/sbin/policy-rc.d
		policy_written=1
	fi
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@" || rc=$?
	[ "$policy_written" = 0 ] || rm -f /usr/sbin/policy-rc.d
	return "$rc"
}

# Check what the given groups run; as root install what is missing with
# apt-get (after apt-get update), otherwise say exactly what is missing and
# the command that installs it.  Prints what was missing and what was
# installed.  Returns non-zero if anything is still missing.
ensure_requirements()
{
	local unmet what packages names=() chosen=() before after log rc=0
	local -A listed=()

	# No server at all: as root, Debian's default one (then detect again).
	if [ -z "$PG_MAJOR" ] && [[ " $* " == *" server "* ]]; then
		if ! is_root || ! command -v apt-get >/dev/null 2>&1; then
			log "requirements: no PostgreSQL server found (/usr/lib/postgresql/*/bin/postgres)"
			log "  as root: apt-get update && apt-get install -y postgresql"
			return 1
		fi
		log "requirements: no PostgreSQL server found; installing Debian's default (postgresql)"
		apt-get update -qq && apt_install postgresql >/dev/null || return 1
		detect_postgres
	fi

	unmet=$(unmet_requirements "$@")
	if [ -z "$unmet" ]; then
		log "requirements: everything present for PostgreSQL $PG_MAJOR ($*)"
		return 0
	fi
	log "requirements: missing for PostgreSQL $PG_MAJOR:"
	while IFS='|' read -r what packages; do
		log "  $what  (Debian package: ${packages// / or })"
		if [ -z "${listed[${packages%% *}]+set}" ]; then
			listed[${packages%% *}]=1
			names+=("$packages")
		fi
	done <<<"$unmet"

	if ! is_root || ! command -v apt-get >/dev/null 2>&1; then
		local first=()
		for packages in "${names[@]}"; do
			first+=("${packages%% *}")
		done
		log "requirements: install them as root with:"
		log "  apt-get update && apt-get install -y --no-install-recommends ${first[*]}"
		return 1
	fi

	log "requirements: apt-get update"
	if ! apt-get update -qq; then
		log "requirements: apt-get update failed"
		return 1
	fi
	for packages in "${names[@]}"; do
		chosen+=("$(choose_package "$packages")")
	done
	log "requirements: apt-get install ${chosen[*]}"
	before=$(dpkg-query -W -f='${Package}\n' 2>/dev/null | sort)
	log=$(mktemp /tmp/fencing-apt.XXXXXX)
	apt_install "${chosen[@]}" >"$log" 2>&1 || rc=$?
	after=$(dpkg-query -W -f='${Package}\n' 2>/dev/null | sort)
	rm -f "$log.new"
	comm -13 <(echo "$before") <(echo "$after") >"$log.new"
	if [ "$rc" -ne 0 ]; then
		tail -n 30 "$log"
		log "requirements: apt-get install failed (exit status $rc); it installed $(grep -c . "$log.new") packages"
	else
		log "requirements: installed ${chosen[*]} ($(grep -c . "$log.new") packages with their dependencies)"
	fi
	rm -f "$log" "$log.new"

	unmet=$(unmet_requirements "$@")
	if [ -n "$unmet" ]; then
		log "requirements: still missing after apt-get:"
		while IFS='|' read -r what packages; do
			log "  $what  (Debian package: ${packages// / or })"
		done <<<"$unmet"
		return 1
	fi
	log "requirements: everything present for PostgreSQL $PG_MAJOR ($*)"
	return 0
}

# Copy the source tree (without build products and old test output) into
# $1, a fresh directory.
copy_tree()
{
	local src=$1 dst=$2

	tar -C "$src" \
		--exclude=./.git \
		--exclude='*.o' --exclude='*.bc' --exclude='*.so' \
		--exclude=./tmp_check --exclude=./tmp_check_iso \
		--exclude=./results --exclude=./output_iso --exclude=./log \
		--exclude=./regression.diffs --exclude=./regression.out \
		-cf - . | tar -C "$dst" -xf -
}

# Run a command as the unprivileged test user with the test environment:
# user postgres when we are root, ourselves otherwise.
as_test_user()
{
	local envs=(
		"HOME=$SCRATCH"
		"PATH=$TEST_PATH"
		"LANG=C.UTF-8"
		"LC_ALL=C.UTF-8"
		"PG_TEST_EXTRA="
		"PG_TEST_TIMEOUT_DEFAULT=${PG_TEST_TIMEOUT_DEFAULT:-120}"
		"PGUSER=$TEST_USER"
	)

	if is_root; then
		runuser -u "$TEST_USER" -- env -u PGHOST -u PGPORT -u PGDATABASE \
			-u PGSERVICE -u PGPASSWORD -u PGOPTIONS -u PGDATA \
			"${envs[@]}" "$@"
	else
		env -u PGHOST -u PGPORT -u PGDATABASE -u PGSERVICE -u PGPASSWORD \
			-u PGOPTIONS -u PGDATA "${envs[@]}" "$@"
	fi
}

# A TCP port nobody listens on (the servers use unix sockets, but the port
# number also names the socket file and must not clash).
free_port()
{
	local port

	for port in $(shuf -i 20000-40000 -n 50); do
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null &&
			[ ! -e "/tmp/.s.PGSQL.$port" ]; then
			echo "$port"
			return 0
		fi
	done
	echo 54329
}

# Kill every postmaster still running from a data directory under the
# scratch directory (a test that died or timed out leaves them behind).
# Only servers this run started live there.
stop_leftover_servers()
{
	local pidfile pid

	[ -n "${SCRATCH:-}" ] && [ -d "$SCRATCH" ] || return 0
	while IFS= read -r pidfile; do
		pid=$(head -n 1 "$pidfile" 2>/dev/null || true)
		case $pid in
		'' | *[!0-9]*) continue ;;
		esac
		if kill -0 "$pid" 2>/dev/null; then
			log "cleanup: stopping leftover server $pid ($(dirname "$pidfile"))"
			kill -QUIT "$pid" 2>/dev/null || true
		fi
	done < <(find "$SCRATCH" -name postmaster.pid 2>/dev/null)
}
