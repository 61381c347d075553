#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# `make test-matrix`: the module on the kernels beyond `make test`'s 7.2 (issue 15): the test
# kernels of 6.12 (LTS) and 7.3 (module load, conformance on every core generation, revocation at
# every point, the detectors), the 7.2 test kernel cross-built for arm64 and booted under
# qemu-system-aarch64 (conformance on one core generation), Debian's own 7.3 kernel
# (stock-basic). Each kernel is built once and cached like 7.2 (about 10 minutes each on 2 cores,
# 15 for arm64). Then it rebuilds the 7.2 modules as `make test` expects them, runs a planted
# wrong-shard build on 7.2 that must WARN (test-wrong-shard.sh), and ends with the kernel x suite
# table and "tests: N passed, N failed".
# NVPEER_MATRIX="6.12 7.3 arm64 stock" picks the parts (default all; "modversions", which `make test`
# runs, on its own); NVPEER_RACE_ITERATIONS and
# NVPEER_RACE_THREADS the revocation races (default 20 and 2).
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
. tests/setup/env.sh
. tests/steps.sh

parts=${NVPEER_MATRIX:-"6.12 7.3 arm64 stock"}
races=${NVPEER_RACE_ITERATIONS:-20} threads=${NVPEER_RACE_THREADS:-2}
STOCK_73=${NVPEER_STOCK_73:-7.3.4+deb13-amd64}
# step_ok NAME COMMAND...: a step whose failure skips the rest of its kernel.
step_ok() { local before=$failed; step "$@"; [ "$failed" -eq "$before" ]; }

fatal "deps (with the arm64 cross compiler and QEMU)" tests/setup/deps.sh --cross arm64
fatal "cli: cargo build --release" bash -c 'cd userspace && cargo build --locked --release -q'

for part in $parts; do
    case "$part" in
    6.12|7.3)
        step_ok "kernel: test kernel $part" tests/kernel/build.sh "$part" || continue
        kdir=$(tests/kernel/build.sh "$part" 2>/dev/null)
        step_ok "$part: module (kmod + test modules)" tests/build-all.sh "$kdir" || continue
        step "$part: kernel probes: its artefacts alone give what its sources give" \
            tests/compat/test-probes.sh --agree "$kdir"
        step "$part: vm: planted WARN fails the run" tests/vm/test-detector.sh "$kdir" warn WARN
        step "$part: vm: module-load" tests/vm/run.sh --kdir "$kdir" module-load
        step "$part: vm: conformance, ours (every generation, driver flavour, parameter set)" \
            tests/vm/run.sh --memory 3G --kdir "$kdir" conformance ours
        step "$part: vm: revocation at every point (ours, every generation)" \
            tests/vm/run.sh --kdir "$kdir" revocation ours "$races" "$threads"
        ;;
    arm64)
        step_ok "kernel: test kernel 7.2 for arm64 (cross-built)" tests/kernel/build.sh 7.2 arm64 || continue
        kdir=$(tests/kernel/build.sh 7.2 arm64 2>/dev/null)
        step_ok "arm64: module (kmod + test modules, cross-built)" tests/build-all.sh "$kdir" || continue
        step "arm64: modinfo vermagic names aarch64" bash -c \
            "modinfo -F vermagic kmod/nvidia_peermem.ko | grep -q aarch64 && file kmod/nvidia_peermem.ko | grep -q 'ARM aarch64'"
        step "arm64: vm: conformance, ours, on 5x-unmaps, every flavour (qemu-system-aarch64, virt)" \
            env NVPEER_VM_TIMEOUT=3000 tests/vm/run.sh --memory 3G --kdir "$kdir" conformance ours --gen 5x-unmaps
        ;;
    stock)
        step_ok "stock: build for Debian's $STOCK_73 (kmod/scripts/stock-kbuild.sh)" \
            kmod/scripts/stock-kbuild.sh build "$STOCK_73" --stand-ins || continue
        step "stock: Debian's own $STOCK_73 kernel: load, register, DMA, revoke, unload" \
            tests/vm/run.sh --stock "$STOCK_73" stock-basic "$STOCK_73" "$repo/build/stock/$STOCK_73"
        ;;
    modversions)
        # No kernel of make test versions modules (Debian's Rust kernels neither): the 7.2 test
        # kernel with CONFIG_MODVERSIONS, its own build (about 15 minutes cold, cached).
        step "modversions: the generation markers unversioned, on the 7.2 test kernel with CONFIG_MODVERSIONS" \
            tests/compat/test-modversions.sh
        ;;
    *) step "matrix: unknown part '$part' (known: 6.12 7.3 arm64 stock modversions)" false ;;
    esac
done
# `make test` and `make run` load the modules from kmod/ and tests/: leave them built for 7.2.
# Then the held-lock check of every state access must fire (a planted build of a copy of kmod/,
# against those stand-ins; one boot, which `make test` has no minutes left for).
if kdir=$(tests/kernel/build.sh 2>/dev/null); then
    step_ok "7.2: modules rebuilt for make test" tests/build-all.sh "$kdir" &&
        step "7.2: vm: a planted wrong-shard access WARNs and fails the run" \
            tests/compat/test-wrong-shard.sh "$kdir"
else
    step "kernel: test kernel 7.2" false
fi
step "reliability summary and kernel x suite table" tests/summary.py "$NVPEER_SUMMARY_DIR"
summary
[ $failed -eq 0 ]
