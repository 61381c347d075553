#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# `make bench-rdma`: nvpeer bench vs perftest (ib_write_bw, ib_read_bw, ib_write_lat,
# ib_send_lat) on one Soft-RoCE device in one VM run; prints the ratios (tests/BENCHMARKS.md).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
tests/setup/deps.sh
. tests/setup/env.sh
KDIR=$(tests/kernel/build.sh)
(cd userspace && cargo build --locked --release -q)
exec tests/vm/run.sh --bench --kdir "$KDIR" bench-rdma
