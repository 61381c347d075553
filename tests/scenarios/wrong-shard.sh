# SPDX-License-Identifier: GPL-2.0
# wrong-shard.sh KO_DIR: one 64 KiB registration and deregistration on the invalidating client,
# every module from KO_DIR. With the module tests/compat/test-wrong-shard.sh plants there (its
# shard locks off by one) the held-lock check must WARN, naming both shards, and the VM runner
# must then fail the run.
. "$(dirname "$0")/lib.sh"
ko_dir=${1:?KO_DIR}
mark register
expect "register and deregister one 64 KiB buffer (modules from $ko_dir)" python3 -c '
import os, sys
sys.path.insert(0, os.path.join(os.environ["NVPEER_REPO"], "tests", "scenarios"))
import coresim, nvsim
from stack import Stack
with Stack("5x-unmaps", client_params=["persistent_api_support=0"], ko_dir=sys.argv[1]):
    nv, core = nvsim.NvP2pSim(), coresim.PeerCoreSim()
    alloc = nv.alloc(64 << 10)
    core.dereg_mr(core.reg_mr(alloc.va, 64 << 10))
    alloc.free()
    core.close()
    nv.close()
' "$ko_dir"
expect "the kernel log names the state's shard and the lock's" \
    grep -q "nvpeer: state of shard [0-9]* reached under shard [0-9]*'s lock" <(dmesg_since register)
finish
