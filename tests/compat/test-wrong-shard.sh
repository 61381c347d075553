#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# test-wrong-shard.sh KDIR: the check that guards every registration's and pin's state with its
# shard's lock (kmod/pin.rs, `assert_held`) fires. A copy of kmod/ is built with
# NVPEER_PLANT=wrong-shard (each shard lock taken is the next shard's) into build/plant-wrong-shard
# beside the stand-ins built for KDIR; one registration in the VM must WARN, naming both shards,
# and the runner must fail that run for it.
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
kdir=$1
work=$repo/build/plant-wrong-shard
fails=0
check() {  # check DESCRIPTION COMMAND...
    if "${@:2}"; then echo "ok    $1"; else echo "FAIL  $1"; fails=$((fails + 1)); fi
}
rm -rf "$work"; mkdir -p "$work/src" "$work/ko"
# The copy keeps kmod/ and include/ side by side, as the module's build expects.
cp -r "$repo/include" "$work/src/include"
cp -r "$repo/kmod" "$work/src/kmod"
rm -rf "$work/src/kmod/build" "$work"/src/kmod/*.ko
log=$work/build.log
check "the planted module builds" env NVPEER_PLANT=wrong-shard make -s -C "$work/src/kmod" KDIR="$kdir" >"$log" 2>&1
cat "$log"
check "... with the plant's cfg" grep -qs -- '--cfg nvpeer_plant_wrong_shard' "$work/src/kmod/build/nvidia_peermem/.nvpeer_main.o.cmd" \
    "$work/src/kmod/build/nvidia_peermem/src/.nvpeer_main.o.cmd"
cp "$work/src/kmod/nvidia_peermem.ko" "$work/ko/" 2>/dev/null
cp "$repo"/tests/stand-ins/nv_p2p_sim/nv_p2p_sim.ko "$repo"/tests/stand-ins/peer_core_sim/peer_core_sim.ko "$work/ko/"
msg=$(env -u NVPEER_SUMMARY_DIR NVPEER_VM_OUT="$work/vm" "$repo/tests/vm/run.sh" --kdir "$kdir" wrong-shard "$work/ko" 2>&1)
rc=$?
echo "$msg" | tail -n 8
check "the run fails" test "$rc" -ne 0
check "... as a WARN" grep -q "the guest kernel reported: .*WARN" <<<"$msg"
check "... the held-lock check's" grep -q "nvpeer: state of shard [0-9]* reached under shard [0-9]*'s lock" "$work/vm/console.txt"
echo "wrong-shard plant: $fails failed"
[ $fails -eq 0 ]
