#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# expect-4x-uaf.sh KDIR: NVIDIA's nvidia-peermem (550.163.01) on a MOFED 4.x core writes into
# its own freed context, and the rig must catch it. Runs `tests/vm/run.sh reference-basic 4x`
# and passes only when
#   - every check of the suite itself passed (data, invalidation, counters, unload), and
#   - the run failed on a kernel report that is this write: SLUB "Poison overwritten" 8 bytes at
#     offset 0x48 of a freed object (offsetof(struct nv_mem_context, callback_task) on x86_64),
#     or KFENCE "use-after-free write" in nv_get_p2p_free_callback.
# Why: nv_get_p2p_free_callback() sets callback_task = current, calls the core's invalidate
# callback, then sets callback_task = NULL. A 4.x core destroys the MR's umem inside that call
# (dma_unmap, put_pages, release), and release() kfree()s the context: the NULL store lands in
# freed memory (CONTRACT.md 3.1, defect (1); 3.2 "same callback_task scheme"). Our module must
# not do this: the same scenario passes cleanly against ours.
# If a newer reference no longer does it, this script fails and says so: drop it then, and run
# 4x in the plain reference-basic step.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
[ $# -eq 1 ] || { echo "usage: expect-4x-uaf.sh KDIR" >&2; exit 2; }
kdir=$1
mkdir -p /tmp/nvpeer-vm
out=$(mktemp -d /tmp/nvpeer-vm/reference-4x.XXXXXX)
msg=$(NVPEER_VM_OUT=$out NVPEER_SUMMARY_EXPECTED="NVIDIA 550 use-after-free on a 4.x core (CONTRACT 3.1)" \
    "$repo/tests/vm/run.sh" --kdir "$kdir" reference-basic 4x 2>&1)
rc=$?
echo "$msg" | grep -E '^(FAIL|\[suite)|^vm: ' | head -n 20
if ! grep -q '^\[suite reference-basic\] [0-9]* ok, 0 failed' "$out/suite.log" 2>/dev/null; then
    echo "reference 4x: the suite's own checks did not all pass (log $out)" >&2; exit 1
fi
if [ $rc -eq 0 ]; then
    echo "reference 4x: the run passed with no kernel report: NVIDIA's use-after-free is gone" \
         "(or no longer caught); see the header of $0" >&2
    exit 1
fi
reported=$(sed -n 's/^vm: FAIL: the guest kernel reported: \([^ ]*\) .*/\1/p' <<<"$msg" | head -n1)
for kind in ${reported//,/ }; do
    case "$kind" in
    SLUB|KFENCE|WARN) ;;   # WARN: SLUB's object_err() warns with each report
    *) echo "reference 4x: unexpected kernel report kind $kind (all: $reported); log $out" >&2
       echo "$msg" | tail -n 40 >&2; exit 1 ;;
    esac
done
[ -n "$reported" ] || { echo "reference 4x: the run failed without a kernel report; log $out" >&2
                        echo "$msg" | tail -n 40 >&2; exit 1; }
# SLUB: "[Poison overwritten] 0xFIRST-0xLAST @offset=..." then "Object 0xOBJ @offset=...".
slub=$(awk '/\[Poison overwritten\]/ { split($0, a, /\] 0x|-0x/); first = a[2]; want = 1; next }
            want && /Object 0x[0-9a-f]+ @offset/ { match($0, /Object 0x[0-9a-f]+/);
                obj = substr($0, RSTART + 9, RLENGTH - 9); print first, obj; want = 0 }' \
       "$out/dmesg.txt" 2>/dev/null | while read -r first obj; do
           printf '%d\n' $((0x$first - 0x$obj)); done | sort -u)
kfence=$(grep -c 'KFENCE: use-after-free write in nv_get_p2p_free_callback' "$out/dmesg.txt" 2>/dev/null || true)
if [ "$slub" = 72 ] || [ "${kfence:-0}" -gt 0 ]; then
    by=$([ "$slub" = 72 ] && echo "SLUB poison check")
    [ "${kfence:-0}" -gt 0 ] && by="${by:+$by and }KFENCE"
    echo "reference 4x: $by caught NVIDIA's write into its freed nv_mem_context" \
         "(callback_task, offset 0x48), as expected (log $out)"
    exit 0
fi
echo "reference 4x: the run failed, but not (only) on the known write at offset 0x48" \
     "(SLUB offsets seen: ${slub:-none}); log $out" >&2
echo "$msg" | tail -n 40 >&2
exit 1
