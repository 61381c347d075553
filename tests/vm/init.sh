#!/bin/busybox sh
# SPDX-License-Identifier: GPL-2.0
# /init of the test VM's initramfs (busybox only). Mounts the host's root filesystem (9p, read
# only; an arm64 guest's own root, with the repository and modules shared separately) under a
# tmpfs overlay, the run's output directory (9p, read-write) at the same path as
# on the host, and the test kernel's modules at /lib/modules/<release>; then runs the command
# in <out>/cmd.sh as root and powers off. No udev: devtmpfs gives every device node. /tmp stays
# the host's (through the overlay): the repository may live there. With nvpeer.systemd=1
# (run.sh --systemd) systemd is PID 1 instead: a target of our own starts the host's
# sysinit.target (journald, udevd and its coldplug, tmpfiles, ...) and then the command as a
# service (no other target of the host's), for suites that prove udev rules and units as they run
# on a booted host: a unit with default dependencies started before sysinit.target was reached
# would wait for it (20 s under TCG).
/bin/busybox mkdir -p /proc /sys /dev /lower /rw /newroot
/bin/busybox mount -t proc proc /proc
/bin/busybox mount -t sysfs sysfs /sys
/bin/busybox mount -t devtmpfs devtmpfs /dev
set -- $(/bin/busybox cat /proc/cmdline)
out="" mods="" repo="" modtag="" systemd=""
for a; do
    case "$a" in
    nvpeer.out=*) out=${a#nvpeer.out=} ;;
    nvpeer.mods=*) mods=${a#nvpeer.mods=} ;;
    nvpeer.repo=*) repo=${a#nvpeer.repo=} ;;
    nvpeer.modtag=*) modtag=${a#nvpeer.modtag=} ;;
    nvpeer.systemd=*) systemd=${a#nvpeer.systemd=} ;;
    esac
done
bb=/bin/busybox
fail() { echo "nvpeer-init: $*"; $bb poweroff -f; }
# A distribution kernel (run.sh --stock) has 9p and overlay as modules: they are in /modules.
if [ -f /modules/order ]; then
    for m in $($bb cat /modules/order); do $bb insmod "/modules/$m" || fail "cannot load $m"; done
fi
$bb mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=512000,cache=loose hostroot /lower || fail "cannot mount the host root"
$bb mount -t tmpfs -o mode=0755 tmpfs /rw
$bb mkdir -p /rw/upper /rw/work
$bb mount -t overlay overlay -o lowerdir=/lower,upperdir=/rw/upper,workdir=/rw/work /newroot \
    || fail "cannot mount the overlay root"
# An arm64 guest's root is not the host's (run.sh): the repository and the modules come as
# shares of their own.
if [ -n "$repo" ]; then
    $bb mkdir -p "/newroot$repo"
    $bb mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=512000,cache=loose nvpeerrepo "/newroot$repo" \
        || fail "cannot mount the repository"
fi
if [ -n "$mods" ]; then
    rel=$($bb uname -r)
    $bb mkdir -p "/newroot/lib/modules/$rel"
    if [ -n "$modtag" ]; then
        $bb mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=512000 nvpeermods "/newroot/lib/modules/$rel" \
            || fail "cannot mount the modules"
    else
        $bb mount --bind "/newroot$mods" "/newroot/lib/modules/$rel"
    fi
fi
for d in proc sys dev; do $bb mount --move /$d /newroot/$d; done
$bb mount -t tmpfs tmpfs /newroot/run
$bb mkdir -p "/newroot$out"
$bb mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000 nvpeerout "/newroot$out" || fail "cannot mount $out"
$bb mkdir -p /newroot/dev/pts /newroot/dev/shm
$bb mount -t devpts devpts /newroot/dev/pts
$bb ln -sf /proc/self/fd /newroot/dev/fd
$bb ln -sf /proc/self/fd/0 /newroot/dev/stdin
$bb ln -sf /proc/self/fd/1 /newroot/dev/stdout
$bb ln -sf /proc/self/fd/2 /newroot/dev/stderr
$bb mount -t tmpfs tmpfs /newroot/dev/shm
$bb mount -t debugfs debugfs /newroot/sys/kernel/debug
$bb hostname nvpeer-vm
$bb cat > /newroot/etc/nvpeer-vm.sh <<EOF
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root TERM=dumb
ip link set lo up 2>/dev/null
cd '$out' && /bin/bash '$out/cmd.sh' > /dev/console 2>&1
sync; /bin/busybox poweroff -f
EOF
if [ "$systemd" = 1 ]; then
    units=/newroot/etc/systemd/system
    $bb mkdir -p $units
    $bb cat > $units/nvpeer-vm.target <<EOF
[Unit]
Description=nvpeer test VM
Wants=sysinit.target systemd-journald.service systemd-udevd.service nvpeer-vm.service
EOF
    $bb cat > $units/nvpeer-vm.service <<EOF
[Unit]
Description=nvpeer test suite
DefaultDependencies=no
After=sysinit.target systemd-journald.service systemd-udevd.service
[Service]
Type=oneshot
TimeoutStartSec=infinity
ExecStart=/bin/sh /etc/nvpeer-vm.sh
EOF
    # tmpfiles' boot run empties /tmp (tmp.conf's `D /tmp`): the repository may live there.
    $bb mkdir -p /newroot/etc/tmpfiles.d
    $bb ln -sf /dev/null /newroot/etc/tmpfiles.d/tmp.conf
    exec $bb switch_root /newroot /lib/systemd/systemd --unit=nvpeer-vm.target
fi
exec $bb chroot /newroot /bin/sh /etc/nvpeer-vm.sh
