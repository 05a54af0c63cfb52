#!/bin/bash
#
# test/fresh/dump.sh -- T4 across pg_dump and pg_restore into a newer
# PostgreSQL: a dump of a 15 cluster restored into 17 and 18 keeps
# fencing.resource_fences and the fences of a protected table, and the
# new cluster's tokens continue above every token of the old one, without
# a manual step.  test/fresh/run.sh runs it inside the fresh roots.
#
#   test/fresh/dump.sh write DIR     on the old server: a database with
#       fencing, a protected table whose rows carry fences, watermarks in
#       fencing.resource_fences; writes DIR/app.dump (pg_dump -Fc), the
#       rows as the old cluster saw them, and its last token
#   test/fresh/dump.sh restore DIR   on the new server: a new cluster,
#       createdb and pg_restore, nothing else; then checks the rows, that
#       the first token is above the old last one, and that the restored
#       fences still reject stale tokens (SQLSTATE FN001)
#
# Both start a throwaway server of the newest installed PostgreSQL (or the
# one PG_CONFIG or PG_MAJOR names) with fencing preloaded, as user postgres
# when run as root, and remove it afterwards.  fencing must be installed
# (make test or make install did that).  The last line says what was found.

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=test/lib/common.sh
. "$ROOT/test/lib/common.sh"

MODE=${1:-}
DIR=${2:-}
case $MODE in
write | restore) [ -n "$DIR" ] || MODE= ;;
*) MODE= ;;
esac
if [ -z "$MODE" ]; then
	echo "usage: $0 write|restore DIR" >&2
	exit 2
fi

TEST_USER=$(unprivileged_user)
SCRATCH=$(mktemp -d /tmp/fencing-dump.XXXXXX)
chmod 755 "$SCRATCH"
is_root && chown "$TEST_USER": "$SCRATCH"
PORT=$(free_port)
STARTED=0

cleanup()
{
	if [ "$STARTED" = 1 ]; then
		as_test_user pg_ctl -D "$SCRATCH/data" -m immediate -w stop >/dev/null 2>&1 || true
	fi
	rm -rf "$SCRATCH"
}
trap cleanup EXIT

fail()
{
	printf 'dump: FAILED: %s\n' "$*"
	exit 1
}

start_server()
{
	as_test_user initdb -D "$SCRATCH/data" -A trust -U "$TEST_USER" -E UTF8 \
		--no-instructions >"$SCRATCH/initdb.log" 2>&1 ||
		{ cat "$SCRATCH/initdb.log"; fail "initdb"; }
	as_test_user sh -c "cat >> '$SCRATCH/data/postgresql.conf'" <<EOF
port = $PORT
listen_addresses = ''
unix_socket_directories = '$SCRATCH'
shared_preload_libraries = 'fencing'
EOF
	as_test_user pg_ctl -D "$SCRATCH/data" -l "$SCRATCH/server.log" -w -t 60 start \
		>/dev/null 2>&1 || { tail -n 30 "$SCRATCH/server.log"; fail "the server did not start"; }
	STARTED=1
}

sql()
{
	as_test_user psql -X -q -At -v ON_ERROR_STOP=1 -h "$SCRATCH" -p "$PORT" "$@"
}

# What must survive, in a form that compares as text.
snapshot()
{
	sql -d app -c "SELECT resource || ' ' || fence FROM fencing.resource_fences ORDER BY resource" \
		-c "SELECT 'accounts ' || id || ' ' || fence FROM billing.accounts ORDER BY id"
}

start_server
log "dump: $MODE on $("$PG_BINDIR/postgres" --version)"

if [ "$MODE" = write ]; then
	mkdir -p "$DIR"
	sql -d postgres -c 'CREATE DATABASE app'
	sql -d app <<'EOF' >/dev/null
CREATE EXTENSION fencing;
CREATE SCHEMA billing;
CREATE TABLE billing.accounts (
	id		integer PRIMARY KEY,
	name	text NOT NULL,
	balance	numeric(10,2) NOT NULL DEFAULT 0,
	fence	bigint NOT NULL
);
INSERT INTO billing.accounts (id, name, fence) VALUES (1, 'Acme', 0), (2, 'Globex', 0), (3, 'Initech', 0);
SELECT fencing.protect('billing.accounts');
-- three holders, one after the other, each with its own token
UPDATE billing.accounts SET balance = balance + 10, fence = fencing.next_token() WHERE id = 1;
UPDATE billing.accounts SET balance = balance + 20, fence = fencing.next_token() WHERE id = 2;
SELECT fencing.check_fence('invoice-run:2026-10', fencing.next_token());
SELECT fencing.check_fence('Nightly Report', fencing.next_token());
SELECT fencing.check_fence('invoice-run:2026-10', fencing.next_token());
EOF
	# the last token the old cluster ever hands out in this test
	sql -d app -c 'SELECT fencing.next_token()' >"$DIR/last_token"
	snapshot >"$DIR/rows"
	as_test_user pg_dump -Fc -h "$SCRATCH" -p "$PORT" -d app -f "$SCRATCH/app.dump" ||
		fail "pg_dump"
	cp "$SCRATCH/app.dump" "$DIR/app.dump"
	"$PG_BINDIR/postgres" --version >"$DIR/version"
	log "dump: $(grep -c '^' "$DIR/rows") rows written by $(cat "$DIR/version"); last token $(cat "$DIR/last_token")"
	exit 0
fi

# restore: exactly what a user does, nothing more
for f in app.dump rows last_token; do
	[ -s "$DIR/$f" ] || fail "$DIR/$f is missing (run '$0 write' on the old server)"
done
cp "$DIR/app.dump" "$SCRATCH/app.dump"
is_root && chown "$TEST_USER": "$SCRATCH/app.dump"
sql -d postgres -c 'CREATE DATABASE app'
as_test_user pg_restore --exit-on-error -h "$SCRATCH" -p "$PORT" -d app "$SCRATCH/app.dump" \
	>"$SCRATCH/restore.log" 2>&1 || { cat "$SCRATCH/restore.log"; fail "pg_restore"; }

old_last=$(cat "$DIR/last_token")
snapshot >"$SCRATCH/rows"
if ! diff -u "$DIR/rows" "$SCRATCH/rows"; then
	fail "the restored rows differ from the dumped ones (diff above)"
fi
log "dump: $(grep -c '^' "$SCRATCH/rows") rows of fencing.resource_fences and billing.accounts restored unchanged"

first=$(sql -d app -c 'SELECT fencing.next_token()')
if [ "$first" -le "$old_last" ]; then
	fail "T4: the first token of the new cluster ($first) is not above the old cluster's last ($old_last)"
fi
log "dump: T4: first token of the new cluster $first > last token of the old one $old_last"

# The restored fences still fence: a token below a restored watermark or a
# row's fence is rejected with FN001.
stale=$(sql -d app -c "SELECT fence - 1 FROM billing.accounts WHERE id = 2")
out=$(sql -d app -v VERBOSITY=verbose -c "UPDATE billing.accounts SET balance = 0, fence = $stale WHERE id = 2" 2>&1) &&
	fail "a stale write to the restored protected table was accepted"
grep -q 'FN001' <<<"$out" || fail "a stale write was rejected, but not with FN001: $out"
stale=$(sql -d app -c "SELECT fence - 1 FROM fencing.resource_fences WHERE resource = fencing.normalize_name('invoice-run:2026-10')")
out=$(sql -d app -v VERBOSITY=verbose -c "SELECT fencing.check_fence('invoice-run:2026-10', $stale)" 2>&1) &&
	fail "check_fence accepted a token below the restored watermark"
grep -q 'FN001' <<<"$out" || fail "check_fence rejected a stale token, but not with FN001: $out"
log "dump: stale tokens below the restored fences are rejected (FN001)"
log "dump: $(cat "$DIR/version" | sed 's/.*(PostgreSQL) //') -> $("$PG_BINDIR/postgres" --version | sed 's/.*(PostgreSQL) //'): ok"
