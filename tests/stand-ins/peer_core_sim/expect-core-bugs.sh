#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# expect-core-bugs.sh KDIR: the MOFED core bug of 5.4-3 ... 24.10 (CONTRACT 1.7 item 7), which
# the core stand-in reproduces with stop_bug=1, each case in a VM of its own
# (tests/scenarios/core_bugs.py). Passes when each run's suite checks pass and its kernel
# reports are exactly that bug's: lockdep at a persistent client's MR dereg (24.04 line), and
# lockdep then a hung task when an invalidating MR fails before activation (5.4-3 line). The
# summary lists them as the core's known bugs. Everywhere else stop_bug stays off, since one
# lockdep report turns lockdep off for the rest of a boot.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
[ $# -eq 1 ] || { echo "usage: expect-core-bugs.sh KDIR" >&2; exit 2; }
kdir=$1
fail=0
# case line expected-report-kinds (all required, nothing else) expected dmesg line
while read -r case line kinds want; do
    mkdir -p /tmp/nvpeer-vm
    out=$(mktemp -d "/tmp/nvpeer-vm/core-bug-$case.XXXXXX")
    msg=$(NVPEER_VM_OUT=$out NVPEER_VM_TIMEOUT=400 \
          NVPEER_SUMMARY_EXPECTED="MOFED core: $line stop_invalidation_notifier '!=' bug, $case: $(echo "$want" | tr _ ' ')" \
          "$repo/tests/vm/run.sh" --kdir "$kdir" core-bugs "$case" "$line" 2>&1)
    rc=$?
    echo "$msg" | grep -E "^(FAIL|\[suite)|^vm: " | head -n 10
    reported=$(sed -n 's/^vm: FAIL: the guest kernel reported: \([^ ]*\) .*/\1/p' <<<"$msg" | head -n1)
    if ! grep -q "^\[suite core-bugs-$case\] [1-9][0-9]* ok, 0 failed" "$out/suite.log" 2>/dev/null; then
        echo "core bug $case ($line): the suite's checks did not all pass; see $out" >&2
        fail=1; continue
    fi
    if [ $rc -eq 0 ] || [ -z "$reported" ]; then
        echo "core bug $case ($line): the kernel reported nothing; see $out" >&2
        fail=1; continue
    fi
    for k in ${reported//,/ }; do
        case ",$kinds," in *",$k,"*) ;; *)
            echo "core bug $case ($line): unexpected report kind $k (all: $reported); see $out" >&2; fail=1 ;;
        esac
    done
    for k in ${kinds//,/ }; do
        case ",$reported," in *",$k,"*) ;; *)
            echo "core bug $case ($line): no $k report (all: $reported); see $out" >&2; fail=1 ;;
        esac
    done
    # The kernel's own log only: the console also carries the suite's lines.
    if [ ! -s "$out/dmesg.txt" ]; then
        echo "core bug $case ($line): the guest saved no kernel log (it did not finish cleanly); see $out" >&2
        fail=1; continue
    fi
    if ! grep -q "$(echo "$want" | tr _ ' ')" "$out/dmesg.txt"; then
        echo "core bug $case ($line): the kernel's report is not '$want'; see $out" >&2; fail=1; continue
    fi
    echo "core bug $case ($line): as known ($reported), log $out"
done <<'EOF_CASES'
persistent_dereg 24.04 lockdep,WARN bad_unlock_balance_detected
failed_activation 5.4-3 lockdep,WARN,hung-task possible_recursive_locking_detected
EOF_CASES
exit $fail
