#!/bin/bash
#
# bench/run.sh -- side-by-side benchmarks of the fencing extension
#                 ("make bench"; bench/README.md says how to read the output)
#
# Starts a throwaway PostgreSQL 15 server of its own (as user postgres when
# run as root), or uses the server that PGHOST/PGPORT name, then measures:
#
#   percall   per-call latency of try_lock and next_token next to their raw
#             equivalents, in ONE pgbench script each run (-r), 2 and 8 clients
#   inserver  one statement doing the work many times (tokens, 1000 locks)
#   trigger   protected vs unprotected vs PL/pgSQL-checked UPDATEs
#   scaling   lock+token+commit cycles per second at 1..16 clients
#   durable   tokens/s when every call crosses a reservation, and WAL
#             flushes per million tokens on the normal path
#
# Every ratio compares per-statement latencies taken side by side in one
# pgbench run and is the median of BENCH_RUNS runs.  Absolute numbers on a
# shared machine are noise; the ratios are the product.
#
# Output: a table, then one line "ratio NAME VALUE" per ratio and one line
# "metric NAME VALUE" per absolute measurement.  Copies go to
# bench/results/summary.txt, bench/results/scaling.csv and scaling.png.
#
# Environment:
#   PGHOST/PGPORT      use that server (fencing must be preloaded there);
#                      a scratch database is created and dropped
#   BENCH_TIME         seconds per pgbench run of the ratio sections (10)
#   BENCH_SCALE_TIME   seconds per point of the scaling curve, per run (2)
#   BENCH_RUNS         runs per ratio, median taken (3)
#   BENCH_SECTIONS     subset of "percall inserver trigger scaling durable"
#   BENCH_STRICT=1     exit 1 when a target is missed
#
# Copyright (c) 2026, the fencing developers

set -euo pipefail

BENCH_DIR=$(cd "$(dirname "$0")" && pwd)
RESULTS_DIR=${BENCH_RESULTS_DIR:-$BENCH_DIR/results}
BENCH_TIME=${BENCH_TIME:-10}
BENCH_SCALE_TIME=${BENCH_SCALE_TIME:-2}
BENCH_RUNS=${BENCH_RUNS:-3}
BENCH_SECTIONS=${BENCH_SECTIONS:-"percall inserver trigger scaling durable"}
BENCH_STRICT=${BENCH_STRICT:-0}
SCALING_CLIENTS=${BENCH_SCALING_CLIENTS:-"1 2 4 8 16"}

PG_MAJOR=15
if [ -z "${PGBIN:-}" ]; then
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
	local tool missing=()

	for tool in pgbench psql initdb pg_ctl; do
		[ -x "$PGBIN/$tool" ] || missing+=("$PGBIN/$tool")
	done
	for tool in awk sort mktemp; do
		command -v "$tool" >/dev/null || missing+=("$tool")
	done
	if [ ${#missing[@]} -gt 0 ]; then
		die "missing: ${missing[*]} (Debian: apt-get install postgresql-$PG_MAJOR postgresql-client-$PG_MAJOR)"
	fi

	if [ -z "${PGHOST:-}${PGPORT:-}" ] &&
		[ ! -f "$("$PGBIN/pg_config" --pkglibdir 2>/dev/null || pg_config --pkglibdir)/fencing.so" ]; then
		die "fencing.so is not installed; run 'make && make install' (as root) first"
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


# ---------------------------------------------------------------------------
# pgbench runs and their per-statement latencies
# ---------------------------------------------------------------------------

# Per-statement latencies (ms) of the SQL statements of one pgbench -r run,
# one per line, in script order; meta-commands (\set) are skipped.
statement_latencies()
{
	awk '
		/^statement latencies/ { on = 1; next }
		on && $1 ~ /^[0-9.]+$/ {
			text = $0
			sub(/^[ \t]*[0-9.]+[ \t]+([0-9]+[ \t]+)*/, "", text)
			if (text !~ /^\\/)
				print $1
		}
	' "$1"
}

# pgbench's per-statement latencies should add up to its transaction
# latency; say so when they are more than 10% off, since then they are not
# to be trusted for a ratio.
check_accounting()
{
	local group=$1 run=$2 out=$3 share

	share=$(awk '
		/^latency average = / { avg = $4 }
		/^statement latencies/ { on = 1; next }
		on && $1 ~ /^[0-9.]+$/ { sum += $1 }
		END { if (avg > 0) printf "%.3f", sum / avg }
	' "$out")
	if [ -n "$share" ] && ! awk -v s="$share" 'BEGIN { exit !(s >= 0.90 && s <= 1.10) }'; then
		NOTES+=("warning: $group run $run: per-statement latencies add up to $share of the transaction latency")
	fi
}

pgbench_tps()
{
	awk '/^tps = / { print $3; exit }' "$1"
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

# Per-group, per-run latencies: LAT[group:run:index] (index from 1).
declare -A LAT=()

# run_group GROUP CLIENTS SECONDS "PREAMBLE" STATEMENT...
#
# Measures the k statements side by side in ONE pgbench -r run, repeated
# BENCH_RUNS times.  The script is built so that neither the place of a
# statement nor its neighbour can favour it:
#
# - each statement forms a unit with a separator "SELECT 1 AS sep" after
#   it, and a reference unit "SELECT 1 AS ref; SELECT 1 AS sep" is added.
#   Work a statement leaves behind after its reply (the backend is still
#   busy when the next query arrives) shows up in the separator after it,
#   not in an innocent neighbour; the statement's cost is its latency plus
#   its separator's latency less the reference separator's latency;
# - the k+1 units are laid out as a Latin square: k+1 rows, each rotated
#   by one more unit, so every statement takes every place once.
#
# PGOPTIONS and QUERY_MODE from the caller's environment reach the server
# and pgbench.  The simple
# query protocol (pgbench's default) is used on purpose: with -M prepared
# and two threads, PostgreSQL 15's pgbench reports per-statement latencies
# that sum to 15-20% below the transaction latency on this machine (2-5%
# with the simple protocol), so they are not comparable.
run_group()
{
	local group=$1 clients=$2 seconds=$3 preamble=$4
	shift 4
	local script=$WORK/$group.sql out run i j r u threads
	local -a units=("$@" "SELECT 1 AS ref;") lats

	u=${#units[@]}
	{
		[ -n "$preamble" ] && printf '%s\n' "$preamble"
		for ((r = 0; r < u; r++)); do
			for ((i = 0; i < u; i++)); do
				printf '%s\nSELECT 1 AS sep;\n' "${units[$(((i + r) % u))]}"
			done
		done
	} >"$script"
	threads=$((clients < 2 ? clients : 2))

	for run in $(seq 1 "$BENCH_RUNS"); do
		if [ -n "${BEFORE_RUN:-}" ]; then
			eval "$BEFORE_RUN"
		fi
		out=$WORK/$group.run$run.out
		say "bench: $group run $run/$BENCH_RUNS ($clients clients, ${seconds}s)"
		if ! "$PGBIN/pgbench" -n -r -M "${QUERY_MODE:-simple}" -c "$clients" -j "$threads" \
			-T "$seconds" -f "$script" >"$out" 2>&1; then
			cat "$out" >&2
			die "pgbench failed in group $group"
		fi
		check_accounting "$group" "$run" "$out"
		mapfile -t lats < <(statement_latencies "$out")
		if [ ${#lats[@]} -ne $((2 * u * u)) ]; then
			cat "$out" >&2
			die "expected $((2 * u * u)) statement latencies in group $group, got ${#lats[@]}"
		fi
		# Unit j of row r stands at place (j - r) mod u of that row.
		for ((j = 0; j < u; j++)); do
			LAT[$group:$run:$((j + 1))]=$(
				for ((r = 0; r < u; r++)); do
					i=$((2 * (r * u + (j - r + u) % u)))
					echo "${lats[$i]} ${lats[$((i + 1))]}"
				done | awk '{ s += $1; p += $2 } END { printf "%.6f %.6f\n", s / NR, p / NR }')
		done
		# cost = own latency + own separator - reference separator
		for ((j = 1; j < u; j++)); do
			LAT[$group:$run:$j]=$(awk -v x="${LAT[$group:$run:$j]}" -v ref="${LAT[$group:$run:$u]}" \
				'BEGIN { split(x, a, " "); split(ref, b, " "); printf "%.6f\n", a[1] + a[2] - b[2] }')
		done
		unset "LAT[$group:$run:$u]"
	done
}

# Median latency (ms) of statement INDEX of GROUP over the runs.
median_latency()
{
	local group=$1 index=$2 run

	for run in $(seq 1 "$BENCH_RUNS"); do
		echo "${LAT[$group:$run:$index]}"
	done | median
}

# Median over the runs of latency(NUM) / latency(DEN), both from the same run.
median_ratio()
{
	local group=$1 num=$2 den=$3 run

	for run in $(seq 1 "$BENCH_RUNS"); do
		awk -v a="${LAT[$group:$run:$num]}" -v b="${LAT[$group:$run:$den]}" \
			'BEGIN { printf "%.4f\n", a / b }'
	done | median
}

# ---------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------

TABLE_ROWS=()
RATIO_LINES=()
METRIC_LINES=()
NOTES=()
MISSED=0

# ratio NAME GROUP NUM DEN TARGET DESCRIPTION
# TARGET is "<= X" or "-" (for contrast only).
ratio()
{
	local name=$1 group=$2 num=$3 den=$4 target=$5 desc=$6
	local value a b verdict

	value=$(median_ratio "$group" "$num" "$den")
	a=$(median_latency "$group" "$num")
	b=$(median_latency "$group" "$den")
	if [ "$target" = "-" ]; then
		verdict="contrast"
	elif awk -v v="$value" -v t="${target#<= }" 'BEGIN { exit !(v <= t) }'; then
		verdict="met"
	else
		verdict="MISSED"
		MISSED=$((MISSED + 1))
	fi
	TABLE_ROWS+=("$(printf '%-30s %10.4f %10.4f %8.3f  %-7s %s' \
		"$name" "$a" "$b" "$value" "$target" "$verdict")|$desc")
	RATIO_LINES+=("ratio $name $value")
}

metric()
{
	METRIC_LINES+=("metric $1 $2")
}

print_report()
{
	local row

	echo
	echo "fencing benchmarks: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, PostgreSQL $("$PGBIN/psql" -X -At -c 'SHOW server_version' | awk '{print $1}')"
	echo "runs per ratio: $BENCH_RUNS (median), ${BENCH_TIME}s each; latencies in ms are medians, the ratio is the median of per-run ratios"
	echo
	printf '%-30s %10s %10s %8s  %-7s %s\n' "ratio" "lat A ms" "lat B ms" "A / B" "target" "verdict"
	printf '%s\n' "-------------------------------------------------------------------------------"
	for row in "${TABLE_ROWS[@]}"; do
		printf '%s\n' "${row%%|*}"
		printf '    %s\n' "${row#*|}"
	done
	if [ ${#NOTES[@]} -gt 0 ]; then
		echo
		printf '%s\n' "${NOTES[@]}"
	fi
	echo
	[ ${#RATIO_LINES[@]} -gt 0 ] && printf '%s\n' "${RATIO_LINES[@]}"
	[ ${#METRIC_LINES[@]} -gt 0 ] && printf '%s\n' "${METRIC_LINES[@]}"
	return 0
}

# ---------------------------------------------------------------------------
# What is implemented yet (other parts may still be stubs during development)
# ---------------------------------------------------------------------------

HAVE_LOCKS=0
HAVE_TRIGGER=0

probe_features()
{
	if sql -c "BEGIN; SELECT fencing.try_lock('bench probe'); COMMIT" >/dev/null 2>"$WORK/probe.err"; then
		HAVE_LOCKS=1
	else
		NOTES+=("skipped: lock benchmarks, fencing.try_lock failed: $(head -1 "$WORK/probe.err")")
	fi
	if sql <<'EOF' >/dev/null 2>"$WORK/probe.err"; then
BEGIN;
CREATE TEMP TABLE bench_probe (id int, fence bigint);
SELECT fencing.protect('bench_probe');
ROLLBACK;
EOF
		HAVE_TRIGGER=1
	else
		NOTES+=("skipped: trigger benchmarks, fencing.protect failed: $(head -1 "$WORK/probe.err")")
	fi
}

# ---------------------------------------------------------------------------
# Sections
# ---------------------------------------------------------------------------

# A per-client random name: 100000 names, so clients practically never
# contend and the lock is always granted.
NAME_PREAMBLE='\set n random(1, 100000)'
NAME="'invoice-run:' || :n"
RAW_LOCK="pg_try_advisory_xact_lock(hashtextextended($NAME, 0))"
EMULATED_LOCK="pg_try_advisory_xact_lock(hashtextextended(lower(btrim(normalize($NAME, NFKC))), 0)) AND nextval('bench_seq') > 0"

bench_percall()
{
	local clients group caller_options=${PGOPTIONS-}
	local -a stmts

	# Each statement runs in its own (autocommit) transaction, so the
	# transaction-scoped locks are released after each one, alike.  fencing
	# warns about a lock taken that way; the warning is not sent (nor, on
	# the bench's own server, logged), so what is measured is the lock.
	export PGOPTIONS="$caller_options -c client_min_messages=error"
	for clients in 2 8; do
		# SELECT pg_backend_pid() is there for contrast: what any function
		# call costs over SELECT 1 (name lookup, parse, plan, call).
		group=percall_c$clients
		stmts=("SELECT fencing.next_token();" "SELECT 1;" "SELECT pg_backend_pid();")
		if [ "$HAVE_LOCKS" = 1 ]; then
			stmts+=("SELECT fencing.try_lock($NAME);" "SELECT $RAW_LOCK;")
		fi
		run_group "$group" "$clients" "$BENCH_TIME" "$NAME_PREAMBLE" "${stmts[@]}"
		if [ "$HAVE_LOCKS" = 1 ]; then
			ratio "try_lock_percall_c$clients" "$group" 4 5 "<= 1.05" \
				"SELECT fencing.try_lock(name) / SELECT pg_try_advisory_xact_lock(hashtextextended(name, 0)), $clients clients"
		fi
		ratio "next_token_percall_c$clients" "$group" 1 2 "<= 1.10" \
			"SELECT fencing.next_token() / SELECT 1, $clients clients"
		ratio "trivial_function_percall_c$clients" "$group" 3 2 "-" \
			"SELECT pg_backend_pid() / SELECT 1, $clients clients: the cost of any function call"
		ratio "next_token_vs_trivial_percall_c$clients" "$group" 1 3 "-" \
			"SELECT fencing.next_token() / SELECT pg_backend_pid(), $clients clients"
	done

	# Contrast: the token call as a driver with prepared statements sends
	# it, no parsing or planning per call.  One client only: there pgbench's
	# per-statement accounting in prepared mode adds up (see run_group).
	QUERY_MODE=prepared run_group percall_prepared_c1 1 "$((BENCH_TIME / 2 > 2 ? BENCH_TIME / 2 : 2))" "" \
		"SELECT fencing.next_token();" "SELECT 1;" "SELECT pg_backend_pid();"
	ratio next_token_percall_prepared_c1 percall_prepared_c1 1 2 "-" \
		"SELECT fencing.next_token() / SELECT 1, 1 client, prepared statements"
	ratio trivial_function_percall_prepared_c1 percall_prepared_c1 3 2 "-" \
		"SELECT pg_backend_pid() / SELECT 1, 1 client, prepared statements"
	PGOPTIONS=$caller_options
}

bench_inserver()
{
	run_group inserver_tokens 1 "$BENCH_TIME" "" \
		"SELECT count(fencing.next_token()) FROM generate_series(1, 100000);" \
		"SELECT count(pg_backend_pid()) FROM generate_series(1, 100000);" \
		"SELECT count(nextval('bench_seq')) FROM generate_series(1, 100000);"
	ratio next_token_inserver_vs_trivial inserver_tokens 1 2 "<= 1.5" \
		"100000 x fencing.next_token() / 100000 x pg_backend_pid() in one statement"
	ratio next_token_inserver_vs_nextval inserver_tokens 1 3 "<= 0.5" \
		"100000 x fencing.next_token() / 100000 x nextval() in one statement"

	[ "$HAVE_LOCKS" = 1 ] || return 0
	# one statement outside a transaction block: see bench_percall
	local caller_options=${PGOPTIONS-}
	export PGOPTIONS="$caller_options -c client_min_messages=error"
	run_group inserver_locks 1 "$BENCH_TIME" "" \
		"SELECT count(fencing.try_lock('k' || i)) FROM generate_series(1, 1000) i;" \
		"SELECT count(pg_try_advisory_xact_lock(hashtextextended('k' || i, 0))) FROM generate_series(1, 1000) i;" \
		"SELECT count(pg_try_advisory_xact_lock(hashtextextended(lower(btrim(normalize('k' || i, NFKC))), 0)) AND nextval('bench_seq') > 0) FROM generate_series(1, 1000) i;"
	PGOPTIONS=$caller_options
	ratio try_lock_inserver_vs_raw inserver_locks 1 2 "<= 1.5" \
		"1000 x fencing.try_lock() / 1000 x raw advisory lock + hash, one statement"
	ratio sql_emulation_inserver_vs_raw inserver_locks 3 2 "-" \
		"1000 x SQL emulation (normalize + lower + btrim + hash + lock + nextval) / raw"
	ratio try_lock_inserver_vs_sql_emulation inserver_locks 1 3 "-" \
		"1000 x fencing.try_lock() / 1000 x SQL emulation"
}

setup_trigger_tables()
{
	sql <<'EOF'
SET client_min_messages = warning;
DROP TABLE IF EXISTS row_plain, row_fenced, row_ctrigger, bulk_plain, bulk_fenced, bulk_plpgsql, bulk_ctrigger;

-- Single-row UPDATE: 100000 rows, a random one per statement.
CREATE TABLE row_plain (id int PRIMARY KEY, balance bigint NOT NULL, fence bigint NOT NULL)
	WITH (fillfactor = 50);
CREATE TABLE row_fenced (id int PRIMARY KEY, balance bigint NOT NULL, fence bigint NOT NULL)
	WITH (fillfactor = 50);
INSERT INTO row_plain SELECT i, 0, 1000 FROM generate_series(1, 100000) i;
CREATE TABLE row_ctrigger (id int PRIMARY KEY, balance bigint NOT NULL, fence bigint NOT NULL)
	WITH (fillfactor = 50);
INSERT INTO row_fenced SELECT i, 0, 1000 FROM generate_series(1, 100000) i;
INSERT INTO row_ctrigger SELECT i, 0, 1000 FROM generate_series(1, 100000) i;

-- Bulk UPDATE: every row of a 5000-row table.
CREATE TABLE bulk_plain (id int PRIMARY KEY, balance bigint NOT NULL, fence bigint NOT NULL)
	WITH (fillfactor = 50);
CREATE TABLE bulk_fenced (id int PRIMARY KEY, balance bigint NOT NULL, fence bigint NOT NULL)
	WITH (fillfactor = 50);
CREATE TABLE bulk_plpgsql (id int PRIMARY KEY, balance bigint NOT NULL, fence bigint NOT NULL)
	WITH (fillfactor = 50);
INSERT INTO bulk_plain SELECT i, 0, 1000 FROM generate_series(1, 5000) i;
INSERT INTO bulk_fenced SELECT i, 0, 1000 FROM generate_series(1, 5000) i;
CREATE TABLE bulk_ctrigger (id int PRIMARY KEY, balance bigint NOT NULL, fence bigint NOT NULL)
	WITH (fillfactor = 50);
INSERT INTO bulk_plpgsql SELECT i, 0, 1000 FROM generate_series(1, 5000) i;
INSERT INTO bulk_ctrigger SELECT i, 0, 1000 FROM generate_series(1, 5000) i;

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
-- materialises both tuples; this table shows that price alone.
CREATE TRIGGER any_c_trigger BEFORE UPDATE ON row_ctrigger
	FOR EACH ROW EXECUTE FUNCTION suppress_redundant_updates_trigger();
CREATE TRIGGER any_c_trigger BEFORE UPDATE ON bulk_ctrigger
	FOR EACH ROW EXECUTE FUNCTION suppress_redundant_updates_trigger();

VACUUM ANALYZE row_plain, row_fenced, row_ctrigger, bulk_plain, bulk_fenced, bulk_plpgsql, bulk_ctrigger;
EOF
}

bench_trigger()
{
	[ "$HAVE_TRIGGER" = 1 ] || return 0
	setup_trigger_tables >/dev/null

	# synchronous_commit = off, so the commit's WAL flush does not bury the
	# trigger's cost; both UPDATEs set the fence to the row's current value
	# (equal is allowed), so every row passes through the check.
	export PGOPTIONS="-c synchronous_commit=off"
	BEFORE_RUN="sql -c 'VACUUM row_plain, row_fenced, row_ctrigger' >/dev/null"
	run_group trigger_row 1 "$BENCH_TIME" '\set id random(1, 100000)' \
		"UPDATE row_fenced SET balance = balance + 1, fence = 1000 WHERE id = :id;" \
		"UPDATE row_plain SET balance = balance + 1, fence = 1000 WHERE id = :id;" \
		"UPDATE row_ctrigger SET balance = balance + 1, fence = 1000 WHERE id = :id;"
	BEFORE_RUN="sql -c 'VACUUM bulk_plain, bulk_fenced, bulk_plpgsql, bulk_ctrigger' >/dev/null"
	run_group trigger_bulk 1 "$BENCH_TIME" "" \
		"UPDATE bulk_fenced SET balance = balance + 1, fence = 1000;" \
		"UPDATE bulk_plain SET balance = balance + 1, fence = 1000;" \
		"UPDATE bulk_plpgsql SET balance = balance + 1, fence = 1000;" \
		"UPDATE bulk_ctrigger SET balance = balance + 1, fence = 1000;"
	BEFORE_RUN=
	unset PGOPTIONS

	ratio trigger_row_vs_plain trigger_row 1 2 "<= 1.03" \
		"single-row UPDATE, protected / unprotected table (synchronous_commit off)"
	ratio trigger_bulk_vs_plain trigger_bulk 1 2 "<= 1.10" \
		"5000-row UPDATE, protected / unprotected table"
	ratio trigger_bulk_vs_plpgsql trigger_bulk 1 3 "<= 0.75" \
		"5000-row UPDATE, fencing.reject_stale / the same check as a PL/pgSQL trigger"
	ratio trigger_row_vs_any_c_trigger trigger_row 1 3 "-" \
		"single-row UPDATE, fencing.reject_stale / suppress_redundant_updates_trigger (any BEFORE ROW trigger)"
	ratio trigger_bulk_vs_any_c_trigger trigger_bulk 1 4 "-" \
		"5000-row UPDATE, fencing.reject_stale / suppress_redundant_updates_trigger (any BEFORE ROW trigger)"
	ratio any_c_trigger_bulk_vs_plain trigger_bulk 4 2 "-" \
		"5000-row UPDATE, suppress_redundant_updates_trigger / no trigger: the executor's price of any BEFORE ROW trigger"
}

bench_scaling()
{
	local csv=$RESULTS_DIR/scaling.csv clients variant expr script out threads line
	local -A tps=()
	local variants=(raw_advisory fencing_try_lock sql_emulation)

	if [ "$HAVE_LOCKS" != 1 ]; then
		NOTES+=("skipped: scaling curve (needs fencing.try_lock)")
		return 0
	fi
	for variant in "${variants[@]}"; do
		case $variant in
			raw_advisory) expr="SELECT $RAW_LOCK;" ;;
			fencing_try_lock) expr="SELECT fencing.try_lock($NAME);" ;;
			sql_emulation) expr="SELECT $EMULATED_LOCK;" ;;
		esac
		printf '%s\nBEGIN;\n%s\nCOMMIT;\n' "$NAME_PREAMBLE" "$expr" >"$WORK/scaling_$variant.sql"
	done
	# The variants take turns at each client count, and the whole curve is
	# measured BENCH_RUNS times and the median kept, so a change in the
	# machine's load hits all three alike.  Prepared statements are fine
	# here: this is throughput (tps), not per-statement latency.
	for run in $(seq 1 "$BENCH_RUNS"); do
		for clients in $SCALING_CLIENTS; do
			threads=$((clients < 2 ? clients : 2))
			for variant in "${variants[@]}"; do
				script=$WORK/scaling_$variant.sql
				out=$WORK/scaling_${variant}_c$clients.run$run.out
				say "bench: scaling run $run/$BENCH_RUNS, $variant, $clients clients (${BENCH_SCALE_TIME}s)"
				"$PGBIN/pgbench" -n -M prepared -c "$clients" -j "$threads" \
					-T "$BENCH_SCALE_TIME" -f "$script" >"$out" 2>&1 ||
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
	NOTES+=("scaling (lock + token + commit cycles per second; raw_advisory takes no token):")
	while IFS= read -r line; do
		NOTES+=("    $line")
	done < <(column -s, -t <"$csv" 2>/dev/null || cat "$csv")
	NOTES+=("    written to $csv")
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
set title 'fencing: lock + token + commit cycles per second ($(nproc) CPUs, median of $BENCH_RUNS x ${BENCH_SCALE_TIME}s per point)'
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
		NOTES+=("    chart: $png")
	else
		NOTES+=("    chart failed: $(head -3 "$WORK/gnuplot.log" | tr '\n' ' ')")
	fi
}

bench_durable()
{
	local script=$WORK/durable.sql out res0 res1 tps lats sync0 sync1 n=5000000
	local start end

	# Worst case: every cycle lifts the counter to the reservation limit,
	# so the advance makes a reservation (fsynced state file, WAL record,
	# WAL flush) and the token after it is drawn from the fresh block.
	# Lifting it to the limit, not a fixed distance above the latest token,
	# keeps tokens within the lead bound (2 ms) of the clock, so no cycle
	# waits for the clock and the cost measured is the reservation's.
	printf '%s\n' \
		"SELECT fencing.advance_token(reserved_limit) FROM fencing.status();" \
		"SELECT fencing.next_token();" >"$script"
	res0=$(sql -c "SELECT reservations FROM fencing.stats")
	out=$WORK/durable.out
	say "bench: durable path (1 client, ${BENCH_TIME}s)"
	"$PGBIN/pgbench" -n -r -c 1 -j 1 -T "$BENCH_TIME" -f "$script" >"$out" 2>&1 ||
		{ cat "$out" >&2; die "pgbench failed in durable"; }
	res1=$(sql -c "SELECT reservations FROM fencing.stats")
	tps=$(pgbench_tps "$out")
	mapfile -t lats < <(statement_latencies "$out")
	metric durable_tokens_per_sec "$tps"
	metric durable_reservations_per_token "$(awk -v r=$((res1 - res0)) -v t="$tps" -v s="$BENCH_TIME" 'BEGIN { printf "%.3f", r / (t * s) }')"
	NOTES+=("durable path: $tps tokens/s when every token needs a reservation" \
		"    (advance_token ${lats[0]} ms, next_token after it ${lats[1]} ms; $((res1 - res0)) reservations)")

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
	NOTES+=("normal path: $((sync1 - sync0)) WAL syncs (pg_stat_wal) and $((res1 - res0)) reservations (fencing.stats) for $n tokens")
}

# ---------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------

main()
{
	local section

	check_tools
	mkdir -p "$RESULTS_DIR"
	trap cleanup EXIT INT TERM

	if [ -n "${PGHOST:-}${PGPORT:-}" ]; then
		use_existing_server
	else
		start_server
	fi

	sql >/dev/null <<'EOF'
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS fencing;
DROP SEQUENCE IF EXISTS bench_seq;
CREATE SEQUENCE bench_seq;
EOF
	probe_features

	for section in percall inserver trigger scaling durable; do
		if section_wanted "$section"; then
			"bench_$section"
		fi
	done

	print_report | tee "$RESULTS_DIR/summary.txt"
	if [ "$BENCH_STRICT" = 1 ] && [ "$MISSED" -gt 0 ]; then
		exit 1
	fi
	exit 0
}

main "$@"
