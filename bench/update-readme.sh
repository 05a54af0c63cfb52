#!/bin/bash
#
# bench/update-readme.sh -- copy the benchmark's table into doc/performance.md
#
# Replaces the lines between "<!-- bench-table:begin -->" and
# "<!-- bench-table:end -->" in doc/performance.md with
# bench/results/readme-table.md, which bench/run.sh ("make bench") writes.
# So the documented performance figures are the last run's, with its date,
# commit and PostgreSQL version; test/t/092_readme_bench.pl fails when they
# differ.
#
#   bench/update-readme.sh [PAGE [TABLE]]
#
# Exit status 1 when the page lacks the markers (each on a line of its
# own, begin before end, once each) or the table file is missing.
#
# Copyright (c) 2026, the fencing developers

set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
README=${1:-$ROOT/doc/performance.md}
TABLE=${2:-$ROOT/bench/results/readme-table.md}
BEGIN_MARKER='<!-- bench-table:begin -->'
END_MARKER='<!-- bench-table:end -->'

if [ ! -f "$TABLE" ]; then
	echo "update-readme: $TABLE is missing; run 'make bench' first" >&2
	exit 1
fi

# The markers' line numbers, or nothing when they are not there exactly once
# each and in order.
begin_line=$(grep -n -x -F -- "$BEGIN_MARKER" "$README" | cut -d: -f1 || true)
end_line=$(grep -n -x -F -- "$END_MARKER" "$README" | cut -d: -f1 || true)
if [ -z "$begin_line" ] || [ -z "$end_line" ] ||
	[ "$(wc -w <<<"$begin_line")" -ne 1 ] || [ "$(wc -w <<<"$end_line")" -ne 1 ] ||
	[ "$begin_line" -ge "$end_line" ]; then
	echo "update-readme: $README needs the lines '$BEGIN_MARKER' and '$END_MARKER', once each, in that order" >&2
	exit 1
fi

tmp=$(mktemp "$README.XXXXXX")
trap 'rm -f "$tmp"' EXIT
{
	head -n "$begin_line" "$README"
	cat "$TABLE"
	tail -n "+$end_line" "$README"
} >"$tmp"
chmod --reference="$README" "$tmp"
mv "$tmp" "$README"
trap - EXIT
echo "update-readme: copied into $(basename "$README"): $(grep -m1 '^Measured ' "$TABLE" || echo "$TABLE")"
