#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# test-fallbacks.sh KDIR: kmod/compat.rs's fallbacks, proven on the 7.2 test kernel. The probe
# (kmod/probe-kernel.sh) must find every feature of 7.2 both in its sources and, as in a header
# tree without sources (Ubuntu's linux-lib-rust), in its built artefacts; then the module is
# built with the feature 6.12 lacks (kernel::sync::SetOnce) dropped, so that compat.rs's own
# SetOnce is used, and passes conformance (--quick) in the VM; the module is left rebuilt as usual.
# (The atomics are core's on every kernel: kmod/atomic.rs.) 6.12 itself runs in `make test-matrix`.
# (conformance --quick: every core generation, one driver flavour and parameter set.)
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
kdir=$1
fails=0
expect() {  # expect DESCRIPTION WANT GOT
    if [ "$2" = "$3" ]; then echo "ok    $1"; else echo "FAIL  $1: want '$2', got '$3'"; fails=$((fails + 1)); fi
}
all="--cfg nvpeer_kernel_set_once --cfg nvpeer_module_authors"
expect "7.2's sources offer every feature" "$all" "$("$repo/kmod/probe-kernel.sh" "$kdir" | xargs)"
# A tree without rust/ sources: only the artefacts of 7.2's rust/ (its .rmeta and libmacros.so).
fake=$(mktemp -d); trap 'rm -rf "$fake"' EXIT
mkdir -p "$fake/rust"; cp "$kdir"/rust/libkernel.rmeta "$kdir"/rust/libmacros.so "$fake/rust/"
expect "7.2's artefacts alone offer every feature" "$all" "$("$repo/kmod/probe-kernel.sh" "$fake" | xargs)"
# Lookalikes the kernel crate carries elsewhere (7.2's configfs macros name a bare &THIS_MODULE)
# must not read as 7.3's THIS_MODULE-as-ModuleMetadata.
printf 'configfs_attrs! { container: configfs::Subsystem<Configuration>, &THIS_MODULE, }' >> "$fake/rust/libkernel.rmeta"
expect "a bare THIS_MODULE in the metadata is not 7.3's" "$all" "$("$repo/kmod/probe-kernel.sh" "$fake" | xargs)"
rm "$fake/rust/libkernel.rmeta"
expect "no libkernel.rmeta: no kernel-crate feature claimed" "--cfg nvpeer_module_authors" \
    "$("$repo/kmod/probe-kernel.sh" "$fake" | xargs)"
without="nvpeer_kernel_set_once"
expect "NVPEER_COMPAT_WITHOUT drops them" "--cfg nvpeer_module_authors" \
    "$(NVPEER_COMPAT_WITHOUT=$without "$repo/kmod/probe-kernel.sh" "$kdir" | xargs)"

# The module conformance loads must be the one built here: the previous one goes first, and the
# build's own command line must show the fallbacks chosen.
log=$(mktemp); rm -f "$repo/kmod/nvidia_peermem.ko"
if NVPEER_COMPAT_WITHOUT=$without make -s -C "$repo/kmod" KDIR="$kdir" >"$log" 2>&1; then
    echo "ok    the module builds with compat.rs's fallbacks"
else
    echo "FAIL  the module builds with compat.rs's fallbacks"; fails=$((fails + 1))
fi
cat "$log"
if grep -q warning "$log"; then echo "FAIL  ... without warnings"; fails=$((fails + 1)); else echo "ok    ... without warnings"; fi
rm -f "$log"
cmdfile=$repo/kmod/build/nvidia_peermem/.nvpeer_main.o.cmd
if [ -f "$repo/kmod/nvidia_peermem.ko" ] && grep -q -- '--cfg nvpeer_module_authors' "$cmdfile" \
   && ! grep -q -- 'nvpeer_kernel_set_once' "$cmdfile"; then
    echo "ok    kmod/nvidia_peermem.ko is the fallback build ($cmdfile)"
else
    echo "FAIL  kmod/nvidia_peermem.ko is the fallback build ($cmdfile)"; fails=$((fails + 1))
fi
"$repo/tests/vm/run.sh" --memory 3G --kdir "$kdir" conformance ours --quick || fails=$((fails + 1))
make -s -C "$repo/kmod" KDIR="$kdir" || fails=$((fails + 1))
echo "compat fallbacks: $fails failed"
[ $fails -eq 0 ]
