# SPDX-License-Identifier: GPL-2.0
"""Revocation at every point of a registration's life (issues 4 and 6), for each core generation:
the free callback fires inside acquire's pin, right after acquire, right after get_pages, inside
dma_map, right after dma_map (the core still holding the umem's mapping_lock), while registered,
inside put_pages, inside dereg (with and without the core's mapping_lock held), with a dereg
running while the core's invalidate returns into the callback, concurrently with dereg from
several threads, from another process, twice, and for two registrations of one buffer; and for
registrations sharing one pin (ours: one per range and process): a free while N exist, a dereg
of one racing the free, the others going on after one dereg, another process's registration of
the same VA pinning on its own. Each case must leave nothing pinned or mapped, no stale
page-table use, and the VM's detectors (lockdep, KFENCE, kmemleak, hung tasks) silent.

The same matrix runs against NVIDIA's reference module (client "reference", on 5x and
5x-unmaps; on 4x it writes into freed memory: tests/reference/expect-4x-uaf.sh). A case that
breaks it is listed in REFERENCE_BREAKS; a case that breaks inside NVIDIA's own driver whatever
the client (a free during nvidia_p2p_dma_map_pages of a non-persistent pin) in NVIDIA_BREAKS.
Such a case runs only when named with --only (tests/reference/expect-breaks.sh, in VMs of their
own: a deadlocked or corrupted kernel cannot go on).

For ours two smaller passes follow the matrix on each generation: our default parameters
(persistent API) with in_dma_map_persistent, and the 530 API stand-in with in_put_pages (515-530
put_pages reads the table its callback freed: counted as the stand-in's stale use).

Usage (in the VM): revocation.py ours|reference [iterations] [threads] [--only CASE] [--gen G]"""

import argparse
import ctypes
import errno
import json
import os
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stack import Stack, Tally, loaded, our_stats  # noqa: E402
import coresim  # noqa: E402
import nvsim  # noqa: E402
import totals  # noqa: E402

MIB = 1 << 20
# How long a case may block before it counts as a deadlock (the hung-task detector, armed at
# 30 s by the runner, reports it too).
HANG_S = 20
# The hung-task timeout while a case that hangs the reference on purpose runs (`breaking_case`).
HUNG_TASK_S = 10
# clone(2) flags for in_clone_vm (linux/sched.h).
CLONE_VM, CLONE_VFORK = 0x100, 0x4000

# Cases that break NVIDIA's nvidia-peermem 550.163.01 on a 5.x core, and how: "hangs" (run in
# a child that is left hanging) or "corrupts" (runs to its end; the kernel's memory checkers
# report what it wrote into freed memory). CONTRACT 1.10: its free callback calls the core's
# invalidate, which waits for the mapping_lock that the registering thread holds until
# activation; that thread's dma_map then waits for the RM lock the freeing thread holds.
HANGS, CORRUPTS = "hangs", "corrupts"
# Its free callback writes `callback_task = NULL` into its context after the core's invalidate
# returned; a dereg that ran meanwhile (nothing left to unmap) has freed that context in release.
_CALLBACK_UAF = ("use-after-free write: its free callback clears callback_task in the context "
                 "that a concurrent dereg's release() freed while the core's invalidate returned")
REFERENCE_BREAKS = {
    # Seen here: dereg's put_pages fires the free callback (the buffer freed meanwhile) in the
    # deregistering thread; the callback runs the core's invalidate, which takes the umem's
    # mapping_lock that this thread holds (a 5.x core that ignores PEER_MEM_INVALIDATE_UNMAPS
    # unmaps under it): lockdep "possible recursive locking", then a hung task.
    ("in_put_pages", "5x"): (HANGS, "self-deadlock on the umem's mapping_lock: its free callback "
                             "runs the core's invalidate inside its own put_pages during dereg"),
    # CONTRACT 1.10 (ref 2696789): dereg holds mapping_lock and calls dma_unmap, which waits for
    # the RM lock; the cudaFree holds the RM lock and its callback waits for mapping_lock.
    ("free_in_dereg", "5x"): (HANGS, "ABBA deadlock between dereg (mapping_lock, then the RM lock "
                              "in dma_unmap) and cudaFree (RM lock, then mapping_lock in invalidate)"),
    ("dereg_in_callback", "5x"): (CORRUPTS, _CALLBACK_UAF),
    **{("dereg_in_callback", gen): (CORRUPTS, _CALLBACK_UAF) for gen in coresim.LINES},
    # The same breaks reached by timing, so dereg_race is not run against the reference: on 5x
    # the free_in_dereg deadlock (seen within 5 races x 2 threads); on 5x-unmaps the
    # dereg_in_callback use-after-free (SLUB "Poison overwritten" in kmalloc-128 in a CI run)
    # and free_in_dereg_unlocked's unmap of a freed page table (its stale use, same run).
    ("dereg_race", "5x"): (HANGS, "the free_in_dereg ABBA deadlock, reached by timing"),
    **{("dereg_race", gen): (CORRUPTS, "the dereg_in_callback use-after-free and the "
                             "free_in_dereg_unlocked stale unmap, reached by timing")
       for gen in coresim.LINES},
    # A free between get_pages and dma_map: its free callback finds no DMA mapping yet and
    # returns without telling the core, NVIDIA frees the table, and its nv_dma_map then reads
    # page_size from the freed table, every time. SLUB's poison makes that check fail (-EINVAL,
    # what the case used to see); KFENCE reports the read when it sampled the table (a CI run:
    # "use-after-free read in nv_dma_map+0x24" on 5.4-3); a reused slot lets it map the stale
    # table (the stand-in's stale use). Detected by chance, so not in expect-breaks.sh.
    **{("after_get_pages", gen): (CORRUPTS, "use-after-free read in nv_dma_map of the page "
                                  "table freed after its free callback, detected by chance")
       for gen in coresim.GENERATIONS},
}

# Breaks inside NVIDIA's driver, for every client of a non-persistent (callback) pin:
# nvidia_p2p_dma_map_pages reads the page table, runs its RM part and links the new mapping into
# the table's mem_info after dropping the RM lock; a cudaFree in between frees the table under
# it, and the link writes into freed memory (REVIEW-KMOD 1.3, CONTRACT 2.4). SLUB poisoning or
# KFENCE report the write, kmemleak may report the mapping nobody frees. No client can prevent
# it; the persistent API (our default) has no callback and never meets it
# (in_dma_map_persistent).
_DMA_MAP_UAF = ("use-after-free write inside nvidia_p2p_dma_map_pages: the free callback frees "
                "the page table between its reads and its link of the new mapping")
NVIDIA_BREAKS = {("in_dma_map", gen): (CORRUPTS, _DMA_MAP_UAF) for gen in coresim.GENERATIONS}
# REVIEW-KMOD-2 T3-1: a put_pages from another process than the pinning one (uverbs'
# disassociate from a kworker, the last close of an inherited fd) finds nothing in RM and
# answers 0; NVIDIA's module takes that for an unpin, frees its context and drops its module
# reference, and the cudaFree's callback reads the freed context (its magic check logs
# "detected invalid context"; KFENCE reports the read when it sampled the object).
REFERENCE_BREAKS.update({("unpin_elsewhere", gen): (
    CORRUPTS, "its free callback reads its context freed after an unpin from another process, "
    "which NVIDIA answered 0 without unpinning") for gen in coresim.GENERATIONS})


def known_break(client, name, gen):
    """(how, why) when case NAME breaks CLIENT on GEN, else None."""
    return NVIDIA_BREAKS.get((name, gen)) or \
        (REFERENCE_BREAKS.get((name, gen)) if client == "reference" else None)


def validate_slabs():
    """Has SLUB check every free object's poison now (slub_debug=FZP), so a write into freed
    memory is reported by this case rather than whenever that object is next allocated."""
    root = "/sys/kernel/slab"
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name)
        if os.path.islink(path):  # an alias of a merged cache
            continue
        try:
            with open(os.path.join(path, "validate"), "w") as f:
                f.write("1")
        except OSError:
            pass  # a cache without debugging (EINVAL): nothing to check


class Case:
    def __init__(self, t, nv, core, st, label):
        self.t, self.nv, self.core, self.st, self.label = t, nv, core, st, label

    @property
    def ours(self):
        return self.st.client == "ours"

    @property
    def persistent_default(self):
        """Ours with its default parameters: nv_mem pins with the persistent API."""
        return self.ours and "persistent_api_support=0" not in self.st.client_params

    def settled(self, case, stale=0, stale_why=""):
        """Checks the case left nothing behind, then zeroes the stand-in's event counters."""
        t, label = self.t, f"{self.label} {case}"
        c = self.nv.counters()
        t.check(f"{label}: nothing pinned or mapped afterwards",
                c["pins"] == 0 and c["persistent_pins"] == 0 and c["mappings"] == 0, c)
        if isinstance(stale, tuple):  # a known race whose outcome is timing
            t.check(f"{label}: stale page-table uses in {stale}{stale_why}",
                    c["stale_table_uses"] in stale, c["stale_table_uses"])
        else:
            t.eq(f"{label}: stale page-table uses{stale_why}", stale, c["stale_table_uses"])
        t.eq(f"{label}: no P2P call from inside a callback", 0, c["calls_in_callback"])
        self.nv.reset()
        if self.ours:
            t.eq(f"{label}: our live contexts back to 0", 0, our_stats()["live_contexts"])
            t.eq(f"{label}: our pinned pages back to 0", 0, our_stats()["pinned_pages"])


def reg_error(core, va, size, inject=0):
    try:
        return 0, core.reg(va, size, inject=inject)
    except OSError as e:
        return e.errno, None


def dma_fails(core, mr):
    try:
        core.dma_read(mr, 0, 8)
        return False
    except OSError:
        return True


def in_acquire(c):
    """The free callback fires inside the pin that acquire makes."""
    a = c.nv.alloc(2 * MIB)
    c.nv.revoke_at(a.va, "in_get_pages")
    rc, reg = reg_error(c.core, a.va, 2 * MIB)
    # REVOKE_AT revokes the pins but keeps the buffer (no real cudaFree), so the next client
    # in registration order, the persistent nv_mem_nc, takes it.
    if c.ours:
        c.t.check(f"{c.label} in_acquire: nv_mem declines, the persistent client takes the buffer",
                  rc == 0 and reg["client"] == "nv_mem_nc", (rc, reg))
    else:
        # The reference only probes in acquire (pin, unpin): the revoked probe is released and
        # its real pin in get_pages, not revoked, succeeds.
        c.t.check(f"{c.label} in_acquire: the revoked probe pin does not matter; nv_mem takes it",
                  rc == 0 and reg["client"] == "nv_mem", (rc, reg))
    if reg:
        c.t.eq(f"{c.label} in_acquire: NIC DMA lands", b"x" * 8,
               (c.core.dma_write(reg["id"], 0, b"x" * 8), bytes(a.mm[:8]))[1])
    if reg:
        c.core.dereg_mr(reg["id"])
    a.free()
    c.settled("in_acquire")


class Call(threading.Thread):
    """FN in a thread of its own; rc: 0, or the errno it failed with (None until it returns)."""

    def __init__(self, fn):
        super().__init__(target=self._run)
        self.fn, self.rc = fn, None

    def _run(self):
        try:
            self.fn()
            self.rc = 0
        except OSError as e:
            self.rc = e.errno


def free_while_stalled(c, case, stalled_call, va):
    """Runs STALLED_CALL (a registration or dereg made with a stall flag) in a thread; once the
    core waits at its step, frees VA from another thread, lets the core go on, and checks that
    both return and the free succeeded."""
    call_th = threading.Thread(target=stalled_call)
    call_th.start()
    c.core.stall_wait()
    free_th = Call(lambda: c.nv.free_va(va))
    free_th.start()
    free_th.join(0.5)  # the free runs (or blocks on the core's lock) while the core waits
    resume_and_join(c, case, "the stalled call", call_th, free_th)


def resume_and_join(c, case, what, other_th, free_th):
    """Lets the stalled core go on; OTHER_TH and FREE_TH must both return (no deadlock) and the
    free must succeed."""
    c.core.stall_resume()
    other_th.join(HANG_S)
    free_th.join(HANG_S)
    if not c.t.check(f"{c.label} {case}: {what} and the free both return (no deadlock)",
                     not other_th.is_alive() and not free_th.is_alive()):
        raise RuntimeError("deadlocked: the VM cannot go on")
    totals.add("iterations")
    c.t.eq(f"{c.label} {case}: the cudaFree succeeded", 0, free_th.rc)


def stalled(c, point):
    """The registration stops right after POINT (the core's stall hook); the buffer is freed
    from another thread of this process; the registration goes on."""
    case = f"free {point}"
    a = c.nv.alloc(2 * MIB)
    res = {}

    def register():
        res["rc"], res["reg"] = reg_error(c.core, a.va + 0x1000, MIB, coresim.STALL[point])

    free_while_stalled(c, case, register, a.va)
    rc, reg = res["rc"], res["reg"]
    if c.ours:
        # Ours: a context revoked before it is mapped fails the pending step with EFAULT; once
        # mapped, a 4.x core refuses to activate the invalidated umem (EINVAL), a 5.x core keeps
        # the MR, invalidated.
        want = ("mr" if c.st.generation != "4x" else errno.EINVAL) if point == "after_dma_map" \
            else errno.EFAULT
        c.t.eq(f"{c.label} {case}: outcome", want, "mr" if reg else rc)
    if reg:
        # Mapped before the free: the MR exists but the NIC can no longer use it.
        c.t.check(f"{c.label} {case}: the MR the free invalidated refuses NIC DMA",
                  dma_fails(c.core, reg["id"]))
        c.core.dereg_mr(reg["id"])
    else:
        c.t.check(f"{c.label} {case}: the registration fails with EFAULT or EINVAL, not "
                  f"anything else ({errno.errorcode.get(rc, rc)})", rc in (errno.EFAULT, errno.EINVAL))
    a.unmap()
    c.settled(case)


def after_acquire(c):
    stalled(c, "after_acquire")


def after_get_pages(c):
    stalled(c, "after_get_pages")


def after_dma_map(c):
    stalled(c, "after_dma_map")


def free_in_dereg(c):
    """Dereg stops once the core holds the umem's mapping_lock, before dma_unmap; the buffer is
    freed from another thread; dereg goes on."""
    a = c.nv.alloc(2 * MIB)
    reg = c.core.reg(a.va, 2 * MIB, inject=coresim.STALL["in_dereg"])
    free_while_stalled(c, "free_in_dereg", lambda: c.core.dereg_mr(reg["id"]), a.va)
    a.unmap()
    if not c.ours and coresim.honours_unmaps(c.st.generation):
        # The core drops mapping_lock before its unmap (UNMAPS client): the blocked cudaFree
        # then races dereg's dma_unmap, and when its callback returns first NVIDIA's module
        # unmaps the freed table (free_in_dereg_unlocked's stale use, reached by timing).
        c.settled("free_in_dereg", stale=(0, 1),
                  stale_why=" (0 or 1: NVIDIA's module may unmap the table freed after its callback)")
    else:
        c.settled("free_in_dereg")


def free_in_dereg_unlocked(c):
    """5.x core, UNMAPS client: dereg stops after the core flipped the umem to UNMAPPED and
    dropped mapping_lock, before its dma_unmap + put_pages; the buffer is freed there, so the
    callback's invalidate finds nothing to unmap and NVIDIA frees the page table once the callback
    returns; then dereg calls the client's dma_unmap and put_pages anyway (CONTRACT 1.7 item 6:
    "dma_unmap/put_pages can be called even though invalidate has already done the unmap")."""
    a = c.nv.alloc(2 * MIB)
    reg = c.core.reg(a.va, 2 * MIB, inject=coresim.STALL["dereg_unlocked"])
    free_while_stalled(c, "free_in_dereg_unlocked", lambda: c.core.dereg_mr(reg["id"]), a.va)
    a.unmap()
    if c.ours:
        c.settled("free_in_dereg_unlocked")
    else:
        # NVIDIA's nv_dma_unmap passes the freed table to nvidia_p2p_dma_unmap_pages (which
        # would read freed memory; the stand-in counts and refuses).
        c.settled("free_in_dereg_unlocked", stale=1,
                  stale_why=" (NVIDIA's module unmaps the page table NVIDIA freed after its callback)")


# The stall point exists only where the core unmaps outside mapping_lock.
free_in_dereg_unlocked.gens = tuple(coresim.LINES)


def dereg_in_callback(c):
    """The core's invalidate, called from the free callback, stops with its work done and its
    locks dropped, before it returns into the client; the MR is deregistered meanwhile, release()
    included (CONTRACT 1.7 item 6: "release() can be called concurrently with invalidate");
    then the callback goes on. The client's context must outlive its own callback."""
    case = "dereg_in_callback"
    a = c.nv.alloc(2 * MIB)
    reg = c.core.reg(a.va, 2 * MIB, inject=coresim.STALL["invalidate_return"])
    free_th = Call(lambda: c.nv.free_va(a.va))
    free_th.start()
    c.core.stall_wait()
    dereg_th = Call(lambda: c.core.dereg_mr(reg["id"]))
    dereg_th.start()
    dereg_th.join(2)  # 5.x and 4.x cores have nothing left to wait for: dereg ends here
    c.t.check(f"{c.label} {case}: the dereg ran to its end (release() included) while the "
              "callback was still inside the core's invalidate", not dereg_th.is_alive())
    resume_and_join(c, case, "the dereg", dereg_th, free_th)
    c.t.eq(f"{c.label} {case}: the dereg succeeded", 0, dereg_th.rc)
    c.t.eq(f"{c.label} {case}: the callback ran once", 1, c.nv.counters()["free_callbacks"])
    validate_slabs()
    a.unmap()
    c.settled(case)


def in_dma_map(c):
    """NVIDIA_BREAKS: the free callback fires inside nvidia_p2p_dma_map_pages, after it read the
    table and before it links the new mapping; the stand-in, as nvidia.ko, then writes into the
    freed table and returns 0. Our module must still fail the registration (the context was
    revoked meanwhile); the write is reported by SLUB (validated here) or KFENCE."""
    a = c.nv.alloc(2 * MIB)
    c.nv.revoke_at(a.va, "in_dma_map")
    rc, reg = reg_error(c.core, a.va + 0x1000, MIB)
    c.t.eq(f"{c.label} in_dma_map: the callback ran inside dma_map", 1,
           c.nv.counters()["free_callbacks"])
    if c.ours:
        c.t.eq(f"{c.label} in_dma_map: freed inside dma_map: registration fails (EFAULT)",
               errno.EFAULT, rc)
    else:
        # NVIDIA's module takes dma_map_pages' 0 at its word: the MR is created over a pin that
        # NVIDIA revoked and freed (its callback came before the core had an MR to invalidate),
        # and the NIC still reaches the pages; its dereg then unmaps the freed table.
        c.t.eq(f"{c.label} in_dma_map: the reference registers an MR over the revoked pin",
               0, rc)
        if reg:
            c.t.check(f"{c.label} in_dma_map: ... which still does NIC DMA (known break)",
                      not dma_fails(c.core, reg["id"]))
    if reg:
        c.core.dereg_mr(reg["id"])
    a.free()
    validate_slabs()
    # The stand-in's dma_map_pages counts its own write into the table freed under it; the
    # reference's dereg adds its dma_unmap of that table.
    c.settled("in_dma_map", stale=1 if c.ours else 2,
              stale_why=" (nvidia_p2p_dma_map_pages links its mapping into the table freed during the call"
              + ("" if c.ours else "; NVIDIA's module then unmaps that table at dereg") + ")")


def revoke_points_fired(point):
    """How often the stand-in logged that a REVOKE_AT POINT fired (it may revoke nothing)."""
    r = subprocess.run(["dmesg"], capture_output=True, text=True)
    return r.stdout.count(f"nv_p2p_sim: REVOKE_AT {point} fired")


def in_dma_map_persistent(c):
    """The same free, armed at the same point, with a persistent registration: persistent pins
    have no callback, so NVIDIA never frees the table under dma_map; the registration succeeds
    and the NIC reaches the memory."""
    case = "in_dma_map_persistent"
    a = c.nv.alloc(2 * MIB)
    fired = revoke_points_fired("in_dma_map")
    c.nv.revoke_at(a.va, "in_dma_map")
    # Our defaults: nv_mem itself is persistent; otherwise CQ umems go to nv_mem_nc.
    reg = c.core.reg(a.va + 0x1000, MIB, kind="mr" if c.persistent_default else "cq")
    c.t.eq(f"{c.label} {case}: a persistent client takes it",
           "nv_mem" if c.persistent_default else "nv_mem_nc", reg["client"])
    c.t.eq(f"{c.label} {case}: the free armed in dma_map fired there", fired + 1,
           revoke_points_fired("in_dma_map"))
    c.t.eq(f"{c.label} {case}: no free callback (a persistent pin has none)", 0,
           c.nv.counters()["free_callbacks"])
    c.t.eq(f"{c.label} {case}: NIC DMA lands", b"p" * 8,
           (c.core.dma_write(reg["id"], 0, b"p" * 8), bytes(a.mm[0x1000:0x1008]))[1])
    c.core.dereg_mr(reg["id"])
    a.free()
    validate_slabs()
    c.settled(case)


def in_put_pages(c):
    a = c.nv.alloc(2 * MIB)
    mr = c.core.reg_mr(a.va, 2 * MIB)
    c.nv.revoke_at(a.va, "in_put_pages")
    c.core.dereg_mr(mr)
    c.t.eq(f"{c.label} in_put_pages: freed inside put_pages: the callback ran once",
           1, c.nv.counters()["free_callbacks"])
    a.free()
    if c.st.api == 530:
        # Known NVIDIA 515-530 behaviour (REVIEW-KMOD 1.4): its put_pages copies gpu_uuid before
        # the RM lookup and reads bPersistent after it, from the table the callback freed.
        c.settled("in_put_pages", stale=1,
                  stale_why=" (NVIDIA 515-530 put_pages reads the table its callback just freed)")
    else:
        c.settled("in_put_pages")


def two_registrations(c):
    a = c.nv.alloc(4 * MIB)
    m1 = c.core.reg_mr(a.va, 2 * MIB)
    m2 = c.core.reg_mr(a.va + 0x3000, 3 * MIB)
    a.free()
    c.t.eq(f"{c.label} two_registrations: one cudaFree revokes both",
           2, c.nv.counters()["free_callbacks"])
    for m in (m1, m2):
        c.t.check(f"{c.label} two_registrations: NIC DMA on MR {m} fails after the free",
                  dma_fails(c.core, m))
    c.core.dereg_mr(m1)
    c.core.dereg_mr(m2)
    c.settled("two_registrations")


def race_dereg_and_free(c, mr, alloc, record):
    """Deregisters MR from a thread of its own while this one frees ALLOC, both let go by one
    barrier; RECORD(what, errno) gets each call that failed."""
    go = threading.Barrier(2)

    def dereg():
        go.wait()
        try:
            c.core.dereg_mr(mr)
        except OSError as e:
            record("dereg", e.errno)

    th = threading.Thread(target=dereg)
    th.start()
    go.wait()
    try:
        alloc.free()
    except OSError as e:
        record("free", e.errno)
    th.join()


SHARED = 4  # registrations of one range in the shared-pin cases


def pin_calls(nv_counters):
    return nv_counters["calls_get_pages"] + nv_counters["calls_get_pages_persistent"]


def shared_registrations(c, case, a, n=SHARED, size=2 * MIB):
    """N registrations of one range (as one per NIC or protection domain): ours pins once,
    NVIDIA's module twice per registration (its acquire probes). Returns the MR ids."""
    before = pin_calls(c.nv.counters())
    mrs = [c.core.reg_mr(a.va + 0x1000 * k, size - 0x1000 * k) for k in range(n)]
    pins = pin_calls(c.nv.counters()) - before
    c.t.eq(f"{c.label} {case}: NVIDIA pin calls for {n} registrations of one range",
           1 if c.ours else 2 * n, pins)
    if c.ours:
        st = our_stats()
        c.t.eq(f"{c.label} {case}: one live pin", 1, st["live_pins"])
        c.t.eq(f"{c.label} {case}: pinned pages counted once", size >> 16, st["pinned_pages"])
    return mrs


def shared_free(c):
    """cudaFree while N registrations share one pin: one callback revokes every one of them."""
    case = "shared_free"
    a = c.nv.alloc(2 * MIB)
    mrs = shared_registrations(c, case, a)
    for k, m in enumerate(mrs):
        c.core.dma_write(m, 0, bytes([0x40 + k]) * 8)
        c.t.eq(f"{c.label} {case}: NIC DMA through MR {k} lands", bytes([0x40 + k]) * 8,
               bytes(a.mm[0x1000 * k:0x1000 * k + 8]))
    s0 = our_stats() if c.ours else {}
    a.free()
    c.t.eq(f"{c.label} {case}: free callbacks", 1 if c.ours else SHARED,
           c.nv.counters()["free_callbacks"])
    for k, m in enumerate(mrs):
        c.t.check(f"{c.label} {case}: NIC DMA on MR {k} fails after the free", dma_fails(c.core, m))
    if c.ours:
        st = our_stats()
        c.t.eq(f"{c.label} {case}: the core told to invalidate each registration", SHARED,
               st["invalidate_calls"] - s0["invalidate_calls"])
        # stats/revocations counts NVIDIA's free callbacks, as the README says (REVIEW-KMOD-2
        # T3-8), not the registrations they revoked.
        c.t.eq(f"{c.label} {case}: stats/revocations counts the one free callback", 1,
               st["revocations"] - s0["revocations"])
        c.t.eq(f"{c.label} {case}: no live pin", 0, st["live_pins"])
    for m in mrs:
        c.core.dereg_mr(m)
    c.settled(case)


def shared_dereg_one(c):
    """Deregistering one of N registrations that share a pin leaves the others working; the
    last dereg unpins."""
    case = "shared_dereg_one"
    a = c.nv.alloc(2 * MIB)
    mrs = shared_registrations(c, case, a)
    for j, k in enumerate((1, 0, 3)):  # any order; MR 2 last
        c.core.dereg_mr(mrs[k])
        c.t.eq(f"{c.label} {case}: NVIDIA pins held after dereg of MR {k}",
               1 if c.ours else SHARED - j - 1, c.nv.counters()["pins"])
    c.core.dma_write(mrs[2], 0x2000, b"s" * 8)
    c.t.eq(f"{c.label} {case}: the remaining MR's NIC DMA lands", b"s" * 8,
           bytes(a.mm[0x4000:0x4008]))
    c.core.dereg_mr(mrs[2])
    a.free()
    c.t.eq(f"{c.label} {case}: no callback after every dereg", 0, c.nv.counters()["free_callbacks"])
    c.settled(case)


def shared_dereg_race(c, iterations=20):
    """Dereg of one registration racing the cudaFree that revokes it and the others on its pin,
    ITERATIONS times: each outcome is clean, the survivors refuse NIC DMA."""
    case = "shared_dereg_race"
    if not c.ours:
        print(f"skip  {c.label} {case}: dereg racing a cudaFree breaks the reference "
              "(dereg_race, REFERENCE_BREAKS)", flush=True)
        return
    errors = []
    for i in range(iterations):
        a = c.nv.alloc(MIB)
        mrs = [c.core.reg_mr(a.va + 0x1000 * k, MIB // 2) for k in range(3)]
        race_dereg_and_free(c, mrs[i % 3], a, lambda what, e: errors.append((what, e)))
        for k, m in enumerate(mrs):
            if k != i % 3:
                if not dma_fails(c.core, m):
                    errors.append(("dma after free", k))
                c.core.dereg_mr(m)
    totals.add("iterations", iterations)
    c.t.eq(f"{c.label} {case}: {iterations} dereg/cudaFree races on a shared pin without an error",
           [], errors)
    c.settled(case)


def shared_other_process(c):
    """The same VA registered by another process is another process's memory: it must not join
    the parent's pin (keyed by VA alone it would, and the child's NIC would reach the parent's
    buffer); NVIDIA is asked, and refuses (CUDA memory belongs to the process that allocated
    it: the stand-in checks the caller's mm)."""
    case = "shared_other_process"
    a = c.nv.alloc(2 * MIB)
    m1 = c.core.reg_mr(a.va, 2 * MIB)
    before = pin_calls(c.nv.counters())
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child inherits the mapping and the core's file
        os.close(r)
        try:
            m = c.core.reg_mr(a.va, 2 * MIB)
            c.core.dereg_mr(m)
            os.write(w, b"ok")
        except OSError as e:
            os.write(w, errno.errorcode.get(e.errno, "?").encode()[:2])
        finally:
            os._exit(0)
    os.close(w)
    got = os.read(r, 2)
    os.close(r)
    os.waitpid(pid, 0)
    c.t.eq(f"{c.label} {case}: the child's registration asks NVIDIA (both clients) and fails",
           (b"EF", 2), (got, pin_calls(c.nv.counters()) - before))
    c.core.dma_write(m1, 0, b"o" * 8)
    c.t.eq(f"{c.label} {case}: the parent's MR still works", b"o" * 8, bytes(a.mm[:8]))
    c.core.dereg_mr(m1)
    a.free()
    c.settled(case)


def in_clone_vm(fn):
    """Runs FN in a new process that shares this one's memory but not its thread group
    (clone(CLONE_VM) without CLONE_THREAD, as vfork makes), this thread suspended until it
    exits (CLONE_VFORK), so the two never run Python at once. Returns FN's result, or raises
    what it raised."""
    libc = ctypes.CDLL(None, use_errno=True)
    stack = ctypes.create_string_buffer(1 << 20)
    top = ctypes.c_void_p(ctypes.addressof(stack) + len(stack) - 64)
    out = {}

    def child(_):
        try:
            out["pid"] = os.getpid()
            out["result"] = fn()
        except BaseException as e:  # handed to the parent, which raises it again
            out["error"] = e
        return 0

    entry = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)(child)
    pid = libc.clone(entry, top, CLONE_VM | CLONE_VFORK | signal.SIGCHLD, None)
    if pid < 0:
        raise OSError(ctypes.get_errno(), "clone(CLONE_VM)")
    os.waitpid(pid, 0)
    if "error" in out:
        raise out["error"]
    if out.get("pid") != pid or pid == os.getpid():
        raise RuntimeError(f"clone(CLONE_VM): the child ran as {out.get('pid')}, not {pid}")
    return out["result"]


def shared_clone_vm(c):
    """REVIEW-KMOD-2 T3-7: a process that shares this one's memory but not its thread group
    (clone(CLONE_VM) without CLONE_THREAD) registers a range this process registered. NVIDIA
    scopes pins by thread group (RM looks the VA up among the calling process's objects), so it
    refuses that process the pin; ours keys pins by thread group too, so it asks NVIDIA and is
    refused, as NVIDIA's module is. Keyed by the mm (before), it joined this process's pin and
    gave the other process's NIC memory NVIDIA would have refused it."""
    case = "shared_clone_vm"
    a = c.nv.alloc(2 * MIB)
    m1 = c.core.reg_mr(a.va, 2 * MIB)
    before = pin_calls(c.nv.counters())
    rc, reg = in_clone_vm(lambda: reg_error(c.core, a.va, 2 * MIB))
    if reg:  # joined (the failure below): deregistered from here, its pin being ours
        c.core.dereg_mr(reg["id"])
    c.t.eq(f"{c.label} {case}: the CLONE_VM process's registration asks NVIDIA (both clients) "
           "and fails", (errno.EFAULT, 2), (rc, pin_calls(c.nv.counters()) - before))
    c.core.dma_write(m1, 0, b"v" * 8)
    c.t.eq(f"{c.label} {case}: this process's MR still works", b"v" * 8, bytes(a.mm[:8]))
    c.core.dereg_mr(m1)
    a.free()
    c.settled(case)


def shared_persistent(c):
    """Our persistent client: with share_pins=2, N registrations of one range share one
    persistent pin and the last dereg puts it; by default (share_pins=1) each pins on its own,
    since nothing would tell a shared persistent pin that its buffer was freed and its VA reused
    (kmod/client/pin.rs)."""
    share = "share_pins=2" in c.st.client_params
    case = "shared_persistent" + ("" if share else " (not shared by default)")
    a = c.nv.alloc(2 * MIB)
    before = pin_calls(c.nv.counters())
    mrs = [c.core.reg_mr(a.va + 0x1000 * k, 2 * MIB - 0x1000 * k) for k in range(SHARED)]
    held = 1 if share else SHARED
    c.t.eq(f"{c.label} {case}: NVIDIA pin calls for {SHARED} registrations", held,
           pin_calls(c.nv.counters()) - before)
    c.t.eq(f"{c.label} {case}: persistent pins held", held, c.nv.counters()["persistent_pins"])
    c.t.eq(f"{c.label} {case}: our live pins", held, our_stats()["live_pins"])
    for m in mrs[:-1]:
        c.core.dereg_mr(m)
    c.t.eq(f"{c.label} {case}: pinned while one MR is left", 1, c.nv.counters()["persistent_pins"])
    c.core.dma_write(mrs[-1], 0, b"q" * 8)
    c.t.eq(f"{c.label} {case}: the last MR's NIC DMA lands", b"q" * 8,
           bytes(a.mm[0x1000 * (SHARED - 1):0x1000 * (SHARED - 1) + 8]))
    c.core.dereg_mr(mrs[-1])
    c.t.eq(f"{c.label} {case}: unpinned with the last MR", 0, c.nv.counters()["persistent_pins"])
    a.free()
    c.settled(case)


def invalid_context_lines():
    """How often NVIDIA's module logged that its free callback found a freed context."""
    r = subprocess.run(["dmesg"], capture_output=True, text=True)
    return r.stdout.count("detected invalid context")


NVPEER = os.path.join(os.environ.get("NVPEER_REPO", os.path.dirname(os.path.dirname(
    os.path.dirname(os.path.abspath(__file__))))), "userspace", "target", "release", "nvpeer")


def who_json():
    """`nvpeer who --json` (the release CLI); {} with the error when it fails."""
    r = subprocess.run([NVPEER, "who", "--json"], capture_output=True, text=True)
    if r.returncode != 0:
        return {"error": r.stderr.strip()}
    return json.loads(r.stdout)


def leave_from_kworker(core, mrs):
    """uverbs' disassociate (a NIC reset, unbind or removal): every MR of the file is
    deregistered from a kernel worker."""
    n = core.disassociate()
    core.close()
    return n == len(mrs)


def leave_from_child(core, mrs):
    """A child inherits the uverbs fd; the parent closes its copy; the child deregisters the
    first MR and exits, closing the file's last copy, which deregisters the rest there."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(w)
        os.read(r, 1)
        try:
            core.dereg_mr(mrs[0])
            os._exit(0)
        except OSError:
            os._exit(1)
    os.close(r)
    core.close()
    os.write(w, b"g")
    os.close(w)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0


def unpin_elsewhere(c):
    """REVIEW-KMOD-2 T3-1: the last registration of a buffer leaves from another process than
    the one that pinned it: from a kernel worker (uverbs' disassociate) and from a child holding
    an inherited uverbs fd. NVIDIA's put_pages looks the pin up in the caller's process only,
    answers 0 and keeps the pin and its free callback. Ours must not take that for an unpin: it
    leaves the pin, and its module reference, to the callback; rmmod is refused until the owner
    frees the buffer; then the callback comes and the module unloads. NVIDIA's module takes the
    0 for an unpin, frees its context and its module reference, and its callback later reads the
    freed context (REFERENCE_BREAKS; tests/reference/expect-breaks.sh)."""
    for how, leave in (("kworker", leave_from_kworker), ("child", leave_from_child)):
        case = f"unpin_elsewhere ({how})"
        a = c.nv.alloc(2 * MIB)
        core = coresim.PeerCoreSim()  # the registrations' own uverbs file
        # One 64 KiB-aligned range: ours shares one pin between them.
        mrs = [core.reg_mr(a.va + 0x1000 * k, 2 * MIB - 0x1000 * k) for k in range(2)]
        pins = 1 if c.ours else 2
        c0, s0 = c.nv.counters(), our_stats()
        c.t.check(f"{c.label} {case}: both registrations deregistered there", leave(core, mrs))
        c1 = c.nv.counters()
        c.t.eq(f"{c.label} {case}: NVIDIA still holds the pin(s) after the last dereg", pins,
               c1["pins"])
        if c.ours:
            st = our_stats()
            c.t.eq(f"{c.label} {case}: ours never asked NVIDIA from there (put_pages calls)",
                   c0["calls_put_pages"], c1["calls_put_pages"])
            c.t.eq(f"{c.label} {case}: the pin is left to the callback, still counted "
                   "(live_pins, live_contexts, unpins_left_to_callback +1)", (1, 0, 1),
                   (st["live_pins"], st["live_contexts"],
                    st["unpins_left_to_callback"] - s0["unpins_left_to_callback"]))
            rc, err = c.st.unload_client()
            c.t.check(f"{c.label} {case}: rmmod refused while NVIDIA holds our callback",
                      rc != 0 and loaded("nvidia_peermem"), err)
            # REVIEW-KMOD-3 T4-6: what blocks the unload names its owner.
            who = who_json()
            mine = [(r["tgid"], r["state"], r["pin_bytes"], r["gpu"] is not None)
                    for r in who.get("records", [])]
            c.t.eq(f"{c.label} {case}: nvpeer who --json lists the pin left to the callback under its "
                   "owner (tgid, state, pin bytes, a GPU)", [(os.getpid(), "left-to-callback", 2 * MIB, True)],
                   mine)
            held = [(h["tgid"], h["pinned_bytes"]) for h in who.get("holders", [])]
            c.t.eq(f"{c.label} {case}: ... and as a holder of its 2 MiB", [(os.getpid(), 2 * MIB)], held)
            c.t.eq(f"{c.label} {case}: ... counted in its GPU's totals (pinned bytes, pins)",
                   [(2 * MIB, 1)], [(g["pinned_bytes"], g["pins"]) for g in who.get("gpus", []) if g["pins"]])
        else:
            c.t.eq(f"{c.label} {case}: its put_pages from there answered 0 without unpinning",
                   pins, c1["put_pages_other_process"] - c0["put_pages_other_process"])
            with open("/sys/module/nvidia_peermem/refcnt") as f:
                refcnt = f.read().strip()
            c.t.eq(f"{c.label} {case}: it dropped its module references (rmmod would unload it "
                   "under NVIDIA's callbacks)", "0", refcnt)
            n0 = invalid_context_lines()
        a.free()
        c2 = c.nv.counters()
        c.t.eq(f"{c.label} {case}: the cudaFree ran the callback(s)", pins,
               c2["free_callbacks"] - c1["free_callbacks"])
        if c.ours:
            c.t.eq(f"{c.label} {case}: ... which released the pin", 0, our_stats()["live_pins"])
            c.t.eq(f"{c.label} {case}: ... and took it out of the records", [],
                   who_json().get("records"))
            c.st.reload_client()
            c.t.check(f"{c.label} {case}: rmmod (and a new load) once the callback came",
                      loaded("nvidia_peermem"))
        else:
            c.t.eq(f"{c.label} {case}: its callback read its freed context each time (its "
                   "'detected invalid context' line)", n0 + pins, invalid_context_lines())
        validate_slabs()
        a.unmap()
        c.settled(case)


def shared_revoke_all(c):
    """REVIEW-KMOD-2 T3-2: the free callback of a pin two registrations share stops inside the
    core's invalidate of the first (the core's INVALIDATE_RETURN stall) while the second, joined
    and past get_pages, goes on to dma_map: it must be refused at once, without NVIDIA being asked
    to map the table it frees when the callback returns (which would read and write it, as
    in_dma_map shows)."""
    case = "shared_revoke_all"
    if not c.ours:
        print(f"skip  {c.label} {case}: NVIDIA's module pins each registration on its own: the "
              "second pin's callback frees its table under that dma_map (in_dma_map, NVIDIA_BREAKS)",
              flush=True)
        return
    a = c.nv.alloc(2 * MIB)
    first = c.core.reg(a.va, 2 * MIB, inject=coresim.STALL["invalidate_return"])
    res = {}

    def register():
        # The same 64 KiB-aligned range as the first: it joins the first one's pin.
        res["rc"], res["reg"] = reg_error(c.core, a.va + 0x1000, 2 * MIB - 0x1000,
                                          coresim.STALL["after_get_pages"])

    reg_th = threading.Thread(target=register)
    reg_th.start()
    c.core.stall_wait(coresim.STALL_CORE)
    c.t.eq(f"{c.label} {case}: the second registration joined the first one's pin", 1,
           our_stats()["live_pins"])
    maps0 = c.nv.counters()["calls_dma_map"]
    free_th = Call(lambda: c.nv.free_va(a.va))
    free_th.start()
    c.core.stall_wait(coresim.STALL_INVALIDATE)  # the callback is inside the first's invalidate
    c.core.stall_resume(coresim.STALL_CORE)      # the second goes on to dma_map
    reg_th.join(5)
    returned = not reg_th.is_alive()
    c.core.stall_resume(coresim.STALL_INVALIDATE)
    reg_th.join(HANG_S)
    free_th.join(HANG_S)
    if not c.t.check(f"{c.label} {case}: the registration and the free both return",
                     not reg_th.is_alive() and not free_th.is_alive()):
        raise RuntimeError("deadlocked: the VM cannot go on")
    c.t.check(f"{c.label} {case}: the second registration returned while the callback was still "
              "inside the first one's invalidate", returned)
    c.t.eq(f"{c.label} {case}: ... refused (EFAULT)", errno.EFAULT, res.get("rc"))
    c.t.eq(f"{c.label} {case}: NVIDIA was not asked to map the table being freed", maps0,
           c.nv.counters()["calls_dma_map"])
    c.t.eq(f"{c.label} {case}: the cudaFree succeeded", 0, free_th.rc)
    c.t.check(f"{c.label} {case}: the first MR refuses NIC DMA", dma_fails(c.core, first["id"]))
    c.core.dereg_mr(first["id"])
    if res.get("reg"):
        c.core.dereg_mr(res["reg"]["id"])
    validate_slabs()
    a.unmap()
    c.settled(case)


def freed_twice(c):
    a = c.nv.alloc(2 * MIB)
    mr = c.core.reg_mr(a.va, 2 * MIB)
    c.nv.free_va(a.va)
    try:
        c.nv.free_va(a.va)
        second = 0
    except OSError as e:
        second = e.errno
    c.t.eq(f"{c.label} freed_twice: the second cudaFree is refused (EINVAL)", errno.EINVAL, second)
    c.t.eq(f"{c.label} freed_twice: the callback ran once", 1, c.nv.counters()["free_callbacks"])
    c.t.check(f"{c.label} freed_twice: NIC DMA fails", dma_fails(c.core, mr))
    c.core.dereg_mr(mr)
    a.unmap()
    c.settled("freed_twice")


def other_process(c):
    a = c.nv.alloc(2 * MIB)
    mr = c.core.reg_mr(a.va, 2 * MIB)
    pid = os.fork()
    if pid == 0:  # the child shares the device file and frees the parent's buffer
        try:
            c.nv.free_va(a.va)
            os._exit(0)
        except OSError:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    c.t.eq(f"{c.label} other_process: another process's cudaFree succeeded", 0,
           os.waitstatus_to_exitcode(status))
    c.t.check(f"{c.label} other_process: NIC DMA fails after the free", dma_fails(c.core, mr))
    c.core.dereg_mr(mr)
    a.unmap()
    c.settled("other_process")


def dereg_race(c, iterations, threads):
    """THREADS pairs at once, each racing a dereg against the cudaFree of its buffer,
    ITERATIONS times; every interleaving must be clean. Each buffer is freed only after its
    registration returned: a free while the registration is inside nvidia_p2p_dma_map_pages is
    NVIDIA's own use-after-free (NVIDIA_BREAKS), which would make this race flaky."""
    errors, lock = [], threading.Lock()

    def record(what, e):
        with lock:
            errors.append((what, e))

    def pair(k):
        for i in range(iterations):
            a = c.nv.alloc(MIB)
            mr = c.core.reg_mr(a.va + ((i + k) % 16) * 0x1000, MIB // 2)
            race_dereg_and_free(c, mr, a, record)

    workers = [threading.Thread(target=pair, args=(k,)) for k in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    totals.add("iterations", iterations * threads)
    c.t.eq(f"{c.label} dereg_race: {threads} threads x {iterations} dereg/cudaFree races "
           "without an error", [], errors)
    c.settled("dereg_race")


CASES = (in_acquire, after_acquire, after_get_pages, in_dma_map, in_dma_map_persistent,
         after_dma_map, in_put_pages, free_in_dereg, free_in_dereg_unlocked, dereg_in_callback,
         two_registrations, shared_free, shared_dereg_one, shared_dereg_race, shared_other_process,
         shared_clone_vm, shared_revoke_all, unpin_elsewhere, freed_twice, other_process)


def combinations(client, gens):
    """(gen, api, page-table version, client parameters, cases or None for all + dereg_race)."""
    for gen in gens:
        if client == "reference":
            # NVIDIA 550: nv_mem + nv_mem_nc (535 stand-in, persistent API), _ex on 5.x cores.
            yield gen, 535, 0x00020000, ["peerdirect_support=0"], None
        else:
            pd = "peerdirect_support=1" if gen == "4x" else "peerdirect_support=0"
            yield gen, 535, 0x00020000, [pd, "persistent_api_support=0"], None
            yield gen, 535, 0x00020000, [pd], (in_dma_map_persistent, shared_persistent)
            yield gen, 535, 0x00020000, [pd, "share_pins=2"], (shared_persistent,)
            yield gen, 530, 0x00010002, [pd, "persistent_api_support=0"], (in_put_pages,)


def breaking_case(name, gen, iterations, threads):
    """Runs a case that breaks the reference in a child process whose output goes to a file, and
    returns once it finished or hung: a thread stuck in the kernel cannot be waited for, and the
    VM runner then judges the kernel's reports. Exit 0 when it hung (the known break)."""
    logf = "/tmp/revocation-breaking.log"
    totals.set_client("reference")  # this run's reports are the reference's, whatever hangs
    totals.add("checks")
    totals.write(f"revocation-reference-{name}")
    # A hang is reported once a task has been blocked for the timeout, at khungtaskd's next check
    # (one every timeout): HUNG_TASK_S instead of the VM's 30 has it in the log within twice that.
    with open("/proc/sys/kernel/hung_task_timeout_secs", "w") as f:
        f.write(str(HUNG_TASK_S))
    pid = os.fork()
    if pid == 0:
        totals.forget()
        fd = os.open(logf, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        sys.argv = [sys.argv[0], "reference", str(iterations), str(threads), "--only", name,
                    "--in-child", "--gen", gen]
        os._exit(main())
    # Past a hung-task check (every HUNG_TASK_S) after HUNG_TASK_S blocked, with room to spare.
    deadline = time.monotonic() + 3.5 * HUNG_TASK_S
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            print("".join(f"child: {line}" for line in open(logf)), end="", flush=True)
            print(f"FAIL  reference {name}: finished (exit {os.waitstatus_to_exitcode(status)}); "
                  f"it was expected to break: {known_break('reference', name, gen)[1]}", flush=True)
            return 1
        time.sleep(1)
    print("".join(f"child: {line}" for line in open(logf)), end="", flush=True)
    print(f"ok    reference {name}: hung, as known ({known_break('reference', name, gen)[1]})", flush=True)
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("client", nargs="?", default="ours", choices=("ours", "reference"))
    ap.add_argument("iterations", nargs="?", type=int, default=50)
    ap.add_argument("threads", nargs="?", type=int, default=2)
    ap.add_argument("--only", help="run this case only (also one that breaks the reference)")
    ap.add_argument("--gen", action="append", help="core generation(s); default: all it runs on")
    ap.add_argument("--in-child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.client == "reference" and not args.in_child and args.gen and len(args.gen) == 1 \
            and (known_break(args.client, args.only, args.gen[0]) or ("",))[0] == HANGS:
        return breaking_case(args.only, args.gen[0], args.iterations, args.threads)
    default_gens = coresim.GENERATIONS[1:] if args.client == "reference" else coresim.GENERATIONS
    t = Tally(f"revocation-{args.client}")
    for gen, api, ptv, params, only_cases in combinations(args.client, args.gen or default_gens):
        cases = only_cases or CASES
        if args.only and args.only not in [case.__name__ for case in cases] + \
                ([] if only_cases else ["dereg_race"]):
            continue
        label = f"[{args.client} {gen}" + (f" api{api}" if api != 535 else "") + \
            (" defaults" if args.client == "ours" and "persistent_api_support=0" not in params
             else "") + (" share_pins=2" if "share_pins=2" in params else "") + "]"
        print(f"--- {label}", flush=True)
        try:
            with Stack(gen, client=args.client, api=api, pt_version=ptv, client_params=params) as st:
                nv = nvsim.NvP2pSim()
                core = coresim.PeerCoreSim()
                nv.reset()
                c = Case(t, nv, core, st, label)
                for case in cases:
                    name = case.__name__
                    if args.only and name != args.only or gen not in getattr(case, "gens", (gen,)):
                        continue
                    why = known_break(args.client, name, gen)
                    if why and not args.only:
                        where = "NVIDIA's driver" if (name, gen) in NVIDIA_BREAKS else "the reference"
                        runs = "not run: shown by chance only" if "by chance" in why[1] or \
                            "by timing" in why[1] else "tests/reference/expect-breaks.sh runs it"
                        print(f"skip  {label} {name}: {why[0]} {where} ({why[1]}); {runs}", flush=True)
                        continue
                    case(c)
                why = known_break(args.client, "dereg_race", gen)
                if only_cases:
                    pass  # a pass of its own for the listed cases only
                elif why and args.only != "dereg_race":
                    print(f"skip  {label} dereg_race: {why[0]} the reference ({why[1]})", flush=True)
                elif not args.only or args.only == "dereg_race":
                    dereg_race(c, args.iterations, args.threads)
                core.close()
                nv.close()
        except Exception as e:
            t.check(f"{label}: ran to the end", False, repr(e))
    return t.finish()


if __name__ == "__main__":
    sys.exit(main())
