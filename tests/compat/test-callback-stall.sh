#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# test-callback-stall.sh KDIR: REVIEW-KMOD C5 closed, and the proof fails without the fix. Two
# copies of kmod/ are built (as test-wrong-shard.sh does): NVPEER_PLANT=callback-stall, whose free
# callback stalls 3 s after handing off its pin (in the window C5 names), and the control
# NVPEER_PLANT=callback-stall-unheld, the same without the callback's own module reference (the
# fix reverted). tests/scenarios/callback-stall.sh must pass on the first: rmmod refused for the
# whole stall, no kernel report; and the second's run must fail with the kernel reporting the
# freed text the stalled thread returned into. An x86_64 KDIR, with the stand-ins built for it.
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
kdir=${1:?usage: test-callback-stall.sh KDIR}
# shellcheck disable=SC1091
. "$repo/tests/setup/env.sh"
work=$repo/build/plant-callback-stall
plant_name=callback-stall
# shellcheck source=tests/compat/plant-lib.sh
. "$repo/tests/compat/plant-lib.sh"
rm -rf "$work"
# REVIEW-KMOD-3 T4-9: the plant is read from make's command line alone, by the Makefile as by
# Kbuild: NVPEER_PLANT=callback-stall-unheld left in the environment must skip no tail-call check
# (the recipe, echoed by a make whose shell runs nothing, still names check-tail-call.sh).
recipe() { make -C "$repo/kmod" KDIR="$kdir" SHELL=/bin/true "$@" modules 2>&1; }
checks_tail_call() { grep -q check-tail-call.sh <<<"$1"; }
check "NVPEER_PLANT=callback-stall-unheld in the environment: the tail call is still checked" \
    checks_tail_call "$(NVPEER_PLANT=callback-stall-unheld recipe)"
check "... on the command line: not checked (the unheld plant has no tail jump)" \
    test "$(checks_tail_call "$(recipe NVPEER_PLANT=callback-stall-unheld)"; echo $?)" = 1
for plant in callback-stall callback-stall-unheld; do
    plant_build "$work/$plant" "$plant"
done
msg=$(env -u NVPEER_SUMMARY_DIR NVPEER_VM_OUT="$work/vm-fixed" "$repo/tests/vm/run.sh" --kdir "$kdir" \
    callback-stall "$work/callback-stall/ko" 2>&1)
rc=$?
grep -E '^(vm:|ok |FAIL |\[suite|      rmmod)' <<<"$msg"
check "with the callback's module reference: rmmod refused through the stall, the run passes" test "$rc" -eq 0
msg=$(env -u NVPEER_SUMMARY_DIR NVPEER_VM_OUT="$work/vm-control" "$repo/tests/vm/run.sh" --kdir "$kdir" \
    callback-stall "$work/callback-stall-unheld/ko" 2>&1)
rc=$?
grep -E '^(vm:|ok |FAIL |\[suite|      rmmod)' <<<"$msg"
check "the control (the fix reverted): the run fails" test "$rc" -ne 0
check "... the kernel reporting the stalled thread's return into freed module text" \
    grep -qE "the guest kernel reported: .*(Oops|BUG)" <<<"$msg"
echo "callback-stall plant: $fails failed"
[ $fails -eq 0 ]
