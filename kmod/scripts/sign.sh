#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# sign.sh KEY CERT KDIR KO...: signs modules with the target kernel's scripts/sign-file (make sign),
# for hosts that enforce module signatures (Secure Boot lockdown, CONFIG_MODULE_SIG_FORCE,
# module.sig_enforce=1). KEY: private key (PEM, or a PKCS#11 URI), CERT: its X.509 certificate
# (PEM or DER) enrolled in the kernel's keyring (e.g. `mokutil --import` as DER). KDIR: the kernel
# build tree, or stock:RELEASE for a tree prepared by kmod/scripts/stock-kbuild.sh (its sign-file runs in
# that chroot). The hash is the tree's CONFIG_MODULE_SIG_HASH (default sha256). SIGN_FILE=<path>
# overrides the sign-file used for a KDIR tree (e.g. /usr/lib/linux-kbuild-*/scripts/sign-file).
# Each module is checked to end with the signature marker afterwards.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
die() { echo "sign: $*" >&2; exit 1; }
[ $# -ge 4 ] || die "usage: make sign KEY=<private key> CERT=<certificate> [KO=<module>...] [KDIR=<tree>|KDIR=stock:<release>]"
key=$1 cert=$2 kdir=$3; shift 3
[ -f "$key" ] || [[ $key == pkcs11:* ]] || die "no private key at '$key' (KEY=)"
[ -f "$cert" ] || die "no certificate at '$cert' (CERT=)"
for ko; do [ -f "$ko" ] || die "no module at $ko: build it first"; done
case "$kdir" in
stock:*)
    "$here/stock-kbuild.sh" sign "${kdir#stock:}" "$key" "$cert" "$@" ;;
*)
    sf=${SIGN_FILE:-$kdir/scripts/sign-file}
    [ -x "$sf" ] || die "$sf does not exist: build it ('make -C $kdir scripts'; needs CONFIG_MODULE_SIG_FORMAT=y) or set SIGN_FILE=<sign-file>"
    hash=$(sed -n 's/^CONFIG_MODULE_SIG_HASH="\(.*\)"/\1/p' "$kdir/.config" 2>/dev/null || true)
    for ko; do "$sf" "${hash:-sha256}" "$key" "$cert" "$ko" || die "sign-file failed for $ko"; echo "sign: signed $ko (${hash:-sha256})"; done ;;
esac
for ko; do
    [ "$(tail -c 28 "$ko")" = "~Module signature appended~" ] || die "$ko does not end with the module signature marker"
done
