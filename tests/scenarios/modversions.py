# SPDX-License-Identifier: GPL-2.0
"""The generation markers carry no symbol version (REVIEW-KMOD-2 T3-3), on the 7.2 test kernel
built with CONFIG_MODVERSIONS (tests/compat/test-modversions.sh builds it, the modules in KO_DIR
and boots this): our module, built against the CRCs of ib_uverbs.ko (the 5x-unmaps core stand-in
under DOCA-OFED 24.07+'s name, one translation unit as peer_core_sim_abi2.ko is), records a version for every
symbol it imports but the two markers, and loads, detects the core and revokes on
peer_core_sim_abi2.ko, whose marker ib_umem_stop_invalidation_notifier has another CRC (its struct
ib_umem grew a field, as a MOFED update changes it under an unchanged peer-memory ABI). The
control, the same module built with the markers versioned (as before the fix), must be refused
there: "disagrees about version of symbol".
Usage (in the VM): modversions.py KO_DIR"""

import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import coresim  # noqa: E402
import nvsim  # noqa: E402
from stack import Tally, loaded, rmmod  # noqa: E402


def read(path):
    with open(path) as f:
        return f.read().strip()


def insmod(path, *params):
    return subprocess.run(["insmod", path, *params], capture_output=True, text=True)


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
    """Our module's recorded versions, the control refused, then ours on a core whose marker
    CRC differs."""
    label = "[modversions]"
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
    t.check(f"{label}: ... a version for ib_register_peer_memory_client, ib_uverbs.ko's",
            versions.get("ib_register_peer_memory_client") == reg.get("ib_uverbs") is not None,
            (versions.get("ib_register_peer_memory_client"), reg))
    t.check(f"{label}: ... and for nvidia_p2p_get_pages", "nvidia_p2p_get_pages" in versions)
    t.eq(f"{label}: ... none for the generation markers", [], [m for m in MARKERS if m in versions])
    t.check(f"{label}: peer_core_sim_abi2 keeps ib_register_peer_memory_client's CRC and changes "
            "the marker's", reg.get("peer_core_sim_abi2") == reg.get("ib_uverbs") and
            None not in (marker.get("ib_uverbs"), marker.get("peer_core_sim_abi2")) and
            marker["ib_uverbs"] != marker["peer_core_sim_abi2"], (reg, marker))
    loaded_here = []
    try:
        for mod, params in (("nv_p2p_sim", ["pt_version=0x20000"]),
                            ("peer_core_sim_abi2", ["generation=5x-unmaps", "line=25.04"])):
            r = insmod(os.path.join(ko_dir, mod + ".ko"), *params)
            t.eq(f"{label}: insmod {mod}", 0, r.returncode)
            if r.returncode:
                print(f"      {r.stderr.strip()}", flush=True)
                return
            loaded_here.append(mod)
        kmsg = coresim.Kmsg()
        r = insmod(os.path.join(ko_dir, "control", "nvidia_peermem.ko"), "persistent_api_support=0")
        t.check(f"{label}: the control (the markers versioned, as before the fix) is refused on "
                "peer_core_sim_abi2", r.returncode != 0 and not loaded("nvidia_peermem"), r.stderr)
        t.check(f"{label}: ... disagreeing about ib_umem_stop_invalidation_notifier's version",
                "disagrees about version of symbol ib_umem_stop_invalidation_notifier" in kmsg.text(),
                kmsg.text()[-400:])
        kmsg.close()
        if loaded("nvidia_peermem"):
            rmmod("nvidia_peermem")
        for mod, params in (("nvidia_peermem", ["persistent_api_support=0"]),):
            r = insmod(os.path.join(ko_dir, mod + ".ko"), *params)
            t.eq(f"{label}: insmod {mod} (ours, the markers unversioned) on peer_core_sim_abi2", 0,
                 r.returncode)
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
    t = Tally("modversions")
    try:
        modversions_case(t, argv[1])
    except Exception as e:
        t.check("[modversions]: ran to the end", False, repr(e))
    for name in ("nvidia_peermem", "peer_core_sim_abi2", "nv_p2p_sim"):
        t.check(f"[modversions]: {name} unloaded", not loaded(name))
    return t.finish()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
