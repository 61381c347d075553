# SPDX-License-Identifier: GPL-2.0
# peer_core_sim, the stand-in for MOFED's peer-memory core, proves its own behaviour against its
# test-only client fake_client.ko, for each core generation (4x, 5x, 5x-unmaps: a build each, with
# that generation's exports; each refuses the others' generation=) with the
# memory_peers sysfs on and off: host vs peer path (acquire before or after GUP), GPU VA without a
# client, client order and first-wins, invalidating clients kept off CQ umems, duplicate names,
# the legacy tail on 4x, UNMAPS detection, the per-generation call order, invalidation semantics
# (who calls dma_unmap/put_pages/release and when, the registration window), the 5x-unmaps SG
# fix-up, NIC DMA both ways and EIO after invalidation, sysfs counting rules, unregister blocking,
# process exit and clean unload. The checks: tests/stand-ins/peer_core_sim/test/core_checks.py.
# Needs the modules built: make -C tests/stand-ins/peer_core_sim KDIR=...
# Run: tests/vm/run.sh peer-core-sim [GENERATION...]
set -euo pipefail
: "${NVPEER_REPO:?run through tests/vm/run.sh}"
dir=$NVPEER_REPO/tests/stand-ins/peer_core_sim
for ko in "$dir"/peer_core_sim.ko "$dir"/peer_core_sim_5x.ko "$dir"/peer_core_sim_4x.ko \
    "$dir"/ib_uverbs.ko "$dir/test/fake_client.ko"; do
    if [ ! -f "$ko" ]; then
        echo "FAIL  $ko is not built (make -C $dir KDIR=...)"
        exit 1
    fi
done
export PYTHONDONTWRITEBYTECODE=1
exec python3 "$dir/test/core_checks.py" "$@"
