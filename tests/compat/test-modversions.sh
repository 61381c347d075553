#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# test-modversions.sh: the generation markers carry no symbol version (REVIEW-KMOD-2 T3-3), proven
# on a kernel with CONFIG_MODVERSIONS. Neither the 7.2 test kernel nor Debian's own Rust kernels
# (7.2 and 7.3 in trixie-backports: MODVERSIONS off) version modules, so this builds (once, cached
# like the others) the 7.2 test kernel with tests/kernel/nvpeer-modversions.config appended,
# through a shadow copy of tests/kernel/ (build.sh's cache key covers its fragment: the default
# kernel's key and cache stay untouched). Then, in build/modversions/: the stand-ins built for it,
# our module built against ib_uverbs.ko's and nv_p2p_sim.ko's CRCs (OFA_DIR and NVIDIA_SRC,
# as against MOFED's and NVIDIA's on a real host), and a control build of the same module that
# keeps the markers' versions (NVPEER_UNVERSIONED set to a name no core exports); one boot runs
# tests/scenarios/modversions.py: the control must be refused on peer_core_sim_abi2.ko, whose
# marker CRC differs, and ours must load and work there. The same boot proves issue 37's build
# provenance: the CRCs our module records in its .modinfo, judged before load by the release CLI
# (built first: make test builds it before this step) as compatible on peer_core_sim_abi2.ko and
# as "rebuild" on the composite peer_core_sim.ko, and modprobe doing what the verdict said.
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
. "$repo/tests/setup/env.sh"
work=$repo/build/modversions
fails=0
check() {  # check DESCRIPTION COMMAND...
    if "${@:2}"; then echo "ok    $1"; else echo "FAIL  $1"; fails=$((fails + 1)); fi
}
stop() { echo "FAIL  $1"; echo "modversions: cannot run"; exit 1; }
[ -x "$repo/userspace/target/release/nvpeer" ] \
    || stop "the release CLI is built (cd userspace && cargo build --release --locked)"
rm -rf "$work"; mkdir -p "$work/shadow/tests/kernel" "$work/src/tests" "$work/ko/control"
cp "$repo/tests/kernel/build.sh" "$repo/tests/kernel/nvpeer-x86_64.config" "$work/shadow/tests/kernel/"
# The fragment's options replace nvpeer.config's own lines for them (build.sh checks each line).
opts=$(sed -n 's/^\(CONFIG_[A-Z0-9_]*\)=.*/\1/p' "$repo/tests/kernel/nvpeer-modversions.config" | paste -sd'|')
{ grep -Ev "^(# )?($opts)[= ]" "$repo/tests/kernel/nvpeer.config"
  cat "$repo/tests/kernel/nvpeer-modversions.config"; } > "$work/shadow/tests/kernel/nvpeer.config"
ln -s "$repo/tests/setup" "$work/shadow/tests/setup"
kdir=$("$work/shadow/tests/kernel/build.sh" 7.2) || stop "the 7.2 test kernel with CONFIG_MODVERSIONS builds"
grep -qx CONFIG_MODVERSIONS=y "$kdir/.config" || stop "... with CONFIG_MODVERSIONS=y ($kdir)"
echo "ok    the 7.2 test kernel with CONFIG_MODVERSIONS and CONFIG_GENDWARFKSYMS: $kdir"

# A copy of the sources, laid out as the tree (the stand-ins include ../../../include).
cp -r "$repo/include" "$repo/kmod" "$work/src/"
cp -r "$repo/tests/stand-ins" "$work/src/tests/"
rm -rf "$work/src/kmod/build" "$work"/src/kmod/*.ko
for s in nv_p2p_sim peer_core_sim; do
    make -s -C "$work/src/tests/stand-ins/$s" KDIR="$kdir" >"$work/$s.log" 2>&1 \
        || { cat "$work/$s.log"; stop "the stand-in $s builds"; }
done
echo "ok    the stand-ins build"
mkdir -p "$work/ofa/default" "$work/nvidia"
# ib_uverbs.ko (the 5x-unmaps core under DOCA-OFED 24.07+'s name) is one translation unit, as
# peer_core_sim_abi2.ko is: gendwarfksyms' CRCs also cover how fully the unit's headers define
# the types a signature reaches, so only builds of one layout agree on the unchanged symbols.
awk -F'\t' '$3 == "ib_uverbs"' "$work/src/tests/stand-ins/peer_core_sim/Module.symvers" \
    > "$work/ofa/default/Module.symvers"
awk -F'\t' '$3 == "nv_p2p_sim"' "$work/src/tests/stand-ins/nv_p2p_sim/Module.symvers" \
    > "$work/nvidia/Module.symvers"
build() {  # build OUTDIR [MAKE ARGS...]
    local out=$1; shift
    rm -rf "$work/src/kmod/build" "$work/src/kmod/nvidia_peermem.ko"
    OFA_DIR="$work/ofa" NVIDIA_SRC="$work/nvidia" make -s -C "$work/src/kmod" KDIR="$kdir" "$@" \
        >"$out/build.log" 2>&1 || { cat "$out/build.log"; return 1; }
    cp "$work/src/kmod/nvidia_peermem.ko" "$out/"
}
build "$work/ko" || stop "our module builds against the stand-ins' CRCs"
echo "ok    our module builds against the stand-ins' CRCs"
build "$work/ko/control" NVPEER_UNVERSIONED=nvpeer_no_such_symbol \
    || stop "the control (markers versioned) builds"
echo "ok    the control (markers versioned) builds"
cp "$work/src/tests/stand-ins/nv_p2p_sim/nv_p2p_sim.ko" \
    "$work/src/tests/stand-ins/peer_core_sim/peer_core_sim.ko" \
    "$work/src/tests/stand-ins/peer_core_sim/peer_core_sim_abi2.ko" "$work/ko/"
cp "$work/src/tests/stand-ins/peer_core_sim/Module.symvers" "$work/ko/peer_core_sim.symvers"
msg=$(NVPEER_VM_OUT="$work/vm" "$repo/tests/vm/run.sh" --systemd --kdir "$kdir" modversions "$work/ko" 2>&1)
rc=$?
grep -E '^(vm:|ok |FAIL |\[suite)' <<<"$msg"
check "the boot passes, no kernel report" test "$rc" -eq 0
echo "modversions: $fails failed"
[ $fails -eq 0 ]
