#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Prints the kernel build tree to build against: $KDIR when set; else the running kernel's
# /lib/modules/$(uname -r)/build when it is there (its headers package: the module builds on the
# kernel's Rust or on our own runtime, kmod/scripts/find-deps.sh picks); else the project's test kernel
# (installing the toolchain and building it once, then cached), which is what a machine without
# the running kernel's headers (this project's development and CI machines) builds for.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
if [ -n "${KDIR:-}" ]; then echo "$KDIR"; exit 0; fi
running=/lib/modules/$(uname -r)/build
if [ -f "$running/.config" ] && [ -f "$running/Makefile" ]; then
    echo "$running"; exit 0
fi
echo "kdir: no build tree for the running kernel at $running (install its headers package to build for it); using the project's test kernel (tests/kernel)" >&2
"$here/deps.sh" >&2
exec "$here/../kernel/build.sh"
