#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Runs inside the VM: guest.sh OUT SUITE [ARGS...]. Prepares the detectors, runs the suite, then
# makes kmemleak scan and saves the kernel log, so run.sh can judge the run.
out=$1 suite=$2; shift 2
repo=$(cd "$(dirname "$0")/../.." && pwd)
export NVPEER_REPO=$repo NVPEER_OUT=$out
mountpoint -q /sys/kernel/debug || mount -t debugfs none /sys/kernel/debug
kmemleak=/sys/kernel/debug/kmemleak
# The periodic scan thread is stopped: it reported objects in flight during a long stress run
# (the final scans below found nothing); only the scans after the suite judge the run. Boot's
# leaks need no scan-and-clear here: a leak that scan would report fails the run by its log line
# (scan-log.sh), as it fails it when the final scans report it.
if [ -w $kmemleak ]; then echo scan=off > $kmemleak; fi
dmesg -n 7 2>/dev/null

bash "$repo/tests/scenarios/$suite.sh" "$@" 2>&1 | tee "$out/suite.log"
rc=${PIPESTATUS[0]}

if [ -w $kmemleak ]; then
    # kmemleak reports an object older than 5 s (at the scan's start) that is unreferenced now
    # and was so, unchanged, at the scan before (a changed one is greyed for one scan). The first
    # scan, 3 s after the suite, records what the suite left unreferenced, including what its
    # deferred teardown (RCU, work items, netns cleanup) orphaned by then; the second, 6 s after
    # the suite, reports. A scan takes 2-3 s under TCG, so the first fits in the wait.
    ended=$(cut -d' ' -f1 /proc/uptime)
    sleep 3; echo scan > $kmemleak
    sleep "$(awk -v t="$ended" '{ w = t + 6 - $1; print (w > 0 ? w : 0) }' /proc/uptime)"
    echo scan > $kmemleak
    cat $kmemleak > "$out/kmemleak.txt"
fi
dmesg > "$out/dmesg.txt"
echo "$rc" > "$out/rc"
sync
