#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# stock-kbuild.sh: builds nvpeer for a stock Debian kernel whose headers package ships no Rust
# build artefacts (rust/*.rmeta, libmacros.so, ...), e.g. 7.2.12+deb13-amd64 (trixie-backports).
#
#   stock-kbuild.sh [--config FILE] check   RELEASE      derive + check the toolchain only (fast)
#   stock-kbuild.sh [--config FILE] prepare RELEASE      prepare the build tree (cached); prints it
#   stock-kbuild.sh dir RELEASE                          prints its cache directory
#   stock-kbuild.sh build RELEASE [OUTDIR] [--stand-ins] [--reference]
#                                                        our module (and the test modules:
#                                                        stand-ins, the detector plant; NVIDIA's
#                                                        nvidia-peermem for the benchmark, in
#                                                        OUTDIR/reference) into
#                                                        OUTDIR (default build/stock/RELEASE);
#                                                        MODULE_NAME=nv_peer_mem for the legacy name
#   stock-kbuild.sh build-headers RELEASE OUTDIR         our module on our own runtime (and the
#                                                        test modules) from the linux-headers
#                                                        package alone, in the chroot (a trixie
#                                                        userland), as on a trixie host; fails
#                                                        on any warning
#   stock-kbuild.sh sign  RELEASE KEY CERT KO...         sign modules with that tree's sign-file
#   stock-kbuild.sh vm    RELEASE                        Debian's own vmlinuz + modules for QEMU;
#                                                        prints the directory holding them
#
# How: Rust symbol names carry a crate hash that depends on rustc's full version string, so a
# module links only when built by the very rustc the kernel was built with: for Debian kernels
# Debian's own rustc ("... (built from a source tarball)"). The toolchain is read from the
# headers package's .config (CONFIG_RUSTC_VERSION_TEXT, CONFIG_BINDGEN_VERSION_TEXT,
# CONFIG_CC_VERSION_TEXT, CONFIG_PAHOLE_VERSION) and must be found, exactly, in the Debian
# archive of the kernel's release (deb13: trixie); anything else is refused with one line
# ("stock-kbuild: cannot match ..."). Then, once: a debootstrap chroot with that toolchain, the
# matching linux-source extracted in it, the headers' .config applied (olddefconfig must leave it
# byte-identical), `make modules_prepare` (builds every Rust library a module needs), the
# headers' Module.symvers and vmlinux (BTF) copied in. Cached under
# $NVPEER_CACHE/stock/<key>, key = release + package versions + this script.
# Packages come from the Debian mirror URI already configured in /etc/apt (tests/setup/
# debian-fetch.sh); no host name is written anywhere. Never uses KBUILD_MODPOST_WARN.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
. "$repo/tests/setup/env.sh"
fetch=$repo/tests/setup/debian-fetch.sh
die() { echo "stock-kbuild: $*" >&2; exit 1; }
log() { echo "stock-kbuild: $*" >&2; }

config_override=""
if [ "${1:-}" = --config ]; then config_override=$(realpath "$2"); shift 2; fi
[ $# -ge 2 ] || die "usage: stock-kbuild.sh [--config FILE] check|prepare|build|build-headers|sign|vm RELEASE [...]"
cmd=$1 release=$2; shift 2

# --- the release: <upstream>+deb<N>-<flavour> ---------------------------------------------------
[[ $release =~ ^([0-9]+\.[0-9]+)\.[0-9]+\+deb([0-9]+)-([a-z0-9-]+)$ ]] \
    || die "cannot match $release: expected a Debian kernel release like 7.2.12+deb13-amd64 (see README, 'Stock distribution kernels')"
series=${BASH_REMATCH[1]} debrel=${BASH_REMATCH[2]}
case "$debrel" in
13) suite=trixie ;;
*) die "cannot match $release: only Debian 13 (trixie, +deb13-) kernels are supported, not +deb$debrel" ;;
esac

state=$NVPEER_CACHE/apt
APTQ=(-o "Dir::Etc::sourcelist=$state/sources.list" -o "Dir::Etc::sourceparts=$state/empty"
      -o "Dir::State::lists=$state/lists" -o "Dir::Cache=$state/cache")
# versions SUITE PKG: the versions of PKG in exactly that suite of the private apt state.
versions() { apt-cache "${APTQ[@]}" madison "$2" 2>/dev/null \
    | awk -F'|' -v s=" $1/" '$3 ~ s {gsub(/ /,"",$2); print $2}'; }
# mirror: the Debian mirror URI of the private apt state (read from /etc/apt by debian-fetch.sh).
mirror() { awk '$1=="deb" {for(i=2;i<=NF;i++) if ($i ~ /:\/\//) {print $i; exit}}' "$state/sources.list"; }

hdeb=$("$fetch" "linux-headers-$release" 2>/dev/null) \
    || die "cannot match $release: no linux-headers-$release in the Debian archive (trixie, trixie-backports, sid)"
hver=$(dpkg-deb -f "$hdeb" Version)
hdir=/usr/src/linux-headers-$release
work=$NVPEER_CACHE/stock/headers-$release-$hver
if [ ! -f "$work/.config" ]; then
    rm -rf "$work.tmp"; mkdir -p "$work.tmp"
    dpkg-deb --fsys-tarfile "$hdeb" | tar -x -C "$work.tmp" --strip-components=4 \
        ".$hdir/.config" ".$hdir/Module.symvers" ".$hdir/vmlinux"
    rm -rf "$work"; mv "$work.tmp" "$work"
fi
config=${config_override:-$work/.config}
cfg() { sed -n "s/^$1=//p" "$config" | head -n1 | tr -d '"'; }

# --- the toolchain the kernel was built with, and its exact Debian packages --------------------
rustc_text=$(cfg CONFIG_RUSTC_VERSION_TEXT)
bindgen_text=$(cfg CONFIG_BINDGEN_VERSION_TEXT)
cc_text=$(cfg CONFIG_CC_VERSION_TEXT)
pahole=$(cfg CONFIG_PAHOLE_VERSION)
[ "$(cfg CONFIG_RUST)" = y ] && [ -n "$rustc_text" ] || die "cannot match $release: its config has no CONFIG_RUST=y (no Rust support; nvpeer is a Rust module)"
case "$rustc_text" in
"rustc "*" (built from a source tarball)") ;;
*) die "cannot match $release: built with '$rustc_text', not a Debian rustc build ('... (built from a source tarball)'); only the distribution's own rustc reproduces its symbol names" ;;
esac
rustc_up=$(echo "$rustc_text" | cut -d' ' -f2)
rustc_deb=$(versions "$suite" rustc | grep -E "^([0-9]+:)?${rustc_up//./\\.}\+" | head -n1 || true)
[ -n "$rustc_deb" ] || die "cannot match $release: it was built with '$rustc_text' but Debian $suite has rustc $(versions "$suite" rustc | tr '\n' ' ')(that exact Debian rustc build must still be in the archive; faking the version string is not done)"
rustsrc_deb=$(versions "$suite" rust-src | grep -Fx "$rustc_deb" || true)
[ -n "$rustsrc_deb" ] || die "cannot match $release: rust-src $rustc_deb is not in Debian $suite"
bindgen_up=${bindgen_text#bindgen }
bindgen_deb=$(versions "$suite" bindgen | grep -E "^([0-9]+:)?${bindgen_up//./\\.}-" | head -n1 || true)
[ -n "$bindgen_deb" ] || die "cannot match $release: it was built with '$bindgen_text' but Debian $suite has bindgen $(versions "$suite" bindgen | tr '\n' ' ')"
[[ $cc_text =~ ^x86_64-linux-gnu-gcc-([0-9]+)\ \(Debian\ ([^\)]+)\) ]] \
    || die "cannot match $release: compiler '$cc_text' is not a Debian x86_64-linux-gnu-gcc-N"
gcc_pkg=gcc-${BASH_REMATCH[1]} gcc_deb=${BASH_REMATCH[2]}
versions "$suite" "$gcc_pkg" | grep -qFx "$gcc_deb" \
    || die "cannot match $release: it was built with $gcc_pkg $gcc_deb but Debian $suite has $gcc_pkg $(versions "$suite" "$gcc_pkg" | tr '\n' ' ')"
pahole_deb=$(versions "$suite" dwarves | grep -E "^$((pahole / 100))\.$((pahole % 100))-" | head -n1 || true)
[ -n "$pahole_deb" ] || die "cannot match $release: it was built with pahole $pahole but Debian $suite has dwarves $(versions "$suite" dwarves | tr '\n' ' ')"
log "$release (headers $hver): rustc $rustc_deb, bindgen $bindgen_deb, $gcc_pkg $gcc_deb, dwarves $pahole_deb from Debian $suite"
if [ "$cmd" = check ]; then echo "ok"; exit 0; fi
[ -z "$config_override" ] || die "--config is for 'check' only"

srcdeb=$("$fetch" "linux-source-$series" "$hver" 2>/dev/null) \
    || die "cannot match $release: linux-source-$series $hver (the source of that kernel) is gone from the archive"

tree=/usr/src/linux-source-$series
# Debian trixie's bindgen and kernel build use libclang 19.
llvm=19

# in_root CMD...: runs CMD in the chroot, with /proc and /dev in a private mount namespace (gone
# when it exits) and a clean environment.
in_root() {
    unshare -m -- bash -c 'set -e; r=$1; shift
        mount -t proc proc "$r/proc"; mount --rbind /dev "$r/dev"
        exec chroot "$r" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
            LIBCLANG_PATH=/usr/lib/llvm-'"$llvm"'/lib "$@"' _ "$root" "$@"
}
MK=(make -C "$tree" CC="x86_64-linux-gnu-$gcc_pkg" HOSTCC="x86_64-linux-gnu-$gcc_pkg" KERNELRELEASE="$release")

prepare() {
    if [ -f "$dir/prepared" ]; then log "cached: $dir"; return 0; fi
    command -v debootstrap >/dev/null || die "debootstrap is not installed (tests/setup/deps.sh installs it)"
    local t0=$SECONDS uri
    uri=$(mirror) || die "no Debian mirror URI in $state/sources.list"
    rm -rf "$dir"; mkdir -p "$dir"
    log "debootstrap $suite into $dir/root (minbase + toolchain; about 2 minutes)"
    debootstrap --variant=minbase --keyring=/usr/share/keyrings/debian-archive-keyring.gpg \
        --include="rustc,rust-src,bindgen,libclang-$llvm-dev,clang-$llvm,$gcc_pkg,make,flex,bison,bc,libelf-dev,libssl-dev,openssl,python3,cpio,kmod,xz-utils,dwarves,libc6-dev" \
        "$suite" "$root" "$uri" > "$dir/debootstrap.log" 2>&1 \
        || { tail -n 20 "$dir/debootstrap.log" >&2; die "debootstrap failed (log $dir/debootstrap.log)"; }
    log "debootstrap done ($((SECONDS - t0)) s)"
    # The chroot must hold exactly the packages the key names.
    local p want have
    for p in "rustc $rustc_deb" "rust-src $rustsrc_deb" "bindgen $bindgen_deb" "$gcc_pkg $gcc_deb" "dwarves $pahole_deb"; do
        want=${p#* }; have=$(chroot "$root" dpkg-query -W -f='${Version}' "${p%% *}")
        [ "$have" = "$want" ] || die "cannot match $release: the chroot got ${p%% *} $have, not $want"
    done
    have=$(chroot "$root" rustc --version)
    [ "$have" = "$rustc_text" ] || die "cannot match $release: Debian rustc $rustc_deb says '$have', the kernel was built with '$rustc_text'"

    t0=$SECONDS
    log "linux-source-$series $hver into $root$tree"
    dpkg-deb --fsys-tarfile "$srcdeb" | tar -xO --wildcards '*/linux-source-*.tar.xz' | tar -xJ -C "$root/usr/src"
    cp "$config" "$root$tree/.config"
    in_root "${MK[@]}" -s olddefconfig
    cmp -s "$config" "$root$tree/.config" || {
        diff "$config" "$root$tree/.config" | head -n 20 >&2
        die "cannot match $release: olddefconfig changed its .config with this toolchain (diff above)"; }
    log "modules_prepare (about 3 minutes on 2 cores)"
    in_root "${MK[@]}" -s -j"$(nproc)" modules_prepare > "$dir/prepare.log" 2>&1 \
        || { tail -n 30 "$dir/prepare.log" >&2; die "modules_prepare failed (log $dir/prepare.log)"; }
    cmp -s "$config" "$root$tree/.config" || die "cannot match $release: modules_prepare changed .config"
    [ "$(cat "$root$tree/include/config/kernel.release")" = "$release" ] || die "kernel.release is not $release"
    cp "$work/Module.symvers" "$work/vmlinux" "$root$tree/"
    for f in rust/libkernel.rmeta rust/libmacros.so scripts/sign-file; do
        [ -e "$root$tree/$f" ] || die "modules_prepare did not produce $f"
    done
    echo "$release $hver rustc $rustc_deb bindgen $bindgen_deb $gcc_pkg $gcc_deb dwarves $pahole_deb" > "$dir/toolchain"
    touch "$dir/prepared"
    log "prepared $root$tree ($((SECONDS - t0)) s)"
}

# The cache key: the release, every package version, the config and the preparation recipe itself
# (the code of prepare and in_root, not the whole script: editing the build or VM parts keeps the
# prepared tree).
key=$( { echo "$release $hver $suite $rustc_deb $bindgen_deb $gcc_pkg $gcc_deb $pahole_deb $llvm ${MK[*]}"
         sha256sum "$config" | cut -d' ' -f1; declare -f prepare in_root; } | sha256sum | cut -c1-16)
dir=$NVPEER_CACHE/stock/$key
root=$dir/root

case "$cmd" in
dir)
    echo "$dir" ;;
prepare)
    prepare; echo "$root$tree" ;;
build)
    out=$repo/build/stock/$release standins=0 reference=0
    for a; do
        case "$a" in --stand-ins) standins=1 ;; --reference) standins=1 reference=1 ;; *) out=$a ;; esac
    done
    prepare
    t0=$SECONDS
    # A fresh copy of the sources in the chroot: the checkout stays untouched (no build files).
    rm -rf "$root/nvpeer"; mkdir -p "$root/nvpeer/tests"
    cp -r "$repo/include" "$root/nvpeer/"
    (cd "$repo" && tar -c --exclude=build --exclude='*.ko' --exclude='*.o' kmod) | tar -x -C "$root/nvpeer"
    if [ $standins = 1 ]; then
        cp -r "$repo/tests/stand-ins" "$root/nvpeer/tests/"
        mkdir -p "$root/nvpeer/tests/vm/plant"
        cp "$repo/tests/vm/plant/Kbuild" "$repo/tests/vm/plant/nvpeer_plant.c" "$root/nvpeer/tests/vm/plant/"
    fi
    args=(CC="x86_64-linux-gnu-$gcc_pkg" HOSTCC="x86_64-linux-gnu-$gcc_pkg" LIBCLANG_PATH=/usr/lib/llvm-$llvm/lib)
    name=${MODULE_NAME:-nvidia_peermem}
    in_root make -s -C /nvpeer/kmod KDIR="$tree" MODULE_NAME="$name" "${args[@]}" \
        || die "building $name.ko for $release failed"
    if [ $standins = 1 ]; then
        for s in stand-ins/nv_p2p_sim stand-ins/peer_core_sim vm/plant; do
            in_root make -s -C "$tree" M=/nvpeer/tests/$s "${args[@]}" modules \
                || die "building the test module $s for $release failed"
        done
    fi
    if [ $reference = 1 ]; then
        # NVIDIA's module, staged in the chroot (never in the checkout), linked against the
        # stand-ins just built there, as tests/reference/build.sh does for the test kernel.
        "$repo/tests/reference/stage.sh" "$root/nvpeer/reference" >/dev/null
        refsyms=()
        for s in nv_p2p_sim peer_core_sim; do
            awk -F'\t' -v m="$s" '$3 == m' "$root/nvpeer/tests/stand-ins/$s/Module.symvers" \
                > "$root/nvpeer/reference/$s.symvers"
            refsyms+=("/nvpeer/reference/$s.symvers")
        done
        in_root make -s -C "$tree" M=/nvpeer/reference KBUILD_EXTRA_SYMBOLS="${refsyms[*]}" \
            "${args[@]}" modules || die "building NVIDIA's nvidia-peermem for $release failed"
    fi
    mkdir -p "$out"
    cp "$root/nvpeer/kmod/$name.ko" "$out/"
    [ $standins = 0 ] || cp "$root/nvpeer/tests/stand-ins/nv_p2p_sim/nv_p2p_sim.ko" \
        "$root/nvpeer/tests/stand-ins/peer_core_sim/peer_core_sim.ko" \
        "$root/nvpeer/tests/stand-ins/peer_core_sim/peer_core_sim_5x.ko" \
        "$root/nvpeer/tests/stand-ins/peer_core_sim/peer_core_sim_4x.ko" \
        "$root/nvpeer/tests/vm/plant/nvpeer_plant.ko" "$out/"
    vm=$(modinfo -F vermagic "$out/$name.ko")
    if [ $reference = 1 ]; then
        mkdir -p "$out/reference"
        cp "$root/nvpeer/reference/nvidia-peermem.ko" "$out/reference/"
    fi
    built="$name.ko"; [ $standins = 0 ] || built="$built nv_p2p_sim.ko peer_core_sim.ko peer_core_sim_5x.ko peer_core_sim_4x.ko nvpeer_plant.ko"
    [ $reference = 0 ] || built="$built reference/nvidia-peermem.ko"
    log "built $built for $release in $out ($((SECONDS - t0)) s; vermagic $vm)"
    echo "$out" ;;
build-headers)
    # Issue 44's route on a Debian 13 kernel: the headers package alone and our own runtime, as an
    # administrator on a trixie host builds it (`make KDIR=/usr/src/linux-headers-<release>`: no
    # kernel source, no modules_prepare, any rustc with rust-src). The chroot stands in for that
    # host: trixie's kbuild tools need its glibc and the kernel's flags its gcc-14, neither of
    # which this bookworm machine has; the kernel source prepared there is not used.
    out=${1:?usage: stock-kbuild.sh build-headers RELEASE OUTDIR}
    prepare
    t0=$SECONDS
    stamp=$root/nvpeer-headers-$release.unpacked
    if [ ! -f "$stamp" ]; then
        debs=("$hdeb")
        for dep in $(dpkg-deb -f "$hdeb" Depends | tr ',' '\n' | sed -nE 's/^ *(linux-headers-[^ ]*-common|linux-kbuild-[^ ]*).*/\1/p'); do
            debs+=("$("$fetch" "$dep" "$hver" 2>/dev/null)") || die "no $dep $hver in the archive"
        done
        [ ${#debs[@]} -eq 3 ] || die "linux-headers-$release does not depend on one -common and one linux-kbuild package: $(dpkg-deb -f "$hdeb" Depends)"
        # Unpacked as apt would install them (their scripts only run depmod and link headers).
        for d in "${debs[@]}"; do dpkg-deb -x "$d" "$root"; done
        touch "$stamp"
        log "linux-headers-$release and its -common and kbuild unpacked into the chroot ($((SECONDS - t0)) s)"
    fi
    t1=$SECONDS
    rm -rf "$root/nvpeer-headers"; mkdir -p "$root/nvpeer-headers/tests/vm/plant"
    cp -r "$repo/include" "$root/nvpeer-headers/"
    (cd "$repo" && tar -c --exclude=build --exclude='*.ko' --exclude='*.o' kmod tests/stand-ins) \
        | tar -x -C "$root/nvpeer-headers"
    cp "$repo/tests/vm/plant/Kbuild" "$repo/tests/vm/plant/nvpeer_plant.c" "$root/nvpeer-headers/tests/vm/plant/"
    logf=$root/nvpeer-headers/build.log
    : > "$logf"
    args=(CC="x86_64-linux-gnu-$gcc_pkg" HOSTCC="x86_64-linux-gnu-$gcc_pkg" LIBCLANG_PATH=/usr/lib/llvm-$llvm/lib)
    # The test modules from the same headers; their Module.symvers stand for MOFED's and
    # NVIDIA's (OFA_DIR, NVIDIA_SRC), as a host's would: the kernel versions modules.
    for s in tests/stand-ins/nv_p2p_sim tests/stand-ins/peer_core_sim tests/vm/plant; do
        in_root make -C "$hdir" M="/nvpeer-headers/$s" "${args[@]}" modules >> "$logf" 2>&1 \
            || { tail -n 30 "$logf" >&2; die "building the test module $s from linux-headers-$release failed"; }
    done
    mkdir -p "$root/nvpeer-headers/ofa/default"
    cp "$root/nvpeer-headers/tests/stand-ins/peer_core_sim/Module.symvers" "$root/nvpeer-headers/ofa/default/"
    in_root make -C /nvpeer-headers/kmod KDIR="$hdir" OFA_DIR=/nvpeer-headers/ofa \
        NVIDIA_SRC=/nvpeer-headers/tests/stand-ins/nv_p2p_sim "${args[@]}" >> "$logf" 2>&1 \
        || { tail -n 30 "$logf" >&2; die "building nvidia_peermem.ko from linux-headers-$release failed (log $logf)"; }
    # objtool and modpost print warnings as "warning:"/"WARNING:"; none is allowed (find-deps'
    # own lines about MOFED's and NVIDIA's Module.symvers are not the build's).
    if grep -iE '(^|[^a-z_])warning[: ]' "$logf" | grep -vE '^(Skipping BTF generation|find-deps: )' >&2; then
        die "the build from linux-headers-$release printed warnings (above; whole log: $logf)"
    fi
    grep -m1 '^find-deps: building on the' "$logf" >&2 || true
    mkdir -p "$out"
    cp "$root/nvpeer-headers/kmod/nvidia_peermem.ko" "$root"/nvpeer-headers/tests/stand-ins/*/*.ko \
        "$root/nvpeer-headers/tests/vm/plant/nvpeer_plant.ko" "$out/"
    "$repo/tests/foundation/check-ko.sh" "$out/nvidia_peermem.ko" own >&2 \
        || die "the module built from linux-headers-$release is not on our runtime"
    log "built from linux-headers-$release in $out ($((SECONDS - t1)) s; $(stat -c %s "$out/nvidia_peermem.ko") bytes)"
    echo "$out" ;;
sign)
    [ $# -ge 3 ] || die "usage: stock-kbuild.sh sign RELEASE KEY CERT KO..."
    prepare
    key_f=$(realpath "$1") cert_f=$(realpath "$2"); shift 2
    hash=$(cfg CONFIG_MODULE_SIG_HASH); hash=${hash:-sha256}
    tmp=$root/nvpeer-sign; rm -rf "$tmp"; mkdir -p "$tmp"
    cp "$key_f" "$tmp/key"; cp "$cert_f" "$tmp/cert"
    for ko; do
        cp "$ko" "$tmp/m.ko"
        in_root "$tree/scripts/sign-file" "$hash" /nvpeer-sign/key /nvpeer-sign/cert /nvpeer-sign/m.ko \
            || { rm -rf "$tmp"; die "sign-file failed for $ko"; }
        cp "$tmp/m.ko" "$ko"; log "signed $ko ($hash)"
    done
    rm -rf "$tmp" ;;
vm)
    # Debian's own kernel image and modules (linux-image-* is a metapackage), laid out for the VM.
    bdeb=$("$fetch" "linux-binary-$release" "$hver" 2>/dev/null) || die "linux-binary-$release $hver is not in the archive"
    mdeb=$("$fetch" "linux-modules-$release" "$hver" 2>/dev/null) || die "linux-modules-$release $hver is not in the archive"
    "$repo/tests/stock/vm-kernel.sh" "$NVPEER_CACHE/stock/vm-$release-$hver" "$release" "$bdeb" "$mdeb" ;;
*) die "unknown command $cmd (check, dir, prepare, build, build-headers, sign, vm)" ;;
esac
