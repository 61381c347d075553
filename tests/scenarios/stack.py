# SPDX-License-Identifier: GPL-2.0
"""Loading and unloading the module stack in the VM: the two stand-ins and a peer-memory client
(ours or NVIDIA's reference), plus a small check tally shared by the Python suites."""

import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import coresim  # noqa: E402
import totals  # noqa: E402

REPO = os.environ.get("NVPEER_REPO", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
CACHE = os.environ.get("NVPEER_CACHE", "/var/cache/nvpeer")
STANDINS = os.path.join(REPO, "tests", "stand-ins")
# NVPEER_OURS_KO: another build of ours (make test's build on our own runtime, kmod/runtime/).
OURS = os.environ.get("NVPEER_OURS_KO") or os.path.join(REPO, "kmod", "nvidia_peermem.ko")
REFERENCE = os.environ.get("NVPEER_REFERENCE_KO", os.path.join(REPO, "tests", "reference", "out", "nvidia-peermem.ko"))


class Tally:
    """Counts checks; prints one line per check."""

    def __init__(self, name):
        self.name = name
        self.passed = 0
        self.failed = 0

    def check(self, desc, cond, detail=""):
        totals.add("checks")
        if cond:
            self.passed += 1
            print(f"ok    {desc}", flush=True)
        else:
            self.failed += 1
            print(f"FAIL  {desc}{': ' + str(detail) if detail != '' else ''}", flush=True)
        return cond

    def eq(self, desc, expected, actual):
        return self.check(desc, expected == actual, f"expected {expected!r}, got {actual!r}")

    def finish(self):
        totals.write(self.name)
        print(f"[suite {self.name}] {self.passed} ok, {self.failed} failed", flush=True)
        return 0 if self.failed == 0 else 1


def sh(*args, check=True):
    r = subprocess.run(args, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: exit {r.returncode}: {r.stderr.strip()}")
    return r


def loaded(name):
    return os.path.exists(f"/sys/module/{name}")


def rmmod(name, settle_s=2.0):
    """rmmod NAME, tried again on EBUSY for up to SETTLE_S: our module's free callback hands
    its last pin reference to a work item of the module (kmod/client/pin.rs, defer_drop), which drops
    it, and with it a module reference, a moment after a cudaFree. Returns the last result."""
    deadline = time.monotonic() + settle_s
    while True:
        r = sh("rmmod", name, check=False)
        if r.returncode == 0 or "in use" not in r.stderr or time.monotonic() > deadline:
            return r
        time.sleep(0.05)


class Stack:
    """nv_p2p_sim (api 535 or 530, page-table version) + the core stand-in's build of the
    generation (peer_core_sim, peer_core_sim_5x or peer_core_sim_4x: each exports what that
    generation's cores export, so a client detects the generation the stand-in acts; the MOFED
    line of the 5x-unmaps build, coresim.GENERATIONS; sysfs, stop_bug) +
    a client module. Use as a context manager: unloads in reverse order."""

    def __init__(self, generation, client="ours", api=535, pt_version=0x00010002,
                 sysfs=None, client_params=(), ko_dir=None, stop_bug=False):
        # NVPEER_KO_DIR: every module built for another kernel (Debian's own, tests/run.sh).
        self.ko_dir = ko_dir or os.environ.get("NVPEER_KO_DIR")
        self.generation = generation
        self.client = client
        self.api = api
        self.pt_version = pt_version
        self.sysfs = coresim.default_sysfs(generation) if sysfs is None else sysfs
        self.stop_bug = stop_bug
        self.client_params = list(client_params)
        self.modules = []

    @property
    def client_module(self):
        return "nvidia_peermem"

    @property
    def core_module(self):
        return coresim.core_module(self.generation)

    def path(self, module):
        """Where MODULE's .ko is: the build trees of the test kernel, or KO_DIR (the flat
        directory `kmod/scripts/stock-kbuild.sh build --stand-ins [--reference]` fills for a stock kernel;
        NVIDIA's module in its reference/ subdirectory)."""
        if self.ko_dir:
            rel = "reference/nvidia-peermem.ko" if module == "reference" else f"{module}.ko"
            return os.path.join(self.ko_dir, rel)
        if module == "reference":
            return REFERENCE
        if module == "nvidia_peermem":
            return OURS
        if module in coresim.CORE_MODULES.values() or module == coresim.DOCA_CORE:
            return os.path.join(STANDINS, "peer_core_sim", f"{module}.ko")
        return os.path.join(STANDINS, module.replace("_530", ""), f"{module}.ko")

    def __enter__(self):
        totals.set_client(self.client)
        sim = "nv_p2p_sim" if self.api == 535 else "nv_p2p_sim_530"
        self._insmod(self.path(sim), sim, f"pt_version={self.pt_version:#x}")
        # generation= is what the build is (it refuses another): a wrong mapping fails here.
        self._insmod(self.path(self.core_module), self.core_module,
                     *coresim.core_params(self.generation, self.sysfs, self.stop_bug))
        ko = self.path("nvidia_peermem" if self.client == "ours" else "reference")
        self._insmod(ko, self.client_module, *self.client_params)
        return self

    def _insmod(self, path, name, *params):
        sh("insmod", path, *params)
        self.modules.append(name)

    def unload_client(self):
        """rmmod of the client alone; returns (exit code, stderr)."""
        r = sh("rmmod", self.client_module, check=False)
        if r.returncode == 0 and self.client_module in self.modules:
            self.modules.remove(self.client_module)
        return r.returncode, r.stderr.strip()

    def reload_client(self):
        """rmmod of the client (settled, as at exit), then insmod with the same parameters."""
        r = rmmod(self.client_module)
        if r.returncode != 0:
            raise RuntimeError(f"rmmod {self.client_module}: {r.stderr.strip()}")
        self.modules.remove(self.client_module)
        ko = self.path("nvidia_peermem" if self.client == "ours" else "reference")
        self._insmod(ko, self.client_module, *self.client_params)

    def __exit__(self, *exc):
        errors = []
        harvest_revocations()
        for name in reversed(self.modules):
            r = rmmod(name)
            if r.returncode != 0:
                errors.append(f"rmmod {name}: {r.stderr.strip()}")
        self.modules = []
        if errors and exc[0] is None:
            raise RuntimeError("; ".join(errors))
        return False


def harvest_revocations():
    """Counts the free callbacks the NVIDIA stand-in fired since its last reset."""
    path = "/sys/kernel/debug/nv_p2p_sim/counters"
    try:
        with open(path) as f:
            c = {k: int(v) for k, v in (line.split() for line in f if line.strip())}
    except OSError:
        return
    totals.add("revocations", c.get("free_callbacks", 0))


OUR_SYSFS = "/sys/module/nvidia_peermem/nvpeer"


def our_stats():
    base = os.path.join(OUR_SYSFS, "stats")
    if not os.path.isdir(base):
        return {}
    return {n: int(open(os.path.join(base, n)).read()) for n in os.listdir(base)}


def our_failures(op):
    """Our module's failure lines ("<op> <errno> <count>") for one callback."""
    with open(os.path.join(OUR_SYSFS, "failures")) as f:
        return [line.strip() for line in f if line.split()[:1] == [op]]


def log(*a):
    print(*a, file=sys.stderr, flush=True)
