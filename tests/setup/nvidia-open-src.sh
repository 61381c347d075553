#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# nvidia-open-src.sh [VERSION]: unpacks the few files of NVIDIA's open kernel modules that the
# tests read (never the whole tree) from Debian's `nvidia-open-kernel-source` package (contrib)
# into $NVPEER_CACHE/nvidia-open/<package version>/ and prints that directory:
#   nvidia/nv-p2p.h                     the real NVIDIA P2P header (tests/abi)
#   nvidia-peermem/{nvidia-peermem.c,nvidia-peermem.Kbuild,peer_mem.h,nv-p2p.h}
#                                       NVIDIA's peer-memory client (tests/reference)
#   nv_version                          the driver version (NV_VERSION_STRING of its Kbuild)
# Without VERSION the newest version in the searched Debian suites is taken
# ($NVPEER_NVIDIA_OPEN_VERSION pins one). NVIDIA's files stay in the cache: never copy them into
# the repository.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/env.sh"
pkg=nvidia-open-kernel-source
want=${1:-${NVPEER_NVIDIA_OPEN_VERSION:-}}

deb=$("$here/debian-fetch.sh" "$pkg" $want)
version=$(dpkg-deb -f "$deb" Version)
dir=$NVPEER_CACHE/nvidia-open/$version
if [ -f "$dir/.complete" ]; then echo "$dir"; exit 0; fi

tmp=$(mktemp -d "$NVPEER_CACHE/nvidia-open.tmp.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# The package carries the kernel-open tree as one tarball under /usr/src.
inner=$(dpkg-deb -c "$deb" | awk '{print $NF}' | grep -E '^\./usr/src/[^/]*\.tar\.(xz|gz|bz2|zst)$' | head -n1)
[ -n "$inner" ] || { echo "nvidia-open-src: no source tarball in $deb" >&2; exit 1; }
dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$tmp" "$inner"
tarball=$tmp/${inner#./}
tar -tf "$tarball" > "$tmp/list"
grep -q -E '(^|/)nvidia-peermem/nvidia-peermem\.c$' "$tmp/list" \
    || { echo "nvidia-open-src: no nvidia-peermem/ in $inner" >&2; exit 1; }
prefix=$(grep -E '(^|/)nvidia-peermem/nvidia-peermem\.c$' "$tmp/list" | head -n1 | sed 's#nvidia-peermem/nvidia-peermem\.c$##')
mkdir -p "$tmp/out"
tar -x -f "$tarball" -C "$tmp/out" --strip-components="$(printf '%s' "$prefix" | tr -cd / | wc -c)" \
    "${prefix}Kbuild" "${prefix}nvidia/nv-p2p.h" "${prefix}nvidia-peermem"
nv_version=$(sed -n 's/.*-DNV_VERSION_STRING=\\"\([^\\]*\)\\".*/\1/p' "$tmp/out/Kbuild" | head -n1)
[ -n "$nv_version" ] || { echo "nvidia-open-src: no NV_VERSION_STRING in the tree's Kbuild" >&2; exit 1; }
echo "$nv_version" > "$tmp/out/nv_version"
rm -f "$tmp/out/Kbuild"
for f in nvidia/nv-p2p.h nvidia-peermem/nvidia-peermem.c nvidia-peermem/nvidia-peermem.Kbuild \
         nvidia-peermem/peer_mem.h nvidia-peermem/nv-p2p.h; do
    [ -f "$tmp/out/$f" ] || { echo "nvidia-open-src: $f missing from $pkg $version" >&2; exit 1; }
done
touch "$tmp/out/.complete"
mkdir -p "$NVPEER_CACHE/nvidia-open"
rm -rf "$dir"
mv "$tmp/out" "$dir"
echo "nvidia-open-src: $pkg $version (driver $nv_version) unpacked in $dir" >&2
echo "$dir"
