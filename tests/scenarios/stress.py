# SPDX-License-Identifier: GPL-2.0
"""Stress (issue 6, item 3): THREADS threads register, use and deregister buffers of random
sizes for SECONDS seconds, one to four registrations per buffer (sharing one pin with ours'
invalidating client),
with random revocations (cudaFree while registered, cudaFree racing
dereg from another thread), on every core generation and with both clients: the invalidating
one (persistent_api_support=0: a cudaFree revokes the MR, NIC DMA then fails) and the
persistent one (the default: NVIDIA keeps the memory until the MR is deregistered, so NIC DMA
after the cudaFree still lands). Afterwards nothing is pinned or mapped,
the NVIDIA stand-in holds no memory, our counters are back to zero, and (checked by the VM
runner) nothing leaked and no kernel report appeared.

Usage (in the VM): stress.py [seconds per generation and client] [threads] [seed]"""

import os
import random
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stack import Stack, Tally, our_failures, our_stats  # noqa: E402
import coresim  # noqa: E402
import nvsim  # noqa: E402
import totals  # noqa: E402

KIB, MIB = 1 << 10, 1 << 20
SIZES = (64 * KIB, 256 * KIB, MIB, 2 * MIB, 8 * MIB)


def worker(nv, core, rng, deadline, stats, errors, lock, persistent):
    # Each thread frees only its own buffer, and only once reg_mr returned: a cudaFree while an
    # invalidating registration is inside nvidia_p2p_dma_map_pages is a use-after-free inside
    # NVIDIA's driver (revocation.py NVIDIA_BREAKS), which the stand-in reproduces and which
    # would make this run fail by timing. The frees race dereg and DMA, never the mapping.
    while time.monotonic() < deadline:
        size = rng.choice(SIZES)
        a = nv.alloc(size, fragmented=rng.random() < 0.3)
        off = rng.randrange(0, size // 2) & ~0xFFF
        length = rng.randrange(4 * KIB, size - off + 1)
        mrs = []
        try:
            # One registration, or several of the same range (one per NIC or protection
            # domain, as multi-rail NCCL/UCX do): they share one pin with ours.
            for _ in range(rng.choice((1, 1, 2, 4))):
                mrs.append(core.reg_mr(a.va + off, length))
            pattern = os.urandom(16)
            at = rng.randrange(0, max(length - 16, 1))
            for mr in mrs:
                core.dma_write(mr, at, pattern)
                if bytes(a.mm[off + at:off + at + 16]) != pattern:
                    errors.append(f"NIC write at {at} of a {length}-byte MR did not land")
            rng.shuffle(mrs)
            action = rng.choice(("dereg", "revoke", "race"))
            if action == "dereg":
                while mrs:
                    core.dereg_mr(mrs.pop())
                a.free()
            elif action == "revoke":
                a.free()
                for mr in mrs:
                    try:
                        got = core.dma_read(mr, at, 16)
                        if not persistent:
                            errors.append("NIC DMA succeeded on a revoked MR")
                        elif got != pattern:
                            errors.append("a persistent MR lost its bytes at the cudaFree")
                    except OSError as e:
                        if persistent:
                            errors.append(f"NIC DMA on a persistent MR failed after the cudaFree: {e}")
                while mrs:
                    core.dereg_mr(mrs.pop())
            else:
                # Dereg of one registration races the free of the buffer its pin maps.
                th = threading.Thread(target=core.dereg_mr, args=(mrs.pop(),))
                th.start()
                a.free()
                th.join()
                while mrs:
                    core.dereg_mr(mrs.pop())
            with lock:
                stats[action] += 1
        except OSError as e:
            with lock:
                errors.append(f"{type(e).__name__} {e}")
            for mr in mrs:
                try:
                    core.dereg_mr(mr)
                except OSError:
                    pass
            if not a.freed:
                a.free()


def run(t, gen, pas, seconds, threads, seed):
    pd = "peerdirect_support=1" if gen == "4x" else "peerdirect_support=0"
    label = f"[ours {gen} persistent_api_support={pas}]"
    with Stack(gen, client="ours", client_params=[pd, f"persistent_api_support={pas}"]):
        nv, core = nvsim.NvP2pSim(), coresim.PeerCoreSim()
        nv.reset()
        stats = {"dereg": 0, "revoke": 0, "race": 0}
        errors, lock = [], threading.Lock()
        deadline = time.monotonic() + seconds
        workers = [threading.Thread(target=worker, args=(nv, core, random.Random(seed + k), deadline,
                                                          stats, errors, lock, pas == 1))
                   for k in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        n = sum(stats.values())
        totals.add("iterations", n)
        print(f"note  {label}: {threads} threads, {seconds} s: {n} registrations "
              f"({stats['dereg']} deregistered, {stats['revoke']} freed while registered, "
              f"{stats['race']} freed racing dereg)", flush=True)
        t.check(f"{label}: every thread made progress", n >= threads, stats)
        t.eq(f"{label}: no error in {n} registrations", [], errors[:5])
        c = nv.counters()
        t.check(f"{label}: nothing pinned or mapped afterwards",
                c["pins"] == 0 and c["persistent_pins"] == 0 and c["mappings"] == 0, c)
        t.eq(f"{label}: the NVIDIA stand-in holds no allocation", 0, c["allocations"])
        t.eq(f"{label}: stale page-table uses", 0, c["stale_table_uses"])
        # A put_pages that lost the race to the free callback is answered 0 (as RM does); any
        # refusal means we passed a table and an address that never belonged together.
        t.eq(f"{label}: no put_pages refused ({c['put_pages_not_found']} lost the race to the free "
             "callback and were answered 0)", 0, c["failures_put_pages"])
        t.eq(f"{label}: no put_pages failure counted by our module", [], our_failures("put_pages"))
        s = our_stats()
        t.eq(f"{label}: our live contexts 0", 0, s["live_contexts"])
        t.eq(f"{label}: our pinned pages 0", 0, s["pinned_pages"])
        t.eq(f"{label}: our live pins 0", 0, s["live_pins"])
        if pas == 0:
            t.check(f"{label}: registrations of one range shared a pin ({s['pin_shares']} times)",
                    s["pin_shares"] > 0, s["pin_shares"])
        else:
            # share_pins=1: a persistent pin is never shared (a freed and reused VA would join
            # it: kmod/client/pin.rs), which this very run's cudaFree-while-registered would expose.
            t.eq(f"{label}: persistent pins not shared by default", 0, s["pin_shares"])
        nv.reset()
        core.close()
        nv.close()


def main():
    seconds = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    threads = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    seed = int(sys.argv[3]) if len(sys.argv) > 3 else int(time.time())
    print(f"stress: seed {seed} (rerun with: stress.sh {seconds} {threads} {seed})", flush=True)
    t = Tally("stress")
    for gen in ("4x", "5x", "5x-unmaps"):
        for pas in (0, 1):
            try:
                run(t, gen, pas, seconds, threads, seed)
            except Exception as e:
                t.check(f"[ours {gen} persistent_api_support={pas}]: ran to the end", False, repr(e))
    return t.finish()


if __name__ == "__main__":
    sys.exit(main())
