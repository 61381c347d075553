# SPDX-License-Identifier: GPL-2.0
"""Registration benchmark (issue 7): register/deregister stand-in GPU buffers through the MOFED
core stand-in (5x-unmaps), for our module and NVIDIA's reference, interleaved size by size in one
VM run, with the stand-in's per-page pin cost on. Prints per size: median registration and
deregistration time, the ratio ours/reference, pin calls per registration, SG entries, and kernel
slab memory per live registration. TCG inflates absolute times; the ratios are the point.

Times are the core's in-kernel REG_MR / DEREG_MR durations (peer_core_sim's timing line: the
core's steps plus every client call), which is what a registration costs the host; the
user-space round trip (a syscall and Python, ~0.2 ms under TCG, the same for both modules) is
printed beside them as "wall". Slab memory: the growth of the slab caches (/proc/slabinfo,
active objects x object size) with LIVE registrations held, divided by LIVE.

Usage (in the VM): bench-reg.py [pin_cost_ns]"""

import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stack import Stack  # noqa: E402
import coresim  # noqa: E402
import nvsim  # noqa: E402

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30
SIZES = [(64 * KIB, 40), (2 * MIB, 30), (64 * MIB, 10), (1 * GIB, 4)]
LIVE = 64  # registrations kept alive to measure slab memory per registration


def slab_caches():
    """{cache: bytes in active objects} from /proc/slabinfo."""
    out = {}
    with open("/proc/slabinfo") as f:
        for line in f:
            if line.startswith(("slabinfo", "#")):
                continue
            name, active, _, objsize = line.split()[:4]
            out[name] = int(active) * int(objsize)
    return out


def slab_growth(before, after):
    return {k: after[k] - before.get(k, 0) for k in after if after[k] - before.get(k, 0) > 0}


def kernel_ns():
    timing = coresim.stats()["timing"]
    return timing["last_reg_ns"], timing["last_dereg_ns"]


def measure(client, size, iterations, pin_cost_ns):
    params = ["persistent_api_support=0"] if client == "ours" else []
    with Stack("5x-unmaps", client=client, client_params=params):
        with open("/sys/module/nv_p2p_sim/parameters/pin_cost_ns", "w") as f:
            f.write(str(pin_cost_ns))
        nv, core = nvsim.NvP2pSim(), coresim.PeerCoreSim()
        alloc = nv.alloc(size)
        reg_t, dereg_t, wall_t, pins, sg = [], [], [], [], 0
        for _ in range(iterations):
            c0 = nv.counters()
            t0 = time.perf_counter()
            mr = core.reg_mr(alloc.va, size)
            t1 = time.perf_counter()
            reg_ns, _ = kernel_ns()
            c1 = nv.counters()
            sg = core.mr_info(mr, max_sge=1)["nmap"]
            core.dereg_mr(mr)
            _, dereg_ns = kernel_ns()
            reg_t.append(reg_ns / 1e9)
            dereg_t.append(dereg_ns / 1e9)
            wall_t.append(t1 - t0)
            pins.append(c1["calls_get_pages"] + c1["calls_get_pages_persistent"]
                        - c0["calls_get_pages"] - c0["calls_get_pages_persistent"])
        slab, caches = None, {}
        if size <= 2 * MIB:
            with open("/sys/module/nv_p2p_sim/parameters/pin_cost_ns", "w") as f:
                f.write("0")
            allocs = [nv.alloc(size) for _ in range(LIVE)]
            # Warm the caches once, so that new slabs are not what is measured.
            for m in [core.reg_mr(a.va, size) for a in allocs]:
                core.dereg_mr(m)
            s0 = slab_caches()
            mrs = [core.reg_mr(a.va, size) for a in allocs]
            growth = slab_growth(s0, slab_caches())
            slab = sum(growth.values()) / LIVE
            caches = {k: v / LIVE for k, v in sorted(growth.items(), key=lambda kv: -kv[1])[:4]}
            for m in mrs:
                core.dereg_mr(m)
            for a in allocs:
                a.free()
        alloc.free()
        core.close()
        nv.close()
    return {"reg": statistics.median(reg_t), "dereg": statistics.median(dereg_t),
            "wall": statistics.median(wall_t), "pins": statistics.median(pins), "sg": sg,
            "slab": slab, "caches": caches}


def fmt_size(n):
    return f"{n // GIB} GiB" if n >= GIB else f"{n // MIB} MiB" if n >= MIB else f"{n // KIB} KiB"


def main():
    pin_cost_ns = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    print(f"registration benchmark: core 5x-unmaps, pin cost {pin_cost_ns} ns per 64 KiB page, "
          f"median of N; TCG emulation (absolute times inflated, ratios are the point)")
    hdr = (f"{'size':>7} {'N':>3} | {'reg ours':>10} {'reg ref':>10} {'ratio':>6} | {'dereg ours':>10} "
           f"{'dereg ref':>10} | {'wall ratio':>10} | {'pins':>9} | {'SG entries':>12} | "
           f"{'slab B/reg ours/ref':>20}")
    print(hdr)
    print("-" * len(hdr))
    ok = True
    detail = []
    for size, n in SIZES:
        # Interleaved: ours then the reference for each size, in the same boot.
        o = measure("ours", size, n, pin_cost_ns)
        r = measure("reference", size, n, pin_cost_ns)
        ratio = o["reg"] / r["reg"]
        slab = "-" if o["slab"] is None else f"{o['slab']:.0f}/{r['slab']:.0f}"
        print(f"{fmt_size(size):>7} {n:>3} | {o['reg'] * 1e3:>8.3f}ms {r['reg'] * 1e3:>8.3f}ms {ratio:>6.2f} | "
              f"{o['dereg'] * 1e3:>8.3f}ms {r['dereg'] * 1e3:>8.3f}ms | {o['wall'] / r['wall']:>10.2f} | "
              f"{o['pins']:>4.0f}/{r['pins']:<4.0f} | {o['sg']:>5}/{r['sg']:<6} | {slab:>20}", flush=True)
        if o["caches"]:
            detail.append(f"{fmt_size(size)}: slab growth per registration, ours: "
                          + ", ".join(f"{k} {v:.0f} B" for k, v in o["caches"].items())
                          + "; reference: " + ", ".join(f"{k} {v:.0f} B" for k, v in r["caches"].items()))
        if size >= 2 * MIB and ratio > 0.6:
            ok = False
    for line in detail:
        print(line)
    print("target: registration ratio ours/reference <= 0.6 for sizes >= 2 MiB:", "met" if ok else "NOT met")
    return 0


if __name__ == "__main__":
    sys.exit(main())
