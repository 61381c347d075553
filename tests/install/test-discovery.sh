#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Host-side, fast: kmod/scripts/find-deps.sh against fake kernel, MOFED and NVIDIA trees under a temp dir.
# Each refusal must be exactly one "find-deps: ..." line naming what is missing; each discovery
# branch must print the Module.symvers it found.
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
fd=$repo/kmod/scripts/find-deps.sh
t=$(mktemp -d); trap 'rm -rf "$t"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok    $*"; }
bad() { fail=$((fail + 1)); echo "FAIL  $*"; }

# A fake rustc matching the fake tree.
mkdir -p "$t/bin"; printf '#!/bin/sh\necho "rustc 9.9.9 (fake)"\n' > "$t/bin/rustc"; chmod +x "$t/bin/rustc"
# The kernel foundation's discovery and refusals (the Rust-tree checks) unless a case says otherwise;
# the own foundation's choice and refusals are at the end.
export RUSTC=$t/bin/rustc NVPEER_DKMS_TREE=$t/dkms NVPEER_USR_SRC=$t/src NVPEER_NVIDIA_VERSION="" NVPEER_FOUNDATION=kernel
unset OFA_DIR NVIDIA_SRC FIND_DEPS_QUIET
# mkkdir DIR: a complete fake Rust-enabled build tree for 9.9.9-test.
mkkdir() {
    rm -rf "$1"; mkdir -p "$1/rust/pin-init" "$1/scripts" "$1/include/config" "$1/arch/x86"
    echo 'all:' > "$1/Makefile"
    echo 'KBUILD_RUSTFLAGS += --target=$(objtree)/scripts/target.json' > "$1/arch/x86/Makefile"
    printf 'CONFIG_X86_64=y\nCONFIG_RUST=y\nCONFIG_RUSTC_VERSION_TEXT="rustc 9.9.9 (fake)"\n' > "$1/.config"
    echo 9.9.9-test > "$1/include/config/kernel.release"
    touch "$1"/rust/{libcore.rmeta,libkernel.rmeta,libmacros.so,libpin_init.rmeta,libpin_init_internal.so} "$1/scripts/target.json"
}
mofed_symvers() { mkdir -p "$1"; printf '0x12345678\tib_register_peer_memory_client\tvmlinux\tEXPORT_SYMBOL\t\n' > "$1/Module.symvers"; }
nv_symvers() { mkdir -p "$1"; printf '0x0\tnvidia_p2p_get_pages\tnvidia\tEXPORT_SYMBOL_GPL\t\n' > "$1/Module.symvers"; }

# refuses DESC PATTERN [ENV=VAL...] -- KDIR: exit 1, exactly one stderr line, matching PATTERN.
refuses() {
    local desc=$1 pat=$2; shift 2
    local envs=(); while [ "$1" != -- ]; do envs+=("$1"); shift; done; shift
    env "${envs[@]}" "$fd" "$@" >"$t/out" 2>"$t/err"; local rc=$?
    local n; n=$(wc -l < "$t/err")
    if [ $rc = 1 ] && [ "$n" = 1 ] && grep -qE "^find-deps: .*$pat" "$t/err" && [ ! -s "$t/out" ]; then
        ok "$desc: $(cat "$t/err")"
    else bad "$desc (rc $rc, $n lines):"; sed 's/^/      /' "$t/err"; fi
}
# finds DESC EXPECTED-STDOUT [ENV=VAL...] -- KDIR
finds() {
    local desc=$1 want=$2; shift 2
    local envs=(); while [ "$1" != -- ]; do envs+=("$1"); shift; done; shift
    local got; got=$(env "${envs[@]}" "$fd" "$@" 2>"$t/err"); local rc=$?
    if [ $rc = 0 ] && [ "$got" = "$want" ]; then ok "$desc"; else bad "$desc: rc $rc, got '$got', want '$want'"; sed 's/^/      /' "$t/err"; fi
}

k=$t/kdir
refuses "no tree" "no kernel build tree at $t/none.*linux-headers" X=1 -- "$t/none"
mkdir -p "$t/empty"; refuses "not a build tree" "no Makefile.*KDIR=" X=1 -- "$t/empty"
mkkdir "$k"; rm "$k/.config"; refuses "unconfigured tree" "no .config" X=1 -- "$k"
mkkdir "$k"; rm "$k/include/config/kernel.release"; refuses "unprepared tree" "modules_prepare" X=1 -- "$k"
mkkdir "$k"; sed -i 's/^CONFIG_RUST=y/# CONFIG_RUST is not set/' "$k/.config"; refuses "no CONFIG_RUST" "no CONFIG_RUST=y.*Rust support" X=1 -- "$k"
mkkdir "$k"; echo CONFIG_MODVERSIONS=y >> "$k/.config"; refuses "MODVERSIONS without GENDWARFKSYMS" "CONFIG_MODVERSIONS=y without CONFIG_GENDWARFKSYMS=y" X=1 -- "$k"
for f in rust/libkernel.rmeta rust/libmacros.so rust/libcore.rmeta rust/libpin_init.rmeta scripts/target.json; do
    mkkdir "$k"; rm "$k/$f"; refuses "missing $f" "lacks the Rust artefacts $f: .*rust/\*.rmeta" X=1 -- "$k"
done
mkkdir "$k"
printf '#!/bin/sh\necho "rustc 1.0.0 (old)"\n' > "$t/bin/old"; chmod +x "$t/bin/old"
refuses "wrong rustc" "rustc on PATH is 'rustc 1.0.0 \(old\)' but .*rustup toolchain install 9.9.9" RUSTC="$t/bin/old" -- "$k"
refuses "no rustc" "no rustc on PATH.*rustup toolchain install 9.9.9" RUSTC="$t/bin/none" -- "$k"

mkkdir "$k"
finds "nothing found: builds anyway, no extra symbols" "" X=1 -- "$k"
grep -q "MOFED: no Module.symvers found" "$t/err" && grep -q "NVIDIA: no Module.symvers found" "$t/err" \
    && ok "... and says so for MOFED and NVIDIA" || bad "... missing 'no Module.symvers found' lines"
finds "--kver prints the release" "9.9.9-test" X=1 -- --kver "$k"

o=$t/ofa
for sub in x86_64/9.9.9-test 9.9.9-test default; do
    rm -rf "$o"; mofed_symvers "$o/$sub"
    finds "MOFED in OFA_DIR/$sub" "$o/$sub/Module.symvers" OFA_DIR="$o" -- "$k"
done
rm -rf "$o"; mofed_symvers "$o/9.9.9-test"; mofed_symvers "$o/default"
finds "MOFED: the release's dir wins over default" "$o/9.9.9-test/Module.symvers" OFA_DIR="$o" -- "$k"
grep -q "find-deps: MOFED: $o/9.9.9-test/Module.symvers" "$t/err" && ok "... and it is named" || bad "... not named"
rm -rf "$o"; mkdir -p "$o"; refuses "OFA_DIR without Module.symvers" "OFA_DIR=$o has no Module.symvers" OFA_DIR="$o" -- "$k"
rm -rf "$o"; mkdir -p "$o/default"; echo "0x0	ib_foo	vmlinux	EXPORT_SYMBOL	" > "$o/default/Module.symvers"
refuses "MOFED without the peer-memory core" "does not export ib_register_peer_memory_client" OFA_DIR="$o" -- "$k"
mofed_symvers "$t/dkms/mlnx-ofed-kernel/5.8/build"; mofed_symvers "$t/dkms/mlnx-ofed-kernel/24.10/build"
finds "MOFED from DKMS (newest)" "$t/dkms/mlnx-ofed-kernel/24.10/build/Module.symvers" OFA_DIR= -- "$k"
rm -rf "$t/dkms"

nv_symvers "$t/src/nvidia-550.54"; nv_symvers "$t/src/nvidia-570.10"
finds "NVIDIA: newest /usr/src/nvidia-*" "$t/src/nvidia-570.10/Module.symvers" X=1 -- "$k"
finds "NVIDIA: the loaded driver's version first" "$t/src/nvidia-550.54/Module.symvers" NVPEER_NVIDIA_VERSION=550.54 -- "$k"
rm -rf "$t/src"; nv_symvers "$t/dkms/nvidia/580.65/build"
finds "NVIDIA from DKMS" "$t/dkms/nvidia/580.65/build/Module.symvers" X=1 -- "$k"
nv_symvers "$t/nvsrc/kernel-open"
finds "NVIDIA_SRC (open kernel modules tree)" "$t/nvsrc/kernel-open/Module.symvers" NVIDIA_SRC="$t/nvsrc" -- "$k"
mkdir -p "$t/nvempty"; refuses "NVIDIA_SRC without Module.symvers" "NVIDIA_SRC=$t/nvempty has no Module.symvers.*make modules" NVIDIA_SRC="$t/nvempty" -- "$k"
rm -rf "$o"; mofed_symvers "$o/default"
finds "both found: both passed" "$o/default/Module.symvers $t/dkms/nvidia/580.65/build/Module.symvers" OFA_DIR="$o" -- "$k"
rm -rf "$t/dkms"
printf 'CONFIG_MODVERSIONS=y\nCONFIG_GENDWARFKSYMS=y\n' >> "$k/.config"
finds "MODVERSIONS with GENDWARFKSYMS accepted" "" X=1 -- "$k"
grep -q "warning: no MOFED Module.symvers.*OFA_DIR=" "$t/err" && ok "... warns that no MOFED CRCs will be recorded" || bad "... no CRC warning"

# --- Ubuntu's layout: rust/ comes from the separate linux-lib-rust-<release> package ------------------
# mkubuntu ROOT [LINKDIR]: the trees Ubuntu's packages leave under ROOT/usr/src, as its packaging makes
# them (debian/rules.d/2-binary-arch.mk moves the headers' rust/ to the lib-rust package, then
# debian/scripts/link-headers and debian/scripts/link-lib-rust leave relative links in the flavour's
# headers): linux-headers-9.9.9-1 (every Kconfig, include/, arch Makefiles), linux-headers-9.9.9-1-generic
# (.config, kernel.release, scripts/target.json; rust -> ../LINKDIR/rust, LINKDIR being
# linux-lib-rust-9.9.9-1-generic unless given), linux-lib-rust-9.9.9-1-generic/rust (the artefacts), and
# ROOT/lib/modules/9.9.9-1-generic/build -> the flavour's headers. Ubuntu's configs have MODVERSIONS and
# its RUST has no MODVERSIONS dependency (6.2+); its module.h has variable-length modversion entries.
urel=9.9.9-1-generic
mkubuntu() {
    local r=$1 link=${2:-linux-lib-rust-$urel}
    local ind=$r/usr/src/linux-headers-9.9.9-1 fl=$r/usr/src/linux-headers-$urel lr=$r/usr/src/linux-lib-rust-$urel
    rm -rf "$r"; mkdir -p "$ind/init" "$ind/include/linux" "$ind/arch/x86" "$fl/include/config" "$fl/scripts" \
        "$fl/arch/x86" "$lr/rust/pin-init" "$r/lib/modules/$urel"
    printf 'config RUST\n\tbool "Rust support"\n\tdepends on HAVE_RUST\n\tdepends on RUST_IS_AVAILABLE\n\tdepends on !GCC_PLUGIN_RANDSTRUCT\n\nconfig RUSTC_VERSION_TEXT\n\tstring\n' > "$ind/init/Kconfig"
    printf 'struct modversion_info {\n\t/* Offset of the next modversion entry in relation to this one. */\n\tu32 next;\n\tu32 crc;\n\tchar name[0];\n} __packed;\n' > "$ind/include/linux/module.h"
    echo 'KBUILD_RUSTFLAGS += --target=$(objtree)/scripts/target.json' > "$ind/arch/x86/Makefile"
    echo 'all:' > "$fl/Makefile"
    printf 'CONFIG_X86_64=y\nCONFIG_RUST=y\nCONFIG_MODVERSIONS=y\nCONFIG_RUSTC_VERSION_TEXT="rustc 9.9.9 (fake)"\n' > "$fl/.config"
    echo "$urel" > "$fl/include/config/kernel.release"
    touch "$fl/scripts/target.json" "$lr"/rust/{libcore.rmeta,libkernel.rmeta,libmacros.so,libpin_init.rmeta,libpin_init_internal.so}
    ln -s ../linux-headers-9.9.9-1/init "$fl/init"
    ln -s ../../linux-headers-9.9.9-1/include/linux "$fl/include/linux"
    ln -s ../../../linux-headers-9.9.9-1/arch/x86/Makefile "$fl/arch/x86/Makefile"
    ln -s "../$link/rust" "$fl/rust"
    ln -s "$fl" "$r/lib/modules/$urel/build"   # Ubuntu's is absolute too (/usr/src/linux-headers-<release>)
}
u=$t/ubuntu; ub=$u/lib/modules/$urel/build; ulr=$u/usr/src/linux-lib-rust-$urel
mkubuntu "$u"
finds "Ubuntu layout (headers + linux-lib-rust, via /lib/modules/<release>/build) accepted" "" X=1 -- "$ub"
grep -q "find-deps: Rust artefacts: $ub/rust -> $ulr/rust" "$t/err" && ok "... and names where rust/ leads" || bad "... lib-rust dir not named"
grep -q "find-deps: MODVERSIONS with Rust: $ub/init/Kconfig lets RUST and MODVERSIONS coexist (.*variable-length" "$t/err" \
    && ok "... and says why its MODVERSIONS is fine" || bad "... MODVERSIONS reason not given"
for f in libkernel.rmeta libmacros.so libcore.rmeta libpin_init.rmeta; do
    mkubuntu "$u"; rm "$ulr/rust/$f"
    refuses "Ubuntu layout, linux-lib-rust lacks $f" "lacks the Rust artefacts rust/$f: rust/ links to $ulr/rust \(Ubuntu's linux-lib-rust-$urel\), which has no $ulr/rust/$f; reinstall .*apt install --reinstall linux-lib-rust-$urel" X=1 -- "$ub"
done
mkubuntu "$u"; rm -rf "$ulr"
refuses "Ubuntu layout, linux-lib-rust not installed (rust/ dangles)" "rust/ links to $ulr/rust, which does not exist.*apt install linux-lib-rust-$urel\)$" X=1 -- "$ub"
# HWE kernels: the link names the source package, the package installs linux-lib-rust-<release>.
hwe=linux-hwe-9.9-lib-rust-$urel
mkubuntu "$u" "$hwe"
refuses "Ubuntu HWE layout, link and package disagree" "rust/ links to $u/usr/src/$hwe/rust, which does not exist, though .* installed at $ulr: .*\(ln -s linux-lib-rust-$urel $u/usr/src/$hwe\)$" X=1 -- "$ub"
ln -s "linux-lib-rust-$urel" "$u/usr/src/$hwe"
finds "... accepted once the suggested link exists" "" X=1 -- "$ub"
mkubuntu "$u"; rm "$u/usr/src/linux-headers-$urel/rust"
refuses "Ubuntu layout, headers without the rust link" "has no rust/, but .*\(ln -s ../linux-lib-rust-$urel/rust $u/usr/src/linux-headers-$urel/rust\)$" X=1 -- "$ub"
ln -s "../linux-lib-rust-$urel/rust" "$u/usr/src/linux-headers-$urel/rust"
finds "... accepted once the suggested link exists" "" X=1 -- "$ub"
# A rust/ link that is not Ubuntu's keeps the generic refusal.
mkkdir "$k"; mv "$k/rust" "$t/elsewhere-rust"; ln -s "$t/elsewhere-rust" "$k/rust"; rm "$k/rust/libmacros.so"
refuses "other rust/ link lacking a file" "lacks the Rust artefacts rust/libmacros.so: its headers were packaged without them" X=1 -- "$k"
rm -rf "$t/elsewhere-rust"

# --- MODVERSIONS: the tree's own statement decides -------------------------------------------------
kc=$u/usr/src/linux-headers-9.9.9-1/init/Kconfig mh=$u/usr/src/linux-headers-9.9.9-1/include/linux/module.h
uconf=$u/usr/src/linux-headers-$urel/.config
mkubuntu "$u"; sed -i 's/^\tdepends on RUST_IS_AVAILABLE$/&\n\tdepends on !MODVERSIONS/' "$kc"
refuses "MODVERSIONS, Kconfig: RUST depends on !MODVERSIONS" "CONFIG_MODVERSIONS=y without CONFIG_GENDWARFKSYMS=y: .*its init/Kconfig makes RUST depend on !MODVERSIONS" X=1 -- "$ub"
mkubuntu "$u"; sed -i 's/^\tdepends on RUST_IS_AVAILABLE$/&\n\tselect EXTENDED_MODVERSIONS if MODVERSIONS\n\tdepends on !MODVERSIONS || GENDWARFKSYMS/' "$kc"
refuses "MODVERSIONS, Kconfig: '!MODVERSIONS || GENDWARFKSYMS', GENDWARFKSYMS unset" "its init/Kconfig makes RUST depend on '!MODVERSIONS \|\| GENDWARFKSYMS' and CONFIG_GENDWARFKSYMS is not set" X=1 -- "$ub"
echo CONFIG_GENDWARFKSYMS=y >> "$uconf"
finds "... accepted with CONFIG_GENDWARFKSYMS=y" "" X=1 -- "$ub"
mkubuntu "$u"; printf 'struct modversion_info {\n\tunsigned long crc;\n\tchar name[MODULE_NAME_LEN];\n};\n' > "$mh"
refuses "MODVERSIONS, Kconfig allows it but modversion names are fixed-length" "lets RUST and MODVERSIONS coexist but .*module.h keeps fixed-length modversion names" X=1 -- "$ub"
echo CONFIG_EXTENDED_MODVERSIONS=y >> "$uconf"
finds "... accepted with CONFIG_EXTENDED_MODVERSIONS=y" "" X=1 -- "$ub"
mkubuntu "$u"; rm "$kc"
finds "MODVERSIONS, no Kconfig, variable-length modversion entries in module.h: accepted" "" X=1 -- "$ub"
grep -q "MODVERSIONS with Rust: $ub/include/linux/module.h: variable-length" "$t/err" && ok "... and names module.h" || bad "... module.h not named"
rm "$mh"
refuses "MODVERSIONS, neither Kconfig nor module.h says anything" "CONFIG_MODVERSIONS=y without CONFIG_GENDWARFKSYMS=y: .*nothing in the tree says" X=1 -- "$ub"

# --- the foundation: the kernel's crate where the tree can host it, else our runtime ----------------
# A fake toolchain for the own foundation: rustc with a rust-src and x86_64-unknown-none's
# specification, bindgen.
mkdir -p "$t/sysroot/lib/rustlib/src/rust/library/core/src"; touch "$t/sysroot/lib/rustlib/src/rust/library/core/src/lib.rs"
cat > "$t/bin/rustc" <<EOF2
#!/bin/sh
case "\$*" in
*sysroot*) echo "$t/sysroot" ;;
*target-spec-json*) printf '{\n  "features": "-mmx,-sse,+soft-float",\n  "arch": "x86_64"\n}\n' ;;
*) echo "rustc 9.9.9 (fake)" ;;
esac
EOF2
sed 's/rustc 9.9.9 (fake)/rustc 1.0.0 (other)/' "$t/bin/rustc" > "$t/bin/other"
printf '#!/bin/sh\nexit 0\n' > "$t/bin/bindgen"; chmod +x "$t/bin/rustc" "$t/bin/other" "$t/bin/bindgen"
export BINDGEN=$t/bin/bindgen
# mkplain DIR [MAJOR MINOR]: a prepared headers tree of a kernel built without Rust (Linux 6.1 unless
# given), as distributions ship them.
mkplain() {
    rm -rf "$1"; mkdir -p "$1/include/config" "$1/include/generated/uapi/linux"
    echo 'all:' > "$1/Makefile"
    printf 'CONFIG_X86_64=y\nCONFIG_MITIGATION_SLS=y\n# CONFIG_RUST is not set\n' > "$1/.config"
    cp "$1/.config" "$1/include/config/auto.conf"
    echo 9.9.9-plain > "$1/include/config/kernel.release"
    echo "#define LINUX_VERSION_CODE $(( (${2:-6} << 16) + (${3:-1} << 8) ))" > "$1/include/generated/uapi/linux/version.h"
}
# picks DESC FOUNDATION REASON-PATTERN [ENV=VAL...] -- KDIR: --foundation prints FOUNDATION and one line.
picks() {
    local desc=$1 want=$2 pat=$3; shift 3
    local envs=(); while [ "$1" != -- ]; do envs+=("$1"); shift; done; shift
    local got; got=$(env "${envs[@]}" "$fd" --foundation "$@" 2>"$t/err"); local rc=$?
    if [ $rc = 0 ] && [ "$got" = "$want" ] && [ "$(wc -l < "$t/err")" = 1 ] \
        && grep -qE "^find-deps: building on the $want foundation \($pat\)$" "$t/err"; then ok "$desc: $(cat "$t/err")"
    else bad "$desc: rc $rc, got '$got', want '$want'"; sed 's/^/      /' "$t/err"; fi
}
p=$t/plain
mkkdir "$k"; picks "a Rust tree whose artefacts fit: the kernel's crate" kernel "$k has Rust support and its artefacts match this rustc" NVPEER_FOUNDATION= -- "$k"
mkplain "$p"; picks "a kernel built without Rust: our runtime" own "9.9.9-plain was built without Rust" NVPEER_FOUNDATION= -- "$p"
mkkdir "$k"; mkdir -p "$k/include/generated/uapi/linux"; echo "#define LINUX_VERSION_CODE $(( (6 << 16) + (8 << 8) ))" > "$k/include/generated/uapi/linux/version.h"
picks "a Rust tree built by another rustc (Ubuntu's, with rustup's on PATH): our runtime" own "the kernel's own Rust cannot host it: rustc on PATH is 'rustc 1.0.0 \(other\)' but .* was built with 'rustc 9.9.9 \(fake\)'" NVPEER_FOUNDATION= RUSTC="$t/bin/other" -- "$k"
mkkdir "$k"; mkdir -p "$k/include/generated/uapi/linux"; echo "#define LINUX_VERSION_CODE $(( (6 << 16) + (8 << 8) ))" > "$k/include/generated/uapi/linux/version.h"
picks "NVPEER_FOUNDATION=own on a Rust tree" own "forced \(NVPEER_FOUNDATION=own\)" NVPEER_FOUNDATION=own -- "$k"
mkplain "$p"; finds "our runtime: MOFED and NVIDIA found as on the kernel's" "" NVPEER_FOUNDATION=own -- "$p"
mkplain "$p"; refuses "NVPEER_FOUNDATION=kernel on a kernel without Rust" "9.9.9-plain\) has no CONFIG_RUST=y" NVPEER_FOUNDATION=kernel -- "$p"
refuses "NVPEER_FOUNDATION misspelt" "NVPEER_FOUNDATION must be kernel or own, not 'rust'" NVPEER_FOUNDATION=rust -- "$p"
mkplain "$p" 5 10; refuses "a kernel older than the floor" "9.9.9-plain\) is Linux 5.10; nvpeer's own runtime builds for Linux 5.14 and newer" NVPEER_FOUNDATION= -- "$p"
mkplain "$p" 5 14; picks "... the floor itself" own "9.9.9-plain was built without Rust" NVPEER_FOUNDATION= -- "$p"
for opt in CFI_CLANG KASAN KCSAN RANDSTRUCT_FULL; do
    mkplain "$p"; echo "CONFIG_$opt=y" >> "$p/include/config/auto.conf"
    refuses "a configuration our runtime cannot match: CONFIG_$opt" "this kernel's CONFIG_$opt cannot be matched by a module built outside its tree \(" NVPEER_FOUNDATION= -- "$p"
done
mkplain "$p"; printf 'CONFIG_ARM64=y\n' > "$p/include/config/auto.conf"; sed -i 's/CONFIG_X86_64=y/CONFIG_ARM64=y/' "$p/.config"
picks "arm64 (Ubuntu's Grace kernels have no Rust)" own "9.9.9-plain was built without Rust" NVPEER_FOUNDATION= -- "$p"
mkplain "$p"; printf 'CONFIG_PPC64=y\n' > "$p/include/config/auto.conf"
refuses "an architecture our runtime does not know" "supports x86_64 and arm64 kernels only" NVPEER_FOUNDATION= -- "$p"
mkplain "$p"; rm -r "$t/sysroot/lib/rustlib/src"
refuses "no rust-src" "has no rust-src .*rustup component add rust-src" NVPEER_FOUNDATION= -- "$p"
mkdir -p "$t/sysroot/lib/rustlib/src/rust/library/core/src"; touch "$t/sysroot/lib/rustlib/src/rust/library/core/src/lib.rs"
refuses "no bindgen" "no bindgen on PATH.*cargo install bindgen-cli" NVPEER_FOUNDATION= BINDGEN="$t/bin/none" -- "$p"

# runtime/rust-flags.sh: the flags the kernel's own Makefiles would give its Rust (the real rustc,
# which prints the target specification the retpoline features go into).
rf=$repo/kmod/runtime/rust-flags.sh
# flags DESC CONFIG-LINES PATTERN...: rust-flags.sh on a plain tree with CONFIG-LINES prints flags
# (and x86_64's target specification) in which each PATTERN ("!P": P absent) is found.
flags() {
    local desc=$1 lines=$2 got pat; shift 2
    mkplain "$p"; printf %b "$lines" > "$p/include/config/auto.conf"
    grep -q CONFIG_ARM64 "$p/include/config/auto.conf" && sed -i 's/CONFIG_X86_64=y/CONFIG_ARM64=y/' "$p/.config"
    rm -rf "$t/rf"
    got=$(RUSTC=rustc "$rf" "$p" "$t/rf" 2>&1) || { bad "$desc: rust-flags.sh failed: $got"; return; }
    got="$got $(cat "$t/rf"/*.json 2>/dev/null | tr -d '\n')"
    for pat in "$@"; do
        case $pat in
        !*) ! grep -qF -- "${pat#!}" <<<"$got" || { bad "$desc: has ${pat#!}: $got"; return; } ;;
        *) grep -qF -- "$pat" <<<"$got" || { bad "$desc: no $pat: $got"; return; } ;;
        esac
    done
    ok "$desc"
}
flags "x86_64 with retpolines: the three features in the target, as the kernel's target.json" \
    'CONFIG_X86_64=y\nCONFIG_MITIGATION_RETPOLINE=y\nCONFIG_MITIGATION_SLS=y\n' \
    "+retpoline-external-thunk,+retpoline-indirect-branches,+retpoline-indirect-calls,+harden-sls-ijmp" \
    "!-Zretpoline" "-Zfunction-sections=n" "-Cforce-unwind-tables=n"
flags "arm64 without UNWIND_TABLES: no unwind tables" 'CONFIG_ARM64=y\n' \
    "-Cforce-unwind-tables=n" "!-Zuse-sync-unwind" "-Zfunction-sections=n"
flags "arm64 with UNWIND_TABLES (DYNAMIC_SCS patches modules through .eh_frame): asynchronous tables" \
    'CONFIG_ARM64=y\nCONFIG_UNWIND_TABLES=y\nCONFIG_SHADOW_CALL_STACK=y\nCONFIG_DYNAMIC_SCS=y\n' \
    "-Cforce-unwind-tables=y -Zuse-sync-unwind=n" "!-Cforce-unwind-tables=n" "-Zfixed-x18" "!-Zsanitizer=shadow-call-stack"

echo "[test-discovery] $pass ok, $fail failed"
[ $fail = 0 ]
