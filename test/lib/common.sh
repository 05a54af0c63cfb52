# shellcheck shell=bash disable=SC2034
# test/lib/common.sh -- shared helpers for test/run_all.sh (sourced, not run)
#
# Paths of the PostgreSQL 15 installation, package checks, the build, the
# scratch copy of the tree, running commands as the unprivileged test user,
# and the pass/fail bookkeeping every suite reports into.

PG_MAJOR=${PG_MAJOR:-15}
PG_BINDIR=${PG_BINDIR:-/usr/lib/postgresql/$PG_MAJOR/bin}
PG_PGXS_TEST=${PG_PGXS_TEST:-/usr/lib/postgresql/$PG_MAJOR/lib/pgxs/src/test}
PG_REGRESS_BIN=$PG_PGXS_TEST/regress/pg_regress
PG_ISOLATION_BIN=$PG_PGXS_TEST/isolation/pg_isolation_regress
PG_TEST_PERL=$PG_PGXS_TEST/perl

# Debian packages the suites need.  The PostgreSQL server itself is assumed.
REQUIRED_PACKAGES=(
	"postgresql-server-dev-$PG_MAJOR"
	"postgresql-$PG_MAJOR-pgtap"
	libipc-run-perl
	pgbouncer
	python3-psycopg
	libicu-dev
	pkg-config
	libpq-dev
	gcc
	make
)

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

# Print which required packages are missing, one per line.
missing_packages()
{
	local pkg

	for pkg in "${REQUIRED_PACKAGES[@]}"; do
		if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null |
			grep -q 'install ok installed'; then
			printf '%s\n' "$pkg"
		fi
	done
}

# Install what is missing (root), or say exactly what to install (not root).
ensure_packages()
{
	local missing

	if ! command -v dpkg-query >/dev/null 2>&1; then
		log "packages: dpkg-query not found; not a Debian system, checking nothing"
		return 0
	fi

	missing=$(missing_packages | tr '\n' ' ')
	missing=${missing% }
	if [ -z "$missing" ]; then
		log "packages: all present"
		return 0
	fi

	if is_root; then
		log "packages: installing $missing"
		export DEBIAN_FRONTEND=noninteractive
		apt-get update -qq
		# shellcheck disable=SC2086
		apt-get install -y -qq --no-install-recommends $missing >/dev/null
		missing=$(missing_packages | tr '\n' ' ')
		missing=${missing% }
		if [ -n "$missing" ]; then
			log "packages: still missing after apt-get: $missing"
			return 1
		fi
		return 0
	fi

	log "packages: missing: $missing"
	log "install them as root with:"
	log "  apt-get update && apt-get install -y $missing"
	return 1
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
		"PATH=$PG_BINDIR:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"
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
