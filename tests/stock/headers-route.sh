#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# headers-route.sh: nvpeer on a distribution kernel built without Rust, as an administrator builds
# it: the kernel's headers package alone (installed from the Debian archive the host uses) and a
# rustup toolchain; `make` picks our own runtime (kmod/runtime/) by itself.
#
#   headers-route.sh release SERIES          the newest Debian 12 kernel release of SERIES (6.1:
#                                            6.1.0-N-amd64; 6.12: 6.12.N+deb12-amd64) in the archive
#   headers-route.sh build RELEASE OUTDIR    installs linux-headers-RELEASE (when missing), builds
#                                            our module and the test modules (stand-ins, the
#                                            detector's plant) into OUTDIR from a copy of the
#                                            sources; fails on any objtool or modpost warning and
#                                            unless the module is on our runtime (check-ko.sh);
#                                            with --reference also NVIDIA's nvidia-peermem, into
#                                            OUTDIR/reference (for make bench)
#   headers-route.sh build-arm64 RELEASE OUTDIR
#                                            the same for Debian 12's arm64 kernel of that version
#                                            (RELEASE ends in -arm64), cross-built with Debian's
#                                            gcc-aarch64-linux-gnu: its headers package extracted
#                                            (not installed) beside the host's -common and kbuild
#                                            of the same version; our module only (no boot)
#   headers-route.sh vm RELEASE              Debian's own vmlinuz and modules of RELEASE for the VM
#                                            runner (tests/vm/run.sh --stock); prints their directory
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck disable=SC1091 # the project's environment, at a path known at run time
. "$repo/tests/setup/env.sh"
die() { echo "headers-route: $*" >&2; exit 1; }
log() { echo "headers-route: $*" >&2; }
[ $# -ge 2 ] || die "usage: headers-route.sh release SERIES | build RELEASE OUTDIR | vm RELEASE"
cmd=$1 arg=$2

# apt on the host's own configuration (Debian 12's suites, security included).
apt_updated() {
    [ -n "$(find /var/lib/apt/lists -maxdepth 1 -name '*Packages*' -mmin -720 2>/dev/null | head -n1)" ] \
        || apt-get update -qq >&2
}

case "$cmd" in
release)
    apt_updated
    case "$arg" in
    6.1)  pat='^linux-headers-(6\.1\.0-[0-9]+-amd64)$' ;;
    6.12) pat='^linux-headers-(6\.12\.[0-9]+\+deb12-amd64)$' ;;
    *) die "no Debian 12 series '$arg' (known: 6.1 6.12)" ;;
    esac
    r=$(apt-cache pkgnames linux-headers-"$arg" | sed -nE "s/$pat/\\1/p" | sort -V | tail -n1)
    [ -n "$r" ] || die "no linux-headers for Debian 12's $arg series in the archive"
    echo "$r" ;;
build)
    release=$arg out=${3:?usage: headers-route.sh build RELEASE OUTDIR [--reference]}
    reference=0
    [ "${4:-}" != --reference ] || reference=1
    kdir=/usr/src/linux-headers-$release
    if [ ! -f "$kdir/.config" ]; then
        apt_updated
        log "installing linux-headers-$release"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            "linux-headers-$release" >&2 || die "cannot install linux-headers-$release"
    fi
    t0=$SECONDS
    src=$repo/build/headers/$release
    rm -rf "$src"; mkdir -p "$src/tests/vm/plant" "$out"
    cp -r "$repo/include" "$src/"
    (cd "$repo" && tar -c --exclude=build --exclude='*.ko' --exclude='*.o' kmod tests/stand-ins) | tar -x -C "$src"
    cp "$repo/tests/vm/plant/Kbuild" "$repo/tests/vm/plant/nvpeer_plant.c" "$src/tests/vm/plant/"
    logf=$src/build.log
    : > "$logf"
    for s in tests/stand-ins/nv_p2p_sim tests/stand-ins/peer_core_sim tests/vm/plant; do
        make -C "$kdir" M="$src/$s" modules >>"$logf" 2>&1 || { tail -n 30 "$logf" >&2; die "building the test module $s for $release failed"; }
    done
    # Our module exactly as a user builds it: `make` in kmod/ (the foundation picked by itself),
    # with the exporters' Module.symvers where a host has MOFED's and NVIDIA's (OFA_DIR,
    # NVIDIA_SRC: here the stand-ins'): Debian's kernels version modules, and refuse a symbol the
    # module records no CRC for.
    mkdir -p "$src/ofa/default"
    cp "$src/tests/stand-ins/peer_core_sim/Module.symvers" "$src/ofa/default/"
    OFA_DIR="$src/ofa" NVIDIA_SRC="$src/tests/stand-ins/nv_p2p_sim" make -C "$src/kmod" KDIR="$kdir" >>"$logf" 2>&1 \
        || { tail -n 30 "$logf" >&2; die "building nvidia_peermem.ko for $release failed"; }
    # objtool and modpost print warnings as "warning:"/"WARNING:"; none is allowed.
    # (find-deps' own lines about MOFED's and NVIDIA's Module.symvers are not the build's.)
    if grep -iE '(^|[^a-z_])warning[: ]' "$logf" | grep -vE '^(Skipping BTF generation|find-deps: )' >&2; then
        die "the build for $release printed warnings (above; whole log: $logf)"
    fi
    grep -m1 '^find-deps: building on the' "$logf" >&2 || true
    cp "$src/kmod/nvidia_peermem.ko" "$src"/tests/stand-ins/nv_p2p_sim/*.ko "$src"/tests/stand-ins/peer_core_sim/*.ko \
        "$src/tests/vm/plant/nvpeer_plant.ko" "$out/"
    if [ $reference = 1 ]; then
        # NVIDIA's module against the stand-ins just built, as tests/reference/build.sh does for
        # the test kernel; staged outside the checkout (build/ is ignored), never committed.
        ref=$src/reference
        "$repo/tests/reference/stage.sh" "$ref" >/dev/null
        refsyms=()
        for s in nv_p2p_sim peer_core_sim; do
            # The module column is its path (absolute where M= is, as here): matched by name.
            awk -F'\t' -v m="$s" '{ n = $3; sub(/.*\//, "", n) } n == m' "$src/tests/stand-ins/$s/Module.symvers" > "$ref/$s.symvers"
            refsyms+=("$ref/$s.symvers")
        done
        make -C "$kdir" M="$ref" KBUILD_EXTRA_SYMBOLS="${refsyms[*]}" modules >>"$logf" 2>&1 \
            || { tail -n 30 "$logf" >&2; die "building NVIDIA's nvidia-peermem for $release failed"; }
        mkdir -p "$out/reference"
        cp "$ref/nvidia-peermem.ko" "$out/reference/"
    fi
    "$repo/tests/foundation/check-ko.sh" "$out/nvidia_peermem.ko" own >&2 || die "the module built for $release is not on our runtime"
    log "built for $release in $out ($((SECONDS - t0)) s; $(stat -c %s "$out/nvidia_peermem.ko") bytes)"
    echo "$out" ;;
build-arm64)
    release=$arg out=${3:?usage: headers-route.sh build-arm64 RELEASE OUTDIR}
    case "$release" in *-arm64) ;; *) die "build-arm64 takes an arm64 release (…-arm64), not $release" ;; esac
    command -v aarch64-linux-gnu-gcc >/dev/null || die "no aarch64-linux-gnu-gcc: tests/setup/deps.sh --cross arm64 installs it"
    deb=$(NVPEER_DEBIAN_ARCH=arm64 NVPEER_DEBIAN_SUITES="bookworm bookworm-security" \
        "$repo/tests/setup/debian-fetch.sh" "linux-headers-$release") || die "no linux-headers-$release in Debian 12's archive"
    # What it needs of the host: the architecture-independent -common headers and the host's own
    # kbuild tools (fixdep, modpost, objtool run here, not on arm64) of the same version.
    apt_updated
    deps=$(dpkg-deb -f "$deb" Depends | tr ',' '\n' | sed -nE 's/^ *(linux-headers-[^ ]*-common|linux-kbuild-[^ ]*) .*/\1/p' | tr '\n' ' ')
    # shellcheck disable=SC2086 # package names
    dpkg -s $deps >/dev/null 2>&1 || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $deps >&2 \
        || die "cannot install $deps"
    root=$NVPEER_CACHE/headers/$release
    if [ ! -f "$root/ready" ]; then
        rm -rf "$root"; mkdir -p "$root"
        dpkg-deb -x "$deb" "$root"
        kbuild=$(readlink "$root/usr/src/linux-headers-$release/scripts")   # ../../lib/linux-kbuild-V/scripts
        kbuild=${kbuild#../../lib/}; kbuild=${kbuild%/scripts}
        mkdir -p "$root/usr/lib"; ln -sfn "/usr/lib/$kbuild" "$root/usr/lib/$kbuild"
        touch "$root/ready"
    fi
    kdir=$root/usr/src/linux-headers-$release
    t0=$SECONDS
    src=$repo/build/headers/$release
    rm -rf "$src"; mkdir -p "$src" "$out"
    cp -r "$repo/include" "$src/"
    (cd "$repo" && tar -c --exclude=build --exclude='*.ko' --exclude='*.o' kmod) | tar -x -C "$src"
    logf=$src/build.log
    make -C "$src/kmod" KDIR="$kdir" ARCH=arm64 CROSS_COMPILE=aarch64-linux-gnu- >"$logf" 2>&1 \
        || { tail -n 30 "$logf" >&2; die "building nvidia_peermem.ko for $release failed"; }
    # (find-deps' own lines about MOFED's and NVIDIA's Module.symvers are not the build's.)
    if grep -iE '(^|[^a-z_])warning[: ]' "$logf" | grep -vE '^(Skipping BTF generation|find-deps: )' >&2; then
        die "the build for $release printed warnings (above; whole log: $logf)"
    fi
    grep -m1 '^find-deps: building on the' "$logf" >&2 || true
    cp "$src/kmod/nvidia_peermem.ko" "$out/"
    file "$out/nvidia_peermem.ko" | grep -q 'ARM aarch64' || die "$out/nvidia_peermem.ko is not an arm64 object"
    "$repo/tests/foundation/check-ko.sh" "$out/nvidia_peermem.ko" own >&2 || die "the module built for $release is not on our runtime"
    log "built for $release in $out ($((SECONDS - t0)) s; $(stat -c %s "$out/nvidia_peermem.ko") bytes)"
    echo "$out" ;;
vm)
    release=$arg
    apt_updated
    mkdir -p "$NVPEER_CACHE/debs"
    debs=("$NVPEER_CACHE/debs/linux-image-${release}_"*.deb)
    deb=${debs[0]}
    if [ ! -f "$deb" ]; then
        (cd "$NVPEER_CACHE/debs" && apt-get download -qq -o APT::Sandbox::User=root "linux-image-$release" >&2) \
            || die "linux-image-$release is not in the archive"
        debs=("$NVPEER_CACHE/debs/linux-image-${release}_"*.deb)
        deb=${debs[0]}
    fi
    "$repo/tests/stock/vm-kernel.sh" "$NVPEER_CACHE/stock/vm-$release-$(dpkg-deb -f "$deb" Version)" "$release" "$deb" ;;
*) die "unknown command $cmd (release, build, build-arm64, vm)" ;;
esac
