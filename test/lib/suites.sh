# shellcheck shell=bash
# test/lib/suites.sh -- the six test suites of test/run_all.sh (sourced)
#
# Each run_* function runs one suite from the scratch copy $COPY as the test
# user, prints its output, and calls record_result with what it counted.
# A suite that cannot even start (a server that does not come up, a tool
# that crashes before reporting) counts as one failure, never as zero.

# Seconds before a stuck suite or TAP file is killed.
SUITE_TIMEOUT=${FENCING_SUITE_TIMEOUT:-900}
TAP_FILE_TIMEOUT=${FENCING_TAP_TIMEOUT:-600}
# TAP files run in this many lanes at once (run_tap)
if [ "$(nproc 2>/dev/null || echo 1)" -ge 2 ]; then
	TAP_JOBS=${FENCING_TAP_JOBS:-2}
else
	TAP_JOBS=${FENCING_TAP_JOBS:-1}
fi
# TAP files that take 20 s or more here, longest first, started first so
# that no lane is left with a long one at the end (a scheduling hint only:
# a file missing from this list still runs)
TAP_LONG_FILES="011_tokens_crash.pl 090_examples.pl 015_tokens_new_cluster.pl
038_lock_delay.pl 013_tokens_standby.pl 054_installcheck.pl
050_properties.pl 058_leases_restart.pl 055_upgrade_data.pl"
TAP_LONG_FILES=$(echo $TAP_LONG_FILES)
# The short chaos run plans for three minutes; past four it is stuck.
CHAOS_SUITE_TIMEOUT=${FENCING_CHAOS_TIMEOUT:-240}

# Count pg_regress / pg_isolation_regress results in an output file.
# Understands the PostgreSQL 15 format
#   test tokens                   ... ok           31 ms
#        locks                    ... FAILED       12 ms      (parallel group)
#   test foo                      ... failed (ignored)
# and the TAP-like format of PostgreSQL 16 and later
#   ok 1         - tokens                                    31 ms
#   not ok 2     + locks                                     12 ms
# Prints "passed failed".
count_regress_output()
{
	awk '
		/^(test |     )[[:space:]]*[^[:space:]]+[[:space:]]+\.\.\.[[:space:]]+ok([[:space:]]|$)/ { passed++; next }
		/^(test |     )[[:space:]]*[^[:space:]]+[[:space:]]+\.\.\.[[:space:]]+(FAILED|failed)/ { failed++; next }
		/^ok [0-9]+[[:space:]]+[-+][[:space:]]/ { passed++; next }
		/^not ok [0-9]+[[:space:]]+[-+][[:space:]]/ { failed++; next }
		END { printf "%d %d\n", passed, failed }
	' "$1"
}

# Count TAP assertions in prove/pg_prove verbose output: top-level
# "ok N" / "not ok N" lines (subtest lines are indented and are summed into
# their parent).  "# SKIP" and "# TODO" lines count as skipped: neither a
# pass nor a failure.  Prints "passed failed skipped".
count_tap_output()
{
	awk '
		{
			line = $0
			# prove -v prints the first result on the "file .. " line
			sub(/^[^[:space:]].* \.\. /, "", line)
		}
		line ~ /^(not )?ok [0-9]+/ && line ~ /#[[:space:]]*(SKIP|skip|Skip|TODO|todo|Todo)/ { skipped++; next }
		line ~ /^ok [0-9]+/ { passed++; next }
		line ~ /^not ok [0-9]+/ { failed++; next }
		END { printf "%d %d %d\n", passed, failed, skipped }
	' "$1"
}

# A TAP run that went wrong counts as a failure even when no assertion
# failed: it exited non-zero (timed out, crashed) or ran no assertion at
# all.  Adjusts the caller's $failed (it reads $passed too).  Arguments:
# suite, what ran, its exit status, its time limit in seconds.
count_broken_run()
{
	local suite=$1 what=$2 rc=$3 limit=$4

	if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
		log "$suite: $what timed out after ${limit}s"
	fi
	if [ "$rc" -ne 0 ] && [ "$failed" -eq 0 ]; then
		log "$suite: $what failed (exit status $rc) without a failing assertion: counted as one failure"
		failed=1
	fi
	if [ $((passed + failed)) -eq 0 ]; then
		log "$suite: $what ran no assertion: counted as one failure"
		failed=1
	fi
}

# pg_regress stops the whole run when a test has no expected file, so such
# tests are counted as failures up front and left out.  NAME_1.out and the
# like are alternatives pg_regress accepts as well.
has_expected()
{
	local dir=$1 name=$2 f

	for f in "$dir/$name.out" "$dir/$name"_[0-9].out; do
		[ -e "$f" ] && return 0
	done
	return 1
}

without_expected()
{
	local dir=$1 name missing=()

	shift
	for name in "$@"; do
		has_expected "$dir" "$name" || missing+=("$name")
	done
	echo "${missing[*]}"
}

with_expected()
{
	local dir=$1 name

	shift
	for name in "$@"; do
		if has_expected "$dir" "$name"; then
			echo "$name"
		fi
	done
	return 0
}

# Run one pg_regress-style suite on a temporary instance and record its
# counts.  Arguments: suite name, the driver binary, the directory of the
# test sources, their extension, the directory of expected outputs, the
# --inputdir, then the driver's own extra options up to "--", then the tests
# (all of the suite's tests when none are given).  pg_regress stops at the
# first missing expected file, so such tests are counted as failures and
# left out of the run.
run_regress_suite()
{
	local suite=$1 bin=$2 srcdir=$3 ext=$4 expdir=$5 inputdir=$6
	local extra=() tests=() out=$SCRATCH/$1 rc=0 passed failed f
	shift 6
	while [ $# -gt 0 ] && [ "$1" != "--" ]; do
		extra+=("$1")
		shift
	done
	[ $# -gt 0 ] && shift
	tests=("$@")

	if [ ${#tests[@]} -eq 0 ]; then
		for f in "$COPY/$srcdir"/*."$ext"; do
			[ -e "$f" ] && tests+=("$(basename "$f" ."$ext")")
		done
	fi
	if [ ${#tests[@]} -eq 0 ]; then
		log "$suite: no $srcdir/*.$ext files, skipped"
		return 0
	fi

	section "$suite: ${tests[*]}"
	local missing_expected
	missing_expected=$(without_expected "$COPY/$expdir" "${tests[@]}")
	if [ -n "$missing_expected" ]; then
		log "$suite: no expected output for: $missing_expected (each counted as a failure)"
		record_result "$suite" 0 "$(wc -w <<<"$missing_expected")"
		mapfile -t tests < <(with_expected "$COPY/$expdir" "${tests[@]}")
		[ ${#tests[@]} -gt 0 ] || return 0
	fi
	as_test_user mkdir -p "$out"
	(cd "$COPY" && as_test_user timeout -k 30 "$SUITE_TIMEOUT" \
		"$bin" \
		--temp-instance="$out/tmp_instance" \
		--temp-config="$COPY/test/regress.conf" \
		--load-extension=fencing \
		--inputdir="$inputdir" \
		--outputdir="$out" \
		--bindir="$PG_BINDIR" \
		"${extra[@]}" \
		"${tests[@]}") >"$out.log" 2>&1 || rc=$?
	cat "$out.log"

	read -r passed failed < <(count_regress_output "$out.log")
	if [ "$rc" -ne 0 ] && [ "$failed" -eq 0 ]; then
		log "$suite: $(basename "$bin") exited with status $rc before reporting a failure"
		failed=1
	fi
	if [ "$failed" -gt 0 ]; then
		if [ -s "$out/regression.diffs" ]; then
			log "--- regression.diffs (first 300 lines) ---"
			head -n 300 "$out/regression.diffs"
		fi
		if [ -f "$out/log/postmaster.log" ]; then
			log "--- tail of postmaster.log ---"
			tail -n 40 "$out/log/postmaster.log"
		fi
	fi
	record_result "$suite" "$passed" "$failed"
}

# (a) pg_regress on sql/*.sql against expected/*.out.
run_regress()
{
	run_regress_suite regress "$PG_REGRESS_BIN" sql sql expected . \
		--dbname=contrib_regression -- "$@"
}

# (b) pg_isolation_regress on test/isolation/specs/*.spec.
run_isolation()
{
	run_regress_suite isolation "$PG_ISOLATION_BIN" test/isolation/specs spec \
		test/isolation/expected test/isolation -- "$@"
}

# (c) pgTAP: one throwaway server; every file gets a fresh database cloned
# from a template that has pgtap and fencing installed.
run_pgtap()
{
	local files=("$@") dir=$SCRATCH/pgtap port f db rc passed failed skipped

	if [ ${#files[@]} -eq 0 ]; then
		for f in "$COPY"/test/pgtap/*.sql; do
			[ -e "$f" ] && files+=("test/pgtap/$(basename "$f")")
		done
	fi
	if [ ${#files[@]} -eq 0 ]; then
		log "pgtap: no test/pgtap/*.sql files, skipped"
		return 0
	fi

	section "pgtap: ${files[*]}"
	port=$(free_port)
	as_test_user mkdir -p "$dir"
	if ! as_test_user initdb -D "$dir/data" -A trust -U "$TEST_USER" -E UTF8 \
		--no-instructions >"$dir/initdb.log" 2>&1; then
		cat "$dir/initdb.log"
		record_result pgtap 0 1
		return 0
	fi
	as_test_user sh -c "cat >> '$dir/data/postgresql.conf'" <<EOF
port = $port
listen_addresses = ''
unix_socket_directories = '$dir'
fsync = off
include '$COPY/test/regress.conf'
EOF
	if ! as_test_user pg_ctl -D "$dir/data" -l "$dir/server.log" -w -t 60 start \
		>/dev/null 2>&1; then
		log "pgtap: the server did not start"
		tail -n 40 "$dir/server.log" || true
		record_result pgtap 0 1
		return 0
	fi

	local psql=(psql -X -q -v ON_ERROR_STOP=1 -h "$dir" -p "$port")
	if ! as_test_user "${psql[@]}" -d postgres -c "CREATE DATABASE tap_template" ||
		! as_test_user "${psql[@]}" -d tap_template \
			-c "CREATE EXTENSION pgtap" -c "CREATE EXTENSION fencing"; then
		log "pgtap: could not prepare the template database"
		tail -n 40 "$dir/server.log" || true
		as_test_user pg_ctl -D "$dir/data" -m fast -w stop >/dev/null 2>&1 || true
		record_result pgtap 0 1
		return 0
	fi

	for f in "${files[@]}"; do
		db="tap_$(basename "$f" .sql | tr -c 'a-zA-Z0-9_\n' '_')"
		rc=0
		as_test_user "${psql[@]}" -d postgres \
			-c "CREATE DATABASE \"$db\" TEMPLATE tap_template" || rc=$?
		if [ "$rc" -eq 0 ]; then
			(cd "$COPY" && as_test_user timeout -k 30 "$SUITE_TIMEOUT" \
				pg_prove --verbose -h "$dir" -p "$port" -d "$db" "$f") \
				>"$dir/$db.log" 2>&1 || rc=$?
		else
			echo "could not create database $db" >"$dir/$db.log"
		fi
		cat "$dir/$db.log"
		read -r passed failed skipped < <(count_tap_output "$dir/$db.log")
		count_broken_run pgtap "$f" "$rc" "$SUITE_TIMEOUT"
		record_result pgtap "$passed" "$failed" "$skipped"
	done

	as_test_user pg_ctl -D "$dir/data" -m fast -w stop >/dev/null 2>&1 || true
}

# (d) TAP tests with PostgreSQL::Test::Cluster, one prove per file.
#
# The files run in TAP_JOBS lanes at once (default: 2, or 1 on a one-CPU
# machine): most of a TAP file's time is spent waiting for servers to
# start, stop, promote and replay, not computing, so two lanes on two cores
# take about 60% of the time of one.  Each lane takes the next file from a
# shared queue.  Every file has its own nodes, data directories and ports
# (PostgreSQL::Test::Cluster allocates ports under a lock), so lanes do not
# meet.  Outputs are kept per file and printed, counted and recorded in the
# files' own order once all lanes are done, so the log reads the same as a
# one-lane run.  FENCING_TAP_JOBS=1 runs them one after another.

# Run one TAP file; its output goes to tap/NAME.out, its exit status and
# duration to tap/NAME.rc as "STATUS SECONDS".
run_tap_file()
{
	local f=$1 name rc=0 started=$SECONDS logdir=$COPY/tmp_check/log

	name=$(basename "$f" .pl)
	# TESTDIR is what PostgreSQL 15's test modules read; 16 and later
	# read TESTDATADIR and TESTLOGDIR and otherwise use the relative
	# "tmp_check" and "log", which break pg_upgrade and server-side
	# COPY (both resolve paths elsewhere).  Absolute, and the same
	# place on every version.
	(cd "$COPY" && as_test_user \
		"PERL5LIB=$PG_TEST_PERL" \
		"TEMP_CONFIG=$COPY/test/tap.conf" \
		"PG_REGRESS=$PG_REGRESS_BIN" \
		"TESTDIR=$COPY" \
		"TESTDATADIR=$COPY/tmp_check" \
		"TESTLOGDIR=$logdir" \
		timeout -k 30 "$TAP_FILE_TIMEOUT" prove -v "$f") \
		>"$SCRATCH/tap/$name.out" 2>&1 || rc=$?
	echo "$rc $((SECONDS - started))" >"$SCRATCH/tap/$name.rc"
}

# One lane: take files from the queue (one name per line in QUEUE, the
# next index in QUEUE.next, both under QUEUE.lock) until it is empty.
run_tap_lane()
{
	local queue=$1 lane=$2 index f

	while true; do
		index=$(flock "$queue.lock" bash -c \
			'i=$(cat "$1.next"); echo $((i + 1)) >"$1.next"; echo "$i"' _ "$queue")
		f=$(sed -n "$((index + 1))p" "$queue")
		[ -n "$f" ] || return 0
		log "tap: $f started (lane $lane)"
		run_tap_file "$f"
	done
}

run_tap()
{
	local files=("$@") f name rc passed failed skipped logdir secs
	local queue lanes lane pids=()

	if [ ${#files[@]} -eq 0 ]; then
		for f in "$COPY"/test/t/*.pl; do
			[ -e "$f" ] && files+=("test/t/$(basename "$f")")
		done
	fi
	if [ ${#files[@]} -eq 0 ]; then
		log "tap: no test/t/*.pl files, skipped"
		return 0
	fi

	as_test_user mkdir -p "$SCRATCH/tap" "$COPY/tmp_check"
	logdir=$COPY/tmp_check/log
	lanes=$TAP_JOBS
	[ "$lanes" -le ${#files[@]} ] || lanes=${#files[@]}
	queue=$SCRATCH/tap-queue
	# the longest files first, so that no lane is left with one at the end
	{
		for f in "${files[@]}"; do
			[[ " $TAP_LONG_FILES " == *" $(basename "$f") "* ]] && echo "$f"
		done
		for f in "${files[@]}"; do
			[[ " $TAP_LONG_FILES " == *" $(basename "$f") "* ]] || echo "$f"
		done
	} >"$queue"
	echo 0 >"$queue.next"
	log "tap: ${#files[@]} files in $lanes lane(s)"
	for ((lane = 1; lane <= lanes; lane++)); do
		run_tap_lane "$queue" "$lane" &
		pids+=($!)
	done
	for pid in "${pids[@]}"; do
		wait "$pid" || true
	done

	for f in "${files[@]}"; do
		name=$(basename "$f" .pl)
		section "tap: $f"
		rc=1
		secs=0
		if [ -f "$SCRATCH/tap/$name.rc" ]; then
			read -r rc secs <"$SCRATCH/tap/$name.rc"
		else
			echo "tap: $f did not run" >>"$SCRATCH/tap/$name.out"
		fi
		cat "$SCRATCH/tap/$name.out"
		read -r passed failed skipped < <(count_tap_output "$SCRATCH/tap/$name.out")
		count_broken_run tap "$f" "$rc" "$TAP_FILE_TIMEOUT"
		if [ "$failed" -gt 0 ] && [ -f "$logdir/regress_log_$name" ]; then
			log "--- tail of $logdir/regress_log_$name ---"
			tail -n 60 "$logdir/regress_log_$name"
		fi
		log "($f: $passed passed, $failed failed, $secs s)"
		record_result tap "$passed" "$failed" "$skipped"
	done
	stop_leftover_servers
}

# (e) drivers: the guarantees through psycopg 3, node-postgres and libpq's
# pipeline mode, straight to a server and through PgBouncer in transaction
# pooling, both started by test/drivers/run.sh in the suite's own directory
# (its header says what runs).  Its TAP lines (one per pytest and node
# test) are counted.
run_drivers()
{
	local dir=$SCRATCH/drivers rc=0 passed failed skipped

	section "drivers: psycopg 3, node-postgres, libpq pipeline mode, PgBouncer (test/drivers/run.sh)"
	as_test_user mkdir -p "$dir"
	(cd "$COPY" && as_test_user "PG_CONFIG=$PG_CONFIG" \
		timeout -k 30 "$SUITE_TIMEOUT" test/drivers/run.sh "$dir/work" "$@") \
		>"$dir/run.log" 2>&1 || rc=$?
	cat "$dir/run.log"
	read -r passed failed skipped < <(count_tap_output "$dir/run.log")
	count_broken_run drivers test/drivers/run.sh "$rc" "$SUITE_TIMEOUT"
	record_result drivers "$passed" "$failed" "$skipped"
}

# (e) clients: the client libraries of clients/ (pgfencing for Python, Go
# and Java, pg-fencing for Node), installed or built as their READMEs
# say, tested with pytest, node --test, go test and JUnit 5 against a
# server and a PgBouncer that test/clients/run.sh starts in the suite's
# own directory (its header says what runs).  Its TAP lines, one per
# test, are counted.
run_clients()
{
	local dir=$SCRATCH/clients rc=0 passed failed skipped

	section "clients: pgfencing (pytest), pg-fencing (node --test), Go pgfencing (go test -race), pgfencing for Java (JUnit) (test/clients/run.sh)"
	as_test_user mkdir -p "$dir"
	(cd "$COPY" && as_test_user "PG_CONFIG=$PG_CONFIG" \
		${FENCING_NPM_CACHE:+"FENCING_NPM_CACHE=$FENCING_NPM_CACHE"} \
		timeout -k 30 "$SUITE_TIMEOUT" test/clients/run.sh "$dir/work" "$@") \
		>"$dir/run.log" 2>&1 || rc=$?
	cat "$dir/run.log"
	read -r passed failed skipped < <(count_tap_output "$dir/run.log")
	count_broken_run clients test/clients/run.sh "$rc" "$SUITE_TIMEOUT"
	record_result clients "$passed" "$failed" "$skipped"
}

# (f) chaos: fencing through real Patroni failovers (test/chaos/run.sh
# --short): both modes on one three-node cluster, seeded faults, the
# checker's assertions as TAP lines.  It runs the fencing.so this run
# installed, from a private copy of the server.  Network namespaces need
# root; as another user the suite is skipped.
run_chaos()
{
	local out=$SCRATCH/chaos.log rc=0 passed failed skipped

	section "chaos: short seeded run (test/chaos/run.sh --short)"
	if ! is_root; then
		log "chaos: skipped: its network namespaces need root"
		record_result chaos 0 0 1
		return 0
	fi
	(cd "$COPY" && FENCING_TEST_LOCKED=1 FENCING_SKIP_BUILD=1 \
		CHAOS_RESULTS="$SCRATCH/chaos" \
		timeout -k 30 "$CHAOS_SUITE_TIMEOUT" test/chaos/run.sh --short) \
		>"$out" 2>&1 || rc=$?
	cat "$out"
	read -r passed failed skipped < <(count_tap_output "$out")
	if [ "$rc" -eq 77 ]; then
		record_result chaos 0 0 1
		return 0
	fi
	count_broken_run chaos test/chaos/run.sh "$rc" "$CHAOS_SUITE_TIMEOUT"
	record_result chaos "$passed" "$failed" "$skipped"
}
