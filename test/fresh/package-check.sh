#!/bin/bash
#
# test/fresh/package-check.sh -- the Debian package, used the way a Debian
# user uses it, on every PostgreSQL server version installed here:
#
#   make deb                                   build postgresql-NN-fencing
#   apt-get install ./postgresql-NN-fencing_*.deb
#   pg_createcluster NN fencingcheck           a real cluster, the Debian way
#   conf.d/fencing-installcheck.conf           the preload, all installcheck
#                                              needs
#   pg_ctlcluster NN fencingcheck start, restart
#   make installcheck                          as postgres, from a copy of the
#                                              tree, against that cluster
#   pg_dropcluster --stop; apt-get purge
#
# Runs as root (it installs into the system): inside a fresh Debian root
# (test/fresh), after "make demo" and "make test", or on a machine of ours.
# Checks counted: the build, lintian without errors, and per version the
# install, the cluster with the library preloaded, each pg_regress test, and
# the purge.  The last line is "package: N passed, N failed"; the exit status
# is 0 only when nothing failed.
#
# The cluster, the package and the scratch directory go away at the end,
# also after a failure or an interrupt.  Files of an earlier "make install"
# that the package replaces are put back after the purge.
#
# The build runs first, without the machine's test lock; the rest holds it
# (FENCING_TEST_LOCK, default /tmp/fencing-test.lock, as test/run_all.sh),
# because it installs fencing into the server's directories.
#
# The scratch directory (the tree installcheck ran in, regression.diffs,
# the server log) is removed after a clean run and kept, with its path
# printed, after a failure or with FENCING_KEEP_SCRATCH=1.
#
# Environment: FENCING_PACKAGE_SKIP_BUILD=1 uses the packages already in
# debian-build/ instead of running "make deb".

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
DEB_DIR=$ROOT/debian-build
CLUSTER=fencingcheck
STARTED=${FENCING_PACKAGE_STARTED:-$(date +%s)}

# shellcheck source=test/lib/common.sh
. "$ROOT/test/lib/common.sh"
# shellcheck source=test/lib/suites.sh
. "$ROOT/test/lib/suites.sh"

PASSED=${FENCING_PACKAGE_PASSED:-0}
FAILED=${FENCING_PACKAGE_FAILED:-0}

# Count one check: its name and whether it held (0) or not.
check()
{
	local name=$1 status=$2

	if [ "$status" -eq 0 ]; then
		PASSED=$((PASSED + 1))
		log "check: $name ... ok"
	else
		FAILED=$((FAILED + 1))
		log "check: $name ... FAILED"
	fi
}

# Print the summary line last (after the clean-up, when there is one) and
# exit: 0 only when nothing failed.  "finish planned" is the planned end;
# called as the EXIT trap after a command failed or an interrupt, the run
# counts one more failure.
finish()
{
	local status=$?

	trap - EXIT
	if [ "${1:-}" != planned ] && [ "$status" -ne 0 ]; then
		log "package-check: stopped early (exit status $status)"
		FAILED=$((FAILED + 1))
	fi
	if declare -F cleanup >/dev/null; then
		cleanup
	fi
	log "package check: $(($(date +%s) - STARTED)) s"
	log "package: $PASSED passed, $FAILED failed"
	if [ "$FAILED" -eq 0 ]; then
		exit 0
	fi
	exit 1
}
trap finish EXIT
trap 'log "interrupted"; exit 130' INT TERM

if ! is_root; then
	log "package-check: must run as root (it installs the package and creates a cluster)"
	FAILED=$((FAILED + 1))
	finish planned
fi

# --- the build (no lock) ----------------------------------------------------------

if [ -z "${FENCING_PACKAGE_PHASE:-}" ]; then
	section "make deb"
	if [ "${FENCING_PACKAGE_SKIP_BUILD:-0}" = 1 ]; then
		log "FENCING_PACKAGE_SKIP_BUILD=1: using the packages in $DEB_DIR"
		status=0
	else
		status=0
		make -C "$ROOT" -s deb || status=$?
	fi
	if compgen -G "$DEB_DIR/postgresql-*-fencing_*.deb" >/dev/null; then
		check "make deb builds postgresql-NN-fencing" "$status"
	else
		check "make deb builds postgresql-NN-fencing" 1
	fi
	# lintian.txt holds one "X: package: tag" line per finding; anything
	# else there means lintian itself did not run through.
	status=1
	if [ -f "$DEB_DIR/lintian.txt" ] &&
		! grep -q '^E: ' "$DEB_DIR/lintian.txt" &&
		! grep -qvE '^[EWIPXOC]: ' "$DEB_DIR/lintian.txt"; then
		status=0
	fi
	check "lintian ran and reports no errors" "$status"
	if [ "$FAILED" -gt 0 ]; then
		finish planned
	fi

	TEST_LOCK=${FENCING_TEST_LOCK:-/tmp/fencing-test.lock}
	[ -e "$TEST_LOCK" ] || { : >"$TEST_LOCK" && chmod 666 "$TEST_LOCK"; } 2>/dev/null || true
	if ! flock -n "$TEST_LOCK" true 2>/dev/null; then
		log "waiting for another test run on this machine to finish ($TEST_LOCK) ..."
	fi
	export FENCING_PACKAGE_PHASE=install FENCING_PACKAGE_PASSED=$PASSED \
		FENCING_PACKAGE_FAILED=$FAILED FENCING_PACKAGE_STARTED=$STARTED
	# flock -o: the lock is held by flock itself, not by the servers started.
	if [ -n "${FENCING_TEST_LOCKED:-}" ]; then
		exec "$ROOT/test/fresh/package-check.sh"
	fi
	FENCING_TEST_LOCKED=1 exec flock -o "$TEST_LOCK" "$ROOT/test/fresh/package-check.sh"
fi

# --- install, cluster, installcheck, purge (under the lock) ----------------------

SCRATCH=$(mktemp -d /tmp/fencing-package.XXXXXX)
chmod 711 "$SCRATCH"
CURRENT_VERSION=
CURRENT_PACKAGE=

# Drop the cluster $CLUSTER of version $1, with the configuration file this
# script added (pg_dropcluster leaves files it did not create behind).  A
# server that does not stop in fast mode is stopped in immediate mode, then
# killed, so that it is gone either way; that still counts as a failure.
drop_cluster()
{
	local v=$1 pid

	rm -f "/etc/postgresql/$v/$CLUSTER/conf.d/fencing-installcheck.conf"
	cp "/var/log/postgresql/postgresql-$v-$CLUSTER.log" "$SCRATCH/" 2>/dev/null || true
	pg_dropcluster --stop "$v" "$CLUSTER" && return 0

	log "$v/$CLUSTER did not stop in fast mode: stopping it in immediate mode"
	pg_ctlcluster "$v" "$CLUSTER" stop -m immediate || true
	pid=$(head -n 1 "/var/lib/postgresql/$v/$CLUSTER/postmaster.pid" 2>/dev/null || true)
	if [[ $pid =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null; then
		log "killing postmaster $pid of $v/$CLUSTER"
		kill -KILL "$pid" || true
		sleep 2
	fi
	pg_dropcluster "$v" "$CLUSTER" || true
	return 1
}

# Remove what this run created for the version being checked: the cluster,
# the package, and put back the files of an earlier "make install".
cleanup_version()
{
	local v=$CURRENT_VERSION

	[ -n "$v" ] || return 0
	if [ -d "/etc/postgresql/$v/$CLUSTER" ]; then
		log "cleanup: dropping cluster $v/$CLUSTER"
		drop_cluster "$v" || true
	fi
	if [ -n "$CURRENT_PACKAGE" ] &&
		dpkg-query -W -f='${Status}' "$CURRENT_PACKAGE" 2>/dev/null | grep -q 'installed'; then
		log "cleanup: purging $CURRENT_PACKAGE"
		DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq "$CURRENT_PACKAGE" >/dev/null || true
	fi
	if [ -s "$SCRATCH/replaced-$v.tar" ]; then
		log "cleanup: restoring the files the package replaced"
		tar -C / -xpf "$SCRATCH/replaced-$v.tar" || true
	fi
	CURRENT_VERSION=
	CURRENT_PACKAGE=
}

cleanup()
{
	cleanup_version
	if [ "$FAILED" -gt 0 ] || [ "${FENCING_KEEP_SCRATCH:-0}" = 1 ]; then
		log "scratch directory kept: $SCRATCH"
	else
		rm -rf "$SCRATCH"
	fi
}

# Run a command as postgres against the cluster on port $1.
as_postgres()
{
	local port=$1

	shift
	runuser -u postgres -- env -u PGDATABASE -u PGSERVICE -u PGPASSWORD \
		-u PGOPTIONS -u PGDATA \
		"HOME=$SCRATCH" "LANG=C.UTF-8" "LC_ALL=C.UTF-8" \
		"PGHOST=/var/run/postgresql" "PGPORT=$port" "PGUSER=postgres" "$@"
}

# One version: install, cluster, installcheck, purge.
check_version()
{
	local v=$1 deb=$2 package=postgresql-$1-fencing status port conf preload
	local out passed failed started=$SECONDS

	section "PostgreSQL $v: $(basename "$deb")"
	CURRENT_VERSION=$v
	CURRENT_PACKAGE=$package

	# A cluster of that name is left over from an interrupted run of ours.
	if [ -d "/etc/postgresql/$v/$CLUSTER" ]; then
		log "dropping cluster $v/$CLUSTER left by an earlier run"
		drop_cluster "$v"
	fi

	# Files of an earlier "make install" that the package will replace.
	dpkg-deb --fsys-tarfile "$deb" | tar -t | sed -n 's|^\./||; /[^/]$/p' |
		while IFS= read -r f; do
			if [ -e "/$f" ] && ! dpkg -S "/$f" >/dev/null 2>&1; then
				printf '%s\n' "$f"
			fi
		done >"$SCRATCH/replaced-$v.list"
	if [ -s "$SCRATCH/replaced-$v.list" ]; then
		log "saving $(wc -l <"$SCRATCH/replaced-$v.list") files of an earlier make install"
		tar -C / -cpf "$SCRATCH/replaced-$v.tar" -T "$SCRATCH/replaced-$v.list"
	fi

	# Install it as a user would; then dpkg must own every file, unchanged.
	status=0
	(cd "$(dirname "$deb")" &&
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q "./$(basename "$deb")") ||
		status=$?
	if [ "$status" -eq 0 ]; then
		dpkg-query -W -f='${Status}\n' "$package" | grep -q 'install ok installed' || status=1
		if ! dpkg --verify "$package"; then
			log "dpkg --verify $package reports changed files"
			status=1
		fi
		dpkg -S "/usr/lib/postgresql/$v/lib/fencing.so" || status=1
	fi
	check "$v: apt-get install ./$(basename "$deb")" "$status"
	[ "$status" -eq 0 ] || return 0

	# A cluster the Debian way: created and started, then the preload in
	# conf.d (postgresql.conf includes it; installcheck needs nothing else),
	# then a restart, as the library's shared memory needs.
	port=$(free_port)
	status=0
	pg_createcluster "$v" "$CLUSTER" -p "$port" --locale C.UTF-8 --start || status=$?
	conf=/etc/postgresql/$v/$CLUSTER/conf.d/fencing-installcheck.conf
	if [ "$status" -eq 0 ]; then
		{
			echo "# written by test/fresh/package-check.sh"
			echo "shared_preload_libraries = 'fencing'"
		} >"$conf"
		chown postgres:postgres "$conf"
		pg_ctlcluster "$v" "$CLUSTER" restart || status=$?
	fi
	if [ "$status" -eq 0 ]; then
		preload=$(as_postgres "$port" psql -XAtc 'SHOW shared_preload_libraries' postgres) || status=$?
		log "cluster $v/$CLUSTER on port $port: shared_preload_libraries = '$preload'"
		[ "$preload" = fencing ] || status=1
		as_postgres "$port" psql -XAtc 'SHOW server_version_num' postgres | grep -q "^$v" || status=1
	fi
	if [ "$status" -ne 0 ] && [ -f "/var/log/postgresql/postgresql-$v-$CLUSTER.log" ]; then
		tail -n 30 "/var/log/postgresql/postgresql-$v-$CLUSTER.log"
	fi
	check "$v: pg_createcluster, fencing preloaded, pg_ctlcluster restart" "$status"

	# make installcheck against that cluster, as postgres, from a copy of
	# the tree postgres can write to.
	if [ "$status" -eq 0 ]; then
		out=$SCRATCH/installcheck-$v
		mkdir -p "$out/tree"
		copy_tree "$ROOT" "$out/tree"
		rm -rf "$out/tree/debian-build"
		chown -R postgres:postgres "$out"
		status=0
		as_postgres "$port" make -C "$out/tree" installcheck \
			PG_CONFIG="/usr/lib/postgresql/$v/bin/pg_config" >"$out.log" 2>&1 ||
			status=$?
		cat "$out.log"
		read -r passed failed < <(count_regress_output "$out.log")
		if [ "$status" -ne 0 ] && [ "$failed" -eq 0 ]; then
			log "$v: make installcheck exited with status $status before reporting a failure"
			failed=1
		fi
		if [ "$failed" -gt 0 ] && [ -s "$out/tree/regression.diffs" ]; then
			log "--- regression.diffs (first 200 lines) ---"
			head -n 200 "$out/tree/regression.diffs"
		fi
		PASSED=$((PASSED + passed))
		FAILED=$((FAILED + failed))
		log "check: $v: make installcheck: $passed passed, $failed failed"
	fi

	# Drop the cluster and purge the package; nothing of either may remain.
	status=0
	drop_cluster "$v" || status=$?
	if [ -e "/etc/postgresql/$v/$CLUSTER" ] || [ -e "/var/lib/postgresql/$v/$CLUSTER" ]; then
		log "cluster $v/$CLUSTER remains after pg_dropcluster"
		status=1
	fi
	DEBIAN_FRONTEND=noninteractive apt-get purge -y -q "$package" || status=$?
	if dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q 'installed'; then
		status=1
	fi
	if [ -e "/usr/lib/postgresql/$v/lib/fencing.so" ] ||
		compgen -G "/usr/share/postgresql/$v/extension/fencing*" >/dev/null; then
		log "files of $package remain after the purge"
		status=1
	fi
	check "$v: pg_dropcluster --stop, apt-get purge $package" "$status"
	cleanup_version
	log "($v: $((SECONDS - started)) s)"
}

versions=0
for deb in "$DEB_DIR"/postgresql-*-fencing_*.deb; do
	[ -e "$deb" ] || continue
	v=$(basename "$deb")
	v=${v#postgresql-}
	v=${v%%-*}
	check_version "$v" "$deb"
	versions=$((versions + 1))
done
if [ "$versions" -eq 0 ]; then
	log "no postgresql-NN-fencing_*.deb in $DEB_DIR"
	FAILED=$((FAILED + 1))
fi
finish planned
