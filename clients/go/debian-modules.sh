#!/bin/sh
#
# debian-modules.sh -- build a Go module with pgfencing from Debian's Go
# packages, offline: no module proxy, no download.
#
#   clients/go/debian-modules.sh [APP_DIR [VIEWS_DIR]]
#
# Debian installs the sources of Go libraries under /usr/share/gocode/src
# (golang-github-jackc-pgx-v4-dev and what it depends on).  The go command
# cannot use them as they are in module mode: their go.mod files require
# test-only modules that Debian does not ship, and with GOPROXY=off the go
# command stops at the first one.  So this script writes, for every module
# that pgx v4's packages need, a "view" of it: a directory with a go.mod
# that names the module and its go version but requires nothing, and a
# symbolic link to each file and directory of Debian's copy.  Then it adds
# to APP_DIR/go.mod (default: the current directory) a require and a
# replace for each view, and, unless APP_DIR is pgfencing itself, for
# fencing/pgfencing (this directory).  After that, in APP_DIR:
#
#   GOFLAGS=-mod=mod GOPROXY=off go build ./...
#
# VIEWS_DIR defaults to APP_DIR/debian-modules.  Run it again after an
# upgrade of Debian's packages; it replaces the views it wrote before.

set -eu

GOCODE=${GOCODE:-/usr/share/gocode}
HERE=$(cd "$(dirname "$0")" && pwd)
APP=$(cd "${1:-.}" && pwd)
VIEWS=${2:-$APP/debian-modules}
SELF=fencing/pgfencing
SELF_VERSION=v1.2.0
# what pgfencing imports; the rest comes with them
ROOTS="github.com/jackc/pgx/v4 github.com/jackc/pgx/v4/pgxpool github.com/jackc/pgconn"

die()
{
	echo "debian-modules.sh: $*" >&2
	exit 1
}

command -v go >/dev/null 2>&1 || die "no go command: apt-get install golang-go"
[ -d "$GOCODE/src/github.com/jackc/pgx/v4" ] ||
	die "no pgx v4 in $GOCODE/src: apt-get install golang-github-jackc-pgx-v4-dev"
[ -f "$APP/go.mod" ] || die "no go.mod in $APP: run 'go mod init NAME' there first"
mkdir -p "$VIEWS"
VIEWS=$(cd "$VIEWS" && pwd)

# The packages they need, found the way Debian builds its own Go packages
# (GOPATH mode over /usr/share/gocode), then the module each belongs to:
# the nearest directory above it with a go.mod.
packages=$(cd "$GOCODE" && GO111MODULE=off GOPATH=$GOCODE GOFLAGS= \
	go list -deps -f '{{if not .Standard}}{{.ImportPath}}{{end}}' $ROOTS) ||
	die "go list could not resolve $ROOTS in $GOCODE/src"
modules=
for package in $packages; do
	dir=$GOCODE/src/$package
	while [ ! -f "$dir/go.mod" ]; do
		[ "$dir" != "$GOCODE/src" ] || die "package $package belongs to no module (no go.mod above it)"
		dir=$(dirname "$dir")
	done
	case " $modules " in
	*" $dir "*) ;;
	*) modules="$modules $dir" ;;
	esac
done

# The module path a go.mod declares.
module_of()
{
	sed -n 's/^module[[:space:]]\{1,\}"\{0,1\}\([^"[:space:]]*\).*/\1/p' "$1" | head -n 1
}

# A version for a require line: a replaced module's version is not used,
# but it must fit the module path's major version (/v4: v4.x.y).
version_for()
{
	case $1 in
	*/v[0-9]*) echo "${1##*/}.0.0" ;;
	*) echo v0.0.0 ;;
	esac
}

# APP's go.mod already requires $1?
required()
{
	(cd "$APP" && go mod edit -json) | grep -q "\"Path\": \"$1\""
}

# A replace target: relative to APP when inside it (as go.mod wants it:
# ./...), else absolute.
target()
{
	case $1 in
	"$APP"/*) echo "./${1#"$APP"/}" ;;
	*) echo "$1" ;;
	esac
}

edits=
for dir in $modules; do
	module=$(module_of "$dir/go.mod")
	[ -n "$module" ] || die "$dir/go.mod names no module"
	view=$VIEWS/$module
	rm -rf "$view"
	mkdir -p "$view"
	go_version=$(sed -n 's/^go[[:space:]]\{1,\}\([0-9.]\{1,\}\).*/\1/p' "$dir/go.mod" | head -n 1)
	{
		echo "// A view of $dir for module mode, written by pgfencing's debian-modules.sh."
		echo "module $module"
		[ -z "$go_version" ] || printf '\ngo %s\n' "$go_version"
	} >"$view/go.mod"
	for entry in "$dir"/* "$dir"/.[!.]*; do
		[ -e "$entry" ] || continue
		case ${entry##*/} in
		go.mod | go.sum) ;;
		*) ln -s "$entry" "$view/${entry##*/}" ;;
		esac
	done
	required "$module" || edits="$edits -require=$module@$(version_for "$module")"
	edits="$edits -replace=$module=$(target "$view")"
done

if [ "$(module_of "$APP/go.mod")" != "$SELF" ]; then
	required "$SELF" || edits="$edits -require=$SELF@$SELF_VERSION"
	edits="$edits -replace=$SELF=$(target "$HERE")"
fi
# shellcheck disable=SC2086
(cd "$APP" && go mod edit $edits)
echo "debian-modules.sh: $APP/go.mod now uses Debian's Go sources through $(target "$VIEWS")"
