#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""plot_check.py SVG REPORT.json: checks that `nvpeer bench --plot SVG --json` drew what the
report measured: both panels (bandwidth, time per message) with the message-size axis, the
direct series and, when the report has a staged comparison, the staged one, each in both
legends and drawn as a curve in both panels, and the crossover labelled in both panels exactly
when the report's recommendation names a size (and nowhere otherwise). A curve is a polyline in
its series' colour with one point per measured size (the legend's samples have two, the grid and
the crossover's dashes other colours), so a curve missing from a panel fails even while its
legend still names it (userspace/nvpeer-core/tests/plot.rs proves that on cut documents). Prints
what it found; exits 1 with the first thing missing."""
import json
import re
import sys
import xml.etree.ElementTree as ET

DIRECT = "direct"
STAGED = "staged through host memory (copy included)"
# The curves' colours, in series order (userspace/nvpeer-core/src/commands/bench/plot.rs: `colour`).
COLOURS = ["#0000FF", "#E67800"]


def main():
    svg, report = sys.argv[1], json.load(open(sys.argv[2]))
    root = ET.parse(svg).getroot()
    ns = "{http://www.w3.org/2000/svg}"
    texts = [(t.text or "").strip() for t in root.iter(ns + "text")]
    polylines = [((p.get("stroke") or "").upper(), len((p.get("points") or "").split()))
                 for p in root.iter(ns + "polyline")]
    want = {"message size": 2, "Gb/s": 1, "us per message": 1, DIRECT: 2}
    if report.get("staged"):
        want[STAGED] = 2
    m = re.match(r"use the direct path for messages of (.+) and larger", report.get("recommendation") or "")
    crossover = f"crossover {m.group(1)}: staged wins below" if m else None
    if crossover:
        want[crossover] = 2
    print(f"{svg}: {len(texts)} texts, {len(polylines)} polylines; recommendation: {report.get('recommendation')}")
    for text, n in want.items():
        got = texts.count(text)
        if got != n:
            sys.exit(f"FAIL: {text!r} appears {got} times, expected {n}")
    names = [DIRECT, STAGED] if report.get("staged") else [DIRECT]
    points = len(report["staged"]) if report.get("staged") else len(report.get("rows") or [])
    for name, colour in zip(names, COLOURS):
        curves = sum(1 for p in polylines if p == (colour, points))
        # A two-point curve is as long as its legend sample.
        expected = 4 if points == 2 else 2
        if curves != expected:
            sys.exit(f"FAIL: {name!r}: {curves} polylines in {colour} with {points} points, "
                     f"expected {expected} (a curve in each panel)")
    if not crossover and any(t.startswith("crossover ") for t in texts):
        sys.exit("FAIL: a crossover is drawn but the report names none")
    print("ok: " + ", ".join(want))


if __name__ == "__main__":
    main()
