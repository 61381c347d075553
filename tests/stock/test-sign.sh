#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# test-sign.sh RELEASE: `make sign` with a throwaway key and certificate (openssl, in a temp dir)
# on a copy of the module built for RELEASE (kmod/scripts/stock-kbuild.sh build): the tree's sign-file
# appends a signature that modinfo reads back (signer, sig_key, sig_hashalgo); bad arguments are
# refused with one line.
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
release=$1
ko=$repo/build/stock/$release/nvidia_peermem.ko
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail=0
ok() { echo "ok    $*"; }
no() { echo "FAIL  $*"; fail=1; }
[ -f "$ko" ] || { no "no $ko: run kmod/scripts/stock-kbuild.sh build $release first"; exit 1; }
openssl req -new -x509 -newkey rsa:2048 -nodes -days 1 -sha256 -subj "/CN=nvpeer test signing key/" \
    -addext "keyUsage=digitalSignature" -addext "extendedKeyUsage=codeSigning" \
    -keyout "$tmp/key.pem" -out "$tmp/cert.pem" 2>/dev/null || { no "openssl could not make a key"; exit 1; }
cp "$ko" "$tmp/nvidia_peermem.ko"
[ -z "$(modinfo -F signer "$tmp/nvidia_peermem.ko")" ] && ok "the built module is unsigned" || no "the built module is already signed"
if make -s -C "$repo" sign KDIR="stock:$release" KEY="$tmp/key.pem" CERT="$tmp/cert.pem" KO="$tmp/nvidia_peermem.ko" >"$tmp/log" 2>&1; then
    ok "make sign KDIR=stock:$release KEY=... CERT=... KO=..."
else
    no "make sign failed:"; sed 's/^/      /' "$tmp/log"
fi
[ "$(tail -c 28 "$tmp/nvidia_peermem.ko")" = "~Module signature appended~" ] \
    && ok "ends with '~Module signature appended~'" || no "no signature marker at the end"
signer=$(modinfo -F signer "$tmp/nvidia_peermem.ko")
[ "$signer" = "nvpeer test signing key" ] && ok "modinfo signer: $signer" || no "modinfo signer: '$signer'"
algo=$(modinfo -F sig_hashalgo "$tmp/nvidia_peermem.ko")
[ "$algo" = sha256 ] && ok "modinfo sig_hashalgo: $algo (CONFIG_MODULE_SIG_HASH)" || no "modinfo sig_hashalgo: '$algo'"
want=$(openssl x509 -in "$tmp/cert.pem" -noout -serial | cut -d= -f2 | tr -d ':' | tr 'a-f' 'A-F')
got=$(modinfo -F sig_key "$tmp/nvidia_peermem.ko" | tr -d ':' | tr 'a-f' 'A-F')
[ -n "$got" ] && [ "${want#0}" = "${got#0}" ] && ok "modinfo sig_key is the certificate's serial" || no "sig_key '$got', certificate serial '$want'"
cmp -s <(head -c "$(stat -c %s "$ko")" "$tmp/nvidia_peermem.ko") "$ko" && ok "the module itself is unchanged (signature appended)" || no "module body changed"
out=$(make -s -C "$repo" sign KDIR="stock:$release" KEY="$tmp/nokey.pem" CERT="$tmp/cert.pem" KO="$tmp/nvidia_peermem.ko" 2>&1)
[ $? -ne 0 ] && [ "$(echo "$out" | grep -c '^sign: ')" = 1 ] && ok "a missing key is refused: $(echo "$out" | grep '^sign: ')" || no "missing key: $out"
exit $fail
