#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# run.sh [--cpus N] [--memory SIZE] [--append ARGS] [--kdir TREE] [--stock RELEASE] [--bench]
#        [--systemd] SUITE [ARGS...]
#
# Boots the test kernel under QEMU (TCG; KVM does not boot guests on these machines) with a
# busybox initramfs (tests/vm/init.sh): the host's root filesystem read-only over 9p with a tmpfs
# overlay, so the guest sees the repository, the built modules, the CLI, rdma-core and perftest.
# Runs tests/scenarios/SUITE.sh inside (through guest.sh) and exits with its status. The run
# FAILS, whatever the suite said, when the guest kernel log shows a WARN, BUG, Oops, lockdep,
# kmemleak, KFENCE, SLUB or hung-task report; the message says which.
# The guest has QEMU's `edu` PCI device (1234:11e8): peer_core_sim binds it as the "RDMA NIC"
# whose struct device is handed to peer-memory clients as dma_device.
# A --kdir tree built for arm64 (tests/kernel/build.sh SERIES arm64) boots under
# qemu-system-aarch64 (`virt`, TCG) with an arm64 Debian root of its own (arm64-root.sh).
# --stock RELEASE boots Debian's own, unmodified kernel of that release instead (its vmlinuz and
# modules from linux-binary-/linux-modules-RELEASE, kmod/scripts/stock-kbuild.sh vm; Debian 12's from
# linux-image-RELEASE, tests/stock/headers-route.sh vm): the modules it needs
# to mount the host root (9p, 9pnet_virtio, overlay) go into the initramfs and init.sh loads them.
# --systemd boots systemd as PID 1 (init.sh says how), with journald and udevd running.
# Logs stay in $NVPEER_VM_OUT (default: a fresh directory under /tmp/nvpeer-vm).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
. "$repo/tests/setup/env.sh"

cpus=2 memory=2G append="" kdir="" bench=0 stock="" arch=x86_64 systemd=0
while [ $# -gt 0 ]; do
    case "$1" in
    --cpus) cpus=$2; shift 2 ;;
    --memory) memory=$2; shift 2 ;;
    --append) append="$append $2"; shift 2 ;;
    --kdir) kdir=$2; shift 2 ;;
    --stock) stock=$2; shift 2 ;;
    --bench) bench=1; shift ;;
    --systemd) systemd=1; shift ;;
    -*) echo "run.sh: unknown option $1" >&2; exit 2 ;;
    *) break ;;
    esac
done
[ $# -ge 1 ] || { echo "usage: run.sh [options] SUITE [ARGS...]" >&2; exit 2; }
suite=$1; shift
[ -f "$repo/tests/scenarios/$suite.sh" ] || { echo "run.sh: no suite tests/scenarios/$suite.sh" >&2; exit 2; }
initrd_mods=""
if [ -n "$stock" ]; then
    case "$stock" in
    *+deb1[3-9]-*) vdir=$("$repo/kmod/scripts/stock-kbuild.sh" vm "$stock") ;;   # Debian 13+
    *) vdir=$("$repo/tests/stock/headers-route.sh" vm "$stock") ;;                 # Debian 12
    esac
    kernel=$vdir/vmlinuz modroot=$(cd "$vdir/modules" && pwd -P) initrd_mods=$vdir/initrd-modules
else
    [ -n "$kdir" ] || kdir=$("$repo/tests/kernel/build.sh")
    grep -q '^CONFIG_ARM64=y' "$kdir/.config" && arch=arm64
    case "$arch" in
    x86_64) kernel=$kdir/arch/x86/boot/bzImage ;;
    arm64)  kernel=$kdir/arch/arm64/boot/Image ;;
    esac
    modroot=$(ls -d "$kdir"/../modroot/lib/modules/* 2>/dev/null | head -n1)
    modroot=$(cd "$modroot" && pwd)
fi
# An arm64 guest (a tree built by `tests/kernel/build.sh SERIES arm64`) cannot run the host's
# binaries: its root is an arm64 Debian (tests/vm/arm64-root.sh), with the repository and the
# kernel's modules shared into it at their host paths.
guest_root=/ guest_bb=$(command -v busybox)
if [ "$arch" = arm64 ]; then
    guest_root=$("$here/arm64-root.sh")
    guest_bb=$guest_root/usr/bin/busybox
fi

out=${NVPEER_VM_OUT:-}
if [ -z "$out" ]; then
    mkdir -p /tmp/nvpeer-vm
    out=$(mktemp -d "/tmp/nvpeer-vm/$suite.XXXXXX")
fi
mkdir -p "$out"
out=$(cd "$out" && pwd)
rm -f "$out/rc" "$out/dmesg.txt" "$out/kmemleak.txt" "$out/suite.log" "$out"/tally-*.json

# The initramfs: busybox and init.sh (and, for --stock, the kernel's 9p/overlay modules in
# /modules, loaded in the order of /modules/order), rebuilt when any of them changes.
bb=$guest_bb
ikey=$(cat "$bb" "$here/init.sh" ${initrd_mods:+"$initrd_mods"/*} | sha256sum | cut -c1-12)
initrd=$NVPEER_CACHE/vm/initramfs-$ikey.cpio.gz
if [ ! -f "$initrd" ]; then
    mkdir -p "$NVPEER_CACHE/vm"
    tmp=$(mktemp -d)
    mkdir -p "$tmp/bin"
    cp "$bb" "$tmp/bin/busybox"
    cp "$here/init.sh" "$tmp/init"
    [ -z "$initrd_mods" ] || cp -r "$initrd_mods" "$tmp/modules"
    (cd "$tmp" && find . | cpio -o -H newc --quiet | gzip -1 > "$initrd.tmp")
    mv "$initrd.tmp" "$initrd"
    rm -rf "$tmp"
fi

{
    printf 'export NVPEER_CACHE=%q\n' "$NVPEER_CACHE"
    # Another build of our module for the suites (tests/scenarios/stack.py).
    [ -z "${NVPEER_OURS_KO:-}" ] || printf 'export NVPEER_OURS_KO=%q\n' "$NVPEER_OURS_KO"
    # Every module built for another kernel (tests/stock/headers-route.sh build).
    [ -z "${NVPEER_KO_DIR:-}" ] || printf 'export NVPEER_KO_DIR=%q\n' "$NVPEER_KO_DIR"
    printf 'exec bash %q %q %q' "$here/guest.sh" "$out" "$suite"
    # No arguments must stay none: `printf ' %q'` alone would pass one empty argument.
    [ $# -eq 0 ] || printf ' %q' "$@"
    printf '\n'
} > "$out/cmd.sh"

# Detector settings: KFENCE samples every 10 ms, SLUB red zones + poisoning + sanity checks on all
# caches, hung tasks reported after 30 s (suites that provoke deadlocks lower it further).
# Benchmarks (--bench) boot without the slab debugging that would dominate their timings.
if [ "$bench" = 1 ]; then
    cmdline="console=ttyS0 loglevel=7"
else
    cmdline="console=ttyS0 loglevel=7 kfence.sample_interval=10 slub_debug=FZP"
fi
cmdline="$cmdline sysctl.kernel.hung_task_timeout_secs=30 log_buf_len=8M oops=panic panic=-1"
cmdline="$cmdline nvpeer.out=$out nvpeer.mods=$modroot $append"
if [ "$systemd" = 1 ]; then
    cmdline="$cmdline nvpeer.systemd=1 systemd.show_status=0"
fi
share() {  # share TAG DIR [readonly]: a 9p export the guest's init.sh mounts by its tag
    printf '%s\n' -fsdev "local,id=$1,path=$2,security_model=none${3:+,readonly=on},multidevs=remap" \
        -device "virtio-9p-pci,fsdev=$1,mount_tag=$1"
}
mapfile -t shares < <(share hostroot "$guest_root" ro; share nvpeerout "$out")
case "$arch" in
x86_64) qemu=(qemu-system-x86_64 -machine q35) ;;
arm64)  qemu=(qemu-system-aarch64 -machine virt)
        cmdline=${cmdline/console=ttyS0/console=ttyAMA0}
        cmdline="$cmdline nvpeer.repo=$repo nvpeer.modtag=1"
        mapfile -t -O ${#shares[@]} shares < <(share nvpeerrepo "$repo" ro; share nvpeermods "$modroot" ro) ;;
esac

# TCG's threading: one host thread per vCPU, except for Debian's own kernel and benchmarks, which
# run every vCPU in one thread. Debian's kernel flips static keys and patches text with int3 (at
# boot: sched_clock; when perf starts: __schedule) far more than the test kernel, and multi-threaded
# TCG now and then runs a stale translation of a patched instruction on the other vCPU: "Oops:
# int3" in code no longer being patched (seen at boot in a planted-WARN run and at perf's start in
# a benchmark). Benchmarks are single-threaded inside and take their ratios within one boot.
tcg_thread=multi
if [ -n "$stock" ] || [ "$bench" = 1 ]; then
    tcg_thread=single
fi

console=$out/console.txt
set +e
timeout --foreground "${NVPEER_VM_TIMEOUT:-1500}" \
    "${qemu[@]}" -cpu max -smp "$cpus" -m "$memory" \
        -accel tcg,thread=$tcg_thread -nographic -no-reboot -nodefaults \
        -kernel "$kernel" -initrd "$initrd" -append "$cmdline" \
        -serial "file:$console" -monitor none \
        "${shares[@]}" \
        -device edu \
        </dev/null >"$out/qemu.txt" 2>&1
qemu_rc=$?
set -e

rc=$(cat "$out/rc" 2>/dev/null || echo "")
# The kernel's own log is judged; the console (which also carries the suite's output) only when
# the guest died before it could save that log.
if [ -n "$rc" ]; then
    reports=$("$here/scan-log.sh" "$out/dmesg.txt" "$out/kmemleak.txt" || true)
else
    reports=$("$here/scan-log.sh" "$console" || true)
fi

[ -f "$out/suite.log" ] && cat "$out/suite.log"
# One record per run for the end-of-suite table (tests/summary.py): what the suite counted
# (tally-*.json, per client), and the leaks and reports this run's kernel log showed.
if [ -n "${NVPEER_SUMMARY_DIR:-}" ]; then
    mkdir -p "$NVPEER_SUMMARY_DIR"
    leaks=$(cat "$out/kmemleak.txt" 2>/dev/null | grep -c 'unreferenced object' || true)
    if [ -n "$stock" ]; then kname="$stock (Debian)"
    else kname="$(cat "$kdir/include/config/kernel.release" 2>/dev/null || echo "$kdir") $arch"; fi
    python3 - "$out" "$suite" "${leaks:-0}" "$reports" "${rc:-crashed}" "${NVPEER_SUMMARY_EXPECTED:-}" "$*" "$kname" \
        > "$(mktemp "$NVPEER_SUMMARY_DIR/run-$suite.XXXXXX.json")" <<'PY'
import glob, json, os, sys
out, suite, leaks, reports, rc, expected, args, kernel = sys.argv[1:]
tallies = [json.load(open(p)) for p in sorted(glob.glob(os.path.join(out, "tally-*.json")))]
json.dump({"suite": suite, "args": args, "rc": rc, "leaks": int(leaks),
           "reports": [r for r in reports.split(",") if r], "expected": expected,
           "kernel": kernel, "tallies": tallies}, sys.stdout)
PY
fi
if [ -n "$reports" ]; then
    echo "vm: FAIL: the guest kernel reported: $reports (suite $suite, log $console)" >&2
    grep -hE -A3 "$("$here/scan-log.sh" --pattern)" "$out/dmesg.txt" "$out/kmemleak.txt" 2>/dev/null | head -n 40 >&2 \
        || grep -hE -A3 "$("$here/scan-log.sh" --pattern)" "$console" | head -n 40 >&2 || true
    exit 1
fi
if [ -z "$rc" ]; then
    echo "vm: FAIL: suite $suite did not finish (qemu exit $qemu_rc: guest crashed or timed out); log $console" >&2
    tail -n 30 "$console" >&2
    exit 1
fi
if [ "$rc" != 0 ]; then
    echo "vm: FAIL: suite $suite exited $rc (log $console)" >&2
    exit "$rc"
fi
echo "vm: suite $suite passed, no kernel reports (log $console)"
