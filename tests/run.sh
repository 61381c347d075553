#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# The whole test suite (README: `make test`; CI: .ci/run). Installs what it needs, builds the
# test kernel once (cached), the module and the CLI, and runs every host-side and in-VM suite.
# Prints the time of each phase and ends with "tests: N passed, N failed".
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
. tests/setup/env.sh

. tests/steps.sh

fatal "deps" tests/setup/deps.sh
fatal "kernel" tests/kernel/build.sh
KDIR=$(tests/kernel/build.sh 2>/dev/null)
fatal "module (kmod + test modules)" tests/build-all.sh "$KDIR"
step "abi: our headers match the real ones (nvidia-open-kernel-source)" tests/abi/check.sh "$KDIR"
step "abi: self-test (mutated headers fail the check)" tests/abi/check.sh --self-test "$KDIR"
step "reference: build NVIDIA nvidia-peermem" tests/reference/build.sh "$KDIR" tests/reference/out
step "rig: scan-log detects each report kind" tests/vm/test-scan-log.sh
step "build: check-tail-call.sh reads x86_64, arm64, jmpq and retaa disassemblies under mawk (REVIEW-KMOD-3 T4-3)" \
    kmod/scripts/check-tail-call.sh --self-test
step "install: find-deps discovery and refusals (fake trees)" tests/install/test-discovery.sh
step "install: nvpeer-migrate plan, run, revert (fake /etc trees)" tests/install/test-migrate.sh
step "install: DKMS add/build/install/remove (temp trees)" tests/install/test-dkms.sh "$KDIR"
step "install: re-attach udev rule, attach/rebuild units, nvpeer-rebuild (DESTDIR, udevadm test, systemd-analyze)" tests/install/test-units.sh
step "install: make deb, package contents, lintian" tests/install/test-deb.sh
step "cli: cargo fmt --check" bash -c 'cd userspace && cargo fmt --all --check'
step "cli: cargo clippy -D warnings" bash -c 'cd userspace && cargo clippy --locked --all-targets -q -- -D warnings'
step "cli: cargo test" bash -c 'cd userspace && cargo test --locked -q 2>&1'
fatal "cli: cargo build --release" bash -c 'cd userspace && cargo build --locked --release -q'
step "cli: nvpeer --version/--help" tests/cli-smoke.sh
step "cli: attach judges build provenance with modinfo/modprobe on built module files" tests/install/test-provenance.sh
step "bench: summary lines and target verdicts from planted results" python3 tests/bench_summary.py --self-test
step "docs: every documented nvpeer flag and JSON field exists" tests/docs/check-docs.sh
step "docs: self-test (planted bogus flag and fields fail the check)" tests/docs/check-docs.sh --self-test
step "fleet: stats --format prometheus / --textfile: promtool, scraped from a real node_exporter" tests/fleet/test-metrics.sh
step "fleet: NHC check file (check_nvpeer, check_nvpeer_bw) under an NHC harness" tests/fleet/test-nhc.sh
step "fleet: Slurm prolog/epilog as slurmd runs them (env -i, no PATH): a leak drains once" tests/fleet/test-slurm-epilog.sh
step "fleet: Kubernetes DaemonSet (yamllint, kubernetes-validate --strict)" tests/fleet/test-k8s.sh
step "fleet: shellcheck dist/ and tests/fleet/" shellcheck dist/nhc/nvpeer.nhc dist/slurm/prolog-nvpeer \
    dist/slurm/epilog-nvpeer tests/fleet/test-metrics.sh tests/fleet/test-nhc.sh tests/fleet/test-slurm-epilog.sh \
    tests/fleet/test-k8s.sh kmod/packaging/nvpeer-rebuild kmod/scripts/gen-provenance.sh kmod/scripts/check-tail-call.sh \
    kmod/runtime/rust-flags.sh kmod/runtime/extract-object.sh tests/stock/headers-route.sh \
    tests/stock/vm-kernel.sh tests/foundation/check-ko.sh tests/scenarios/suites.sh tests/compat/test-callback-stall.sh tests/compat/plant-lib.sh tests/compat/test-wrong-shard.sh tests/install/test-units.sh tests/install/test-provenance.sh
step "vm: planted WARN fails the run" tests/vm/test-detector.sh "$KDIR" warn WARN
step "vm: planted leak fails the run" tests/vm/test-detector.sh "$KDIR" leak kmemleak
# Suites that leave nothing loaded share a boot (tests/scenarios/suites.sh): about 20 s each saved.
step "vm: a clean run passes (the test module loaded without a plant); module-load; core generation detected at load; DOCA-OFED 24.07+ layout (ib_uverbs)" \
    tests/vm/run.sh --kdir "$KDIR" suites "plant none" module-load core_detect
step "vm: make install, modprobe, make uninstall; nvpeer-dkms dpkg -i builds through dkms, modprobe, dpkg -r; make dkms-install, dkms add, make dkms-uninstall" \
    tests/vm/run.sh --kdir "$KDIR" suites install deb
step "vm: main job (nvpeer check in the VM); nvpeer selftest against the stand-ins (and without the module)" \
    tests/vm/run.sh --kdir "$KDIR" suites main selftest
step "vm: over Soft-RoCE: nvpeer check/stats (module, stand-ins); nvpeer bench (every op x 8 B/4 KiB/1 MiB verified, two namespaces, failures); bench --loopback-all (a row per device, --min-gbps names the pair)" \
    tests/vm/run.sh --kdir "$KDIR" suites cli-check rdma-bench bench-loopback-all
step "vm: the stand-ins: nv_p2p_sim behaves as CONTRACT 2, peer_core_sim as CONTRACT 1 (4x, 5x, 5.4-3, 24.04, 5x-unmaps)" \
    tests/vm/run.sh --kdir "$KDIR" suites nv-p2p-sim peer-core-sim
step "vm: ours: conformance (every generation, driver flavour, parameter set), revocation at every point, stress (threads x random sizes x random revocations), fault injection (every provider call x errno); 100 load/unload cycles and malformed registrations" \
    tests/vm/run.sh --memory 3G --kdir "$KDIR" suites "conformance ours" \
    "revocation ours ${NVPEER_RACE_ITERATIONS:-100} ${NVPEER_RACE_THREADS:-3}" \
    "stress ${NVPEER_STRESS_SECONDS:-10} ${NVPEER_STRESS_THREADS:-4}" faults "lifecycle 100"
step "compat: kernel probes (7.2's sources, its artefacts alone, lookalikes)" tests/compat/test-probes.sh "$KDIR"
# Issue 44: the module's two foundations. Our runtime (kmod/runtime/), forced on the test kernel, so
# that its locks, allocations and references run under lockdep, kmemleak, KFENCE and refcount_t's
# checks, which no distribution kernel has on.
OWN_KO=$repo/build/own/nvidia_peermem.ko
step "foundation: kmod/nvidia_peermem.ko is on the kernel's crate (its Rust symbols imported)" \
    tests/foundation/check-ko.sh kmod/nvidia_peermem.ko kernel
step "foundation: built on our runtime for the test kernel (forced): no Rust symbol imported or global, nothing exported" \
    bash -c 'mkdir -p "${2%/*}" && make -s -C kmod KDIR="$1" NVPEER_FOUNDATION=own KO_OUT="$2" && tests/foundation/check-ko.sh "$2" own' _ "$KDIR" "$OWN_KO"
step "vm: ours on our runtime: conformance (quick), revocation, stress, under lockdep, kmemleak, KFENCE" \
    env NVPEER_OURS_KO="$OWN_KO" tests/vm/run.sh --memory 3G --kdir "$KDIR" suites "conformance ours --quick" \
    "revocation ours ${NVPEER_OWN_RACE_ITERATIONS:-30} ${NVPEER_RACE_THREADS:-3}" "stress ${NVPEER_STRESS_SECONDS:-10} ${NVPEER_STRESS_THREADS:-4}"
# The generation markers unversioned (REVIEW-KMOD-2 T3-3) need a kernel that versions modules and
# tolerates an unversioned import: the 7.2 test kernel with CONFIG_MODVERSIONS and
# CONFIG_EXTENDED_MODVERSIONS, without Rust and the checkers (a lighter build), built once and
# cached like the others (no kernel below versions modules, and the suites load one build on every
# core generation, which versions forbid).
step "modversions: the generation markers unversioned; build provenance judged before load (compatible, rebuild), on the 7.2 test kernel with CONFIG_MODVERSIONS and CONFIG_EXTENDED_MODVERSIONS (ours on our runtime)" \
    tests/compat/test-modversions.sh
step "vm: NVIDIA's nvidia-peermem: conformance (differences named), revocation at every point (5x, 5.4-3, 24.04, 5x-unmaps), fault injection (5x, 5x-unmaps), basic (5x, 5x-unmaps)" \
    tests/vm/run.sh --memory 3G --kdir "$KDIR" suites "conformance reference" \
    "revocation reference ${NVPEER_RACE_ITERATIONS:-100} ${NVPEER_RACE_THREADS:-3}" "faults reference" "reference_basic 5x 5x-unmaps"
step "vm: revocation cases that break NVIDIA's nvidia-peermem break it as known" tests/reference/expect-breaks.sh "$KDIR"
step "vm: MOFED 5.4-3 ... 24.10's stop_invalidation_notifier bug, reproduced by the core stand-in, shows as known" \
    tests/stand-ins/peer_core_sim/expect-core-bugs.sh "$KDIR"
step "vm: rmmod racing an in-flight acquire, then cudaFree (ours, every generation)" tests/vm/run.sh --kdir "$KDIR" unload-race ours
step "vm: the free callback's own module reference: rmmod refused while it is stalled after handing off its pin, and without it the kernel reports the return into freed text (REVIEW-KMOD C5)" \
    tests/compat/test-callback-stall.sh "$KDIR"
step "vm: rmmod racing an in-flight acquire, NVIDIA's nvidia-peermem (outcome recorded)" tests/vm/run.sh --kdir "$KDIR" unload-race reference
step "vm: reference nvidia-peermem on 4x: its use-after-free is caught" tests/reference/expect-4x-uaf.sh "$KDIR"
# Stock distribution kernels (issue 9): Debian's own 7.2 kernel, whose headers ship no Rust artefacts.
STOCK_RELEASE=$(tests/stock/release.sh) || STOCK_RELEASE=${NVPEER_STOCK_RELEASE:-7.2.12+deb13-amd64}
step "stock: unmatched toolchains refused early, one line" tests/stock/test-refusal.sh "$STOCK_RELEASE"
step "stock: build for Debian's $STOCK_RELEASE (kmod/scripts/stock-kbuild.sh)" kmod/scripts/stock-kbuild.sh build "$STOCK_RELEASE" --stand-ins
step "stock: make sign (throwaway key, the tree's sign-file)" tests/stock/test-sign.sh "$STOCK_RELEASE"
step "vm: Debian's kernel: planted WARN fails the run" tests/vm/test-detector.sh "stock:$STOCK_RELEASE" warn WARN
# Issue 44's headers route on Debian 13 too: linux-headers alone and our runtime, in the chroot's
# trixie userland (this bookworm machine cannot run trixie's kbuild tools or its gcc-14 itself).
STOCK_OWN=$repo/build/stock-headers/$STOCK_RELEASE
step "headers: Debian 13's $STOCK_RELEASE from linux-headers alone (in a trixie userland): on our runtime, no objtool or modpost warning" \
    kmod/scripts/stock-kbuild.sh build-headers "$STOCK_RELEASE" "$STOCK_OWN"
step "vm: Debian's own $STOCK_RELEASE kernel: load, register, DMA, revoke, unload, with ours on the kernel's crate (the chroot's route) and on our runtime (the headers route)" \
    tests/vm/run.sh --stock "$STOCK_RELEASE" suites "stock_basic $STOCK_RELEASE $repo/build/stock/$STOCK_RELEASE" \
    "stock_basic $STOCK_RELEASE $STOCK_OWN"
# Debian 12's kernels, built without Rust: the module from linux-headers-<release> alone (our
# runtime, picked by itself), booted in Debian's own unmodified vmlinuz with the stand-ins built
# the same way.
for series in 6.1 6.12; do
    rel=$(tests/stock/headers-route.sh release "$series") || { step "headers: Debian 12's $series in the archive" false; continue; }
    out=$repo/build/headers-out/$rel
    step "headers: Debian 12's $rel from linux-headers alone: builds on our runtime, no objtool or modpost warning" \
        tests/stock/headers-route.sh build "$rel" "$out"
    step "vm: Debian 12's own $rel kernel, ours on our runtime: modprobe under MODVERSIONS, conformance (quick), revocation" \
        env NVPEER_KO_DIR="$out" tests/vm/run.sh --stock "$rel" --memory 3G suites "stock_basic $rel $out" "conformance ours --quick" \
        "revocation ours ${NVPEER_HEADERS_RACE_ITERATIONS:-30} 2"
    arm=${rel%-amd64}-arm64
    step "headers: Debian 12's $arm from its linux-headers, cross-built: on our runtime, no objtool or modpost warning, the tail-call check on arm64 code" \
        bash -c 'tests/setup/deps.sh --cross arm64 >/dev/null && tests/stock/headers-route.sh build-arm64 "$1" "$2"' _ "$arm" "$repo/build/headers-out/$arm"
done
step "reliability summary: ours 0 leaks, 0 reports" tests/summary.py "$NVPEER_SUMMARY_DIR"
summary
[ $failed -eq 0 ]
