#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Runs inside the VM: guest.sh OUT SUITE [ARGS...]. Prepares the detectors, runs the suite, then
# makes kmemleak scan and saves the kernel log, so run.sh can judge the run.
out=$1 suite=$2; shift 2
repo=$(cd "$(dirname "$0")/../.." && pwd)
export NVPEER_REPO=$repo NVPEER_OUT=$out
mountpoint -q /sys/kernel/debug || mount -t debugfs none /sys/kernel/debug
kmemleak=/sys/kernel/debug/kmemleak
# Forget what boot left behind so only the suite's own leaks count. The periodic scan thread is
# stopped: it reported objects in flight during a long stress run (the final scans below found
# nothing); only the scans after the suite judge the run.
if [ -w $kmemleak ]; then echo scan=off > $kmemleak; echo scan > $kmemleak; echo clear > $kmemleak; fi
dmesg -n 7 2>/dev/null

bash "$repo/tests/scenarios/$suite.sh" "$@" 2>&1 | tee "$out/suite.log"
rc=${PIPESTATUS[0]}

if [ -w $kmemleak ]; then
    # kmemleak ignores objects younger than 5 s and needs two scans to be sure.
    sleep 6; echo scan > $kmemleak; sleep 1; echo scan > $kmemleak
    cat $kmemleak > "$out/kmemleak.txt"
fi
dmesg > "$out/dmesg.txt"
echo "$rc" > "$out/rc"
sync
