#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# build.sh KDIR OUTDIR: builds NVIDIA's own peer-memory client, nvidia-peermem.ko, from Debian's
# nvidia-open-kernel-source (kernel-open/nvidia-peermem/) against KDIR and the test stand-ins,
# and puts it in OUTDIR as nvidia-peermem.ko, with nvidia-peermem.version. tests/run.sh uses
# OUTDIR = tests/reference/out (git-ignored): the guest is only sure to see the repository
# (under virtme-ng /var/cache was a tmpfs), so the module does not stay in $NVPEER_CACHE.
#
# The reference runs the same scenarios as ours (DESIGN.md "Reference"). NVIDIA's source is
# unpacked and built under $NVPEER_CACHE/reference/ only: never copy it, or anything generated
# from it, into the repository.
#
# What it is built with: tests/reference/stage.sh (sources, Kbuild, conftest.h), and
#   - KBUILD_EXTRA_SYMBOLS = the stand-ins' Module.symvers (nv_p2p_sim, peer_core_sim), built
#     here first with `make -C KDIR M=...` when missing or stale (outputs are git-ignored).
#
# Loading: the file is nvidia-peermem.ko, the module NAME is nvidia_peermem (Kbuild turns '-'
# into '_'): /sys/module/nvidia_peermem, `rmmod nvidia_peermem`. That is also our module's
# default name, so the two cannot be loaded at the same time: load ours under its legacy name
# (kmod/nv_peer_mem.ko) when a scenario needs both. Both register the peer clients "nv_mem" and
# "nv_mem_nc"; with peer_core_sim's sysfs=1 the second registration of a name fails, as with MOFED.
#
# 550's nvidia-peermem keys on NVIDIA_P2P_CAP_GET_PAGES_PERSISTENT_API, which its bundled
# nv-p2p.h always defines: its "nv_mem_nc" client calls nvidia_p2p_get_pages_persistent and
# nvidia_p2p_put_pages_persistent, so it loads only against nv_p2p_sim.ko (the 535+ API), not
# against nv_p2p_sim_530.ko (which exports neither symbol). It has no persistent_api_support
# parameter (560+); peerdirect_support=1 registers "nv_mem" with ex_size = 0 and flags = 0.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
. "$repo/tests/setup/env.sh"
[ $# -eq 2 ] || { echo "usage: build.sh KDIR OUTDIR" >&2; exit 2; }
kdir=$1 outdir=$2
[ -f "$kdir/Module.symvers" ] || { echo "reference: $kdir is not a built kernel tree" >&2; exit 2; }

# The stand-ins whose symbols the reference imports.
symvers=()
for s in nv_p2p_sim peer_core_sim; do
    d=$repo/tests/stand-ins/$s
    if [ ! -f "$d/Kbuild" ] && [ ! -f "$d/Makefile" ]; then
        echo "reference: FATAL: the stand-in tests/stand-ins/$s does not exist yet" >&2; exit 1
    fi
    # Only the exported symbol names matter here (no MODVERSIONS): build when the stand-in has
    # no Module.symvers yet or a source is newer than it.
    if [ ! -f "$d/Module.symvers" ] \
       || [ -n "$(find "$d" \( -name '*.[ch]' -o -name Kbuild \) -newer "$d/Module.symvers" | head -n1)" ]; then
        make -s -C "$kdir" M="$d" modules >&2 \
            || { echo "reference: FATAL: the stand-in tests/stand-ins/$s does not build" >&2; exit 1; }
    fi
    [ -f "$d/Module.symvers" ] || { echo "reference: FATAL: no $d/Module.symvers" >&2; exit 1; }
done

build=$NVPEER_CACHE/reference/build
nv_version=$("$here/stage.sh" "$build")
# Only the exports of nv_p2p_sim.ko (not nv_p2p_sim_530.ko, built from the same directory) and
# peer_core_sim.ko: modpost then proves the reference links against the 535+ API alone, and
# modinfo's depends names the modules it really needs.
for s in nv_p2p_sim peer_core_sim; do
    awk -F'\t' -v m="$s" '$3 == m' "$repo/tests/stand-ins/$s/Module.symvers" > "$build/$s.symvers"
    [ -s "$build/$s.symvers" ] || { echo "reference: FATAL: $s exports nothing" >&2; exit 1; }
    symvers+=("$build/$s.symvers")
done
if ! make -C "$kdir" M="$build" KBUILD_EXTRA_SYMBOLS="${symvers[*]}" modules >"$build/build.log" 2>&1; then
    cat "$build/build.log" >&2
    echo "reference: FATAL: nvidia-peermem $nv_version does not build against $kdir" >&2; exit 1
fi
if grep -E 'WARNING|warning:' "$build/build.log" >&2; then
    echo "reference: (the warnings above are in NVIDIA's code, built as it is)" >&2
fi
mkdir -p "$outdir"
cp "$build/nvidia-peermem.ko" "$outdir/nvidia-peermem.ko"
echo "$nv_version" > "$outdir/nvidia-peermem.version"
name=$(modinfo -F name "$outdir/nvidia-peermem.ko")
deps=$(modinfo -F depends "$outdir/nvidia-peermem.ko")
echo "reference: built NVIDIA nvidia-peermem $nv_version -> $outdir/nvidia-peermem.ko (module name $name; depends: $deps)" >&2
