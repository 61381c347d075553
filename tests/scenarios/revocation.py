# SPDX-License-Identifier: GPL-2.0
"""Revocation at every point of a registration's life (issue 4, item 3), for each core generation:
the free callback fires inside acquire's pin, inside dma_map, after dma_map, inside put_pages,
concurrently with dereg from another thread, from another process, and for two registrations
of one buffer. Each case must leave nothing pinned or mapped, no stale page-table use, and the
VM's detectors (lockdep, KFENCE, kmemleak, hung tasks) silent.

Usage (in the VM): revocation.py [iterations]"""

import errno
import os
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stack import Stack, Tally, our_stats  # noqa: E402
import coresim  # noqa: E402
import nvsim  # noqa: E402

MIB = 1 << 20


def settled(t, nv, label, stale=0):
    """Checks the case left nothing behind, then zeroes the stand-in's event counters."""
    c = nv.counters()
    t.check(f"{label}: nothing pinned or mapped afterwards",
            c["pins"] == 0 and c["persistent_pins"] == 0 and c["mappings"] == 0, c)
    t.eq(f"{label}: stale page-table uses", stale, c["stale_table_uses"])
    t.eq(f"{label}: no P2P call from inside a callback", 0, c["calls_in_callback"])
    nv.reset()
    t.eq(f"{label}: our live contexts back to 0", 0, our_stats()["live_contexts"])
    t.eq(f"{label}: our pinned pages back to 0", 0, our_stats()["pinned_pages"])


def reg_error(core, va, size):
    try:
        mr = core.reg_mr(va, size)
    except OSError as e:
        return e.errno, None
    return 0, mr


def in_acquire(t, nv, core, label):
    a = nv.alloc(2 * MIB)
    nv.revoke_at(a.va, "in_get_pages")
    s0 = our_stats()
    reg = core.reg(a.va, 2 * MIB)
    t.eq(f"{label}: revoked while nv_mem's acquire pins: nv_mem declines, the callback counted",
         1, our_stats()["revocations"] - s0["revocations"])
    # REVOKE_AT revokes the pins but keeps the buffer (no real cudaFree), so the next client in
    # registration order, the persistent nv_mem_nc, takes it.
    t.eq(f"{label}: ... and the persistent client takes the still-allocated buffer", "nv_mem_nc", reg["client"])
    core.dereg_mr(reg["id"])
    a.free()
    settled(t, nv, label)


def in_dma_map(t, nv, core, label):
    a = nv.alloc(2 * MIB)
    nv.revoke_at(a.va, "in_dma_map")
    err, mr = reg_error(core, a.va + 0x1000, MIB)
    t.eq(f"{label}: freed inside dma_map: registration fails cleanly (EFAULT)", errno.EFAULT, err)
    if mr:
        core.dereg_mr(mr)
    a.free()
    # The stand-in's own dma_map_pages finds the table freed by the racing callback (its one
    # "stale use" is NVIDIA's side of the race, not ours).
    settled(t, nv, label, stale=1)


def in_put_pages(t, nv, core, label):
    a = nv.alloc(2 * MIB)
    mr = core.reg_mr(a.va, 2 * MIB)
    nv.revoke_at(a.va, "in_put_pages")
    s0 = our_stats()
    core.dereg_mr(mr)
    t.eq(f"{label}: freed inside put_pages: the callback ran once",
         1, our_stats()["revocations"] - s0["revocations"])
    a.free()
    settled(t, nv, label)


def two_registrations(t, nv, core, label):
    a = nv.alloc(4 * MIB)
    m1 = core.reg_mr(a.va, 2 * MIB)
    m2 = core.reg_mr(a.va + 0x3000, 3 * MIB)
    s0 = our_stats()
    a.free()
    t.eq(f"{label}: one cudaFree revokes both registrations", 2, our_stats()["revocations"] - s0["revocations"])
    for m in (m1, m2):
        try:
            core.dma_read(m, 0, 8)
            t.check(f"{label}: NIC DMA on registration {m} fails after the free", False)
        except OSError:
            t.check(f"{label}: NIC DMA on registration {m} fails after the free", True)
    core.dereg_mr(m1)
    core.dereg_mr(m2)
    settled(t, nv, label)


def other_process(t, nv, core, label):
    a = nv.alloc(2 * MIB)
    mr = core.reg_mr(a.va, 2 * MIB)
    pid = os.fork()
    if pid == 0:  # the child shares the device file and frees the parent's buffer
        try:
            nv.free_va(a.va)
            os._exit(0)
        except OSError:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    t.eq(f"{label}: another process's cudaFree succeeded", 0, os.waitstatus_to_exitcode(status))
    try:
        core.dma_read(mr, 0, 8)
        dma_failed = False
    except OSError:
        dma_failed = True
    t.check(f"{label}: NIC DMA fails after the other process freed the buffer", dma_failed)
    core.dereg_mr(mr)
    a.unmap()
    settled(t, nv, label)


def dereg_race(t, nv, core, label, iterations):
    """Dereg in one thread while another frees the buffer; every interleaving must be clean."""
    errors = []
    for i in range(iterations):
        a = nv.alloc(MIB)
        mr = core.reg_mr(a.va + (i % 16) * 0x1000, MIB // 2)
        go = threading.Barrier(2)

        def dereg():
            go.wait()
            try:
                core.dereg_mr(mr)
            except OSError as e:
                errors.append(("dereg", e.errno))

        th = threading.Thread(target=dereg)
        th.start()
        go.wait()
        try:
            a.free()
        except OSError as e:
            errors.append(("free", e.errno))
        th.join()
    t.eq(f"{label}: {iterations} dereg/cudaFree races without an error", [], errors)
    settled(t, nv, label)


def main():
    iterations = int(sys.argv[1]) if len(sys.argv) > 1 else 50
    t = Tally("revocation")
    for gen in ("4x", "5x", "5x-unmaps"):
        pd = "peerdirect_support=1" if gen == "4x" else "peerdirect_support=0"
        label = f"[ours {gen}]"
        print(f"--- {label}", flush=True)
        try:
            with Stack(gen, client="ours", pt_version=0x00020000,
                       client_params=[pd, "persistent_api_support=0"]):
                nv = nvsim.NvP2pSim()
                core = coresim.PeerCoreSim()
                nv.reset()
                for case in (in_acquire, in_dma_map, in_put_pages, two_registrations, other_process):
                    case(t, nv, core, f"{label} {case.__name__}")
                dereg_race(t, nv, core, f"{label} dereg_race", iterations)
                core.close()
                nv.close()
        except Exception as e:
            t.check(f"{label}: ran to the end", False, repr(e))
    return t.finish()


if __name__ == "__main__":
    sys.exit(main())
