#!/bin/bash
#
# test/run_all.sh -- "make test": packages, build, install, every suite on
# throwaway servers, and one last line "N passed, N failed".
#
#   test/run_all.sh                       everything
#   test/run_all.sh regress [NAME...]     only pg_regress (sql/NAME.sql)
#   test/run_all.sh isolation [NAME...]   only isolation specs
#   test/run_all.sh pgtap [FILE...]       only pgTAP files (test/pgtap/*.sql)
#   test/run_all.sh tap [FILE...]         only TAP files (test/t/*.pl)
#   test/run_all.sh drivers [FILE...]     only the driver suite (test/drivers/:
#                                         psycopg 3, node-postgres, libpq
#                                         pipeline mode, PgBouncer)
#   test/run_all.sh clients [FILE...]     only the client libraries (clients/:
#                                         pgfencing, pg-fencing, pgfencing for
#                                         Java, their READMEs; clients/java
#                                         alone runs only the Java tests)
#   test/run_all.sh chaos                 only the short chaos run
#                                         (test/chaos/run.sh --short, root)
#
# Several suites may be named with commas: "regress,tap".
#
# It tests the newest installed PostgreSQL (/usr/lib/postgresql/*), or the
# one PG_CONFIG or PG_MAJOR names.  As root it installs what the suites run
# and is missing (test/lib/common.sh maps each command to its Debian
# package), builds with WERROR=1, installs, and runs every suite as user
# postgres from a copy of the tree under /tmp.  As another user it says
# exactly what is missing, builds in the copy, installs if it may, and runs
# the suites as itself.
#
# The scratch directory (logs, data directories) is removed after a clean
# run and kept, with its path printed, after a failure.
#
# Environment: PG_CONFIG or PG_MAJOR pick the server (default: the newest
# installed); FENCING_KEEP_SCRATCH=1 keeps the scratch directory;
# FENCING_SKIP_BUILD=1 skips the build and install; FENCING_TEST_LOCK names
# the lock file that keeps two runs on one machine apart (default
# /tmp/fencing-test.lock); FENCING_TAP_TIMEOUT and FENCING_SUITE_TIMEOUT
# (seconds) bound a stuck TAP file or suite.

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# shellcheck source=test/lib/common.sh
. "$ROOT/test/lib/common.sh"
# shellcheck source=test/lib/suites.sh
. "$ROOT/test/lib/suites.sh"

# One run at a time per machine: a run installs fencing.so into the server's
# library directory, and two runs would test each other's builds (and share
# two cores).  flock holds the lock in a process of its own (-o), so no
# server this run starts inherits it.
TEST_LOCK=${FENCING_TEST_LOCK:-/tmp/fencing-test.lock}
if [ -z "${FENCING_TEST_LOCKED:-}" ] && command -v flock >/dev/null 2>&1; then
	[ -e "$TEST_LOCK" ] || { : >"$TEST_LOCK" && chmod 666 "$TEST_LOCK"; } 2>/dev/null || true
	if ! flock -n "$TEST_LOCK" true 2>/dev/null; then
		echo "waiting for another test run on this machine to finish ($TEST_LOCK) ..."
	fi
	FENCING_TEST_LOCKED=1 exec flock -o "$TEST_LOCK" "$ROOT/test/run_all.sh" "$@"
fi

START_SECONDS=$SECONDS

# --- arguments -------------------------------------------------------------

SELECTED=(regress isolation pgtap tap drivers clients chaos)
FILES=()
if [ $# -gt 0 ]; then
	IFS=, read -r -a SELECTED <<<"$1"
	shift
	for s in "${SELECTED[@]}"; do
		case $s in
		regress | isolation | pgtap | tap | drivers | clients | chaos) ;;
		*)
			echo "usage: $0 [regress|isolation|pgtap|tap|drivers|clients|chaos[,...]] [files...]" >&2
			exit 2
			;;
		esac
	done
	# Files are given relative to the tree (or absolute inside it).
	for f in "$@"; do
		f=${f#"$ROOT"/}
		FILES+=("$f")
	done
fi

# Names for one suite from FILES: regress and isolation want bare test names.
files_for()
{
	local suite=$1 f

	for f in "${FILES[@]}"; do
		case $suite in
		regress)
			if [[ $f != *.spec && $f != *.pl && $f != *pgtap/* && $f != test/drivers/* && $f != clients/* ]]; then
				basename "${f%.sql}"
			fi
			;;
		isolation)
			if [[ $f != *.sql && $f != *.pl && $f != test/drivers/* && $f != clients/* ]]; then
				basename "${f%.spec}"
			fi
			;;
		pgtap)
			# a bare NAME.sql is a pgTAP file only when pgtap alone is selected
			if [[ $f == *pgtap/*.sql ]] ||
				[[ $f == *.sql && ${#SELECTED[@]} -eq 1 ]]; then
				echo "test/pgtap/$(basename "$f")"
			fi
			;;
		tap)
			if [[ $f == *.pl ]]; then
				echo "test/t/$(basename "$f")"
			fi
			;;
		drivers)
			if [[ $f == test/drivers/* ]]; then
				echo "$f"
			fi
			;;
		clients)
			if [[ $f == clients/* ]]; then
				echo "$f"
			fi
			;;
		esac
	done
	return 0
}

# --- packages ----------------------------------------------------------------

# The chaos suite's packages (Patroni, etcd ...) only when it will run: as
# another user than root it is skipped, and nothing it needs is missing.
REQUIRED_GROUPS=(server build client suites)
if is_root && [[ " ${SELECTED[*]} " == *" chaos "* ]]; then
	REQUIRED_GROUPS+=(chaos)
fi

section "requirements"
if ! ensure_requirements "${REQUIRED_GROUPS[@]}"; then
	echo "0 passed, 1 failed"
	exit 1
fi
log "PostgreSQL under test: $("$PG_BINDIR/postgres" --version) ($PG_BINDIR)"
export PATH="$PG_BINDIR:$PATH"

# --- scratch copy ------------------------------------------------------------

TEST_USER=$(unprivileged_user)
SCRATCH=$(mktemp -d /tmp/fencing-test.XXXXXX)
COPY=$SCRATCH/src
mkdir -p "$COPY"
copy_tree "$ROOT" "$COPY"
log "scratch copy: $COPY (suites run as $TEST_USER)"

# The scratch directory goes away unless asked to keep it or something
# failed (its logs and data directories are what one reads next).
KEEP_SCRATCH=${FENCING_KEEP_SCRATCH:-0}
cleanup()
{
	stop_leftover_servers
	if [ "$KEEP_SCRATCH" = 1 ]; then
		log "scratch kept: $SCRATCH (logs: regress/, isolation/, pgtap/, tap/, src/tmp_check/log/)"
	else
		rm -rf "$SCRATCH"
	fi
}
trap cleanup EXIT

# Clean up, print the last line, and exit: nothing may follow that line.
finish()
{
	local passed=$1 failed=$2

	trap - EXIT
	if [ "$failed" -gt 0 ]; then
		KEEP_SCRATCH=1
	fi
	cleanup
	echo "$passed passed, $failed failed"
	if [ "$failed" -gt 0 ] || [ "$passed" -eq 0 ]; then
		exit 1
	fi
	exit 0
}

# --- build and install ---------------------------------------------------------

if [ "${FENCING_SKIP_BUILD:-0}" != 1 ]; then
	section "build"
	if ! make -C "$COPY" -s WERROR=1 -j"$(nproc 2>/dev/null || echo 2)" \
		PG_CONFIG="$PG_CONFIG" >"$SCRATCH/build.log" 2>&1; then
		cat "$SCRATCH/build.log"
		log "build: FAILED"
		finish 0 1
	fi
	log "build: ok (make WERROR=1)"
	if is_root || [ -w "$("$PG_CONFIG" --pkglibdir)" ]; then
		if ! make -C "$COPY" -s install PG_CONFIG="$PG_CONFIG" \
			>"$SCRATCH/install.log" 2>&1; then
			cat "$SCRATCH/install.log"
			log "install: FAILED"
			finish 0 1
		fi
		log "install: ok ($("$PG_CONFIG" --pkglibdir)/fencing.so)"
	elif [ -f "$("$PG_CONFIG" --pkglibdir)/fencing.so" ]; then
		log "install: not allowed as $(id -un); testing the fencing.so already installed"
	else
		log "install: fencing is not installed and $(id -un) may not install it; run 'make install' as root"
		finish 0 1
	fi
fi

if is_root; then
	chown -R "$TEST_USER": "$SCRATCH"
fi
chmod 700 "$SCRATCH"

# --- suites ------------------------------------------------------------------

for suite in "${SELECTED[@]}"; do
	mapfile -t suite_files < <(files_for "$suite")
	if [ ${#FILES[@]} -gt 0 ] && [ ${#suite_files[@]} -eq 0 ] &&
		[ ${#SELECTED[@]} -gt 1 ]; then
		continue
	fi
	suite_started=$SECONDS
	if ! "run_$suite" "${suite_files[@]}"; then
		log "$suite: the harness itself failed while running this suite"
		record_result "$suite" 0 1
	fi
	log "($suite took $((SECONDS - suite_started)) s)"
done

# --- summary -----------------------------------------------------------------

section "summary"
total_passed=0
total_failed=0
for suite in "${SUITES_RUN[@]}"; do
	line="$suite: ${SUITE_PASSED[$suite]} passed, ${SUITE_FAILED[$suite]} failed"
	if [ "${SUITE_SKIPPED[$suite]}" -gt 0 ]; then
		line="$line, ${SUITE_SKIPPED[$suite]} skipped"
	fi
	log "$line"
	total_passed=$((total_passed + SUITE_PASSED[$suite]))
	total_failed=$((total_failed + SUITE_FAILED[$suite]))
done
log "elapsed: $((SECONDS - START_SECONDS)) s"
finish "$total_passed" "$total_failed"
