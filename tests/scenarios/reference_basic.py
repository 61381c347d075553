# SPDX-License-Identifier: GPL-2.0
"""NVIDIA's own nvidia-peermem.ko (built by tests/reference/build.sh) on the stand-ins, once per
MOFED core generation: register a GPU MR at an unaligned offset, move data both ways, free the
GPU buffer while it is registered, deregister, unload. Usage (in the VM, through
tests/scenarios/reference-basic.sh): reference_basic.py [GENERATION...]

What the reference is expected to do (550.163.01, nvidia-peermem.c read for facts):
  * peerdirect_support=1 on 4x (ex_size = 0, flags = 0: MOFED 4.x reads those words as the
    legacy get/put_context_private_data pointers), 0 on 5x and 5x-unmaps (_ex client with
    PEER_MEM_INVALIDATE_UNMAPS; a 5x core ignores the marker and unmaps inside invalidation, which
    the reference skips through callback_task == current).
  * Every acquired context holds a reference on the module (__module_get in acquire,
    module_put in release): /sys/module/nvidia_peermem/refcnt counts live registrations.
  * On 4x the invalidation destroys the umem inside the free callback (dma_unmap, put_pages and
    release: refcnt drops before dereg); on 5x/5x-unmaps release waits for dereg.
"""
import errno
import glob
import os
import subprocess
import sys
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import coresim  # noqa: E402
import totals  # noqa: E402
from stack import Tally, harvest_revocations  # noqa: E402
import nvsim  # noqa: E402

REPO = os.environ.get("NVPEER_REPO") or os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
STANDINS = os.path.join(REPO, "tests", "stand-ins")
# Where tests/run.sh has tests/reference/build.sh put it (the guest cannot see /var/cache).
REFERENCE = os.environ.get("NVPEER_REFERENCE_KO",
                           os.path.join(REPO, "tests", "reference", "out", "nvidia-peermem.ko"))
MOD = "nvidia_peermem"  # the reference's module name (file nvidia-peermem.ko)
GENERATIONS = ("4x", "5x", "5x-unmaps")

MIB = 1 << 20
GPU_PAGE = 64 << 10
ALLOC = 4 * MIB
OFFSET = 0x1234
SIZE = 4 * MIB - 0x2000


def pattern(n, seed):
    """n bytes that depend on position and seed (a 257-byte period, cheap under TCG)."""
    block = bytes((i + seed) & 0xFF for i in range(257))
    return (block * (n // len(block) + 1))[:n]


def read(path):
    with open(path) as f:
        return f.read().strip()


def refcnt():
    return int(read("/sys/module/%s/refcnt" % MOD))


def errno_of(fn, *args):
    """The errno fn raises, or 0 when it succeeds."""
    try:
        fn(*args)
    except OSError as e:
        return e.errno
    return 0


def insmod(t, path, name, *params, loaded):
    r = subprocess.run(["insmod", path] + list(params), capture_output=True, text=True)
    if t.check("insmod %s %s" % (os.path.basename(path), " ".join(params)), r.returncode == 0,
               r.stderr.strip()):
        loaded.append(name)
        return True
    return False


def validate_slabs():
    """SLUB checks every object of every cache now (slub_debug=FZP): a write into a freed
    object is reported ("Poison overwritten") at once instead of whenever the object happens to
    be allocated again, so the runner sees it deterministically."""
    for f in sorted(glob.glob("/sys/kernel/slab/*/validate")):
        try:
            with open(f, "w") as fh:
                fh.write("1")
        except OSError:
            pass


def run_generation(t, gen, nv_version):
    print("--- core generation %s" % gen, flush=True)
    pd = 1 if gen == "4x" else 0
    loaded = []
    try:
        if not (insmod(t, os.path.join(STANDINS, "nv_p2p_sim", "nv_p2p_sim.ko"), "nv_p2p_sim",
                       loaded=loaded)
                and insmod(t, coresim.core_ko(gen), coresim.core_module(gen),
                           *coresim.core_params(gen, sysfs=1), loaded=loaded)
                and insmod(t, REFERENCE, MOD, "peerdirect_support=%d" % pd, loaded=loaded)):
            return
        t.eq("[%s] /sys/module/%s/version" % (gen, MOD), nv_version, read("/sys/module/%s/version" % MOD))
        t.eq("[%s] peerdirect_support" % gen, str(pd), read("/sys/module/%s/parameters/peerdirect_support" % MOD))
        peers = {n: coresim.sysfs_stats(n) for n in ("nv_mem", "nv_mem_nc")}
        for n, s in peers.items():
            t.check("[%s] memory_peers/%s/version is %s" % (gen, n, nv_version),
                    s is not None and s["version"] == nv_version, s)
        t.eq("[%s] refcnt with no registration" % gen, 0, refcnt())

        with nvsim.NvP2pSim() as nv, coresim.PeerCoreSim() as core:
            nv.reset()
            buf = nv.alloc(ALLOC)
            reg = core.reg(buf.va + OFFSET, SIZE)
            mr = reg["id"]
            t.eq("[%s] registration at va+0x%x, 4 MiB - 0x2000: peer memory" % (gen, OFFSET), 1, reg["peer"])
            t.eq("[%s] taken by client nv_mem" % gen, "nv_mem", reg["client"])
            info = core.mr_info(mr)
            t.eq("[%s] MR mapped" % gen, "mapped", info["state"])
            t.eq("[%s] nmap = 64 GPU pages (range widened to 64 KiB)" % gen, ALLOC // GPU_PAGE, info["nmap"])
            t.eq("[%s] get_page_size = 64 KiB" % gen, GPU_PAGE, info["page_size"])
            c = nv.counters()
            t.eq("[%s] one pin outstanding (acquire's probe pin released)" % gen, 1, c["pins"])
            t.eq("[%s] one DMA mapping outstanding" % gen, 1, c["mappings"])
            t.eq("[%s] refcnt 1 (one acquired context)" % gen, 1, refcnt())

            data = pattern(SIZE, 1)
            core.dma_write(mr, 0, data)
            t.check("[%s] NIC DMA write -> read back through the GPU mapping" % gen,
                    bytes(buf.mm[OFFSET:OFFSET + SIZE]) == data)
            data = pattern(SIZE, 2)
            buf.mm[OFFSET:OFFSET + SIZE] = data
            t.check("[%s] write through the GPU mapping -> NIC DMA read" % gen,
                    core.dma_read(mr, 0, SIZE) == data)
            t.eq("[%s] bytes around the MR untouched" % gen, bytes(OFFSET), bytes(buf.mm[:OFFSET]))

            before = coresim.sysfs_stats("nv_mem")
            buf.free()  # "cudaFree" while registered: NVIDIA fires the free callback
            after = coresim.sysfs_stats("nv_mem")
            t.eq("[%s] memory_peers/nv_mem/num_free_callbacks +1" % gen,
                 before["num_free_callbacks"] + 1, after["num_free_callbacks"])
            c = nv.counters()
            t.eq("[%s] stand-in free_callbacks = 1" % gen, 1, c["free_callbacks"])
            t.eq("[%s] no P2P call from inside the callback" % gen, 0, c["calls_in_callback"])
            t.eq("[%s] pins 0 after the free" % gen, 0, c["pins"])
            t.eq("[%s] mappings 0 after the free" % gen, 0, c["mappings"])
            t.eq("[%s] MR state invalidated" % gen, "invalidated", core.mr_info(mr)["state"])
            t.eq("[%s] NIC DMA write now fails with EIO" % gen, errno.EIO,
                 errno_of(core.dma_write, mr, 0, b"x" * 16))
            t.eq("[%s] NIC DMA read now fails with EIO" % gen, errno.EIO,
                 errno_of(core.dma_read, mr, 0, 16))
            t.eq("[%s] num_dealloc_mrs 1 (the umem left MAPPED)" % gen, 1, after["num_dealloc_mrs"])
            if gen == "4x":
                t.eq("[4x] umem destroyed inside the invalidation (release done: refcnt 0)", 0, refcnt())
            else:
                t.eq("[%s] context kept until dereg (refcnt 1)" % gen, 1, refcnt())

            t.eq("[%s] dereg" % gen, 0, errno_of(core.dereg_mr, mr))
            t.eq("[%s] refcnt 0 after dereg" % gen, 0, refcnt())
            s = coresim.sysfs_stats("nv_mem")
            dereg_pages = 64 if coresim.counts_dereg_pages(gen) else 0
            t.check("[%s] memory_peers/nv_mem: 1 alloc, 1 dealloc, 64 pages reg, %d dereg" % (gen, dereg_pages),
                    (s["num_alloc_mrs"], s["num_dealloc_mrs"], s["num_reg_pages"], s["num_dereg_pages"])
                    == (1, 1, 64, dereg_pages), s)
            c = nv.counters()
            for k in ("pins", "persistent_pins", "mappings", "allocations", "pages_pinned",
                      "stale_table_uses", "calls_in_callback"):
                t.eq("[%s] stand-in %s = 0 at the end" % (gen, k), 0, c[k])
            t.eq("[%s] free_callbacks still 1" % gen, 1, c["free_callbacks"])
    except Exception as e:  # a failed ioctl or a missing file: one failure, then unload
        t.check("[%s] scenario ran to the end" % gen, False, "%s: %s" % (type(e).__name__, e))
    finally:
        harvest_revocations()
        for name in reversed(loaded):
            r = subprocess.run(["rmmod", name], capture_output=True, text=True)
            t.check("[%s] rmmod %s" % (gen, name), r.returncode == 0, r.stderr.strip())
        for name in ("nvidia_peermem", coresim.core_module(gen), "nv_p2p_sim"):
            t.check("[%s] %s gone" % (gen, name), not os.path.exists("/sys/module/" + name))
        validate_slabs()


def main(argv):
    t = Tally("reference-basic")
    totals.set_client("reference")
    gens = [g for g in argv[1:] if g] or GENERATIONS  # the runner may pass an empty argument
    if not t.check("reference module %s exists (tests/reference/build.sh)" % REFERENCE,
                   os.path.isfile(REFERENCE)):
        return 1
    vfile = os.path.join(os.path.dirname(REFERENCE), "nvidia-peermem.version")
    nv_version = read(vfile) if os.path.isfile(vfile) else subprocess.run(
        ["modinfo", "-F", "version", REFERENCE], capture_output=True, text=True).stdout.strip()
    t.check("SLUB validation available (/sys/kernel/slab/*/validate)",
            bool(glob.glob("/sys/kernel/slab/*/validate")))
    for g in gens:
        run_generation(t, g, nv_version)
        time.sleep(0.1)
    return t.finish()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
