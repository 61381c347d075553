#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# test-wrong-shard.sh KDIR: the check that guards every registration's and pin's state with its
# shard's lock (kmod/pin.rs, `assert_held`) fires. A copy of kmod/ is built with
# `make NVPEER_PLANT=wrong-shard` (each shard lock taken is the next shard's) into
# build/plant-wrong-shard, beside the stand-ins built for KDIR (tests/build-all.sh); one
# registration in the VM must WARN, naming the state's shard and the next one as the lock's, and
# the runner must fail that run for the WARN alone (the suite's own checks pass). An x86_64 KDIR.
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
kdir=${1:?usage: test-wrong-shard.sh KDIR}
. "$repo/tests/setup/env.sh"
work=$repo/build/plant-wrong-shard
fails=0
check() {  # check DESCRIPTION COMMAND...
    if "${@:2}"; then echo "ok    $1"; else echo "FAIL  $1"; fails=$((fails + 1)); fi
}
stop() { echo "FAIL  $1"; echo "wrong-shard plant: cannot run"; exit 1; }
release=$(cat "$kdir/include/config/kernel.release") || stop "no kernel release in $kdir"
stand_ins=("$repo"/tests/stand-ins/nv_p2p_sim/nv_p2p_sim.ko "$repo"/tests/stand-ins/peer_core_sim/peer_core_sim.ko)
for ko in "${stand_ins[@]}"; do
    [ "$(modinfo -F vermagic "$ko" 2>/dev/null | cut -d' ' -f1)" = "$release" ] ||
        stop "$ko is not built for $release (tests/build-all.sh $kdir)"
done
rm -rf "$work"; mkdir -p "$work/src" "$work/ko"
# The copy keeps kmod/ and include/ side by side, as the module's build expects, without the
# main tree's build outputs.
cp -r "$repo/include" "$work/src/include"
cp -r "$repo/kmod" "$work/src/kmod"
rm -rf "$work/src/kmod/build" "$work"/src/kmod/*.ko
make -s -C "$work/src/kmod" KDIR="$kdir" NVPEER_PLANT=wrong-shard >"$work/build.log" 2>&1
rc=$?
cat "$work/build.log"
[ $rc -eq 0 ] || stop "the planted module builds"
echo "ok    the planted module builds"
grep -qs -- '--cfg nvpeer_plant_wrong_shard' "$work/src/kmod/build/nvidia_peermem/.nvpeer_main.o.cmd" \
    "$work/src/kmod/build/nvidia_peermem/src/.nvpeer_main.o.cmd" || stop "... with the plant's cfg"
echo "ok    ... with the plant's cfg"
cp "$work/src/kmod/nvidia_peermem.ko" "${stand_ins[@]}" "$work/ko/" || stop "the modules copied to $work/ko"
msg=$(env -u NVPEER_SUMMARY_DIR NVPEER_VM_OUT="$work/vm" "$repo/tests/vm/run.sh" --kdir "$kdir" wrong-shard "$work/ko" 2>&1)
rc=$?
grep -E '^(vm:|ok |FAIL |\[suite)' <<<"$msg"
check "the run fails" test "$rc" -ne 0
check "... as a WARN" grep -q "the guest kernel reported: .*WARN" <<<"$msg"
check "... while the suite's own checks pass" grep -q '^\[suite wrong-shard\] 2 ok, 0 failed' <<<"$msg"
warn=$(grep -o "nvpeer: state of shard [0-9]* reached under shard [0-9]*'s lock" "$work/vm/console.txt" | head -n 1)
read -r state held < <(sed -E "s/.*shard ([0-9]+) reached under shard ([0-9]+)'s.*/\1 \2/" <<<"$warn")
check "... the held-lock check's, under the next shard's lock (${warn:-no such line})" \
    test -n "$warn" -a "$(( (${state:-0} + 1) % 64 ))" = "${held:-x}"  # 64: SHARDS, kmod/pin.rs
echo "wrong-shard plant: $fails failed"
[ $fails -eq 0 ]
