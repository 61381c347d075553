#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# `make bench`: the registration benchmark, ours vs NVIDIA's nvidia-peermem: times in one VM
# run, kernel memory per registration in a second; both again on Debian's own kernel, whose
# timing boot ends with a perf profile of both modules. Ends with one summary line per kernel and
# size (tests/bench_summary.py) and the targets met or missed.
# BENCH_PIN_COST_NS sets the stand-in's modelled pin cost per 64 KiB page (default 2000).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
tests/setup/deps.sh
. tests/setup/env.sh
KDIR=$(tests/kernel/build.sh)
tests/build-all.sh "$KDIR"
tests/reference/build.sh "$KDIR" tests/reference/out
# Each boot's output directory, where bench-reg.py leaves its results for the summary.
work=$(mktemp -d /tmp/nvpeer-bench.XXXXXX)
boot() {  # boot NAME run.sh-ARGS...
    local name=$1
    shift
    NVPEER_VM_OUT=$work/$name tests/vm/run.sh --bench --memory 4G "$@"
}
# The host's time for calibrate.py's loop, taken before any VM runs: the guest divides its own by
# it to scale the modelled pin cost (a second table in each timed run).
host_loop_ns=$(python3 tests/scenarios/calibrate.py)
boot test-timing --kdir "$KDIR" bench-reg "${BENCH_PIN_COST_NS:-2000}" --host-loop-ns "$host_loop_ns"
# Kernel memory per registration: its own boot, with SLUB's allocation tracking (which would
# slow the timed runs).
boot test-memory --append slub_debug=U --kdir "$KDIR" bench-reg memory
# Both again on Debian's own kernel, built without lockdep and kmemleak (the test kernel's
# debugging makes every lock and allocation of both modules and of the stand-ins cost more, and
# its mutexes larger): the modules built for it by kmod/scripts/stock-kbuild.sh.
release=$(tests/stock/release.sh)
kodir=$(kmod/scripts/stock-kbuild.sh build "$release" --reference)
boot debian-timing --stock "$release" bench-reg "${BENCH_PIN_COST_NS:-2000}" --ko-dir "$kodir" \
    --host-loop-ns "$host_loop_ns" --profile
boot debian-memory --append slub_debug=U --stock "$release" bench-reg memory --ko-dir "$kodir"
echo
python3 tests/bench_summary.py test "$work/test-timing" "$work/test-memory" \
    debian "$work/debian-timing" "$work/debian-memory"
rm -rf "$work"
