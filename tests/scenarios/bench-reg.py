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
slowdown against the host. --ko-dir: the modules built for a stock kernel (kmod/scripts/stock-kbuild.sh build
--reference), for a run on Debian's own kernel (no lockdep, no kmemleak: what users run)."""

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stack import Stack  # noqa: E402
import bench_profile  # noqa: E402
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
    with Stack("5x-unmaps", client=client, client_params=client_params(client), ko_dir=KO_DIR):
        nv, core = nvsim.NvP2pSim(), coresim.PeerCoreSim()
        # One registration first: the one-off memory of the first pin of a GPU (ours: its sysfs
        # directory of totals, kept until unload) is no registration's.
        warm = nv.alloc(size)
        core.dereg_mr(core.reg_mr(warm.va, size))
        warm.free()
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




def client_params(client):
    return ["persistent_api_support=0"] if client == "ours" else []


def op_ns(s0, s1, ops):
    """us spent inside each client op of OPS between two coresim.stats() snapshots."""
    return [(s1["client_ns"][op] - s0["client_ns"][op]) / 1e3 for op in ops]


def measure(client, size, iterations, pin_cost_ns, mrs=1):
    """ITERATIONS times: MRS registrations of one SIZE-byte buffer (the same range, as one per
    NIC or protection domain), then their deregistrations. Times are per iteration (the MRS
    REG_MRs summed, the DEREG_MRs summed); pins are NVIDIA pin calls per iteration."""
    with Stack("5x-unmaps", client=client, client_params=client_params(client), ko_dir=KO_DIR):
        with open("/sys/module/nv_p2p_sim/parameters/pin_cost_ns", "w") as f:
            f.write(str(pin_cost_ns))
        nv, core = nvsim.NvP2pSim(), coresim.PeerCoreSim()
        alloc = nv.alloc(size)
        reg_t, dereg_t, wall_t, pins, sg = [], [], [], [], 0
        split, dsplit = [], []  # us inside each client op, then the core's rest
        for _ in range(iterations):
            c0, s0 = nv.counters(), coresim.stats()
            ids, reg_ns, wall = [], 0, 0.0
            for _ in range(mrs):
                t0 = time.perf_counter()
                ids.append(core.reg_mr(alloc.va, size))
                wall += time.perf_counter() - t0
                reg_ns += coresim.stats()["timing"]["last_reg_ns"]
            c1, s1 = nv.counters(), coresim.stats()
            sg = core.mr_info(ids[0], max_sge=1)["nmap"]
            dereg_ns = 0
            for mr in ids:
                core.dereg_mr(mr)
                dereg_ns += coresim.stats()["timing"]["last_dereg_ns"]
            s2 = coresim.stats()
            reg_t.append(reg_ns / 1e9)
            dereg_t.append(dereg_ns / 1e9)
            wall_t.append(wall)
            pins.append(c1["calls_get_pages"] + c1["calls_get_pages_persistent"]
                        - c0["calls_get_pages"] - c0["calls_get_pages_persistent"])
            ops = op_ns(s0, s1, REG_OPS)
            split.append(ops + [reg_ns / 1e3 - sum(ops)])
            dops = op_ns(s1, s2, DEREG_OPS)
            dsplit.append(dops + [dereg_ns / 1e3 - sum(dops)])
        alloc.free()
        core.close()
        nv.close()
    return {"reg": reg_t, "dereg": dereg_t, "wall": wall_t, "pins": pins, "sg": sg,
            "split": split, "dsplit": dsplit}


def pooled(runs):
    """Medians over every iteration of RUNS (measure()'s results for one client and size)."""
    col = lambda k: [v for r in runs for v in r[k]]
    return {"reg": statistics.median(col("reg")), "dereg": statistics.median(col("dereg")),
            "wall": statistics.median(col("wall")), "pins": statistics.median(col("pins")),
            "sg": runs[-1]["sg"], "split": [statistics.median(c) for c in zip(*col("split"))],
            "dsplit": [statistics.median(c) for c in zip(*col("dsplit"))]}


def round_ratios(runs, key):
    """The ratio ours/reference of each round's median KEY time, sorted."""
    return sorted(statistics.median(o[key]) / statistics.median(r[key])
                  for o, r in zip(runs["ours"], runs["reference"]))


def interleaved(size, n, pin_cost_ns, rounds, mrs=1):
    """ROUNDS rounds of measure() per module, the order alternating so neither always runs
    first; returns the per-client runs."""
    runs = {"ours": [], "reference": []}
    for k in range(rounds):
        for client in ("ours", "reference") if k % 2 == 0 else ("reference", "ours"):
            runs[client].append(measure(client, size, n, pin_cost_ns, mrs))
    return runs


# The client ops of a REG_MR (acquire also counts clients that decline) and of a DEREG_MR.
REG_OPS = ("acquire", "get_pages", "dma_map", "get_page_size")
DEREG_OPS = ("dma_unmap", "put_pages", "release")
MULTI = (4, 64 * MIB, 3)  # registrations of one buffer, its size, iterations per round


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
    clean, result = True, {"kernel": os.uname().release}
    for size in (64 * KIB, 2 * MIB, 64 * MIB):
        o, o_left, o_caches = memory("ours", size)
        r, r_left, r_caches = memory("reference", size)
        ratio = f"{o / r:.2f}" if r else "-"
        result[fmt_size(size).replace(" ", "")] = {"mem": round(o / r, 3) if r else None,
                                                   "bytes": [o, r]}
        show = lambda c: ", ".join(f"{k} {v:.0f}" for k, v in sorted(c.items(), key=lambda kv: -kv[1])[:6])
        print(f"{fmt_size(size):>7} | {o:>10.0f} {r:>10.0f} {ratio:>6} | {show(o_caches)}; {show(r_caches)}",
              flush=True)
        if o_left or r_left:
            print(f"        left after dereg: ours {o_left} B, reference {r_left} B")
            clean = clean and not o_left
    write_result("bench-memory", result)
    return 0 if clean else 1


def table(pin_cost_ns, rounds):
    """Times every size at PIN_COST_NS, then MULTI registrations of one buffer; prints the
    tables and where the time goes; returns the ratios (for the summary lines)."""
    print(f"pin cost {pin_cost_ns} ns per 64 KiB page; {rounds} rounds of N registrations per "
          "module, ours first in odd rounds, the reference first in even ones; times are medians "
          "over all rounds, a ratio is the median of the rounds' ratios (their range beside it)")
    hdr = (f"{'size':>9} {'N':>3} | {'reg ours':>10} {'reg ref':>10} {'ratio':>6} {'range':>10} | "
           f"{'dereg ours':>10} {'dereg ref':>10} {'ratio':>6} | {'wall ratio':>10} | {'pins':>9} | "
           f"{'SG entries':>12}")
    print(hdr)
    print("-" * len(hdr))
    rows, result = [], {}
    n_mrs, multi_size, multi_n = MULTI
    cases = [(fmt_size(size), size, n, 1) for size, n in SIZES] + \
        [(f"{n_mrs}x{fmt_size(multi_size)}", multi_size, multi_n, n_mrs)]
    for label, size, n, mrs in cases:
        runs = interleaved(size, n, pin_cost_ns, rounds, mrs)
        ratios, dratios = round_ratios(runs, "reg"), round_ratios(runs, "dereg")
        ratio, dratio = statistics.median(ratios), statistics.median(dratios)
        o, r = pooled(runs["ours"]), pooled(runs["reference"])
        rows.append((label, o, r))
        result[label.replace(" ", "")] = {
            "reg": round(ratio, 3), "reg_range": [round(ratios[0], 3), round(ratios[-1], 3)],
            "dereg": round(dratio, 3), "pins": [o["pins"], r["pins"]],
            "reg_ms": [o["reg"] * 1e3, r["reg"] * 1e3], "dereg_ms": [o["dereg"] * 1e3, r["dereg"] * 1e3]}
        print(f"{label:>9} {n:>3} | {o['reg'] * 1e3:>8.3f}ms {r['reg'] * 1e3:>8.3f}ms {ratio:>6.2f} "
              f"{ratios[0]:>4.2f}-{ratios[-1]:<4.2f} | "
              f"{o['dereg'] * 1e3:>8.3f}ms {r['dereg'] * 1e3:>8.3f}ms {dratio:>6.2f} | "
              f"{o['wall'] / r['wall']:>10.2f} | {o['pins']:>4.0f}/{r['pins']:<4.0f} | "
              f"{o['sg']:>5}/{r['sg']:<6}", flush=True)
    print(f"({n_mrs}x{fmt_size(multi_size)}: {n_mrs} registrations of one buffer held at once, "
          "times summed over them; pins per iteration)")
    split_table("where REG_MR's time goes: median us per registration inside each client op (the "
                "modelled pin cost included), and the rest (the core's own steps)",
                ("acquire", "get_pages", "dma_map", "page_size", "core"), rows, "split")
    split_table("where DEREG_MR's time goes: median us per deregistration inside each client op, "
                "and the rest (the core's own steps)",
                ("dma_unmap", "put_pages", "release", "core"), rows, "dsplit")
    return result


def split_table(title, cols, rows, key):
    print(title)
    w = 10 * len(cols) - 1
    print(f"{'size':>9} | " + " ".join(f"{c:>9}" for c in cols) + " | " +
          " ".join(f"{c:>9}" for c in cols))
    print(f"{'':>9} | {'ours':^{w}} | {'reference':^{w}}")
    for label, o, r in rows:
        print(f"{label:>9} | " + " ".join(f"{v:>9.1f}" for v in o[key]) + " | " +
              " ".join(f"{v:>9.1f}" for v in r[key]), flush=True)


def write_result(name, data):
    """$NVPEER_OUT/NAME.json for run-bench.sh's summary lines (nothing outside the VM runner)."""
    out = os.environ.get("NVPEER_OUT")
    if out:
        with open(os.path.join(out, f"{name}.json"), "w") as f:
            json.dump(data, f, indent=1)


def main():
    global KO_DIR
    if sys.argv[1:2] == ["memory"]:
        return memory_main(sys.argv[2:])
    ap = argparse.ArgumentParser()
    ap.add_argument("pin_cost_ns", nargs="?", type=int, default=2000)
    ap.add_argument("--ko-dir")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--profile", action="store_true",
                    help="then profile 64 KiB registrations of both modules with perf (bench_profile.py)")
    ap.add_argument("--host-loop-ns", type=int,
                    help="calibrate.py's time on the host: also run with the pin cost scaled by "
                         "the emulation's slowdown")
    args = ap.parse_args()
    KO_DIR = args.ko_dir
    print(f"registration benchmark: kernel {os.uname().release}, core 5x-unmaps; TCG emulation "
          "(absolute times inflated, ratios are the point)")
    result = {"kernel": os.uname().release, "given": table(args.pin_cost_ns, args.rounds)}
    if args.host_loop_ns:
        # The modelled pin cost is wall-clock time, which emulation does not stretch, while every
        # other step of the registration runs SLOWDOWN times slower than on the host.
        slowdown = calibrate.loop_ns() / args.host_loop_ns
        print(f"\nthe same with the pin cost scaled by this VM's slowdown against the host "
              f"({slowdown:.1f}x, calibrate.py), so pinning weighs against the rest of the "
              "registration as it would natively:")
        result["slowdown"] = round(slowdown, 2)
        result["scaled"] = table(round(args.pin_cost_ns * slowdown), args.rounds)
    write_result("bench-timing", result)
    if args.profile:
        bench_profile.main(KO_DIR)
    return 0


if __name__ == "__main__":
    sys.exit(main())
