#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Prints the kernel build tree to build against: $KDIR when set; else the running kernel's
# /lib/modules/$(uname -r)/build when it has CONFIG_RUST=y and Rust build artefacts; else the
# project's test kernel (installing the toolchain and building it once, then cached).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
if [ -n "${KDIR:-}" ]; then echo "$KDIR"; exit 0; fi
running=/lib/modules/$(uname -r)/build
if [ -f "$running/.config" ] && grep -q '^CONFIG_RUST=y' "$running/.config" \
   && [ -f "$running/rust/libkernel.rmeta" ]; then
    echo "$running"; exit 0
fi
echo "kdir: $running has no Rust-enabled build tree; using the project's test kernel (tests/kernel)" >&2
"$here/deps.sh" >&2
exec "$here/../kernel/build.sh"
