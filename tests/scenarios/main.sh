# SPDX-License-Identifier: GPL-2.0
# The main job, in the VM: bring up Soft-RoCE, load the module, print `nvpeer check`.
# It checks what must hold today (module loaded and recognised, RDMA device seen, the command ran)
# and prints the full report for the reader.
. "$(dirname "$0")/lib.sh"
nvpeer=$REPO/userspace/target/release/nvpeer

expect "modprobe rdma_rxe" modprobe rdma_rxe
ip link add nvpeer0 type dummy && ip link set nvpeer0 up
expect "rdma link add rxe0 (Soft-RoCE over a dummy netdev)" rdma link add rxe0 type rxe netdev nvpeer0
# No GPU and no MOFED here: the stand-ins provide nvidia.ko's P2P API and MOFED's peer-memory core.
expect "insmod nv_p2p_sim (stand-in for nvidia.ko)" insmod "$SIM_DIR/nv_p2p_sim/nv_p2p_sim.ko"
expect "insmod peer_core_sim (stand-in for MOFED's ib_core)" insmod "$SIM_DIR/peer_core_sim/peer_core_sim.ko"
expect "insmod nvidia_peermem.ko" insmod "$KO_DIR/nvidia_peermem.ko"

echo "----- nvpeer check -----"
"$nvpeer" check; rc=$?
echo "----- exit code $rc (0 ready, 1 a check failed) -----"
expect "nvpeer check ran (exit 0 or 1)" test "$rc" -le 1
json=$("$nvpeer" check --json)
status_of() { python3 -c 'import json,sys; r=json.load(sys.stdin); print(next(c["status"] for c in r["checks"] if c["id"]==sys.argv[1]))' "$1" <<<"$json"; }
expect_eq "check: module is ok (ours recognised)" ok "$(status_of module)"
expect_eq "check: rdma_devices is ok (rxe0)" ok "$(status_of rdma_devices)"

expect "rmmod nvidia_peermem and the stand-ins" rmmod nvidia_peermem peer_core_sim nv_p2p_sim
rdma link delete rxe0
finish
