#!/bin/bash
#
# test/asan.sh -- "make test-asan": the suites of test/run_all.sh against
# fencing built with AddressSanitizer and UndefinedBehaviorSanitizer.
#
#   test/asan.sh                      regress, isolation, pgtap and tap
#   test/asan.sh regress,tap [FILE...]  only those (arguments as run_all.sh)
#
# Debian's postgres is not instrumented, so the sanitizer runtime has to be
# loaded into it before anything else: every server started by the suites
# runs with LD_PRELOAD=libasan.so.  The installed fencing.so, which other
# servers on this machine load, is never touched: the server is copied,
# with its library and share directories, into a private relocatable tree
# (PostgreSQL finds lib/ and share/ relative to its binary), the sanitized
# build is installed there with DESTDIR, and that tree's bin/postgres is a
# small wrapper that sets LD_PRELOAD, ASAN_OPTIONS and UBSAN_OPTIONS for the
# server processes only (psql, perl and pgbouncer run as usual).
# test/run_all.sh is then pointed at that bin directory (PG_BINDIR).
#
# The run fails if a suite fails or if any sanitizer report file was
# written.  If postgres cannot start with the ASan runtime preloaded, the
# script says why and falls back to UBSan alone.
#
# Environment: FENCING_ASAN_KEEP=1 keeps the work directory;
# FENCING_ASAN_MODE=ubsan skips the ASan attempt.

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# shellcheck source=test/lib/common.sh
. "$ROOT/test/lib/common.sh"

START_SECONDS=$SECONDS
SYSTEM_BINDIR=$PG_BINDIR
PG_CONFIG_BIN=$SYSTEM_BINDIR/pg_config
[ -x "$PG_CONFIG_BIN" ] || PG_CONFIG_BIN=$(command -v pg_config)

CONFIG_BINDIR=$("$PG_CONFIG_BIN" --bindir)
CONFIG_PKGLIBDIR=$("$PG_CONFIG_BIN" --pkglibdir)
CONFIG_SHAREDIR=$("$PG_CONFIG_BIN" --sharedir)

if is_root; then
	SERVER_USER=postgres
else
	SERVER_USER=$(id -un)
fi

WORK=$(mktemp -d /tmp/fencing-asan.XXXXXX)
chmod 755 "$WORK"
PREFIX=$WORK/root
PRIVATE_BINDIR=$PREFIX$CONFIG_BINDIR
REPORTS=$WORK/reports
mkdir -p "$REPORTS"
chmod 1777 "$REPORTS"

cleanup()
{
	if [ "${FENCING_ASAN_KEEP:-0}" = 1 ] || [ "${KEEP_WORK:-0}" = 1 ]; then
		log "asan: work directory kept: $WORK"
	else
		rm -rf "$WORK"
	fi
}
trap cleanup EXIT

# Run as the server user (initdb and postgres refuse root).
as_server_user()
{
	if is_root; then
		runuser -u "$SERVER_USER" -- "$@"
	else
		"$@"
	fi
}

# --- the private server tree ---------------------------------------------------

section "asan: private copy of the server"
mkdir -p "$PREFIX$(dirname "$CONFIG_BINDIR")" "$PREFIX$(dirname "$CONFIG_SHAREDIR")" \
	"$PREFIX$(dirname "$CONFIG_PKGLIBDIR")"
# bin and lib share a parent on Debian (/usr/lib/postgresql/15)
cp -a "$(dirname "$CONFIG_BINDIR")/." "$PREFIX$(dirname "$CONFIG_BINDIR")/"
if [ ! -d "$PREFIX$CONFIG_PKGLIBDIR" ]; then
	cp -a "$CONFIG_PKGLIBDIR" "$PREFIX$(dirname "$CONFIG_PKGLIBDIR")/"
fi
cp -a "$CONFIG_SHAREDIR" "$PREFIX$(dirname "$CONFIG_SHAREDIR")/"
# The private pg_config answers relative to its own place too: headers and
# client libraries (examples/ build against them) are the system's.
for dir in "$("$PG_CONFIG_BIN" --includedir)" "$("$PG_CONFIG_BIN" --libdir)"; do
	if [ ! -e "$PREFIX$dir" ]; then
		mkdir -p "$(dirname "$PREFIX$dir")"
		ln -s "$dir" "$PREFIX$dir"
	fi
done
log "asan: server copied to $PREFIX"

# The wrapper that gives server processes, and only them, the runtime.
write_wrapper()
{
	local preload=$1

	if [ ! -e "$PRIVATE_BINDIR/postgres.bin" ]; then
		mv "$PRIVATE_BINDIR/postgres" "$PRIVATE_BINDIR/postgres.bin"
	fi
	rm -f "$PRIVATE_BINDIR/postgres"
	cat >"$PRIVATE_BINDIR/postgres" <<EOF
#!/bin/sh
# fencing test/asan.sh: run the server with the sanitizer runtime preloaded
# (first, as ASan requires), keeping what the test preloads itself
# (libfaketime for a server whose clock is set back)
LD_PRELOAD='$preload'\${LD_PRELOAD:+:\$LD_PRELOAD}
ASAN_OPTIONS='detect_leaks=0:abort_on_error=1:disable_coredump=1:log_path=$REPORTS/asan'
UBSAN_OPTIONS='print_stacktrace=1:halt_on_error=1:log_path=$REPORTS/ubsan'
export LD_PRELOAD ASAN_OPTIONS UBSAN_OPTIONS
exec "\$(dirname "\$0")/postgres.bin" "\$@"
EOF
	chmod 755 "$PRIVATE_BINDIR/postgres"
	ln -sf postgres "$PRIVATE_BINDIR/postmaster"
}

# --- build and install into the private tree ------------------------------------

build_and_install()
{
	local sanitize=$1 src=$WORK/src

	rm -rf "$src"
	mkdir -p "$src"
	copy_tree "$ROOT" "$src"
	if ! make -C "$src" -s -j"$(nproc 2>/dev/null || echo 2)" WERROR=1 \
		PG_CONFIG="$PG_CONFIG_BIN" \
		COPT="-fsanitize=$sanitize -fno-omit-frame-pointer -fno-sanitize-recover=undefined -g" \
		>"$WORK/build.log" 2>&1; then
		cat "$WORK/build.log"
		log "asan: build with -fsanitize=$sanitize FAILED"
		return 1
	fi
	make -C "$src" -s install PG_CONFIG="$PG_CONFIG_BIN" DESTDIR="$PREFIX" \
		>"$WORK/install.log" 2>&1 || {
		cat "$WORK/install.log"
		log "asan: install into $PREFIX FAILED"
		return 1
	}
	log "asan: built with -fsanitize=$sanitize and installed into $PREFIX$CONFIG_PKGLIBDIR"
	log "asan: $(ldd "$PREFIX$CONFIG_PKGLIBDIR/fencing.so" | grep -E 'asan|ubsan' | awk '{print $1}' | tr '\n' ' ')"
}

# --- does the server run with the runtime preloaded? ------------------------------

smoke_test()
{
	local dir=$WORK/smoke port out

	rm -rf "$dir"
	mkdir -p "$dir"
	chown "$SERVER_USER": "$dir" 2>/dev/null || true
	port=$(free_port)
	out=$WORK/smoke.log
	: >"$out"
	chmod 666 "$out"

	# Every PostgreSQL program starts with set_pglocale_pgservice(), which
	# calls bindtextdomain(); with libasan preloaded into Debian's binaries
	# that call has been seen to block forever on glibc's _nl_state_lock.
	# Check with a bounded "postgres -V" before initdb (which would wait
	# on it with no limit).  exec in the wrapper keeps one process to kill.
	local rc=0
	timeout -k 5 30 "$PRIVATE_BINDIR/postgres" -V >>"$out" 2>&1 || rc=$?
	if [ "$rc" -ne 0 ]; then
		if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
			log "asan: \"postgres -V\" with the runtime preloaded did not finish in 30 s (it hangs in glibc's bindtextdomain, called by set_pglocale_pgservice at the start of every PostgreSQL program)"
		else
			log "asan: \"postgres -V\" with the runtime preloaded failed with status $rc:"
			tail -n 20 "$out"
		fi
		return 1
	fi
	if ! as_server_user "$PRIVATE_BINDIR/initdb" -D "$dir/data" -A trust -E UTF8 \
		--no-instructions >>"$out" 2>&1; then
		log "asan: initdb failed with the runtime preloaded:"
		tail -n 20 "$out"
		return 1
	fi
	cat >>"$dir/data/postgresql.conf" <<EOF
port = $port
listen_addresses = ''
unix_socket_directories = '$dir'
shared_preload_libraries = 'fencing'
EOF
	if ! as_server_user "$PRIVATE_BINDIR/pg_ctl" -D "$dir/data" -l "$dir/server.log" \
		-w -t 60 start >>"$out" 2>&1; then
		log "asan: the server did not start with the runtime preloaded:"
		tail -n 20 "$dir/server.log" "$out" 2>/dev/null || true
		return 1
	fi
	# the postmaster has the sanitized fencing.so of the private tree and
	# the runtime mapped (so the suites below test what was built here)
	local pm_pid
	pm_pid=$(head -n 1 "$dir/data/postmaster.pid")
	if ! grep -q "$PREFIX$CONFIG_PKGLIBDIR/fencing.so" "/proc/$pm_pid/maps" ||
		! grep -qE 'lib(a|ub)san\.so' "/proc/$pm_pid/maps"; then
		log "asan: the postmaster did not map the private fencing.so and the sanitizer runtime"
		as_server_user "$PRIVATE_BINDIR/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1 || true
		return 1
	fi
	rc=0
	as_server_user "$PRIVATE_BINDIR/psql" -X -q -h "$dir" -p "$port" -d postgres \
		-v ON_ERROR_STOP=1 -c 'CREATE EXTENSION fencing' \
		-c "SELECT fencing.next_token() > 0, fencing.lock_key('Smoke test') IS NOT NULL" \
		>>"$out" 2>&1 || rc=$?
	as_server_user "$PRIVATE_BINDIR/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1 || true
	if [ "$rc" -ne 0 ]; then
		log "asan: fencing does not work in the server with the runtime preloaded:"
		tail -n 20 "$out" "$dir/server.log" 2>/dev/null || true
		return 1
	fi
	rm -rf "$dir"
	return 0
}

MODE=${FENCING_ASAN_MODE:-asan}
if [ "$MODE" = asan ]; then
	section "asan: build with AddressSanitizer and UndefinedBehaviorSanitizer"
	ASAN_RUNTIME=$(gcc -print-file-name=libasan.so)
	if [ ! -e "$ASAN_RUNTIME" ]; then
		log "asan: $ASAN_RUNTIME not found (gcc's libasan missing); falling back to UBSan"
		MODE=ubsan
	else
		build_and_install address,undefined || exit 1
		write_wrapper "$ASAN_RUNTIME"
		if smoke_test; then
			log "asan: postgres runs with $ASAN_RUNTIME preloaded"
		else
			log "asan: postgres does not run with the ASan runtime preloaded (reason above); falling back to UBSan only"
			MODE=ubsan
		fi
	fi
fi
if [ "$MODE" = ubsan ]; then
	section "asan: build with UndefinedBehaviorSanitizer only"
	UBSAN_RUNTIME=$(gcc -print-file-name=libubsan.so)
	build_and_install undefined || exit 1
	write_wrapper "$UBSAN_RUNTIME"
	if ! smoke_test; then
		log "asan: postgres does not run with the UBSan runtime preloaded either"
		KEEP_WORK=1
		echo "0 passed, 1 failed"
		exit 1
	fi
fi

# Reports from the smoke test count too.
shopt -s nullglob
smoke_reports=("$REPORTS"/asan.* "$REPORTS"/ubsan.*)
shopt -u nullglob

# --- the suites ---------------------------------------------------------------------

section "asan: suites ($MODE) with PG_BINDIR=$PRIVATE_BINDIR"
suite_rc=0
SUITES=${1:-regress,isolation,pgtap,tap}
shift || true
PG_BINDIR=$PRIVATE_BINDIR FENCING_SKIP_BUILD=1 \
	FENCING_TAP_TIMEOUT=${FENCING_TAP_TIMEOUT:-1200} \
	FENCING_SUITE_TIMEOUT=${FENCING_SUITE_TIMEOUT:-1800} \
	"$ROOT/test/run_all.sh" "$SUITES" "$@" 2>&1 | tee "$WORK/suites.log" || suite_rc=$?
suites_line=$(tail -n 1 "$WORK/suites.log")

# --- reports --------------------------------------------------------------------------

section "asan: sanitizer reports"
shopt -s nullglob
reports=("$REPORTS"/asan.* "$REPORTS"/ubsan.*)
shopt -u nullglob
if [ ${#reports[@]} -gt 0 ]; then
	KEEP_WORK=1
	for f in "${reports[@]}"; do
		log "--- $f ---"
		head -n 60 "$f"
	done
	log "asan: ${#reports[@]} sanitizer report file(s) in $REPORTS"
else
	log "asan: no sanitizer reports ($MODE)"
fi
[ ${#smoke_reports[@]} -eq 0 ] || log "asan: (of them from the smoke test: ${#smoke_reports[@]})"

log "asan: the system's $CONFIG_PKGLIBDIR/fencing.so was not touched (the sanitized build lives in $PREFIX only)"
log "asan: suites: $suites_line"
log "asan: elapsed: $((SECONDS - START_SECONDS)) s"

if [ "$suite_rc" -ne 0 ] || [ ${#reports[@]} -gt 0 ]; then
	exit 1
fi
exit 0
