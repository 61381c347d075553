#!/usr/bin/env bash
# SPDX-License-Identifier: MIT OR Apache-2.0
# make-deb.sh [OUTDIR]  (`make deb`): the Debian packages nvpeer and nvpeer-dkms into OUTDIR
# (default build/deb/) with Debian's tools (dpkg-buildpackage, debhelper, dh-dkms). The sources
# (kmod/, include/, userspace/, dist/) are copied, mtimes kept, into build/deb/src/nvpeer-<version>/
# with this directory as its debian/; cargo builds there with CARGO_TARGET_DIR (default: the
# checkout's userspace/target, so only what changed is rebuilt). cargo must be on PATH.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
out=${1:-$repo/build/deb}
die() { echo "make-deb: $*" >&2; exit 1; }

for tool in dpkg-buildpackage dpkg-parsechangelog dh dh_dkms cargo; do
    command -v "$tool" >/dev/null || die "$tool not found (tests/setup/deps.sh installs debhelper and dh-dkms; cargo: rustup)"
done
# One version everywhere: the module's, DKMS's, the CLI's and the package's.
ver=$(sed -n 's/^NVPEER_VERSION ?= //p' "$repo/kmod/Kbuild")
ver_dkms=$(sed -n 's/^PACKAGE_VERSION="\(.*\)"$/\1/p' "$repo/kmod/dkms.conf")
ver_cargo=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"$/\1/p' "$repo/userspace/Cargo.toml")
ver_deb=$(dpkg-parsechangelog -l "$here/changelog" -SVersion)
if [ -z "$ver" ] || [ "$ver_dkms" != "$ver" ] || [ "$ver_cargo" != "$ver" ] || [ "$ver_deb" != "$ver" ]; then
    die "versions differ: kmod/Kbuild '$ver', kmod/dkms.conf '$ver_dkms', userspace/Cargo.toml '$ver_cargo', dist/debian/changelog '$ver_deb'"
fi

work=$repo/build/deb/src
stage=$work/nvpeer-$ver
rm -rf "$work"
mkdir -p "$stage" "$out"
tar -C "$repo" --exclude=userspace/target --exclude=kmod/build --exclude='*.ko' --exclude='*.o' \
    --exclude='*.mod.c' --exclude='.*.cmd' --exclude=kmod/nvpeer_bindings.rs --exclude='*.orig' \
    -cf - kmod include userspace dist | tar -C "$stage" -xf -
cp -a "$here" "$stage/debian"
rm -f "$stage/debian/make-deb.sh"

export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$repo/userspace/target}
(cd "$stage" && dpkg-buildpackage -b -us -uc) > "$work/build.log" 2>&1 ||
    { tail -n 40 "$work/build.log" >&2; die "dpkg-buildpackage failed (log: $work/build.log)"; }
rm -f "$out"/nvpeer_*.deb "$out"/nvpeer-dkms_*.deb
mv "$work"/*.deb "$out"/
for deb in "$out"/nvpeer_*.deb "$out"/nvpeer-dkms_*.deb; do
    [ -f "$deb" ] || die "dpkg-buildpackage made no $(basename "$deb")"
    echo "make-deb: $deb"
done
