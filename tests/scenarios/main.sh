# SPDX-License-Identifier: GPL-2.0
# The main job, in the VM: bring up Soft-RoCE, load the module, print `nvpeer check`, then show a
# registration through our client (`nvpeer selftest --mem sim` between two `nvpeer stats`).
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
echo "(the gpus check fails here: this VM has no NVIDIA GPU; the stand-in nv_p2p_sim plays nvidia.ko)"

# A registration going through our client, in this boot: the counters, the self-test, the counters.
registrations() { "$nvpeer" stats --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["counters"]["registrations"])'; }
echo "----- nvpeer stats (before) -----"
"$nvpeer" stats
before=$(registrations)
echo "----- nvpeer selftest --mem sim -----"
"$nvpeer" selftest --mem sim; rc=$?
expect_eq "selftest --mem sim passed (one registration through our client, verified)" 0 "$rc"
echo "----- nvpeer stats (after) -----"
"$nvpeer" stats
expect_eq "stats: registrations +1 through our client" 1 "$(( $(registrations) - before ))"
cat <<'MSG'
----- what this showed -----
Shown here, with stand-ins: our module loaded and recognised by `nvpeer check`; a "GPU" buffer
(nv_p2p_sim's memory, the nvidia.ko stand-in) registered through our peer-memory client by the
MOFED core stand-in (peer_core_sim), a pattern moved both ways by "NIC" DMA (QEMU's edu device)
and verified, and the module's counters counting exactly that registration and its release.
A real host adds: nvidia.ko with a GPU, MOFED/DOCA-OFED's core, an RDMA NIC. There run
`nvpeer check`, then `nvpeer selftest` (CUDA memory, ibv_reg_mr on the NIC) and `nvpeer bench
--mem cuda` (userspace/README.md).
MSG

expect "rmmod nvidia_peermem and the stand-ins" rmmod nvidia_peermem peer_core_sim nv_p2p_sim
rdma link delete rxe0
finish
