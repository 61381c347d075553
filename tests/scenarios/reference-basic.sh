# SPDX-License-Identifier: GPL-2.0
# NVIDIA's nvidia-peermem.ko (tests/reference/build.sh) against the stand-ins, per MOFED core
# generation 4x, 5x, 5x-unmaps: an unaligned GPU MR, NIC DMA both ways, cudaFree while registered
# (invalidation counted in memory_peers and the stand-in), dereg, counters back to zero, unload.
# The runner (tests/vm/run.sh) fails the run on any leak, lockdep, KFENCE or SLUB report; every
# slab cache is validated after each generation so a write into a freed object is always seen.
# 550.163.01 on 4x writes into its freed context (nvidia-peermem.c, nv_get_p2p_free_callback:
# callback_task = NULL after the core's release): tests/reference/expect-4x-uaf.sh runs that case.
# Run: tests/vm/run.sh reference-basic [GENERATION...]
set -euo pipefail
: "${NVPEER_REPO:?run through tests/vm/run.sh}"
. "$NVPEER_REPO/tests/setup/env.sh"
export PYTHONDONTWRITEBYTECODE=1
exec python3 "$NVPEER_REPO/tests/scenarios/reference_basic.py" "$@"
