#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""summary.py DIR: the reliability table at the end of the suite (issue 6, item 7), from the
run records tests/vm/run.sh writes into DIR (one per VM run), then the kernel x suite table.

Per client (ours, reference): VM runs, checks, faults injected, revocations, iterations, leaks
and kernel reports found. A run without a tally loaded only our module (or nothing of
NVIDIA's) and counts for ours. A run that declares an expected bug of NVIDIA's driver itself
(NVPEER_SUMMARY_EXPECTED starting "nvidia.ko: ", a use-after-free the stand-in commits as
nvidia.ko does, whichever client drives it) counts in a row of its own, as does one that declares
a known bug of a real MOFED core that the core stand-in reproduces ("MOFED core: "). Exit status
1 when ours shows any leak or report, or when another row shows one that its run did not declare
as an expected known bug."""

import glob
import json
import os
import sys

COLUMNS = ("runs", "checks", "faults", "revocations", "iterations", "leaks", "reports")
DRIVER = "nvidia.ko"  # the stand-in's own known breaks, as NVIDIA's driver has them
DRIVER_PREFIX = DRIVER + ": "
CORE = "MOFED core"  # the core stand-in's known bugs of real MOFED lines (stop_bug=1)
CORE_PREFIX = CORE + ": "


def main(directory):
    rows = {c: dict.fromkeys(COLUMNS, 0) for c in ("ours", "reference", DRIVER, CORE)}
    expected, unexpected = [], []
    records = [json.load(open(p)) for p in sorted(glob.glob(os.path.join(directory, "run-*.json")))]
    for rec in records:
        for tally in rec["tallies"]:
            for client, counts in tally["clients"].items():
                for k in ("checks", "faults", "revocations", "iterations"):
                    rows[client][k] += counts.get(k, 0)
        owner = owner_of(rec)
        rows[owner]["runs"] += 1
        found = rec["leaks"] + len(rec["reports"])
        rows[owner]["leaks"] += rec["leaks"]
        rows[owner]["reports"] += len(rec["reports"])
        if found:
            what = f"{rec['suite']} {rec['args']}".strip() + f": leaks {rec['leaks']}, reports {','.join(rec['reports']) or '-'}"
            if owner != "ours" and rec.get("expected"):
                expected.append((owner, f"{what} (expected: {rec['expected']})"))
            else:
                unexpected.append(f"[{owner}] {what}")
    print("== reliability summary (every VM run of this suite)")
    print(f"   {'client':<10}" + "".join(f"{c:>12}" for c in COLUMNS))
    for client, row in rows.items():
        print(f"   {client:<10}" + "".join(f"{row[c]:>12}" for c in COLUMNS))
    for owner, line in expected:
        print(f"   {owner}, known bug caught: {line}")
    for line in unexpected:
        print(f"   UNEXPECTED: {line}")
    if not records:
        print("   no run records (NVPEER_SUMMARY_DIR was not set for the VM runs)")
        return 1
    print_matrix(records)
    return 1 if unexpected else 0


def owner_of(rec):
    """The row a run's leaks and reports belong to: the client it exercised (a run that loaded
    both is charged to ours, so ours is never cleared by the reference's presence), or the
    row of the known bug it declares."""
    clients = {c for tally in rec["tallies"] for c in tally["clients"]}
    if rec.get("expected", "").startswith(DRIVER_PREFIX):
        return DRIVER
    if rec.get("expected", "").startswith(CORE_PREFIX):
        return CORE
    return "ours" if "ours" in clients or not clients else "reference"


def outcome(rec):
    """ok, FAIL, or known (a declared known bug of NVIDIA's module or driver or of a MOFED core,
    caught; never for a run charged to ours)."""
    found = rec["leaks"] + len(rec["reports"])
    if found and rec.get("expected") and owner_of(rec) != "ours":
        return "known"
    return "ok" if rec["rc"] == "0" and not found else "FAIL"


def print_matrix(records):
    """The kernel x suite x result table: one row per suite (and its arguments), one column per
    kernel the runs booted; a cell with several runs says how many passed."""
    kernels = sorted({r.get("kernel", "?") for r in records})
    cells = {}
    for rec in records:
        suite = f"{rec['suite']} {rec['args']}".strip()
        cells.setdefault(suite, {}).setdefault(rec.get("kernel", "?"), []).append(outcome(rec))
    width = max(len(s) for s in cells)
    print("== kernel x suite (every VM run; ok, FAIL, or known: a known bug caught as declared)")
    print(f"   {'suite':<{width}}" + "".join(f"  {k:<26}" for k in kernels))
    for suite, by_kernel in cells.items():
        row = []
        for k in kernels:
            res = by_kernel.get(k, [])
            if not res:
                row.append("-")
            elif len(set(res)) == 1:
                row.append(res[0] if len(res) == 1 else f"{res[0]} x{len(res)}")
            else:
                row.append(f"{res.count('ok')}/{len(res)} ok, FAIL" if "FAIL" in res else "/".join(res))
        print(f"   {suite:<{width}}" + "".join(f"  {c:<26}" for c in row))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: summary.py DIR", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
