# SPDX-License-Identifier: GPL-2.0
"""The summary lines of `make bench` (issue 18): one line per kernel and size that a script can
read, from the JSON files bench-reg.py left in each boot's output directory, then the targets
met or missed (ratios ours / NVIDIA's, medians of the rounds, pin cost scaled):

    bench: debian 2MiB reg=0.51 dereg=0.93 mem=0.66 pins=1/2
    bench: debian 4x64MiB reg=0.14 dereg=0.95 pins=1/8
    bench: target debian 64KiB reg<=0.75: 0.71 met

With --foundation, the cost of our own runtime (issue 44): the same kernel's timing boots with
ours on the kernel's crate and on our runtime, each against NVIDIA's module in its boot; per
size the ratio of the two ratios, and whether our runtime's registration ratio stays within the
kernel's crate's run-to-run spread (the range of its rounds):

    bench: foundation 64KiB own/kernel reg=1.03 dereg=0.98 (kernel's rounds 0.77-0.87): within the spread

Usage: bench_summary.py LABEL TIMING_DIR MEMORY_DIR [LABEL TIMING_DIR MEMORY_DIR ...]
(LABEL: test for the test kernel, debian for Debian's 7.x, debian12 for Debian 12's 6.12; exit 1
when a file is missing), bench_summary.py --foundation KERNEL_TIMING_DIR OWN_TIMING_DIR, or
bench_summary.py --self-test (planted results: every line and verdict as expected)."""

import json
import os
import sys

# (what, sizes it applies to, limit per kernel label); sizes as bench-reg.py names them.
SMALL, LARGE, MULTI = ("64KiB",), ("2MiB", "64MiB", "1GiB"), ("4x64MiB",)
TARGETS = (
    ("reg", SMALL, {"debian": 0.75, "debian12": 0.75, "test": 0.75}),
    ("reg", LARGE, {"debian": 0.55, "debian12": 0.55, "test": 0.60}),
    ("dereg", SMALL + LARGE + MULTI, {"debian": 1.00, "debian12": 1.00, "test": 1.00}),
    ("mem", ("64KiB", "2MiB", "64MiB"), {"debian": 1.00, "debian12": 1.00, "test": 1.00}),
    ("reg", MULTI, {"debian": 0.30, "debian12": 0.30, "test": 0.30}),
)


def load(directory, name):
    path = os.path.join(directory, f"{name}.json")
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        raise SystemExit(f"bench_summary: cannot read {path}: {e}") from e


def lines(label, timing, memory):
    """The per-size lines and the target lines of one kernel."""
    times = timing.get("scaled") or timing["given"]
    out, values = [], {}
    for size, t in times.items():
        o, r = t["pins"]
        fields = [f"reg={t['reg']:.2f}", f"dereg={t['dereg']:.2f}"]
        values[("reg", size)], values[("dereg", size)] = t["reg"], t["dereg"]
        mem = memory.get(size, {}).get("mem") if isinstance(memory.get(size), dict) else None
        if mem is not None:
            fields.append(f"mem={mem:.2f}")
            values[("mem", size)] = mem
        fields.append(f"pins={o:g}/{r:g}")
        out.append(f"bench: {label} {size} " + " ".join(fields))
    for what, sizes, limits in TARGETS:
        for size in sizes:
            v = values.get((what, size))
            if v is None:
                out.append(f"bench: target {label} {size} {what}<={limits[label]:.2f}: not measured")
                continue
            verdict = "met" if v <= limits[label] else f"missed by {v - limits[label]:.2f}"
            out.append(f"bench: target {label} {size} {what}<={limits[label]:.2f}: {v:.2f} {verdict}")
    return out


def foundation_lines(kernel, own):
    """Our runtime against the kernel's crate on one kernel, from the two timing boots."""
    kt, ot = kernel.get("scaled") or kernel["given"], own.get("scaled") or own["given"]
    out = []
    for size, k in kt.items():
        o = ot.get(size)
        if o is None:
            out.append(f"bench: foundation {size}: not measured on our runtime")
            continue
        lo, hi = k.get("reg_range", (k["reg"], k["reg"]))
        verdict = "within the spread" if o["reg"] <= hi else f"above the spread by {o['reg'] - hi:.2f}"
        out.append(f"bench: foundation {size} own/kernel reg={o['reg'] / k['reg']:.2f} "
                   f"dereg={o['dereg'] / k['dereg']:.2f} (kernel's rounds {lo:.2f}-{hi:.2f}): {verdict}")
    return out


def self_test():
    """Planted results through lines(): the fields, the scaled table preferred over the given
    one, a met, a missed and an unmeasured target."""
    timing = {"given": {"64KiB": {"reg": 9, "dereg": 9, "pins": [9, 9]}},
              "scaled": {"64KiB": {"reg": 0.7, "dereg": 1.25, "pins": [1, 2]},
                         "4x64MiB": {"reg": 0.14, "dereg": 0.5, "pins": [1, 8]}}}
    memory = {"kernel": "x", "64KiB": {"mem": 1.1, "bytes": [1, 1]}}
    got = lines("debian", timing, memory)
    want = ["bench: debian 64KiB reg=0.70 dereg=1.25 mem=1.10 pins=1/2",
            "bench: debian 4x64MiB reg=0.14 dereg=0.50 pins=1/8",
            "bench: target debian 64KiB reg<=0.75: 0.70 met",
            "bench: target debian 2MiB reg<=0.55: not measured",
            "bench: target debian 64KiB dereg<=1.00: 1.25 missed by 0.25",
            "bench: target debian 64KiB mem<=1.00: 1.10 missed by 0.10",
            "bench: target debian 4x64MiB reg<=0.30: 0.14 met"]
    kernel = {"scaled": {"64KiB": {"reg": 0.80, "reg_range": [0.77, 0.87], "dereg": 1.0},
                         "2MiB": {"reg": 0.60, "reg_range": [0.58, 0.62], "dereg": 1.0}}}
    own = {"scaled": {"64KiB": {"reg": 0.84, "dereg": 0.9}, "2MiB": {"reg": 0.66, "dereg": 1.1}}}
    got += foundation_lines(kernel, own)
    want += ["bench: foundation 64KiB own/kernel reg=1.05 dereg=0.90 (kernel's rounds 0.77-0.87): within the spread",
             "bench: foundation 2MiB own/kernel reg=1.10 dereg=1.10 (kernel's rounds 0.58-0.62): above the spread by 0.04"]
    missing = [w for w in want if w not in got]
    for w in missing:
        print(f"bench_summary self-test: missing line: {w}", file=sys.stderr)
    print(f"bench_summary self-test: {len(want) - len(missing)} of {len(want)} lines as expected")
    return 1 if missing else 0


def main(args):
    if args == ["--self-test"]:
        return self_test()
    if args[:1] == ["--foundation"]:
        if len(args) != 3:
            print("usage: bench_summary.py --foundation KERNEL_TIMING_DIR OWN_TIMING_DIR", file=sys.stderr)
            return 2
        print("\n".join(foundation_lines(load(args[1], "bench-timing"), load(args[2], "bench-timing"))))
        return 0
    if not args or len(args) % 3:
        print(__doc__.strip().splitlines()[-2], file=sys.stderr)
        return 2
    for i in range(0, len(args), 3):
        label, tdir, mdir = args[i:i + 3]
        if label not in ("test", "debian", "debian12"):
            print(f"bench_summary: unknown kernel label {label!r}: use test, debian or debian12", file=sys.stderr)
            return 2
        timing, memory = load(tdir, "bench-timing"), load(mdir, "bench-memory")
        print("\n".join(lines(label, timing, memory)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
