#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# vm-kernel.sh VDIR RELEASE DEB...: lays out Debian's own kernel of RELEASE for the VM runner
# (tests/vm/run.sh --stock) in VDIR from its packages (trixie: linux-binary- and linux-modules-;
# bookworm: linux-image-): vmlinuz, the modules tree for the guest's /lib/modules, and the
# modules the VM's initramfs needs before it can mount the host's root (9p, overlay),
# decompressed for busybox insmod, in dependency order. Done once (VDIR/ready); prints VDIR.
set -euo pipefail
die() { echo "vm-kernel: $*" >&2; exit 1; }
vdir=$1 release=$2; shift 2
if [ ! -f "$vdir/ready" ]; then
    rm -rf "$vdir"; mkdir -p "$vdir/x" "$vdir/initrd-modules"
    for deb; do dpkg-deb -x "$deb" "$vdir/x"; done
    m='' k=''
    for d in "$vdir/x/lib/modules/$release" "$vdir/x/usr/lib/modules/$release"; do [ -d "$d" ] && { m=$d; break; }; done
    [ -n "$m" ] || die "no modules directory for $release in $*"
    for f in "$m/vmlinuz" "$vdir/x/boot/vmlinuz-$release"; do [ -f "$f" ] && { k=$f; break; }; done
    [ -n "$k" ] || die "no vmlinuz for $release in $*"
    cp "$k" "$vdir/vmlinuz"
    mkdir -p "$vdir/modroot/lib/modules"; mv "$m" "$vdir/modroot/lib/modules/"; rm -rf "$vdir/x"
    ln -s "modroot/lib/modules/$release" "$vdir/modules"
    depmod -b "$vdir/modroot" "$release" || die "depmod for $release failed"
    # Dependency order from modules.dep (a module's dependencies first).
    declare -A seen=()
    order=()
    add() { local path=$1 d deps; if [ -n "${seen[$path]:-}" ]; then return 0; fi; seen[$path]=1
        read -ra deps < <(awk -F': ' -v m="$path" '$1 == m {print $2}' "$vdir/modules/modules.dep") || true   # none: EOF
        for d in "${deps[@]}"; do add "$d"; done
        order+=("$path"); }
    # virtio_pci: a module on Debian 12's kernels (built in on 13's), and the transport without
    # which 9pnet_virtio finds no channel.
    for name in virtio_pci 9pnet_virtio 9p overlay; do
        p=$(awk -F: -v n="$name" '{f=$1; sub(/.*\//,"",f); sub(/\.ko(\.[a-z]+)?$/,"",f); if (f == n) {print $1; exit}}' "$vdir/modules/modules.dep")
        if [ -z "$p" ]; then
            [ "$name" = virtio_pci ] && continue   # built in
            die "$release has no module $name (the VM needs it to mount the host root)"
        fi
        add "$p"
    done
    for p in "${order[@]}"; do
        b=$(basename "$p"); b=${b%.xz}; b=${b%.zst}; b=${b%.gz}
        case "$p" in *.xz) xz -dc "$vdir/modules/$p" ;; *.zst) zstd -dqc "$vdir/modules/$p" ;; *.gz) gzip -dc "$vdir/modules/$p" ;; *) cat "$vdir/modules/$p" ;; esac > "$vdir/initrd-modules/$b"
        echo "$b" >> "$vdir/initrd-modules/order"
    done
    touch "$vdir/ready"
    echo "vm-kernel: Debian's $release kernel for the VM: $vdir (initramfs modules: $(tr '\n' ' ' < "$vdir/initrd-modules/order"))" >&2
fi
echo "$vdir"
