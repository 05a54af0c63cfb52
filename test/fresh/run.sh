#!/bin/bash
#
# test/fresh/run.sh -- "make test-fresh": the README's two commands on
# brand-new Debian machines, one per release, each with its own PostgreSQL.
#
#   test/fresh/run.sh                          bookworm (15), trixie (17), forky (18)
#   FRESH_RELEASES=bookworm test/fresh/run.sh  one release ("trixie forky" for two)
#
# For each release it builds a new root with mmdebstrap (minbase, no
# recommends) that holds only what a user starts with: the release's
# postgresql-NN server package and make (a user needs make to type the
# README's commands).  Into it go a clean export of HEAD (git archive),
# /proc, /sys, a /dev of its own with /dev/pts and /dev/shm, and a tmpfs
# /run (the chaos suite makes network namespaces, which need /sys and
# /run/netns).  Then, as root inside it, exactly the README's commands:
#
#   make demo
#   make test
#   test/fresh/package-check.sh, if the tree has it (the Debian package:
#                          build, install, installcheck)
#
# and three checks of ours: "ip netns add" works inside the root; the
# release zip (make dist) builds, installs and passes make installcheck
# from an empty directory (test/fresh/dist.sh); and a dump
# of a PostgreSQL 15 cluster (written in the bookworm root) restored into
# the later releases keeps fencing.resource_fences and continues tokens
# above the old cluster's (T4), without a manual step (test/fresh/dump.sh).
#
# One summary line per release, then one "N passed, N failed" line summed
# over everything that ran.  A failure caused by the distribution itself
# (the root cannot be built, a package the suites need cannot be installed
# today) is reported as "distribution: ..." and kept apart from ours.
# Exit status: 0 all passed; 1 a failure of ours; 2 only distribution
# failures.
#
# Everything it mounts or creates goes away at the end, also on failure and
# on Ctrl-C: processes still running inside the root are killed, mounts are
# unmounted in reverse order (lazily if busy), the root is removed.  The
# logs of a failed release are kept and their directory printed.
#
# Environment:
#   FRESH_RELEASES     releases to check, "name" or "name:NN" (default
#                      "bookworm trixie forky")
#   FRESH_MIRROR       Debian mirror (default http://deb.debian.org/debian)
#   FRESH_WORKDIR      where roots are built (default /var/tmp)
#   FRESH_REF          what to export (default HEAD)
#   FRESH_STEP_TIMEOUT seconds for one step inside a root (default 5400)
#   FRESH_BUDGET_SECONDS  skip the releases that would end after this many
#                      seconds, judged by the time the release before took
#   FENCING_TEST_LOCK  the machine's test lock (default /tmp/fencing-test.lock)

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
RELEASES=${FRESH_RELEASES:-bookworm trixie forky}
RELEASES=${RELEASES//,/ }
MIRROR=${FRESH_MIRROR:-http://deb.debian.org/debian}
SECURITY_MIRROR=${FRESH_SECURITY_MIRROR:-${MIRROR%/debian}/debian-security}
WORKDIR=${FRESH_WORKDIR:-/var/tmp}
REF=${FRESH_REF:-HEAD}
STEP_TIMEOUT=${FRESH_STEP_TIMEOUT:-5400}
TEST_LOCK=${FENCING_TEST_LOCK:-/tmp/fencing-test.lock}
TREE=/root/fencing	# where the export lives inside each root

START_SECONDS=$SECONDS
WORK=
CURRENT_ROOT=
CHILD=
KEEP_LOGS=0

log()
{
	printf '%s\n' "$*"
}

# Each release's PostgreSQL: the server package a user starts with.
default_major()
{
	case $1 in
	bookworm) echo 15 ;;
	trixie) echo 17 ;;
	forky) echo 18 ;;
	*) return 1 ;;
	esac
}

# Mirrors of one release.  Stable releases get their updates and security
# suites, as a new installation has them; testing has neither to speak of.
release_sources()
{
	local release=$1

	echo "deb $MIRROR $release main"
	case $release in
	bookworm | trixie)
		echo "deb $MIRROR $release-updates main"
		echo "deb $SECURITY_MIRROR $release-security main"
		;;
	esac
}

# --- cleanup -------------------------------------------------------------------

# The processes whose root directory is inside $1: only we put processes
# there (the suites' servers, workers, etcd and Patroni).
processes_in_root()
{
	local root=$1 proc link

	for proc in /proc/[0-9]*; do
		link=$(readlink "$proc/root" 2>/dev/null) || continue
		if [ "$link" = "$root" ] || [[ $link == "$root"/* ]]; then
			echo "${proc#/proc/}"
		fi
	done
}

kill_processes_in_root()
{
	local root=$1 pids round

	for round in TERM TERM KILL; do
		mapfile -t pids < <(processes_in_root "$root")
		[ ${#pids[@]} -gt 0 ] || return 0
		log "cleanup: $round to ${#pids[@]} process(es) still running in $root"
		kill -s "$round" "${pids[@]}" 2>/dev/null || true
		sleep 2
	done
}

# Mount points at or below $1, deepest first (the reverse of mounting).
mounts_below()
{
	local root=$1

	awk -v root="$root" '$5 == root || index($5, root "/") == 1 { print $5 }' \
		/proc/self/mountinfo | awk '{ print length($0) " " $0 }' | sort -rn | cut -d' ' -f2-
}

unmount_all_below()
{
	local root=$1 mount

	while IFS= read -r mount; do
		[ -n "$mount" ] || continue
		umount "$mount" 2>/dev/null || umount -l "$mount" 2>/dev/null ||
			log "cleanup: could not unmount $mount"
	done < <(mounts_below "$root")
}

# Take one root down: its processes, its mounts, its files.  Files are
# removed only when nothing is mounted below it any more.
remove_root()
{
	local root=$1

	[ -n "$root" ] && [ -d "$root" ] || return 0
	kill_processes_in_root "$root"
	unmount_all_below "$root"
	if [ -n "$(mounts_below "$root")" ]; then
		log "cleanup: still mounted below $root, not removing it:"
		mounts_below "$root"
		return 1
	fi
	rm -rf --one-file-system "$root"
}

# Everything this run made: the child it waits for, the root it is in, the
# work directory (its logs stay when something failed).
release_resources()
{
	local ok=0

	if [ -n "$CHILD" ]; then
		kill -TERM "$CHILD" 2>/dev/null || true
		wait "$CHILD" 2>/dev/null || true
		CHILD=
	fi
	if [ -n "$CURRENT_ROOT" ]; then
		remove_root "$CURRENT_ROOT" || ok=1
		CURRENT_ROOT=
	fi
	unlock_machine
	if [ -n "$WORK" ] && [ -d "$WORK" ]; then
		if [ "$KEEP_LOGS" = 1 ] || [ "$ok" -ne 0 ]; then
			log "fresh: logs kept in $WORK"
		else
			rm -rf --one-file-system "$WORK"
		fi
		WORK=
	fi
	return "$ok"
}

cleanup()
{
	local rc=$?

	trap - EXIT INT TERM
	[ "$rc" -eq 0 ] || log "fresh: stopped (exit status $rc); removing what this run mounted and created"
	release_resources || rc=1
	exit "$rc"
}

# --- running things --------------------------------------------------------------

# Run a command in the background, its output in a log file, and wait for it
# (so that a TERM or Ctrl-C reaches our trap at once, not when it ends).
run_logged()
{
	local logfile=$1 rc=0

	shift
	"$@" >"$logfile" 2>&1 </dev/null &
	CHILD=$!
	wait "$CHILD" || rc=$?
	CHILD=
	return "$rc"
}

# A shell command as root inside the root, with the environment a new login
# has and nothing of ours.
ROOT_ENV=(
	/usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM=dumb
	PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
)
in_root()
{
	local root=$1

	shift
	timeout -k 30 "$STEP_TIMEOUT" chroot "$root" "${ROOT_ENV[@]}" /bin/bash -c "$*"
}

# The machine's test lock, held from make test to the last check of a root
# (the suites time things, and other runs on this machine share its two
# cores): one wait per release instead of one per step.  Not while building
# roots.  The lock belongs to the open file, so "flock -u" releases it even
# if a process started inside the root still has the descriptor.
LOCK_FD=
lock_machine()
{
	[ -e "$TEST_LOCK" ] || { : >"$TEST_LOCK" && chmod 666 "$TEST_LOCK"; } 2>/dev/null || true
	exec {LOCK_FD}>>"$TEST_LOCK"
	if ! flock -n "$LOCK_FD"; then
		log "fresh: waiting for the machine's test lock ($TEST_LOCK) ..."
		flock "$LOCK_FD" &
		CHILD=$!
		wait "$CHILD"
		CHILD=
	fi
}

unlock_machine()
{
	[ -n "$LOCK_FD" ] || return 0
	flock -u "$LOCK_FD" 2>/dev/null || true
	exec {LOCK_FD}>&-
	LOCK_FD=
}

# What a step counted: the last "N passed, N failed" line of its log, as
# "N M".  A step that exited non-zero without counting a failure (it died
# before it could count) is one failure.
step_counts()
{
	local logfile=$1 rc=$2 line passed=0 failed=0

	line=$(grep -E '^([A-Za-z-]+: )?[0-9]+ passed, [0-9]+ failed' "$logfile" | tail -n 1)
	if [ -n "$line" ]; then
		read -r passed failed < <(sed -E \
			's/^([A-Za-z-]+: )?([0-9]+) passed, ([0-9]+) failed.*/\2 \3/' <<<"$line")
	fi
	if [ "$rc" -ne 0 ] && [ "$failed" -eq 0 ]; then
		failed=1
	fi
	echo "$passed $failed"
}

# --- one root --------------------------------------------------------------------

# mmdebstrap, minbase, the server package and make.  Downloads are not the
# slow part (seconds); dpkg is: no recommends and --force-unsafe-io (the
# root is thrown away, so fsync buys nothing).
build_root()
{
	local release=$1 major=$2 root=$3 sources=() line
	local options=(
		--variant=minbase
		--include="postgresql-$major,make"
		--aptopt='Apt::Install-Recommends "false"'
		--dpkgopt=force-unsafe-io
		# a user's machine installs recommends: keep the option for the build only
		--customize-hook='sed -i "/Install-Recommends/d" "$1/etc/apt/apt.conf.d/99mmdebstrap"'
	)

	# A machine on this network trusts what this one trusts: a network
	# that inspects TLS (the npm registry is reached over HTTPS) has its
	# authority in /usr/local/share/ca-certificates, and a user's machine
	# there has it too.  Debian's own mirrors are plain HTTP.
	if compgen -G '/usr/local/share/ca-certificates/*.crt' >/dev/null; then
		options[1]="--include=postgresql-$major,make,ca-certificates"
		options+=(--customize-hook='cp /usr/local/share/ca-certificates/*.crt "$1/usr/local/share/ca-certificates/" && chroot "$1" update-ca-certificates >/dev/null')
	fi

	# testing's Release files are not renewed on every mirror in time
	case $release in
	bookworm | trixie) ;;
	*) options+=(--aptopt='Acquire::Check-Valid-Until "false"') ;;
	esac
	while IFS= read -r line; do
		sources+=("$line")
	done < <(release_sources "$release")
	mmdebstrap "${options[@]}" "$release" "$root" "${sources[@]}"
}

# The root as a mount point of its own ("ip netns add" remounts / inside
# its namespace, which fails when / is a mere directory: "mount
# --make-rslave /" failed: Invalid argument), private so nothing mounted
# below propagates to the host; then /proc, /sys, a /dev of the root's own
# (device nodes, not the host's /dev), /dev/pts, /dev/shm and /run.
mount_root()
{
	local root=$1 node

	mount --bind "$root" "$root"
	mount --make-private "$root"
	mount -t proc proc "$root/proc"
	mount -t sysfs sysfs "$root/sys"
	mount -t tmpfs -o mode=755,size=64k fresh-dev "$root/dev"
	for node in "null c 1 3" "zero c 1 5" "full c 1 7" "random c 1 8" \
		"urandom c 1 9" "tty c 5 0"; do
		# shellcheck disable=SC2086
		set -- $node
		mknod -m 666 "$root/dev/$1" "$2" "$3" "$4"
	done
	ln -s /proc/self/fd "$root/dev/fd"
	ln -s /proc/self/fd/0 "$root/dev/stdin"
	ln -s /proc/self/fd/1 "$root/dev/stdout"
	ln -s /proc/self/fd/2 "$root/dev/stderr"
	mkdir -p "$root/dev/pts" "$root/dev/shm"
	mount -t devpts -o newinstance,ptmxmode=0666,mode=620 devpts "$root/dev/pts"
	ln -s pts/ptmx "$root/dev/ptmx"
	mount -t tmpfs -o mode=1777 fresh-shm "$root/dev/shm"
	mount -t tmpfs -o mode=755 fresh-run "$root/run"
	mkdir -p "$root/run/lock"
	chmod 1777 "$root/run/lock"
}

# Does "ip netns add" work inside the root (the chaos suite needs it)?
netns_check()
{
	local root=$1

	in_root "$root" '
		command -v ip >/dev/null || { echo "ip is not installed in the root"; exit 1; }
		ip netns add fencing-fresh-check &&
		ip -n fencing-fresh-check link set lo up &&
		ip netns exec fencing-fresh-check ip -brief link show lo | grep -q UP
		rc=$?
		ip netns delete fencing-fresh-check 2>/dev/null
		exit $rc'
}

# Which of the packages the suites need cannot apt install in this root
# today?  Prints "package: apt's reason" lines; nothing when all can.
uninstallable_packages()
{
	local root=$1 pkg

	in_root "$root" "apt-get update -qq >/dev/null 2>&1; cd $TREE &&
		bash -c '. test/lib/common.sh; requirements' | cut -d'|' -f4 | cut -d' ' -f1 | sort -u" |
		while IFS= read -r pkg; do
			[ -n "$pkg" ] || continue
			if ! in_root "$root" "apt-get install -s -q --no-install-recommends $pkg" \
				</dev/null >"$WORK/apt-s.out" 2>&1; then
				echo "$pkg: $(grep -E '^E: ' "$WORK/apt-s.out" | head -n 1)"
			fi
		done
}

# Globals for the summary of one release.
declare -A R_STATUS=() R_LINE=() R_DIST=()
TOTAL_PASSED=0
TOTAL_FAILED=0
DUMP_DIR=

check_release()
{
	local spec=$1 release major dir root t0 t rc passed failed version
	local build_s=- demo_s=- test_s=- pkg_s=- demo=- tests=- pkg=- netns=- dump=- zip=-
	local p=0 f=0 dist=

	release=${spec%%:*}
	major=${spec#*:}
	[ "$major" != "$spec" ] || major=$(default_major "$release") || {
		log "fresh: unknown release '$release': name its PostgreSQL as $release:NN"
		R_STATUS[$release]=failed
		R_LINE[$release]="$release: unknown release (say $release:NN)"
		TOTAL_FAILED=$((TOTAL_FAILED + 1))
		return
	}
	dir=$WORK/$release
	root=$dir/root
	mkdir -p "$dir"

	log ""
	log "=== fresh: $release (postgresql-$major) ==="
	t0=$SECONDS
	CURRENT_ROOT=$root
	if ! run_logged "$dir/build.log" build_root "$release" "$major" "$root"; then
		tail -n 20 "$dir/build.log"
		dist="the root could not be built: $(grep -E '^E: ' "$dir/build.log" | head -n 2 | tr '\n' ' ')"
		log "fresh: $release: distribution: $dist"
		remove_root "$root" || true
		CURRENT_ROOT=
		KEEP_LOGS=1
		R_STATUS[$release]=distribution
		R_DIST[$release]=$dist
		R_LINE[$release]=$(printf '%-9s postgresql-%s  distribution: %s  (%d s)' \
			"$release" "$major" "$dist" $((SECONDS - t0)))
		return
	fi
	build_s=$((SECONDS - t0))
	log "fresh: $release: root built in $build_s s ($(du -sm "$root" | cut -f1) MB)"
	mount_root "$root"
	mkdir -p "$root$TREE"
	git -C "$ROOT" archive --format=tar "$REF" | tar -x -C "$root$TREE"
	version=$(chroot "$root" "/usr/lib/postgresql/$major/bin/postgres" --version 2>/dev/null |
		sed -n 's/.*(PostgreSQL) \([0-9.]*\).*/\1/p')
	log "fresh: $release: PostgreSQL ${version:-?}; tree: $(git -C "$ROOT" rev-parse --short "$REF") in $TREE"

	# make demo
	t=$SECONDS
	rc=0
	log "fresh: $release: make demo ..."
	run_logged "$dir/demo.log" in_root "$root" "cd $TREE && make demo" || rc=$?
	demo_s=$((SECONDS - t))
	if [ "$rc" -eq 0 ]; then
		demo=ok
		p=$((p + 1))
	else
		demo=failed
		f=$((f + 1))
		tail -n 40 "$dir/demo.log"
	fi
	log "fresh: $release: make demo: $demo ($demo_s s)"

	# make test and the checks after it, holding the machine's test lock
	lock_machine
	t=$SECONDS
	log "fresh: $release: make test ..."
	rc=0
	run_logged "$dir/test.log" in_root "$root" "cd $TREE && make test" || rc=$?
	test_s=$((SECONDS - t))
	read -r passed failed < <(step_counts "$dir/test.log" "$rc")
	tests="$passed passed, $failed failed"
	p=$((p + passed))
	f=$((f + failed))
	if [ "$failed" -gt 0 ]; then
		grep -E '^(not ok|FAILED|.*\.\.\. FAILED|requirements:|  .*\(Debian package)' "$dir/test.log" | head -n 40 || true
		tail -n 30 "$dir/test.log"
	fi
	log "fresh: $release: make test: $tests ($test_s s)"

	# the chaos suite's network namespaces
	if netns_check "$root" >"$dir/netns.log" 2>&1; then
		netns=ok
		p=$((p + 1))
	else
		netns=failed
		f=$((f + 1))
		cat "$dir/netns.log"
	fi
	log "fresh: $release: ip netns add inside the root: $netns"

	# the Debian package, if the tree knows how to check it
	if [ -f "$root$TREE/test/fresh/package-check.sh" ]; then
		t=$SECONDS
		rc=0
		log "fresh: $release: test/fresh/package-check.sh ..."
		run_logged "$dir/package.log" in_root "$root" \
			"cd $TREE && bash test/fresh/package-check.sh" || rc=$?
		pkg_s=$((SECONDS - t))
		read -r passed failed < <(step_counts "$dir/package.log" "$rc")
		pkg="$passed passed, $failed failed"
		p=$((p + passed))
		f=$((f + failed))
		[ "$failed" -eq 0 ] || tail -n 40 "$dir/package.log"
		log "fresh: $release: package check: $pkg ($pkg_s s)"
	else
		pkg="none (no test/fresh/package-check.sh)"
	fi

	# the release zip (make dist) in an empty directory: make, make install,
	# make installcheck against a server preloading fencing
	if [ -n "$DIST_ZIP" ]; then
		t=$SECONDS
		rc=0
		cp "$DIST_ZIP" "$root/root/"
		run_logged "$dir/zip.log" in_root "$root" \
			"cd $TREE && bash test/fresh/dist.sh check /root/$(basename "$DIST_ZIP") --installcheck" || rc=$?
		if [ "$rc" -eq 0 ]; then
			zip="ok ($((SECONDS - t)) s)"
			p=$((p + 1))
		else
			zip="failed ($((SECONDS - t)) s)"
			f=$((f + 1))
			tail -n 40 "$dir/zip.log"
		fi
		log "fresh: $release: $(basename "$DIST_ZIP") built, installed and installchecked: $zip"
	fi

	# a PostgreSQL 15 dump: written here, or restored here
	if [ "$major" = 15 ] && [ -z "$DUMP_DIR" ]; then
		rc=0
		run_logged "$dir/dump.log" in_root "$root" \
			"cd $TREE && bash test/fresh/dump.sh write /root/fencing-dump" || rc=$?
		if [ "$rc" -eq 0 ]; then
			DUMP_DIR=$WORK/dump-15
			cp -a "$root/root/fencing-dump" "$DUMP_DIR"
			dump="written ($(tail -n 1 "$dir/dump.log"))"
			p=$((p + 1))
		else
			dump=failed
			f=$((f + 1))
			tail -n 30 "$dir/dump.log"
		fi
	elif [ "$major" != 15 ] && [ -n "$DUMP_DIR" ]; then
		rc=0
		cp -a "$DUMP_DIR" "$root/root/fencing-dump"
		run_logged "$dir/dump.log" in_root "$root" \
			"cd $TREE && bash test/fresh/dump.sh restore /root/fencing-dump" || rc=$?
		if [ "$rc" -eq 0 ]; then
			dump="15 -> $major ok"
			p=$((p + 1))
		else
			dump="15 -> $major failed"
			f=$((f + 1))
		fi
		tail -n 12 "$dir/dump.log"
	elif [ "$major" != 15 ]; then
		dump="skipped (no PostgreSQL 15 dump: bookworm did not run first)"
	fi
	log "fresh: $release: dump: $dump"
	unlock_machine

	# A failure here may be the distribution's: a package the suites need
	# that apt cannot install in this release today.
	if [ "$f" -gt 0 ]; then
		local bad
		bad=$(uninstallable_packages "$root" | tr '\n' ';')
		if [ -n "$bad" ]; then
			dist="packages apt cannot install today: ${bad%;}"
			log "fresh: $release: distribution: $dist"
		fi
	fi

	remove_root "$root"
	CURRENT_ROOT=

	if [ -n "$dist" ]; then
		R_STATUS[$release]=distribution
		R_DIST[$release]=$dist
		KEEP_LOGS=1
	elif [ "$f" -gt 0 ]; then
		R_STATUS[$release]=failed
		KEEP_LOGS=1
		TOTAL_PASSED=$((TOTAL_PASSED + p))
		TOTAL_FAILED=$((TOTAL_FAILED + f))
	else
		R_STATUS[$release]=ok
		TOTAL_PASSED=$((TOTAL_PASSED + p))
	fi
	R_LINE[$release]=$(printf '%-9s PostgreSQL %-5s demo %s (%s s); make test %s (%s s); package check %s (%s s); netns %s; zip %s; dump %s; root %s s; total %d s%s' \
		"$release" "${version:-?}" "$demo" "$demo_s" "$tests" "$test_s" "$pkg" "$pkg_s" \
		"$netns" "$zip" "$dump" "$build_s" $((SECONDS - t0)) "${dist:+; distribution: $dist}")
}

# --- main ------------------------------------------------------------------------

if [ "$(id -u)" -ne 0 ]; then
	log "make test-fresh builds Debian roots and mounts /proc, /sys and /dev in them: run it as root."
	echo "0 passed, 1 failed"
	exit 1
fi
for tool in mmdebstrap git flock chroot; do
	if ! command -v "$tool" >/dev/null 2>&1; then
		log "fresh: installing $tool's package"
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
			"$(case $tool in chroot) echo coreutils ;; flock) echo util-linux ;; *) echo "$tool" ;; esac)" >/dev/null
	fi
done
# one commit for every root, even if the branch moves meanwhile
REF=$(git -C "$ROOT" rev-parse --verify -q "$REF^{commit}") ||
	{ log "fresh: ${FRESH_REF:-HEAD} is not a commit of $ROOT"; echo "0 passed, 1 failed"; exit 1; }
if [ -n "$(git -C "$ROOT" status --porcelain --untracked-files=no 2>/dev/null)" ]; then
	log "fresh: note: the roots get $REF ($(git -C "$ROOT" rev-parse --short "$REF")); uncommitted changes are not in it"
fi

WORK=$(mktemp -d "$WORKDIR/fencing-fresh.XXXXXX")
chmod 755 "$WORK"
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# the release zip of the same commit, checked in every root
DIST_ZIP=
if (cd "$WORK" && "$ROOT/test/fresh/dist.sh" zip "$REF") >"$WORK/dist.log" 2>&1; then
	DIST_ZIP=$(ls "$WORK"/fencing-*.zip)
else
	cat "$WORK/dist.log"
	log "fresh: make dist failed: the zip is not checked"
	TOTAL_FAILED=$((TOTAL_FAILED + 1))
	KEEP_LOGS=1
fi

log "fresh: releases: $RELEASES; mirror: $MIRROR; work: $WORK"
last_duration=0
for spec in $RELEASES; do
	release=${spec%%:*}
	# with a time budget, a release that would cross it (judged by the one
	# before) is skipped and said so
	if [ -n "${FRESH_BUDGET_SECONDS:-}" ] && [ "$last_duration" -gt 0 ] &&
		[ $((SECONDS - START_SECONDS + last_duration)) -gt "$FRESH_BUDGET_SECONDS" ]; then
		R_STATUS[$release]=skipped
		R_LINE[$release]="$release: not run: $((SECONDS - START_SECONDS)) s of the ${FRESH_BUDGET_SECONDS} s budget used, and the last release took $last_duration s"
		continue
	fi
	started=$SECONDS
	check_release "$spec"
	last_duration=$((SECONDS - started))
done

log ""
log "=== fresh: summary ==="
status=0
for spec in $RELEASES; do
	release=${spec%%:*}
	log "${R_STATUS[$release]:-failed}: ${R_LINE[$release]:-$release: did not run}"
	case ${R_STATUS[$release]:-failed} in
	failed) status=1 ;;
	distribution) [ "$status" -eq 1 ] || status=2 ;;
	esac
done
[ "$TOTAL_FAILED" -eq 0 ] || status=1
for spec in $RELEASES; do
	release=${spec%%:*}
	if [ -n "${R_DIST[$release]:-}" ]; then
		log "distribution: $release: ${R_DIST[$release]} (not counted below; a failure of the Debian release, not of fencing)"
	fi
done
log "fresh: elapsed $((SECONDS - START_SECONDS)) s"
trap - EXIT INT TERM
release_resources || status=1
echo "$TOTAL_PASSED passed, $TOTAL_FAILED failed"
exit "$status"
