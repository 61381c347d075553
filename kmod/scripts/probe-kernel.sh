#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# probe-kernel.sh SRCTREE OBJTREE: the rustc --cfg flags of what this kernel's Rust support
# offers, for kmod/client/compat.rs (which documents each). Decided by the tree, not by its version:
# the tree's rust/ sources where it has them (source trees, kmod/scripts/stock-kbuild.sh's trees), else
# the names its built artefacts carry (rust/libkernel.rmeta, rust/libmacros.so: header trees
# such as Ubuntu's linux-lib-rust, which ship no sources).
# The artefacts carry only what the tree's config compiled, so their strings are chosen to be
# ones no other code of the kernel crate carries (tests/compat/test-probes.sh plants lookalikes).
src=$1 obj=${2:-$1}

# has FEATURE SOURCE-FILE SOURCE-PATTERN ARTEFACT ARTEFACT-STRING
has() {
    if [ -d "$src/rust/kernel" ]; then
        [ -f "$src/rust/$2" ] && grep -qE -- "$3" "$src/rust/$2"
    else
        [ -f "$obj/rust/$4" ] && grep -aqP -- "$5" "$obj/rust/$4"
    fi || return 0
    echo "--cfg $1"
}

# module!'s `authors: [..]` key (the single `author:` before it).
has nvpeer_module_authors macros/module.rs '\bauthors\b' libmacros.so 'authors'
# THIS_MODULE as ModuleMetadata's associated const (a static at the crate root before); in the
# metadata, the doc of kernel::module::this_module, which came with it (a bare THIS_MODULE is no
# sign: 7.2's configfs macros name the crate-root static).
has nvpeer_this_module_meta kernel/module.rs 'const THIS_MODULE: ThisModule;' libkernel.rmeta 'Returns a reference to the `THIS_MODULE` of the given module type'
exit 0
