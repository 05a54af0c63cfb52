#!/bin/bash
#
# examples/demo.sh -- "make demo": the guide's failure sentence, played with
# real client processes against a real server.
#
#   "Two pods run the nightly invoice job and customers get billed twice."
#
# Scene 1: ten pods (examples/invoice_worker.c, libpq) race for the lock
#          invoice-run:2026-10, spelled ten ways; exactly one bills.  On a
#          new server the winner's token waits fencing.clock_tolerance,
#          and the demo says so.
# Scene 2: pod-A takes a 2 s lease and starts billing; the demo freezes it
#          with SIGSTOP (a GC pause, a VM stall); the server ends its session
#          after the lease; pod-B takes over with a higher token and bills;
#          pod-A wakes (SIGCONT), reconnects and carries on with its pending
#          bill with its old token; the run's fence (fencing.check_fence)
#          rejects it with SQLSTATE FN001.
# Scene 3: the same, but pod-A wakes while pod-B has billed only the first
#          customer.  The customer pod-A has pending carries no newer fence
#          yet, so a row fence alone would let pod-A bill it (and pod-B would
#          bill it again); pod-A's check_fence waits for pod-B's transaction
#          and fails with FN001 before pod-A writes anything.
# Scene 4: the job as a long run must be written, on a lease that outlives
#          its transactions: pod-A takes the run with fencing.acquire_lease
#          and bills two customers per transaction, each batch starting with
#          fencing.use_lease; the demo freezes pod-A between two batches
#          (SIGSTOP) until its lease lapses; pod-B, waiting in acquire_lease,
#          takes the run over with a higher token and bills the customers
#          pod-A's committed batches left; pod-A wakes (SIGCONT) and its next
#          batch's use_lease fails with SQLSTATE FN004: it stops.
# Every scene ends with the ledger checked: every customer billed exactly
# once.  Then the guide's "Coordination design" block for this job.
#
# Every transaction of a pod that writes for the run first calls
# fencing.check_fence('<run name>', token); the rows it writes carry the
# token too.  The pods run as a role of their own (billing_worker), which is
# no superuser: fencing 1.1 revokes EXECUTE on check_fence from PUBLIC, so
# the demo grants it to that role, as a deployment must.
#
# It uses the newest installed PostgreSQL (or the one PG_CONFIG or PG_MAJOR
# names): 15 on Debian 12, 17 on 13, 18 on forky.  As root it installs what
# it runs and is missing (test/lib/common.sh maps each command to its Debian
# package), builds and installs the extension, and runs a throwaway server
# as user postgres.  As another user it
# installs nothing and runs the server as that user.  With PGHOST or PGPORT
# set it uses that server instead (it must preload fencing), in a database it
# creates and drops.  Nothing is left running: servers, workers and the
# scratch directory go away on exit, whatever the exit.

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# The PostgreSQL under test (PG_MAJOR, PG_BINDIR, PG_CONFIG) and the check
# of what the demo runs (ensure_requirements), shared with make test.
# shellcheck source=test/lib/common.sh
. "$ROOT/test/lib/common.sh"
LOCK_NAME='invoice-run:2026-10'
PERIOD='2026-10'
LEASE_TTL='2s'
# Scene 3's pod-B waits, its transaction open, while the demo wakes pod-A:
# a longer lease keeps the run its own meanwhile, even on a slow machine.
HOLD_LEASE_TTL='10s'
# Scene 4: pod-A's lease, renewed by each batch's use_lease (a batch every
# second, a third of the ttl), and pod-B's, which keeps the run while the
# demo wakes pod-A.
BATCH_LEASE_TTL='3s'
BATCH_STEP_MS=1000
TAKEOVER_WAIT='10s'

# How the ten pods of scene 1 spell the lock: case, surrounding white space
# (also no-break and ideographic spaces), fullwidth forms and a compatibility
# character (U+2170 SMALL ROMAN NUMERAL ONE) all name the same lock.
SPELLINGS=(
	'invoice-run:2026-10'
	'Invoice-Run:2026-10'
	' INVOICE-RUN:2026-10 '
	'ｉｎｖｏｉｃｅ-run:2026-10'
	'ＩＮＶＯＩＣＥ－ＲＵＮ：２０２６－１０'
	' invoice-run:2026-10　'
	'iNvOiCe-RuN:2026-10'
	'ⅰnvoice-run:2026-10'
	'invoice-RUN:2026-10'
	'INVOICE-RUN:2026-10'
)

START_SECONDS=$SECONDS
SCRATCH=
SERVER_STARTED=0
DEMO_DB=
ADMIN_DB=
WORKER_ROLE=
ROLE_CREATED=0
RUN_AS=()
WORKER_PIDS=()
USE_EXISTING=0
if [ -n "${PGHOST:-}" ] || [ -n "${PGPORT:-}" ]; then
	USE_EXISTING=1
fi

say()
{
	printf '%s\n' "$*"
}

die()
{
	printf '\ndemo: %s\n' "$*" >&2
	exit 1
}

is_root()
{
	[ "$(id -u)" -eq 0 ]
}

now_usec()
{
	date +%s%6N
}

# Stop everything this run started, whatever way it ends: workers (by the
# pids we recorded), the throwaway server, the demo database on a server we
# were given, the scratch directory.
cleanup()
{
	local rc=$? pid

	trap - EXIT INT TERM
	for pid in "${WORKER_PIDS[@]}"; do
		kill -CONT "$pid" 2>/dev/null || true
		kill -KILL "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	done
	if [ "$SERVER_STARTED" = 1 ]; then
		"${RUN_AS[@]}" "$PG_BINDIR/pg_ctl" -D "$SCRATCH/data" -m fast -w stop >/dev/null 2>&1 ||
			"${RUN_AS[@]}" "$PG_BINDIR/pg_ctl" -D "$SCRATCH/data" -m immediate -w stop >/dev/null 2>&1 || true
	fi
	if [ "$USE_EXISTING" = 1 ] && [ -n "$DEMO_DB" ]; then
		psql -X -q -d "$ADMIN_DB" -c "DROP DATABASE IF EXISTS \"$DEMO_DB\" WITH (FORCE)" >/dev/null 2>&1 ||
			printf 'demo: could not drop database %s; drop it by hand\n' "$DEMO_DB" >&2
	fi
	# after the database: the role's grants lived there
	if [ "$USE_EXISTING" = 1 ] && [ "$ROLE_CREATED" = 1 ]; then
		psql -X -q -d "$ADMIN_DB" -c "DROP ROLE IF EXISTS \"$WORKER_ROLE\"" >/dev/null 2>&1 ||
			printf 'demo: could not drop role %s; drop it by hand\n' "$WORKER_ROLE" >&2
	fi
	if [ -n "$SCRATCH" ]; then
		rm -rf "$SCRATCH"
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- packages, build, install ---------------------------------------------

# What this run executes: the client side always (psql, gcc and libpq for
# the workers), the server side only when we start our own server and
# install the extension.  Missing pieces are installed as root, and named
# with their Debian packages otherwise.
ensure_demo_requirements()
{
	local groups=(client)

	if [ "$USE_EXISTING" = 0 ]; then
		groups=(server build client)
	fi
	ensure_requirements "${groups[@]}" ||
		die "cannot run the demo without the missing pieces above"
}

# Build and install the extension into the PostgreSQL that pg_config names.
# What that leaves behind is said before it happens.
build_and_install()
{
	local log=$SCRATCH/build.log pkglibdir

	pkglibdir=$("$PG_CONFIG" --pkglibdir)
	if is_root || [ -w "$pkglibdir" ]; then
		say "note: this installs fencing with 'make install', and it stays installed after the demo:"
		say "  fencing.so in $pkglibdir, fencing.control and its SQL scripts in $("$PG_CONFIG" --sharedir)/extension."
		say "  dpkg does not know these files: installing the .deb later overwrites them without a word."
		say "  'make uninstall' removes them; the build tools the demo needed stay installed too."
	fi
	say "building the extension (make WERROR=1) ..."
	if ! make -C "$ROOT" WERROR=1 -j"$(nproc)" PG_CONFIG="$PG_CONFIG" >"$log" 2>&1; then
		tail -n 30 "$log" >&2
		die "the build failed (log above)"
	fi
	if is_root || [ -w "$pkglibdir" ]; then
		if ! make -C "$ROOT" install PG_CONFIG="$PG_CONFIG" >>"$log" 2>&1; then
			tail -n 30 "$log" >&2
			die "make install failed (log above)"
		fi
	elif [ ! -e "$pkglibdir/fencing.so" ] || [ ! -e "$("$PG_CONFIG" --sharedir)/extension/fencing.control" ]; then
		die "fencing is not installed and $pkglibdir is not writable:
run 'sudo make install' once, then 'make demo' again"
	elif ! cmp -s "$ROOT/fencing.so" "$pkglibdir/fencing.so"; then
		say "note: the installed fencing.so differs from this build; 'sudo make install' to demo this tree"
	fi
}

# Compile the C clients of the demo and the example into the scratch dir.
compile_examples()
{
	local src

	mkdir -p "$SCRATCH/bin"
	for src in invoice_worker correctness_lock; do
		gcc -O2 -Wall -Wextra -Werror -I"$("$PG_CONFIG" --includedir)" \
			"$ROOT/examples/$src.c" -L"$("$PG_CONFIG" --libdir)" -lpq \
			-o "$SCRATCH/bin/$src" || die "could not compile examples/$src.c"
	done
	WORKER=$SCRATCH/bin/invoice_worker
}

# --- the server -------------------------------------------------------------

# A port nobody listens on.  The server listens only on its private unix
# socket, but a free number keeps the socket name unambiguous in messages.
pick_port()
{
	local port

	while :; do
		port=$((20000 + RANDOM % 40000))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
			printf '%s\n' "$port"
			return
		fi
	done
}

# initdb and start a server of our own, as user postgres when we are root.
start_throwaway_server()
{
	local port dbuser

	port=$(pick_port)
	if is_root; then
		id postgres >/dev/null 2>&1 || die "user postgres does not exist (install postgresql-$PG_MAJOR)"
		chown postgres: "$SCRATCH"
		RUN_AS=(runuser -u postgres --)
		dbuser=postgres
	else
		dbuser=$(id -un)
	fi
	"${RUN_AS[@]}" "$PG_BINDIR/initdb" -D "$SCRATCH/data" -U "$dbuser" --auth=trust \
		--no-sync -E UTF8 --no-locale >"$SCRATCH/initdb.log" 2>&1 ||
		{ cat "$SCRATCH/initdb.log" >&2; die "initdb failed"; }
	cat >>"$SCRATCH/data/postgresql.conf" <<EOF
shared_preload_libraries = 'fencing'
listen_addresses = ''
unix_socket_directories = '$SCRATCH'
port = $port
max_connections = 40
log_min_messages = warning
EOF
	"${RUN_AS[@]}" "$PG_BINDIR/pg_ctl" -D "$SCRATCH/data" -l "$SCRATCH/server.log" -w -t 60 start \
		>/dev/null 2>&1 || { cat "$SCRATCH/server.log" >&2; die "the server did not start"; }
	SERVER_STARTED=1
	export PGHOST=$SCRATCH PGPORT=$port PGUSER=$dbuser
	ADMIN_DB=postgres
	say "throwaway server: PostgreSQL $PG_MAJOR on socket $SCRATCH port $port, shared_preload_libraries = 'fencing'"
}

# Use the server the environment names: it must preload fencing.
check_existing_server()
{
	local preload

	ADMIN_DB=${PGDATABASE:-postgres}
	preload=$(psql -X -At -d "$ADMIN_DB" -c 'SHOW shared_preload_libraries' 2>&1) ||
		die "cannot connect to the server named by PGHOST/PGPORT: $preload"
	if ! printf '%s\n' "$preload" | tr ',' '\n' | sed 's/^[ "]*//; s/[ "]*$//' | grep -qx fencing; then
		die "the server at PGHOST=${PGHOST:-} PGPORT=${PGPORT:-} does not preload fencing
(shared_preload_libraries = '$preload').  Add fencing to shared_preload_libraries in its
postgresql.conf and restart it, or unset PGHOST and PGPORT to let the demo start its own server."
	fi
	say "using the server at PGHOST=${PGHOST:-} PGPORT=${PGPORT:-} (it preloads fencing)"
}

psql_demo()
{
	psql -X -q -v ON_ERROR_STOP=1 -d "$DEMO_DB" "$@"
}

# A database and a worker role of our own, on either server, so we clean up
# exactly what we made.  The pods run as the role: it is what a deployment
# grants check_fence and use_lease to (PUBLIC may execute neither).
create_demo_database()
{
	if [ "$USE_EXISTING" = 1 ]; then
		DEMO_DB=fencing_demo_$$
		WORKER_ROLE=billing_worker_$$
	else
		DEMO_DB=fencing_demo
		WORKER_ROLE=billing_worker
	fi
	psql -X -q -v ON_ERROR_STOP=1 -d "$ADMIN_DB" -c "CREATE DATABASE \"$DEMO_DB\"" >/dev/null ||
		{ DEMO_DB=; die "cannot create the demo database"; }
	psql -X -q -v ON_ERROR_STOP=1 -d "$ADMIN_DB" -c "CREATE ROLE \"$WORKER_ROLE\" NOLOGIN" >/dev/null ||
		die "cannot create the role $WORKER_ROLE"
	ROLE_CREATED=1
	psql_demo -v worker_role="$WORKER_ROLE" >/dev/null <<'EOF'
CREATE EXTENSION fencing;
GRANT EXECUTE ON FUNCTION fencing.check_fence(text, bigint) TO :"worker_role";
GRANT EXECUTE ON FUNCTION fencing.use_lease(text, bigint) TO :"worker_role";
EOF
	export PGDATABASE=$DEMO_DB
	say "the pods run as role $WORKER_ROLE (no superuser); PUBLIC may execute neither check_fence nor use_lease, so:"
	say "    GRANT EXECUTE ON FUNCTION fencing.check_fence(text, bigint) TO $WORKER_ROLE;"
	say "    GRANT EXECUTE ON FUNCTION fencing.use_lease(text, bigint) TO $WORKER_ROLE;"
}

# Start one pod in the background as the worker role, its events appended
# to EVENTS; WORKER_PID is its pid.
start_worker()
{
	local events=$1

	shift
	PGOPTIONS="${PGOPTIONS:-} -c role=$WORKER_ROLE" \
		"$WORKER" --period "$PERIOD" "$@" >>"$events" 2>>"$SCRATCH/workers.err" &
	WORKER_PID=$!
	WORKER_PIDS+=("$WORKER_PID")
}

# A fresh ledger: five customers, the fence on the accounts, and what the
# worker role may do with them.
setup_ledger()
{
	psql_demo -v worker_role="$WORKER_ROLE" >/dev/null <<'EOF'
SET client_min_messages = warning;
DROP SCHEMA IF EXISTS billing CASCADE;
CREATE SCHEMA billing;
CREATE TABLE billing.accounts (
	customer_id	integer PRIMARY KEY,
	name		text NOT NULL,
	monthly_fee	numeric(10,2) NOT NULL,
	balance		numeric(10,2) NOT NULL DEFAULT 0,
	fence		bigint		-- no DEFAULT: protect() refuses one (F7)
);
CREATE TABLE billing.invoices (
	invoice_id	bigserial PRIMARY KEY,
	customer_id	integer NOT NULL REFERENCES billing.accounts,
	period		text NOT NULL,
	amount		numeric(10,2) NOT NULL,
	token		bigint NOT NULL,
	worker		text NOT NULL,
	-- The fences order the holders; they cannot undo a bill a stale pod
	-- committed before the new holder's first check_fence (say, while nobody
	-- held the run yet).  Should that happen, the new holder fails here
	-- (23505) rather than billing the customer twice.
	UNIQUE (customer_id, period)
);
INSERT INTO billing.accounts (customer_id, name, monthly_fee) VALUES
	(1, 'Acme', 120.00), (2, 'Globex', 80.00), (3, 'Initech', 45.50),
	(4, 'Umbrella', 300.00), (5, 'Hooli', 99.90);
SELECT fencing.protect('billing.accounts');
GRANT USAGE ON SCHEMA billing TO :"worker_role";
GRANT SELECT, UPDATE ON billing.accounts TO :"worker_role";
GRANT SELECT, INSERT ON billing.invoices TO :"worker_role";
GRANT USAGE ON SEQUENCE billing.invoices_invoice_id_seq TO :"worker_role";
EOF
}

# --- the timeline -----------------------------------------------------------

# The demo's own events go into the same file as the workers' lines.
note()
{
	local file=$1 who=$2 event=$3 token=$4 text=$5

	printf '%s\t%s\t%s\t%s\t%s\n' "$(now_usec)" "$who" "$event" "$token" "$text" >>"$file"
}

# Print a scene's events in time order, seconds since the scene began.
print_timeline()
{
	local file=$1 t0=$2 skip=${3:-}

	sort -t $'\t' -k1,1n "$file" |
		awk -F'\t' -v t0="$t0" -v skip="$skip" '
			$3 == skip { next }
			{
				tok = ($4 == "-") ? "" : "token " $4
				printf "  %+7.3fs  %-6s %-22s %s\n", ($1 - t0) / 1e6, $2, tok, $5
			}'
}

# Wait until FILE has at least N lines with EVENT (from WHO, if given).
wait_for_events()
{
	local file=$1 event=$2 n=$3 who=${4:-} timeout_s=${5:-20} deadline

	deadline=$((SECONDS + timeout_s))
	while [ "$(awk -F'\t' -v e="$event" -v w="$who" '$3 == e && (w == "" || $2 == w)' "$file" | wc -l)" -lt "$n" ]; do
		[ $SECONDS -lt $deadline ] || die "timed out waiting for $n '$event' events${who:+ from $who}"
		sleep 0.05
	done
}

# The single field of one event, e.g. the token of pod-A's "got" line.
event_field()
{
	local file=$1 who=$2 event=$3 field=$4

	awk -F'\t' -v e="$event" -v w="$who" -v f="$field" '$3 == e && $2 == w { print $f; exit }' "$file"
}

# Print the ledger: every account, its invoices and its fence.
show_ledger()
{
	say ""
	say "  ledger:"
	psql_demo -P footer=off <<'EOF' | sed 's/^/    /'
SELECT a.customer_id AS id, a.name, a.monthly_fee, a.balance,
       count(i.invoice_id) AS invoices,
       coalesce(string_agg(i.worker || ' token ' || i.token, ', '), '-') AS billed_by,
       a.fence
  FROM billing.accounts a LEFT JOIN billing.invoices i USING (customer_id)
 GROUP BY a.customer_id ORDER BY a.customer_id;
EOF
}

# Every customer billed exactly once, each by whichever holder billed it:
# one invoice each, a balance of one monthly fee, and the invoice's token as
# the row's fence.  Exit non-zero otherwise.
check_ledger_each_once()
{
	local bad

	show_ledger
	bad=$(psql_demo -At <<'EOF'
SELECT count(*) FROM billing.accounts a
 WHERE a.balance <> a.monthly_fee
    OR (SELECT count(*) FROM billing.invoices i WHERE i.customer_id = a.customer_id) <> 1
    OR a.fence IS DISTINCT FROM (SELECT i.token FROM billing.invoices i WHERE i.customer_id = a.customer_id);
EOF
)
	if [ "$bad" != 0 ]; then
		die "FAILED: $bad customer(s) not billed exactly once"
	fi
	CUSTOMERS=$(psql_demo -At -c 'SELECT count(*) FROM billing.accounts')
}

# Every customer billed exactly once, by the holder with token $1: one
# invoice each, carrying that token, a balance of one monthly fee, and the
# token as the row's fence.  Exit non-zero otherwise.
check_ledger()
{
	local winner_token=$1 bad

	show_ledger
	bad=$(psql_demo -At -v tok="$winner_token" <<'EOF'
SELECT count(*) FROM billing.accounts a
 WHERE a.balance <> a.monthly_fee
    OR a.fence <> :'tok'::bigint
    OR (SELECT count(*) FROM billing.invoices i WHERE i.customer_id = a.customer_id) <> 1
    OR EXISTS (SELECT FROM billing.invoices i
                WHERE i.customer_id = a.customer_id AND i.token <> :'tok'::bigint);
EOF
)
	if [ "$bad" != 0 ]; then
		die "FAILED: $bad customer(s) not billed exactly once by token $winner_token"
	fi
	CUSTOMERS=$(psql_demo -At -c 'SELECT count(*) FROM billing.accounts')
	say "  OK: all $CUSTOMERS customers billed exactly once, each invoice and fence carrying token $winner_token"
}

# --- scene 1: ten pods race -------------------------------------------------

scene_race()
{
	local events=$SCRATCH/race.events i label t0 rc winners=0 busy=0 list
	local -a pids=() labels=()

	say ""
	say "=== Scene 1: ten pods start the $PERIOD invoice run at the same moment ==="
	say ""
	say "  How each pod spells the lock, and what fencing makes of it:"
	list=
	for i in "${!SPELLINGS[@]}"; do
		list+="${list:+,}($((i + 1)), \$s\$${SPELLINGS[$i]}\$s\$)"
	done
	psql_demo -P footer=off -c "
		SELECT format('w%s', lpad(n::text, 2, '0')) AS pod,
		       format('''%s''', s) AS spelling,
		       fencing.normalize_name(s) AS canonical_name,
		       fencing.lock_key(s) AS advisory_lock_key
		  FROM (VALUES $list) AS v(n, s) ORDER BY n" | sed 's/^/    /'
	setup_ledger
	FRESH_START=$(psql_demo -At -c 'SELECT fresh_start_pending FROM fencing.status()')
	: >"$events"
	t0=$(now_usec)
	for i in "${!SPELLINGS[@]}"; do
		label=$(printf 'w%02d' $((i + 1)))
		start_worker "$events" --worker "$label" --lock "${SPELLINGS[$i]}" --gate --step-ms 150
		pids+=("$WORKER_PID")
		labels+=("$label")
	done
	wait_for_events "$events" ready ${#SPELLINGS[@]}
	note "$events" demo go - "all ${#SPELLINGS[@]} pods connected; SIGUSR1 to all: ask for the lock now"
	kill -USR1 "${pids[@]}"
	for i in "${!pids[@]}"; do
		rc=0
		wait "${pids[$i]}" || rc=$?
		case $rc in
			0) winners=$((winners + 1)); RACE_WINNER=${labels[$i]} ;;
			2) busy=$((busy + 1)) ;;
			*) cat "$SCRATCH/workers.err" >&2
			   print_timeline "$events" "$t0"
			   die "pod ${labels[$i]} failed (exit $rc)" ;;
		esac
	done
	WORKER_PIDS=()

	say ""
	say "  timeline (seconds since the scene began):"
	print_timeline "$events" "$t0" ready
	if [ "$winners" != 1 ] || [ "$busy" != $((${#SPELLINGS[@]} - 1)) ]; then
		die "FAILED: $winners pods billed and $busy saw the run busy (expected 1 and $((${#SPELLINGS[@]} - 1)))"
	fi
	[ "$(awk -F'\t' '$3 == "got"' "$events" | wc -l)" = 1 ] ||
		die "FAILED: more than one pod got a token"
	RACE_TOKEN=$(event_field "$events" "$RACE_WINNER" got 4)
	RACE_PODS=${#SPELLINGS[@]}
	RACE_SPELLINGS=$(printf '%s\n' "${SPELLINGS[@]}" | sort -u | wc -l)
	RACE_BUSY=$busy
	say ""
	say "  $RACE_WINNER got the lock (token $RACE_TOKEN) and billed; the other $busy saw it busy and billed nothing."
	if [ "$FRESH_START" = t ]; then
		say "  Why the grant took about a second: it was this new server's first token. A new cluster's"
		say "  first token waits fencing.clock_tolerance ($(psql_demo -At -c 'SHOW fencing.clock_tolerance')), so that its tokens start above any"
		say "  token an earlier cluster could have issued (doc/guarantees.md, T4). Later tokens do not wait."
	fi
	check_ledger "$RACE_TOKEN"
}

# --- scene 2: the holder pauses past its lease ------------------------------

# The backend pid a worker printed in its "ready" line.
backend_pid_of()
{
	event_field "$1" "$2" ready 5 | sed -n 's/^backend pid \([0-9]*\);.*/\1/p'
}

# Start pod-A with a short lease, let it bill N customers, freeze it
# (SIGSTOP: a GC pause, a VM stall) with its transaction open, and wait
# until the server ends its session for outliving the lease.  Sets PID_A,
# TOKEN_A and STOPPED_AT.
freeze_pod_a_past_its_lease()
{
	local events=$1 bills=$2 backend_a held deadline

	start_worker "$events" --worker pod-A --lock "$LOCK_NAME" --lease "$LEASE_TTL" \
		--step-ms 400 --naive-resume
	PID_A=$WORKER_PID
	wait_for_events "$events" bill "$bills" pod-A
	kill -STOP "$PID_A"
	STOPPED_AT=$(now_usec)
	TOKEN_A=$(event_field "$events" pod-A got 4)
	backend_a=$(backend_pid_of "$events" pod-A)
	note "$events" demo stop - "SIGSTOP pod-A: frozen mid-run (a GC pause, a VM stall), its transaction open"
	held=$(psql_demo -At -c "SELECT format('%s held by backend %s with token %s', name, pid, token)
	                           FROM fencing.locks WHERE granted AND name = fencing.normalize_name('$LOCK_NAME')" 2>/dev/null || true)
	[ -n "$held" ] && note "$events" demo view - "fencing.locks: $held"

	# The server enforces the lease: idle in the transaction longer than the
	# ttl, the session is ended and the lock goes with it.
	deadline=$((SECONDS + 20))
	while [ "$(psql_demo -At -c "SELECT count(*) FROM pg_stat_activity WHERE pid = $backend_a")" != 0 ]; do
		[ $SECONDS -lt $deadline ] || die "FAILED: the server did not end pod-A's session after its $LEASE_TTL lease"
		sleep 0.1
	done
	note "$events" server ended - "ended pod-A's session (backend $backend_a): idle in its transaction longer than the $LEASE_TTL lease; the lock is free, pod-A's uncommitted bills are rolled back"
}

# The end of a scene in which pod-B took the run over from pod-A, both
# exited: print the timeline, then check that pod-B billed (exit 0) with a
# token above pod-A's ($3).  Sets TOKEN_B.
show_takeover()
{
	local events=$1 t0=$2 token_a=$3 rc_b=$4

	WORKER_PIDS=()
	say ""
	say "  timeline (seconds since the scene began):"
	print_timeline "$events" "$t0"
	say ""
	TOKEN_B=$(event_field "$events" pod-B got 4)
	if [ "$rc_b" != 0 ]; then
		cat "$SCRATCH/workers.err" >&2
		die "FAILED: pod-B did not bill (exit $rc_b)"
	fi
	if [ -z "$token_a" ] || [ -z "$TOKEN_B" ] || [ "$TOKEN_B" -le "$token_a" ]; then
		die "FAILED: pod-B's token ($TOKEN_B) is not above pod-A's ($token_a)"
	fi
}

# The end of scenes 2 and 3: the takeover, and pod-A stopped by the run's
# fence, fencing.check_fence (exit 3, FN001 "for resource"), before it
# wrote anything.
show_pod_a_fenced_out()
{
	local events=$1 t0=$2 rc_a=$3 rc_b=$4

	show_takeover "$events" "$t0" "$TOKEN_A" "$rc_b"
	if [ "$rc_a" != 3 ] ||
		! grep -q $'\tpod-A\trejected\t.*SQLSTATE FN001: stale fence token [0-9]* for resource' "$events"; then
		cat "$SCRATCH/workers.err" >&2
		die "FAILED: pod-A was not stopped with FN001 by the run's fence, fencing.check_fence (exit $rc_a)"
	fi
}

scene_pause()
{
	local events=$SCRATCH/pause.events t0 rc_a=0 rc_b=0 resumed_at

	say ""
	say "=== Scene 2: the pod holding the run freezes longer than its lease ==="
	setup_ledger
	: >"$events"
	t0=$(now_usec)

	freeze_pod_a_past_its_lease "$events" 2
	start_worker "$events" --worker pod-B --lock 'Invoice-Run:2026-10' --lease "$LEASE_TTL" --step-ms 100
	wait "$WORKER_PID" || rc_b=$?

	note "$events" demo cont - "SIGCONT pod-A: it wakes up believing it still holds the run"
	resumed_at=$(now_usec)
	kill -CONT "$PID_A"
	wait "$PID_A" || rc_a=$?
	show_pod_a_fenced_out "$events" "$t0" "$rc_a" "$rc_b"
	say "  pod-A's token $TOKEN_A < pod-B's token $TOKEN_B: pod-A's check_fence on the run was rejected (FN001)"
	say "  before it wrote anything; pod-B's bills stand."
	PAUSE_TOKEN_A=$TOKEN_A
	PAUSE_TOKEN_B=$TOKEN_B
	PAUSE_SECONDS=$(awk -v a="$STOPPED_AT" -v b="$resumed_at" 'BEGIN { printf "%.1f", (b - a) / 1e6 }')
	check_ledger "$TOKEN_B"
}

# --- scene 3: the stale pod wakes in the middle of the new holder's run -------

# Wait until pod-A's check_fence waits for a lock (pod-B's open transaction
# holds the run's fence row), or pod-A has ended (it did not wait: without
# the run's fence it would bill and commit at once).
wait_for_pod_a_to_wait_or_end()
{
	local events=$1 deadline

	deadline=$((SECONDS + 20))
	while :; do
		if [ "$(psql_demo -At -c "SELECT count(*) FROM pg_stat_activity
		                           WHERE application_name = 'pod-A' AND wait_event_type = 'Lock'")" != 0 ]; then
			note "$events" demo view - "pod-A's check_fence waits: pod-B's open transaction holds the run's fence"
			return
		fi
		if awk -F'\t' '$2 == "pod-A" && ($3 == "commit" || $3 == "stop" || $3 == "error")' "$events" | grep -q .; then
			return
		fi
		[ $SECONDS -lt $deadline ] || die "FAILED: pod-A neither waited for pod-B nor ended"
		sleep 0.05
	done
}

scene_wake_mid_run()
{
	local events=$SCRATCH/midrun.events t0 pid_b rc_a=0 rc_b=0

	say ""
	say "=== Scene 3: the frozen pod wakes up while the new holder is half way through the run ==="
	setup_ledger
	: >"$events"
	t0=$(now_usec)

	freeze_pod_a_past_its_lease "$events" 1
	start_worker "$events" --worker pod-B --lock 'Invoice-Run:2026-10' --lease "$HOLD_LEASE_TTL" \
		--step-ms 100 --hold-after 1
	pid_b=$WORKER_PID
	wait_for_events "$events" hold 1 pod-B

	note "$events" demo cont - "SIGCONT pod-A: pod-B has billed only Acme; the customers after it carry no newer fence yet"
	kill -CONT "$PID_A"
	wait_for_pod_a_to_wait_or_end "$events"
	note "$events" demo go - "SIGUSR1 pod-B: it carries on with the run"
	kill -USR1 "$pid_b"
	wait "$pid_b" || rc_b=$?
	wait "$PID_A" || rc_a=$?
	show_pod_a_fenced_out "$events" "$t0" "$rc_a" "$rc_b"
	say "  pod-A woke while pod-B had billed only Acme.  The bill pod-A had pending was for a customer"
	say "  pod-B had not reached: that row carried no newer fence, so a row fence alone would have let"
	say "  pod-A bill it, and pod-B would then have billed it again.  pod-A's check_fence on the run"
	say "  waited for pod-B's transaction and was rejected (FN001) before pod-A wrote anything."
	MIDRUN_TOKEN_A=$TOKEN_A
	MIDRUN_TOKEN_B=$TOKEN_B
	check_ledger "$TOKEN_B"
}

# --- scene 4: a batch job on a lease; its pod freezes between two batches ------

# Freeze pod-A between two batches: after one of its commits, SIGSTOP it,
# and check that its session is idle (no batch open: a pod frozen inside a
# batch keeps the run's fence row locked, and its successor's use_lease
# would wait for it).  If it had begun its next batch already, let it go
# on and try again after that batch's commit.
freeze_between_batches()
{
	local events=$1 commits=1 state

	while :; do
		wait_for_events "$events" commit "$commits" pod-A
		kill -STOP "$PID_A"
		state=$(psql_demo -At -c "SELECT state FROM pg_stat_activity WHERE application_name = 'pod-A'")
		[ "$state" = idle ] && return
		kill -CONT "$PID_A"
		commits=$((commits + 1))
		[ "$commits" -le 2 ] || die "FAILED: could not freeze pod-A between two batches"
	done
}

scene_batch_lease()
{
	local events=$SCRATCH/batch.events t0 pid_b rc_a=0 rc_b=0 token_a token_b lease_row stopped_at woke_at
	local billed_a billed_b

	say ""
	say "=== Scene 4: the run on a lease that outlives its transactions; the pod freezes between two batches ==="
	say ""
	say "  The job as README.md's invoice pattern writes it: fencing.acquire_lease takes the run once,"
	say "  every batch (two customers, one transaction) starts with fencing.use_lease, which renews the"
	say "  lease, raises the run's fence to the token and sets fencing.token; the lease stays after COMMIT."
	setup_ledger
	: >"$events"
	t0=$(now_usec)

	start_worker "$events" --worker pod-A --lock "$LOCK_NAME" --lease "$BATCH_LEASE_TTL" \
		--batch 2 --step-ms "$BATCH_STEP_MS"
	PID_A=$WORKER_PID
	freeze_between_batches "$events"
	stopped_at=$(now_usec)
	note "$events" demo stop - "SIGSTOP pod-A between two batches (a GC pause, a VM stall): nothing renews its $BATCH_LEASE_TTL lease now"
	lease_row=$(psql_demo -At -c "SELECT format('%s held by %s, token %s, expires in %s s unless renewed', name, holder, token,
	                                      round(extract(epoch FROM expires_at - clock_timestamp())::numeric, 1))
	                                FROM fencing.leases WHERE name = fencing.normalize_name('$LOCK_NAME')")
	[ -n "$lease_row" ] && note "$events" demo view - "fencing.leases: $lease_row"

	start_worker "$events" --worker pod-B --lock 'Invoice-Run:2026-10' --lease "$HOLD_LEASE_TTL" \
		--batch 2 --step-ms 100 --wait "$TAKEOVER_WAIT" --hold-after 1
	pid_b=$WORKER_PID
	wait_for_events "$events" hold 1 pod-B

	woke_at=$(now_usec)
	note "$events" demo cont - "SIGCONT pod-A: it wakes up believing it still holds the run, and starts its next batch"
	kill -CONT "$PID_A"
	wait "$PID_A" || rc_a=$?
	note "$events" demo go - "SIGUSR1 pod-B: it carries on with the run"
	kill -USR1 "$pid_b"
	wait "$pid_b" || rc_b=$?
	token_a=$(event_field "$events" pod-A got 4)
	show_takeover "$events" "$t0" "$token_a" "$rc_b"
	token_b=$TOKEN_B
	if [ "$rc_a" != 5 ] || ! grep -q $'\tpod-A\tfn004\t.*SQLSTATE FN004' "$events"; then
		cat "$SCRATCH/workers.err" >&2
		die "FAILED: pod-A was not stopped with FN004 at its next batch (exit $rc_a)"
	fi
	check_ledger_each_once
	billed_a=$(psql_demo -At -c "SELECT count(*) FROM billing.invoices WHERE token = $token_a")
	billed_b=$(psql_demo -At -c "SELECT count(*) FROM billing.invoices WHERE token = $token_b")
	say "  OK: all $CUSTOMERS customers billed exactly once: $billed_a by pod-A (token $token_a) before it froze,"
	say "  $billed_b by pod-B (token $token_b) after it took over; each account's fence is its invoice's token"
	say ""
	say "  pod-A was frozen between two batches, its transactions committed, so nothing of its work was"
	say "  lost or left half done.  Its lease lapsed $BATCH_LEASE_TTL after its last use_lease; pod-B, asleep in"
	say "  acquire_lease, got the run at once with a higher token and went on where pod-A's committed"
	say "  batches ended.  Woken, pod-A began its next batch, and use_lease refused it with FN004 before it"
	say "  wrote anything; it stopped, without retrying or reconnecting.  Had it ignored that, pod-B's"
	say "  use_lease had already raised the run's fence to pod-B's token: the fences would refuse its writes."
	BATCH_TOKEN_A=$token_a
	BATCH_TOKEN_B=$token_b
	BATCH_BILLED_A=$billed_a
	BATCH_SECONDS=$(awk -v a="$stopped_at" -v b="$woke_at" 'BEGIN { printf "%.1f", (b - a) / 1e6 }')
}

# --- the design block ---------------------------------------------------------

print_design()
{
	cat <<EOF

## Coordination design: nightly invoice run ($LOCK_NAME)
**Failure being prevented:** two pods run the nightly invoice job and customers get billed twice.
**Lock type:** correctness: a second run would bill every customer again.
**Mechanism:** lease + fence; scenes 1-3 hold the run for one transaction (fencing.lease), scene 4 across batches (fencing.acquire_lease, then fencing.use_lease first in each batch, granted to the pods' role).
**Store:** PostgreSQL, the database that holds the ledger.
**TTL and renewal:** $LEASE_TTL here ($BATCH_LEASE_TTL in scene 4) to keep the demo short; in production 30 s, renewed every 10 s; a failed renewal stops the job.
**Fencing:** fencing.check_fence on '$LOCK_NAME', first in every transaction that writes, and the trigger on billing.accounts; the pods' role needs GRANT EXECUTE ON FUNCTION fencing.check_fence(text, bigint) TO $WORKER_ROLE.
**Tests:** (README.md and doc/choosing.md explain the pattern)
- concurrency: $RACE_PODS pods, $RACE_SPELLINGS spellings of the name: 1 token ($RACE_WINNER), $RACE_BUSY busy; each customer billed once.
- expiry: pod-A (token $PAUSE_TOKEN_A) frozen ${PAUSE_SECONDS} s against a $LEASE_TTL ttl; pod-B (token $PAUSE_TOKEN_B) billed all $CUSTOMERS customers; pod-A's check_fence failed with FN001.
- wake mid-run: pod-A (token $MIDRUN_TOKEN_A) woke when pod-B (token $MIDRUN_TOKEN_B) had billed 1 of $CUSTOMERS; pod-A's check_fence failed with FN001 before any write.
- batch job on a lease: pod-A (token $BATCH_TOKEN_A) billed $BATCH_BILLED_A customers, was frozen ${BATCH_SECONDS} s; pod-B (token $BATCH_TOKEN_B) billed the rest; pod-A's next use_lease failed with FN004.
- release: fencing.release_lease(name, token) frees only the lease held with that token.
EOF
}

# --- main -----------------------------------------------------------------------

SCRATCH=$(mktemp -d /tmp/fencing-demo.XXXXXX)
chmod 755 "$SCRATCH"

ensure_demo_requirements
if [ "$USE_EXISTING" = 0 ]; then
	build_and_install
fi
compile_examples
if [ "$USE_EXISTING" = 0 ]; then
	start_throwaway_server
else
	check_existing_server
fi
create_demo_database

scene_race
scene_pause
scene_wake_mid_run
scene_batch_lease
print_design

say ""
say "demo finished in $((SECONDS - START_SECONDS)) s; stopping the server and removing $SCRATCH"
if [ "$USE_EXISTING" = 0 ] && is_root; then
	say "fencing stays installed by 'make install' ('make uninstall' removes it; see README.md, \"Try it first\")"
fi
