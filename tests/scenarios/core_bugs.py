# SPDX-License-Identifier: GPL-2.0
"""The MOFED core bug of 5.4-3 ... 24.10 (CONTRACT 1.7 item 7, fixed in 25.04 by cccf5314),
reproduced by the core stand-in with stop_bug=1: ib_umem_stop_invalidation_notifier tests
`xa_id != PEER_NO_INVALIDATION_ID` where it means `==`. Each case needs a boot of its own
(lockdep reports only the first bug of a boot; the second case leaves a thread blocked for ever);
tests/stand-ins/peer_core_sim/expect-core-bugs.sh runs them and checks the reports.

  persistent_dereg GEN   our default (persistent) nv_mem: a CQ umem registers and deregisters
                         without a report (mlx5 never stops those), then an MR's dereg unlocks the
                         umem's mapping_lock that nobody holds: lockdep "bad unlock balance". The
                         MR is gone all the same and nothing is left pinned.
  failed_activation GEN  an invalidating nv_mem (persistent_api_support=0) and an MR whose mkey
                         creation fails after dma_map (before activation, mapping_lock still held
                         by the registering thread): stop re-locks it, lockdep "possible recursive
                         locking detected", and the registration never returns.

Not the client's doing: every client of such a core meets them (NVIDIA's 560+ default is a
persistent nv_mem too). Usage (in the VM): core_bugs.py persistent_dereg|failed_activation GEN"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stack import Stack, Tally  # noqa: E402
import coresim  # noqa: E402
import nvsim  # noqa: E402
import totals  # noqa: E402

MIB = 1 << 20
# How long the failed registration must stay blocked to count as the self-deadlock: past a
# hung-task check (every HUNG_TASK_S) after HUNG_TASK_S blocked, so the detector reports it too.
HUNG_TASK_S = 10
HANG_S = 35
BAD_UNLOCK = "bad unlock balance detected"
RECURSIVE = "possible recursive locking detected"


def persistent_dereg(t, gen):
    label = f"[ours {gen} stop_bug=1 defaults]"
    with Stack(gen, client="ours", stop_bug=True):
        nv, core, log = nvsim.NvP2pSim(), coresim.PeerCoreSim(), coresim.Kmsg()
        a = nv.alloc(2 * MIB)
        cq = core.reg(a.va, 2 * MIB, kind="cq")
        core.dereg_mr(cq["id"])
        t.check(f"{label} a CQ umem's dereg shows no report (mlx5 only releases those)",
                BAD_UNLOCK not in log.text(), log.text()[-400:])
        mr = core.reg(a.va, 2 * MIB)
        t.eq(f"{label} the MR is taken by our persistent nv_mem", "nv_mem", mr["client"])
        core.dereg_mr(mr["id"])
        t.check(f"{label} the MR's dereg: lockdep reports the core's unlock of an unheld "
                "mapping_lock (an unlock-imbalance report)", BAD_UNLOCK in log.text(),
                log.text()[-400:])
        lines = log.read()
        at = next((i for i, ln in enumerate(lines) if "release lock (&u->mapping_lock) at:" in ln), None)
        # The unlock site, as lockdep prints it: in the core stand-in (its stop function, or its
        # caller when the unlock is a tail call), never in the client.
        site = lines[at + 1] if at is not None and at + 1 < len(lines) else ""
        t.check(f"{label} ... released in the core stand-in's code, not ours ({site.strip()})",
                "[peer_core_sim]" in site,
                "\n".join(lines[-40:]))
        a.free()
        c = nv.counters()
        t.check(f"{label} the MR is gone all the same: nothing pinned or mapped",
                c["pins"] == 0 and c["persistent_pins"] == 0 and c["mappings"] == 0, c)
        log.close()
        core.close()
        nv.close()


def failed_activation(t, gen):
    """In a child whose output goes to a file (a thread stuck in the kernel cannot be waited for,
    and must not hold the runner's console pipe): the stack, the allocation and the failing
    registration, all of that process (nv_p2p_sim's memory belongs to the process that mapped
    it). The parent watches the kernel log and the child, then returns, leaving it blocked."""
    label = f"[ours {gen} stop_bug=1 persistent_api_support=0]"
    logf = "/tmp/core-bugs-child.log"
    totals.set_client("ours")  # the stack is the child's; this run's records are ours
    log = coresim.Kmsg()
    # The VM arms the detector at 30 s; a lower timeout has the hang in the log sooner.
    with open("/proc/sys/kernel/hung_task_timeout_secs", "w") as f:
        f.write(str(HUNG_TASK_S))
    pid = os.fork()
    if pid == 0:
        totals.forget()
        fd = os.open(logf, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        try:
            st = Stack(gen, client="ours", stop_bug=True, client_params=["persistent_api_support=0"])
            st.__enter__()  # never left: the blocked registration keeps every module in use
            a = nvsim.NvP2pSim().alloc(2 * MIB)
            print(f"child: registering {a.va:#x} with FAIL_AFTER_MAP", flush=True)
            coresim.PeerCoreSim().reg(a.va, 2 * MIB, inject=coresim.FAIL_AFTER_MAP)
            print("child: the registration returned", flush=True)
        except BaseException as e:  # noqa: BLE001 - reported through the log file
            print(f"child: {e!r}", flush=True)
        finally:
            os._exit(0)
    deadline = time.monotonic() + HANG_S
    while time.monotonic() < deadline and RECURSIVE not in log.text():
        time.sleep(0.5)
    t.check(f"{label} mkey creation fails before activation: lockdep reports the core re-taking "
            "the mapping_lock its thread holds (a recursive-locking report)", RECURSIVE in log.text(),
            log.text()[-400:])
    while time.monotonic() < deadline:
        if os.waitpid(pid, os.WNOHANG)[0]:
            break
        time.sleep(1)
    blocked = os.waitpid(pid, os.WNOHANG)[0] == 0
    print("".join(f"  {line}" for line in open(logf)), end="", flush=True)
    t.check(f"{label} ... and the registration never returns (blocked {HANG_S} s: the "
            "self-deadlock)", blocked)
    log.close()


CASES = {"persistent_dereg": persistent_dereg, "failed_activation": failed_activation}


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in CASES or sys.argv[2] not in ("5.4-3", "24.04"):
        print(f"usage: core_bugs.py {'|'.join(CASES)} 5.4-3|24.04", flush=True)
        return 2
    t = Tally(f"core-bugs-{sys.argv[1]}")
    try:
        CASES[sys.argv[1]](t, sys.argv[2])
    except Exception as e:
        t.check(f"{sys.argv[1]} {sys.argv[2]}: ran to the end", False, repr(e))
    return t.finish()


if __name__ == "__main__":
    sys.exit(main())
