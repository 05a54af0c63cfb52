#!/bin/bash
#
# test/mutants/run.sh -- "make test-mutants": build deliberately broken
# versions of fencing, one contract clause at a time, and check that the
# tests written for that clause fail against each.
#
#   test/mutants/run.sh                 every mutant in test/mutants/mutants.txt
#   test/mutants/run.sh NAME [NAME...]  only these (MUTANTS="..." from make)
#
# A mutant is test/mutants/<NAME>.patch (test/mutants/README.md), applied
# with patch -p1 to a copy of the tree; nothing in src/ exists for it.
# Each is built with WERROR=1, installed into the server under test, and the
# suite and files that mutants.txt names for it run through the patched
# copy's test/run_all.sh, so that a mutant of what the suites run from the
# tree (the clients in clients/) is what they test; every copy comes from
# one taken at the start (editing the tree during a run changes nothing in
# it).
# A failing run kills the mutant; a passing one means the tests of that
# clause are weak.  A mutant whose patch is missing or does not apply, that
# does not build, or that builds into the same fencing.so as the unmutated
# tree (when it changes C) counts as SURVIVED too: a mutant never silently
# drops out.
#
# One line per mutant ("killed" or "SURVIVED", its name, its clause, the
# suite and files expected to kill it, the seconds it took), then
# "N killed, N survived"; the exit status is non-zero when any survived.
# The unmutated build is installed again at the end, whatever happened.
# Each install and its suites hold the machine's test lock (as
# test/run_all.sh does), kept across mutants for at most
# FENCING_MUTANTS_LOCK_SLICE seconds; other runs go in between.  Every
# mutant's log is kept under the scratch directory it names when a mutant
# survived (FENCING_KEEP_SCRATCH=1 keeps it always).

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
MUTANTS_DIR=$ROOT/test/mutants
LIST=$MUTANTS_DIR/mutants.txt

# shellcheck source=test/lib/common.sh
. "$ROOT/test/lib/common.sh"

# What building and patching the mutants runs (patch among it); as root,
# what is missing is installed, as test/run_all.sh does for the suites.
if ! ensure_requirements server build mutants; then
	exit 1
fi

# One run of the suites at a time on this machine: every install into the
# server and the suites run against it happen under the lock that
# test/run_all.sh takes, held on descriptor 9 and released between mutants,
# so that other runs can go in between (building a mutant needs no lock).
# Servers and suites are started with descriptor 9 closed, so none of them
# keeps the lock.  When the caller already holds it, FENCING_TEST_LOCKED=1.
TEST_LOCK=${FENCING_TEST_LOCK:-/tmp/fencing-test.lock}
LOCKING=0
if [ -z "${FENCING_TEST_LOCKED:-}" ] && command -v flock >/dev/null 2>&1; then
	[ -e "$TEST_LOCK" ] || { : >"$TEST_LOCK" && chmod 666 "$TEST_LOCK"; } 2>/dev/null || true
	exec 9>>"$TEST_LOCK"
	LOCKING=1
fi
export FENCING_TEST_LOCKED=1

# Once taken, the lock is kept for the next mutants for up to
# FENCING_MUTANTS_LOCK_SLICE seconds (default 900), so that a run is not
# queued again behind every other run for each of its mutants, and other
# runs still get a turn during a long one.
LOCK_SLICE=${FENCING_MUTANTS_LOCK_SLICE:-900}
LOCKED_SINCE=

lock()
{
	[ "$LOCKING" = 1 ] && [ -z "$LOCKED_SINCE" ] || return 0
	if ! flock -n 9; then
		echo "  (waiting for another test run on this machine: $TEST_LOCK)"
		flock 9
	fi
	LOCKED_SINCE=$SECONDS
}

# Release the lock: at once with "now", else when the slice is over.
unlock()
{
	[ "$LOCKING" = 1 ] && [ -n "$LOCKED_SINCE" ] || return 0
	if [ "${1:-}" = now ] || [ $((SECONDS - LOCKED_SINCE)) -ge "$LOCK_SLICE" ]; then
		flock -u 9
		LOCKED_SINCE=
	fi
}

START_SECONDS=$SECONDS

# --- the list ------------------------------------------------------------------
#
# mutants.txt: one mutant a line, "NAME CLAUSE SUITE FILE[,FILE...]", then
# " -- " and what the mutant breaks.  # starts a comment line.

declare -A CLAUSE=() SUITE=() FILES=() WHAT=()
ORDER=()
while IFS= read -r line; do
	case $line in '' | '#'*) continue ;; esac
	read -r name clause suite files _ <<<"${line%% -- *}"
	if [ -z "$files" ] || [[ $line != *' -- '* ]]; then
		echo "test/mutants/mutants.txt: malformed line: $line" >&2
		exit 2
	fi
	CLAUSE[$name]=$clause
	SUITE[$name]=$suite
	FILES[$name]=$files
	WHAT[$name]=${line#* -- }
	ORDER+=("$name")
done <"$LIST"

# Every patch has a line, so that no mutant is forgotten; and src/ holds
# no mutant of its own.
UNLISTED=()
for patch in "$MUTANTS_DIR"/*.patch; do
	[ -e "$patch" ] || continue
	name=$(basename "$patch" .patch)
	[ -n "${SUITE[$name]+set}" ] || UNLISTED+=("$name")
done
if [ ${#UNLISTED[@]} -gt 0 ]; then
	echo "patches in test/mutants/ without a line in test/mutants/mutants.txt: ${UNLISTED[*]}" >&2
	exit 2
fi
if grep -rlE 'FENCING_MUTANT_[A-Z0-9_]+' "$ROOT"/src >/dev/null 2>&1; then
	echo "src/ has FENCING_MUTANT_* code; a mutant is a patch under test/mutants/:" >&2
	grep -rlE 'FENCING_MUTANT_[A-Z0-9_]+' "$ROOT"/src >&2
	exit 2
fi

SELECTED=("$@")
if [ ${#SELECTED[@]} -eq 0 ] && [ -n "${MUTANTS:-}" ]; then
	read -r -a SELECTED <<<"$MUTANTS"
fi
if [ ${#SELECTED[@]} -eq 0 ]; then
	SELECTED=("${ORDER[@]}")
fi
for name in "${SELECTED[@]}"; do
	if [ -z "${SUITE[$name]+set}" ]; then
		echo "no mutant $name in test/mutants/mutants.txt" >&2
		exit 2
	fi
done

# --- the unmutated build ---------------------------------------------------------

SCRATCH=$(mktemp -d /tmp/fencing-mutants.XXXXXX)
BUILD=$SCRATCH/build
LOGS=$SCRATCH/logs
mkdir -p "$BUILD" "$LOGS"
copy_tree "$ROOT" "$BUILD"

MAKE=(make -s WERROR=1 PG_CONFIG="$PG_CONFIG")

# Build and install what "make" builds from the unmutated tree.
install_unmutated()
{
	local rc=0

	"${MAKE[@]}" -C "$BUILD" -j"$(nproc 2>/dev/null || echo 2)" >"$LOGS/build.log" 2>&1 9>&- || return 1
	lock
	"${MAKE[@]}" -C "$BUILD" install >>"$LOGS/build.log" 2>&1 9>&- || rc=1
	return "$rc"
}

# fencing.so without symbols or debug information (which records -D
# options), to tell a mutant that changes nothing.
stripped_hash()
{
	strip --strip-all -o "$SCRATCH/stripped.so" "$1" && md5sum <"$SCRATCH/stripped.so"
}

# Install the unmutated build again and clean up; returns non-zero when
# the reinstall failed.  Runs at the end and on any early exit.
KEEP_SCRATCH=${FENCING_KEEP_SCRATCH:-0}
restore()
{
	local rc=0

	trap - EXIT
	if ! install_unmutated; then
		cat "$LOGS/build.log"
		echo "the unmutated build could not be installed again: run 'make install'" >&2
		KEEP_SCRATCH=1
		rc=1
	fi
	unlock now
	if [ "$KEEP_SCRATCH" = 1 ]; then
		echo "logs: $LOGS"
	else
		rm -rf "$SCRATCH"
	fi
	return "$rc"
}
trap 'restore; exit 1' EXIT

echo "=== building the unmutated tree ($("$PG_CONFIG" --version))"
if ! "${MAKE[@]}" -C "$BUILD" -j"$(nproc 2>/dev/null || echo 2)" >"$LOGS/build.log" 2>&1 9>&-; then
	cat "$LOGS/build.log"
	echo "the unmutated tree does not build" >&2
	KEEP_SCRATCH=1
	exit 1
fi
UNMUTATED_HASH=$(stripped_hash "$BUILD/fencing.so")

# --- one mutant --------------------------------------------------------------------

# Build mutant $1 in a patched copy of the unmutated build; on failure set
# WHY and return 1.  Leaves the tree to install in $MUTANT_TREE.
build_mutant()
{
	local name=$1 log=$LOGS/$1.log

	MUTANT_TREE=$SCRATCH/patched
	rm -rf "$MUTANT_TREE"
	if [ ! -f "$MUTANTS_DIR/$name.patch" ]; then
		WHY="has no patch (test/mutants/$name.patch)"
		return 1
	fi
	cp -a "$BUILD" "$MUTANT_TREE"
	if ! patch -d "$MUTANT_TREE" -p1 --forward --batch <"$MUTANTS_DIR/$name.patch" >"$log" 2>&1 9>&-; then
		WHY="does not apply (test/mutants/$name.patch)"
		return 1
	fi
	find "$MUTANT_TREE" -name '*.orig' -delete
	# a patched header is seen only by objects built again: all of them
	# (PGXS declares every target .SECONDARY, so fencing.so goes too)
	if grep -q '^+++ b/src/.*\.h' "$MUTANTS_DIR/$name.patch"; then
		rm -f "$MUTANT_TREE"/src/*/*.o "$MUTANT_TREE/fencing.so"
	fi
	if ! "${MAKE[@]}" -C "$MUTANT_TREE" >>"$log" 2>&1 9>&-; then
		WHY="does not build"
		return 1
	fi
	if [ "$(stripped_hash "$MUTANT_TREE/fencing.so")" = "$UNMUTATED_HASH" ] &&
		grep -q '^+++ b/src/' "$MUTANTS_DIR/$name.patch"; then
		WHY="builds into the unmutated fencing.so"
		return 1
	fi
	return 0
}

# Undo build_mutant: the next mutant starts from the unmutated build.
forget_mutant()
{
	rm -rf "$SCRATCH/patched"
}

killed=0
survived=0
for name in "${SELECTED[@]}"; do
	started=$SECONDS
	expected="${SUITE[$name]} ${FILES[$name]//,/ }"
	log=$LOGS/$name.log
	verdict=
	WHY=
	if ! build_mutant "$name"; then
		verdict="SURVIVED"
		expected="$expected: the mutant $WHY"
		KEEP_SCRATCH=1
	else
		lock
		if ! "${MAKE[@]}" -C "$MUTANT_TREE" install >>"$log" 2>&1 9>&-; then
			verdict="SURVIVED"
			expected="$expected: the mutant does not install"
		# shellcheck disable=SC2086
		elif FENCING_SKIP_BUILD=1 \
			FENCING_TAP_TIMEOUT=${FENCING_TAP_TIMEOUT:-150} \
			FENCING_SUITE_TIMEOUT=${FENCING_SUITE_TIMEOUT:-300} \
			"$MUTANT_TREE/test/run_all.sh" "${SUITE[$name]}" ${FILES[$name]//,/ } >>"$log" 2>&1 9>&-; then
			verdict="SURVIVED"
			expected="$expected ($(tail -n 1 "$log"))"
		else
			verdict="killed"
			expected="$expected ($(tail -n 1 "$log"))"
		fi
		unlock
		[ "$verdict" = killed ] || KEEP_SCRATCH=1
	fi
	forget_mutant
	if [ "$verdict" = killed ]; then
		killed=$((killed + 1))
	else
		survived=$((survived + 1))
	fi
	printf '%-8s  %-28s %-3s %s, %d s\n' "$verdict" "$name" "${CLAUSE[$name]}" \
		"$expected" $((SECONDS - started))
done

restored=0
restore || restored=1
echo "(test-mutants took $((SECONDS - START_SECONDS)) s; the unmutated build is installed again)"
echo "$killed killed, $survived survived"
[ "$survived" -eq 0 ] && [ "$restored" -eq 0 ]
