# SPDX-License-Identifier: GPL-2.0
# The module skeleton: modinfo, load, sysfs version and parameters, bad parameters, unload.
. "$(dirname "$0")/lib.sh"
ko=$KO_DIR/nvidia_peermem.ko
version=$(modinfo -F version "$ko")

expect "modinfo has a version" test -n "$version"
expect_eq "modinfo license" "GPL" "$(modinfo -F license "$ko")"
expect "modinfo description" test -n "$(modinfo -F description "$ko")"
expect "modinfo author" test -n "$(modinfo -F author "$ko")"
expect_eq "modinfo softdep" "pre: nvidia ib_core ib_uverbs" "$(modinfo -F softdep "$ko")"
expect_eq "modinfo name" "nvidia_peermem" "$(modinfo -F name "$ko")"

# Without the providers the load fails with our diagnosis, not the loader's "Unknown symbol".
mark no-core
expect_fail "insmod without a peer-memory IB core is refused" insmod "$ko"
expect "... naming the missing ib_register_peer_memory_client" grep -q "ib_register_peer_memory_client not found" <(dmesg_since no-core)
expect "insmod peer_core_sim (the MOFED core stand-in)" insmod "$SIM_DIR/peer_core_sim/peer_core_sim.ko"
mark no-nvidia
expect_fail "insmod without nvidia.ko is refused" insmod "$ko"
expect "... naming the missing nvidia_p2p_* symbols" grep -q "nvidia_p2p_\* symbols not found" <(dmesg_since no-nvidia)
expect "insmod nv_p2p_sim (the nvidia.ko stand-in)" insmod "$SIM_DIR/nv_p2p_sim/nv_p2p_sim.ko"

mark defaults
expect "insmod with defaults" insmod "$ko"
# peer_core_sim.ko is the 5x-unmaps core: it exports ib_umem_stop_invalidation_notifier.
expect_eq "nvpeer/core names the detected core generation" 5x-unmaps "$(cat /sys/module/nvidia_peermem/nvpeer/core 2>&1)"
expect "the load log names it" grep -q "nvidia_peermem: nvpeer [^ ]* loaded: core 5x-unmaps (MOFED" <(dmesg_since defaults)
expect_fail "... and reports no contradiction for the default peerdirect_support=0" grep -q "contradicts the detected core" <(dmesg_since defaults)
expect_eq "/sys/module/nvidia_peermem/version" "$version" "$(cat /sys/module/nvidia_peermem/version 2>&1)"
expect_eq "implementation marker" "nvpeer $version" "$(cat /sys/module/nvidia_peermem/nvpeer/implementation 2>&1)"
for p in peerdirect_support persistent_api_support; do
    expect_eq "parameter $p is mode 0444" "444" "$(stat -c %a /sys/module/nvidia_peermem/parameters/$p 2>&1)"
done
expect_eq "default peerdirect_support" 0 "$(cat /sys/module/nvidia_peermem/parameters/peerdirect_support)"
expect_eq "default persistent_api_support" 1 "$(cat /sys/module/nvidia_peermem/parameters/persistent_api_support)"
expect "rmmod" rmmod nvidia_peermem
expect_fail "gone from /sys/module after rmmod" test -e /sys/module/nvidia_peermem

mark legacy-params
expect "insmod peerdirect_support=1 persistent_api_support=0" insmod "$ko" peerdirect_support=1 persistent_api_support=0
expect_eq "peerdirect_support=1 on an UNMAPS core: one line, the detection wins" 1 \
    "$(dmesg_since legacy-params | grep -c 'peerdirect_support=1 contradicts the detected core 5x-unmaps (.*): following the core')"
expect "... so nv_mem is still registered in the _ex UNMAPS form" grep -q "registered peer-memory client nv_mem (Invalidating, ExUnmaps" <(dmesg_since legacy-params)
expect_eq "peerdirect_support=1 in effect" 1 "$(cat /sys/module/nvidia_peermem/parameters/peerdirect_support)"
expect_eq "persistent_api_support=0 in effect" 0 "$(cat /sys/module/nvidia_peermem/parameters/persistent_api_support)"
expect "rmmod" rmmod nvidia_peermem

for bad in peerdirect_support=2 persistent_api_support=-1; do
    mark "$bad"
    expect_fail "insmod $bad is refused" insmod "$ko" "$bad"
    expect "log line names ${bad%%=*}" grep -q "invalid ${bad}:" <(dmesg_since "$bad")
    expect_fail "nothing left loaded after $bad" test -e /sys/module/nvidia_peermem
done

legacy=$KO_DIR/nv_peer_mem.ko
if [ -f "$legacy" ]; then
    expect "insmod nvidia_peermem" insmod "$ko"
mark beside
expect_fail "nv_peer_mem refused beside a loaded nvidia_peermem" insmod "$legacy"
expect "... with a log line saying what to do" grep -q "nv_peer_mem: nvidia_peermem is loaded: only one GPU peer-memory module may run" <(dmesg_since beside)
expect "rmmod nvidia_peermem" rmmod nvidia_peermem
expect "insmod the legacy name nv_peer_mem" insmod "$legacy"
    expect_eq "/sys/module/nv_peer_mem/version" "$version" "$(cat /sys/module/nv_peer_mem/version 2>&1)"
    expect "log prefix is nv_peer_mem" grep -qE "nv_peer_mem: nvpeer [^ ]+ loaded" <(dmesg)
    mark beside2
    expect_fail "nvidia_peermem refused beside a loaded nv_peer_mem" insmod "$ko"
    expect "... with a log line saying what to do" grep -q "nvidia_peermem: nv_peer_mem is loaded" <(dmesg_since beside2)
    expect "rmmod nv_peer_mem" rmmod nv_peer_mem
else
    not_ok "legacy build $legacy missing"
fi
# A client named nv_mem already registered (MOFED sysfs on): the core refuses ours; the load fails
# with a line that says so and nothing stays registered.
expect "insmod a fake client named nv_mem" insmod "$SIM_DIR/peer_core_sim/test/fake_client.ko" name=nv_mem
mark dup
expect_fail "insmod refused while another nv_mem client is registered" insmod "$ko"
expect "... with a line naming the clash and the fix" grep -q "the IB core refused peer-memory client nv_mem: a client of that name is already registered" <(dmesg_since dup)
expect "rmmod the fake client" rmmod fake_client
# The second of two clients clashing: the first one registered must be unregistered again.
expect "insmod a fake client named nv_mem_nc" insmod "$SIM_DIR/peer_core_sim/test/fake_client.ko" name=nv_mem_nc
expect_fail "insmod persistent_api_support=0 refused (nv_mem_nc taken)" insmod "$ko" persistent_api_support=0
expect_fail "... and its nv_mem was unregistered again" test -e /sys/kernel/mm/memory_peers/nv_mem
expect "rmmod the fake client" rmmod fake_client
expect "loads once the other client is gone" insmod "$ko" persistent_api_support=0
expect_fail "... which the core now refuses (ours holds the name)" insmod "$SIM_DIR/peer_core_sim/test/fake_client.ko" name=nv_mem_nc
expect "rmmod" rmmod nvidia_peermem
expect "rmmod the stand-ins" rmmod nv_p2p_sim peer_core_sim

# MOFED 24.04+ on a new kernel: no memory_peers, so the core lets two clients of one name
# register (fake clients named x twice), and our refusal to run beside the other GPU peer-memory
# module must hold without it.
expect "insmod the 24.04-line core without memory_peers" insmod "$SIM_DIR/peer_core_sim/peer_core_sim.ko" line=24.04 sysfs=0
expect "... which lets two clients named x register" insmod "$SIM_DIR/peer_core_sim/test/fake_client.ko" name=x,x
expect "rmmod the fake clients" rmmod fake_client
expect "insmod nv_p2p_sim" insmod "$SIM_DIR/nv_p2p_sim/nv_p2p_sim.ko"
if [ -f "$legacy" ]; then
    expect "insmod nvidia_peermem (no memory_peers)" insmod "$ko"
    mark beside-nosysfs
    expect_fail "nv_peer_mem still refused beside it" insmod "$legacy"
    expect "... by our own check" grep -q "nv_peer_mem: nvidia_peermem is loaded: only one GPU peer-memory module may run" <(dmesg_since beside-nosysfs)
    expect "rmmod nvidia_peermem" rmmod nvidia_peermem
    expect "insmod nv_peer_mem (no memory_peers)" insmod "$legacy"
    mark beside-nosysfs2
    expect_fail "nvidia_peermem still refused beside it" insmod "$ko"
    expect "... by our own check" grep -q "nvidia_peermem: nv_peer_mem is loaded" <(dmesg_since beside-nosysfs2)
    expect "rmmod nv_peer_mem" rmmod nv_peer_mem
else
    not_ok "legacy build $legacy missing"
fi
expect "rmmod the stand-ins" rmmod nv_p2p_sim peer_core_sim

# Debug traces are dynamic debug: off by default, on through /proc/dynamic_debug/control.
register_host_memory() {
    python3 - "$REPO/tests/scenarios" <<'PY'
import ctypes, mmap, sys
sys.path.insert(0, sys.argv[1])
import coresim
buf = mmap.mmap(-1, 1 << 20)
anchor = ctypes.c_char.from_buffer(buf); va = ctypes.addressof(anchor); del anchor
core = coresim.PeerCoreSim()
core.dereg_mr(core.reg_mr(va, 1 << 20))
PY
}
insmod "$SIM_DIR/peer_core_sim/peer_core_sim_4x.ko"
insmod "$SIM_DIR/nv_p2p_sim/nv_p2p_sim.ko"
expect "insmod peerdirect_support=1 over a 4.x core" insmod "$ko" peerdirect_support=1
mark dyndbg-off
expect "register host memory (a 4.x core asks every client)" register_host_memory
expect_fail "no debug trace by default" grep -q "nvidia_peermem: acquire" <(dmesg_since dyndbg-off)
expect "enable dynamic debug for the module" sh -c "echo 'module nvidia_peermem +p' > /proc/dynamic_debug/control"
mark dyndbg-on
expect "register host memory again" register_host_memory
expect "debug trace of acquire declining host memory" grep -q "nvidia_peermem: acquire 0x[0-9a-f]*+0x100000: not GPU memory" <(dmesg_since dyndbg-on)
expect "declined counted" test "$(cat /sys/module/nvidia_peermem/nvpeer/stats/declined)" -ge 2
expect "rmmod all" rmmod nvidia_peermem nv_p2p_sim peer_core_sim_4x
finish
