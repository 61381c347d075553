#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# test-refusal.sh RELEASE: kmod/scripts/stock-kbuild.sh refuses targets whose exact toolchain cannot be
# had, early (before any chroot) and with exactly one line: RELEASE's own config with the rustc
# version text replaced by a Debian rustc that is not in the archive, by a rustup rustc (not a
# Debian build), a gcc that is not there, and a release that does not exist.
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
. "$repo/tests/setup/env.sh"
release=$1
rel_re=${release//./\\.}; rel_re=${rel_re//+/\\+}
tool=$repo/kmod/scripts/stock-kbuild.sh
"$tool" check "$release" >/dev/null 2>&1 || { echo "FAIL: $release itself does not check out"; exit 1; }
cfg=$(ls "$NVPEER_CACHE/stock/headers-$release-"*/.config | head -n1)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail=0
# expect_refusal NAME PATTERN STOCK-KBUILD-ARGS...: exit 1, one stderr line matching PATTERN, fast.
expect_refusal() {
    local name=$1 pat=$2; shift 2
    local t0=$SECONDS rc lines
    "$tool" "$@" >"$tmp/out" 2>"$tmp/err"; rc=$?
    lines=$(wc -l < "$tmp/err")
    if [ $rc = 1 ] && [ "$lines" = 1 ] && grep -qE "$pat" "$tmp/err" && [ ! -s "$tmp/out" ]; then
        echo "ok    $name ($((SECONDS - t0)) s): $(cat "$tmp/err")"
    else
        echo "FAIL  $name: exit $rc, $lines stderr lines:"; sed 's/^/      /' "$tmp/err"; fail=1
    fi
}
sed 's/^CONFIG_RUSTC_VERSION_TEXT=.*/CONFIG_RUSTC_VERSION_TEXT="rustc 1.84.9 (0123456789 2025-01-01) (built from a source tarball)"/' "$cfg" > "$tmp/rustc-gone.config"
expect_refusal "Debian rustc 1.84.9 not in the archive" "^stock-kbuild: cannot match $rel_re: it was built with 'rustc 1.84.9 .*' but Debian trixie has rustc" \
    --config "$tmp/rustc-gone.config" build "$release"
sed 's/^CONFIG_RUSTC_VERSION_TEXT=.*/CONFIG_RUSTC_VERSION_TEXT="rustc 1.95.0 (59807616e 2026-04-14)"/' "$cfg" > "$tmp/rustup.config"
expect_refusal "rustup's rustc (not a Debian build)" "^stock-kbuild: cannot match $rel_re: built with 'rustc 1.95.0 .*', not a Debian rustc build" \
    --config "$tmp/rustup.config" prepare "$release"
sed 's/^CONFIG_CC_VERSION_TEXT=.*/CONFIG_CC_VERSION_TEXT="x86_64-linux-gnu-gcc-14 (Debian 14.1.0-1) 14.1.0"/' "$cfg" > "$tmp/gcc.config"
expect_refusal "gcc-14 14.1.0-1 not in the archive" "^stock-kbuild: cannot match $rel_re: it was built with gcc-14 14.1.0-1" \
    --config "$tmp/gcc.config" check "$release"
expect_refusal "a release with no headers package" "^stock-kbuild: cannot match 7.2.99\+deb13-amd64: no linux-headers-7.2.99\+deb13-amd64" \
    build 7.2.99+deb13-amd64
expect_refusal "a non-Debian-13 release" "^stock-kbuild: cannot match 6.1.0-30-amd64: expected a Debian kernel release" \
    build 6.1.0-30-amd64
exit $fail
