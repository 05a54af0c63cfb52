#!/bin/bash
#
# bench/run.sh -- side-by-side benchmarks of the fencing extension
#                 ("make bench"; bench/README.md says how to read the output)
#
# Starts a throwaway PostgreSQL 15 server of its own (as user postgres when
# run as root), or uses the server that PGHOST/PGPORT name, then measures:
#
#   percall   per-call cost of try_lock and next_token next to their raw
#             equivalents and to what users would write instead, 2 and 8
#             clients, and with prepared statements
#   inserver  one statement doing the work many times (tokens, 1000 locks)
#   trigger   protected vs unprotected vs PL/pgSQL-checked UPDATEs
#   scaling   lock+token+commit cycles per second at 1..16 clients
#   durable   tokens/s when every call crosses a reservation, and WAL
#             flushes per million tokens on the normal path
#   leases    a lease's acquire + release cycle next to a transaction's
#             lock cycle, 1 and 8 clients; use_lease next to check_fence
#
# How a ratio is measured: the statements of a group run side by side in
# one run of bench/sidebyside.c, a small libpq client: every connection
# runs all of them in turn, in a fresh random order each round, and times
# each execution with the monotonic clock.  A statement's cost is the mean
# of its executions without the slowest 1 % (on a shared machine mostly a
# process descheduled mid-statement).  A ratio A / B is computed per run,
# from A and B of the same run; BENCH_RUNS runs of BENCH_TIME seconds each,
# and the median of the per-run ratios is reported with their range.
# pgbench is not used for ratios: PostgreSQL 15's pgbench times 14-20 % of
# fast executions as 0 ms on a loaded machine, in every query mode (see
# bench/sidebyside.c), and separate runs of one statement each see
# different load.  The scaling curve and the durable path use pgbench's
# tps only, which counts transactions against the wall clock.
#
# Output: a table, then one line "ratio NAME VALUE" per ratio and one line
# "metric NAME VALUE" per absolute measurement.  Files, under
# bench/results/: summary.txt (that output), readme-table.md (the table of
# doc/performance.md; bench/update-readme.sh copies it in),
# scaling.csv and scaling.png.
#
# Environment:
#   PGHOST/PGPORT      use that server (fencing must be preloaded there);
#                      a scratch database is created and dropped
#   BENCH_TIME         seconds per run of a group (5)
#   BENCH_RUNS         runs per group, median taken (5)
#   BENCH_SCALE_TIME   seconds per point of the scaling curve, per run (2)
#   BENCH_SCALE_RUNS   runs of the scaling curve, median taken (3)
#   BENCH_SECTIONS     subset of "percall inserver trigger scaling durable leases"
#   BENCH_STRICT=1     exit 1 when a target is missed
#   FENCING_TEST_LOCK  the lock file that keeps test runs and benchmarks on
#                      one machine apart (/tmp/fencing-test.lock)
#
# Copyright (c) 2026, the fencing developers

set -euo pipefail

BENCH_DIR=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$BENCH_DIR/.." && pwd)

# A test run installs its own build of fencing.so into the server's library
# directory; one starting mid-benchmark would swap the library under our
# server's next backend (and share our two cores).  Hold the machine's test
# lock, as test/run_all.sh does, unless we use a running server.
TEST_LOCK=${FENCING_TEST_LOCK:-/tmp/fencing-test.lock}
if [ -z "${FENCING_TEST_LOCKED:-}" ] && [ -z "${PGHOST:-}${PGPORT:-}" ] &&
	command -v flock >/dev/null 2>&1; then
	[ -e "$TEST_LOCK" ] || { : >"$TEST_LOCK" && chmod 666 "$TEST_LOCK"; } 2>/dev/null || true
	if ! flock -n "$TEST_LOCK" true 2>/dev/null; then
		echo "bench: waiting for a test run on this machine to finish ($TEST_LOCK) ..." >&2
	fi
	FENCING_TEST_LOCKED=1 exec flock -o "$TEST_LOCK" "$0" "$@"
fi

RESULTS_DIR=${BENCH_RESULTS_DIR:-$BENCH_DIR/results}
BENCH_TIME=${BENCH_TIME:-5}
BENCH_RUNS=${BENCH_RUNS:-5}
BENCH_SCALE_TIME=${BENCH_SCALE_TIME:-2}
BENCH_SCALE_RUNS=${BENCH_SCALE_RUNS:-3}
BENCH_SECTIONS=${BENCH_SECTIONS:-"percall inserver trigger partitions delays semaphores scaling durable leases"}
BENCH_STRICT=${BENCH_STRICT:-0}
SCALING_CLIENTS=${BENCH_SCALING_CLIENTS:-"1 2 4 8 16"}

# The server: PGBIN if given, else PG_MAJOR's, else the newest installed
# Debian server (as make test chooses), else the pg_config on PATH.
if [ -z "${PGBIN:-}" ]; then
	PG_MAJOR=${PG_MAJOR:-$(ls -d /usr/lib/postgresql/*/bin/postgres 2>/dev/null | sort -V | tail -n 1 | cut -d/ -f4)}
	PGBIN=/usr/lib/postgresql/$PG_MAJOR/bin
	[ -x "$PGBIN/postgres" ] || PGBIN=$(pg_config --bindir)
fi

. "$BENCH_DIR/lib.sh"

section_wanted()
{
	case " $BENCH_SECTIONS " in
		*" $1 "*) return 0 ;;
	esac
	return 1
}

# ---------------------------------------------------------------------------
# Tools
# ---------------------------------------------------------------------------

check_tools()
{
	local tool missing=() pkglibdir

	for tool in pgbench psql initdb pg_ctl; do
		[ -x "$PGBIN/$tool" ] || missing+=("$PGBIN/$tool")
	done
	for tool in awk sort mktemp gcc; do
		command -v "$tool" >/dev/null || missing+=("$tool")
	done
	if [ ${#missing[@]} -gt 0 ]; then
		die "missing: ${missing[*]} (Debian: apt-get install postgresql-$PG_MAJOR postgresql-client-$PG_MAJOR gcc libpq-dev)"
	fi

	# Our own server loads the installed fencing.so: it must be this
	# tree's build, or the results would be credited to the wrong commit.
	if [ -z "${PGHOST:-}${PGPORT:-}" ]; then
		pkglibdir=$("$PGBIN/pg_config" --pkglibdir 2>/dev/null || pg_config --pkglibdir)
		[ -f "$pkglibdir/fencing.so" ] ||
			die "fencing.so is not installed; run 'make && make install' (as root) first"
		if [ ! -f "$ROOT/fencing.so" ]; then
			NOTES+=("note: this tree has no fencing.so; the installed build was measured")
		elif ! cmp -s "$ROOT/fencing.so" "$pkglibdir/fencing.so"; then
			die "the installed fencing.so is not this tree's build; run 'make && make install' (as root) first"
		fi
	fi

	# gnuplot draws the scaling chart; it is the one package we install.
	if section_wanted scaling && ! command -v gnuplot >/dev/null; then
		if is_root && command -v apt-get >/dev/null; then
			say "bench: installing gnuplot-nox for the scaling chart"
			DEBIAN_FRONTEND=noninteractive apt-get install -y -q gnuplot-nox >/dev/null 2>&1 ||
				say "bench: could not install gnuplot-nox; the chart will be skipped"
		fi
	fi
}

# The commit measured: short hash, "-dirty" when the tree differs from it.
# bench/results is left out: it holds this script's own output.
tree_commit()
{
	local commit

	commit=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null) || { echo "unknown"; return; }
	if [ -n "$(git -C "$ROOT" status --porcelain -- . ':(exclude)bench/results' 2>/dev/null)" ]; then
		commit="$commit-dirty"
	fi
	echo "$commit"
}

# A path as committed results may show it: relative to the tree when inside.
tree_path()
{
	case $1 in
		"$ROOT"/*) echo "${1#"$ROOT"/}" ;;
		*) echo "$1" ;;
	esac
}

# ---------------------------------------------------------------------------
# Groups of statements measured side by side
# ---------------------------------------------------------------------------

GROUP_NAMES=()
declare -A G_SECTION=() G_CLIENTS=() G_MODE=() G_OPTIONS=() G_SETUP=() \
	G_BEFORE_RUN=() G_TEARDOWN=() G_TIME=() G_KEYS=() S_SQL=() LAT=()
CURRENT_GROUP=

# group NAME [section=S] [clients=N] [mode=simple|extended|prepared]
#            [options=PGOPTIONS] [setup=FUNCTION] [before_run=SQL]
#            [teardown=FUNCTION] [time=SECONDS]
#
# Opens a group: the statements declared next (stmt) run side by side and
# the ratios declared next (ratio) compare them.  setup runs once before
# the group, teardown once after it; before_run before each of its runs.
# time replaces BENCH_TIME for a group whose statements take long.
group()
{
	local name=$1 arg
	shift

	GROUP_NAMES+=("$name")
	CURRENT_GROUP=$name
	G_SECTION[$name]=percall
	G_CLIENTS[$name]=1
	G_MODE[$name]=simple
	G_OPTIONS[$name]=
	G_SETUP[$name]=
	G_BEFORE_RUN[$name]=
	G_TEARDOWN[$name]=
	G_TIME[$name]=$BENCH_TIME
	G_KEYS[$name]=
	for arg in "$@"; do
		case $arg in
			section=*) G_SECTION[$name]=${arg#*=} ;;
			clients=*) G_CLIENTS[$name]=${arg#*=} ;;
			mode=*) G_MODE[$name]=${arg#*=} ;;
			options=*) G_OPTIONS[$name]=${arg#*=} ;;
			setup=*) G_SETUP[$name]=${arg#*=} ;;
			before_run=*) G_BEFORE_RUN[$name]=${arg#*=} ;;
			teardown=*) G_TEARDOWN[$name]=${arg#*=} ;;
			time=*) G_TIME[$name]=${arg#*=} ;;
			*) die "group $name: unknown argument $arg" ;;
		esac
	done
}

# stmt KEY SQL: a statement of the current group.  ":n" in SQL is a random
# integer from 1 to 100000, drawn for each execution.
stmt()
{
	G_KEYS[$CURRENT_GROUP]+=" $1"
	S_SQL[$CURRENT_GROUP:$1]=$2
}

group_has()
{
	case " ${G_KEYS[$1]} " in
		*" $2 "*) return 0 ;;
	esac
	return 1
}

# sidebyside GROUP CLIENTS SECONDS SQL...: bench/sidebyside.c with the
# group's protocol and server options (PGOPTIONS).
sidebyside()
{
	local group=$1 clients=$2 seconds=$3
	shift 3

	PGOPTIONS="${PGOPTIONS-} ${G_OPTIONS[$group]}" \
		"$SIDEBYSIDE" "$clients" "$seconds" "${G_MODE[$group]}" "$@"
}

build_sidebyside()
{
	local includedir

	SIDEBYSIDE=$WORK/sidebyside
	includedir=$("$PGBIN/pg_config" --includedir 2>/dev/null || pg_config --includedir)
	if ! gcc -O2 -Wall -Wextra -Werror -I"$includedir" "$BENCH_DIR/sidebyside.c" \
		-o "$SIDEBYSIDE" -lpq -lm >"$WORK/sidebyside.build" 2>&1; then
		cat "$WORK/sidebyside.build" >&2
		die "could not build bench/sidebyside.c (Debian: apt-get install gcc libpq-dev)"
	fi
}

# The no-op C row trigger of the partition groups (bench/noop_trigger.c),
# built against the server's headers into the scratch directory; without
# it those groups are skipped.
build_noop_trigger()
{
	local includedir

	NOOP_TRIGGER=$WORK/noop_trigger.so
	includedir=$("$PGBIN/pg_config" --includedir-server 2>/dev/null || pg_config --includedir-server)
	if ! gcc -O2 -fPIC -shared -Wall -Werror -I"$includedir" "$BENCH_DIR/noop_trigger.c" \
		-o "$NOOP_TRIGGER" >"$WORK/noop_trigger.build" 2>&1; then
		NOTES+=("note: bench/noop_trigger.c did not build: $(head -1 "$WORK/noop_trigger.build")")
		NOOP_TRIGGER=
	fi
	chmod 755 "$NOOP_TRIGGER" 2>/dev/null || true
}

# Measures the statements of GROUP side by side, BENCH_RUNS runs of
# BENCH_TIME seconds: LAT[group:key:run], the trimmed mean time (ms) of one
# execution.  A statement that fails when tried alone (a function this
# build lacks) is dropped with a note, and so are the ratios that need it.
measure_group()
{
	local group=$1 key run out i
	local -a keys kept=() sqls=() fields

	if [ -n "${G_SETUP[$group]}" ] && ! ${G_SETUP[$group]} >"$WORK/$group.setup" 2>&1; then
		NOTES+=("skipped: $group: ${G_SETUP[$group]} failed: $(grep -m1 ERROR "$WORK/$group.setup" || true)")
		G_KEYS[$group]=
		return 0
	fi
	read -r -a keys <<<"${G_KEYS[$group]}"
	for key in "${keys[@]}"; do
		if sidebyside "$group" 1 0 "${S_SQL[$group:$key]}" >/dev/null 2>"$WORK/$group.$key.probe"; then
			kept+=("$key")
			sqls+=("${S_SQL[$group:$key]}")
		else
			NOTES+=("skipped: $group/$key: $(grep -m1 -E 'ERROR|error|failed' "$WORK/$group.$key.probe" || true)")
		fi
	done
	G_KEYS[$group]="${kept[*]}"
	[ ${#kept[@]} -gt 0 ] || return 0

	for run in $(seq 1 "$BENCH_RUNS"); do
		if [ -n "${G_BEFORE_RUN[$group]}" ]; then
			sql -c "${G_BEFORE_RUN[$group]}" >/dev/null
		fi
		say "bench: $group run $run/$BENCH_RUNS (${#kept[@]} statements side by side, ${G_CLIENTS[$group]} clients, ${G_TIME[$group]}s)"
		out=$WORK/$group.run$run.out
		if ! sidebyside "$group" "${G_CLIENTS[$group]}" "${G_TIME[$group]}" "${sqls[@]}" >"$out" 2>&1; then
			cat "$out" >&2
			die "bench/sidebyside.c failed in group $group"
		fi
		# lines "INDEX EXECUTIONS MEAN_MS TRIMMED_MEAN_MS", in order
		i=0
		while read -r -a fields; do
			LAT[$group:${kept[$i]}:$run]=${fields[3]}
			i=$((i + 1))
		done <"$out"
		[ "$i" -eq ${#kept[@]} ] || { cat "$out" >&2; die "bench/sidebyside.c: $i lines for ${#kept[@]} statements in $group"; }
	done
}

# Median of the numbers on stdin.
median()
{
	sort -g | awk '{ v[NR] = $1 } END {
		if (NR == 0) { print "nan"; exit }
		if (NR % 2) print v[(NR + 1) / 2]
		else printf "%.6g\n", (v[NR / 2] + v[NR / 2 + 1]) / 2
	}'
}

# Median time (ms) of one execution of GROUP's statement KEY.
median_latency()
{
	local group=$1 key=$2 run

	for run in $(seq 1 "$BENCH_RUNS"); do
		echo "${LAT[$group:$key:$run]}"
	done | median
}

# The per-run ratios time(A) / time(B), one a line.
run_ratios()
{
	local group=$1 a=$2 b=$3 run

	for run in $(seq 1 "$BENCH_RUNS"); do
		awk -v a="${LAT[$group:$a:$run]}" -v b="${LAT[$group:$b:$run]}" \
			'BEGIN { printf "%.4f\n", a / b }'
	done
}

# pgbench SCRIPT OUT CLIENTS MODE [pgbench arguments...]: one pgbench run,
# for the sections that count transactions (tps) only.
run_pgbench()
{
	local script=$1 out=$2 clients=$3 mode=$4 threads
	shift 4

	threads=$((clients < 2 ? clients : 2))
	"$PGBIN/pgbench" -n -M "$mode" -c "$clients" -j "$threads" -f "$script" "$@" >"$out" 2>&1
}

pgbench_tps()
{
	awk '/^tps = / { print $3; exit }' "$1"
}

# ---------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------

RATIO_NAMES=()
declare -A R_GROUP=() R_A=() R_B=() R_TARGET=() R_DESC=()
FIGURE_NAMES=()
declare -A F_VALUE=() F_DESC=()
NOTES=()
MISSED=0

# ratio NAME A B TARGET DESCRIPTION [GROUP]
#
# A / B, the time of statement A over the time of statement B of the
# current group (or of GROUP).  TARGET is "<= X", or "-" for a contrast row (no target:
# it explains another row).  DESCRIPTION is Markdown: it is the row's
# "comparison" in README.md.
ratio()
{
	RATIO_NAMES+=("$1")
	R_GROUP[$1]=${6:-$CURRENT_GROUP}
	R_A[$1]=$2
	R_B[$1]=$3
	R_TARGET[$1]=$4
	R_DESC[$1]=$5
}

# derived NAME R1 R2 TARGET DESCRIPTION: the ratio R1 over the ratio R2,
# each measured side by side in its own group, for what no one group can
# hold (a lease count that differs); TARGET as for ratio.
DERIVED_NAMES=()
declare -A D_R1=() D_R2=()
derived()
{
	DERIVED_NAMES+=("$1")
	D_R1[$1]=$2
	D_R2[$1]=$3
	R_TARGET[$1]=$4
	R_DESC[$1]=$5
}

# figure NAME VALUE DESCRIPTION: an absolute measurement for the report and
# the README's table ("metric NAME VALUE" line; VALUE may carry a unit
# after a space, left out of that line).
figure()
{
	FIGURE_NAMES+=("$1")
	F_VALUE[$1]=$2
	F_DESC[$1]=$3
}

METRIC_LINES=()
metric()
{
	METRIC_LINES+=("metric $1 $2")
}

# Fills RESULT_* for every ratio whose statements were measured.
declare -A RESULT_VALUE=() RESULT_RANGE=() RESULT_A=() RESULT_B=() RESULT_VERDICT=()
REPORTED=()
evaluate_ratios()
{
	local name group a b values

	for name in "${RATIO_NAMES[@]}"; do
		group=${R_GROUP[$name]}
		a=${R_A[$name]}
		b=${R_B[$name]}
		section_wanted "${G_SECTION[$group]}" || continue
		if ! group_has "$group" "$a" || ! group_has "$group" "$b"; then
			NOTES+=("skipped: ratio $name (needs $group/$a and $group/$b)")
			continue
		fi
		values=$(run_ratios "$group" "$a" "$b")
		RESULT_VALUE[$name]=$(median <<<"$values")
		RESULT_RANGE[$name]=$(sort -g <<<"$values" | awk 'NR == 1 { lo = $1 } { hi = $1 } END { printf "%.2f-%.2f", lo, hi }')
		RESULT_A[$name]=$(median_latency "$group" "$a")
		RESULT_B[$name]=$(median_latency "$group" "$b")
		if [ "${R_TARGET[$name]}" = "-" ]; then
			RESULT_VERDICT[$name]=contrast
		elif awk -v v="${RESULT_VALUE[$name]}" -v t="${R_TARGET[$name]#<= }" 'BEGIN { exit !(v <= t) }'; then
			RESULT_VERDICT[$name]=met
		else
			RESULT_VERDICT[$name]=MISSED
			MISSED=$((MISSED + 1))
		fi
		REPORTED+=("$name")
	done
	for name in "${DERIVED_NAMES[@]}"; do
		local r1=${D_R1[$name]} r2=${D_R2[$name]}
		if [ -z "${RESULT_VALUE[$r1]:-}" ] || [ -z "${RESULT_VALUE[$r2]:-}" ]; then
			NOTES+=("skipped: ratio $name (needs $r1 and $r2)")
			continue
		fi
		RESULT_VALUE[$name]=$(awk -v a="${RESULT_VALUE[$r1]}" -v b="${RESULT_VALUE[$r2]}" 'BEGIN { printf "%.4f", a / b }')
		RESULT_RANGE[$name]=$(awk -v a="${RESULT_RANGE[$r1]}" -v b="${RESULT_RANGE[$r2]}" 'BEGIN {
			split(a, x, "-"); split(b, y, "-"); printf "%.2f-%.2f", x[1] / y[2], x[2] / y[1] }')
		RESULT_A[$name]=${RESULT_A[$r1]}
		RESULT_B[$name]=${RESULT_A[$r2]}
		if awk -v v="${RESULT_VALUE[$name]}" -v t="${R_TARGET[$name]#<= }" 'BEGIN { exit !(v <= t) }'; then
			RESULT_VERDICT[$name]=met
		else
			RESULT_VERDICT[$name]=MISSED
			MISSED=$((MISSED + 1))
		fi
		REPORTED+=("$name")
	done
}

print_report()
{
	local name width=5 value

	for name in "${REPORTED[@]}"; do
		[ ${#name} -gt $width ] && width=${#name}
	done
	echo "fencing benchmarks: $RUN_DATE, commit $RUN_COMMIT, PostgreSQL $PG_VERSION, $RUN_CPUS CPUs"
	echo "the statements of a group side by side (bench/sidebyside.c): $BENCH_RUNS runs x ${BENCH_TIME}s;"
	echo "A and B: ms per execution, the slowest 1 % left out, median of the runs;"
	echo "A / B: the median of the per-run ratios, their range after it"
	echo
	printf "%-${width}s %9s %9s %7s  %-9s  %-7s %s\n" ratio "A ms" "B ms" "A / B" "range" target verdict
	for name in "${REPORTED[@]}"; do
		printf "%-${width}s %9.4f %9.4f %7.3f  %-9s  %-7s %s\n" "$name" \
			"${RESULT_A[$name]}" "${RESULT_B[$name]}" "${RESULT_VALUE[$name]}" \
			"${RESULT_RANGE[$name]}" "${R_TARGET[$name]}" "${RESULT_VERDICT[$name]}"
		printf '    %s\n' "${R_DESC[$name]}"
	done
	if [ ${#FIGURE_NAMES[@]} -gt 0 ]; then
		echo
		for name in "${FIGURE_NAMES[@]}"; do
			printf '%s: %s\n' "${F_DESC[$name]}" "${F_VALUE[$name]}"
		done
	fi
	if [ ${#NOTES[@]} -gt 0 ]; then
		echo
		printf '%s\n' "${NOTES[@]}"
	fi
	echo
	for name in "${REPORTED[@]}"; do
		echo "ratio $name ${RESULT_VALUE[$name]}"
	done
	[ ${#METRIC_LINES[@]} -gt 0 ] && printf '%s\n' "${METRIC_LINES[@]}"
	return 0
}

# The table of doc/performance.md (bench/update-readme.sh copies it in;
# test/t/092_readme_bench.pl checks that it did).
print_readme_table()
{
	local name target verdict

	echo "| comparison | ratio | target | verdict |"
	echo "|---|---|---|---|"
	for name in "${REPORTED[@]}"; do
		target=${R_TARGET[$name]}
		case $target in
			-) target="—" ;;
			*) target="≤ ${target#<= }" ;;
		esac
		verdict=${RESULT_VERDICT[$name]}
		[ "$verdict" = MISSED ] && verdict="**missed**"
		printf '| %s | %.3f (%s) | %s | %s |\n' "${R_DESC[$name]}" "${RESULT_VALUE[$name]}" \
			"${RESULT_RANGE[$name]/-/–}" "$target" "$verdict"
	done
	for name in "${FIGURE_NAMES[@]}"; do
		printf '| %s | %s | — | figure |\n' "${F_DESC[$name]}" "${F_VALUE[$name]}"
	done
	echo
	echo "Measured $RUN_DATE on $RUN_COMMIT, PostgreSQL $PG_VERSION, $RUN_CPUS CPUs, by make bench"
}

# ---------------------------------------------------------------------------
# The comparisons: the one place to add one.  A new statement goes into a
# group (stmt), a new comparison is a ratio line after it; a group of its
# own when it needs other clients, a protocol or setup.  Targets come from
# the issues (2, 3, 4, 6); "-" marks a contrast row, which explains others.
# ---------------------------------------------------------------------------

# A random name per execution: 100000 names, so clients practically never
# contend and the lock is always granted.  ":n" is the random number, in
# bench/sidebyside.c and in pgbench (after NAME_PREAMBLE), which both put
# the number into the literal itself, so that the name is one constant:
# building it ('invoice-run:' || :n) costs the planner more than the lock
# itself (text || integer is anytextcat(), an SQL function it inlines; a
# cast folds through a throw-away executor), and twice in a statement that
# names the lock twice.  Groups using NAME run the simple protocol: in the
# others :n becomes $1, a parameter, which cannot stand inside quotes.
NAME_PREAMBLE='\set n random(1, 100000)'
NAME="'invoice-run-:n'"
RAW_LOCK="pg_try_advisory_xact_lock(hashtextextended($NAME, 0))"
# What a user without the extension might write: an approximate
# normalisation and a sequence for the token.
EMULATED_LOCK="pg_try_advisory_xact_lock(hashtextextended(lower(btrim(normalize($NAME, NFKC))), 0)) AND nextval('bench_seq') > 0"

# Each per-call statement is its own (autocommit) transaction, so the
# transaction-scoped locks are released after each one, for both sides
# alike.  fencing warns about a lock taken that way; with these options the
# warning is neither sent nor (on the bench's own server) logged, so what
# is measured is the lock.
QUIET="-c client_min_messages=error"

define_benchmarks()
{
	local c

	for c in 2 8; do
		group percall_c$c section=percall clients=$c options="$QUIET"
		stmt select_1 "SELECT 1;"
		stmt select_1_again "SELECT 1;"
		stmt trivial "SELECT pg_backend_pid();"
		stmt next_token "SELECT fencing.next_token();"
		stmt nextval "SELECT nextval('bench_seq');"
		stmt raw_lock "SELECT $RAW_LOCK;"
		stmt try_lock "SELECT fencing.try_lock($NAME);"
		stmt sql_lock "SELECT $EMULATED_LOCK;"
		ratio noise_percall_c$c select_1_again select_1 "-" \
			"\`SELECT 1\` / \`SELECT 1\`, the same statement twice: how far apart equal costs read, $c clients"
		ratio try_lock_percall_c$c try_lock raw_lock "<= 1.05" \
			"\`fencing.try_lock(name)\` / \`pg_try_advisory_xact_lock(hashtextextended(name, 0))\`, per call, $c clients"
		ratio try_lock_vs_sql_percall_c$c try_lock sql_lock "-" \
			"\`fencing.try_lock(name)\` / the same in SQL (normalize, hash, advisory lock, \`nextval\`), per call, $c clients"
		ratio next_token_percall_c$c next_token select_1 "<= 1.10" \
			"\`fencing.next_token()\` / \`SELECT 1\`, per call, $c clients"
		ratio trivial_function_percall_c$c trivial select_1 "-" \
			"\`pg_backend_pid()\` / \`SELECT 1\` (what calling any function costs), per call, $c clients"
		ratio next_token_vs_trivial_percall_c$c next_token trivial "-" \
			"\`fencing.next_token()\` / \`pg_backend_pid()\`, per call, $c clients"
		ratio next_token_vs_nextval_percall_c$c next_token nextval "-" \
			"\`fencing.next_token()\` / \`nextval('seq')\`, per call, $c clients"
	done

	# The token call as drivers with prepared statements send it: no
	# parsing or planning per call.
	group percall_prepared_c2 section=percall clients=2 mode=prepared
	stmt select_1 "SELECT 1;"
	stmt trivial "SELECT pg_backend_pid();"
	stmt next_token "SELECT fencing.next_token();"
	ratio next_token_percall_prepared_c2 next_token select_1 "-" \
		"\`fencing.next_token()\` / \`SELECT 1\`, per call, prepared statements, 2 clients"
	ratio trivial_function_percall_prepared_c2 trivial select_1 "-" \
		"\`pg_backend_pid()\` / \`SELECT 1\`, per call, prepared statements, 2 clients"

	# Leases that outlive a transaction: a whole acquire + release cycle
	# (two clients that draw the same name rarely meet: the one refused
	# releases nothing, as a busy try_lock takes nothing) next to a
	# transaction's lock cycle, one round trip each (the simple
	# protocol sends the three statements of the transaction in one
	# message), and next to the same statement shape with two calls that do
	# next to nothing; and use_lease, the first statement of a holder's batch,
	# next to check_fence, which it calls, in a transaction that commits
	# the raised fence (a WAL flush on both sides).
	for c in 1 8; do
		group lease_cycle_c$c section=leases clients=$c options="$QUIET"
		stmt lease_cycle "SELECT fencing.release_lease($NAME, coalesce(fencing.acquire_lease($NAME, '1 minute'), 0));"
		stmt lock_cycle "BEGIN; SELECT fencing.try_lock($NAME); COMMIT;"
		stmt two_calls "SELECT fencing.lock_key($NAME) = fencing.lock_key($NAME);"
		ratio lease_cycle_c$c lease_cycle lock_cycle "<= 1.10" \
			"\`release_lease(name, acquire_lease(name, ttl))\` / \`BEGIN; try_lock(name); COMMIT\`, per cycle, $c clients"
		ratio lease_cycle_vs_two_calls_c$c lease_cycle two_calls "-" \
			"\`release_lease(name, acquire_lease(name, ttl))\` / \`lock_key(name) = lock_key(name)\` (the same statement with two calls that do next to nothing), $c clients"
	done
	# The same cycle without the statement around it: what the lease itself
	# costs next to a lock, where parsing and planning a call with
	# defaulted arguments does not count.
	group lease_cycle_inserver section=leases clients=1 options="$QUIET"
	stmt lease_cycle "SELECT count(fencing.release_lease('k' || i, fencing.acquire_lease('k' || i, '1 minute'))) FROM generate_series(1, 1000) i;"
	stmt try_lock "SELECT count(fencing.try_lock('k' || i)) FROM generate_series(1, 1000) i;"
	ratio lease_cycle_inserver_vs_try_lock lease_cycle try_lock "-" \
		"1000 \`release_lease(name, acquire_lease(name, ttl))\` in one statement / 1000 \`try_lock(name)\`"
	# Each lease call alone, as a driver sends it: bound parameters,
	# autocommit, one client, next to core's one-statement lock.  The
	# acquired lease lapses a millisecond later and the keeper drops it, so
	# that acquisitions never pile up; the renewed lease is held for the
	# whole group (its token is put into the statement by the setup).  A
	# release alone needs a lease of its own each time: its cost is the
	# cycle's (above) less an acquisition.
	group lease_calls section=leases clients=1 mode=extended options="$QUIET" \
		setup=setup_lease_calls
	stmt raw_lock "SELECT pg_try_advisory_xact_lock(hashtextextended(:n, 0));"
	stmt acquire "SELECT fencing.acquire_lease(:n, '1 millisecond');"
	stmt acquire_all_args "SELECT fencing.acquire_lease(:n, '1 millisecond', NULL, NULL);"
	stmt renew "SELECT fencing.renew_lease('bench renew', @RENEW_TOKEN@);"
	ratio acquire_lease_vs_raw acquire raw_lock "<= 1.10" \
		"\`acquire_lease(name, ttl)\` / \`pg_try_advisory_xact_lock(hashtextextended(name, 0))\`, per call, bound parameters, 1 client"
	ratio acquire_lease_all_args_vs_raw acquire_all_args raw_lock "-" \
		"\`acquire_lease(name, ttl, NULL, NULL)\` (every argument given, as the clients send it: no default read back) / the raw lock, per call, bound parameters, 1 client"
	ratio renew_lease_vs_raw renew raw_lock "<= 1.10" \
		"\`renew_lease(name, token)\` / \`pg_try_advisory_xact_lock(hashtextextended(name, 0))\`, per call, bound parameters, 1 client"

	# The cost of a lease change with many leases held: the acquire +
	# release cycle next to the raw lock (which no lease count touches),
	# 4 clients, with 100 other leases held and with 50,000; the two
	# ratios divided (lease_cycle_50000_vs_100) say how much the cycle
	# slows at that size.
	for n in 100 50000; do
		group lease_scale_$n section=leases clients=4 options="$QUIET" \
			setup="setup_leases_held $n" teardown=teardown_leases_held
		stmt lease_cycle "SELECT fencing.release_lease($NAME, coalesce(fencing.acquire_lease($NAME, '1 minute'), 0));"
		stmt raw_lock "SELECT $RAW_LOCK;"
		ratio lease_cycle_${n}_held lease_cycle raw_lock "-" \
			"\`release_lease(name, acquire_lease(name, ttl))\` / the raw lock, 4 clients, with $n other leases held"
	done
	derived lease_cycle_50000_vs_100 lease_cycle_50000_held lease_cycle_100_held "<= 1.11" \
		"the lease cycle's cost with 50,000 other leases held / with 100 (each next to the raw lock): at most 10 % slower, at least 0.90 of the cycles per second"

	group lease_use section=leases clients=1 setup=setup_bench_lease
	stmt use_lease "BEGIN; SELECT fencing.use_lease('bench lease', (SELECT token FROM fencing.leases WHERE name = 'bench lease')); COMMIT;"
	stmt check_fence "BEGIN; SELECT fencing.check_fence('bench lease', (SELECT token FROM fencing.leases WHERE name = 'bench lease')); COMMIT;"
	ratio use_lease_vs_check_fence use_lease check_fence "<= 1.10" \
		"\`BEGIN; use_lease(name, token); COMMIT\` / \`BEGIN; check_fence(name, token); COMMIT\`, per call, 1 client"

	group inserver_tokens section=inserver clients=1
	stmt next_token "SELECT count(fencing.next_token()) FROM generate_series(1, 100000);"
	stmt trivial "SELECT count(pg_backend_pid()) FROM generate_series(1, 100000);"
	stmt nextval "SELECT count(nextval('bench_seq')) FROM generate_series(1, 100000);"
	ratio next_token_inserver_vs_trivial next_token trivial "<= 1.5" \
		"100,000 \`next_token()\` in one statement / 100,000 \`pg_backend_pid()\`"
	ratio next_token_inserver_vs_nextval next_token nextval "<= 0.5" \
		"100,000 \`next_token()\` in one statement / 100,000 \`nextval()\`"

	group inserver_locks section=inserver clients=1 options="$QUIET"
	stmt try_lock "SELECT count(fencing.try_lock('k' || i)) FROM generate_series(1, 1000) i;"
	stmt raw_lock "SELECT count(pg_try_advisory_xact_lock(hashtextextended('k' || i, 0))) FROM generate_series(1, 1000) i;"
	stmt sql_lock "SELECT count(pg_try_advisory_xact_lock(hashtextextended(lower(btrim(normalize('k' || i, NFKC))), 0)) AND nextval('bench_seq') > 0) FROM generate_series(1, 1000) i;"
	ratio try_lock_inserver_vs_raw try_lock raw_lock "<= 1.5" \
		"1000 \`try_lock()\` in one statement / 1000 raw advisory locks + hash"
	ratio sql_emulation_inserver_vs_raw sql_lock raw_lock "-" \
		"1000 locks in SQL (normalize, hash, advisory lock, \`nextval\`) in one statement / 1000 raw"
	ratio try_lock_inserver_vs_sql_emulation try_lock sql_lock "-" \
		"1000 \`try_lock()\` in one statement / 1000 locks in SQL"

	# 1.1: a group of 3 names, and a semaphore of 3 permits (a name's
	# permits are apart from the lock of the same name)
	group inserver_groups section=inserver clients=1 options="$QUIET"
	stmt try_lock_all3 "SELECT count(fencing.try_lock_all(ARRAY['a' || i, 'b' || i, 'c' || i])) FROM generate_series(1, 300) i;"
	stmt try_lock "SELECT count(fencing.try_lock('a' || i)) FROM generate_series(1, 300) i;"
	stmt try_acquire3 "SELECT count(fencing.try_acquire('a' || i, 3)) FROM generate_series(1, 300) i;"
	ratio try_lock_all3_inserver_vs_try_lock try_lock_all3 try_lock "<= 3.3" \
		"300 \`try_lock_all(3 names)\` in one statement / 300 \`try_lock()\`"
	ratio try_acquire3_inserver_vs_try_lock try_acquire3 try_lock "<= 1.2" \
		"300 \`try_acquire(name, 3)\`, all permits free, in one statement / 300 \`try_lock()\`"

	# synchronous_commit = off, so the commit's WAL flush does not bury the
	# trigger's cost; every UPDATE sets the fence to the row's current
	# value (equal is allowed), so every row passes through the check.
	group trigger_row section=trigger clients=1 options="-c synchronous_commit=off" \
		setup=setup_trigger_tables \
		before_run="VACUUM row_plain, row_fenced, row_ctrigger"
	stmt fenced "UPDATE row_fenced SET balance = balance + 1, fence = 1000 WHERE id = :n;"
	stmt plain "UPDATE row_plain SET balance = balance + 1, fence = 1000 WHERE id = :n;"
	stmt any_c_trigger "UPDATE row_ctrigger SET balance = balance + 1, fence = 1000 WHERE id = :n;"
	ratio trigger_row_vs_plain fenced plain "<= 1.03" \
		"single-row UPDATE, protected / unprotected table"
	ratio trigger_row_vs_any_c_trigger fenced any_c_trigger "-" \
		"single-row UPDATE, \`reject_stale\` / \`suppress_redundant_updates_trigger\` (any BEFORE ROW C trigger)"
	ratio any_c_trigger_row_vs_plain any_c_trigger plain "-" \
		"single-row UPDATE, \`suppress_redundant_updates_trigger\` / no trigger (what any BEFORE ROW trigger costs)"

	group trigger_bulk section=trigger clients=1 options="-c synchronous_commit=off" \
		before_run="VACUUM bulk_plain, bulk_fenced, bulk_plpgsql, bulk_ctrigger"
	stmt fenced "UPDATE bulk_fenced SET balance = balance + 1, fence = 1000;"
	stmt plain "UPDATE bulk_plain SET balance = balance + 1, fence = 1000;"
	stmt plpgsql "UPDATE bulk_plpgsql SET balance = balance + 1, fence = 1000;"
	stmt any_c_trigger "UPDATE bulk_ctrigger SET balance = balance + 1, fence = 1000;"
	ratio trigger_bulk_vs_plain fenced plain "<= 1.10" \
		"5000-row UPDATE, protected / unprotected table"
	ratio trigger_bulk_vs_plpgsql fenced plpgsql "<= 0.75" \
		"5000-row UPDATE, \`reject_stale\` / the same check as a PL/pgSQL trigger"
	ratio trigger_bulk_vs_any_c_trigger fenced any_c_trigger "-" \
		"5000-row UPDATE, \`reject_stale\` / \`suppress_redundant_updates_trigger\` (any BEFORE ROW C trigger)"
	ratio any_c_trigger_bulk_vs_plain any_c_trigger plain "-" \
		"5000-row UPDATE, \`suppress_redundant_updates_trigger\` / no trigger (what any BEFORE ROW trigger costs)"

	# Partitioned tables: 200,000 rows inserted with fencing.token set,
	# leaving the fence column out (the statement computes it with
	# token_in_force(), src/fence/stamp.c) through hash partitioning, which
	# sends consecutive rows to different partitions; and the same rows
	# carrying their fence.  Each partition fires its own clone of the
	# parent's trigger.  The floor is the same INSERT through a C row
	# trigger that hands the row back unchanged; the stamp trigger shows
	# what filling the column in a row trigger costs (a new tuple per row,
	# which the executor copies into its slot).
	# ROLLBACK keeps the tables empty; VACUUM before each run reclaims the
	# space.
	for c in 1 32 128; do
		group partitions_p$c section=partitions clients=1 time=15 \
			options="-c synchronous_commit=off" setup="setup_partition_tables $c" \
			before_run="VACUUM part_plain_$c, part_fenced_$c, part_noop_$c, part_stamp_$c"
		stmt fenced "BEGIN; SET LOCAL fencing.token = 1000; INSERT INTO part_fenced_$c SELECT i, 0 FROM generate_series(1, 200000) i; ROLLBACK;"
		stmt noop "BEGIN; SET LOCAL fencing.token = 1000; INSERT INTO part_noop_$c SELECT i, 0 FROM generate_series(1, 200000) i; ROLLBACK;"
		stmt plain "BEGIN; SET LOCAL fencing.token = 1000; INSERT INTO part_plain_$c SELECT i, 0 FROM generate_series(1, 200000) i; ROLLBACK;"
		stmt fenced_given "BEGIN; INSERT INTO part_fenced_$c SELECT i, 0, 1000 FROM generate_series(1, 200000) i; ROLLBACK;"
		stmt stamp "BEGIN; SET LOCAL fencing.token = 1000; INSERT INTO part_stamp_$c SELECT i, 0 FROM generate_series(1, 200000) i; ROLLBACK;"
		ratio partitions_insert_vs_noop_p$c fenced noop "<= 1.10" \
			"INSERT of 200,000 rows with \`fencing.token\` set, $c hash partition$([ "$c" = 1 ] || echo s), protected / a no-op C BEFORE ROW trigger"
		ratio partitions_insert_vs_plain_p$c fenced plain "-" \
			"INSERT of 200,000 rows with \`fencing.token\` set, $c hash partition$([ "$c" = 1 ] || echo s), protected / no trigger"
		ratio partitions_insert_vs_stamp_p$c fenced stamp "-" \
			"INSERT of 200,000 rows with \`fencing.token\` set, $c hash partition$([ "$c" = 1 ] || echo s), protected / a C BEFORE ROW trigger that only fills in the fence column"
		ratio partitions_insert_given_vs_noop_p$c fenced_given noop "-" \
			"INSERT of 200,000 rows that carry their fence (nothing to stamp), $c hash partition$([ "$c" = 1 ] || echo s), protected / the no-op C trigger with \`fencing.token\` set"
	done

	# Lock-delays of other names: 2,000 in this database and 2,000 in
	# another, each lasting an hour; the names locked are never delayed.
	# try_lock next to the raw advisory lock, which no delay concerns: the
	# per-call rows put the two within 1 % of each other without delays.
	group delays_4000 section=delays clients=4 options="$QUIET" \
		setup=setup_lock_delays
	stmt try_lock "SELECT fencing.try_lock($NAME);"
	stmt raw_lock "SELECT $RAW_LOCK;"
	ratio try_lock_4000_delays_vs_raw try_lock raw_lock "<= 1.05" \
		"\`fencing.try_lock(name)\` on free names with 4,000 lock-delays of other names (half of them in another database) / \`pg_try_advisory_xact_lock(hashtextextended(name, 0))\`, per call, 4 clients"
	# the same in one statement, 1000 names per client, where the round
	# trip no longer hides what a grant pays per delay in the table (a
	# group of its own: next to statements this long, the per-call ones
	# would measure the wait for a CPU)
	group delays_4000_inserver section=delays clients=4 options="$QUIET" \
		teardown=teardown_lock_delays
	stmt try_lock_1000 "SELECT count(fencing.try_lock('k' || i || ':' || pg_backend_pid())) FROM generate_series(1, 1000) i;"
	stmt raw_lock_1000 "SELECT count(pg_try_advisory_xact_lock(hashtextextended('k' || i || ':' || pg_backend_pid(), 0))) FROM generate_series(1, 1000) i;"
	ratio try_lock_inserver_4000_delays_vs_raw try_lock_1000 raw_lock_1000 "-" \
		"1000 \`try_lock()\` in one statement with 4,000 lock-delays of other names / 1000 raw advisory locks + hash, 4 clients"

	# Lock-delays made as a lost holder makes them, and grants of free
	# names in a transaction (BEGIN; try_lock; COMMIT), 4 clients, next to
	# the same with the raw lock.  Three ways to lose holders: one session
	# of the clients' own role, in their database, that disconnects inside
	# its transaction holding 4,000 locks; 4,000 leases of that role that
	# lapsed; and another role whose delays no longer fit the table, so
	# that they are folded into delays of every lock of that role.
	for way in disconnect lapsed folded; do
		group delays_$way section=delays clients=4 options="$QUIET" \
			setup="setup_delays_$way" teardown=teardown_delays
		stmt try_lock_tx "BEGIN; SELECT fencing.try_lock($NAME); COMMIT;"
		stmt raw_lock_tx "BEGIN; SELECT $RAW_LOCK; COMMIT;"
	done
	ratio try_lock_after_disconnect_vs_raw try_lock_tx raw_lock_tx "<= 1.05" \
		"\`BEGIN; try_lock(name); COMMIT\` on free names / the same with the raw lock, 4 clients, with 4,000 lock-delays left by a session of the same role that disconnected inside its transaction" \
		delays_disconnect
	ratio try_lock_after_lapses_vs_raw try_lock_tx raw_lock_tx "<= 1.05" \
		"\`BEGIN; try_lock(name); COMMIT\` on free names / the same with the raw lock, 4 clients, with 4,000 lapsed leases of the same role under their lock-delay" \
		delays_lapsed
	ratio try_lock_after_folds_vs_raw try_lock_tx raw_lock_tx "<= 1.05" \
		"\`BEGIN; try_lock(name); COMMIT\` on free names / the same with the raw lock, 4 clients, while another role's 4,200 lost locks are folded into delays of that role" \
		delays_folded

	# A semaphore of 64 permits, every one held by another session, next
	# to one of 64 permits of which one is held: a try on the first finds
	# them all busy, a try on the second gets the second permit.
	group semaphores_full section=semaphores clients=1 options="$QUIET" \
		setup=setup_semaphore_holders teardown=teardown_semaphore_holders
	stmt full "SELECT fencing.try_acquire('sem-full', 64);"
	stmt one_taken "SELECT fencing.try_acquire('sem-one', 64);"
	ratio try_acquire_full_vs_one_taken full one_taken "<= 1.5" \
		"\`try_acquire(name, 64)\` with all 64 permits held / with 1 of 64 held, per call"

	# 50 sessions wait for permits of other semaphores, whose keys share
	# the low 6 bits with "pp-crowded" (so that a wake-up chosen by those
	# bits would reach them), none with "pp-alone".  Each statement takes
	# and frees a permit of its semaphore; 2 clients, so a release often
	# hands the permit to the other client waiting for it.
	group semaphores_wake section=semaphores clients=2 options="$QUIET" \
		setup=setup_semaphore_waiters teardown=teardown_semaphore_waiters
	stmt crowded "SELECT fencing.acquire('pp-crowded', 1);"
	stmt alone "SELECT fencing.acquire('pp-alone', 1);"
	ratio acquire_release_50_waiters_vs_none crowded alone "<= 1.05" \
		"\`acquire(name, 1)\` and its release, 2 clients, with 50 sessions waiting for other semaphores whose keys share the low bits / with none"
}

# The lease the lease_calls group renews, for longer than any run, its
# token written into the renew statement; room for the leases its
# acquisitions leave behind for a millisecond.
setup_lease_calls()
{
	local token

	token=$(sql -c "SELECT fencing.break_lease('bench renew')" \
		-c "SELECT fencing.acquire_lease('bench renew', '1 day')" | tail -n 1) || return 1
	[ -n "$token" ] || return 1
	S_SQL[lease_calls:renew]=${S_SQL[lease_calls:renew]/@RENEW_TOKEN@/$token}
}

# N leases held by the bench for longer than any run, besides the names
# the statements take; the leases of an earlier group go first.
setup_leases_held()
{
	local n=$1

	sql -c "SELECT count(fencing.release_lease(name, token)) FROM fencing.leases WHERE name LIKE 'held %'" \
		-c "SELECT fencing.clear_lock_delays()" \
		-c "SELECT count(fencing.acquire_lease('held ' || i, '1 day')) FROM generate_series(1, $n) i" \
		>/dev/null || return 1
	NOTES+=("lease_scale_$n: $(sql -c "SELECT count(*) FROM fencing.leases") leases held while measured")
}

# The leases setup_leases_held took are released (a release needs no
# flush, a break does), so that later groups (which read
# fencing.leases) do not scan them.
teardown_leases_held()
{
	sql -c "SELECT count(fencing.release_lease(name, token)) FROM fencing.leases WHERE name LIKE 'held %'" \
		-c "SELECT fencing.clear_lock_delays()" >/dev/null
}

# A session of role $1 that takes $2 locks named "$3 N" in a transaction
# and disconnects inside it: its backend exits holding them, and each
# starts its lock-delay.
lose_locks()
{
	local role=$1 count=$2 prefix=$3

	sql -U "$role" -c "BEGIN" \
		-c "SELECT count(fencing.try_lock('$prefix ' || i)) FROM generate_series(1, $count) i" \
		>/dev/null
}

setup_delays_disconnect()
{
	sql -c "ALTER SYSTEM SET fencing.lock_delay = '1h'" -c "SELECT pg_reload_conf()" >/dev/null || return 1
	sleep 1
	lose_locks postgres 4000 "lost" || return 1
	delays_in_force 4000 delays_disconnect
}

setup_delays_lapsed()
{
	sql -c "ALTER SYSTEM SET fencing.lock_delay = '1h'" -c "SELECT pg_reload_conf()" >/dev/null || return 1
	sleep 1
	sql -c "SELECT count(fencing.acquire_lease('lapsed ' || i, '1 millisecond')) FROM generate_series(1, 4000) i" \
		>/dev/null || return 1
	sleep 1
	delays_in_force 4000 delays_lapsed
}

setup_delays_folded()
{
	sql -c "ALTER SYSTEM SET fencing.lock_delay = '1h'" -c "SELECT pg_reload_conf()" \
		-c "DROP ROLE IF EXISTS bench_lost" -c "CREATE ROLE bench_lost LOGIN" >/dev/null || return 1
	sleep 1
	lose_locks bench_lost 2100 "lost a" || return 1
	lose_locks bench_lost 2100 "lost b" || return 1
	local folded
	folded=$(sql -c "SELECT count(*) FROM fencing.locks WHERE name LIKE '(every fencing lock%'")
	NOTES+=("delays_folded: $folded folded delays of role bench_lost while measured")
	[ "$folded" -ge 1 ] || { echo "ERROR: no delay was folded"; return 1; }
}

# Wait until at least $1 delays are in force (a lost backend records its
# delays as it exits); note how many.
delays_in_force()
{
	local want=$1 group=$2 n=0

	for _ in $(seq 1 100); do
		n=$(sql -c "SELECT count(*) FROM fencing.locks WHERE delayed_until IS NOT NULL")
		[ "$n" -ge "$want" ] && break
		sleep 0.2
	done
	NOTES+=("$group: $n lock-delays in force while measured")
	[ "$n" -ge "$want" ] || { echo "ERROR: $n lock-delays, not $want"; return 1; }
}

teardown_delays()
{
	sql -c "ALTER SYSTEM RESET fencing.lock_delay" -c "SELECT pg_reload_conf()" \
		-c "SELECT fencing.clear_lock_delays()" >/dev/null
	sql -c "DROP ROLE IF EXISTS bench_lost" >/dev/null 2>&1 || true
}

# The lease the lease_use group renews and fences with, for longer than
# any run.
setup_bench_lease()
{
	sql <<'EOF'
SELECT fencing.break_lease(name) FROM fencing.leases WHERE name = 'bench lease';
SELECT fencing.acquire_lease('bench lease', '1 day', holder => 'bench/run.sh');
EOF
}

# The tables of the trigger groups, in one transaction: when a part fails
# (fencing.protect missing or changed), none exists and the statements on
# them are skipped instead of measuring unprotected tables.
setup_trigger_tables()
{
	sql --single-transaction <<'EOF' || return 1
SET client_min_messages = warning;
DROP TABLE IF EXISTS row_plain, row_fenced, row_ctrigger, bulk_plain, bulk_fenced, bulk_plpgsql, bulk_ctrigger;
DROP FUNCTION IF EXISTS bench_reject_stale_plpgsql();

-- Single-row UPDATE: 100000 rows, a random one per statement.  Bulk
-- UPDATE: every row of a 5000-row table.  fillfactor 50: HOT updates.
CREATE TABLE row_plain (id int PRIMARY KEY, balance bigint NOT NULL, fence bigint NOT NULL)
	WITH (fillfactor = 50);
CREATE TABLE row_fenced (LIKE row_plain INCLUDING ALL) WITH (fillfactor = 50);
CREATE TABLE row_ctrigger (LIKE row_plain INCLUDING ALL) WITH (fillfactor = 50);
CREATE TABLE bulk_plain (LIKE row_plain INCLUDING ALL) WITH (fillfactor = 50);
CREATE TABLE bulk_fenced (LIKE row_plain INCLUDING ALL) WITH (fillfactor = 50);
CREATE TABLE bulk_plpgsql (LIKE row_plain INCLUDING ALL) WITH (fillfactor = 50);
CREATE TABLE bulk_ctrigger (LIKE row_plain INCLUDING ALL) WITH (fillfactor = 50);
INSERT INTO row_plain SELECT i, 0, 1000 FROM generate_series(1, 100000) i;
INSERT INTO row_fenced SELECT * FROM row_plain;
INSERT INTO row_ctrigger SELECT * FROM row_plain;
INSERT INTO bulk_plain SELECT * FROM row_plain WHERE id <= 5000;
INSERT INTO bulk_fenced SELECT * FROM bulk_plain;
INSERT INTO bulk_plpgsql SELECT * FROM bulk_plain;
INSERT INTO bulk_ctrigger SELECT * FROM bulk_plain;

-- the fence 1000 must be a token this cluster has issued (F8)
SELECT fencing.next_token() > 1000 AS token_issued;
SELECT fencing.protect('row_fenced');
SELECT fencing.protect('bulk_fenced');

-- The same rule as fencing.reject_stale() for an UPDATE that sets the
-- fence: reject when the new fence is missing or below the row's, with the
-- extension's SQLSTATE and a message naming table, token and fence.  It
-- leaves out the C trigger's other duties (fencing.token fallback, INSERT,
-- DELETE), so it is the cheapest honest PL/pgSQL version.
CREATE FUNCTION bench_reject_stale_plpgsql() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
	IF NEW.fence IS NULL OR NEW.fence < OLD.fence THEN
		RAISE EXCEPTION 'stale fence token % for table %', NEW.fence, TG_TABLE_NAME
			USING ERRCODE = 'FN001',
				  DETAIL = format('The row''s current fence is %s.', OLD.fence),
				  HINT = 'A newer lock holder exists; this job must stop.';
	END IF;
	RETURN NEW;
END
$$;
CREATE TRIGGER reject_stale BEFORE UPDATE ON bulk_plpgsql
	FOR EACH ROW EXECUTE FUNCTION bench_reject_stale_plpgsql();

-- The floor for any BEFORE ROW UPDATE trigger: PostgreSQL's own C trigger
-- suppress_redundant_updates_trigger(), which compares two tuples and lets
-- a changed row through.  With any BEFORE ROW UPDATE trigger the executor
-- locks the old row first (heap_lock_tuple, a WAL record per row) and
-- materialises both tuples; these tables show that price alone.
CREATE TRIGGER any_c_trigger BEFORE UPDATE ON row_ctrigger
	FOR EACH ROW EXECUTE FUNCTION suppress_redundant_updates_trigger();
CREATE TRIGGER any_c_trigger BEFORE UPDATE ON bulk_ctrigger
	FOR EACH ROW EXECUTE FUNCTION suppress_redundant_updates_trigger();
EOF
	sql -c "VACUUM ANALYZE row_plain, row_fenced, row_ctrigger, bulk_plain, bulk_fenced, bulk_plpgsql, bulk_ctrigger"
}

# The tables of partitions_pN: hash partitioned into N, unprotected,
# protected, and with the no-op C trigger.  Like the trigger tables, in
# one transaction.
setup_partition_tables()
{
	local n=$1 t i

	[ -n "$NOOP_TRIGGER" ] || { echo "ERROR: no bench/noop_trigger.c build"; return 1; }
	{
		echo "SET client_min_messages = warning;"
		echo "CREATE OR REPLACE FUNCTION bench_noop_trigger() RETURNS trigger AS '$NOOP_TRIGGER' LANGUAGE C;"
		echo "CREATE OR REPLACE FUNCTION bench_stamp_trigger() RETURNS trigger AS '$NOOP_TRIGGER' LANGUAGE C;"
		echo "SELECT fencing.next_token() > 1000 AS token_issued;"
		for t in plain fenced noop stamp; do
			echo "DROP TABLE IF EXISTS part_${t}_$n;"
			echo "CREATE TABLE part_${t}_$n (id int NOT NULL, balance bigint NOT NULL, fence bigint) PARTITION BY HASH (id);"
			for i in $(seq 0 $((n - 1))); do
				echo "CREATE TABLE part_${t}_${n}_$i PARTITION OF part_${t}_$n FOR VALUES WITH (MODULUS $n, REMAINDER $i);"
			done
		done
		echo "SELECT fencing.protect('part_fenced_$n');"
		echo "CREATE TRIGGER noop BEFORE INSERT OR UPDATE OR DELETE ON part_noop_$n FOR EACH ROW EXECUTE FUNCTION bench_noop_trigger();"
		echo "CREATE TRIGGER stamp BEFORE INSERT OR UPDATE OR DELETE ON part_stamp_$n FOR EACH ROW EXECUTE FUNCTION bench_stamp_trigger();"
	} | sql --single-transaction || return 1
}

# 2,000 lock-delays in this database and 2,000 in another: a session
# takes 2,000 names and is terminated while it holds them.
setup_lock_delays()
{
	local db pid n

	sql -c "ALTER SYSTEM SET fencing.lock_delay = '1h'" -c "SELECT pg_reload_conf()" >/dev/null || return 1
	sql -c "DROP DATABASE IF EXISTS bench_other" -c "CREATE DATABASE bench_other" >/dev/null || return 1
	sql -d bench_other -c "CREATE EXTENSION fencing" >/dev/null || return 1
	sleep 1
	for db in "$PGDATABASE" bench_other; do
		sql -d "$db" -c "BEGIN" -c "SELECT count(fencing.try_lock('held-elsewhere:' || i)) FROM generate_series(1, 2000) i" \
			-c "SELECT pg_sleep(600)" >/dev/null 2>&1 &
		for _ in $(seq 1 100); do
			pid=$(sql -c "SELECT pid FROM pg_stat_activity WHERE datname = '$db' AND query LIKE 'SELECT pg_sleep(600)%' AND state = 'active'")
			[ -n "$pid" ] && break
			sleep 0.2
		done
		[ -n "$pid" ] || { echo "ERROR: the holder in $db did not start"; return 1; }
		sql -c "SELECT pg_terminate_backend($pid, 10000)" >/dev/null || return 1
		wait
	done
	n=$(sql -c "SELECT count(*) FROM fencing.locks WHERE delayed_until IS NOT NULL")
	NOTES+=("delays_4000: $n lock-delays in force while measured")
	[ "$n" -ge 4000 ] || { echo "ERROR: $n lock-delays, not 4000"; return 1; }
}

teardown_lock_delays()
{
	sql -c "ALTER SYSTEM RESET fencing.lock_delay" -c "SELECT pg_reload_conf()" >/dev/null
	sql -c "SELECT fencing.clear_lock_delays()" >/dev/null
	sql -d bench_other -c "SELECT fencing.clear_lock_delays()" >/dev/null
	sql -c "DROP DATABASE bench_other" >/dev/null
}

# 65 sessions that hold permits until teardown: 64 of the 64 of
# "sem-full", 1 of "sem-one".
SEMAPHORE_HOLDERS=()
setup_semaphore_holders()
{
	local name i held

	for i in $(seq 1 65); do
		name=sem-full
		[ "$i" = 65 ] && name=sem-one
		sql -c "BEGIN" -c "SELECT fencing.try_acquire('$name', 64)" -c "SELECT pg_sleep(3600)" >/dev/null 2>&1 &
		SEMAPHORE_HOLDERS+=($!)
	done
	for _ in $(seq 1 150); do
		held=$(sql -c "SELECT count(*) FROM fencing.locks WHERE granted AND name IN ('sem-full', 'sem-one')")
		[ "$held" = 65 ] && return 0
		sleep 0.2
	done
	echo "ERROR: only $held of 65 permits held"
	return 1
}

# One session holds 50 semaphores of one permit, whose keys end in the
# same 6 bits as that of "pp-crowded" (and not as "pp-alone"'s), and 50
# sessions wait for them, until teardown.
setup_semaphore_waiters()
{
	local names n waiting

	names=$(sql -c "SELECT string_agg(quote_literal(n), ',') FROM (
		SELECT 'waiting-elsewhere:' || i AS n FROM generate_series(1, 100000) i
		 WHERE fencing.lock_key('waiting-elsewhere:' || i) & 63 = fencing.lock_key('pp-crowded') & 63
		 LIMIT 50) s") || return 1
	[ "$(sql -c "SELECT fencing.lock_key('pp-alone') & 63 <> fencing.lock_key('pp-crowded') & 63")" = t ] ||
		{ echo "ERROR: pp-alone and pp-crowded share the low bits"; return 1; }
	sql -c "BEGIN" -c "SELECT count(fencing.try_acquire(n, 1)) FROM unnest(ARRAY[$names]) n" \
		-c "SELECT pg_sleep(3600)" >/dev/null 2>&1 &
	SEMAPHORE_HOLDERS+=($!)
	for _ in $(seq 1 100); do
		[ "$(sql -c "SELECT count(*) FROM fencing.locks WHERE granted AND name LIKE 'waiting-elsewhere:%'")" = 50 ] && break
		sleep 0.2
	done
	for n in $(sql -c "SELECT unnest(ARRAY[$names])"); do
		sql -c "BEGIN" -c "SELECT fencing.acquire('$n', 1)" >/dev/null 2>&1 &
		SEMAPHORE_HOLDERS+=($!)
	done
	for _ in $(seq 1 150); do
		waiting=$(sql -c "SELECT count(*) FROM fencing.locks WHERE NOT granted AND name LIKE 'waiting-elsewhere:%'")
		[ "$waiting" = 50 ] && return 0
		sleep 0.2
	done
	echo "ERROR: only $waiting of 50 sessions wait"
	return 1
}

teardown_semaphore_waiters()
{
	sql -c "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE query LIKE 'SELECT fencing.acquire(''waiting-elsewhere:%'" >/dev/null
	teardown_semaphore_holders
}

teardown_semaphore_holders()
{
	sql -c "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE query LIKE 'SELECT pg_sleep(3600)%'" >/dev/null
	wait "${SEMAPHORE_HOLDERS[@]}" 2>/dev/null || true
	SEMAPHORE_HOLDERS=()
}

# ---------------------------------------------------------------------------
# Sections that are not ratios
# ---------------------------------------------------------------------------

bench_scaling()
{
	local csv=$RESULTS_DIR/scaling.csv clients variant expr script out threads line run
	local -A tps=()
	local variants=(raw_advisory fencing_try_lock sql_emulation)

	# pgbench runs these prepared: the name is built from a parameter
	# (planned once), as the literal NAME cannot hold one.
	local name="'invoice-run-' || :n"

	for variant in "${variants[@]}"; do
		case $variant in
			raw_advisory) expr="SELECT ${RAW_LOCK//"$NAME"/$name};" ;;
			fencing_try_lock) expr="SELECT fencing.try_lock($name);" ;;
			sql_emulation) expr="SELECT ${EMULATED_LOCK//"$NAME"/$name};" ;;
		esac
		printf '%s\nBEGIN;\n%s\nCOMMIT;\n' "$NAME_PREAMBLE" "$expr" >"$WORK/scaling_$variant.sql"
	done
	if ! run_pgbench "$WORK/scaling_fencing_try_lock.sql" "$WORK/scaling.probe" 1 prepared -t 1; then
		NOTES+=("skipped: scaling curve: $(grep -m1 -E 'ERROR|error' "$WORK/scaling.probe" || true)")
		return 0
	fi
	# The variants take turns at each client count, and the whole curve is
	# measured BENCH_SCALE_RUNS times and the median kept, so a change in
	# the machine's load hits all three alike.  Throughput (tps) only.
	for run in $(seq 1 "$BENCH_SCALE_RUNS"); do
		for clients in $SCALING_CLIENTS; do
			for variant in "${variants[@]}"; do
				out=$WORK/scaling_${variant}_c$clients.run$run.out
				say "bench: scaling run $run/$BENCH_SCALE_RUNS, $variant, $clients clients (${BENCH_SCALE_TIME}s)"
				run_pgbench "$WORK/scaling_$variant.sql" "$out" "$clients" prepared -T "$BENCH_SCALE_TIME" ||
					{ cat "$out" >&2; die "pgbench failed in scaling $variant"; }
				tps[$variant:$clients]="${tps[$variant:$clients]:-} $(pgbench_tps "$out")"
			done
		done
	done
	for clients in $SCALING_CLIENTS; do
		for variant in "${variants[@]}"; do
			tps[$variant:$clients]=$(printf '%s\n' ${tps[$variant:$clients]} | median)
		done
	done

	{
		echo "clients,raw_advisory,fencing_try_lock,sql_emulation"
		for clients in $SCALING_CLIENTS; do
			printf '%s,%.0f,%.0f,%.0f\n' "$clients" "${tps[raw_advisory:$clients]}" \
				"${tps[fencing_try_lock:$clients]}" "${tps[sql_emulation:$clients]}"
		done
	} >"$csv"
	NOTES+=("scaling (lock + token + commit cycles per second, median of $BENCH_SCALE_RUNS x ${BENCH_SCALE_TIME}s; raw_advisory takes no token):")
	while IFS= read -r line; do
		NOTES+=("    $line")
	done < <(column -s, -t <"$csv" 2>/dev/null || cat "$csv")
	NOTES+=("    written to $(tree_path "$csv")")
	draw_scaling_chart "$csv"
}

draw_scaling_chart()
{
	local csv=$1 png=$RESULTS_DIR/scaling.png terminal

	if ! command -v gnuplot >/dev/null; then
		NOTES+=("    chart skipped: gnuplot is not installed (apt-get install gnuplot-nox)")
		return 0
	fi
	if gnuplot -e 'set terminal pngcairo' >/dev/null 2>&1; then
		terminal="pngcairo size 900,560 font 'sans,11'"
	else
		terminal="png size 900,560"
	fi
	if gnuplot >"$WORK/gnuplot.log" 2>&1 <<EOF; then
set terminal $terminal
set output '$png'
set datafile separator ','
set title 'fencing: lock + token + commit cycles per second ($RUN_CPUS CPUs, $RUN_COMMIT, median of $BENCH_SCALE_RUNS x ${BENCH_SCALE_TIME}s per point)'
set xlabel 'clients'
set ylabel 'cycles per second'
set logscale x 2
set xrange [0.8:20]
set xtics (1, 2, 4, 8, 16)
set yrange [0:*]
set grid
set key bottom right
plot '$csv' using 1:2 with linespoints lw 2 pt 7 title 'raw pg\_try\_advisory\_xact\_lock (no token)', \
     '$csv' using 1:3 with linespoints lw 2 pt 5 title 'fencing.try\_lock (lock + token)', \
     '$csv' using 1:4 with linespoints lw 2 pt 9 title 'SQL emulation (normalize + lock + nextval)'
EOF
		NOTES+=("    chart: $(tree_path "$png")")
	else
		NOTES+=("    chart failed: $(head -3 "$WORK/gnuplot.log" | tr '\n' ' ')")
	fi
}

bench_durable()
{
	local script=$WORK/durable.sql out res0 res1 run tps n=5000000 sync0 sync1 start end
	local -a tps_runs=()

	# Worst case: every cycle lifts the counter to the reservation limit,
	# so the advance makes a reservation (fsynced state file, WAL record,
	# WAL flush) and the token after it is drawn from the fresh block.
	# Lifting it to the limit, not a fixed distance above the latest token,
	# keeps tokens within the lead bound of the clock, so no cycle waits
	# for the clock and the cost measured is the reservation's.  One cycle
	# is one pgbench transaction; tps counts them against the wall clock.
	printf '%s\n' \
		"SELECT fencing.advance_token(reserved_limit) FROM fencing.status();" \
		"SELECT fencing.next_token();" >"$script"
	if ! run_pgbench "$script" "$WORK/durable.probe" 1 simple -t 1; then
		NOTES+=("skipped: durable path: $(grep -m1 -E 'ERROR|error' "$WORK/durable.probe" || true)")
		return 0
	fi
	res0=$(sql -c "SELECT reservations FROM fencing.stats")
	for run in $(seq 1 "$BENCH_RUNS"); do
		out=$WORK/durable.run$run.out
		say "bench: durable path run $run/$BENCH_RUNS (1 client, ${BENCH_TIME}s)"
		run_pgbench "$script" "$out" 1 simple -T "$BENCH_TIME" ||
			{ cat "$out" >&2; die "pgbench failed in durable"; }
		tps_runs+=("$(pgbench_tps "$out")")
	done
	res1=$(sql -c "SELECT reservations FROM fencing.stats")
	tps=$(printf '%s\n' "${tps_runs[@]}" | median)
	metric durable_tokens_per_sec "$tps"
	metric durable_reservations_per_token "$(awk -v r=$((res1 - res0)) -v t="${tps_runs[*]}" -v s="$BENCH_TIME" \
		'BEGIN { n = split(t, a, " "); for (i = 1; i <= n; i++) sum += a[i] * s; printf "%.3f", r / sum }')"
	figure durable_tokens_per_sec "$(printf '%.0f tokens/s' "$tps")" \
		"tokens per second when every token needs a reservation (WAL flush and fsync each: the worst case)"
	NOTES+=("durable path: $(printf '%.0f' "$tps") tokens/s (median of $BENCH_RUNS x ${BENCH_TIME}s, from $(printf '%s\n' "${tps_runs[@]}" | sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 } END { printf "%.0f to %.0f", lo, hi }')), $((res1 - res0)) reservations")

	# Normal path: WAL flushes per million tokens while drawing 5 million in
	# one statement.  Each backend reports its WAL counters when it exits,
	# so the draw runs in a session of its own between two readings.
	sync0=$(sql -c "SELECT wal_sync FROM pg_stat_wal")
	res0=$(sql -c "SELECT reservations FROM fencing.stats")
	start=$(date +%s.%N)
	sql -c "SELECT count(fencing.next_token()) FROM generate_series(1, $n)" >/dev/null
	end=$(date +%s.%N)
	sleep 0.5
	sync1=$(sql -c "SELECT wal_sync FROM pg_stat_wal")
	res1=$(sql -c "SELECT reservations FROM fencing.stats")
	metric wal_syncs_per_million_tokens "$(awk -v d=$((sync1 - sync0)) -v n=$n 'BEGIN { printf "%.2f", d * 1000000 / n }')"
	metric reservations_per_million_tokens "$(awk -v d=$((res1 - res0)) -v n=$n 'BEGIN { printf "%.2f", d * 1000000 / n }')"
	metric inserver_tokens_per_sec "$(awk -v s="$start" -v e="$end" -v n=$n 'BEGIN { printf "%.0f", n / (e - s) }')"
	figure wal_syncs_per_million_tokens "$(awk -v d=$((sync1 - sync0)) -v n=$n 'BEGIN { printf "%.2f", d * 1000000 / n }')" \
		"WAL flushes per million tokens on the normal path (5 million drawn in one statement)"
	NOTES+=("normal path: $((sync1 - sync0)) WAL syncs (pg_stat_wal) and $((res1 - res0)) reservations (fencing.stats) for $n tokens")
}

# ---------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------

main()
{
	local group

	check_tools
	mkdir -p "$RESULTS_DIR"
	trap cleanup EXIT INT TERM
	RUN_COMMIT=$(tree_commit)
	RUN_CPUS=$(nproc)

	if [ -n "${PGHOST:-}${PGPORT:-}" ]; then
		use_existing_server
	else
		start_server
	fi
	PG_VERSION=$(sql -c 'SHOW server_version' | awk '{ print $1 }')
	build_sidebyside
	build_noop_trigger

	sql >/dev/null <<'EOF'
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS fencing;
DROP SEQUENCE IF EXISTS bench_seq;
CREATE SEQUENCE bench_seq;
EOF

	define_benchmarks
	for group in "${GROUP_NAMES[@]}"; do
		if section_wanted "${G_SECTION[$group]}"; then
			measure_group "$group"
			if [ -n "${G_TEARDOWN[$group]}" ]; then
				"${G_TEARDOWN[$group]}" >"$WORK/$group.teardown" 2>&1 ||
					die "$group: ${G_TEARDOWN[$group]} failed: $(grep -m1 ERROR "$WORK/$group.teardown" || true)"
			fi
		fi
	done
	section_wanted scaling && bench_scaling
	section_wanted durable && bench_durable
	RUN_DATE=$(date -u '+%Y-%m-%d %H:%M UTC')
	evaluate_ratios

	print_report | tee "$RESULTS_DIR/summary.txt"
	print_readme_table >"$RESULTS_DIR/readme-table.md"
	say "bench: wrote $(tree_path "$RESULTS_DIR")/summary.txt and readme-table.md" \
		"(bench/update-readme.sh copies the table into doc/performance.md)"
	if [ "$BENCH_STRICT" = 1 ] && [ "$MISSED" -gt 0 ]; then
		exit 1
	fi
	exit 0
}

main "$@"
