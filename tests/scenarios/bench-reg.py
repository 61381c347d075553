# SPDX-License-Identifier: GPL-2.0
"""Registration benchmark (issue 7): register/deregister stand-in GPU buffers through the MOFED
core stand-in (5x-unmaps), for our module and NVIDIA's reference, interleaved size by size in one
VM run, with the stand-in's per-page pin cost on. Prints per size: median registration and
deregistration time, the ratio ours/reference, pin calls per registration, SG entries, and kernel
slab memory per live registration. TCG inflates absolute times; the ratios are the point.

Times are the core's in-kernel REG_MR / DEREG_MR durations (peer_core_sim's timing line: the
core's steps plus every client call), which is what a registration costs the host; the
user-space round trip (a syscall and Python, ~0.2 ms under TCG, the same for both modules) is
printed beside them as a ratio ("wall ratio"). Kernel memory ("memory" mode, its own boot with
slub_debug=U): live slab objects whose allocation stack passes through the client module, with
LIVE registrations held, per registration.

Usage (in the VM): bench-reg.py [pin_cost_ns] [--ko-dir DIR] [--rounds R] [--host-loop-ns NS] |
bench-reg.py memory [--ko-dir DIR] (boot with slub_debug=U). --host-loop-ns: calibrate.py's time
on the host; the table is then printed a second time with the pin cost scaled by the VM's
slowdown against the host. --ko-dir: the modules built for a stock kernel (kmod/stock-kbuild.sh build
--reference), for a run on Debian's own kernel (no lockdep, no kmemleak: what users run)."""

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stack import Stack  # noqa: E402
import calibrate  # noqa: E402
import coresim  # noqa: E402
import nvsim  # noqa: E402

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30
SIZES = [(64 * KIB, 40), (2 * MIB, 30), (64 * MIB, 10), (1 * GIB, 4)]
KO_DIR = None  # --ko-dir
LIVE = 32  # registrations held at once when measuring kernel memory per registration
SLAB_DEBUGFS = "/sys/kernel/debug/slab"
MODULE_TAG = "[nvidia_peermem]"  # ours and the reference load under this name


def module_slab_bytes():
    """Bytes of live slab objects allocated with the client module on the stack: every cache's
    alloc_traces (slub_debug=U, with stack depot traces), count x object size per trace."""
    total, per_cache = 0, {}
    for cache in sorted(os.listdir(SLAB_DEBUGFS)):
        try:
            size = int(open(f"/sys/kernel/slab/{cache}/object_size").read())
            text = open(os.path.join(SLAB_DEBUGFS, cache, "alloc_traces")).read()
        except OSError:
            continue
        for entry in text.split("\n\n"):
            lines = entry.strip().splitlines()
            if not lines or MODULE_TAG not in entry:
                continue
            n = int(lines[0].split()[0]) * size
            total += n
            per_cache[cache] = per_cache.get(cache, 0) + n
    return total, per_cache


def memory(client, size):
    """Kernel slab memory the client module allocates per live registration of SIZE bytes."""
    params = ["persistent_api_support=0"] if client == "ours" else []
    with Stack("5x-unmaps", client=client, client_params=params, ko_dir=KO_DIR):
        nv, core = nvsim.NvP2pSim(), coresim.PeerCoreSim()
        allocs = [nv.alloc(size) for _ in range(LIVE)]
        base, base_caches = module_slab_bytes()
        mrs = [core.reg_mr(a.va, size) for a in allocs]
        held, held_caches = module_slab_bytes()
        sg_pages = sum(sg_page_chunks(core.mr_info(m)["nents"]) for m in mrs)
        for m in mrs:
            core.dereg_mr(m)
        after, _ = module_slab_bytes()
        for a in allocs:
            a.free()
        core.close()
        nv.close()
    caches = {k: (v - base_caches.get(k, 0)) / LIVE for k, v in held_caches.items()
              if v > base_caches.get(k, 0)}
    if sg_pages:
        caches["sg pages"] = sg_pages * PAGE / LIVE
    return (held - base + sg_pages * PAGE) / LIVE, after - base, caches


PAGE = 4096
SG_MAX_SINGLE_ALLOC = PAGE // 32  # scatterlist entries per page (32 B each without DEBUG_SG)


def sg_page_chunks(nents):
    """Pages sg_alloc_table takes from the page allocator (not slab) for NENTS entries: every
    full chunk of SG_MAX_SINGLE_ALLOC entries (each but the last chains on with its last entry);
    a shorter last chunk is kmalloc'ed (and counted in slab)."""
    pages, left = 0, nents
    while left > SG_MAX_SINGLE_ALLOC:
        pages += 1
        left -= SG_MAX_SINGLE_ALLOC - 1
    return pages + (left == SG_MAX_SINGLE_ALLOC)




def measure(client, size, iterations, pin_cost_ns):
    params = ["persistent_api_support=0"] if client == "ours" else []
    with Stack("5x-unmaps", client=client, client_params=params, ko_dir=KO_DIR):
        with open("/sys/module/nv_p2p_sim/parameters/pin_cost_ns", "w") as f:
            f.write(str(pin_cost_ns))
        nv, core = nvsim.NvP2pSim(), coresim.PeerCoreSim()
        alloc = nv.alloc(size)
        reg_t, dereg_t, wall_t, pins, sg = [], [], [], [], 0
        split = []  # per registration: us inside each REG_OPS client op, then the core's rest
        for _ in range(iterations):
            c0, s0 = nv.counters(), coresim.stats()
            t0 = time.perf_counter()
            mr = core.reg_mr(alloc.va, size)
            t1 = time.perf_counter()
            c1, s1 = nv.counters(), coresim.stats()
            sg = core.mr_info(mr, max_sge=1)["nmap"]
            core.dereg_mr(mr)
            reg_ns, dereg_ns = s1["timing"]["last_reg_ns"], coresim.stats()["timing"]["last_dereg_ns"]
            reg_t.append(reg_ns / 1e9)
            dereg_t.append(dereg_ns / 1e9)
            wall_t.append(t1 - t0)
            pins.append(c1["calls_get_pages"] + c1["calls_get_pages_persistent"]
                        - c0["calls_get_pages"] - c0["calls_get_pages_persistent"])
            ops = [(s1["client_ns"][op] - s0["client_ns"][op]) / 1e3 for op in REG_OPS]
            split.append(ops + [reg_ns / 1e3 - sum(ops)])
        alloc.free()
        core.close()
        nv.close()
    return {"reg": reg_t, "dereg": dereg_t, "wall": wall_t, "pins": pins, "sg": sg, "split": split}


def pooled(runs):
    """Medians over every registration of RUNS (measure()'s results for one client and size)."""
    col = lambda k: [v for r in runs for v in r[k]]
    return {"reg": statistics.median(col("reg")), "dereg": statistics.median(col("dereg")),
            "wall": statistics.median(col("wall")), "pins": statistics.median(col("pins")),
            "sg": runs[-1]["sg"], "split": [statistics.median(c) for c in zip(*col("split"))]}


# The client ops of a REG_MR (acquire also counts clients that decline).
REG_OPS = ("acquire", "get_pages", "dma_map", "get_page_size")


def fmt_size(n):
    return f"{n // GIB} GiB" if n >= GIB else f"{n // MIB} MiB" if n >= MIB else f"{n // KIB} KiB"


def memory_main(args):
    global KO_DIR
    ap = argparse.ArgumentParser()
    ap.add_argument("--ko-dir")
    KO_DIR = ap.parse_args(args).ko_dir
    print(f"kernel memory per registration: slab objects allocated with the client module on the "
          f"stack (slub_debug=U alloc_traces) plus the SG table's page-allocator chunks (pages of "
          f"{SG_MAX_SINGLE_ALLOC} entries, from each MR's entry count), {LIVE} registrations held; "
          "core 5x-unmaps")
    print(f"{'size':>7} | {'ours B/reg':>10} {'ref B/reg':>10} {'ratio':>6} | caches (ours; reference)")
    clean = True
    for size in (64 * KIB, 2 * MIB, 64 * MIB):
        o, o_left, o_caches = memory("ours", size)
        r, r_left, r_caches = memory("reference", size)
        ratio = f"{o / r:.2f}" if r else "-"
        show = lambda c: ", ".join(f"{k} {v:.0f}" for k, v in sorted(c.items(), key=lambda kv: -kv[1])[:3])
        print(f"{fmt_size(size):>7} | {o:>10.0f} {r:>10.0f} {ratio:>6} | {show(o_caches)}; {show(r_caches)}",
              flush=True)
        if o_left or r_left:
            print(f"        left after dereg: ours {o_left} B, reference {r_left} B")
            clean = clean and not o_left
    return 0 if clean else 1


def table(pin_cost_ns, rounds):
    """Times every size at PIN_COST_NS and prints the table and where the time goes; returns
    whether the target (ratio <= 0.6 from 2 MiB) is met."""
    print(f"pin cost {pin_cost_ns} ns per 64 KiB page; {rounds} rounds of N registrations per "
          "module, ours first in odd rounds, the reference first in even ones; times are medians "
          "over all rounds, the ratio is the median of the rounds' ratios (their range beside it)")
    hdr = (f"{'size':>7} {'N':>3} | {'reg ours':>10} {'reg ref':>10} {'ratio':>6} {'range':>10} | "
           f"{'dereg ours':>10} {'dereg ref':>10} | {'wall ratio':>10} | {'pins':>9} | {'SG entries':>12}")
    print(hdr)
    print("-" * len(hdr))
    ok, rows = True, []
    for size, n in SIZES:
        # Interleaved in one boot, the order alternating so neither module always runs first.
        runs = {"ours": [], "reference": []}
        for k in range(rounds):
            for client in ("ours", "reference") if k % 2 == 0 else ("reference", "ours"):
                runs[client].append(measure(client, size, n, pin_cost_ns))
        ratios = sorted(statistics.median(o["reg"]) / statistics.median(r["reg"])
                        for o, r in zip(runs["ours"], runs["reference"]))
        ratio = statistics.median(ratios)
        o, r = pooled(runs["ours"]), pooled(runs["reference"])
        rows.append((size, o, r))
        print(f"{fmt_size(size):>7} {n:>3} | {o['reg'] * 1e3:>8.3f}ms {r['reg'] * 1e3:>8.3f}ms {ratio:>6.2f} "
              f"{ratios[0]:>4.2f}-{ratios[-1]:<4.2f} | "
              f"{o['dereg'] * 1e3:>8.3f}ms {r['dereg'] * 1e3:>8.3f}ms | {o['wall'] / r['wall']:>10.2f} | "
              f"{o['pins']:>4.0f}/{r['pins']:<4.0f} | {o['sg']:>5}/{r['sg']:<6}", flush=True)
        if size >= 2 * MIB and ratio > 0.6:
            ok = False
    print("target: registration ratio ours/reference <= 0.6 for sizes >= 2 MiB:", "met" if ok else "NOT met")
    print("where REG_MR's time goes: median us per registration inside each client op (the "
          "modelled pin cost included), and the rest (the core's own steps)")
    cols = ("acquire", "get_pages", "dma_map", "page_size", "core")
    print(f"{'size':>7} | " + " ".join(f"{c:>9}" for c in cols) + " | " +
          " ".join(f"{c:>9}" for c in cols))
    print(f"{'':>7} | {'ours':^49} | {'reference':^49}")
    for size, o, r in rows:
        print(f"{fmt_size(size):>7} | " + " ".join(f"{v:>9.1f}" for v in o["split"]) + " | " +
              " ".join(f"{v:>9.1f}" for v in r["split"]), flush=True)
    return ok


def main():
    global KO_DIR
    if sys.argv[1:2] == ["memory"]:
        return memory_main(sys.argv[2:])
    ap = argparse.ArgumentParser()
    ap.add_argument("pin_cost_ns", nargs="?", type=int, default=2000)
    ap.add_argument("--ko-dir")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--host-loop-ns", type=int,
                    help="calibrate.py's time on the host: also run with the pin cost scaled by "
                         "the emulation's slowdown")
    args = ap.parse_args()
    KO_DIR = args.ko_dir
    print(f"registration benchmark: kernel {os.uname().release}, core 5x-unmaps; TCG emulation "
          "(absolute times inflated, ratios are the point)")
    table(args.pin_cost_ns, args.rounds)
    if args.host_loop_ns:
        # The modelled pin cost is wall-clock time, which emulation does not stretch, while every
        # other step of the registration runs SLOWDOWN times slower than on the host.
        slowdown = calibrate.loop_ns() / args.host_loop_ns
        print(f"\nthe same with the pin cost scaled by this VM's slowdown against the host "
              f"({slowdown:.1f}x, calibrate.py), so pinning weighs against the rest of the "
              "registration as it would natively:")
        table(round(args.pin_cost_ns * slowdown), args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
