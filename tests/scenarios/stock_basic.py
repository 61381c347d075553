# SPDX-License-Identifier: GPL-2.0
"""The reduced conformance scenario on Debian's own, unmodified kernel (tests/vm/run.sh --stock):
our module and the stand-ins as built for that kernel by kmod/scripts/stock-kbuild.sh, per case: load,
register GPU MRs (aligned and unaligned), move data both ways by NIC DMA, memory_peers counters,
cudaFree while registered (revocation), CQ umems on the persistent client, rmmod refused while an
MR exists, unload. The cases are conformance.py's own functions.
Usage (in the VM, through tests/scenarios/stock-basic.sh): stock_basic.py RELEASE KO_DIR"""

import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import conformance  # noqa: E402
import coresim  # noqa: E402
import nvsim  # noqa: E402
from stack import Stack, Tally, loaded  # noqa: E402

# (generation, client parameters): the invalidating client on the current and the 4.x core, the
# default persistent client on a 5.x core.
CASES = [("5x-unmaps", ["peerdirect_support=0", "persistent_api_support=0"]),
         ("4x", ["peerdirect_support=1", "persistent_api_support=0"]),
         ("5x", ["peerdirect_support=0", "persistent_api_support=1"])]


def read(path):
    with open(path) as f:
        return f.read().strip()


def modprobe_case(t, release, ko_dir):
    """modprobe, as an installed module is loaded: from /lib/modules/RELEASE/updates after depmod,
    its dependencies (the stand-ins) resolved by modprobe, and, where the kernel versions modules
    (Debian's do: CONFIG_MODVERSIONS), every CRC the module recorded checked against the
    kernel's. The guest's /lib/modules is the tmpfs overlay's: nothing of the host changes."""
    label = "[stock modprobe]"
    # Whether this kernel versions modules: its own modules carry CRCs then (looked up in
    # the kernel's own index, before the partial depmod below).
    own = subprocess.run(["modinfo", "-n", "overlay"], capture_output=True, text=True).stdout.strip()
    updates = f"/lib/modules/{release}/updates/nvpeer-test"
    os.makedirs(updates, exist_ok=True)
    mods = ["nvidia_peermem", "nv_p2p_sim", coresim.core_module("5x-unmaps")]
    for m in mods:
        subprocess.run(["cp", os.path.join(ko_dir, m + ".ko"), updates], check=True)
    # depmod examines only the modules given (its documented partial form; `depmod -a` over the
    # distribution's thousands of modules takes 35-110 s per call in TCG): the index then holds
    # ours and the stand-ins, resolved as `depmod -a` resolves them. The kernel's own index is
    # kept aside and put back afterwards.
    index = f"/lib/modules/{release}"
    saved = "/tmp/stock-basic-modindex"
    os.makedirs(saved, exist_ok=True)
    kept = [f for f in os.listdir(index) if f.startswith("modules.") and os.path.isfile(os.path.join(index, f))]
    for f in kept:
        subprocess.run(["cp", "-p", os.path.join(index, f), saved], check=True)
    subprocess.run(["depmod", release, *(os.path.join(updates, m + ".ko") for m in mods)], check=True)
    kernel_versions = subprocess.run(["modprobe", "--dump-modversions", own], capture_output=True,
                                     text=True).stdout.strip() != ""
    versions = subprocess.run(["modprobe", "--dump-modversions", os.path.join(updates, "nvidia_peermem.ko")],
                              capture_output=True, text=True).stdout
    print(f"info  {label}: the module records {len(versions.splitlines())} symbol CRCs", flush=True)
    before = subprocess.run(["dmesg"], capture_output=True, text=True).stdout
    try:
        for m, params in (("nv_p2p_sim", []), (coresim.core_module("5x-unmaps"), coresim.core_params("5x-unmaps")),
                          ("nvidia_peermem", [])):
            r = subprocess.run(["modprobe", m, *params], capture_output=True, text=True)
            t.check(f"{label}: modprobe {m} (no --force)", r.returncode == 0, r.stderr.strip())
        t.check(f"{label}: nvidia_peermem loaded", loaded("nvidia_peermem"))
        new = subprocess.run(["dmesg"], capture_output=True, text=True).stdout[len(before):]
        t.check(f"{label}: no symbol version disagreement in the kernel log",
                "disagrees about version of symbol" not in new, new[-400:])
        if kernel_versions:
            t.check(f"{label}: the module carries CRCs (this kernel versions modules)", len(versions.splitlines()) > 0)
    finally:
        for m in mods:
            subprocess.run(["modprobe", "-r", m], capture_output=True)
    t.check(f"{label}: unloaded", not any(loaded(m) for m in mods))
    subprocess.run(["rm", "-rf", updates], check=True)
    for f in os.listdir(index):
        if f.startswith("modules.") and f not in kept:
            os.remove(os.path.join(index, f))
    for f in kept:
        subprocess.run(["cp", "-p", os.path.join(saved, f), index], check=True)
    t.check(f"{label}: the kernel's module index put back (modprobe finds the kernel's own modules)",
            subprocess.run(["modinfo", "-n", "overlay"], capture_output=True, text=True).stdout.strip() == own != "")


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
    modprobe_case(t, release, ko_dir)
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
    return t.finish()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
