#!/bin/bash
#
# debian/make-deb.sh -- "make deb": the Debian packages postgresql-NN-fencing,
# one per PostgreSQL server installed on this machine, built with pg_buildext
# from a clean copy of the tree, checked with lintian, and left in
# debian-build/.
#
#   make deb                         every installed server (15 and later)
#   make deb DEB_PG_VERSIONS="15"    only these server versions
#
# As root it first installs what the build needs and is missing, with
# apt-get: dpkg-dev, debhelper, lintian, postgresql-server-dev-NN for each
# version it builds, and the Build-Depends of debian/control.  As another
# user it says what to install and stops.
#
# debian-build/ (or $FENCING_DEB_DIR) then holds, replacing an earlier run's
# files of these names:
#   postgresql-NN-fencing_VERSION_ARCH.deb        the package per server
#   postgresql-NN-fencing-dbgsym_VERSION_ARCH.deb its debug symbols
#   fencing_VERSION.dsc, .orig.tar.xz, .debian.tar.xz   the source package
#   fencing_VERSION_ARCH.changes, .buildinfo
#   build.log, lintian.txt
#
# Exit status 0 only if the packages were built and lintian reported no
# error (its warnings are printed; debian/README.source lists those we keep).

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${FENCING_DEB_DIR:-$ROOT/debian-build}
START_SECONDS=$SECONDS
STAGE=
APT_UPDATED=0

# shellcheck source=test/lib/common.sh
. "$ROOT/test/lib/common.sh"

cleanup()
{
	if [ -n "$STAGE" ] && [ -d "$STAGE" ]; then
		rm -rf "$STAGE"
	fi
}
trap cleanup EXIT

die()
{
	printf 'make deb: %s\n' "$*" >&2
	exit 1
}

# Print the packages among "$@" that are not installed, one per line.
not_installed()
{
	local pkg

	for pkg in "$@"; do
		if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null |
			grep -q 'install ok installed'; then
			printf '%s\n' "$pkg"
		fi
	done
}

# Install the packages "$@" that are missing (root), or name them and stop.
require_packages()
{
	local missing

	mapfile -t missing < <(not_installed "$@")
	[ ${#missing[@]} -eq 0 ] && return 0
	if ! is_root; then
		die "missing packages: ${missing[*]}; install them as root with:
  apt-get update && apt-get install -y --no-install-recommends ${missing[*]}"
	fi
	log "installing: ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	if [ "$APT_UPDATED" -eq 0 ]; then
		apt-get update -qq
		APT_UPDATED=1
	fi
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# The major versions of the PostgreSQL servers installed here.
installed_servers()
{
	local postgres version

	for postgres in /usr/lib/postgresql/*/bin/postgres; do
		[ -x "$postgres" ] || continue
		version=${postgres#/usr/lib/postgresql/}
		printf '%s\n' "${version%%/*}"
	done | sort -n
}

command -v dpkg-query >/dev/null 2>&1 || die "not a Debian system (no dpkg-query)"

# --- what to build ---------------------------------------------------------

require_packages dpkg-dev debhelper lintian postgresql-server-dev-all

if [ -n "${DEB_PG_VERSIONS:-}" ]; then
	wanted=$DEB_PG_VERSIONS
else
	wanted=$(installed_servers | paste -sd ' ')
	[ -n "$wanted" ] || die "no PostgreSQL server installed (/usr/lib/postgresql/NN/bin/postgres); install postgresql-NN first"
fi
# pg_buildext keeps those that debian/pgversions supports.
versions=$(cd "$ROOT" && PG_SUPPORTED_VERSIONS=$wanted pg_buildext supported-versions | paste -sd ' ')
[ -n "$versions" ] || die "none of the servers ($wanted) is supported by debian/pgversions ($(grep -v '^#' "$ROOT/debian/pgversions" | paste -sd ' '))"

dev_packages=()
for v in $versions; do
	dev_packages+=("postgresql-server-dev-$v")
done
require_packages "${dev_packages[@]}"

package_version=$(dpkg-parsechangelog -l "$ROOT/debian/changelog" -S Version)
upstream_version=${package_version%-*}
upstream_version=${upstream_version#*:}
# The package version names the extension version it installs.
extension_version=$(sed -n "s/^default_version *= *'\([^']*\)'.*/\1/p" "$ROOT/fencing.control")
case $upstream_version in
"$extension_version" | "$extension_version".*) ;;
*)
	die "debian/changelog is at $package_version but fencing.control installs extension version $extension_version; add a changelog entry (dch -v $extension_version.0-1)"
	;;
esac

log "make deb: fencing $package_version for PostgreSQL $versions"

# --- a clean copy of the tree and the upstream tarball ----------------------

STAGE=$(mktemp -d /tmp/fencing-deb.XXXXXX)
src=$STAGE/fencing-$upstream_version
mkdir "$src"
copy_tree "$ROOT" "$src"
rm -rf "$src/debian-build"
# The upstream tarball is the tree without debian/, in a stable order.
tar -C "$STAGE" --sort=name --owner=0 --group=0 --numeric-owner \
	--exclude="fencing-$upstream_version/debian" \
	-cJf "$STAGE/fencing_$upstream_version.orig.tar.xz" "fencing-$upstream_version"

# debian/control lists one binary package per version built.
export PG_SUPPORTED_VERSIONS=$versions
(cd "$src" && pg_buildext updatecontrol)

if ! (cd "$src" && dpkg-checkbuilddeps) >/dev/null 2>&1; then
	if ! is_root; then
		(cd "$src" && dpkg-checkbuilddeps) || true
		die "unmet build dependencies (above); install them as root with: apt-get build-dep ./"
	fi
	log "installing the build dependencies of debian/control"
	export DEBIAN_FRONTEND=noninteractive
	if [ "$APT_UPDATED" -eq 0 ]; then
		apt-get update -qq
		APT_UPDATED=1
	fi
	apt-get build-dep -y -qq --no-install-recommends "$src" >/dev/null
fi

# --- build -------------------------------------------------------------------

# An earlier run's results go; nothing else in $OUT is touched.
mkdir -p "$OUT"
rm -f "$OUT"/fencing_* "$OUT"/postgresql-*-fencing_* "$OUT"/postgresql-*-fencing-dbgsym_* \
	"$OUT/build.log" "$OUT/lintian.txt"
log "building (log: $OUT/build.log) ..."
build_status=0
(cd "$src" && dpkg-buildpackage --build=full -us -uc -jauto) >"$OUT/build.log" 2>&1 ||
	build_status=$?
if [ "$build_status" -ne 0 ]; then
	tail -n 40 "$OUT/build.log"
	die "dpkg-buildpackage failed with exit status $build_status (whole log: $OUT/build.log)"
fi
find "$STAGE" -maxdepth 1 -type f -exec cp {} "$OUT/" \;

# --- lintian -------------------------------------------------------------------

changes=$(find "$STAGE" -maxdepth 1 -name "fencing_${package_version#*:}_*.changes" | head -n 1)
[ -n "$changes" ] || die "dpkg-buildpackage wrote no .changes file"
# lintian advises against running as root: as root, run it as nobody (on
# the files in the staging directory, which nobody can reach wherever the
# tree lives), with a home and temporary directory of its own.
lintian_cmd=(lintian)
if is_root && id nobody >/dev/null 2>&1; then
	chmod 711 "$STAGE"
	mkdir "$STAGE/lintian"
	chown nobody "$STAGE/lintian"
	lintian_cmd=(runuser -u nobody -- env "HOME=$STAGE/lintian" "TMPDIR=$STAGE/lintian" lintian)
fi
lintian_status=0
(cd "$STAGE" && "${lintian_cmd[@]}" --display-info --fail-on error "$changes") \
	>"$OUT/lintian.txt" 2>&1 || lintian_status=$?
log "lintian $(lintian --print-version) on $(basename "$changes"):"
if [ -s "$OUT/lintian.txt" ]; then
	sed 's/^/  /' "$OUT/lintian.txt"
else
	log "  (nothing to report)"
fi
errors=$(grep -c '^E: ' "$OUT/lintian.txt" || true)
warnings=$(grep -c '^W: ' "$OUT/lintian.txt" || true)
infos=$(grep -c '^I: ' "$OUT/lintian.txt" || true)
log "lintian: $errors errors, $warnings warnings, $infos info"

# --- summary -------------------------------------------------------------------

log "packages in $OUT:"
for deb in "$OUT"/*.deb; do
	log "  $(basename "$deb") ($(du -k "$deb" | cut -f1) kB)"
done
log "install with (as root; then preload it, see README.Debian):"
for v in $versions; do
	log "  apt-get install $OUT/postgresql-$v-fencing_${package_version#*:}_$(dpkg --print-architecture).deb"
done
log "make deb: done in $((SECONDS - START_SECONDS)) s"
if [ "$errors" -ne 0 ]; then
	die "lintian reported errors (above)"
fi
if [ "$lintian_status" -ne 0 ]; then
	die "lintian failed with exit status $lintian_status (above)"
fi
exit 0
