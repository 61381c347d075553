# SPDX-License-Identifier: GPL-2.0
"""Fault injection (issue 6, item 1): every provider call fails once with each relevant errno,
for each core generation and parameter set; the caller sees the right errno, and once the
buffer is freed nothing stays pinned or mapped and our live contexts are back to zero.

The same injections run against NVIDIA's reference module (faults.py reference; 5x and
5x-unmaps, its default parameters): it must leave the stand-in clean too; what its caller saw
is printed next to what ours returns.

Usage (in the VM): faults.py [ours|reference [--only put_pages]]"""

import errno
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stack import Stack, Tally, our_stats  # noqa: E402
import coresim  # noqa: E402
import nvsim  # noqa: E402

MIB = 1 << 20
ENOTSUPP = 524  # the kernel's ENOTSUPP, which NVIDIA maps NOT_SUPPORTED to
ERRNOS = (errno.ENOMEM, errno.EINVAL, errno.EIO, ENOTSUPP, errno.EBUSY, errno.ENODEV)


def name(e):
    return "ENOTSUPP" if e == ENOTSUPP else errno.errorcode[e]


# Persistent pins the stand-in refused to unpin (injected put_pages_persistent failures): they
# stay with the "driver" until it unloads, whatever the client does.
LEAKED_BY_DRIVER = {"persistent_pins": 0}


def clean(t, nv, label):
    c = nv.counters()
    t.check(f"{label}: nothing pinned or mapped afterwards",
            c["pins"] == 0 and c["persistent_pins"] == LEAKED_BY_DRIVER["persistent_pins"]
            and c["mappings"] == 0, c)
    if CLIENT[0] == "ours":
        t.eq(f"{label}: live contexts 0", 0, our_stats()["live_contexts"])
    nv.reset()


CLIENT = ["ours"]


def seen(label, what, rc, reg):
    """The reference's outcome, for the record (the differential part of the report)."""
    got = errno.errorcode.get(rc, rc) if rc else f"registered by {reg['client']}"
    print(f"note  {label}: {what}: the caller sees {got}", flush=True)


def register(core, va, size):
    try:
        return 0, core.reg(va, size)
    except OSError as e:
        return e.errno, None


# Every case frees its buffer only after the registration returned: never while one is inside
# nvidia_p2p_dma_map_pages (NVIDIA's own use-after-free for invalidating pins, revocation.py
# NVIDIA_BREAKS).


def pin_fault(t, nv, core, label, fn, err, persistent_only):
    a = nv.alloc(2 * MIB)
    nv.fault(fn, 1, err)
    rc, reg = register(core, a.va + 0x1000, MIB)
    if CLIENT[0] == "reference":
        seen(label, f"{fn} fails {name(err)}", rc, reg)
    elif persistent_only:
        # The only client declines; the core returns its own GUP error for a GPU VA.
        t.eq(f"{label}: {fn} fails {name(err)}: registration fails EFAULT", errno.EFAULT, rc)
    else:
        # nv_mem declines; the next client (persistent nv_mem_nc) takes the buffer.
        t.check(f"{label}: {fn} fails {name(err)}: the next client takes it",
                rc == 0 and reg["client"] == "nv_mem_nc", (rc, reg))
    if reg:
        core.dereg_mr(reg["id"])
    a.free()
    clean(t, nv, f"{label} {fn} {name(err)}")


def map_fault(t, nv, core, label, err):
    a = nv.alloc(2 * MIB)
    nv.fault("dma_map", 1, err)
    rc, reg = register(core, a.va, 2 * MIB)
    if CLIENT[0] == "reference":
        seen(label, f"dma_map fails {name(err)}", rc, reg)
    else:
        t.eq(f"{label}: dma_map fails {name(err)}: the caller sees {name(err)}", err, rc)
    if reg:
        core.dereg_mr(reg["id"])
    a.free()
    clean(t, nv, f"{label} dma_map {name(err)}")


def shared_map_fault(t, nv, core, label, err):
    """dma_map fails for the second of two registrations of one range (ours: sharing the first
    one's pin): the first stays mapped and working, the pin stays held once."""
    a = nv.alloc(2 * MIB)
    first = core.reg_mr(a.va, 2 * MIB)
    pins0 = nv.counters()["pins"] + nv.counters()["persistent_pins"]
    nv.fault("dma_map", 1, err)
    rc, reg = register(core, a.va + 0x1000, MIB)
    if CLIENT[0] == "reference":
        seen(label, f"second registration's dma_map fails {name(err)}", rc, reg)
    else:
        t.eq(f"{label}: shared pin, second dma_map fails {name(err)}: the caller sees {name(err)}",
             err, rc)
        t.eq(f"{label}: shared pin, second dma_map fails {name(err)}: the pin is held once",
             pins0, nv.counters()["pins"] + nv.counters()["persistent_pins"])
    if reg:
        core.dereg_mr(reg["id"])
    core.dma_write(first, 0x100, b"f" * 8)
    t.eq(f"{label}: shared pin, second dma_map fails {name(err)}: the first MR's NIC DMA lands",
         b"f" * 8, bytes(a.mm[0x100:0x108]))
    core.dereg_mr(first)
    a.free()
    clean(t, nv, f"{label} shared dma_map {name(err)}")


def unmap_fault_ours(t, nv, core, label, err):
    """Ours calls nvidia_p2p_dma_unmap_pages at deregistration only where no unpin follows:
    NVIDIA's put_pages frees the mappings left on the table, so the deregistration that unpins
    leaves its mapping to it (kmod/client/context.rs, `unpin`). So the fault fires only where the
    unmap is made: a registration leaving a pin another one keeps (two registrations of one range
    share an invalidating pin; persistent pins are shared only with share_pins=2). There its
    failure is counted; a deregistration that unpins makes no unmap call at all."""
    a = nv.alloc(2 * MIB)
    pins0 = nv.counters()["pins"] + nv.counters()["persistent_pins"]
    first = core.reg(a.va, 2 * MIB)
    second = core.reg(a.va, 2 * MIB)
    shared = nv.counters()["pins"] + nv.counters()["persistent_pins"] - pins0 == 1
    f0 = our_stats().get("failures", 0)
    calls0 = nv.counters()["calls_dma_unmap"]
    nv.fault("dma_unmap", 1, err)
    core.dereg_mr(second["id"])
    calls1 = nv.counters()["calls_dma_unmap"]
    if shared:
        t.eq(f"{label}: dma_unmap fails {name(err)} (a registration leaving a shared pin): one unmap call",
             1, calls1 - calls0)
        t.eq(f"{label}: dma_unmap fails {name(err)}: counted as a failure", 1, our_stats()["failures"] - f0)
    else:
        t.eq(f"{label}: a deregistration that unpins leaves its mapping to NVIDIA's unpin (no unmap call)",
             0, calls1 - calls0)
    nv.fault("dma_unmap", 0)
    core.dereg_mr(first["id"])
    t.eq(f"{label}: the pin's last deregistration leaves its mapping to NVIDIA's unpin (no unmap call)",
         0, nv.counters()["calls_dma_unmap"] - calls1)
    a.free()
    clean(t, nv, f"{label} dma_unmap {name(err)}")


def teardown_fault(t, nv, core, label, fn, err):
    ours = CLIENT[0] == "ours"
    if ours and fn == "dma_unmap":
        return unmap_fault_ours(t, nv, core, label, err)
    p0 = our_stats().get("pinned_pages", 0) if ours else 0
    a = nv.alloc(2 * MIB)
    reg = core.reg(a.va, 2 * MIB)
    f0 = our_stats().get("failures", 0)
    nv.fault(fn, 1, err)
    core.dereg_mr(reg["id"])  # dereg itself cannot fail: the core ignores these errors
    if fn.startswith("put_pages") and ours:
        t.eq(f"{label}: {fn} fails {name(err)}: counted as a failure", 1, our_stats()["failures"] - f0)
        # The deregistration left its mapping to NVIDIA's unpin, which refused: unmapped then.
        t.eq(f"{label}: {fn} fails {name(err)}: the registration's mapping unmapped all the same",
             0, nv.counters()["mappings"])
        if fn == "put_pages":
            # NVIDIA refused to unpin, so it still holds the 32 pages: they stay counted until
            # its free callback says the memory is freed.
            t.eq(f"{label}: {fn} fails {name(err)}: the pin NVIDIA kept stays counted",
                 p0 + 32, our_stats()["pinned_pages"])
        else:
            # A persistent pin has no callback to say when NVIDIA lets it go: uncounted at once
            # (REVIEW-KMOD-2 T3-14), the failure counted instead.
            t.eq(f"{label}: {fn} fails {name(err)}: uncounted (no callback will ever come)",
                 p0, our_stats()["pinned_pages"])
    a.free()
    if fn == "put_pages" and ours:
        # The cudaFree's callback frees what NVIDIA kept: the count comes back, no drift.
        t.eq(f"{label}: put_pages fails {name(err)}: the cudaFree uncounts the pin",
             p0, our_stats()["pinned_pages"])
    if fn == "put_pages_persistent":
        # The driver refused to unpin a persistent pin: nothing a client can do; the stand-in
        # frees such leftovers at unload. Our side must still be clean.
        LEAKED_BY_DRIVER["persistent_pins"] += 1
    # A failed non-persistent unpin keeps the context for NVIDIA's callback, which the
    # cudaFree then runs: everything is released.
    clean(t, nv, f"{label} {fn} {name(err)}")


def invalid_context_lines():
    r = subprocess.run(["dmesg"], capture_output=True, text=True)
    return r.stdout.count("detected invalid context")


def reference_put_pages_break(t, nv, core, label, err):
    """The known break: when put_pages fails at dereg, NVIDIA's module frees its context anyway
    (nv_mem_release) while the pin and its free callback stay registered with NVIDIA; the
    cudaFree then runs the callback on the freed context. Its own magic check reads the freed
    (SLUB-poisoned) memory and logs "detected invalid context" every time; KFENCE reports the
    read when it samples that object."""
    n0 = invalid_context_lines()
    teardown_fault(t, nv, core, label, "put_pages", err)
    t.eq(f"{label}: put_pages fails {name(err)}: the cudaFree's callback read the freed context "
         "(its 'detected invalid context' line)", n0 + 1, invalid_context_lines())


def reference_main(only):
    """NVIDIA's module: get_pages (its probe and its pin), dma_map, dma_unmap, put_pages and the
    persistent pair (nv_mem_nc), each failing once with every errno. A put_pages failure makes it
    read freed memory (reference_put_pages_break): not in the regular run (KFENCE fails the VM
    when it samples it), only with --only put_pages, which tests/reference/expect-breaks.sh runs
    in a VM of its own."""
    t = Tally("faults-reference" + ("-put_pages" if only else ""))
    for gen in ("5x",) if only else ("5x", "5x-unmaps"):
        label = f"[reference {gen}]"
        print(f"--- {label}", flush=True)
        try:
            LEAKED_BY_DRIVER["persistent_pins"] = 0
            with Stack(gen, client="reference", client_params=["peerdirect_support=0"]):
                nv, core = nvsim.NvP2pSim(), coresim.PeerCoreSim()
                nv.reset()
                for err in ERRNOS:
                    if only:
                        reference_put_pages_break(t, nv, core, label, err)
                        continue
                    for fn in ("get_pages", "get_pages_persistent"):
                        pin_fault(t, nv, core, label, fn, err, persistent_only=False)
                    map_fault(t, nv, core, label, err)
                    shared_map_fault(t, nv, core, label, err)
                    teardown_fault(t, nv, core, label, "dma_unmap", err)
                if not only:
                    print(f"skip  {label} put_pages failures: its context is freed while NVIDIA "
                          "keeps the callback (use-after-free; tests/reference/expect-breaks.sh)",
                          flush=True)
                core.close()
                nv.close()
        except Exception as e:
            t.check(f"{label}: ran to the end", False, repr(e))
    return t.finish()


def main():
    CLIENT[0] = sys.argv[1] if len(sys.argv) > 1 else "ours"
    if CLIENT[0] not in ("ours", "reference"):
        print(f"faults.py: unknown client {CLIENT[0]!r}: use ours or reference", file=sys.stderr)
        return 2
    if CLIENT[0] == "reference":
        return reference_main("--only" in sys.argv and "put_pages" in sys.argv)
    t = Tally("faults")
    for gen in ("4x", "5x", "5x-unmaps"):
        pd = "peerdirect_support=1" if gen == "4x" else "peerdirect_support=0"
        for pas in (0, 1):
            label = f"[ours {gen} persistent_api_support={pas}]"
            print(f"--- {label}", flush=True)
            try:
                LEAKED_BY_DRIVER["persistent_pins"] = 0  # the stand-in is reloaded
                with Stack(gen, client="ours", client_params=[pd, f"persistent_api_support={pas}"]):
                    nv, core = nvsim.NvP2pSim(), coresim.PeerCoreSim()
                    nv.reset()
                    pin_fn = "get_pages" if pas == 0 else "get_pages_persistent"
                    put_fn = "put_pages" if pas == 0 else "put_pages_persistent"
                    for err in ERRNOS:
                        pin_fault(t, nv, core, label, pin_fn, err, persistent_only=(pas == 1))
                        map_fault(t, nv, core, label, err)
                        shared_map_fault(t, nv, core, label, err)
                        teardown_fault(t, nv, core, label, "dma_unmap", err)
                        teardown_fault(t, nv, core, label, put_fn, err)
                    # A core step failing after the peer mapping (mlx5 mkey creation).
                    a = nv.alloc(2 * MIB)
                    try:
                        core.reg_mr(a.va, 2 * MIB, inject=coresim.FAIL_AFTER_MAP)
                        rc = 0
                    except OSError as e:
                        rc = e.errno
                    t.eq(f"{label}: core fails after the mapping: the caller sees ENOMEM", errno.ENOMEM, rc)
                    a.free()
                    clean(t, nv, f"{label} core step")
                    core.close()
                    nv.close()
            except Exception as e:
                t.check(f"{label}: ran to the end", False, repr(e))
    return t.finish()


if __name__ == "__main__":
    sys.exit(main())
