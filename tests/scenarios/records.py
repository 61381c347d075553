# SPDX-License-Identifier: GPL-2.0
"""Who holds pinned GPU memory under load and bad input (issue 37 item 4), against our module:
thousands of live registrations read through the records file in small pieces (it pages, each
registration once), a reader racing deregistrations and registrations, pid namespaces (whose pid
a reader sees), and a core reload attempted while registrations are live. Run by lifecycle.py
in the lifecycle boot; the VM runner fails it on any kernel report.

Usage (in the VM): records.py [registrations]"""

import ctypes
import json
import os
import re
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stack import Stack, Tally, loaded, our_stats, sh  # noqa: E402
import coresim  # noqa: E402
import nvsim  # noqa: E402

RECORDS = "/sys/kernel/debug/nvidia_peermem/registrations"
GPUS = "/sys/module/nvidia_peermem/nvpeer/gpus"
COLUMNS = "id tgid comm cgroup gpu va bytes client nic state age_ms pin pin_bytes shares".split()
STATES = {"pinning", "acquired", "pinned", "mapping", "mapped", "invalidating", "revoked", "unpinned",
          "left-to-callback", "unpin-failed"}
KIB64 = 64 << 10
MIB = 1 << 20
CLONE_NEWPID = 0x20000000
CLONE_NEWCGROUP = 0x02000000
PR_SET_NAME = 15
CGROUP2 = "/sys/fs/cgroup"


def read_records(chunk=1 << 20):
    """The records file read with read() calls of CHUNK bytes: (header, rows, problems), each
    row a dict by column; a row that is not well formed is a problem, not a row."""
    fd = os.open(RECORDS, os.O_RDONLY)
    data = b""
    try:
        while True:
            piece = os.read(fd, chunk)
            if not piece:
                break
            data += piece
    finally:
        os.close(fd)
    lines = data.decode().splitlines()
    header = lines[0] if lines else ""
    rows, problems = [], []
    for line in lines[1:]:
        fields = line.split(" ")
        row = dict(zip(COLUMNS, fields))
        if len(fields) != len(COLUMNS) or row["state"] not in STATES or not row["id"].isdigit():
            problems.append(line)
        else:
            rows.append(row)
    return header, rows, problems


def va_of(row):
    """A row's address; None where it is hidden ('-': a process the reader cannot see)."""
    return None if row["va"] == "-" else int(row["va"], 16)


def ids(rows):
    return [int(r["id"]) for r in rows]


def gpu_totals():
    """{uuid: (pinned_bytes, pins, registrations)} from sysfs."""
    out = {}
    for uuid in os.listdir(GPUS):
        def f(name, uuid=uuid):
            with open(os.path.join(GPUS, uuid, name)) as fh:
                return int(fh.read())
        out[uuid] = (f("pinned_bytes"), f("pins"), f("registrations"))
    return out


def many(t, nv, core, n):
    """N registrations of 64 KiB pieces of one buffer (each its own persistent pin), read whole
    and in pieces of 97 bytes (every read() resumes where the last ended)."""
    buf = nv.alloc(4 * MIB)
    mrs = [core.reg_mr(buf.va + (i % 64) * KIB64, KIB64) for i in range(n)]
    header, whole, problems = read_records()
    t.eq("[many] the header names the columns", "# " + " ".join(COLUMNS), header)
    t.eq(f"[many] {n} registrations listed, each well formed", (n, []), (len(whole), problems[:3]))
    _, pieces, problems = read_records(97)
    t.eq("[many] read 97 bytes at a time: the same registrations, once each",
         (sorted(ids(whole)), []), (sorted(ids(pieces)), problems[:3]))
    t.check("[many] ids unique", len(set(ids(whole))) == n)
    mine = {(r["tgid"], r["comm"], r["bytes"], r["state"], r["pin_bytes"], r["shares"]) for r in whole}
    t.eq("[many] every one this process's, 64 KiB, mapped, alone on its pin",
         {(str(os.getpid()), "python3", str(KIB64), "mapped", str(KIB64), "1")}, mine)
    vas = {va_of(r) for r in whole}
    t.eq("[many] the 64 ranges registered", {buf.va + i * KIB64 for i in range(64)}, vas)
    totals = list(gpu_totals().values())
    t.eq("[many] sysfs totals of the one GPU: bytes, pins, registrations", [(n * KIB64, n, n)], totals)
    return buf, mrs


def racing(t, nv, core, buf, mrs):
    """A reader (pieces of 211 bytes) while every registration is deregistered, then while
    registrations come and go: each read shows each registration at most once, every line well
    formed, never more than were live; at the end none."""
    stop = threading.Event()
    reads = []

    def reader():
        while not stop.is_set():
            reads.append(read_records(211))

    th = threading.Thread(target=reader)
    th.start()
    for mr in mrs:
        core.dereg_mr(mr)
    for i in range(300):
        mr = core.reg_mr(buf.va + (i % 64) * KIB64, KIB64)
        core.dereg_mr(mr)
    stop.set()
    th.join()
    bad = [p for _, _, problems in reads for p in problems]
    dup = [ids(rows) for _, rows, _ in reads if len(set(ids(rows))) != len(rows)]
    t.check(f"[racing] {len(reads)} reads during deregistration, all lines well formed", len(reads) >= 2 and not bad,
            f"{len(reads)} reads, {bad[:3]}")
    t.check("[racing] no registration twice in one read", not dup, dup[:1])
    t.check("[racing] never more than were live", all(len(rows) <= len(mrs) for _, rows, _ in reads))
    buf.free()
    _, rows, _ = read_records(211)
    t.eq("[racing] none left", [], rows)
    t.eq("[racing] sysfs totals back to 0", {(0, 0, 0)}, set(gpu_totals().values()))


def scaling(t, nv, core, small=5000, big=50000):
    """REVIEW-KMOD-3 T4-5: a GPU's sysfs totals (mode 0444: anyone may read them in a loop) hold
    each shard lock, which NVIDIA's free callback waits for under its RM lock, for one walk of
    the shard's registrations, not one per registration: reading `pins` at BIG registrations
    takes about BIG/SMALL times as long as at SMALL (the best of 5 reads each), never the square
    (at 50000, the walk from the list's head for every registration took seconds per read)."""
    buf = nv.alloc(4 * MIB)
    mrs = []
    (uuid,) = os.listdir(GPUS) or [None]
    path = os.path.join(GPUS, uuid, "pins")

    def grow(n):
        while len(mrs) < n:
            mrs.append(core.reg_mr(buf.va + (len(mrs) % 64) * KIB64, KIB64))

    def best_read():
        best, pins = None, None
        for _ in range(5):
            t0 = time.perf_counter()
            with open(path) as f:
                pins = int(f.read())
            dt = time.perf_counter() - t0
            best = dt if best is None else min(best, dt)
        return best, pins

    grow(small)
    t_small, pins_small = best_read()
    grow(big)
    t_big, pins_big = best_read()
    t.eq(f"[scaling] {small} then {big} registrations, each alone on its pin", (small, big), (pins_small, pins_big))
    ratio = t_big / t_small
    linear = big / small
    t.check(f"[scaling] a GPU's pins read at {big} registrations takes {ratio:.1f}x as long as at {small} "
            f"({t_big * 1e3:.1f} ms, {t_small * 1e3:.1f} ms): linear (~{linear:.0f}x, under {3 * linear:.0f}x), "
            f"not quadratic (~{linear * linear:.0f}x)", ratio < 3 * linear)
    for mr in mrs:
        core.dereg_mr(mr)
    buf.free()
    t.eq("[scaling] sysfs totals back to 0", {(0, 0, 0)}, set(gpu_totals().values()))


def process_comm(t, nv, core):
    """REVIEW-KMOD-3 T4-7: a record names the process (its leader's comm), not the thread that
    registered."""
    buf = nv.alloc(MIB)
    out = {}

    def register():
        ctypes.CDLL(None).prctl(PR_SET_NAME, b"nvpeer-thread", 0, 0, 0)
        out["mr"] = core.reg_mr(buf.va, MIB)

    th = threading.Thread(target=register)
    th.start()
    th.join()
    with open("/proc/self/comm") as f:
        comm = f.read().strip()
    _, rows, _ = read_records()
    t.eq("[comm] a registration from a thread named nvpeer-thread names its process",
         [comm], [r["comm"] for r in rows if va_of(r) == buf.va])
    core.dereg_mr(out["mr"])
    buf.free()


def escaped_names(t, nv, core):
    """A record's words are one word each, escaped as /proc/mounts does (show.rs): a comm with
    a space, a backslash and a tab shows them as octal escapes, a comm of "-" as \\055 (never our
    "none"); and the GPU column is the GPU's sysfs directory, nvidia-smi's form of its UUID: for
    the stand-in's GPUs 0 ... 3, whose UUIDs differ in their last byte (GPU 0's ^ n), the names
    differ in their last two hex digits only, as the UUIDs do."""
    with open("/proc/self/comm") as f:
        comm = f.read().rstrip("\n")
    expect = {"a b\\c\t": "a\\040b\\134c\\011", "-": "\\055"}
    try:
        for name, shown in expect.items():
            with open("/proc/self/comm", "w") as f:
                f.write(name)
            buf = nv.alloc(MIB)
            mr = core.reg_mr(buf.va, MIB)
            _, rows, problems = read_records()
            t.eq(f"[escape] comm {name!r} shows as {shown!r}, the line well formed",
                 ([shown], []), ([r["comm"] for r in rows if va_of(r) == buf.va], problems[:3]))
            core.dereg_mr(mr)
            buf.free()
    finally:
        with open("/proc/self/comm", "w") as f:
            f.write(comm)
    bufs = [nv.alloc(MIB, gpu=g) for g in range(nvsim.GPUS)]
    mrs = [core.reg_mr(b.va, MIB) for b in bufs]
    _, rows, _ = read_records()
    names = [next((r["gpu"] for r in rows if va_of(r) == b.va), None) for b in bufs]
    form = all(n and re.fullmatch(r"GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", n)
               for n in names)
    t.check("[gpu name] each record's GPU in nvidia-smi's form", form, names)
    if form:
        last = int(names[0][-2:], 16)
        t.eq("[gpu name] GPU n's name is GPU 0's with its last byte ^ n",
             [names[0][:-2] + f"{last ^ g:02x}" for g in range(nvsim.GPUS)], names)
    t.eq("[gpu name] the records' GPUs are the sysfs directories", set(names), set(os.listdir(GPUS)))
    for mr in mrs:
        core.dereg_mr(mr)
    for b in bufs:
        b.free()


def cgroup_namespaces(t, nv):
    """REVIEW-KMOD-3 T4-7: a record's cgroup is shown relative to the reader's cgroup namespace,
    as /proc/<pid>/cgroup shows it: a holder in cgroup /nvpeer-t47 with a cgroup namespace of
    its own reads its registration's cgroup as /, we (in the root namespace) as /nvpeer-t47."""
    if not os.path.exists(os.path.join(CGROUP2, "cgroup.procs")):
        os.makedirs(CGROUP2, exist_ok=True)
        r = sh("mount", "-t", "cgroup2", "none", CGROUP2, check=False)
        if r.returncode != 0:
            t.check("[cgroupns] cgroup2 mounted", False, r.stderr.strip())
            return
    group = os.path.join(CGROUP2, "nvpeer-t47")
    os.makedirs(group, exist_ok=True)
    result_r, result_w = os.pipe()
    go_r, go_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(result_r)
            os.close(go_w)
            with open(os.path.join(group, "cgroup.procs"), "w") as f:
                f.write("0")
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.unshare(CLONE_NEWCGROUP) != 0:
                raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWCGROUP)")
            nvx, corex = nvsim.NvP2pSim(), coresim.PeerCoreSim()
            b = nvx.alloc(MIB)
            corex.reg_mr(b.va, MIB)
            _, rows, _ = read_records()
            seen = next((r["cgroup"] for r in rows if va_of(r) == b.va), None)
            os.write(result_w, (json.dumps({"va": b.va, "seen": seen}) + "\n").encode())
            os.read(go_r, 1)
        finally:
            os._exit(0)
    os.close(result_w)
    os.close(go_r)
    with os.fdopen(result_r) as f:
        out = json.loads(f.readline() or "{}")
    if out:
        _, rows, _ = read_records()
        here = next((r["cgroup"] for r in rows if va_of(r) == out["va"]), None)
        t.eq("[cgroupns] the holder, in a cgroup namespace rooted at its cgroup, reads it as /", "/", out["seen"])
        t.eq("[cgroupns] we read it from the root: /nvpeer-t47", "/nvpeer-t47", here)
    else:
        t.check("[cgroupns] the holder in a new cgroup namespace registered", False)
    os.close(go_w)
    os.waitpid(pid, 0)
    try:
        os.rmdir(group)
    except OSError as e:
        t.check("[cgroupns] its cgroup removed once it exited", False, repr(e))


def _libc_unshare_pid():
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWPID) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWPID)")


def _in_new_pidns(fn):
    """Runs FN() in the first process of a new pid namespace (its pid 1 there); returns
    (the pid it has in ours, a pipe fd that its JSON result arrives on, a pipe fd to release
    it)."""
    result_r, result_w = os.pipe()
    go_r, go_w = os.pipe()
    parent = os.fork()
    if parent == 0:
        try:
            os.close(result_r)
            os.close(go_w)
            _libc_unshare_pid()
            child = os.fork()
            if child == 0:
                out = fn()
                os.write(result_w, (json.dumps(out) + "\n").encode())
                os.read(go_r, 1)
                os._exit(0)
            os.waitpid(child, 0)
        finally:
            os._exit(0)
    os.close(result_w)
    os.close(go_r)
    return parent, result_r, go_w


def pid_namespaces(t, nv):
    """A registration made by pid 1 of a new pid namespace: readers see its pid in their own
    namespace: ours its pid here, itself 1, a reader in a sibling namespace '-'."""
    def holder():
        nvx, corex = nvsim.NvP2pSim(), coresim.PeerCoreSim()
        b = nvx.alloc(MIB)
        corex.reg_mr(b.va, MIB)
        with open("/proc/self/status") as f:  # the host's procfs: NSpid says both pids
            nspid = next(line.split()[1:] for line in f if line.startswith("NSpid:"))
        _, rows, _ = read_records()
        seen = next(r["tgid"] for r in rows if va_of(r) == b.va)
        return {"va": b.va, "nspid": nspid, "getpid": os.getpid(), "seen_by_itself": seen}

    parent, result_r, go_w = _in_new_pidns(holder)
    with os.fdopen(result_r) as f:
        out = json.loads(f.readline() or "{}")
    if not out:
        t.check("[pidns] the holder in a new pid namespace registered", False)
        return
    host_pid = int(out["nspid"][0])
    _, rows, _ = read_records()
    here = next((r["tgid"] for r in rows if va_of(r) == out["va"]), None)
    t.eq("[pidns] the holder is pid 1 in its namespace", 1, out["getpid"])
    t.eq("[pidns] our reader sees its pid in our namespace", str(host_pid), here)
    t.eq("[pidns] its own reader sees 1", "1", out["seen_by_itself"])

    def sibling():
        # The row of the holder's 1 MiB (the only one): its va may be hidden.
        _, rows, _ = read_records()
        return next(([r["tgid"], r["comm"], r["va"], r["gpu"], r["nic"]] for r in rows
                     if r["bytes"] == str(MIB)), None)

    sib_parent, sib_r, sib_go = _in_new_pidns(sibling)
    with os.fdopen(sib_r) as f:
        seen = json.loads(f.readline() or "null")
    os.close(sib_go)
    os.waitpid(sib_parent, 0)
    t.eq("[pidns] a reader in a sibling namespace sees '-'", "-", (seen or [None])[0])
    # REVIEW-KMOD-3 T4-7: nor its name, range, GPU or NIC.
    t.eq("[pidns] ... and '-' for its comm, va, GPU and NIC", ["-"] * 4, (seen or [None] * 5)[1:])
    os.close(go_w)
    os.waitpid(parent, 0)
    _, rows, _ = read_records()
    t.eq("[pidns] its registration went with it", [], [r for r in rows if va_of(r) == out["va"]])


def core_reload(t, st):
    """The network stack reloaded while registrations are live: the core cannot go before our
    module, ours not before its registrations (`nvpeer detach` names them); the records stay
    whole throughout. The device going away (uverbs' disassociate, the first step of a driver
    restart) deregisters them from a kernel worker: then the records are empty, the core and
    ours reload, and a new registration is recorded."""
    nv, core = nvsim.NvP2pSim(), coresim.PeerCoreSim()
    buf = nv.alloc(4 * MIB)
    for i in range(8):
        core.reg_mr(buf.va + i * KIB64, KIB64)
    core_mod = st.core_module
    r = sh("rmmod", core_mod, check=False)
    t.check(f"[reload] rmmod {core_mod} refused while ours is loaded", r.returncode != 0, r.stderr.strip())
    r = sh("rmmod", "nvidia_peermem", check=False)
    t.check("[reload] rmmod nvidia_peermem refused while registrations are live", r.returncode != 0)
    _, rows, problems = read_records(97)
    t.eq("[reload] the records still list the 8, whole", (8, []), (len(rows), problems))
    n = core.disassociate()
    t.eq("[reload] the device goes away: 8 deregistered from a kernel worker", 8, n)
    _, rows, _ = read_records()
    t.eq("[reload] then no records", [], rows)
    t.eq("[reload] and no live registration", 0, our_stats()["live_contexts"])
    buf.free()
    core.close()
    nv.close()
    code, err = st.unload_client()
    t.eq("[reload] ours unloads", (0, ""), (code, err))
    r = sh("rmmod", core_mod, check=False)
    t.eq(f"[reload] {core_mod} unloads", 0, r.returncode)
    st.modules.remove(core_mod)
    st._insmod(st.path(core_mod), core_mod, *coresim.core_params(st.generation, st.sysfs, st.stop_bug))
    st._insmod(st.path("nvidia_peermem"), "nvidia_peermem", *st.client_params)
    nv, core = nvsim.NvP2pSim(), coresim.PeerCoreSim()
    b = nv.alloc(MIB)
    mr = core.reg_mr(b.va, MIB)
    _, rows, _ = read_records()
    t.eq("[reload] after the reload a new registration is recorded",
         [(str(os.getpid()), hex(b.va), str(MIB))], [(r["tgid"], r["va"], r["bytes"]) for r in rows])
    core.dereg_mr(mr)
    b.free()
    core.close()
    nv.close()


def run(t, n):
    with Stack("5x-unmaps", client="ours") as st:
        nv, core = nvsim.NvP2pSim(), coresim.PeerCoreSim()
        buf, mrs = many(t, nv, core, n)
        racing(t, nv, core, buf, mrs)
        scaling(t, nv, core)
        process_comm(t, nv, core)
        escaped_names(t, nv, core)
        pid_namespaces(t, nv)
        cgroup_namespaces(t, nv)
        core.close()
        nv.close()
        core_reload(t, st)
    t.check("[records] nothing left loaded", not loaded("nvidia_peermem"))


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
    t = Tally("records")
    try:
        run(t, n)
    except Exception as e:
        t.check("ran to the end", False, repr(e))
    return t.finish()


if __name__ == "__main__":
    sys.exit(main())
