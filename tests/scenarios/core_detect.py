# SPDX-License-Identifier: GPL-2.0
"""Our module tells the MOFED core generation apart at load from what the core exports
(CONTRACT 1.1: ib_get_peer_private_data only on 4.1-5.0, ib_umem_stop_invalidation_notifier only
on UNMAPS-capable cores, neither on 4.0 and 5.1-5.4-2), and follows the core where
peerdirect_support contradicts it (REVIEW-KMOD C4, 1.7). Then the DOCA-OFED 24.07+ layout: the
core in module ib_uverbs, brought in by `modprobe nvidia_peermem` through our softdep.

Usage (in the VM, through tests/scenarios/core-detect.sh): core_detect.py [gen|doca]..."""

import errno
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import conformance  # noqa: E402
import coresim  # noqa: E402
from coresim import Kmsg  # noqa: E402
import nvsim  # noqa: E402
from stack import OURS, STANDINS, Stack, Tally, loaded  # noqa: E402

GPU_PAGE = 64 * 1024
GENERATIONS = ("4x", "5x", "5x-unmaps")
# Our parameters per load: none, each peerdirect_support value, and both again with the
# invalidating client registered (persistent_api_support=0), whose ABI form the detection picks.
PARAM_SETS = [(), ("peerdirect_support=1",), ("peerdirect_support=0",),
              ("peerdirect_support=0", "persistent_api_support=0"),
              ("peerdirect_support=1", "persistent_api_support=0")]
LOAD_RE = re.compile(r"nvidia_peermem: nvpeer (\S+) loaded: core (\S+) \((.+)\), "
                     r"peerdirect_support=(-?\d+) persistent_api_support=(-?\d+) "
                     r"share_pins=(\d+), sg entries (.+)$")
CONTRADICTS = "contradicts the detected core"
PER_PAGE = "one per 64 KiB page"


def param(params, name, default):
    for p in params:
        k, _, v = p.partition("=")
        if k == name:
            return int(v)
    return default


def wanted_peerdirect(gen, given):
    """What the module must follow: the core's own value, or the parameter where 4.0 and
    5.1-5.4-2 read both forms alike."""
    return {"4x": 1, "5x-unmaps": 0}.get(gen, given)


def read(path):
    with open(path) as f:
        return f.read()


def client_line(name):
    """The core's debugfs line of the client NAME (invalidating=, unmaps=), or None."""
    return next((c for c in coresim.stats()["clients"] if c["name"] == name), None)


def register_and_move(t, st, label, per_page):
    """A GPU MR at an unaligned offset through the core: acquired by the right client, the SG
    layout the detected core wants, NIC DMA both ways, dereg, nothing left pinned."""
    nv, core = nvsim.NvP2pSim(), coresim.PeerCoreSim()
    try:
        mr_client, _ = conformance.expected_clients(st)
        alloc = nv.alloc(4 * GPU_PAGE)
        off, size = 0x1234, 3 * GPU_PAGE
        reg = core.reg(alloc.va + off, size)
        t.eq(f"{label}: GPU MR acquired by {mr_client}", mr_client, reg["client"])
        info = core.mr_info(reg["id"])
        pages = 4  # the 64 KiB pages the range touches, physically contiguous
        if per_page:
            t.eq(f"{label}: one SG entry per 64 KiB page", pages, info["nmap"])
        else:
            t.check(f"{label}: contiguous pages coalesced", info["nmap"] < pages, info["nmap"])
        conformance.move_data(t, core, alloc, reg["id"], off, size, label)
        core.dereg_mr(reg["id"])
        alloc.free()
        c = nv.counters()
        t.check(f"{label}: no pin or mapping left after dereg",
                c["pins"] == 0 and c["persistent_pins"] == 0 and c["mappings"] == 0, c)
        if st.generation == "4x":
            # C4: what a 4.x core reads as get/put_context_private_data must be NULL in every
            # client of ours (an _ex struct there makes this call jump to address 0x98).
            for name in ("nv_mem", "nv_mem_nc"):
                try:
                    core.peer_private_data(name)
                    t.check(f"{label}: ib_get_peer_private_data({name}) finds no ctx callbacks",
                            False, "returned data")
                except OSError as e:
                    t.eq(f"{label}: ib_get_peer_private_data({name}) finds no ctx callbacks",
                         errno.ENOENT, e.errno)
    finally:
        core.close()
        nv.close()


def one_load(t, gen, params):
    label = f"[{gen} {' '.join(params) or 'no parameters'}]"
    print(f"--- {label}", flush=True)
    given = param(params, "peerdirect_support", 0)
    contradiction = wanted_peerdirect(gen, given) != given
    log = Kmsg()
    try:
        with Stack(gen, client_params=params) as st:
            lines = log.read()
            loads = [m for m in map(LOAD_RE.search, lines) if m]
            if not t.eq(f"{label}: one load line", 1, len(loads)):
                print("\n".join(lines), flush=True)
                return
            version, core_id, desc, pd, pas, share, sg = loads[0].groups()
            t.eq(f"{label}: the load line names the detected core", gen, core_id)
            t.eq(f"{label}: ... and share_pins (default 1)", "1", share)
            t.eq(f"{label}: ... and the peerdirect_support given", given, int(pd))
            t.eq(f"{label}: /sys/module/nvidia_peermem/nvpeer/core", gen + "\n",
                 read("/sys/module/nvidia_peermem/nvpeer/core"))
            warns = [ln for ln in lines if CONTRADICTS in ln]
            if contradiction:
                want = (f"nvidia_peermem: peerdirect_support={given} contradicts the detected core "
                        f"{gen} ({desc}): following the core")
                t.check(f"{label}: exactly one line names the parameter and the detected core",
                        warns == [want], warns)
            else:
                t.eq(f"{label}: no contradiction reported", [], warns)
            per_page = wanted_peerdirect(gen, given) == 1
            t.eq(f"{label}: the SG layout the core wants", PER_PAGE if per_page else "coalesced",
                 sg)
            if "persistent_api_support=0" in params:
                c = client_line("nv_mem")
                # The UNMAPS-capable core honours the _ex form: proof that it was registered
                # whatever peerdirect_support said; 4.x and 5.1-5.4-2 never honour it.
                t.check(f"{label}: nv_mem invalidating, unmaps={int(gen == '5x-unmaps')} "
                        "(the ABI form the core wants)",
                        c is not None and c["invalidating"] == 1
                        and c["unmaps"] == int(gen == "5x-unmaps"), c)
            register_and_move(t, st, label, per_page)
    except Exception as e:  # a crash of the case is a failure, not an abort of the suite
        t.check(f"{label}: ran to the end", False, repr(e))
    finally:
        log.close()
    for name in ("nvidia_peermem", coresim.core_module(gen), "nv_p2p_sim"):
        t.check(f"{label}: {name} unloaded", not loaded(name))


def sh(*args):
    return subprocess.run(args, capture_output=True, text=True)


def module_root(kver, not_builtin, files):
    """A module root of its own for modprobe -d / depmod -b: this kernel's modules.builtin
    without NOT_BUILTIN, FILES {subdir/name.ko: source}; depmod run. Returns (root, its
    modules directory)."""
    root = tempfile.mkdtemp(prefix="nvpeer-doca.")
    mods = os.path.join(root, "lib", "modules", kver)
    os.makedirs(mods)
    with open(f"/lib/modules/{kver}/modules.builtin") as f:
        builtin = f.read().splitlines()
    with open(os.path.join(mods, "modules.builtin"), "w") as f:
        f.writelines(ln + "\n" for ln in builtin if os.path.basename(ln)[:-3] not in not_builtin)
    for name in ("modules.order", "modules.builtin.modinfo"):
        shutil.copy(f"/lib/modules/{kver}/{name}", mods)
    for dst, src in files.items():
        os.makedirs(os.path.join(mods, os.path.dirname(dst)), exist_ok=True)
        shutil.copy(src, os.path.join(mods, dst))
    r = sh("depmod", "-b", root, kver)
    if r.returncode:
        raise RuntimeError(f"depmod -b {root}: {r.stderr.strip()}")
    return root, mods


def module_deps(mods, path):
    with open(os.path.join(mods, "modules.dep")) as f:
        dep = dict(ln.split(":", 1) for ln in f.read().splitlines())
    return dep.get(path, "").split()


def modprobe_ours(t, label, modprobe, core, absent=()):
    """nv_p2p_sim by insmod (the nvidia.ko stand-in is not named nvidia), then
    `MODPROBE nvidia_peermem`: the core came in, holds us, registered our client, and a
    registration works; modprobe -r; nothing left loaded. ABSENT: modules that must stay out."""
    inserted = []
    try:
        r = sh("insmod", os.path.join(STANDINS, "nv_p2p_sim", "nv_p2p_sim.ko"))
        if t.eq(f"{label}: insmod nv_p2p_sim", 0, r.returncode):
            inserted.append("nv_p2p_sim")
        log = Kmsg()
        r = sh(*modprobe, "nvidia_peermem")
        t.eq(f"{label}: modprobe nvidia_peermem", 0, r.returncode) or print(r.stderr, flush=True)
        lines = log.read()
        log.close()
        if loaded(core):
            inserted.append(core)
        if loaded("nvidia_peermem"):
            inserted.append("nvidia_peermem")
        t.check(f"{label}: {core} (the core) came in", loaded(core) and
                read(f"/sys/module/{core}/initstate").strip() == "live")
        t.check(f"{label}: our module holds {core} (it resolved the core's symbols there)",
                os.path.exists(f"/sys/module/{core}/holders/nvidia_peermem"))
        for name in absent:
            t.check(f"{label}: {name} was not loaded", not loaded(name))
        t.check(f"{label}: {core} registered our client",
                any(f"{core}: registered peer client nv_mem " in ln for ln in lines), lines)
        t.check(f"{label}: our load line names the core 5x-unmaps",
                any(" loaded: core 5x-unmaps (" in ln for ln in lines), lines)
        if loaded("nvidia_peermem"):
            register_and_move(t, Stack("5x-unmaps"), label, per_page=False)
        r = sh(*modprobe, "-r", "nvidia_peermem")
        t.eq(f"{label}: modprobe -r nvidia_peermem", 0, r.returncode) or print(r.stderr, flush=True)
    finally:
        for name in reversed(inserted):
            if loaded(name):
                sh("rmmod", name)
    for name in ("nvidia_peermem", core, "nv_p2p_sim"):
        t.check(f"{label}: {name} unloaded", not loaded(name))


def doca_layout(t):
    """The core in module ib_uverbs (DOCA-OFED 24.07+), installed with our module in updates/;
    only nv_p2p_sim is loaded first."""
    label = "[doca ib_uverbs]"
    print(f"--- {label}", flush=True)
    kver = os.uname().release
    core = coresim.DOCA_CORE
    core_ko = os.path.join(STANDINS, "peer_core_sim", core + ".ko")
    softdep = sh("modinfo", "-F", "softdep", OURS).stdout
    t.check(f"{label}: softdep of our module names {core}", core in softdep.split(), softdep)
    if not t.check(f"{label}: no module {core} loaded (nor the kernel's own)", not loaded(core)):
        return
    # The test kernel builds ib_core and ib_uverbs in (the Soft-RoCE suites need a real core),
    # and modprobe never loads a module that modules.builtin lists (it says "builtin ib_uverbs").
    # A DOCA host has both as modules: module roots of their own (modprobe -d), each with this
    # kernel's modules.builtin minus those, as on a distribution kernel.
    print(f"info  {label}: modprobe of the kernel's own root: "
          f"{sh('modprobe', '--show-depends', core).stdout.strip()!r}", flush=True)

    # 1. The layout as DOCA installs it: depmod resolves our weak references to the core too.
    root, mods = module_root(kver, ("ib_core", core), {
        "updates/nvidia_peermem.ko": OURS, f"updates/{core}.ko": core_ko})
    try:
        t.eq(f"{label}: modules.dep: depmod follows our weak references to the core",
             [f"updates/{core}.ko"], module_deps(mods, "updates/nvidia_peermem.ko"))
        t.check(f"{label}: modules.softdep has our softdep",
                re.search(rf"^softdep nvidia_peermem pre: .*\b{core}\b",
                          read(os.path.join(mods, "modules.softdep")), re.M))
        modprobe_ours(t, label, ["modprobe", "-d", root], core)
    finally:
        shutil.rmtree(root)
    t.check(f"{label}: nothing installed left behind", not os.path.exists(root))

    # 2. The softdep alone: a second copy of the core named ib_core (where MOFED before 24.07
    # has it) takes our references in modules.dep, and an "install ib_core /bin/true" keeps
    # modprobe from ever loading it, so only the softdep can bring ib_uverbs in.
    label = "[doca softdep alone]"
    print(f"--- {label}", flush=True)
    root, mods = module_root(kver, ("ib_core", core), {
        "updates/nvidia_peermem.ko": OURS, f"updates/{core}.ko": core_ko,
        "extra/ib_core.ko": coresim.core_ko("5x-unmaps")})
    conf = os.path.join(root, "modprobe.d")
    os.makedirs(conf)
    with open(os.path.join(conf, "nvpeer-test.conf"), "w") as f:
        f.write("install ib_core /bin/true\n")
    modprobe = ["modprobe", "-d", root, "-C", conf]
    try:
        deps = module_deps(mods, "updates/nvidia_peermem.ko")
        shown = sh(*modprobe, "--show-depends", "nvidia_peermem").stdout
        if t.eq(f"{label}: modules.dep resolves our references to ib_core.ko, not {core}",
                ["extra/ib_core.ko"], deps) and \
           t.check(f"{label}: modprobe would not insert ib_core.ko, only {core}.ko and ours",
                   "ib_core.ko" not in shown and
                   re.search(rf"^insmod \S*/{core}\.ko\s*\n(.*\n)*insmod \S*/nvidia_peermem\.ko",
                             shown, re.M), shown):
            # The copy's own name is peer_core_sim: it must stay out.
            modprobe_ours(t, label, modprobe, core, absent=("peer_core_sim",))
    finally:
        shutil.rmtree(root)
    t.check(f"{label}: nothing installed left behind", not os.path.exists(root))


def main(argv):
    what = [a for a in argv[1:] if a] or list(GENERATIONS) + ["doca"]  # the runner may pass ""
    t = Tally("core-detect")
    for gen in what:
        if gen == "doca":
            doca_layout(t)
            continue
        for params in PARAM_SETS:
            one_load(t, gen, params)
    return t.finish()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
