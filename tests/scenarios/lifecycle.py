# SPDX-License-Identifier: GPL-2.0
"""Lifecycle and bad input (issue 6, items 4 and 5): the module loaded and unloaded many times,
and registrations of malformed ranges through the core: each gets a clear errno, nothing stays
pinned, and (checked by the VM runner) nothing leaks. Then the registration records under load
and bad input (records.py, issue 37 item 4).

Usage (in the VM): lifecycle.py [load_cycles]"""

import errno
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stack import OURS, Stack, Tally, loaded, our_stats, sh  # noqa: E402
import coresim  # noqa: E402
import nvsim  # noqa: E402
import records  # noqa: E402

MIB = 1 << 20


def load_cycles(t, n):
    with Stack("5x-unmaps", client="ours") as st:
        st.unload_client()
        failures = 0
        for i in range(n):
            params = [f"persistent_api_support={i % 2}"]
            if sh("insmod", OURS, *params, check=False).returncode != 0:
                failures += 1
            if sh("rmmod", "nvidia_peermem", check=False).returncode != 0:
                failures += 1
        t.eq(f"{n} load/unload cycles (both parameter sets) without a failure", 0, failures)
        t.check("nothing left loaded", not loaded("nvidia_peermem"))


def expect_errno(t, core, nv, desc, want, va, size):
    c0 = nv.counters()
    try:
        mr = core.reg_mr(va, size)
        core.dereg_mr(mr)
        got = 0
    except OverflowError:
        got = "overflow"
    except OSError as e:
        got = e.errno
    t.check(f"{desc}: {errno.errorcode.get(want, want)}", got == want, f"got {errno.errorcode.get(got, got)}")
    c = nv.counters()
    t.check(f"{desc}: nothing pinned afterwards", c["pins"] == 0 and c["persistent_pins"] == 0
            and c["mappings"] == 0, c)
    del c0


def bad_input(t):
    for pas in (0, 1):
        label = f"[persistent_api_support={pas}]"
        with Stack("5x-unmaps", client="ours", client_params=[f"persistent_api_support={pas}"]):
            nv, core = nvsim.NvP2pSim(), coresim.PeerCoreSim()
            a = nv.alloc(4 * MIB)
            b = nv.alloc(4 * MIB)
            # A GPU VA nobody takes reads as a bad address to the user, as on real MOFED.
            expect_errno(t, core, nv, f"{label} zero length", errno.EINVAL, a.va, 0)
            expect_errno(t, core, nv, f"{label} beyond the allocation", errno.EFAULT, a.va + MIB, 4 * MIB)
            expect_errno(t, core, nv, f"{label} huge size", errno.EFAULT, a.va, 1 << 40)
            lo, hi = sorted((a, b), key=lambda x: x.va)
            expect_errno(t, core, nv, f"{label} across two allocations", errno.EFAULT, lo.va + 3 * MIB,
                         (hi.va - lo.va) + MIB - 3 * MIB)
            expect_errno(t, core, nv, f"{label} addr + size overflowing", errno.EINVAL,
                         (1 << 64) - 0x10000, 0x20000)
            a.free()
            expect_errno(t, core, nv, f"{label} a freed range", errno.EFAULT, a.va, MIB)
            # One of the two allocations the range spans is gone now.
            expect_errno(t, core, nv, f"{label} a range partly freed", errno.EFAULT, lo.va + 3 * MIB,
                         (hi.va - lo.va) + MIB - 3 * MIB)
            mr = core.reg_mr(b.va, 4 * MIB)
            core.dma_write(mr, 0x100, b"still usable")
            t.eq(f"{label} the live allocation beside the freed one still registers and takes DMA",
                 b"still usable", bytes(b.mm[0x100:0x100 + 12]))
            core.dereg_mr(mr)
            t.eq(f"{label} live contexts 0", 0, our_stats()["live_contexts"])
            b.free()
            core.close()
            nv.close()


def main():
    cycles = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    t = Tally("lifecycle")
    try:
        load_cycles(t, cycles)
        bad_input(t)
        # Issue 37 item 4 in the same boot: the records under load and bad input.
        records.run(t, 3000)
    except Exception as e:
        t.check("ran to the end", False, repr(e))
    return t.finish()


if __name__ == "__main__":
    sys.exit(main())
