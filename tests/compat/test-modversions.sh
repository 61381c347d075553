#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# test-modversions.sh: the generation markers carry no symbol version (REVIEW-KMOD-2 T3-3), proven
# on a kernel with CONFIG_MODVERSIONS and CONFIG_EXTENDED_MODVERSIONS. Neither the 7.2 test kernel
# nor Debian's own Rust kernels (7.2 and 7.3 in trixie-backports: MODVERSIONS off) version
# modules, and Debian 12's (classic MODVERSIONS) refuse an unversioned import, so this builds
# (once, cached like the others) the 7.2 test kernel with tests/kernel/nvpeer-modversions.config
# applied (without Rust: our module is built on our own runtime), through a shadow copy of
# tests/kernel/ (build.sh's cache key covers its fragment: the default kernel's key and cache
# stay untouched). Then, in build/modversions/: the stand-ins built for it,
# our module built against ib_uverbs.ko's and nv_p2p_sim.ko's CRCs (OFA_DIR and NVIDIA_SRC,
# as against MOFED's and NVIDIA's on a real host), and a control build of the same module that
# keeps the markers' versions (NVPEER_UNVERSIONED set to a name no core exports); one boot runs
# tests/scenarios/modversions.py: the control must be refused on peer_core_sim_abi2.ko, whose
# marker CRC differs, and ours must load and work there; so must ours built against a kernel
# whose own Module.symvers lists the marker (an in-tree core, REVIEW-KMOD-3 T4-1), whose
# provenance must name the CRCs modpost recorded. The same boot proves issue 37's build
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
# The fragment's options replace nvpeer.config's own lines for them, and one it turns off takes
# its sub-options (CONFIG_RUST: CONFIG_RUST_OVERFLOW_CHECKS) along (build.sh checks each line).
fragment=$repo/tests/kernel/nvpeer-modversions.config
set_opts=$(sed -nE 's/^(CONFIG_[A-Z0-9_]*)=.*/\1/p' "$fragment" | paste -sd'|')
off_opts=$(sed -nE 's/^# (CONFIG_[A-Z0-9_]*) is not set$/\1/p' "$fragment" | paste -sd'|')
{ grep -Ev "^(# )?(($set_opts)|($off_opts)(_[A-Z0-9_]+)?)[= ]" "$repo/tests/kernel/nvpeer.config"
  cat "$fragment"; } > "$work/shadow/tests/kernel/nvpeer.config"
ln -s "$repo/tests/setup" "$work/shadow/tests/setup"
kdir=$("$work/shadow/tests/kernel/build.sh" 7.2) || stop "the 7.2 test kernel with CONFIG_MODVERSIONS builds"
for o in MODVERSIONS EXTENDED_MODVERSIONS GENDWARFKSYMS; do
    grep -qx "CONFIG_$o=y" "$kdir/.config" || stop "... with CONFIG_$o=y ($kdir)"
done
echo "ok    the 7.2 test kernel with CONFIG_MODVERSIONS, CONFIG_EXTENDED_MODVERSIONS and CONFIG_GENDWARFKSYMS: $kdir"

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
check "... on our own runtime (the kernel has no Rust)" \
    "$repo/tests/foundation/check-ko.sh" "$work/ko/nvidia_peermem.ko" own
build "$work/ko/control" NVPEER_UNVERSIONED=nvpeer_no_such_symbol \
    || stop "the control (markers versioned) builds"
echo "ok    the control (markers versioned) builds"
# REVIEW-KMOD-3 T4-1: a kernel with an in-tree peer-memory core (Ubuntu's, NV-Kernels) lists a
# marker and ib_register_peer_memory_client in its own Module.symvers (modpost reads it first,
# then KBUILD_EXTRA_SYMBOLS): a tree of links to the test kernel whose Module.symvers has both,
# with CRCs no stand-in has, from an in-tree ib_core. Built against it with MOFED's (the stand-in
# ib_uverbs') as before, the module must record no version for the marker (else it is refused
# wherever MOFED's core runs), take ib_register_peer_memory_client's CRC from MOFED's, read
# last (modpost's rule), and record in its provenance exactly what modpost put in __versions.
intree=$work/intree-kdir
mkdir -p "$intree" "$work/ko/intree"
for e in "$kdir"/* "$kdir"/.[!.]*; do [ -e "$e" ] && ln -s "$e" "$intree/${e##*/}"; done
rm "$intree/Module.symvers"
{ cat "$kdir/Module.symvers"
  printf '0x0badc0de\tib_umem_stop_invalidation_notifier\tdrivers/infiniband/core/ib_core\tEXPORT_SYMBOL\t\n'
  printf '0x12345678\tib_register_peer_memory_client\tdrivers/infiniband/core/ib_core\tEXPORT_SYMBOL\t\n'
} >"$intree/Module.symvers"
kdir_main=$kdir
kdir=$intree build "$work/ko/intree" || stop "our module builds against a kernel whose Module.symvers lists the marker"
kdir=$kdir_main
echo "ok    our module builds against a kernel whose Module.symvers lists the marker"
dump=$(modprobe --dump-modversions "$work/ko/intree/nvidia_peermem.ko" | awk '{ print $2, $1 }' | sort)
unversioned() { ! grep -qE "^(ib_get_peer_private_data|ib_umem_stop_invalidation_notifier) " <<<"$1"; }
check "... it records no version for the kernel's marker (the kernel's Module.symvers filtered too)" \
    unversioned "$dump"
mofed_reg=$(awk -F'\t' '$2 == "ib_register_peer_memory_client" { print $1 }' "$work/ofa/default/Module.symvers")
check "... ib_register_peer_memory_client's version is MOFED's ($mofed_reg), read last, not the kernel's" \
    grep -qx "ib_register_peer_memory_client $mofed_reg" <<<"$dump"
# Every CRC the provenance names, as __versions has it (modinfo -F: "<sym> <crc> <module>").
prov=$(modinfo -F nvpeer_import "$work/ko/intree/nvidia_peermem.ko" | awk '$2 != "-" { print $1, $2 }' | sort)
check "... its provenance records a CRC for ib_register_peer_memory_client" \
    grep -q "^ib_register_peer_memory_client " <<<"$prov"
check "... and every CRC its provenance records is the one __versions holds (modprobe --dump-modversions)" \
    test -z "$(comm -23 <(echo "$prov") <(echo "$dump"))"
[ -z "$(comm -23 <(echo "$prov") <(echo "$dump"))" ] || { echo "      provenance only:"; comm -23 <(echo "$prov") <(echo "$dump"); }

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
