# SPDX-License-Identifier: GPL-2.0
"""Where a registration's time goes inside the kernel (issue 18, item 1): perf (Debian's
linux-perf) samples this process's kernel time (cpu-clock, TCG has no PMU) while it registers
and deregisters one 64 KiB buffer through the MOFED core stand-in, with our module and then with
NVIDIA's, and prints the top symbols of each. The profiled loop reads the core stand-in's
debugfs statistics after every operation, as bench-reg.py's rounds do. Rust symbols come from
kallsyms, mangled (v0); c++filt demangles them (crate hashes dropped). The modelled pin cost is 0
here, so the profile shows the fixed cost, not the busy-wait. Two loops timed by the core
stand-in's own timestamps (no perf) give the client ops' cost in microseconds beside it: back to
back (hot), and with those reads in between (cold; bench-reg.py's rounds also read the NVIDIA
stand-in's counters and the MR's info), four rounds per module in alternating order.

Usage (in the VM): bench_profile.py [--ko-dir DIR], or bench-reg.py --profile"""

import bisect
import os
import re
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stack import Stack  # noqa: E402
import coresim  # noqa: E402
import nvsim  # noqa: E402

KIB = 1 << 10
ITERATIONS = 3000
TOP = 15
# The client ops whose own split is printed (a name the demangled frame contains: our Rust ops
# and the reference's C ones), with the functions they spend their time in.
FOCUS = ("put_pages", "dma_unmap", "acquire", "dma_map")
FOCUS_TOP = 10
# The client ops of a REG_MR and of a DEREG_MR, timed by the core stand-in (client_ns).
REG_OPS = ("acquire", "get_pages", "dma_map")
DEREG_OPS = ("dma_unmap", "put_pages", "release")
HOT = 1000  # iterations of the hot and the cold loop, timed without perf
SPLIT_ROUNDS = 4  # rounds of both timed loops per module (even: each module first as often)


def demangle(names):
    """c++filt over NAMES (Rust v0 and C++), with Rust's crate hashes dropped."""
    r = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True, check=True)
    return [re.sub(r"\[[0-9a-f]{16}\]", "", line) for line in r.stdout.splitlines()]


def loop(iterations, cold=False):
    """The profiled workload, in a process of its own that perf starts (attaching to a running
    process is racy under TCG: perf takes seconds to start). COLD: the core stand-in's debugfs
    statistics are read after every operation, as bench-reg.py's rounds read them, so each
    operation runs after other kernel code, not right after the previous operation as in the hot
    loop (where ours pays a third of its cold put_pages time: what that read displaces is not
    measured here)."""
    nv, core = nvsim.NvP2pSim(), coresim.PeerCoreSim()
    alloc = nv.alloc(64 * KIB)
    for _ in range(iterations):
        mr = core.reg_mr(alloc.va, 64 * KIB)
        if cold:
            coresim.stats()
        core.dereg_mr(mr)
        if cold:
            coresim.stats()
    alloc.free()
    core.close()
    nv.close()


def split(cold):
    """us per call of each client op over HOT registrations and deregistrations of one buffer:
    back to back, or COLD (the core's debugfs statistics read after every op)."""
    s0 = coresim.stats()["client_ns"]
    loop(HOT, cold)
    s1 = coresim.stats()["client_ns"]
    return {op: (s1[op] - s0[op]) / 1e3 / HOT for op in REG_OPS + DEREG_OPS}


def params(client):
    return ["persistent_api_support=0"] if client == "ours" else []


def record(client, ko_dir, path):
    with Stack("5x-unmaps", client=client, client_params=params(client), ko_dir=ko_dir):
        loop(10)  # warm the caches
        subprocess.run(["perf", "record", "-q", "-e", "cpu-clock:k", "-F", "4000", "-g", "-o", path,
                        "--", sys.executable, os.path.abspath(__file__), "--loop", str(ITERATIONS)],
                       check=True, stdout=subprocess.DEVNULL)
        return module_symbols()


def timed(ko_dir):
    """SPLIT_ROUNDS rounds of split() per client and mode, the order alternating (a module loaded
    first after boot, or after the other, runs differently under TCG: one order alone biased the
    ratio both ways in earlier runs). Returns ({client: {mode: {op: median us}}}, {(mode, ops):
    the rounds' ratios of ours' to the reference's total client time over OPS, sorted})."""
    runs = {"ours": [], "reference": []}
    for k in range(SPLIT_ROUNDS):
        for client in ("ours", "reference") if k % 2 == 0 else ("reference", "ours"):
            with Stack("5x-unmaps", client=client, client_params=params(client), ko_dir=ko_dir):
                loop(10)  # warm the caches
                runs[client].append({"hot": split(cold=False), "cold": split(cold=True)})
    modes, every_op = ("hot", "cold"), REG_OPS + DEREG_OPS
    medians = {client: {mode: {op: statistics.median(r[mode][op] for r in rs) for op in every_op}
                        for mode in modes} for client, rs in runs.items()}
    total = lambda r, ops: sum(r[op] for op in ops)
    ratios = {(mode, ops): sorted(total(o[mode], ops) / max(total(r[mode], ops), 1e-9)
                                  for o, r in zip(runs["ours"], runs["reference"]))
              for mode in modes for ops in (REG_OPS, DEREG_OPS)}
    return medians, ratios


def module_symbols():
    """(sorted addresses, names) of the loaded modules' text symbols, from kallsyms: perf finds
    a module's symbols only in its file under /lib/modules, and these are loaded from elsewhere."""
    syms = []
    with open("/proc/kallsyms") as f:
        for line in f:
            parts = line.split()
            if len(parts) == 4 and parts[1] in "tT" and parts[3].startswith("["):
                syms.append((int(parts[0], 16), parts[2]))
    syms.sort()
    return [a for a, _ in syms], [n for _, n in syms]


# The core stand-in's ioctl handler (REG_MR, DEREG_MR: all the workload calls): the samples
# below it are the registration's.
ROOT = "pcs_ioctl"


def resolve(ip, sym, modsyms):
    if sym != "[unknown]" or not modsyms[0]:
        return sym
    i = bisect.bisect_right(modsyms[0], ip) - 1
    return modsyms[1][i] if i >= 0 and ip - modsyms[0][i] < 1 << 16 else sym


def samples(path, modsyms):
    """Each sample's call chain, innermost frame first, for the samples inside REG_MR/DEREG_MR
    (perf script; the Python process's other kernel time, its start-up and page faults, is
    left out)."""
    r = subprocess.run(["perf", "script", "-i", path, "-F", "ip,sym", "--no-demangle"],
                       capture_output=True, text=True, check=True)
    chains = []
    for block in r.stdout.split("\n\n"):
        frames = [resolve(int(m.group(1), 16), m.group(2), modsyms)
                  for m in re.finditer(r"^\s*([0-9a-f]+)\s+([^\s+]+)", block, re.M)]
        if any(f.startswith(ROOT) for f in frames):
            chains.append(frames)
    if not chains:
        seen = {}
        for m in re.finditer(r"^\s*[0-9a-f]+\s+([^\s+]+)", r.stdout, re.M):
            seen[m.group(1)] = seen.get(m.group(1), 0) + 1
        raise RuntimeError("no sample inside the core's ioctl; frames seen most: " +
                           ", ".join(f for _, f in sorted(((n, f) for f, n in seen.items()), reverse=True)[:40]))
    return chains


def shares(chains, inclusive):
    """{symbol: percent of the samples}: where the sample is (self) or every function on its
    chain (inclusive)."""
    count = {}
    for frames in chains:
        for f in (set(frames) if inclusive else frames[:1]):
            count[f] = count.get(f, 0) + 1
    total = len(chains) or 1
    return sorted(((100.0 * n / total, f) for f, n in count.items()), reverse=True)


def main(ko_dir=None):
    print(f"\nprofile: {ITERATIONS} registrations + deregistrations of one 64 KiB buffer per "
          "module, the core's debugfs statistics read after each (as bench-reg.py reads them), perf "
          "cpu-clock samples (4 kHz) of the kernel time inside the core's REG_MR and DEREG_MR; the "
          "modelled pin cost is off")
    times, ratios = timed(ko_dir)
    for client in ("ours", "reference"):
        path = f"/tmp/perf-{client}.data"
        modsyms = record(client, ko_dir, path)
        chains = samples(path, modsyms)
        own = shares(chains, inclusive=True)
        names = dict(zip([f for _, f in own], demangle([f for _, f in own])))
        print(f"{client}: {len(chains)} samples inside REG_MR/DEREG_MR; top functions, self time:")
        for pct, f in shares(chains, inclusive=False)[:TOP]:
            print(f"  {pct:5.1f}%  {names.get(f, f)[:120]}", flush=True)
        print(f"{client}: the client module's functions, time including what they call:")
        mine = [(p, names[f]) for p, f in own if f.startswith("_R") or f.startswith("nv_mem")
                or f.startswith("nvpeer_glue")]
        for pct, name in mine[:TOP]:
            print(f"  {pct:5.1f}%  {name[:120]}", flush=True)
        for op in FOCUS:
            inside = [c for c in chains if any(op in names.get(f, f) for f in c)]
            if not inside:
                continue
            print(f"{client}: inside {op} ({100.0 * len(inside) / len(chains):.1f}% of the samples), "
                  "self time as a share of those:")
            for pct, f in shares(inside, inclusive=False)[:FOCUS_TOP]:
                print(f"  {pct:5.1f}%  {names.get(f, f)[:120]}", flush=True)
    for mode, what in (("hot", "back to back"), ("cold", "the core's debugfs statistics read after "
                                                "every op")):
        print(f"{mode} loop ({HOT} registrations + deregistrations of one 64 KiB buffer, {what}; no "
              f"perf, pin cost off), {SPLIT_ROUNDS} rounds per module in alternating order: median us "
              "per operation inside each client op, and the median of the rounds' ratios of the "
              "client time (their range)")
        for ops, name in ((REG_OPS, "REG_MR"), (DEREG_OPS, "DEREG_MR")):
            for client in ("ours", "reference"):
                t = times[client][mode]
                parts = " ".join(f"{op} {t[op]:.1f}" for op in ops)
                print(f"  {name} {client:9s} {sum(t[op] for op in ops):6.1f}  ({parts})")
            r = ratios[(mode, ops)]
            print(f"  {name} client time ours/reference: {statistics.median(r):.2f} "
                  f"({r[0]:.2f}-{r[-1]:.2f})", flush=True)
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--loop"]:
        loop(int(sys.argv[2]), cold=True)
        sys.exit(0)
    sys.exit(main(sys.argv[2] if sys.argv[1:2] == ["--ko-dir"] else None))
