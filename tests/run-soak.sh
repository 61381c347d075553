#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# `make soak`: the reliability suites with long iteration counts (CI runs them short in
# `make test`). SOAK_MINUTES sets the stress time per core generation (default 5), SOAK_RACES
# the dereg/cudaFree races per thread (default 2000), SOAK_THREADS the threads (default 8).
# Ends with the same reliability table as `make test`.
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
tests/setup/deps.sh || exit 1
. tests/setup/env.sh
KDIR=$(tests/kernel/build.sh) || exit 1
tests/build-all.sh "$KDIR" || exit 1
tests/reference/build.sh "$KDIR" tests/reference/out || exit 1
NVPEER_SUMMARY_DIR=$(mktemp -d /tmp/nvpeer-summary.XXXXXX)
export NVPEER_SUMMARY_DIR NVPEER_VM_TIMEOUT=$((${SOAK_MINUTES:-5} * 3 * 60 + 3600))
races=${SOAK_RACES:-2000} threads=${SOAK_THREADS:-8}
failed=0
run() { echo "=== soak: $*"; tests/vm/run.sh --kdir "$KDIR" "$@" || failed=$((failed + 1)); }
run stress $((${SOAK_MINUTES:-5} * 60)) "$threads"
run revocation ours "$races" "$threads"
run faults
run lifecycle 1000
run revocation reference "$races" "$threads"
tests/summary.py "$NVPEER_SUMMARY_DIR" || failed=$((failed + 1))
echo "soak: $failed failed"
[ $failed -eq 0 ]
