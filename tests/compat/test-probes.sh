#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# test-probes.sh KDIR: kmod/scripts/probe-kernel.sh on the 7.2 test kernel. It must find 7.2's features
# both in its sources and, as in a header tree without sources (Ubuntu's linux-lib-rust), in its
# built artefacts alone; a lookalike string in the artefacts must not read as 7.3's feature, the
# string the probe looks for must, and a missing artefact claims nothing. (The module has no Rust
# fallbacks to run here: its atomics and SetOnce are core's on every kernel, kmod/client/atomic.rs; 6.12
# and 7.3 build and run in `make test-matrix`.)
# test-probes.sh --agree KDIR: any kernel's artefacts alone give what its sources give (run by
# `make test-matrix` on 6.12 and 7.3, whose real metadata the planted strings here stand for).
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
agree=false
if [ "${1:-}" = --agree ]; then agree=true; shift; fi
kdir=$1
fails=0
expect() {  # expect DESCRIPTION WANT GOT
    if [ "$2" = "$3" ]; then echo "ok    $1"; else echo "FAIL  $1: want '$2', got '$3'"; fails=$((fails + 1)); fi
}
probe() { "$repo/kmod/scripts/probe-kernel.sh" "$1" | xargs; }
# A tree without rust/ sources: only the artefacts of the kernel's rust/ (its .rmeta and
# libmacros.so).
fake=$(mktemp -d); trap 'rm -rf "$fake"' EXIT
mkdir -p "$fake/rust"; cp "$kdir"/rust/libkernel.rmeta "$kdir"/rust/libmacros.so "$fake/rust/"
if $agree; then
    expect "$(basename "$kdir"): the artefacts alone give what the sources give" "$(probe "$kdir")" "$(probe "$fake")"
    echo "kernel probes: $fails failed"
    [ $fails -eq 0 ]
    exit
fi
v72="--cfg nvpeer_module_authors"
expect "7.2's sources: module!'s authors key, THIS_MODULE at the crate root" "$v72" "$(probe "$kdir")"
expect "7.2's artefacts alone: the same" "$v72" "$(probe "$fake")"
# Lookalikes the kernel crate carries elsewhere (7.2's configfs macros name a bare &THIS_MODULE)
# must not read as 7.3's THIS_MODULE-as-ModuleMetadata ...
printf 'configfs_attrs! { container: configfs::Subsystem<Configuration>, &THIS_MODULE, }' >> "$fake/rust/libkernel.rmeta"
expect "a bare THIS_MODULE in the metadata is not 7.3's" "$v72" "$(probe "$fake")"
# ... while the doc that came with it (7.3's kernel::module::this_module) does (the real metadata:
# --agree in the matrix).
printf 'Returns a reference to the `THIS_MODULE` of the given module type' >> "$fake/rust/libkernel.rmeta"
expect "7.3's this_module doc in the metadata is 7.3's" "$v72 --cfg nvpeer_this_module_meta" "$(probe "$fake")"
rm "$fake/rust/libkernel.rmeta"
expect "no libkernel.rmeta: no kernel-crate feature claimed" "$v72" "$(probe "$fake")"
rm "$fake/rust/libmacros.so"
expect "no libmacros.so: no macro feature claimed" "" "$(probe "$fake")"
echo "kernel probes: $fails failed"
[ $fails -eq 0 ]
