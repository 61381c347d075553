#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# test-fallbacks.sh KDIR: kmod/compat.rs's fallbacks, proven on the 7.2 test kernel. The probe
# (kmod/probe-kernel.sh) must find every feature of 7.2 both in its sources and, as in a header
# tree without sources (Ubuntu's linux-lib-rust), in its built artefacts; then the module is
# built with the features 6.12 lacks (kernel::sync::atomic, SetOnce) dropped, so that compat.rs's
# own Atomic and SetOnce are used, and passes conformance (--quick) in the VM; the module is left
# rebuilt as usual. 6.12 itself runs in `make test-matrix`.
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
kdir=$1
fails=0
expect() {  # expect DESCRIPTION WANT GOT
    if [ "$2" = "$3" ]; then echo "ok    $1"; else echo "FAIL  $1: want '$2', got '$3'"; fails=$((fails + 1)); fi
}
all="--cfg nvpeer_kernel_atomic --cfg nvpeer_kernel_set_once --cfg nvpeer_module_authors"
expect "7.2's sources offer every feature" "$all" "$("$repo/kmod/probe-kernel.sh" "$kdir" | xargs)"
# A tree without rust/ sources: only the artefacts of 7.2's rust/ (its .rmeta and libmacros.so).
fake=$(mktemp -d); trap 'rm -rf "$fake"' EXIT
mkdir -p "$fake/rust"; cp "$kdir"/rust/libkernel.rmeta "$kdir"/rust/libmacros.so "$fake/rust/"
expect "7.2's artefacts alone offer every feature" "$all" "$("$repo/kmod/probe-kernel.sh" "$fake" | xargs)"
rm "$fake/rust/libkernel.rmeta"
expect "no libkernel.rmeta: no kernel-crate feature claimed" "--cfg nvpeer_module_authors" \
    "$("$repo/kmod/probe-kernel.sh" "$fake" | xargs)"
without="nvpeer_kernel_atomic nvpeer_kernel_set_once"
expect "NVPEER_COMPAT_WITHOUT drops them" "--cfg nvpeer_module_authors" \
    "$(NVPEER_COMPAT_WITHOUT=$without "$repo/kmod/probe-kernel.sh" "$kdir" | xargs)"

if NVPEER_COMPAT_WITHOUT=$without make -s -C "$repo/kmod" KDIR="$kdir" 2>&1 | tee /dev/stderr | grep -q warning; then
    echo "FAIL  the fallbacks build without warnings"; fails=$((fails + 1))
fi
"$repo/tests/vm/run.sh" --memory 3G --kdir "$kdir" conformance ours --quick || fails=$((fails + 1))
make -s -C "$repo/kmod" KDIR="$kdir" || fails=$((fails + 1))
echo "compat fallbacks: $fails failed"
[ $fails -eq 0 ]
