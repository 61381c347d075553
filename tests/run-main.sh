#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# The main job (README: `make run`): installs what is needed, builds the test kernel (cached),
# the module and the CLI, then boots the test kernel, loads the module, prints `nvpeer check` and
# shows one registration through our client (`nvpeer selftest --mem sim` between two `nvpeer stats`).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
tests/setup/deps.sh
. tests/setup/env.sh
KDIR=$(tests/kernel/build.sh)
tests/build-all.sh "$KDIR"
(cd userspace && cargo build --locked --release -q)
exec tests/vm/run.sh --kdir "$KDIR" main
