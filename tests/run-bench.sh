#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# `make bench`: the registration benchmark, ours vs NVIDIA's nvidia-peermem: times in one VM
# run, kernel memory per registration in a second; both again on Debian's own kernel, whose
# timing boot ends with a perf profile of both modules. Then the module's two foundations
# (issue 44): ours built on our own runtime, timed on the test kernel against the same reference
# (the runtime's cost against the kernel's crate, beside the run-to-run spread), and both boots
# on Debian 12's own 6.12 kernel with everything built from its linux-headers alone (the route
# most clusters take). Ends with one summary line per kernel and size (tests/bench_summary.py)
# and the targets met or missed.
# BENCH_PIN_COST_NS sets the stand-in's modelled pin cost per 64 KiB page (default 2000).
# BENCH_BASELINE=REV (a commit) times that commit's module too, on the test kernel and on
# Debian's (timing and memory), in the same run against the same stand-ins and reference, and
# prints its summary ('baseline:' lines) before this tree's: a change's before and after from
# one run (issue 45).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
tests/setup/deps.sh
. tests/setup/env.sh
# Resolved first, so that a wrong revision fails before any boot.
baseline_rev=
[ -z "${BENCH_BASELINE:-}" ] || baseline_rev=$(git rev-parse --verify "$BENCH_BASELINE^{commit}")
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
# A timing boot (NAME-timing) and a memory boot (NAME-memory) of one kernel and module set:
# timing_and_memory NAME run.sh-ARGS... -- [bench-reg ARGS (--ko-dir DIR)]. Kernel memory per
# registration has its own boot, with SLUB's allocation tracking (which would slow the timed
# runs).
timing_and_memory() {
    local name=$1 kernel=()
    shift
    while [ "$1" != -- ]; do kernel+=("$1"); shift; done
    shift
    boot "$name-timing" "${kernel[@]}" bench-reg "${BENCH_PIN_COST_NS:-2000}" "$@" \
        --host-loop-ns "$host_loop_ns"
    boot "$name-memory" --append slub_debug=U "${kernel[@]}" bench-reg memory "$@"
}
timing_and_memory test --kdir "$KDIR" --
# Both again on Debian's own kernel, built without lockdep and kmemleak (the test kernel's
# debugging makes every lock and allocation of both modules and of the stand-ins cost more, and
# its mutexes larger): the modules built for it by kmod/scripts/stock-kbuild.sh.
release=$(tests/stock/release.sh)
kodir=$(kmod/scripts/stock-kbuild.sh build "$release" --reference)
boot debian-timing --stock "$release" bench-reg "${BENCH_PIN_COST_NS:-2000}" --ko-dir "$kodir" \
    --host-loop-ns "$host_loop_ns" --profile
boot debian-memory --append slub_debug=U --stock "$release" bench-reg memory --ko-dir "$kodir"
# Our runtime on the test kernel (forced), timed as above: the same kernel, the same reference.
own=$repo/build/own/nvidia_peermem.ko
mkdir -p "${own%/*}"
make -s -C kmod KDIR="$KDIR" NVPEER_FOUNDATION=own KO_OUT="$own"
export NVPEER_OURS_KO=$own
boot test-own-timing --kdir "$KDIR" bench-reg "${BENCH_PIN_COST_NS:-2000}" --host-loop-ns "$host_loop_ns"
unset NVPEER_OURS_KO
# Debian 12's 6.12 from its headers package (our runtime, picked by itself), with NVIDIA's module
# built the same way.
rel12=$(tests/stock/headers-route.sh release 6.12)
out12=$repo/build/headers-out/$rel12
tests/stock/headers-route.sh build "$rel12" "$out12" --reference >/dev/null
timing_and_memory debian12 --stock "$rel12" -- --ko-dir "$out12"
if [ -n "$baseline_rev" ]; then
    # Its module alone, from its own tree; the stand-ins and NVIDIA's module are this run's.
    tree=$work/baseline-tree
    mkdir -p "$tree" "$work/baseline-ko"
    git archive "$baseline_rev" | tar -x -C "$tree"
    make -s -C "$tree/kmod" KDIR="$KDIR" KO_OUT="$work/baseline-ko/nvidia_peermem.ko"
    [ -f "$work/baseline-ko/nvidia_peermem.ko" ] \
        || { echo "bench: the baseline's make left no $work/baseline-ko/nvidia_peermem.ko (KO_OUT unknown before d3d7e53)" >&2; exit 1; }
    NVPEER_OURS_KO=$work/baseline-ko/nvidia_peermem.ko timing_and_memory baseline-test --kdir "$KDIR" --
    base_built=$("$tree/kmod/scripts/stock-kbuild.sh" build "$release" "$work/baseline-debian-built")
    cp -r "$kodir" "$work/baseline-debian-ko"
    cp "$base_built/nvidia_peermem.ko" "$work/baseline-debian-ko/"
    timing_and_memory baseline-debian --stock "$release" -- --ko-dir "$work/baseline-debian-ko"
    echo
    echo "baseline ${baseline_rev:0:12} (BENCH_BASELINE=$BENCH_BASELINE), its lines prefixed 'baseline':"
    python3 tests/bench_summary.py test "$work/baseline-test-timing" "$work/baseline-test-memory" \
        debian "$work/baseline-debian-timing" "$work/baseline-debian-memory" | sed 's/^bench:/baseline:/'
    echo
    echo "this tree ($(git describe --always --dirty)):"
fi
echo
python3 tests/bench_summary.py test "$work/test-timing" "$work/test-memory" \
    debian "$work/debian-timing" "$work/debian-memory" \
    debian12 "$work/debian12-timing" "$work/debian12-memory"
python3 tests/bench_summary.py --foundation "$work/test-timing" "$work/test-own-timing"
rm -rf "$work"
