# SPDX-License-Identifier: GPL-2.0
"""The reduced conformance scenario on Debian's own, unmodified kernel (tests/vm/run.sh --stock):
our module and the stand-ins as built for that kernel by kmod/stock-kbuild.sh, per case: load,
register GPU MRs (aligned and unaligned), move data both ways by NIC DMA, memory_peers counters,
cudaFree while registered (revocation), CQ umems on the persistent client, rmmod refused while an
MR exists, unload. The cases are conformance.py's own functions. Then, since Debian's kernel has
CONFIG_MODVERSIONS=y, the generation markers without versions (REVIEW-KMOD-2 T3-3): our module,
built against peer_core_sim.ko's CRCs, records a version for every symbol it imports but the two
markers, and loads and works on peer_core_sim_abi2.ko, whose marker
ib_umem_stop_invalidation_notifier has another CRC (its struct ib_umem grew a field).
Usage (in the VM, through tests/scenarios/stock-basic.sh): stock_basic.py RELEASE KO_DIR"""

import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import conformance  # noqa: E402
import coresim  # noqa: E402
import nvsim  # noqa: E402
from stack import Stack, Tally, loaded, rmmod  # noqa: E402

# (generation, client parameters): the invalidating client on the current and the 4.x core, the
# default persistent client on a 5.x core.
CASES = [("5x-unmaps", ["peerdirect_support=0", "persistent_api_support=0"]),
         ("4x", ["peerdirect_support=1", "persistent_api_support=0"]),
         ("5x", ["peerdirect_support=0", "persistent_api_support=1"])]


def read(path):
    with open(path) as f:
        return f.read().strip()


MARKERS = ("ib_get_peer_private_data", "ib_umem_stop_invalidation_notifier")


def symvers_crcs(path, symbol):
    """{module: CRC} of SYMBOL in a Module.symvers."""
    out = {}
    with open(path) as f:
        for line in f:
            crc, sym, mod = line.split("\t")[:3]
            if sym == symbol:
                out[mod] = int(crc, 16)
    return out


def modversions_case(t, ko_dir):
    """Our module's recorded versions, then a load on a core whose marker CRC differs."""
    label = "[stock modversions]"
    print(f"--- {label}", flush=True)
    ko = os.path.join(ko_dir, "nvidia_peermem.ko")
    dump = subprocess.run(["modprobe", "--dump-modversions", ko], capture_output=True, text=True)
    versions = {}
    for line in dump.stdout.splitlines():
        crc, _, sym = line.partition("\t")
        versions[sym.strip()] = int(crc, 16)
    t.check(f"{label}: the module records symbol versions (CONFIG_MODVERSIONS kernel)",
            len(versions) > 0, dump.stdout[:200] + dump.stderr)
    symvers = os.path.join(ko_dir, "peer_core_sim.symvers")
    reg = symvers_crcs(symvers, "ib_register_peer_memory_client")
    marker = symvers_crcs(symvers, "ib_umem_stop_invalidation_notifier")
    t.check(f"{label}: ... a version for ib_register_peer_memory_client, peer_core_sim's",
            versions.get("ib_register_peer_memory_client") == reg.get("peer_core_sim") is not None,
            (versions.get("ib_register_peer_memory_client"), reg))
    t.check(f"{label}: ... and for nvidia_p2p_get_pages", "nvidia_p2p_get_pages" in versions)
    t.eq(f"{label}: ... none for the generation markers", [], [m for m in MARKERS if m in versions])
    t.check(f"{label}: peer_core_sim_abi2 keeps ib_register_peer_memory_client's CRC and changes "
            "the marker's", reg.get("peer_core_sim_abi2") == reg.get("peer_core_sim") and
            None not in (marker.get("peer_core_sim"), marker.get("peer_core_sim_abi2")) and
            marker["peer_core_sim"] != marker["peer_core_sim_abi2"], (reg, marker))
    loaded_here = []
    try:
        for mod, params in (("nv_p2p_sim", ["pt_version=0x20000"]),
                            ("peer_core_sim_abi2", ["generation=5x-unmaps", "line=25.04"]),
                            ("nvidia_peermem", ["persistent_api_support=0"])):
            r = subprocess.run(["insmod", os.path.join(ko_dir, mod + ".ko"), *params],
                               capture_output=True, text=True)
            t.eq(f"{label}: insmod {mod}", 0, r.returncode)
            if r.returncode:
                print(f"      {r.stderr.strip()}", flush=True)
                return
            loaded_here.append(mod)
        t.eq(f"{label}: our module detects the core from the unversioned marker", "5x-unmaps",
             read("/sys/module/nvidia_peermem/nvpeer/core"))
        nv, core = nvsim.NvP2pSim(), coresim.PeerCoreSim()
        a = nv.alloc(2 << 20)
        mr = core.reg_mr(a.va, 2 << 20)
        core.dma_write(mr, 0, b"v" * 8)
        t.eq(f"{label}: NIC DMA lands", b"v" * 8, bytes(a.mm[:8]))
        a.free()
        try:
            core.dma_read(mr, 0, 8)
            revoked = False
        except OSError:
            revoked = True
        t.check(f"{label}: cudaFree revokes it through the core", revoked)
        core.dereg_mr(mr)
        core.close()
        nv.close()
    finally:
        for mod in reversed(loaded_here):
            if rmmod(mod).returncode != 0:
                t.check(f"{label}: rmmod {mod}", False)


def main(argv):
    release, ko_dir = argv[1], argv[2]
    t = Tally("stock-basic")
    uname = os.uname().release
    t.eq("the guest runs the stock kernel release", release, uname)
    t.check("... Debian's own build (/proc/version)", "Debian" in read("/proc/version"), read("/proc/version"))
    ko = os.path.join(ko_dir, "nvidia_peermem.ko")
    vermagic = subprocess.run(["modinfo", "-F", "vermagic", ko], capture_output=True, text=True).stdout.strip()
    t.check(f"module vermagic is for {release}", vermagic.startswith(release + " "), vermagic)
    print("info  detectors on this kernel: kmemleak %s, lockdep %s (the runner still scans for WARN, BUG, "
          "Oops, KFENCE, SLUB, hung tasks)" % (
              "yes" if os.path.exists("/sys/kernel/debug/kmemleak") else "no",
              "yes" if os.path.exists("/proc/lockdep") else "no"), flush=True)
    for gen, params in CASES:
        label = f"[stock {gen} {' '.join(params)}]"
        print(f"--- {label}", flush=True)
        try:
            with Stack(gen, client_params=params, ko_dir=ko_dir) as st:
                t.check(f"{label}: nvidia_peermem loaded into {uname}", loaded("nvidia_peermem"))
                taint = read("/sys/module/nvidia_peermem/taint")
                t.check(f"{label}: tainted out-of-tree and unsigned (OE), as any module built outside Debian",
                        "O" in taint and "E" in taint, taint)
                nv = nvsim.NvP2pSim()
                core = coresim.PeerCoreSim()
                conformance.host_memory_not_acquired(t, st, core, label)
                conformance.registration_cases(t, st, nv, core, label, with_1g=False)
                conformance.sysfs_cases(t, st, nv, core, label)
                conformance.revocation_cases(t, st, nv, core, label)
                conformance.cq_cases(t, st, nv, core, label)
                conformance.unload_cases(t, st, nv, core, label)
                nv.close()
                core.close()
        except Exception as e:  # a crash of the case is a failure, not an abort of the suite
            t.check(f"{label}: ran to the end", False, repr(e))
        for name in ("nvidia_peermem", coresim.core_module(gen), "nv_p2p_sim"):
            t.check(f"{label}: {name} unloaded", not loaded(name))
    try:
        modversions_case(t, ko_dir)
    except Exception as e:
        t.check("[stock modversions]: ran to the end", False, repr(e))
    return t.finish()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
