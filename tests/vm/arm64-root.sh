#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# arm64-root.sh: prints the directory of the arm64 guest's root filesystem (Debian trixie, arm64),
# building it once. The x86_64 guests see the host's own root; an arm64 guest cannot run the
# host's binaries, so it gets this one instead (tests/vm/run.sh --arch arm64), with the repository
# shared into it at its host path. Only debootstrap's first stage runs (unpacking; no arm64 code
# runs on the host, which has no binfmt emulation): the suites need binaries and libraries, not
# configured packages. Its static busybox is the arm64 initramfs's. Cached under
# $NVPEER_CACHE/vm/arm64-root-<key> (key: suite, packages, this script).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../setup/env.sh"
log() { printf 'arm64-root: %s\n' "$*" >&2; }
SUITE=trixie
PKGS=bash,busybox-static,python3,kmod,util-linux,procps,coreutils,grep,sed,gawk,iproute2
key=$(printf '%s\n' "$SUITE" "$PKGS" | cat - "$0" | sha256sum | cut -c1-12)
root=$NVPEER_CACHE/vm/arm64-root-$key
if [ -f "$root.done" ]; then echo "$root"; exit 0; fi
command -v debootstrap >/dev/null || { log "FATAL: debootstrap missing (tests/setup/deps.sh installs it)"; exit 1; }
state=$NVPEER_CACHE/apt
[ -f "$state/sources.list" ] || "$here/../setup/debian-fetch.sh" busybox-static >/dev/null
uri=$(awk '$1=="deb" {for(i=2;i<=NF;i++) if ($i ~ /:\/\//) {print $i; exit}}' "$state/sources.list")
[ -n "$uri" ] || { log "FATAL: no Debian mirror URI in $state/sources.list"; exit 1; }
log "debootstrap --foreign --arch=arm64 $SUITE (first stage: unpacking only; about 2 minutes)"
rm -rf "$root"; mkdir -p "$root"
debootstrap --foreign --arch=arm64 --variant=minbase --include="$PKGS" \
    --keyring=/usr/share/keyrings/debian-archive-keyring.gpg "$SUITE" "$root" "$uri" \
    > "$root.log" 2>&1 || { tail -n 20 "$root.log" >&2; log "FATAL: debootstrap failed (log $root.log)"; exit 1; }
# The first stage unpacks only the required packages; the rest of the set (--include and their
# dependencies) lies in the root's apt archive: unpack it too. Then what the skipped second stage
# would have set up and the suites need.
for deb in "$root"/var/cache/apt/archives/*.deb; do dpkg-deb -x "$deb" "$root"; done
rm -f "$root"/var/cache/apt/archives/*.deb
ln -sf dash "$root/usr/bin/sh"
[ -x "$root/usr/bin/python3" ] || { log "FATAL: no python3 in $root"; exit 1; }
[ -x "$root/usr/bin/busybox" ] || { log "FATAL: no busybox in $root"; exit 1; }
file -L "$root/usr/bin/busybox" | grep -q 'ARM aarch64.*statically linked' \
    || { log "FATAL: $root/usr/bin/busybox is not a static arm64 binary"; exit 1; }
touch "$root.done"
log "built $root"
echo "$root"
