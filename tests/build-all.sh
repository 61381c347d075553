#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# build-all.sh KDIR: builds every kernel module the suites load against KDIR: our module under
# both names, the stand-ins and the test-only modules.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
. "$repo/tests/setup/env.sh"
kdir=$1
# An arm64 tree (tests/kernel/build.sh SERIES arm64) is cross-built for.
if grep -q '^CONFIG_ARM64=y' "$kdir/.config" && [ "$(uname -m)" != aarch64 ]; then
    export ARCH=arm64 CROSS_COMPILE=aarch64-linux-gnu-
fi
make -s -C "$repo/kmod" KDIR="$kdir"
make -s -C "$repo/kmod" KDIR="$kdir" MODULE_NAME=nv_peer_mem
make -s -C "$kdir" M="$repo/tests/vm/plant" modules
make -s -C "$repo/tests/stand-ins/nv_p2p_sim" KDIR="$kdir"
make -s -C "$repo/tests/stand-ins/peer_core_sim" KDIR="$kdir"
