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
Then build provenance, judged before load (issue 37): the module records in its .modinfo the CRC
of every symbol it imports (ib_uverbs.ko's), `nvpeer check` and `nvpeer attach --dry-run` judge
the `nvidia_peermem` that modprobe would load against the core that runs: compatible on
peer_core_sim_abi2 (same CRC of ib_register_peer_memory_client), and `modprobe` loads it;
"rebuild" on the composite peer_core_sim.ko, whose CRC of it differs, and `modprobe` indeed
refuses ("disagrees about version of symbol ib_register_peer_memory_client").
Then re-attach (issue 37): booted with systemd as PID 1 and udevd, the shipped udev rule and
nvpeer-attach.service load ours each time a core it fits is loaded, and only then
(reattach_case).
Usage (in the VM): modversions.py KO_DIR"""

import json
import os
import shutil
import subprocess
import sys
import time

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


def intree_case(t, ko_dir):
    """REVIEW-KMOD-3 T4-1: a kernel with an in-tree peer-memory core lists a marker and
    ib_register_peer_memory_client in its own Module.symvers, with CRCs of its own, and MOFED's
    (read after it by modpost) is installed over it. Our module, built against such a tree
    (test-modversions.sh: KO_DIR/intree), records neither the kernel's marker nor its
    ib_register_peer_memory_client (MOFED's wins, as in modpost), so it loads on
    peer_core_sim_abi2 as on MOFED's core (built with the kernel's Module.symvers unfiltered, it
    records the kernel's marker CRC and is refused there)."""
    label = "[intree]"
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
        r = insmod(os.path.join(ko_dir, "intree", "nvidia_peermem.ko"), "persistent_api_support=0")
        t.eq(f"{label}: ours, built against a kernel whose Module.symvers exports the marker and "
             "ib_register_peer_memory_client, loads on peer_core_sim_abi2", (0, ""),
             (r.returncode, r.stderr.strip()))
        if r.returncode:
            return
        loaded_here.append("nvidia_peermem")
        t.eq(f"{label}: ... detects the core", "5x-unmaps", read("/sys/module/nvidia_peermem/nvpeer/core"))
        nv, core = nvsim.NvP2pSim(), coresim.PeerCoreSim()
        a = nv.alloc(2 << 20)
        mr = core.reg_mr(a.va, 2 << 20)
        core.dma_write(mr, 0, b"i" * 8)
        t.eq(f"{label}: ... and NIC DMA lands", b"i" * 8, bytes(a.mm[:8]))
        core.dereg_mr(mr)
        a.free()
        core.close()
        nv.close()
    finally:
        for mod in reversed(loaded_here):
            if rmmod(mod).returncode != 0:
                t.check(f"{label}: rmmod {mod}", False)


REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NVPEER = os.path.join(REPO, "userspace", "target", "release", "nvpeer")
PROV_DIR = f"/lib/modules/{os.uname().release}/updates/nvpeer-provenance"


def install_modules(ko_dir, core):
    """Our module, nv_p2p_sim and one core in PROV_DIR (the guest's root is an overlay), then
    depmod: what `modprobe nvidia_peermem` would load and the core's file are in modules.dep."""
    shutil.rmtree(PROV_DIR, ignore_errors=True)
    os.makedirs(PROV_DIR)
    for mod in ("nvidia_peermem", "nv_p2p_sim", core):
        shutil.copy(os.path.join(ko_dir, mod + ".ko"), PROV_DIR)
    return subprocess.run(["depmod", "-a"], capture_output=True, text=True)


def provenance_row():
    """`nvpeer check --require peermem --json`'s provenance row."""
    r = subprocess.run([NVPEER, "check", "--require", "peermem", "--json"], capture_output=True,
                       text=True)
    try:
        rows = {x["id"]: x for x in json.loads(r.stdout)["checks"]}
    except (ValueError, KeyError) as e:
        return {"status": "unparsed", "detail": f"{e}: {r.stdout[-300:]} {r.stderr[-300:]}"}
    return rows.get("provenance", {"status": "absent", "detail": str(sorted(rows))})


def attach_dry_run():
    return subprocess.run([NVPEER, "attach", "--dry-run"], capture_output=True, text=True)


def provenance_case(t, ko_dir):
    """Compatible on the core whose CRCs it was built against, rebuild on the other, each
    judged before load and then tried with modprobe."""
    label = "[provenance]"
    ko = os.path.join(ko_dir, "nvidia_peermem.ko")
    symvers = os.path.join(ko_dir, "peer_core_sim.symvers")
    reg = symvers_crcs(symvers, "ib_register_peer_memory_client")
    imports = subprocess.run(["modinfo", "-F", "nvpeer_import", ko], capture_output=True,
                             text=True).stdout.splitlines()
    recorded = {f[0]: f[1:] for f in (line.split() for line in imports) if len(f) == 3}
    t.eq(f"{label}: .modinfo records ib_register_peer_memory_client with ib_uverbs.ko's CRC",
         [f"0x{reg.get('ib_uverbs', -1):08x}", "ib_uverbs"],
         recorded.get("ib_register_peer_memory_client"))
    t.check(f"{label}: ... and nvidia_p2p_get_pages with nv_p2p_sim's",
            recorded.get("nvidia_p2p_get_pages", [None, None])[1] == "nv_p2p_sim", imports)
    t.eq(f"{label}: ... and nothing of the generation markers", [],
         [m for m in MARKERS if m in recorded])
    t.check(f"{label}: ... and no symbol of vmlinux", "kfree" not in recorded and
            "__kmalloc_noprof" not in recorded, sorted(recorded))
    t.check(f"{label}: the composite peer_core_sim.ko exports ib_register_peer_memory_client with "
            "another CRC", None not in (reg.get("ib_uverbs"), reg.get("peer_core_sim")) and
            reg["ib_uverbs"] != reg["peer_core_sim"], reg)
    for core, params, want in (
            ("peer_core_sim_abi2", ["generation=5x-unmaps", "line=25.04"], "compatible"),
            ("peer_core_sim", ["generation=5x-unmaps"], "rebuild")):
        case = f"{label} {core}"
        r = install_modules(ko_dir, core)
        t.eq(f"{case}: depmod", 0, r.returncode)
        loaded_here = []
        try:
            for mod, p in (("nv_p2p_sim", ["pt_version=0x20000"]), (core, params)):
                r = subprocess.run(["modprobe", mod, *p], capture_output=True, text=True)
                t.eq(f"{case}: modprobe {mod}", 0, r.returncode)
                if r.returncode:
                    print(f"      {r.stderr.strip()}", flush=True)
                    return
                loaded_here.append(mod)
            row = provenance_row()
            dry = attach_dry_run()
            kmsg = coresim.Kmsg()
            load = subprocess.run(["modprobe", "nvidia_peermem", "persistent_api_support=0"],
                                  capture_output=True, text=True)
            if load.returncode == 0:
                loaded_here.append("nvidia_peermem")
            if want == "compatible":
                t.check(f"{case}: check's provenance row, before load: ok, compatible",
                        row["status"] == "ok" and row["detail"].startswith("compatible"), row)
                t.check(f"{case}: attach --dry-run: would load, compatible",
                        dry.returncode == 0 and "compatible" in dry.stdout + dry.stderr,
                        (dry.returncode, dry.stdout, dry.stderr))
                t.eq(f"{case}: modprobe nvidia_peermem loads it", 0, load.returncode)
            else:
                t.check(f"{case}: check's provenance row, before load: fail, rebuild, built against "
                        "ib_uverbs's CRC, running peer_core_sim's",
                        row["status"] == "fail" and row["detail"].startswith("rebuild: built against "
                        "ib_uverbs") and f"0x{reg['peer_core_sim']:08x}" in row["detail"], row)
                t.check(f"{case}: attach --dry-run refuses: rebuild (exit 1)",
                        dry.returncode == 1 and "rebuild" in dry.stdout + dry.stderr,
                        (dry.returncode, dry.stdout, dry.stderr))
                t.check(f"{case}: modprobe nvidia_peermem is indeed refused",
                        load.returncode != 0 and not loaded("nvidia_peermem"), load.stderr)
                t.check(f"{case}: ... disagreeing about ib_register_peer_memory_client's version",
                        "disagrees about version of symbol ib_register_peer_memory_client"
                        in kmsg.text(), kmsg.text()[-400:])
            kmsg.close()
        finally:
            for mod in reversed(loaded_here):
                if rmmod(mod).returncode != 0:
                    t.check(f"{case}: rmmod {mod}", False)
    shutil.rmtree(PROV_DIR, ignore_errors=True)
    subprocess.run(["depmod", "-a"], capture_output=True)


# ---------------------------------------------------------------- re-attach through udev (issue 37)
RULE = "/etc/udev/rules.d/90-nvpeer.rules"
ATTACH_UNIT = "/etc/systemd/system/nvpeer-attach.service"
MODPROBE_CONF = "/etc/modprobe.d/nvpeer-reattach.conf"
PACKAGING = os.path.join(REPO, "kmod", "packaging")


def attach_journal():
    """The lines nvpeer-attach.service wrote to the journal so far."""
    r = subprocess.run(["journalctl", "-q", "-u", "nvpeer-attach.service", "-o", "cat", "--no-pager"],
                       capture_output=True, text=True)
    return [line for line in r.stdout.splitlines() if line.startswith("nvpeer attach:")]


def wait(cond, seconds):
    """Polls COND every 0.25 s for up to SECONDS; returns the seconds it took, or None."""
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        if cond():
            return time.monotonic() - start
        time.sleep(0.25)
    return None


def reattach_case(t, ko_dir):
    """The shipped udev rule and nvpeer-attach.service, with systemd as PID 1 and udevd running
    (run.sh --systemd): each time the core's module is loaded, the unit runs `nvpeer attach`,
    which loads ours when its provenance fits the core (within seconds, and check says so) and
    otherwise leaves it unloaded and writes one line saying why. The rule is installed as
    shipped but for the module it matches: the stand-in cores are not named ib_uverbs."""
    label = "[reattach]"
    if read("/proc/1/comm") != "systemd":
        t.check(f"{label}: booted with systemd as PID 1 (run.sh --systemd)", False, read("/proc/1/comm"))
        return
    with open(os.path.join(PACKAGING, "90-nvpeer.rules")) as f:
        rule = f.read()
    t.check(f"{label}: the shipped rule fires on ib_uverbs", 'KERNEL=="ib_uverbs"' in rule)
    with open(RULE, "w") as f:
        f.write(rule.replace('KERNEL=="ib_uverbs"', 'KERNEL=="peer_core_sim*"'))
    with open(os.path.join(PACKAGING, "nvpeer-attach.service")) as f:
        unit = f.read()
    with open(ATTACH_UNIT, "w") as f:
        f.write(unit.replace("@BINDIR@", os.path.dirname(NVPEER)).replace("@MODULE@", "nvidia_peermem"))
    # As provenance_case loads it (modprobe applies modprobe.d for the unit too).
    with open(MODPROBE_CONF, "w") as f:
        f.write("options nvidia_peermem persistent_api_support=0\n")
    for cmd in (["systemctl", "daemon-reload"], ["udevadm", "control", "--reload"]):
        r = subprocess.run(cmd, capture_output=True, text=True)
        t.eq(f"{label}: {' '.join(cmd)}", (0, ""), (r.returncode, r.stderr.strip()))
    try:
        for n, (core, params, fits) in enumerate((
                ("peer_core_sim_abi2", ["generation=5x-unmaps", "line=25.04"], True),
                ("peer_core_sim", ["generation=5x-unmaps"], False),
                ("peer_core_sim_abi2", ["generation=5x-unmaps", "line=25.04"], True))):
            case = f"{label} {n + 1}: {core}"
            t.eq(f"{case}: depmod", 0, install_modules(ko_dir, core).returncode)
            if not loaded("nv_p2p_sim"):
                subprocess.run(["modprobe", "nv_p2p_sim", "pt_version=0x20000"], check=True)
            before = len(attach_journal())
            r = subprocess.run(["modprobe", core, *params], capture_output=True, text=True)
            t.eq(f"{case}: modprobe {core} (as a network-stack reload does)", 0, r.returncode)
            took = wait(lambda: len(attach_journal()) > before, 60)
            lines = attach_journal()[before:]
            t.check(f"{case}: nvpeer-attach.service ran and wrote one line", took is not None and len(lines) == 1,
                    lines)
            if fits:
                t.check(f"{case}: ours is back, within 10 s of the core ({took or 0:.1f} s)",
                        took is not None and took < 10 and loaded("nvidia_peermem"), lines)
                row = provenance_row()
                t.check(f"{case}: check's provenance row: ok, compatible",
                        row["status"] == "ok" and row["detail"].startswith("compatible"), row)
                t.check(f"{case}: the line says loaded, compatible",
                        bool(lines) and "loaded nvidia_peermem (provenance compatible" in lines[0], lines)
            else:
                t.check(f"{case}: ours is not loaded", not loaded("nvidia_peermem"))
                t.check(f"{case}: the line says why: rebuild, built against ib_uverbs",
                        bool(lines) and "not loading nvidia_peermem: rebuild: built against ib_uverbs" in lines[0],
                        lines)
                subprocess.run(["systemctl", "reset-failed", "nvpeer-attach.service"], capture_output=True)
            for mod in ("nvidia_peermem", core):
                if loaded(mod) and rmmod(mod).returncode != 0:
                    t.check(f"{case}: rmmod {mod}", False)
    finally:
        for path in (RULE, ATTACH_UNIT, MODPROBE_CONF):
            if os.path.exists(path):
                os.remove(path)
        subprocess.run(["systemctl", "daemon-reload"], capture_output=True)
        subprocess.run(["udevadm", "control", "--reload"], capture_output=True)
        if loaded("nv_p2p_sim"):
            rmmod("nv_p2p_sim")
        shutil.rmtree(PROV_DIR, ignore_errors=True)
        subprocess.run(["depmod", "-a"], capture_output=True)


def main(argv):
    t = Tally("modversions")
    for case in (modversions_case, intree_case, provenance_case, reattach_case):
        try:
            case(t, argv[1])
        except Exception as e:
            t.check(f"[{case.__name__}]: ran to the end", False, repr(e))
    for name in ("nvidia_peermem", "peer_core_sim_abi2", "peer_core_sim", "nv_p2p_sim"):
        t.check(f"[modversions]: {name} unloaded", not loaded(name))
    return t.finish()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
