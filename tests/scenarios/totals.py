# SPDX-License-Identifier: GPL-2.0
"""What a reliability run did, per client (ours / reference), for the end-of-suite summary
table (issue 6, item 7): checks, faults injected, revocations (free callbacks the NVIDIA
stand-in fired), iterations of the repeated cases. The VM runner adds leaks and kernel reports
(tests/vm/run.sh) and tests/summary.py prints the table.

Counts are taken where they happen: nvsim.NvP2pSim.fault() counts an injected fault, the
stand-in's free_callbacks counter is harvested before each reset and before it unloads
(stack.Stack), suites add their own iterations."""

import collections
import json
import os

_counts = collections.defaultdict(collections.Counter)
_client = ["ours"]


def set_client(client):
    """Attributes what follows to this client ("ours" or "reference")."""
    _client[0] = client


def client():
    return _client[0]


def add(key, n=1, who=None):
    if n:
        _counts[who or _client[0]][key] += n


def forget():
    """Drops what was counted (a forked child that writes its own record)."""
    _counts.clear()


def write(suite):
    """Writes $NVPEER_OUT/tally-SUITE-PID.json (nothing outside the VM runner)."""
    out = os.environ.get("NVPEER_OUT")
    if not out or not _counts:
        return
    path = os.path.join(out, f"tally-{suite}-{os.getpid()}.json")
    with open(path, "w") as f:
        json.dump({"suite": suite, "clients": {c: dict(v) for c, v in _counts.items()}}, f)
