#!/bin/bash
#
# test/fresh/dist.sh -- "make dist": the PGXN release zip, and its check.
#
#   test/fresh/dist.sh [REF]              fencing-<version>.zip of REF (default
#                                         HEAD) in the current directory, then
#                                         the check below (without installcheck)
#   test/fresh/dist.sh zip [REF]          only the zip, unchecked
#   test/fresh/dist.sh check ZIP [--installcheck]
#                                         unzip into an empty directory, make
#                                         WERROR=1, make install into a
#                                         DESTDIR; with --installcheck (as
#                                         root, in a fresh root) make install
#                                         into the server, start a throwaway
#                                         server preloading fencing and run
#                                         make installcheck against it
#
# The zip is a git archive of REF with what a user needs to build, install
# and run make installcheck: the Makefile, the control file and SQL scripts,
# src/, sql/ and expected/, test/isolation/ and test/installcheck/ (the
# isolation suite and the cleanup installcheck runs), the README, doc/,
# CONTRIBUTING, CHANGELOG,
# LICENSE, META.json and the client examples.  Not in it: .ci/, the rest of
# test/ (the harness needs root and Debian's test packages), bench/
# (results of this machine), debian/, the demo script (it drives test/lib).  The version comes from META.json and
# must match the control file's default_version.

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=test/lib/common.sh
. "$ROOT/test/lib/common.sh"

# What a release contains, as git pathspecs.
DIST_PATHS=(
	Makefile fencing.control 'fencing--*.sql'
	src sql expected test/isolation test/installcheck
	README.md CONTRIBUTING.md doc CHANGELOG.md LICENSE META.json
	examples ':(exclude)examples/demo.sh'
)

die()
{
	printf 'dist: %s\n' "$*" >&2
	exit 1
}

# The release version: META.json's top-level "version" (three spaces in),
# checked against the control file's default_version (1.3 for 1.3.0).
dist_version()
{
	local ref=$1 meta control version default_version

	meta=$(git -C "$ROOT" show "$ref:META.json") || die "no META.json in $ref"
	control=$(git -C "$ROOT" show "$ref:fencing.control") || die "no fencing.control in $ref"
	# (die in a command substitution ends only the substitution: callers check)
	version=$(sed -n 's/^   "version": "\([^"]*\)",*$/\1/p' <<<"$meta" | head -n 1)
	default_version=$(sed -n "s/^default_version = '\\([^']*\\)'.*/\\1/p" <<<"$control")
	[ -n "$version" ] || die "META.json has no top-level version"
	case $version in
	"$default_version" | "$default_version".*) ;;
	*) die "META.json version $version does not match fencing.control default_version $default_version" ;;
	esac
	printf '%s\n' "$version"
}

build_zip()
{
	local ref=$1 version zip

	version=$(dist_version "$ref") || return 1
	zip=fencing-$version.zip
	git -C "$ROOT" archive --format=zip --prefix="fencing-$version/" -o "$PWD/$zip" \
		"$ref" -- "${DIST_PATHS[@]}" || return 1
	printf 'dist: %s (%s bytes) from %s\n' "$zip" "$(stat -c %s "$zip")" \
		"$(git -C "$ROOT" rev-parse --short "$ref")" >&2
	printf '%s\n' "$PWD/$zip"
}

# Unzip without unzip(1), which a minimal Debian does not have.
extract_zip()
{
	local zip=$1 dir=$2

	if command -v unzip >/dev/null 2>&1; then
		unzip -q "$zip" -d "$dir"
	elif command -v python3 >/dev/null 2>&1; then
		python3 -m zipfile -e "$zip" "$dir"
	elif command -v bsdtar >/dev/null 2>&1; then
		bsdtar -xf "$zip" -C "$dir"
	else
		die "cannot unzip $zip: install unzip"
	fi
}

check_zip()
{
	local zip=$1 installcheck=$2 work tree rc=0

	[ -f "$zip" ] || die "$zip not found"
	zip=$(cd "$(dirname "$zip")" && pwd)/$(basename "$zip")
	work=$(mktemp -d /tmp/fencing-dist.XXXXXX)
	# shellcheck disable=SC2064
	trap "rm -rf '$work'" EXIT
	chmod 755 "$work"
	extract_zip "$zip" "$work"
	tree=$(find "$work" -mindepth 1 -maxdepth 1 -type d | head -n 1)
	[ -n "$tree" ] || die "$zip holds no directory"
	log "dist: $(basename "$zip"): $(find "$tree" -type f | wc -l) files, in an empty directory $work"
	local extra
	extra=$(cd "$tree" && { ls -d .ci bench debian 2>/dev/null; find test -type f ! -path 'test/isolation/*' ! -path 'test/installcheck/*' 2>/dev/null; } | tr '\n' ' ')
	[ -z "$extra" ] || die "the zip holds files a user does not need: $extra"

	make -C "$tree" -s WERROR=1 PG_CONFIG="$PG_CONFIG" >"$work/build.log" 2>&1 ||
		{ cat "$work/build.log"; die "make failed in the unzipped tree (PostgreSQL $PG_MAJOR)"; }
	log "dist: make WERROR=1: ok (PostgreSQL $PG_MAJOR)"
	# Into the server only when installcheck needs it there: a plain
	# "make dist" leaves the machine's installation alone.
	if [ "$installcheck" = 0 ] || ! is_root; then
		DESTDIR=${DESTDIR:-$work/destdir}
	fi
	make -C "$tree" -s install PG_CONFIG="$PG_CONFIG" ${DESTDIR:+DESTDIR="$DESTDIR"} \
		>"$work/install.log" 2>&1 || { cat "$work/install.log"; die "make install failed"; }
	[ -f "${DESTDIR:-}$PG_PKGLIBDIR/fencing.so" ] &&
		[ -f "${DESTDIR:-}$PG_SHAREDIR/extension/fencing.control" ] ||
		die "make install did not install fencing.so and fencing.control"
	log "dist: make install: ok (${DESTDIR:+DESTDIR=$DESTDIR }$PG_PKGLIBDIR/fencing.so)"
	[ "$installcheck" = 1 ] || return 0

	# make installcheck against a server of our own, set up as a user's
	# may be: initdb's settings and the preload, nothing else.
	local user port
	user=$(unprivileged_user)
	port=$(free_port)
	is_root && chown -R "$user": "$work"
	SCRATCH=$work TEST_USER=$user
	as_test_user initdb -D "$work/data" -A trust -U "$user" -E UTF8 --no-instructions \
		>"$work/initdb.log" 2>&1 || { cat "$work/initdb.log"; die "initdb failed"; }
	as_test_user sh -c "cat >> '$work/data/postgresql.conf'" <<EOF
port = $port
listen_addresses = ''
unix_socket_directories = '$work'
shared_preload_libraries = 'fencing'
EOF
	as_test_user pg_ctl -D "$work/data" -l "$work/server.log" -w -t 60 start >/dev/null 2>&1 ||
		{ tail -n 30 "$work/server.log"; die "the server did not start"; }
	as_test_user env PGHOST="$work" PGPORT="$port" \
		make -C "$tree" installcheck PG_CONFIG="$PG_CONFIG" >"$work/installcheck.log" 2>&1 || rc=$?
	as_test_user pg_ctl -D "$work/data" -m fast -w stop >/dev/null 2>&1 || true
	cat "$work/installcheck.log"
	if [ "$rc" -ne 0 ]; then
		[ -f "$tree/regression.diffs" ] && head -n 100 "$tree/regression.diffs"
		die "make installcheck failed in the unzipped tree"
	fi
	log "dist: make installcheck: ok"
}

case ${1:-} in
zip)
	build_zip "${2:-HEAD}" >/dev/null || exit 1
	;;
check)
	[ $# -ge 2 ] || die "usage: $0 check ZIP [--installcheck]"
	check_zip "$2" "$([ "${3:-}" = --installcheck ] && echo 1 || echo 0)"
	;;
*)
	ref=${1:-HEAD}
	zip=$(build_zip "$ref") || exit 1
	check_zip "$zip" 0
	log "dist: $(basename "$zip") is ready"
	;;
esac
