# SPDX-License-Identifier: GPL-2.0
# `make install` / `make uninstall` in the VM (root is an overlay: everything vanishes after).
# The installed module is loaded by modprobe (depmod, softdep, kept options), the CLI and the unit
# are in place, and uninstall removes every file the manifest listed.
. "$(dirname "$0")/lib.sh"
. "$REPO/tests/setup/env.sh"   # rustc (rustup) on PATH for find-deps
kver=$(uname -r)
kdir=/lib/modules/$kver/build
manifest=/var/lib/nvpeer/manifest
mk() { make -s -C "$REPO" KDIR="$kdir" "$@"; }

expect "test kernel tree at $kdir passes find-deps" "$REPO/kmod/scripts/find-deps.sh" "$kdir"
# A user's option line already in modprobe.d must survive the install.
mkdir -p /etc/modprobe.d
echo "options nvidia_peermem peerdirect_support=1" > /etc/modprobe.d/nvpeer.conf
ko_mtime=$(stat -c %Y "$REPO/kmod/nvidia_peermem.ko")
expect "make install" mk install
expect_eq "make install did not rebuild the module" "$ko_mtime" "$(stat -c %Y "$REPO/kmod/nvidia_peermem.ko")"
expect "manifest written" test -s $manifest
want="/lib/modules/$kver/updates/nvidia_peermem.ko
/etc/modules-load.d/nvpeer.conf
/etc/modprobe.d/nvpeer.conf
/usr/local/bin/nvpeer
/etc/systemd/system/nvpeer.service"
expect_eq "manifest lists the five files first" "$want" "$(head -n5 $manifest 2>&1)"
for f in /usr/local/share/man/man1/nvpeer.1 /usr/local/share/man/man1/nvpeer-check.1 \
    /usr/local/share/bash-completion/completions/nvpeer /usr/local/share/zsh/site-functions/_nvpeer \
    /usr/local/share/fish/vendor_completions.d/nvpeer.fish; do
    expect "manifest lists $f (generated from the clap definitions)" grep -qx "$f" $manifest
done
want=$(cat $manifest)
while IFS= read -r f; do expect "installed: $f" test -f "$f"; done < $manifest
expect "module identical to the built one" cmp "$REPO/kmod/nvidia_peermem.ko" "/lib/modules/$kver/updates/nvidia_peermem.ko"
expect_eq "modules-load.d names the module" nvidia_peermem "$(grep -v '^#' /etc/modules-load.d/nvpeer.conf)"
expect "modprobe.d has the softdep" grep -qx "softdep nvidia_peermem pre: nvidia ib_core ib_uverbs" /etc/modprobe.d/nvpeer.conf
expect "modprobe.d kept the user's options" grep -qx "options nvidia_peermem peerdirect_support=1" /etc/modprobe.d/nvpeer.conf
expect "depmod ran: modules.dep lists updates/nvidia_peermem.ko" grep -q "^updates/nvidia_peermem.ko:" /lib/modules/$kver/modules.dep
expect_eq "modinfo -n resolves to the installed module" "/lib/modules/$kver/updates/nvidia_peermem.ko" "$(modinfo -n nvidia_peermem 2>&1)"
expect "unit starts modprobe nvidia_peermem" grep -qx "ExecStart=/sbin/modprobe nvidia_peermem" /etc/systemd/system/nvpeer.service
expect "unit runs nvpeer check after" grep -qx "ExecStartPost=-/usr/local/bin/nvpeer check" /etc/systemd/system/nvpeer.service

# The stand-ins are not installed: load them first, as nvidia.ko and ib_core would be.
expect "insmod nv_p2p_sim" insmod "$SIM_DIR/nv_p2p_sim/nv_p2p_sim.ko"
expect "insmod peer_core_sim" insmod "$SIM_DIR/peer_core_sim/peer_core_sim.ko"
expect "modprobe nvidia_peermem (softdeps nvidia, ib_core, ib_uverbs absent: skipped)" modprobe nvidia_peermem
expect_eq "ours is loaded" "nvpeer $(modinfo -F version "$REPO/kmod/nvidia_peermem.ko")" "$(cat /sys/module/nvidia_peermem/nvpeer/implementation 2>&1)"
expect_eq "modprobe.d option in effect (peerdirect_support=1)" 1 "$(cat /sys/module/nvidia_peermem/parameters/peerdirect_support 2>&1)"
/usr/local/bin/nvpeer check --all >/tmp/check.out 2>&1; rc=$?
expect "installed nvpeer check runs (exit 0 or 1)" test "$rc" -le 1
expect "... and recognises the module" grep -q nvidia_peermem /tmp/check.out
expect "modprobe -r nvidia_peermem" modprobe -r nvidia_peermem
expect_fail "unloaded" test -e /sys/module/nvidia_peermem

expect "make uninstall" mk uninstall
while IFS= read -r f; do expect_fail "removed: $f" test -e "$f"; done <<<"$want"
expect_fail "manifest removed" test -e $manifest
expect_fail "depmod ran: modules.dep no longer lists it" grep -q "updates/nvidia_peermem.ko" /lib/modules/$kver/modules.dep
expect_fail "modprobe no longer finds nvidia_peermem" modinfo -n nvidia_peermem
expect_fail "make uninstall again: nothing to remove (refused)" mk uninstall

# DESTDIR + PREFIX: nothing outside the staging dir, no depmod.
stage=$(mktemp -d)
expect "make install DESTDIR=… PREFIX=/usr" mk install DESTDIR="$stage" PREFIX=/usr
expect "CLI under PREFIX" test -x "$stage/usr/bin/nvpeer"
expect "unit's ExecStartPost follows PREFIX" grep -q "ExecStartPost=-/usr/bin/nvpeer check" "$stage/etc/systemd/system/nvpeer.service"
expect_fail "nothing installed outside DESTDIR" test -e /usr/bin/nvpeer -o -e $manifest
expect "make uninstall DESTDIR=…" mk uninstall DESTDIR="$stage"
expect_eq "staging dir holds no files after uninstall" "" "$(find "$stage" -type f)"
rm -rf "$stage"
expect "rmmod the stand-ins" rmmod peer_core_sim nv_p2p_sim
finish
