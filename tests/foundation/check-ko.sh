#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# check-ko.sh KO FOUNDATION: the module file was built on FOUNDATION (kmod/README.md, "Two
# foundations"), as its own contents show, not only its .modinfo tag:
#  own:    .modinfo nvpeer_foundation=own; no Rust symbol imported (the kernel's `kernel` crate
#          was not linked against: a kernel without Rust has none to give) and no Rust symbol
#          global (our runtime and `core` are internal to the object, so two such modules load
#          side by side); nothing exported (__ksymtab); the globals are the client's C entry points
#          (with objtool's __pfx_ symbols of their padding, and the section bounds the kernel's
#          module.lds defines, __start_/__stop_*).
#  kernel: .modinfo nvpeer_foundation=kernel, and it imports the kernel crate's Rust symbols.
set -uo pipefail
ko=$1 want=$2
fail=0
ok() { echo "ok    $*"; }
bad() { echo "FAIL  $*"; fail=1; }
[ -f "$ko" ] || { bad "no module at $ko"; exit 1; }
got=$(modinfo -F nvpeer_foundation "$ko")
if [ "$got" = "$want" ]; then ok "$ko: .modinfo nvpeer_foundation=$got"; else bad "$ko: .modinfo nvpeer_foundation='$got', want '$want'"; fi
undef_rust=$(nm -u "$ko" | awk '$2 ~ /^_R/ {print $2}')
global_rust=$(nm --defined-only -g "$ko" | awk '$3 ~ /^_R/ {print $3}')
case $want in
own)
    if [ -z "$undef_rust" ]; then ok "imports no Rust symbol"; else bad "imports Rust symbols: $(echo "$undef_rust" | head -n3 | tr '\n' ' ')"; fi
    if [ -z "$global_rust" ]; then ok "defines no global Rust symbol"; else bad "global Rust symbols: $(echo "$global_rust" | head -n3 | tr '\n' ' ')"; fi
    if objdump -h "$ko" | grep -q '__ksymtab'; then bad "exports symbols (__ksymtab)"; else ok "exports nothing"; fi
    # The module loader applies no GOT relocation ("Unknown rela relocation"): calls leave the
    # object through the PLT form, as the kernel's own Rust and C do.
    got=$(readelf -rW "$ko" | awk '$3 ~ /GOT/ {print $3}' | sort -u | tr '\n' ' ')
    if [ -z "$got" ]; then ok "no GOT relocation"; else bad "GOT relocations the module loader refuses: $got"; fi
    others=$(nm --defined-only -g "$ko" | awk '{print $3}' | grep -vE '^((__pfx_)?(init_module|cleanup_module|nvpeer_[a-z0-9_]+)|__this_module|__(start|stop)_[A-Za-z0-9_]+)$')
    if [ -z "$others" ]; then ok "its globals are the module's entry points and nvpeer_* C interfaces"
    else bad "unexpected globals: $(echo "$others" | head -n5 | tr '\n' ' ')"; fi ;;
kernel)
    if echo "$undef_rust" | grep -q 'kernel'; then ok "imports the kernel crate's Rust symbols ($(echo "$undef_rust" | wc -l))"
    else bad "imports no symbol of the kernel crate: not built on it"; fi ;;
*) bad "foundation must be own or kernel, not '$want'" ;;
esac
exit $fail
