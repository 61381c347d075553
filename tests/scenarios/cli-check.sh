# SPDX-License-Identifier: GPL-2.0
# `nvpeer check`, `nvpeer stats` and `nvpeer topo` in the VM, against the real kernel objects:
# our module, the stand-ins (nv_p2p_sim for nvidia.ko, peer_core_sim for MOFED's core) and
# Soft-RoCE (rxe0). First without our module or the core: the dma-buf facts (the stand-in's
# /proc/driver/nvidia, the kernel's ib_umem_dmabuf_get, libibverbs, rxe0's answer to NCCL's probe)
# and the verdict a real host with them gets. check must report the facts (module, clients, P2P
# provider, RDMA device) and
# the right failures when the module is missing, when memory_peers is off, and when two
# implementations are loaded; stats counters must move when GPU memory is registered.
# Two implementations cannot really be loaded at once (our module refuses to load beside
# another one: checked here), so that case is built as a sysfs tree from the real files of our
# module loaded once as nvidia_peermem and once as nv_peer_mem (kmod/nv_peer_mem.ko), and
# checked with --sysfs-root.
# Run: tests/vm/run.sh cli-check
. "$(dirname "$0")/lib.sh"
export PYTHONDONTWRITEBYTECODE=1
nvpeer=$REPO/userspace/target/release/nvpeer
ko=$KO_DIR/nvidia_peermem.ko
legacy_ko=$KO_DIR/nv_peer_mem.ko
core_ko=$SIM_DIR/peer_core_sim/peer_core_sim.ko
nv_ko=$SIM_DIR/nv_p2p_sim/nv_p2p_sim.ko
work=$(mktemp -d)

for f in "$nvpeer" "$ko" "$legacy_ko" "$core_ko" "$nv_ko"; do
    if [ ! -e "$f" ]; then
        not_ok "$f is missing (build it first: tests/build-all.sh, cargo build --release)"
        finish
        exit 1
    fi
done

# report NAME [ARGS...]: nvpeer check --json into $work/NAME.json; the exit code into $work/NAME.rc.
report() {
    local name=$1; shift
    "$nvpeer" "$@" check --json >"$work/$name.json" 2>"$work/$name.err"
    echo $? >"$work/$name.rc"
    if grep -q panicked "$work/$name.err"; then not_ok "check ($name) panicked: $(cat "$work/$name.err")"; fi
}
# q NAME EXPR: a Python expression over report r; c(ID) is the check with that id.
q() {
    python3 -c 'import json, sys
r = json.load(open(sys.argv[1]))
def c(i):
    return next((x for x in r["checks"] if x["id"] == i), {"status": "absent", "detail": ""})
print(eval(sys.argv[2]))' "$work/$1.json" "$2" 2>&1
}
status() { q "$1" "c('$2')['status']"; }
# detail_has NAME ID TEXT: the check's detail contains TEXT.
detail_has() { expect "[$1] $2 says: $3" grep -qF -- "$3" <(q "$1" "c('$2')['detail']"); }

# ---------------------------------------------------------------- nothing loaded
report bare
expect_eq "[bare] exit code 1 (a check failed)" 1 "$(cat "$work/bare.rc")"
expect_eq "[bare] schema" nvpeer.check/2 "$(q bare "r['schema']")"
expect_eq "[bare] module fails" fail "$(status bare module)"
expect_eq "[bare] nvidia_driver fails" fail "$(status bare nvidia_driver)"
expect_eq "[bare] nccl fails" fail "$(status bare nccl)"
expect "[bare] every warn and fail has a fix" test "$(q bare "all(x['fix'] for x in r['checks'] if x['status'] != 'ok')")" = True

# ---------------------------------------------------------------- dma-buf facts, no peer memory
# Soft-RoCE and the NVIDIA stand-in, which shows /proc/driver/nvidia as open kernel modules
# 580.159.04 would, but neither the peer-memory core nor our module: the facts of the dma-buf path
# on a real kernel. The 7.2 kernel has ib_umem_dmabuf_get built in; rdma-core's libibverbs has
# ibv_reg_dmabuf_mr; rxe has no dma-buf MRs (drivers/infiniband/sw/rxe sets no
# reg_user_mr_dmabuf, so uverbs would answer EOPNOTSUPP, and rdma-core's rxe provider has no
# reg_dmabuf_mr, so libibverbs' dummy op answers EOPNOTSUPP before the kernel is asked).
expect "modprobe rdma_rxe" modprobe rdma_rxe
ip link add nvpeer0 type dummy && ip link set nvpeer0 up
expect "rdma link add rxe0 (Soft-RoCE over a dummy netdev)" rdma link add rxe0 type rxe netdev nvpeer0
expect "insmod nv_p2p_sim" insmod "$nv_ko"
report dmabuf
# One python for every value (a process start is slow in the TCG guest); then a GPU paired with
# rxe0 added to the same facts and judged again (`--facts`): the pair's dma-buf fails on rxe's
# real answer, its peer memory on the missing core.
mapfile -t v < <(python3 - "$work/dmabuf.json" "$nvpeer" <<'EOF'
import json, subprocess, sys
r = json.load(open(sys.argv[1]))
f = r["facts"]
c = {x["id"]: x for x in r["checks"]}
proc, nics = f["nvidia_proc"], f["dmabuf"]["nics"]
print(proc["version"]["flavour"], proc["version"]["release"], proc["params"]["GrdmaPciTopoCheckOverride"])
print(f["dmabuf"]["kernel"], f["kallsyms"]["found"]["ib_umem_dmabuf_get"]["in"])
print(f["verbs"]["reg_dmabuf_mr"])
print(nics["rxe0"]["result"], nics["rxe0"]["errno"])
print(c["dmabuf"]["detail"])
print(c["nvidia_driver"]["detail"])
print(r["verdict"]["text"])
print(c["paths"]["status"], c["paths"]["detail"])
print(c["module"]["status"], c["ib_core"]["status"])
f["gpus"] = [{"label": "GPU0", "address": "0000:00:04.0", "vendor": 0x10de, "device": 0x2335,
              "numa_node": 0, "bar1": None}]
f["pairs"] = [{"gpu": "GPU0", "nic": "rxe0", "source": "nearest", "class": "PIX", "nccl_class": "PIX",
               "common_bridge": True, "coherent": False, "nic_driver": None, "nic_vendor": 0,
               "nic_device": 0, "gpu_iommu_group": None, "nic_iommu_group": None}]
out = subprocess.run([sys.argv[2], "check", "--facts", "-", "--json"], input=json.dumps(f),
                     capture_output=True, text=True)
p = json.loads(out.stdout)
print(p["verdict"]["text"])
print(p["pairs"][0]["why_not"]["dmabuf"]["reason"])
print(p["pairs"][0]["why_not"]["peer_memory"]["reason"])
EOF
)
expect_eq "[dmabuf] the stand-in's /proc/driver/nvidia: open 580.159.04" "open 580.159.04 0" "${v[0]:-}"
expect_eq "[dmabuf] ib_umem_dmabuf_get in the kernel" "True kernel" "${v[1]:-}"
expect_eq "[dmabuf] libibverbs has ibv_reg_dmabuf_mr" True "${v[2]:-}"
expect_eq "[dmabuf] rxe0 answers NCCL's probe with EOPNOTSUPP" "unsupported 95" "${v[3]:-}"
expect "[dmabuf] dmabuf says: GPU driver: open kernel modules 580.159.04" grep -qF "GPU driver: open kernel modules 580.159.04" <<<"${v[4]:-}"
expect "[dmabuf] dmabuf says: rxe0 does not (EOPNOTSUPP)" grep -qF "rxe0 does not (EOPNOTSUPP)" <<<"${v[4]:-}"
expect "[dmabuf] nvidia_driver says: the stand-in, open kernel modules 580.159.04" \
    grep -qF "nv_p2p_sim (test stand-in for nvidia.ko's P2P API), open kernel modules 580.159.04" <<<"${v[5]:-}"
# What a real host with these facts gets: no GPU in this VM, so no pair and not ready; the
# peer-memory rows still fail (nothing carries a pair that would make them unneeded).
expect_eq "[dmabuf] verdict" "not ready: gpus (none)" "${v[6]:-}"
expect_eq "[dmabuf] exit code 1" 1 "$(cat "$work/dmabuf.rc")"
expect_eq "[dmabuf] paths: no GPU-NIC pair" "fail no GPU-NIC pair: no NVIDIA GPU on the PCI bus" "${v[7]:-}"
expect_eq "[dmabuf] module and ib_core fail (none loaded, no core)" "fail fail" "${v[8]:-}"
expect_eq "[dmabuf, a GPU paired with rxe0] verdict" "not ready: paths (GPU0-rxe0 has no path)" "${v[9]:-}"
expect "[dmabuf, a GPU paired with rxe0] dma-buf: rxe0's EOPNOTSUPP" \
    grep -qF "rxe0 answers NCCL's probe (ibv_reg_dmabuf_mr with fd -1) with EOPNOTSUPP: its driver has no dma-buf MRs" <<<"${v[10]:-}"
expect "[dmabuf, a GPU paired with rxe0] peer memory: no core" grep -qF "no peer-memory core" <<<"${v[11]:-}"
expect "/proc/driver/nvidia/version says open kernel modules" grep -q "^NVRM version: NVIDIA UNIX Open Kernel Module for .* 580.159.04 " /proc/driver/nvidia/version

# ---------------------------------------------------------------- the peer-memory core, our module
expect "insmod peer_core_sim generation=5x-unmaps sysfs=1" insmod "$core_ko" generation=5x-unmaps sysfs=1
expect "insmod nvidia_peermem.ko" insmod "$ko"

echo "----- nvpeer check -----"
"$nvpeer" check
echo "----- nvpeer topo -----"
"$nvpeer" topo
echo "-----"
report loaded
expect_eq "[loaded] exit code 1: this VM has no GPU" 1 "$(cat "$work/loaded.rc")"
expect_eq "[loaded] the only failures are gpus and so paths" "['gpus', 'paths']" "$(q loaded "[x['id'] for x in r['checks'] if x['status'] == 'fail']")"
expect_eq "[loaded] module ok" ok "$(status loaded module)"
detail_has loaded module "loaded as nvidia_peermem"
expect_eq "[loaded] implementation nvpeer" nvpeer "$(q loaded "r['facts']['modules'][0]['implementation']")"
expect_eq "[loaded] parameters ok" ok "$(status loaded parameters)"
detail_has loaded parameters "persistent_api_support=1"
expect_eq "[loaded] peer_clients ok" ok "$(status loaded peer_clients)"
detail_has loaded peer_clients "nv_mem"
expect_eq "[loaded] memory_peers lists nv_mem" "['nv_mem']" "$(q loaded "[p['name'] for p in r['facts']['memory_peers']]")"
expect_eq "[loaded] nvidia_driver ok" ok "$(status loaded nvidia_driver)"
detail_has loaded nvidia_driver "nv_p2p_sim (test stand-in"
expect_eq "[loaded] P2P provider is the stand-in" "nv_p2p_sim True" "$(q loaded "r['facts']['nvidia']['module'], r['facts']['nvidia']['stand_in']" | tr -d "(),'")"
expect_eq "[loaded] persistent API found in kallsyms" explicit "$(q loaded "r['facts']['nvidia']['persistent_api']")"
expect_eq "[loaded] ib_core ok" ok "$(status loaded ib_core)"
detail_has loaded ib_core "peer_core_sim (test stand-in"
expect_eq "[loaded] core generation" 5x-unmaps "$(q loaded "r['facts']['ib_core']['peer_core']['generation']")"
expect_eq "[loaded] rdma_devices ok" ok "$(status loaded rdma_devices)"
detail_has loaded rdma_devices "rxe0/1"
detail_has loaded rdma_devices "ACTIVE"
expect_eq "[loaded] verbs ok" ok "$(status loaded verbs)"
detail_has loaded verbs "rxe0"
for id in nccl ucx; do
    expect_eq "[loaded] $id would use peer memory" ok "$(status loaded "$id")"
done
expect_eq "[loaded] dmabuf ok (peer memory works)" ok "$(status loaded dmabuf)"
expect "[loaded] human output has no ANSI codes through a pipe" bash -c "! '$nvpeer' check | grep -q \$'\\x1b'"
expect "[loaded] topo lists rxe0 as a software device" bash -c "'$nvpeer' topo | grep -q 'rxe0 .*software device'"

# ---------------------------------------------------------------- stats move with a registration
cat >"$work/register.py" <<'EOF'
import json, os, subprocess, sys
sys.path.insert(0, os.path.join(os.environ["NVPEER_REPO"], "tests", "scenarios"))
import coresim, nvsim
nvpeer = sys.argv[1]
def stats():
    return json.loads(subprocess.run([nvpeer, "stats", "--json"], check=True, capture_output=True, text=True).stdout)
out = {"before": stats()}
with nvsim.NvP2pSim() as nv, coresim.PeerCoreSim() as core:
    buf = nv.alloc(2 << 20)
    reg = core.reg(buf.va, 2 << 20)
    out["reg"] = reg
    out["during"] = stats()
    core.dereg_mr(reg["id"])
    buf.free()
out["after"] = stats()
print(json.dumps(out))
EOF
if python3 "$work/register.py" "$nvpeer" >"$work/stats.json" 2>"$work/stats.err"; then
    ok "register and deregister 2 MiB of stand-in GPU memory"
else
    not_ok "register and deregister 2 MiB of stand-in GPU memory: $(cat "$work/stats.err")"
fi
s() { python3 -c 'import json, sys; s = json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$work/stats.json" "$1" 2>&1; }
expect_eq "[stats] schema" nvpeer.stats/1 "$(s "s['before']['schema']")"
expect_eq "[stats] taken by nv_mem as peer memory" "nv_mem 1" "$(s "s['reg']['client'], s['reg']['peer']" | tr -d "(),'")"
expect_eq "[stats] registrations +1 during" 1 "$(s "s['during']['counters']['registrations'] - s['before']['counters']['registrations']")"
expect_eq "[stats] live_contexts 1 during" 1 "$(s "s['during']['counters']['live_contexts']")"
expect_eq "[stats] pinned_bytes 2 MiB during" $((2 << 20)) "$(s "s['during']['counters']['pinned_bytes']")"
expect_eq "[stats] deregistrations +1 after" 1 "$(s "s['after']['counters']['deregistrations'] - s['before']['counters']['deregistrations']")"
expect_eq "[stats] live_contexts 0 after" 0 "$(s "s['after']['counters']['live_contexts']")"
expect_eq "[stats] memory_peers nv_mem num_alloc_mrs +1" 1 "$(s "s['during']['memory_peers'][0]['counters']['num_alloc_mrs'] - s['before']['memory_peers'][0]['counters']['num_alloc_mrs']")"
expect_eq "[stats] memory_peers nv_mem num_dealloc_mrs +1" 1 "$(s "s['after']['memory_peers'][0]['counters']['num_dealloc_mrs'] - s['before']['memory_peers'][0]['counters']['num_dealloc_mrs']")"
echo "----- nvpeer stats -----"
"$nvpeer" stats | tee "$work/stats.txt"
expect "[stats] table lists registrations" grep -qE '^nvidia_peermem \(nvpeer\) +registrations +[0-9]+$' "$work/stats.txt"
expect "[stats] table lists memory_peers/nv_mem" grep -q '^memory_peers/nv_mem' "$work/stats.txt"
expect "[stats] --watch 1 --count 2 refreshes twice" test "$("$nvpeer" stats --watch 1 --count 2 | grep -c '^Every 1s')" = 2

# ---------------------------------------------------------------- who holds pinned GPU memory
# Two processes register stand-in GPU memory on two simulated GPUs (nv_p2p_sim's GPU n has its
# own UUID): holder_a 2 MiB on GPU 0 and 1 MiB on GPU 1, holder_b 4 MiB on GPU 1. The module's
# records (/sys/kernel/debug/nvidia_peermem/registrations, root only) must name both with the
# right bytes per GPU, its per-GPU totals (/sys/module/nvidia_peermem/nvpeer/gpus/) must match,
# and `nvpeer detach` must refuse and name them. Then holder_b exits without deregistering (a
# child keeps its files, so its registration outlives it): `who --brief`, the Slurm epilog's
# drain reason, names it as exited; once the child is gone too, detach unloads the module.
cat >"$work/holder.py" <<'EOF'
import ctypes, json, os, signal, sys, time
sys.path.insert(0, os.path.join(os.environ["NVPEER_REPO"], "tests", "scenarios"))
import coresim, nvsim
name, spec = sys.argv[1], sys.argv[2]          # spec: GPU:MiB,...
ctypes.CDLL(None).prctl(15, name.encode(), 0, 0, 0)   # PR_SET_NAME: the records' comm
nv, core = nvsim.NvP2pSim(), coresim.PeerCoreSim()
regs = []
for part in spec.split(","):
    gpu, mib = map(int, part.split(":"))
    buf = nv.alloc(mib << 20, gpu=gpu)
    regs.append((buf, core.reg(buf.va, mib << 20)["id"]))
print(json.dumps({"tgid": os.getpid(), "vas": [b.va for b, _ in regs]}), flush=True)
for line in sys.stdin:
    if line.strip() == "dereg":
        for buf, mr in regs:
            core.dereg_mr(mr)
            buf.free()
        print("deregistered", flush=True)
    elif line.strip() == "orphan":
        # Exits without deregistering; a child keeps the files (so the MRs) open until killed.
        child = os.fork()
        if child == 0:
            os.setsid()
            signal.pause()
            os._exit(0)
        print(child, flush=True)
        os._exit(0)
EOF
# wait_for SECONDS CMD...: until CMD succeeds (a process start takes seconds in the TCG guest).
wait_for() {
    local n=$(( $1 * 4 )); shift
    while ! "$@" >/dev/null 2>&1; do n=$((n - 1)); [ "$n" -gt 0 ] || return 1; sleep 0.25; done
}
records=/sys/kernel/debug/nvidia_peermem/registrations
gpus_dir=/sys/module/nvidia_peermem/nvpeer/gpus
mkfifo "$work/a.in" "$work/b.in"
python3 "$work/holder.py" holder_a 0:2,1:1 <"$work/a.in" >"$work/a.out" 2>"$work/a.err" &
holder_a=$!
python3 "$work/holder.py" holder_b 1:4 <"$work/b.in" >"$work/b.out" 2>"$work/b.err" &
holder_b=$!
exec 7>"$work/a.in" 8>"$work/b.in"
if wait_for 120 grep -q tgid "$work/a.out" && wait_for 120 grep -q tgid "$work/b.out"; then
    ok "two processes registered stand-in GPU memory on two GPUs"
else
    not_ok "two processes registered: $(cat "$work/a.err" "$work/b.err")"
fi
echo "----- $records -----"
cat "$records"
echo "----- nvpeer who -----"
"$nvpeer" who
"$nvpeer" who --json >"$work/who.json" 2>"$work/who.err"
expect_eq "[who] exit code 0" 0 "$?"
mapfile -t w < <(python3 - "$work/who.json" "$holder_a" "$holder_b" "$gpus_dir" <<'EOF'
import json, os, sys
who = json.load(open(sys.argv[1]))
pa, pb, gdir = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
recs = who["records"]
print(who["schema"], who["registrations"])
# The GPUs by the records: holder_a's 2 MiB registration is on GPU 0, the other GPU is GPU 1.
g0 = next(r["gpu"] for r in recs if r["comm"] == "holder_a" and r["bytes"] == 2 << 20)
g1 = next(r["gpu"] for r in recs if r["comm"] == "holder_b")
print(g0 != g1 and g0[:-2] == g1[:-2] and int(g0[-2:], 16) ^ int(g1[-2:], 16) == 1)
# Per holder and GPU: process, comm, pinned bytes (from the records, each pin once).
held = sorted((h["tgid"], h["comm"], "GPU0" if h["gpu"] == g0 else "GPU1", h["pinned_bytes"], h["registrations"])
              for h in who["holders"])
print(held == sorted([(pa, "holder_a", "GPU0", 2 << 20, 1), (pa, "holder_a", "GPU1", 1 << 20, 1),
                      (pb, "holder_b", "GPU1", 4 << 20, 1)]), held)
# Every record mapped to the NIC (the edu device's PCI function), one registration per pin.
print(sorted({(r["state"], r["shares"], r["client"], r["cgroup"]) for r in recs}), all(r["nic"] for r in recs))
# The per-GPU totals in sysfs, and what who shows of them.
def total(g, f):
    return int(open(os.path.join(gdir, g, f)).read())
print([(total(g, "pinned_bytes"), total(g, "pins"), total(g, "registrations")) for g in (g0, g1)])
print(sorted((g["uuid"] == g1, g["pinned_bytes"], g["pins"], g["registrations"]) for g in who["gpus"]))
print(g0, g1)
EOF
)
expect_eq "[who] schema and registrations" "nvpeer.who/1 3" "${w[0]:-}"
expect_eq "[who] two GPUs, UUIDs as the stand-in makes them" True "${w[1]:-}"
expect_eq "[who] both processes (tgid, comm) with their bytes per GPU" True "${w[2]%% *}"
[ "${w[2]%% *}" = True ] || echo "      ${w[2]:-}"
expect_eq "[who] every registration mapped to a NIC, alone on its pin" "[('mapped', 1, 'nv_mem', '/')] True" "${w[3]:-}"
expect_eq "[gpus] sysfs totals: GPU 0 2 MiB, 1 pin, 1 registration; GPU 1 5 MiB, 2 pins, 2" \
    "[($((2 << 20)), 1, 1), ($((5 << 20)), 2, 2)]" "${w[4]:-}"
expect_eq "[who] per-GPU totals as sysfs has them" \
    "[(False, $((2 << 20)), 1, 1), (True, $((5 << 20)), 2, 2)]" "${w[5]:-}"
expect_eq "[stats] the per-GPU totals in nvpeer stats --json" "$((7 << 20))" \
    "$("$nvpeer" stats --json | python3 -c 'import json,sys; print(sum(g["pinned_bytes"] for g in json.load(sys.stdin)["gpus"]))')"

# Root only: readable by root, refused to anyone else even where debugfs lets them in.
expect_eq "[records] mode 0400" 400 "$(stat -c %a "$records")"
expect "remount debugfs mode=0755 (open to everyone but the file itself)" mount -o remount,mode=0755 /sys/kernel/debug
expect_fail "[records] an unprivileged reader is refused" setpriv --reuid=65534 --regid=65534 --clear-groups cat "$records"
setpriv --reuid=65534 --regid=65534 --clear-groups "$nvpeer" who >"$work/who-user.out" 2>&1
expect_eq "[who] as nobody: exit code 2 (cannot read the records)" 2 "$?"
expect "[who] as nobody: says root-only" grep -q "root-only" "$work/who-user.out"
expect "[gpus] readable by anyone" setpriv --reuid=65534 --regid=65534 --clear-groups cat "$gpus_dir/${w[6]%% *}/pinned_bytes"
mount -o remount,mode=0700 /sys/kernel/debug

# detach refuses and names both holders.
"$nvpeer" detach >"$work/detach1.out" 2>&1
expect_eq "[detach] refuses while registrations are live: exit 1" 1 "$?"
expect "[detach] names holder_a" grep -qF "holder_a[$holder_a]" "$work/detach1.out"
expect "[detach] names holder_b" grep -qF "holder_b[$holder_b]" "$work/detach1.out"
expect "[detach] the module is still loaded" test -d /sys/module/nvidia_peermem

# holder_a deregisters; holder_b exits without deregistering.
echo dereg >&7
expect "holder_a deregistered" wait_for 60 grep -q deregistered "$work/a.out"
exec 7>&-
echo orphan >&8
exec 8>&-
wait "$holder_a" "$holder_b"
orphan=$(tail -n 1 "$work/b.out")
"$nvpeer" who --brief >"$work/brief.out" 2>&1
expect_eq "[who --brief] names the process that left its registration: $(cat "$work/brief.out")" \
    "holder_b[exited] in /: 1 registration, 4 MiB" "$(cat "$work/brief.out")"
"$nvpeer" detach >"$work/detach2.out" 2>&1
expect_eq "[detach] still refuses: exit 1" 1 "$?"
expect "[detach] names the exited holder" grep -qF "holder_b[exited]" "$work/detach2.out"
kill "$orphan"
expect "the registration goes with the last process holding its files" \
    wait_for 60 grep -qx 0 /sys/module/nvidia_peermem/nvpeer/stats/live_contexts
expect_eq "[gpus] nothing pinned any more, the directories kept" "0 0 0 0" \
    "$(cat "$gpus_dir"/GPU-*/pinned_bytes "$gpus_dir"/GPU-*/registrations | tr '\n' ' ' | sed 's/ $//')"
expect "[who] no registrations" test "$("$nvpeer" who --brief)" = "no registrations"
expect "[detach] unloads the module once no registration is live" "$nvpeer" detach --wait 10
expect "[detach] ... it is gone" test ! -d /sys/module/nvidia_peermem
# No peer-memory module loaded: nothing can be held through one (exit 0, not an error).
expect "[who] without the module: nothing held, exit 0" \
    test "$("$nvpeer" who --brief)" = "no registrations: no peer-memory module loaded"
expect "insmod nvidia_peermem.ko again" insmod "$ko"

# ---------------------------------------------------------------- two implementations
# tree_of MODULE DIR: the files nvpeer reads of /sys/module/MODULE, copied into DIR/module/MODULE.
tree_of() {
    local m=$1 d=$2/module/$1 p
    mkdir -p "$d/parameters" "$d/nvpeer"
    cat "/sys/module/$m/version" >"$d/version"
    cat "/sys/module/$m/nvpeer/implementation" >"$d/nvpeer/implementation"
    for p in /sys/module/"$m"/parameters/*; do cat "$p" >"$d/parameters/${p##*/}"; done
}
mark two
expect_fail "insmod nv_peer_mem.ko beside nvidia_peermem is refused" insmod "$legacy_ko"
expect "... saying why" grep -q "nvidia_peermem is loaded: only one GPU peer-memory module may run" <(dmesg_since two)
tree=$work/two-loaded/sys
tree_of nvidia_peermem "$tree"
expect "rmmod nvidia_peermem" rmmod nvidia_peermem
expect "insmod nv_peer_mem.ko alone" insmod "$legacy_ko"
tree_of nv_peer_mem "$tree"
expect "rmmod nv_peer_mem" rmmod nv_peer_mem
report two --sysfs-root "$tree"
expect_eq "[two] exit code 1" 1 "$(cat "$work/two.rc")"
expect_eq "[two] module fails" fail "$(status two module)"
detail_has two module "2 peer-memory modules loaded at once: nvidia_peermem (nvpeer), nv_peer_mem (nvpeer)"

# ---------------------------------------------------------------- module not loaded
report unloaded
expect_eq "[unloaded] exit code 1" 1 "$(cat "$work/unloaded.rc")"
expect_eq "[unloaded] module fails" fail "$(status unloaded module)"
expect_eq "[unloaded] peer_clients fails (memory_peers without clients)" fail "$(status unloaded peer_clients)"
expect_eq "[unloaded] nccl fails" fail "$(status unloaded nccl)"
expect_eq "[unloaded] ucx fails" fail "$(status unloaded ucx)"
expect_eq "[unloaded] the stand-ins are still ok" "ok ok" "$(status unloaded nvidia_driver) $(status unloaded ib_core)"

# ---------------------------------------------------------------- memory_peers off
expect "rmmod peer_core_sim" rmmod peer_core_sim
expect "insmod peer_core_sim sysfs=0" insmod "$core_ko" generation=5x-unmaps sysfs=0
expect "insmod nvidia_peermem.ko" insmod "$ko"
report nosysfs
expect_eq "[nosysfs] peer_clients informs (nothing to act on)" info "$(status nosysfs peer_clients)"
detail_has nosysfs peer_clients "/sys/kernel/mm/memory_peers is absent"
detail_has nosysfs peer_clients "nvidia_peermem registered nv_mem"
detail_has nosysfs ib_core "memory_peers sysfs off"
# One nccl row: 2.23.4 and later detect the module (/sys/module/nvidia_peermem/version), older
# releases would not see peer memory: worth knowing, nothing to act on.
expect_eq "[nosysfs] nccl informs" info "$(status nosysfs nccl)"
detail_has nosysfs nccl "NCCL 2.23.4 and later enable GPUDirect RDMA through peer memory"
detail_has nosysfs nccl "NCCL 2.22.3 would not"
expect_eq "[nosysfs] ucx still ok" ok "$(status nosysfs ucx)"
expect_eq "[nosysfs] stats: memory_peers absent" None "$("$nvpeer" stats --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["memory_peers"])')"

# ---------------------------------------------------------------- parameter against the core
expect "rmmod nvidia_peermem" rmmod nvidia_peermem
expect "rmmod peer_core_sim" rmmod peer_core_sim
expect "insmod peer_core_sim generation=5x-unmaps" insmod "$core_ko" generation=5x-unmaps
expect "insmod nvidia_peermem.ko peerdirect_support=1 (legacy on a new core)" insmod "$ko" peerdirect_support=1
report legacy
# Ours detects the 5x-unmaps core and registers the _ex UNMAPS form anyway: the value is noted,
# not a problem (NVIDIA's module, which obeys it, gets a warning: unit tests).
expect_eq "[legacy] parameters ok: nvpeer follows the detected core" ok "$(status legacy parameters)"
detail_has legacy parameters "contradicts the detected core, which nvpeer follows"

expect "rmmod nvidia_peermem" rmmod nvidia_peermem
expect "rmmod the stand-ins" rmmod nv_p2p_sim peer_core_sim
rdma link delete rxe0
ip link del nvpeer0
rm -rf "$work"
finish
