#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# test-dkms.sh KDIR: host-side DKMS round trip with every DKMS directory in a temp dir (nothing
# outside it is touched: --dkmstree, --sourcetree, --installtree, --no-depmod): make dkms-install
# DESTDIR=…, dkms add/build/install/remove for KDIR's release against KDIR. In the VM,
# tests/scenarios/deb.sh builds the same tree (the nvpeer-dkms package's, checked file for file)
# with the default paths, depmod and modprobe.
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
. "$repo/tests/setup/env.sh"
kdir=$1
kver=$(cat "$kdir/include/config/kernel.release")
ver=$(sed -n 's/^NVPEER_VERSION ?= //p' "$repo/kmod/Kbuild")
t=$(mktemp -d); trap 'rm -rf "$t"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok    $*"; }
bad() { fail=$((fail + 1)); echo "FAIL  $*"; }
expect() { local d=$1; shift; if "$@" >"$t/out" 2>&1; then ok "$d"; else bad "$d"; sed 's/^/      /' "$t/out" | tail -n 30; fi; }

command -v dkms >/dev/null || { echo "FAIL  dkms not installed (tests/setup/deps.sh installs it)"; exit 1; }
mkdir -p "$t/dkms" "$t/inst/$kver"
dk() { dkms --dkmstree "$t/dkms" --sourcetree "$t/root/usr/src" --installtree "$t/inst" --no-depmod "$@"; }
kv=(-k "$kver" --kernelsourcedir "$kdir")
expect "make dkms-install DESTDIR=…" make -s -C "$repo" dkms-install DESTDIR="$t/root"
expect "dkms.conf at the top of /usr/src/nvpeer-$ver" test -f "$t/root/usr/src/nvpeer-$ver/dkms.conf"
expect "dkms.conf version follows kmod/Kbuild" grep -qx "PACKAGE_VERSION=\"$ver\"" "$t/root/usr/src/nvpeer-$ver/dkms.conf"
# BUILD_DEPENDS names only the DKMS modules that exist (dkms sources dkms.conf with dkms_tree set).
deps() { env -i dkms_tree="$1" bash -c ". '$t/root/usr/src/nvpeer-$ver/dkms.conf'; echo \"\${BUILD_DEPENDS[*]:-}\""; }
mkdir -p "$t/fake/mlnx-ofed-kernel" "$t/fake/nvidia"
[ "$(deps "$t/none")" = "" ] && ok "no BUILD_DEPENDS without MOFED/NVIDIA DKMS modules" || bad "BUILD_DEPENDS: '$(deps "$t/none")'"
[ "$(deps "$t/fake")" = "mlnx-ofed-kernel nvidia" ] && ok "BUILD_DEPENDS mlnx-ofed-kernel nvidia when both are DKMS modules" || bad "BUILD_DEPENDS: '$(deps "$t/fake")'"
expect "dkms add" dk add "nvpeer/$ver" "${kv[@]}"
expect "dkms build ($kver)" dk build "nvpeer/$ver" "${kv[@]}"
[ $fail = 0 ] || cat "$t/dkms/nvpeer/$ver/$kver"/*/log/make.log 2>/dev/null | tail -n 30
expect "dkms install" dk install "nvpeer/$ver" "${kv[@]}"
ko=$(find "$t/inst/$kver" -name nvidia_peermem.ko | head -n1)
expect "installed under $kver/updates/" grep -q "/inst/$kver/updates/" <<<"$ko"
expect_ver=$(modinfo -F version "$ko" 2>&1)
[ "$expect_ver" = "$ver" ] && ok "installed module is nvpeer $ver" || bad "modinfo version '$expect_ver'"
expect "dkms status: installed" grep -q "nvpeer/$ver, $kver, .*: installed" <(dk status)
expect "dkms remove --all" dk remove "nvpeer/$ver" --all
[ -z "$(find "$t/inst" -name '*.ko')" ] && ok "module removed" || bad "module left in the install tree"
echo "[test-dkms] $pass ok, $fail failed"
[ $fail = 0 ]
