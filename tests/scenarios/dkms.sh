# SPDX-License-Identifier: GPL-2.0
# DKMS in the VM (root is an overlay: /usr/src, /var/lib/dkms and /lib/modules/<kver> changes
# vanish after): `make dkms-install`, then dkms add/build/install against the test kernel tree
# (/lib/modules/<kver>/build links to it), modprobe loads the DKMS-built module, dkms remove.
. "$(dirname "$0")/lib.sh"
. "$REPO/tests/setup/env.sh"   # rustc (rustup) on PATH: the build needs the kernel's rustc
kver=$(uname -r)
ver=$(sed -n 's/^NVPEER_VERSION ?= //p' "$REPO/kmod/Kbuild")

expect "dkms is installed (tests/setup/deps.sh)" command -v dkms
expect "/lib/modules/$kver/build is the test kernel tree" test -f /lib/modules/$kver/build/rust/libkernel.rmeta
expect "make dkms-install" make -s -C "$REPO" dkms-install
expect "source tree /usr/src/nvpeer-$ver has dkms.conf" test -f /usr/src/nvpeer-$ver/dkms.conf
expect_eq "dkms.conf PACKAGE_VERSION follows kmod/Kbuild" "PACKAGE_VERSION=\"$ver\"" "$(grep ^PACKAGE_VERSION= /usr/src/nvpeer-$ver/dkms.conf)"
expect "dkms add" dkms add nvpeer/$ver
expect "dkms build -k $kver" dkms build nvpeer/$ver -k "$kver"
[ "$FAILED" = 0 ] || cat /var/lib/dkms/nvpeer/$ver/build/make.log /var/lib/dkms/nvpeer/$ver/$kver/*/log/make.log 2>/dev/null | tail -n 30
expect "dkms install -k $kver" dkms install nvpeer/$ver -k "$kver"
expect "dkms status: installed" grep -q "nvpeer/$ver, $kver, .*: installed" <(dkms status)
ko=$(modinfo -n nvidia_peermem 2>&1)
expect "modinfo -n finds the DKMS module under updates/ ($ko)" grep -q "^/lib/modules/$kver/updates/" <<<"$ko"
expect "insmod nv_p2p_sim" insmod "$SIM_DIR/nv_p2p_sim/nv_p2p_sim.ko"
expect "insmod peer_core_sim" insmod "$SIM_DIR/peer_core_sim/peer_core_sim.ko"
expect "modprobe nvidia_peermem (the DKMS build)" modprobe nvidia_peermem
expect_eq "ours is loaded" "nvpeer $ver" "$(cat /sys/module/nvidia_peermem/nvpeer/implementation 2>&1)"
expect "modprobe -r nvidia_peermem" modprobe -r nvidia_peermem
expect "dkms remove --all" dkms remove nvpeer/$ver --all
expect_fail "module gone from /lib/modules/$kver" modinfo -n nvidia_peermem
expect "make dkms-uninstall" make -s -C "$REPO" dkms-uninstall
expect_fail "/usr/src/nvpeer-$ver removed" test -e /usr/src/nvpeer-$ver
expect "rmmod the stand-ins" rmmod peer_core_sim nv_p2p_sim
finish
