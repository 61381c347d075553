# SPDX-License-Identifier: GPL-2.0
# The Debian packages in the VM (root is an overlay: dpkg's database, /usr/src, /var/lib/dkms and
# /lib/modules/<kver> changes vanish after). Takes build/deb/*.deb as built on the host by
# `make deb` (tests/install/test-deb.sh builds them). `dpkg -i nvpeer-dkms`: its postinst (dh_dkms,
# dkms's common.postinst) adds, builds and installs the module for the running test kernel
# (/lib/modules/<kver>/build links to its tree); modprobe loads that build; `dpkg -r` removes the
# module and every DKMS trace. `dpkg -i nvpeer` (in the same run): CLI, man pages, completions,
# unit; -r, -P. Then `make dkms-install` puts the same tree; dkms add; `make dkms-uninstall`.
. "$(dirname "$0")/lib.sh"
. "$REPO/tests/setup/env.sh"   # rustc (rustup) on PATH: the postinst's dkms build needs it
kver=$(uname -r)
ver=$(sed -n 's/^NVPEER_VERSION ?= //p' "$REPO/kmod/Kbuild")
dk=$REPO/build/deb/nvpeer-dkms_${ver}_all.deb
cli=$REPO/build/deb/nvpeer_${ver}_$(dpkg --print-architecture).deb
status() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null; }
ours() { find /lib/modules/$kver -name 'nvidia_peermem.ko*' 2>/dev/null; }

expect "$dk built on the host (make deb)" test -s "$dk"
expect "$cli built on the host (make deb)" test -s "$cli"
expect "dkms is installed (tests/setup/deps.sh)" command -v dkms
expect "/lib/modules/$kver/build is the test kernel tree" test -f /lib/modules/$kver/build/rust/libkernel.rmeta
expect_eq "no nvpeer module for $kver before" "" "$(ours)"
expect_eq "no nvpeer DKMS state before" "" "$(dkms status nvpeer 2>&1)"

# nvpeer-dkms: the postinst builds and installs for the running kernel.
# The guest's root is an overlay whose tmpfs upper has no xattrs, so overlayfs cannot rename a
# directory it created (EXDEV), which dpkg does for every new one (<dir>.dpkg-new -> <dir>).
# Creating the packages' directories first leaves dpkg only files to rename. A rig limit, not
# the packages': on a real root both install without this.
premake_dirs() { dpkg-deb -c "$1" | awk '$1 ~ /^d/ {print $6}' | while read -r d; do mkdir -p "/$d"; done; }
# man-db's dpkg trigger re-indexes every manual page, minutes over 9p under TCG: off, as in
# containers (man-db reads this flag file).
rm -f /var/lib/man-db/auto-update
premake_dirs "$dk"
premake_dirs "$cli"
# Both packages in one dpkg run, removed in one: each dpkg run reads its whole database, many
# seconds over 9p under TCG.
expect "dpkg -i nvpeer-dkms nvpeer (nvpeer-dkms's postinst: dkms add, build, install for $kver)" \
    dpkg -i "$dk" "$cli"
[ "$FAILED" = 0 ] || cat /var/lib/dkms/nvpeer/$ver/build/make.log /var/lib/dkms/nvpeer/$ver/$kver/*/log/make.log 2>/dev/null | tail -n 30
expect_eq "dpkg: nvpeer-dkms installed" "install ok installed" "$(status nvpeer-dkms)"
expect "dkms.conf in /usr/src/nvpeer-$ver has BUILD_EXCLUSIVE_KERNEL" grep -qF 'BUILD_EXCLUSIVE_KERNEL="^(5\.(1[4-9]|' /usr/src/nvpeer-$ver/dkms.conf
expect "dkms status: nvpeer/$ver installed for $kver" grep -q "nvpeer/$ver, $kver, .*: installed" <(dkms status nvpeer)
ko=$(modinfo -n nvidia_peermem 2>&1)
expect "modinfo -n finds the DKMS build under updates/ ($ko)" grep -q "^/lib/modules/$kver/updates/" <<<"$ko"
expect_eq "the DKMS build is nvpeer $ver" "$ver" "$(modinfo -F version nvidia_peermem 2>&1)"
# The stand-ins are not DKMS modules: load them first, as nvidia.ko and ib_core would be.
expect "insmod nv_p2p_sim" insmod "$SIM_DIR/nv_p2p_sim/nv_p2p_sim.ko"
expect "insmod peer_core_sim" insmod "$SIM_DIR/peer_core_sim/peer_core_sim.ko"
expect "modprobe nvidia_peermem (the packaged DKMS build)" modprobe nvidia_peermem
expect_eq "ours is loaded" "nvpeer $ver" "$(cat /sys/module/nvidia_peermem/nvpeer/implementation 2>&1)"
expect "modprobe -r nvidia_peermem" modprobe -r nvidia_peermem
sums() { (cd "$1" && find . -type f -exec sha256sum {} + | sort -k2); }
sums /usr/src/nvpeer-$ver > /tmp/nvpeer-dkms.sums

# nvpeer: the CLI package.
expect_eq "dpkg: nvpeer installed" "install ok installed" "$(status nvpeer)"
expect_eq "/usr/bin/nvpeer --version" "nvpeer $ver" "$(/usr/bin/nvpeer --version 2>&1)"
expect_eq "man finds nvpeer-check(1)" /usr/share/man/man1/nvpeer-check.1.gz "$(man -w nvpeer-check 2>&1)"
expect "bash completion in place" test -s /usr/share/bash-completion/completions/nvpeer
unit=/lib/systemd/system/nvpeer.service
[ -e $unit ] || unit=/usr/lib/systemd/system/nvpeer.service
expect "unit nvpeer.service in place, @BINDIR@ filled" grep -qx 'ExecStartPost=-/usr/bin/nvpeer check' "${unit:-/nonexistent}"
expect "NHC file in place" test -s /etc/nhc/scripts/nvpeer.nhc

expect "dpkg -r nvpeer-dkms nvpeer (nvpeer-dkms's prerm: dkms remove --all)" dpkg -r nvpeer-dkms nvpeer
expect_fail "dpkg: nvpeer-dkms no longer installed ($(status nvpeer-dkms))" grep -q 'ok installed' <(status nvpeer-dkms)
expect_eq "no nvidia_peermem left in /lib/modules/$kver (updates/dkms)" "" "$(ours)"
expect_fail "modprobe no longer finds nvidia_peermem" modinfo -n nvidia_peermem
expect_eq "dkms status: nothing for nvpeer" "" "$(dkms status nvpeer 2>&1)"
expect_fail "/var/lib/dkms/nvpeer removed" test -e /var/lib/dkms/nvpeer
expect_fail "/usr/src/nvpeer-$ver removed" test -e /usr/src/nvpeer-$ver
expect_fail "/usr/bin/nvpeer removed" test -e /usr/bin/nvpeer
expect "conffile /etc/nhc/scripts/nvpeer.nhc kept until purge" test -e /etc/nhc/scripts/nvpeer.nhc
expect "dpkg -P nvpeer" dpkg -P nvpeer
expect_fail "conffile purged" test -e /etc/nhc/scripts/nvpeer.nhc

# `make dkms-install`, the source install without a package, puts the very tree the package
# ships (the package's build above is its build; tests/install/test-dkms.sh builds it with dkms on
# the host too), so one in-VM build covers both: here the default paths, dkms add, and the
# uninstall that removes both.
expect "make dkms-install" make -s -C "$REPO" dkms-install
expect "make dkms-install's /usr/src/nvpeer-$ver is the packaged tree, file for file" \
    diff /tmp/nvpeer-dkms.sums <(sums /usr/src/nvpeer-$ver)
expect "dkms add" dkms add nvpeer/$ver
expect "dkms status: nvpeer/$ver added" grep -qx "nvpeer/$ver: added" <(dkms status nvpeer)
expect "make dkms-uninstall (dkms remove --all, the tree)" make -s -C "$REPO" dkms-uninstall
expect_fail "/usr/src/nvpeer-$ver removed (make dkms-uninstall)" test -e /usr/src/nvpeer-$ver
expect_eq "dkms status: nothing for nvpeer (make dkms-uninstall)" "" "$(dkms status nvpeer 2>&1)"
expect "rmmod the stand-ins" rmmod peer_core_sim nv_p2p_sim
finish
