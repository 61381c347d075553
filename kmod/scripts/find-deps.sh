#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# find-deps.sh [--kver|--foundation] KDIR
#
# Build discovery for the module (used by kmod/Makefile and the top-level Makefile).
#  * Picks the Rust foundation (kmod/README.md, "Two foundations"): `kernel`, the kernel's own
#    `kernel` crate, where KDIR can host an out-of-tree Rust module: CONFIG_RUST=y, the Rust
#    artefacts under rust/ (libcore/libkernel .rmeta, the libmacros proc-macro),
#    scripts/target.json where the arch Makefile uses it, the rustc the tree was built with, and,
#    with CONFIG_MODVERSIONS=y, that the tree itself says Rust and MODVERSIONS work together (see
#    "MODVERSIONS" below); Ubuntu's layout is accepted: its headers package's rust/ is a symlink
#    into the separate linux-lib-rust-<release> package (see "Ubuntu's layout" below). Anywhere
#    else `own`, our runtime (kmod/runtime/), which needs the kernel's headers and configuration,
#    a kernel no older than $FLOOR below, rustc with its rust-src, bindgen, and a configuration
#    kmod/runtime/rust-flags.sh can honour. NVPEER_FOUNDATION=kernel|own forces one: a forced
#    `kernel` is refused where the tree cannot host it, naming why.
#    With --foundation, prints the foundation on stdout and why, in one line, on stderr.
#  * Finds MOFED's and NVIDIA's Module.symvers. Our references to their symbols are weak (resolved
#    at load), so both are optional; with MODVERSIONS their CRCs are wanted, so whatever is found
#    is printed on stdout (space-separated) for KBUILD_EXTRA_SYMBOLS.
# With --kver, prints the tree's kernel release instead (include/config/kernel.release).
# Any refusal is ONE line on stderr, "find-deps: ...", naming what is missing and how to get it;
# exit status 1. Informational lines go to stderr too (silenced by FIND_DEPS_QUIET=1).
#
# Environment: OFA_DIR (MOFED root, default /usr/src/ofa_kernel), NVIDIA_SRC (an NVIDIA driver
# source/build tree holding Module.symvers; default: /usr/src/nvidia-<version>, then the DKMS
# tree), RUSTC (default rustc). For tests: NVPEER_DKMS_TREE (/var/lib/dkms), NVPEER_USR_SRC
# (/usr/src), NVPEER_NVIDIA_VERSION (default: modinfo -F version nvidia).
set -uo pipefail

die() { echo "find-deps: $*" >&2; exit 1; }
# Informational lines are held back until every check passed, so a refusal stays one line.
notes=()
info() { notes+=("find-deps: $*"); }

# The oldest kernel the module builds for (kmod/README.md says why): 5.14, RHEL/Rocky 9's.
FLOOR_MAJOR=5 FLOOR_MINOR=14

mode=deps
case "${1:-}" in --kver) mode=kver; shift ;; --foundation) mode=foundation; shift ;; esac
[ $# -eq 1 ] || die "usage: find-deps.sh [--kver|--foundation] KDIR"
want_kver=0; [ $mode = kver ] && want_kver=1
kdir=$1

# --- the kernel build tree ---------------------------------------------------------------------
[ -d "$kdir" ] || die "no kernel build tree at $kdir: install the headers of that kernel (Debian: linux-headers-<release>) or pass KDIR=<kernel build tree>"
[ -f "$kdir/Makefile" ] || die "$kdir has no Makefile, it is not a kernel build tree: pass KDIR=<kernel build tree> (usually /lib/modules/<release>/build)"
[ -f "$kdir/.config" ] || die "$kdir has no .config: the tree is not configured; use the headers package of the running kernel or run 'make olddefconfig modules_prepare' there"
[ -f "$kdir/include/config/kernel.release" ] || die "$kdir has no include/config/kernel.release: the tree is not prepared; run 'make -C $kdir modules_prepare'"
kver=$(cat "$kdir/include/config/kernel.release")
if [ $want_kver = 1 ]; then echo "$kver"; exit 0; fi

cfg() { sed -n "s/^$1=//p" "$kdir/.config" | head -n1; }

forced=${NVPEER_FOUNDATION:-}
case "$forced" in ""|kernel|own) ;; *) die "NVPEER_FOUNDATION must be kernel or own, not '$forced'" ;; esac

# kernel_foundation: whether KDIR can host a module on the kernel's own `kernel` crate. Where it
# cannot, `why` says so; with the kernel foundation forced, that is the refusal.
kernel_foundation() {
    why=""
    if [ "$(cfg CONFIG_RUST)" != y ]; then
        why="$kdir ($kver) has no CONFIG_RUST=y: its kernel was built without Rust support (CONFIG_RUST=y; see Documentation/rust/quick-start.rst)"
        return 1
    fi
    check_rust_tree
}

# check_rust_tree: the kernel foundation's checks of a CONFIG_RUST=y tree; on failure `why` says
# what the tree lacks.
check_rust_tree() {
# --- MODVERSIONS: decided by what the tree says, not by a fixed rule ------------------------------
# Kconfig lets CONFIG_RUST=y and CONFIG_MODVERSIONS=y coexist only where the kernel made them work
# together, so the tree's own statement decides. Probes:
#  * CONFIG_GENDWARFKSYMS=y (.config): mainline's way (6.14+): CRCs of Rust exports come from DWARF
#    (scripts/gendwarfksyms) and long Rust names go to the extended __versions format
#    (CONFIG_EXTENDED_MODVERSIONS, selected by RUST).
#  * init/Kconfig, "config RUST" block (Ubuntu's headers carry every Kconfig file): its MODVERSIONS
#    dependency. "depends on !MODVERSIONS" (mainline 6.1..6.13) forbids the pair;
#    "!MODVERSIONS || GENDWARFKSYMS" (6.14+) requires GENDWARFKSYMS; no MODVERSIONS dependency at all
#    means the kernel lifted the restriction (Ubuntu since 6.2).
#  * include/linux/module.h, struct modversion_info: a "next" member means variable-length
#    __versions entries, so Rust's long symbol names fit (Ubuntu's SAUCE patch "modpost: support
#    arbitrary symbol length in modversion"); a fixed name[MODULE_NAME_LEN] without
#    CONFIG_EXTENDED_MODVERSIONS=y means modpost refuses them ("too long symbol").
modversions_ok() {
    [ "$(cfg CONFIG_GENDWARFKSYMS)" = y ] && { mv_note="CONFIG_GENDWARFKSYMS=y"; return 0; }
    local kc=$kdir/init/Kconfig mh=$kdir/include/linux/module.h rustdeps="" names=""
    [ -f "$kc" ] && rustdeps=$(awk '/^config RUST$/ {b=1; print "found"; next}
        b && /^(config|menuconfig|menu|endmenu|if|endif|choice|source|comment) / {exit}
        b && /^[[:space:]]*depends on/ && /MODVERSIONS/' "$kc")
    if [ -f "$mh" ]; then
        names=$(sed -n '/^struct modversion_info {/,/^}/p' "$mh")
        if printf '%s' "$names" | grep -qE '[[:space:]*]next;'; then names=long
        elif [ -n "$names" ] && [ "$(cfg CONFIG_EXTENDED_MODVERSIONS)" != y ]; then names=short
        else names=""; fi
    fi
    case "$rustdeps" in
    found)   # RUST has no MODVERSIONS dependency: the kernel made them work together
        [ "$names" = short ] && mv_why="its init/Kconfig lets RUST and MODVERSIONS coexist but $mh keeps fixed-length modversion names (and no CONFIG_EXTENDED_MODVERSIONS=y), so modpost refuses Rust's long symbol names" && return 1
        mv_note="$kc lets RUST and MODVERSIONS coexist${names:+ ($mh: variable-length modversion entries)}"; return 0 ;;
    found*GENDWARFKSYMS*)
        mv_why="its init/Kconfig makes RUST depend on '!MODVERSIONS || GENDWARFKSYMS' and CONFIG_GENDWARFKSYMS is not set, so this .config was not made by its Kconfig"; return 1 ;;
    found*)
        mv_why="its init/Kconfig makes RUST depend on !MODVERSIONS, so this .config was not made by its Kconfig"; return 1 ;;
    esac
    # No Kconfig statement: the module.h probe alone.
    [ "$names" = long ] && { mv_note="$mh: variable-length modversion entries (Rust's long names fit)"; return 0; }
    mv_why="nothing in the tree says Rust and MODVERSIONS work together (no init/Kconfig lifting the restriction, no variable-length modversion entries in include/linux/module.h)"
    return 1
}
if [ "$(cfg CONFIG_MODVERSIONS)" = y ]; then
    mv_note="" mv_why=""
    modversions_ok || { why="$kdir ($kver) has CONFIG_MODVERSIONS=y without CONFIG_GENDWARFKSYMS=y: Rust modules cannot be versioned there ($mv_why); use a kernel (>= 6.14) built with CONFIG_GENDWARFKSYMS=y or with CONFIG_MODVERSIONS unset"; return 1; }
    info "MODVERSIONS with Rust: $mv_note"
fi

# --- Ubuntu's layout -------------------------------------------------------------------------------
# Ubuntu moves the headers' rust/ into its own package, linux-lib-rust-<release>
# (/usr/src/<source>-lib-rust-<abi>-<flavour>/rust), and its packaging's debian/scripts/link-lib-rust
# leaves a relative symlink in the headers: rust -> ../<source>-lib-rust-<abi>-<flavour>/rust.
# Without that package the link dangles. On HWE kernels the link names the source package
# (../linux-hwe-6.17-lib-rust-<release>/rust) while the package installs linux-lib-rust-<release>.
# Kbuild reads $(objtree)/rust, so the link itself must resolve; files found elsewhere are named in
# the refusal with the command that links them.
librust_pkg=linux-lib-rust-$kver
phys=$(cd -P "$kdir" && pwd)
usr_src_dir=$(dirname "$phys")
librust_dir=""
if [ -L "$kdir/rust" ]; then
    want=$(readlink -m "$kdir/rust")
    if [ ! -d "$kdir/rust" ]; then
        if [ -d "$usr_src_dir/$librust_pkg/rust" ] && [ "$(basename "$want")" = rust ] \
            && [ "$(dirname "$(dirname "$want")")" = "$usr_src_dir" ]; then
            { why="$kdir ($kver) lacks its Rust artefacts: rust/ links to $want, which does not exist, though Ubuntu's $librust_pkg is installed at $usr_src_dir/$librust_pkg: give it the name the link expects (ln -s $librust_pkg $(dirname "$want"))"; return 1; }
        fi
        { why="$kdir ($kver) lacks its Rust artefacts: rust/ links to $want, which does not exist; Ubuntu ships them in a separate package: install it (apt install $librust_pkg)"; return 1; }
    fi
    # Only a link into a *-lib-rust-* directory is Ubuntu's; any other link is read like a dir.
    case "$(basename "$(dirname "$want")")" in *-lib-rust-*) librust_dir=$want ;; esac
elif [ ! -e "$kdir/rust" ] && [ -d "$usr_src_dir/$librust_pkg/rust" ]; then
    { why="$kdir ($kver) has no rust/, but Ubuntu's $librust_pkg is installed at $usr_src_dir/$librust_pkg: link it the way Ubuntu's headers do (ln -s ../$librust_pkg/rust $phys/rust)"; return 1; }
fi

# The artefacts an out-of-tree Rust module links against (built with the kernel's rust/ dir).
needed=(rust/libcore.rmeta rust/libkernel.rmeta rust/libmacros.so)
[ -d "$kdir/rust/pin-init" ] && needed+=(rust/libpin_init.rmeta rust/libpin_init_internal.so)
# The tree's own architecture (its arch Makefile decides about target.json: x86's uses it).
srcarch=x86
[ "$(cfg CONFIG_ARM64)" = y ] && srcarch=arm64
[ "$(cfg CONFIG_RISCV)" = y ] && srcarch=riscv
[ "$(cfg CONFIG_LOONGARCH)" = y ] && srcarch=loongarch
grep -qs 'scripts/target.json' "$kdir/arch/$srcarch/Makefile" "$kdir/Makefile" && needed+=(scripts/target.json)
missing=() missing_lib=()
for f in "${needed[@]}"; do
    [ -f "$kdir/$f" ] && continue
    missing+=("$f")
    [ -n "$librust_dir" ] && [ "${f#rust/}" != "$f" ] && missing_lib+=("$librust_dir/${f#rust/}")
done
if [ ${#missing_lib[@]} -gt 0 ]; then
    { why="$kdir ($kver) lacks the Rust artefacts ${missing[*]}: rust/ links to $librust_dir (Ubuntu's $librust_pkg), which has no ${missing_lib[*]}; reinstall that package (apt install --reinstall $librust_pkg)"; return 1; }
fi
if [ ${#missing[@]} -gt 0 ]; then
    { why="$kdir ($kver) lacks the Rust artefacts ${missing[*]}: its headers were packaged without them; build the tree itself ('make' in the kernel source, which builds rust/) or install a headers package that ships rust/*.rmeta and rust/*.so, then pass KDIR=<that tree>"; return 1; }
fi
[ -n "$librust_dir" ] && info "Rust artefacts: $kdir/rust -> $librust_dir"; :

# rustc must be the one the tree was built with (.rmeta files are tied to one compiler).
want_rustc=$(cfg CONFIG_RUSTC_VERSION_TEXT | tr -d '"')
if [ -n "$want_rustc" ]; then
    have_rustc=$("${RUSTC:-rustc}" --version 2>/dev/null)
    [ -n "$have_rustc" ] || { why="no rustc on PATH: $kdir ($kver) was built with '$want_rustc'; install that version (rustup toolchain install $(echo "$want_rustc" | cut -d' ' -f2)) and put it on PATH"; return 1; }
    [ "$have_rustc" = "$want_rustc" ] || { why="rustc on PATH is '$have_rustc' but $kdir ($kver) was built with '$want_rustc': install that version (rustup toolchain install $(echo "$want_rustc" | cut -d' ' -f2); rustup override set it in this directory) or set RUSTC=<path to it>"; return 1; }
fi

return 0
}

# own_foundation: what our runtime needs of KDIR and the toolchain; `why` says what is missing.
own_foundation() {
    why=""
    local version code major minor rustc=${RUSTC:-rustc} sysroot
    version=$kdir/include/generated/uapi/linux/version.h
    code=$(sed -n 's/^#define LINUX_VERSION_CODE \([0-9]*\)$/\1/p' "$version" 2>/dev/null)
    [ -n "$code" ] || { why="$kdir ($kver) has no include/generated/uapi/linux/version.h: the tree is not prepared; run 'make -C $kdir modules_prepare' or install its headers package"; return 1; }
    major=$((code >> 16)) minor=$(((code >> 8) & 255))
    if [ "$major" -lt $FLOOR_MAJOR ] || { [ "$major" -eq $FLOOR_MAJOR ] && [ "$minor" -lt $FLOOR_MINOR ]; }; then
        why="$kdir ($kver) is Linux $major.$minor; nvpeer's own runtime builds for Linux $FLOOR_MAJOR.$FLOOR_MINOR and newer (kmod/README.md says why)"
        return 1
    fi
    command -v "$rustc" >/dev/null || { why="no rustc on PATH: install a Rust toolchain (rustup: https://rustup.rs, or the distribution's rustc >= 1.85) or set RUSTC"; return 1; }
    sysroot=$("$rustc" --print sysroot 2>/dev/null)
    [ -f "$sysroot/lib/rustlib/src/rust/library/core/src/lib.rs" ] || { why="$rustc has no rust-src ($sysroot/lib/rustlib/src/rust/library/core): the module builds Rust's core for this kernel from it; install it (rustup component add rust-src)"; return 1; }
    command -v "${BINDGEN:-bindgen}" >/dev/null || { why="no bindgen on PATH: install it (cargo install bindgen-cli, or the distribution's bindgen) or set BINDGEN"; return 1; }
    local scratch rc=0
    scratch=$(mktemp -d)
    why=$(RUSTC=$rustc "$here/../runtime/rust-flags.sh" "$kdir" "$scratch" 2>&1 >/dev/null) || rc=1
    rm -rf "$scratch"
    [ $rc = 0 ] || { why=${why#nvpeer: }; return 1; }
    why=""
}

here=$(cd "$(dirname "$0")" && pwd)
case "$forced" in
kernel) kernel_foundation || die "$why"; foundation=kernel; reason="forced (NVPEER_FOUNDATION=kernel)" ;;
own)    own_foundation || die "$why"; foundation=own; reason="forced (NVPEER_FOUNDATION=own)" ;;
*)  if kernel_foundation; then foundation=kernel; reason="$kdir has Rust support and its artefacts match this rustc"
    else
        # The reason without the advice that would make the kernel's crate usable.
        why=${why#"$kdir ($kver) "}; why=${why%%: install*}; why=${why%%; *}
        if [ "$(cfg CONFIG_RUST)" = y ]; then reason="the kernel's own Rust cannot host it: $why"
        else reason="$kver was built without Rust"; fi
        notes=()
        own_foundation || die "$why"
        foundation=own
    fi ;;
esac
if [ $mode = foundation ]; then
    echo "find-deps: building on the $foundation foundation ($reason)" >&2
    echo "$foundation"
    exit 0
fi

modversions=$(cfg CONFIG_MODVERSIONS)
symvers=()

# --- MOFED (the peer-memory core): ib_register_peer_memory_client -------------------------------
case "$(cfg CONFIG_X86_64)$(cfg CONFIG_ARM64)$(cfg CONFIG_PPC64)" in
y) arch=$( [ "$(cfg CONFIG_X86_64)" = y ] && echo x86_64 || { [ "$(cfg CONFIG_ARM64)" = y ] && echo aarch64 || echo ppc64le; } ) ;;
*) arch=$(uname -m) ;;
esac
dkms_tree=${NVPEER_DKMS_TREE:-/var/lib/dkms}
ofa_root=${OFA_DIR:-/usr/src/ofa_kernel}
ofa_cands=("$ofa_root/$arch/$kver" "$ofa_root/$kver" "$ofa_root/default")
if [ -z "${OFA_DIR:-}" ]; then
    while IFS= read -r d; do ofa_cands+=("$d"); done \
        < <(ls -d "$dkms_tree"/mlnx-ofed-kernel/*/build 2>/dev/null | sort -rV)
fi
ofa=""
for d in "${ofa_cands[@]}"; do
    if [ -f "$d/Module.symvers" ]; then ofa=$d; break; fi
done
if [ -n "$ofa" ]; then
    grep -q '[[:space:]]ib_register_peer_memory_client[[:space:]]' "$ofa/Module.symvers" \
        || die "$ofa/Module.symvers (MOFED) does not export ib_register_peer_memory_client: that MOFED has no peer-memory core; install MLNX_OFED/DOCA-OFED >= 5.1 built for $kver, or point OFA_DIR=<dir> at one that does"
    symvers+=("$ofa/Module.symvers")
    hdr=""; [ -f "$ofa/include/rdma/peer_mem.h" ] && hdr=", headers $ofa/include"
    info "MOFED: $ofa/Module.symvers$hdr"
elif [ -n "${OFA_DIR:-}" ]; then
    die "OFA_DIR=$OFA_DIR has no Module.symvers in $arch/$kver, $kver or default: point OFA_DIR at the MOFED kernel tree built for $kver (e.g. /usr/src/ofa_kernel) or unset it"
elif [ "$modversions" = y ]; then
    if [ "$(cfg CONFIG_EXTENDED_MODVERSIONS)" = y ]; then
        info "warning: no MOFED Module.symvers (looked in ${ofa_cands[*]}); with CONFIG_MODVERSIONS=y the module records no CRC for ib_* and loads with 'no symbol version' warnings; set OFA_DIR=<MOFED kernel tree> to fix"
    else
        info "warning: no MOFED Module.symvers (looked in ${ofa_cands[*]}); with CONFIG_MODVERSIONS=y the module records no CRC for ib_*, which this kernel's loader refuses ('no symbol version'): install MLNX_OFED/DOCA-OFED first or set OFA_DIR=<MOFED kernel tree>, then rebuild"
    fi
else
    info "MOFED: no Module.symvers found (fine: references resolved at load; set OFA_DIR to use one)"
fi

# --- NVIDIA (nvidia.ko): nvidia_p2p_* ------------------------------------------------------------
usr_src=${NVPEER_USR_SRC:-/usr/src}
nv_cands=()
if [ -n "${NVIDIA_SRC:-}" ]; then
    nv_cands=("$NVIDIA_SRC" "$NVIDIA_SRC/kernel-open" "$NVIDIA_SRC/kernel")
else
    nv_ver=${NVPEER_NVIDIA_VERSION-$(modinfo -k "$kver" -F version nvidia 2>/dev/null)}
    [ -n "$nv_ver" ] && nv_cands+=("$usr_src/nvidia-$nv_ver" "$dkms_tree/nvidia/$nv_ver/build")
    while IFS= read -r d; do nv_cands+=("$d"); done \
        < <(ls -d "$usr_src"/nvidia-[0-9]* "$dkms_tree"/nvidia/*/build 2>/dev/null | sort -t- -k2 -rV)
fi
nv=""
for d in "${nv_cands[@]}"; do
    if [ -f "$d/Module.symvers" ] && grep -q '[[:space:]]nvidia_p2p_get_pages[[:space:]]' "$d/Module.symvers"; then
        nv=$d; break
    fi
done
if [ -n "$nv" ]; then
    symvers+=("$nv/Module.symvers")
    info "NVIDIA: $nv/Module.symvers"
elif [ -n "${NVIDIA_SRC:-}" ]; then
    die "NVIDIA_SRC=$NVIDIA_SRC has no Module.symvers exporting nvidia_p2p_get_pages (looked in ., kernel-open, kernel): build the driver there first ('make modules') or unset NVIDIA_SRC"
elif [ "$modversions" = y ]; then
    info "warning: no NVIDIA Module.symvers exporting nvidia_p2p_* (looked in $usr_src/nvidia-*, $dkms_tree/nvidia/*/build); with CONFIG_MODVERSIONS=y the module records no CRC for them$( [ "$(cfg CONFIG_EXTENDED_MODVERSIONS)" = y ] || echo ", which this kernel's loader refuses ('no symbol version')"); set NVIDIA_SRC=<built driver tree>, then rebuild"
else
    info "NVIDIA: no Module.symvers found (fine: references resolved at load; set NVIDIA_SRC to use one)"
fi

[ "${FIND_DEPS_QUIET:-0}" = 1 ] || printf '%s\n' "${notes[@]}" >&2
echo "${symvers[*]}"
