#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# scan-log.sh FILE... : prints the kinds of kernel reports found in the given logs (comma
# separated; empty and exit 1 when none). scan-log.sh --pattern: prints the combined regex.
set -u
declare -A kinds=(
    [WARN]='WARNING: |------------\[ cut here \]------------'
    [BUG]='BUG: |kernel BUG at|Oops|general protection fault|Unable to handle|Kernel panic|UBSAN:'
    [lockdep]='possible (circular|recursive) locking|inconsistent lock state|INFO: trying to register non-static key|suspicious RCU usage|lock held when returning|bad unlock balance'
    [kmemleak]='suspected memory leak|unreferenced object 0x'
    [KFENCE]='BUG: KFENCE'
    [SLUB]='BUG [^ ]+ \((Not tainted|Tainted)|Poison overwritten|Redzone overwritten|Object already free|Freepointer corrupt'
    [hung-task]='INFO: task .* blocked for more than|rcu: INFO: rcu_.* self-detected stall|detected stalls on CPUs|soft lockup|hard LOCKUP'
)
# A line another kind names is not also a BUG: KFENCE heads its reports "BUG: KFENCE: ..." and
# the soft-lockup watchdog "watchdog: BUG: soft lockup", so without this every KFENCE catch would
# read KFENCE,BUG and a script that expects only KFENCE would fail on its own catch.
declare -A unless=(
    [BUG]="${kinds[KFENCE]}|${kinds[hung-task]}"
)
order=(KFENCE SLUB lockdep hung-task kmemleak WARN BUG)
if [ "${1:-}" = --pattern ]; then
    p=""; for k in "${order[@]}"; do p="$p|${kinds[$k]}"; done; echo "${p#|}"; exit 0
fi
found=()
for k in "${order[@]}"; do
    for f in "$@"; do
        [ -f "$f" ] || continue
        if grep -E "${kinds[$k]}" "$f" | grep -qvE "${unless[$k]:-^\$^}"; then
            found+=("$k"); break
        fi
    done
done
[ ${#found[@]} -gt 0 ] || exit 1
(IFS=,; echo "${found[*]}")
