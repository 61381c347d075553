#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# rust-flags.sh KDIR OUTDIR: the rustc flags that build the module's Rust (our runtime, `core` and the
# client) for the kernel whose build tree is KDIR, read from its configuration: the target and
# code model, and the mitigations the kernel's C was built with, each as the kernel's own
# Makefiles pass it to rustc where the kernel has Rust. A configuration this cannot honour is
# refused with one line naming it (stderr, exit 1).
#
# Not applied, as the kernel's own Rust does not apply them either: the stack protector (rustc
# has no -mstack-protector-guard-* to use the kernel's canary), INIT_STACK_ALL_ZERO (safe Rust
# reads no uninitialised stack). The C glue gets every flag of the kernel's.
set -eu
kdir=$1 outdir=$2
config=
for f in "$kdir/include/config/auto.conf" "$kdir/.config"; do
    [ -f "$f" ] && { config=$f; break; }
done
[ -n "$config" ] || { echo "nvpeer: $kdir has no include/config/auto.conf or .config: not a configured kernel build tree" >&2; exit 1; }

# on OPTION: whether CONFIG_OPTION is y; value OPTION: its value.
on() { grep -q "^CONFIG_$1=y" "$config"; }
value() { sed -n "s/^CONFIG_$1=\"\{0,1\}\([^\"]*\)\"\{0,1\}$/\1/p" "$config"; }
refuse() { echo "nvpeer: this kernel's CONFIG_$1 cannot be matched by a module built outside its tree ($2)" >&2; exit 1; }

# What no out-of-tree Rust can match.
on CFI_CLANG && refuse CFI_CLANG "kCFI type hashes of its C would have to match ours"
on KASAN && refuse KASAN "rustc's shadow mapping would have to match the kernel's"
on KCSAN && refuse KCSAN "no Rust instrumentation for it"
on RANDSTRUCT_FULL && refuse RANDSTRUCT_FULL "the compiler plugin's randomised struct layouts are unknown to bindgen"
on RANDSTRUCT_PERFORMANCE && refuse RANDSTRUCT_PERFORMANCE "the compiler plugin's randomised struct layouts are unknown to bindgen"
on GCC_PLUGIN_RANDSTRUCT && refuse GCC_PLUGIN_RANDSTRUCT "the plugin's randomised struct layouts are unknown to bindgen"
on CPU_BIG_ENDIAN && refuse CPU_BIG_ENDIAN "only little-endian kernels are supported"

# As the kernel's top Makefile passes them to every Rust object (KBUILD_RUSTFLAGS); no function
# sections for modules, as its C has none either.
flags="-Cpanic=abort -Crelocation-model=static -Ccodegen-units=1 -Copt-level=2"
flags="$flags -Csymbol-mangling-version=v0 -Cdebug-assertions=n -Zfunction-sections=n"
rustc_minor=$(${RUSTC:-rustc} --version | sed -n 's/^rustc 1\.\([0-9]*\).*/\1/p')
# Calls to functions outside the object through the PLT form (R_X86_64_PLT32), as the kernel's
# own target has it: rustc's bare-metal targets call through the GOT, whose relocations
# (R_X86_64_GOTPCREL) the module loader does not know ("Unknown rela relocation: 9").
flags="$flags -Zplt=yes"
# Unwind tables only where the kernel has them (arm64's UNWIND_TABLES, which DYNAMIC_SCS needs:
# the module loader rewrites PAC instructions into shadow-call-stack ones by walking .eh_frame),
# as arch/arm64/Makefile passes them; rustc before 1.98 marks them synchronous unless told (the
# kernel's own work-around).
if on ARM64 && on UNWIND_TABLES; then
    flags="$flags -Cforce-unwind-tables=y -Zuse-sync-unwind=n"
    [ "${rustc_minor:-0}" -ge 98 ] || flags="$flags -Zllvm_module_flag=uwtable:u32:2:max"
else
    flags="$flags -Cforce-unwind-tables=n"
fi
on FRAME_POINTER && flags="$flags -Cforce-frame-pointers=y"
on RUST_OVERFLOW_CHECKS && flags="$flags -Coverflow-checks=y"
if on X86_64; then
    # rustc's x86_64-unknown-none: kernel code model, no red zone, soft float, no SSE/MMX (the
    # kernel's own target), with the target features of retpolines and SLS hardening in a copy of
    # its specification, as the kernel's scripts/generate_rust_target.rs adds them to its own
    # (every rustc takes the retpoline features there; -Zretpoline-external-thunk needs 1.89).
    features=
    if on MITIGATION_RETPOLINE || on RETPOLINE; then
        features="$features,+retpoline-external-thunk,+retpoline-indirect-branches,+retpoline-indirect-calls"
    fi
    if on MITIGATION_SLS || on SLS; then features="$features,+harden-sls-ijmp,+harden-sls-ret"; fi
    mkdir -p "$outdir"
    RUSTC_BOOTSTRAP=1 ${RUSTC:-rustc} -Zunstable-options --print target-spec-json --target x86_64-unknown-none |
        sed "s/\(\"features\": \"[^\"]*\)\"/\1$features\"/" > "$outdir/x86_64-nvpeer.json.tmp"
    grep -q "\"features\": \"[^\"]*soft-float$features\"" "$outdir/x86_64-nvpeer.json.tmp" ||
        { echo "nvpeer: cannot add the target features$features to rustc's x86_64-unknown-none specification" >&2; exit 1; }
    # Rewritten only when it changes, so that Kbuild rebuilds `core` only then.
    cmp -s "$outdir/x86_64-nvpeer.json.tmp" "$outdir/x86_64-nvpeer.json" 2>/dev/null ||
        mv "$outdir/x86_64-nvpeer.json.tmp" "$outdir/x86_64-nvpeer.json"
    rm -f "$outdir/x86_64-nvpeer.json.tmp"
    flags="$flags -Zunstable-options --target=$outdir/x86_64-nvpeer.json -Ccode-model=kernel -Cno-redzone=y"
    if on MITIGATION_RETHUNK || on RETHUNK; then flags="$flags -Zfunction-return=thunk-extern"; fi
    if on X86_KERNEL_IBT; then
        # -Cjump-tables came with rustc 1.93; -Zno-jump-tables before it (as the kernel's Makefile).
        if [ "${rustc_minor:-0}" -ge 93 ]; then flags="$flags -Zcf-protection=branch -Cjump-tables=n"
        else flags="$flags -Zcf-protection=branch -Zno-jump-tables"; fi
    fi
    if on CALL_PADDING; then
        pad=$(value FUNCTION_PADDING_BYTES)
        flags="$flags -Zpatchable-function-entry=$pad,$pad"
    fi
elif on ARM64; then
    flags="$flags --target=aarch64-unknown-none-softfloat"
    if on ARM64_BTI_KERNEL; then flags="$flags -Zbranch-protection=bti,pac-ret"
    elif on ARM64_PTR_AUTH_KERNEL; then flags="$flags -Zbranch-protection=pac-ret"; fi
    if on SHADOW_CALL_STACK; then
        flags="$flags -Zfixed-x18"
        on DYNAMIC_SCS || flags="$flags -Zsanitizer=shadow-call-stack"
    fi
else
    echo "nvpeer: the module's own Rust runtime supports x86_64 and arm64 kernels only" >&2
    exit 1
fi
echo "$flags"
