# SPDX-License-Identifier: GPL-2.0
"""How much slower this machine runs code than another: the time of a fixed CPU-bound loop
(the fastest of several runs). bench-reg.py times it in the VM and divides by the host's time
(measured by tests/run-bench.sh before the boot), giving the emulation's slowdown, by which it
scales the stand-in's modelled pin cost so pinning weighs against the rest of the (emulated)
registration path as it would on real hardware.

Usage: calibrate.py   prints the loop's time in ns on this machine"""

import time


def loop_ns(runs=7, n=300_000):
    best = None
    for _ in range(runs):
        t0 = time.perf_counter_ns()
        x = 0
        for i in range(n):
            x = (x * 31 + i) & 0xFFFFFFFF
        dt = time.perf_counter_ns() - t0
        best = dt if best is None else min(best, dt)
    return best


if __name__ == "__main__":
    print(loop_ns())
