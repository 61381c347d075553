#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# test-wrong-shard.sh KDIR: the check that guards every registration's and pin's state with its
# shard's lock (kmod/client/pin.rs, `assert_held`) fires. A copy of kmod/ is built with
# `make NVPEER_PLANT=wrong-shard` (each shard lock taken is the next shard's) into
# build/plant-wrong-shard, beside the stand-ins built for KDIR (tests/build-all.sh); one
# registration in the VM must WARN, naming the state's shard and the next one as the lock's, and
# the runner must fail that run for the WARN alone (the suite's own checks pass). An x86_64 KDIR.
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
kdir=${1:?usage: test-wrong-shard.sh KDIR}
# shellcheck disable=SC1091
. "$repo/tests/setup/env.sh"
work=$repo/build/plant-wrong-shard
plant_name=wrong-shard
# shellcheck source=tests/compat/plant-lib.sh
. "$repo/tests/compat/plant-lib.sh"
rm -rf "$work"
plant_build "$work" wrong-shard
# The Rust object's Kbuild command line, wherever the module's layout puts it (client/ today).
cmd=$(find "$work/src/kmod/build/nvidia_peermem" -name .nvpeer_main.o.cmd | head -n 1)
grep -qs -- '--cfg nvpeer_plant_wrong_shard' "$cmd" || stop "... with the plant's cfg (${cmd:-no .nvpeer_main.o.cmd})"
echo "ok    ... with the plant's cfg"
msg=$(env -u NVPEER_SUMMARY_DIR NVPEER_VM_OUT="$work/vm" "$repo/tests/vm/run.sh" --kdir "$kdir" wrong-shard "$work/ko" 2>&1)
rc=$?
grep -E '^(vm:|ok |FAIL |\[suite)' <<<"$msg"
check "the run fails" test "$rc" -ne 0
check "... as a WARN" grep -q "the guest kernel reported: .*WARN" <<<"$msg"
check "... while the suite's own checks pass" grep -q '^\[suite wrong-shard\] 2 ok, 0 failed' <<<"$msg"
warn=$(grep -o "nvpeer: state of shard [0-9]* reached under shard [0-9]*'s lock" "$work/vm/console.txt" | head -n 1)
read -r state held < <(sed -E "s/.*shard ([0-9]+) reached under shard ([0-9]+)'s.*/\1 \2/" <<<"$warn")
check "... the held-lock check's, under the next shard's lock (${warn:-no such line})" \
    test -n "$warn" -a "$(( (${state:-0} + 1) % 64 ))" = "${held:-x}"  # 64: SHARDS, kmod/client/pin.rs
echo "wrong-shard plant: $fails failed"
[ $fails -eq 0 ]
