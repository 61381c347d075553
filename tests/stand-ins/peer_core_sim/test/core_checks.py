#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""In-VM suite of peer_core_sim with its test-only client fake_client.ko (run by
tests/scenarios/peer-core-sim.sh): python3 core_checks.py [GENERATION...] (default: all of
coresim.GENERATIONS).

For each generation and memory_peers sysfs on/off it loads that generation's build of the core
(peer_core_sim_4x.ko, peer_core_sim_5x.ko, peer_core_sim.ko with the line of 5.4-3, 24.04 or
25.04), then runs each case
with a fresh fake_client.ko carrying the clients the case needs. Modules are loaded with
finit_module/delete_module and the kernel log is read from /dev/kmsg: the guest's root is 9p, so
every exec costs seconds. One line per check ("ok    ..." / "FAIL  ..."), then the tally; exit
status 1 when a check failed.
"""
import ctypes
import errno
import mmap
import os
import random
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "scenarios"))
from coresim import (DOCA_CORE, GENERATIONS, Kmsg, FAIL_AFTER_MAP, GPU_PAGE, Buffer,  # noqa: E402
                     FakeClient, PeerCoreSim, core_ko, core_module, core_params, counts_dereg_pages,
                     detected, fake_mem, honours_unmaps, stats, sysfs_stats, trims_sgls,
                     STALL, STALL_CORE, STALL_INVALIDATE)

FAKE_KO = os.path.join(HERE, "fake_client.ko")
PAGE = mmap.PAGESIZE
OPS = ("acquire", "get_pages", "dma_map", "dma_unmap", "put_pages", "get_page_size", "release")
NO_INVALIDATION_ID = 0xFFFFFFFF
BUILDS = ("4x", "5x", "5x-unmaps")  # one .ko each; the other generations are lines of 5x-unmaps
GEN = ""
TALLY = {"ok": 0, "failed": 0}


def check(desc, cond, detail=""):
    if cond:
        TALLY["ok"] += 1
        print(f"ok    [{GEN}] {desc}", flush=True)
    else:
        TALLY["failed"] += 1
        print(f"FAIL  [{GEN}] {desc}: {detail}", flush=True)
    return cond


def expect_errno(desc, err, fn, *args, **kw):
    try:
        fn(*args, **kw)
    except OSError as e:
        return check(desc, e.errno == err,
                     f"errno {e.errno} ({os.strerror(e.errno)}), expected {errno.errorcode[err]}")
    return check(desc, False, "succeeded")


# ------------------------------------------------------------------ modules and kernel log

_libc = ctypes.CDLL(None, use_errno=True)
SYS_FINIT_MODULE, SYS_DELETE_MODULE = 313, 176  # x86_64


def insmod(path, params=""):
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if _libc.syscall(SYS_FINIT_MODULE, fd, params.encode(), 0) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"insmod {os.path.basename(path)} {params}: {os.strerror(err)}")
    finally:
        os.close(fd)


def rmmod(name):
    """delete_module as rmmod does (O_NONBLOCK: EAGAIN while the module is in use). Blocks while
    the module's exit function does."""
    if _libc.syscall(SYS_DELETE_MODULE, name.encode(), os.O_NONBLOCK) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"rmmod {name}: {os.strerror(err)}")


def loaded(name):
    return os.path.exists(f"/sys/module/{name}")


def module_state(name):
    try:
        with open(f"/sys/module/{name}/initstate") as f:
            return f.read().strip()
    except OSError:
        return "gone"


def log_mark(text):
    with open("/dev/kmsg", "w") as f:
        f.write(f"nvpeer-test-mark {text}\n")


def ops(client, inv=None):
    """The client's calls (callbacks only), optionally only those made inside (inv=1) or
    outside (inv=0) an invalidate call."""
    return [e["fn"] for e in client.log() if e["fn"] in OPS and (inv is None or e["inv"] == inv)]


def entries(client, fn):
    return [e for e in client.log() if e["fn"] == fn]


def only(name, *names):
    """Make only client `name` acquire (all fake clients claim every fake mapping)."""
    for n in names:
        FakeClient(n).set("acquire_ret", 1 if n == name else 0)


def core_stat(key):
    return stats()["core"][key]


def client_stats(name):
    return [c for c in stats()["clients"] if c["name"] == name]


def reg_order():
    """The client calls of one successful registration, per generation."""
    if trims_sgls(GEN):
        return ["acquire", "get_pages", "dma_map", "get_page_size"]
    return ["acquire", "get_pages", "get_page_size", "dma_map"]


def roundtrip(core, mr, mem, mem_off, length, desc):
    """NIC write -> visible in memory; memory write -> NIC read, byte by byte."""
    data = random.randbytes(length)
    core.dma_write(mr, 0, data)
    ok = check(f"{desc}: NIC write lands in memory", mem.read(mem_off, length) == data,
               "bytes differ")
    data = random.randbytes(length)
    mem.write(mem_off, data)
    ok &= check(f"{desc}: NIC read returns memory", core.dma_read(mr, 0, length) == data,
                "bytes differ")
    return ok


def wait_for(cond, timeout=10.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


# ------------------------------------------------------------------ cases


def case_basics():
    """No client registered (fake_client.ko gives the "GPU memory" only)."""
    with PeerCoreSim() as core, Buffer(4 * PAGE) as host, fake_mem(2 * GPU_PAGE) as gpu:
        r = core.reg(host.addr + 100, 3 * PAGE)
        check("host MR registers without a client (peer=0)", r["peer"] == 0 and r["client"] == "", r)
        info = core.mr_info(r["id"])
        check("host MR: state host, 4 pages pinned for an unaligned 3-page range",
              info["state"] == "host" and info["nmap"] == 4 and len(info["sg"]) == 4, info)
        roundtrip(core, r["id"], host, 100, 3 * PAGE, "host MR")
        check("host MR: NIC read at an offset", core.dma_read(r["id"], 5000, 7) ==
              host.read(5100, 7))
        expect_errno("DMA past the MR's end: EINVAL", errno.EINVAL, core.dma_read, r["id"],
                     3 * PAGE - 10, 11)
        expect_errno("DMA on an unknown MR: ENOENT", errno.ENOENT, core.dma_read, 999999, 0, 1)
        ro = core.reg_mr(host.addr, PAGE, writable=False)
        expect_errno("NIC write into a read-only MR: EACCES", errno.EACCES, core.dma_write, ro,
                     0, b"x")
        check("NIC read of a read-only MR", core.dma_read(ro, 0, 16) == host.read(0, 16))
        expect_errno("GPU VA (VM_PFNMAP) with no client: EFAULT", errno.EFAULT, core.reg_mr,
                     gpu.addr, GPU_PAGE)
        expect_errno("size 0: EINVAL", errno.EINVAL, core.reg_mr, host.addr, 0)
        expect_errno("unmapped VA: EFAULT", errno.EFAULT, core.reg_mr, 4096, PAGE)
        check("two live MRs in the stats", core_stat("live_mrs") == 2, stats()["core"])
        with PeerCoreSim() as other:
            theirs = other.reg_mr(host.addr, PAGE)
            expect_errno("an MR of another open file is not ours: ENOENT", errno.ENOENT,
                         core.dereg_mr, theirs)
        check("closing a file deregisters its MRs", core_stat("live_mrs") == 2, stats()["core"])
        core.dereg_mr(r["id"])
        core.dereg_mr(ro)
        expect_errno("dereg twice: ENOENT", errno.ENOENT, core.dereg_mr, ro)
        check("no MR and no umem left", core_stat("live_mrs") == 0 and core_stat("live_umems") == 0,
              stats()["core"])
        check("no client was ever asked", stats()["calls"]["acquire"] == 0, stats()["calls"])


def case_host():
    """Client a (persistent)."""
    a = FakeClient("a")
    a.clear()
    with PeerCoreSim() as core, Buffer(2 * PAGE) as host, fake_mem(GPU_PAGE) as gpu:
        r = core.reg(host.addr, 2 * PAGE)
        check("host memory with a client loaded stays host memory", r["peer"] == 0, r)
        acq = entries(a, "acquire")
        if GEN == "4x":
            check("4x: acquire is called for host memory, before GUP, and declines",
                  len(acq) == 1 and acq[0]["ret"] == 0 and acq[0]["addr"] == hex(host.addr), acq)
        else:
            check("5x: acquire is not called for host memory (GUP succeeded)", acq == [], acq)
        a.clear()
        g = core.reg(gpu.addr + 8, GPU_PAGE - 16)
        check("GPU VA goes to client a", g["peer"] == 1 and g["client"] == "a", g)
        acq = entries(a, "acquire")
        check("acquire gets the raw range, NULL private data and name",
              len(acq) == 1 and acq[0]["addr"] == hex(gpu.addr + 8) and
              acq[0]["size"] == GPU_PAGE - 16 and acq[0]["priv"] == 0 and acq[0]["name"] == 0, acq)
        core.dereg_mr(r["id"])
        core.dereg_mr(g["id"])
    check("every context released", a.live() == 0)


def case_order():
    """Clients a, b (persistent), registered in that order."""
    a, b = FakeClient("a"), FakeClient("b")
    with PeerCoreSim() as core, fake_mem(GPU_PAGE) as gpu:
        a.clear()
        b.clear()
        r = core.reg(gpu.addr, GPU_PAGE)
        check("both acquire: the first registered client wins", r["client"] == "a", r)
        check("the later client is not asked once one acquired", entries(b, "acquire") == [])
        core.dereg_mr(r["id"])

        a.set("acquire_ret", 0)
        a.clear()
        r = core.reg(gpu.addr, GPU_PAGE)
        check("a declines: b is asked next and wins", r["client"] == "b" and
              [e["ret"] for e in entries(a, "acquire")] == [0], r)
        core.dereg_mr(r["id"])

        a.set("acquire_ret", -22)
        before = core_stat("violations")
        r = core.reg(gpu.addr, GPU_PAGE)
        check("acquire < 0 does not win", r["client"] == "b", r)
        if GEN == "4x":
            check("4x: acquire < 0 counted as a protocol violation",
                  core_stat("violations") == before + 1)
        else:
            check("5x: acquire may return -errno (no violation)", core_stat("violations") == before)
        core.dereg_mr(r["id"])

        a.set("acquire_ret", 2)
        r = core.reg(gpu.addr, GPU_PAGE)
        check("any acquire > 0 wins", r["client"] == "a", r)
        core.dereg_mr(r["id"])

        a.set("acquire_ret", 0)
        b.set("acquire_ret", 0)
        expect_errno("nobody acquires a GPU VA: the GUP error (EFAULT)", errno.EFAULT,
                     core.reg_mr, gpu.addr, GPU_PAGE)
    check("every context released", a.live() == 0 and b.live() == 0)


def case_cq():
    """Clients inv (invalidating), p (persistent)."""
    inv, p = FakeClient("inv"), FakeClient("p")
    with PeerCoreSim() as core, fake_mem(GPU_PAGE) as gpu:
        inv.clear()
        cq = core.reg(gpu.addr, GPU_PAGE, kind="cq")
        check("a CQ umem goes to the persistent client", cq["client"] == "p", cq)
        check("the invalidating client is not offered a CQ umem", entries(inv, "acquire") == [])
        mr = core.reg(gpu.addr, GPU_PAGE, kind="mr")
        check("an MR goes to the invalidating client (registered first)", mr["client"] == "inv", mr)
        cq_info, mr_info = core.mr_info(cq["id"]), core.mr_info(mr["id"])
        if GEN == "4x":
            check("4x: CQ umem gets ticket 0, the MR a ticket >= 1",
                  cq_info["core_context"] == 0 and mr_info["core_context"] >= 1,
                  (cq_info, mr_info))
        else:
            check("5x: persistent client's umem gets U32_MAX, invalidating client an xarray id",
                  cq_info["core_context"] == NO_INVALIDATION_ID and
                  mr_info["core_context"] < NO_INVALIDATION_ID, (cq_info, mr_info))
        p.set("acquire_ret", 0)
        inv.clear()
        expect_errno("CQ umem with only an invalidating client willing: EFAULT", errno.EFAULT,
                     core.reg_mr, gpu.addr, GPU_PAGE, kind="cq")
        check("... and the invalidating client was not asked", entries(inv, "acquire") == [])
        stops = core_stat("stop_calls")
        core.dereg_mr(cq["id"])
        if GEN != "4x":
            check("5x: a CQ umem is released without ib_umem_stop_invalidation_notifier (mlx5)",
                  core_stat("stop_calls") == stops, core_stat("stop_calls") - stops)
        core.dereg_mr(mr["id"])
        if GEN != "4x":
            check("5x: an MR's dereg calls the stop function (once)",
                  core_stat("stop_calls") == stops + 1, core_stat("stop_calls") - stops)
    check("every context released", inv.live() == 0 and p.live() == 0)


def case_callorder():
    """Clients p (persistent), inv (invalidating)."""
    p, inv = FakeClient("p"), FakeClient("inv")
    nic = stats()["core"]["nic"]
    with PeerCoreSim() as core, fake_mem(4 * GPU_PAGE) as gpu:
        only("p", "p", "inv")
        p.clear()
        addr, size = gpu.addr + 5000, 3 * GPU_PAGE - 10000
        mr = core.reg_mr(addr, size)
        check("registration calls acquire, get_pages, get_page_size and dma_map in the "
              "generation's order", ops(p) == reg_order(), ops(p))
        gp = entries(p, "get_pages")[0]
        check("get_pages: the raw range, write=1, force=0",
              gp["addr"] == hex(addr) and gp["size"] == size and gp["write"] == 1 and
              gp["force"] == 0, gp)
        if GEN == "4x":
            check("4x: get_pages gets a real sg_table and an MR ticket >= 1 (persistent client too)",
                  gp["sg_head"] == "set" and gp["core_context"] >= 1, gp)
        else:
            check("5x: get_pages gets sg_head NULL and core_context U32_MAX (persistent client)",
                  gp["sg_head"] == "null" and gp["core_context"] == NO_INVALIDATION_ID, gp)
        dm = entries(p, "dma_map")[0]
        check("dma_map: dmasync 0, dma_device the NIC", dm["dmasync"] == 0 and dm["dev"] == nic,
              (dm, nic))
        info = core.mr_info(mr)
        check("MR_INFO: core_context, 3 entries, page size 64 KiB",
              info["core_context"] == gp["core_context"] and info["nmap"] == 3 and
              info["nents"] == 3 and info["page_size"] == GPU_PAGE, info)
        p.clear()
        core.dereg_mr(mr)
        check("dereg calls dma_unmap, put_pages, release", ops(p) ==
              ["dma_unmap", "put_pages", "release"], ops(p))
        check("dma_unmap gets the table as dma_map filled it (fix-ups undone)",
              entries(p, "dma_unmap")[0]["table"] == "ours", entries(p, "dma_unmap"))

        p.clear()
        ro = core.reg_mr(addr, size, writable=False)
        gp = entries(p, "get_pages")[0]
        check("read-only MR: write=1, force=1", gp["write"] == 1 and gp["force"] == 1, gp)
        core.dereg_mr(ro)

        only("inv", "p", "inv")
        inv.clear()
        mrs = [core.reg_mr(gpu.addr, GPU_PAGE) for _ in range(3)]
        ccs = [e["core_context"] for e in entries(inv, "get_pages")]
        if GEN == "4x":
            check("4x: tickets count from 1", ccs == [1, 2, 3], ccs)
        else:
            check("5x: xarray ids count from 0", ccs == [0, 1, 2], ccs)
        for m in mrs:
            core.dereg_mr(m)
        acquired = [e for e in p.log() + inv.log() if e["fn"] == "acquire" and e["ret"] > 0]
        released = entries(p, "release") + entries(inv, "release")
        check("release called once per successful acquire", len(released) == len(acquired),
              (len(acquired), len(released)))
    check("every context released", p.live() == 0 and inv.live() == 0)


def case_errors():
    """Client a (invalidating)."""
    a = FakeClient("a")
    with PeerCoreSim() as core, fake_mem(2 * GPU_PAGE) as gpu:
        a.clear()
        a.set("fail_get_pages", errno.ENOSPC)
        expect_errno("get_pages fails: its error", errno.ENOSPC, core.reg_mr, gpu.addr, GPU_PAGE)
        check("error in get_pages: release only", ops(a) == ["acquire", "get_pages", "release"],
              ops(a))
        a.set("fail_get_pages", 0)

        a.clear()
        a.set("fail_dma_map", errno.ENOMEM)
        expect_errno("dma_map fails: its error", errno.ENOMEM, core.reg_mr, gpu.addr, GPU_PAGE)
        want = [o for o in reg_order() if not trims_sgls(GEN) or o != "get_page_size"]
        check("error after get_pages: put_pages (no dma_unmap), then release",
              ops(a) == want + ["put_pages", "release"], ops(a))
        a.set("fail_dma_map", 0)

        a.clear()
        expect_errno("mkey creation fails after mapping (inject): ENOMEM", errno.ENOMEM,
                     core.reg_mr, gpu.addr, GPU_PAGE, inject=FAIL_AFTER_MAP)
        check("... then dma_unmap, put_pages, release (25.04-fixed stop_invalidation_notifier)",
              ops(a) == reg_order() + ["dma_unmap", "put_pages", "release"], ops(a))

        a.clear()
        a.set("quirk", 2)
        before = core_stat("violations")
        expect_errno("dma_map reporting nmap 0: EINVAL", errno.EINVAL, core.reg_mr, gpu.addr,
                     GPU_PAGE)
        check("... counted as a protocol violation", core_stat("violations") == before + 1)
        check("... and everything undone", ops(a)[-3:] == ["dma_unmap", "put_pages", "release"],
              ops(a))

        a.set("quirk", 1)
        log = Kmsg()
        mr = core.reg_mr(gpu.addr, GPU_PAGE)
        expect_errno("a non-RAM (BAR) DMA address: NIC DMA fails with EFAULT", errno.EFAULT,
                     core.dma_read, mr, 0, 16)
        check("... with a log line", "not RAM" in log.text(), log.text()[-300:])
        log.close()
        core.dereg_mr(mr)
        a.set("quirk", 0)
    check("every context released", a.live() == 0 and core_stat("live_umems") == 0)


def expected_inside(name):
    """What the core calls inside the invalidate call of client `name` (config of case_inval)."""
    if GEN == "4x":
        return ["dma_unmap", "put_pages", "release"]
    if honours_unmaps(GEN) and name == "uinv":
        return []
    return ["dma_unmap", "put_pages"]


def case_inval():
    """Clients inv (plain), uinv (_ex + UNMAPS), ex0 (_ex, flags 0), exs (marker, ex_size 0),
    all invalidating."""
    names = ("inv", "uinv", "ex0", "exs")
    with PeerCoreSim() as core, fake_mem(4 * GPU_PAGE) as gpu:
        for name in names:
            c = FakeClient(name)
            only(name, *names)
            c.clear()
            if GEN == "4x" and name in ("uinv", "ex0"):
                expect_errno(f"4x: {name} (ex_size 152 where get_context_private_data is read) is "
                             "never offered", errno.EFAULT, core.reg_mr, gpu.addr, GPU_PAGE)
                check(f"4x: {name} was not asked", entries(c, "acquire") == [])
                continue
            mr = core.reg_mr(gpu.addr + PAGE, 2 * GPU_PAGE)
            roundtrip(core, mr, gpu, PAGE, 2 * GPU_PAGE, f"{name} before invalidation")
            cc = core.mr_info(mr)["core_context"]
            before = client_stats(name)[0]
            c.clear()
            c.invalidate(cc)
            inside = ops(c, inv=1)
            want = expected_inside(name)
            check(f"{name}: the core calls {want or 'nothing'} inside the invalidate call",
                  inside == want, c.log())
            if honours_unmaps(GEN) and name == "uinv":
                check("uinv: UNMAPS detected, the client unmapped itself afterwards",
                      "self_unmap" in [e["fn"] for e in c.log()], c.log())
            if "dma_unmap" in inside:
                check(f"{name}: the table comes back as dma_map filled it",
                      entries(c, "dma_unmap")[0]["table"] == "ours", entries(c, "dma_unmap"))
            check(f"{name}: MR state invalidated", core.mr_info(mr)["state"] == "invalidated")
            expect_errno(f"{name}: NIC read after invalidation: EIO", errno.EIO, core.dma_read,
                         mr, 0, 8)
            expect_errno(f"{name}: NIC write after invalidation: EIO", errno.EIO,
                         core.dma_write, mr, 0, b"x")
            after = client_stats(name)[0]
            check(f"{name}: num_free_callbacks and num_dealloc_mrs +1",
                  after["num_free_callbacks"] == before["num_free_callbacks"] + 1 and
                  after["num_dealloc_mrs"] == before["num_dealloc_mrs"] + 1, (before, after))
            c.clear()
            c.invalidate(cc)
            check(f"{name}: a second invalidation of the id does nothing more",
                  ops(c) == [] and client_stats(name)[0]["num_free_callbacks"] ==
                  before["num_free_callbacks"] + 2, c.log())
            c.clear()
            core.dereg_mr(mr)
            want = [] if GEN == "4x" else ["release"]
            check(f"{name}: dereg of the invalidated MR calls {want or 'nothing'}", ops(c) == want,
                  c.log())
            check(f"{name}: every context released", c.live() == 0)
        c = FakeClient("inv")
        before = client_stats("inv")[0]["num_free_callbacks"]
        c.clear()
        c.invalidate(123456)
        check("unknown core_context: counted, nothing called", ops(c) == [] and
              client_stats("inv")[0]["num_free_callbacks"] == before + 1, c.log())


def case_legacy():
    """Clients leg (get_context_private_data set), plain."""
    leg, plain = FakeClient("leg"), FakeClient("plain")
    with PeerCoreSim() as core, fake_mem(GPU_PAGE) as gpu:
        leg.clear()
        r = core.reg(gpu.addr, GPU_PAGE)
        if GEN == "4x":
            check("4x: a client with get_context_private_data is never offered normal umems",
                  r["client"] == "plain" and entries(leg, "acquire") == [], r)
        else:
            check("5x: the legacy tail is not read (136-byte layout)", r["client"] == "leg", r)
        core.dereg_mr(r["id"])
        if GEN == "4x":
            expect_errno("4x: ib_get_peer_private_data asks leg's get_context_private_data "
                         "(it returns NULL: EINVAL)", errno.EINVAL, core.peer_private_data, "leg")
            expect_errno("4x: ... and finds no ctx callbacks in plain (ENOENT)", errno.ENOENT,
                         core.peer_private_data, "plain")
            expect_errno("4x: ... nor a client of an unknown name (ENOENT)", errno.ENOENT,
                         core.peer_private_data, "nobody")
        else:
            expect_errno("5x: no ib_get_peer_private_data (EOPNOTSUPP)", errno.EOPNOTSUPP,
                         core.peer_private_data, "leg")
    check("every context released", leg.live() == 0 and plain.live() == 0)


def fixup_case(core, gpu, a, off, size, desc):
    addr = gpu.addr + off
    a.clear()
    mr = core.reg_mr(addr, size)
    info = core.mr_info(mr)
    ps = info["page_size"]
    sg = info["sg"]
    end = addr + size
    base = addr - addr % PAGE
    pbase = addr - addr % ps
    head = base - pbase
    tail = (-end % ps) - (-end % PAGE)
    if trims_sgls(GEN) and ps != PAGE:
        ok = (sg[0][0] % ps == head % ps and
              sum(n for _, n in sg) == (end + (-end % PAGE)) - base and
              (len(sg) > 1 or sg[0][1] == ps - head - tail) and
              (len(sg) == 1 or (sg[0][1] == ps - head and sg[-1][1] == ps - tail)))
        check(f"{desc}: 5.5+ trims first/last entries to the PAGE_SIZE range "
              f"(head {head:#x}, tail {tail:#x})", ok, sg)
    else:
        ok = all(d % ps == 0 and n == ps for d, n in sg)
        check(f"{desc}: entries are whole {ps // 1024} KiB pages (no fix-up)", ok, sg)
    roundtrip(core, mr, gpu, off, size, desc)
    core.dereg_mr(mr)
    check(f"{desc}: dma_unmap gets the original table back",
          [e["table"] for e in entries(a, "dma_unmap")] == ["ours"], entries(a, "dma_unmap"))


def case_fixup():
    """Client a (persistent)."""
    a = FakeClient("a")
    with PeerCoreSim() as core, fake_mem(8 * GPU_PAGE) as gpu:
        fixup_case(core, gpu, a, GPU_PAGE + 0x3123, 2 * GPU_PAGE + 0x2000, "range across 4 pages")
        fixup_case(core, gpu, a, 0x1234, 0x100, "range inside one 64 KiB page")
        fixup_case(core, gpu, a, 0x10000 - 0x800, 0x1000, "range across one page boundary")
        a.set("page_size", PAGE)
        fixup_case(core, gpu, a, GPU_PAGE + 0x3123, 2 * GPU_PAGE, "client page size 4 KiB")
        a.set("page_size", GPU_PAGE)
    check("every context released", a.live() == 0)


def case_dma():
    """Client a (persistent)."""
    with PeerCoreSim() as core, fake_mem(16 * GPU_PAGE) as gpu:
        off, size = 12345, 16 * GPU_PAGE - 20000
        mr = core.reg_mr(gpu.addr + off, size)
        roundtrip(core, mr, gpu, off, size, "1 MiB GPU MR")
        gpu.write(off + GPU_PAGE - 3, b"0123456789")
        check("NIC read across an entry boundary", core.dma_read(mr, GPU_PAGE - 3, 10) ==
              b"0123456789")
        core.dma_write(mr, 2 * GPU_PAGE - 5, b"abcdefghij")
        check("NIC write across an entry boundary",
              gpu.read(off + 2 * GPU_PAGE - 5, 10) == b"abcdefghij")
        expect_errno("DMA past the end: EINVAL", errno.EINVAL, core.dma_write, mr, size - 1,
                     b"ab")
        core.dereg_mr(mr)


def sysfs_expect(name, **want):
    s = sysfs_stats(name)
    d = client_stats(name)[0]
    got = {k: s[k] for k in want} if s else None
    check(f"memory_peers/{name}: {want}", got == want, got)
    check(f"debugfs counters of {name} equal sysfs", all(d[k] == s[k] for k in s if k != "version"),
          (d, s))


def case_sysfs():
    """Clients a (invalidating), b (persistent), u (invalidating, _ex + UNMAPS); sysfs=1."""
    names = os.listdir("/sys/kernel/mm/memory_peers")
    check("memory_peers lists the clients", sorted(names) == ["a", "b", "u"], names)
    check("version file", sysfs_stats("a") and sysfs_stats("a")["version"] == "fake-1.0",
          sysfs_stats("a"))
    check("eight files", sorted(os.listdir("/sys/kernel/mm/memory_peers/a")) ==
          sorted(["version", "num_alloc_mrs", "num_dealloc_mrs", "num_reg_pages", "num_dereg_pages",
                  "num_reg_bytes", "num_dereg_bytes", "num_free_callbacks"]))
    a = FakeClient("a")
    bytes_of = (lambda nmap, length: nmap * GPU_PAGE) if GEN == "4x" else (lambda nmap, length: length)
    # 24.04+ zero the umem's table before adding its entries to num_dereg_pages.
    dereg_pages = (lambda n: n) if counts_dereg_pages(GEN) else (lambda n: 0)
    with PeerCoreSim() as core, fake_mem(4 * GPU_PAGE) as gpu:
        only("a", "a", "b", "u")
        length = GPU_PAGE + 50
        mr = core.reg_mr(gpu.addr + 100, length)
        sysfs_expect("a", num_alloc_mrs=1, num_reg_pages=2, num_reg_bytes=bytes_of(2, length),
                     num_dealloc_mrs=0, num_dereg_pages=0, num_dereg_bytes=0, num_free_callbacks=0)
        a.invalidate(core.mr_info(mr)["core_context"])
        sysfs_expect("a", num_dealloc_mrs=1, num_dereg_pages=dereg_pages(2), num_dereg_bytes=bytes_of(2, length),
                     num_free_callbacks=1)
        core.dereg_mr(mr)
        sysfs_expect("a", num_alloc_mrs=1, num_dealloc_mrs=1, num_dereg_pages=dereg_pages(2),
                     num_dereg_bytes=bytes_of(2, length), num_free_callbacks=1)

        only("b", "a", "b", "u")
        cq = core.reg_mr(gpu.addr, 3 * GPU_PAGE, kind="cq")
        sysfs_expect("b", num_alloc_mrs=1, num_reg_pages=3, num_reg_bytes=3 * GPU_PAGE)
        core.dereg_mr(cq)
        sysfs_expect("b", num_dealloc_mrs=1, num_dereg_pages=dereg_pages(3), num_dereg_bytes=3 * GPU_PAGE)

        if GEN != "4x":
            u = FakeClient("u")
            only("u", "a", "b", "u")
            mr = core.reg_mr(gpu.addr, 2 * GPU_PAGE)
            u.invalidate(core.mr_info(mr)["core_context"])
            if honours_unmaps(GEN):
                sysfs_expect("u", num_alloc_mrs=1, num_dealloc_mrs=1, num_dereg_pages=0,
                             num_dereg_bytes=0, num_free_callbacks=1)
            else:
                sysfs_expect("u", num_dealloc_mrs=1, num_dereg_pages=dereg_pages(2),
                             num_dereg_bytes=2 * GPU_PAGE)
            core.dereg_mr(mr)
            sysfs_expect("u", num_alloc_mrs=1, num_dealloc_mrs=1, num_dereg_pages=dereg_pages(2),
                         num_dereg_bytes=2 * GPU_PAGE, num_free_callbacks=1)


def case_norelease():
    """Client m without release(): optional, never called."""
    m = FakeClient("m")
    with PeerCoreSim() as core, fake_mem(GPU_PAGE) as gpu:
        m.clear()
        core.dereg_mr(core.reg_mr(gpu.addr, GPU_PAGE))
    check("a client without release registers and works; release is never called",
          ops(m) == reg_order() + ["dma_unmap", "put_pages"], ops(m))
    check("the core's use count still drops", core_stat("live_umems") == 0)


def case_nosysfs():
    """Client a; sysfs=0."""
    check("sysfs=0: no memory_peers directory", not os.path.exists("/sys/kernel/mm/memory_peers"))
    with PeerCoreSim() as core, fake_mem(GPU_PAGE) as gpu:
        core.dereg_mr(core.reg_mr(gpu.addr, GPU_PAGE))
    c = client_stats("a")
    check("sysfs=0: the counters are in debugfs", len(c) == 1 and c[0]["num_alloc_mrs"] == 1 and
          c[0]["num_dealloc_mrs"] == 1 and c[0]["sysfs"] == 0, c)


def case_dupes():
    """Two clients named a; sysfs=0."""
    c = client_stats("a")
    check("sysfs=0: two clients of the same name are both registered", len(c) == 2, c)


def case_window():
    """Client inv (invalidating): invalidation while the registration is inside dma_map."""
    inv = FakeClient("inv")
    with PeerCoreSim() as core, fake_mem(GPU_PAGE) as gpu:
        inv.clear()
        inv.set("gate", 1)
        result = {}

        def register():
            try:
                result["id"] = core.reg_mr(gpu.addr, GPU_PAGE)
            except OSError as e:
                result["errno"] = e.errno

        reg = threading.Thread(target=register)
        reg.start()
        if not check("registration reached dma_map", wait_for(lambda: "gate" in inv.calls())):
            inv.set("gate", 0)
            reg.join()
            return
        cc = entries(inv, "get_pages")[0]["core_context"]
        klog = Kmsg()
        invt = threading.Thread(target=inv.invalidate, args=(cc,))
        invt.start()
        time.sleep(1.0)
        if GEN == "4x":
            check("4x: an invalidation during registration returns at once (umem marked)",
                  not invt.is_alive())
        else:
            check("5x: an invalidation during registration sleeps on mapping_lock",
                  invt.is_alive())
        inv.set("gate", 0)
        reg.join(20)
        invt.join(20)
        check("both threads finished", not reg.is_alive() and not invt.is_alive())
        log = inv.log()
        if GEN == "4x":
            check("4x: the registration fails with EINVAL at activation",
                  result.get("errno") == errno.EINVAL, result)
            check("... logging 'pages were invalidated by peer'",
                  "pages were invalidated by peer" in klog.text(), klog.text())
            check("... and undoes everything outside the invalidate call",
                  ops(inv, inv=0)[-3:] == ["dma_unmap", "put_pages", "release"] and
                  ops(inv, inv=1) == [], log)
        else:
            check("5x: the registration succeeds", "id" in result, result)
            check("5x: nothing logged about it", "invalidated by peer" not in klog.text())
            fns = [e["fn"] for e in log]
            check("5x: the invalidation ran after the registration completed",
                  fns.index("invalidate_end") > fns.index("dma_map") and
                  ops(inv, inv=1) == expected_inside("inv"), log)
            if "id" in result:
                check("5x: the MR is invalidated", core.mr_info(result["id"])["state"] ==
                      "invalidated")
                expect_errno("5x: NIC DMA on it: EIO", errno.EIO, core.dma_read, result["id"], 0, 1)
                core.dereg_mr(result["id"])
    klog.close()
    check("every context released", inv.live() == 0)


def case_race():
    """Client inv (invalidating): a second invalidation, or a dereg, while an invalidation is
    inside the client's dma_unmap."""
    inv = FakeClient("inv")
    with PeerCoreSim() as core, fake_mem(GPU_PAGE) as gpu:
        mr = core.reg_mr(gpu.addr, GPU_PAGE)
        cc = core.mr_info(mr)["core_context"]
        before = client_stats("inv")[0]["num_free_callbacks"]
        inv.clear()
        inv.set("gate", 2)
        first = threading.Thread(target=inv.invalidate, args=(cc,))
        first.start()
        if not check("the invalidation reached the client's dma_unmap",
                     wait_for(lambda: "gate" in inv.calls())):
            inv.set("gate", 0)
            first.join()
            return
        second = threading.Thread(target=inv.invalidate, args=(cc,))
        second.start()
        time.sleep(0.5)
        check("a second invalidation of the MR waits for the first", second.is_alive())
        inv.set("gate", 0)
        first.join(20)
        second.join(20)
        check("... and then finds nothing to do", ops(inv, inv=1) == expected_inside("inv") and
              client_stats("inv")[0]["num_free_callbacks"] == before + 2, inv.log())
        core.dereg_mr(mr)

        mr = core.reg_mr(gpu.addr, GPU_PAGE)
        cc = core.mr_info(mr)["core_context"]
        inv.clear()
        inv.set("gate", 2)
        invt = threading.Thread(target=inv.invalidate, args=(cc,))
        invt.start()
        wait_for(lambda: "gate" in inv.calls())
        dereg = threading.Thread(target=core.dereg_mr, args=(mr,))
        dereg.start()
        time.sleep(0.5)
        check("a dereg waits for the invalidation in progress", dereg.is_alive())
        inv.set("gate", 0)
        invt.join(20)
        dereg.join(20)
        outside = [] if GEN == "4x" else ["release"]
        check(f"... then calls {outside or 'nothing'} itself",
              ops(inv, inv=1) == expected_inside("inv") and ops(inv, inv=0) == outside, inv.log())
    check("every context released", inv.live() == 0)


def case_unreg():
    """Client a (persistent): rmmod of the client blocks in unregister while an MR exists."""
    core = PeerCoreSim()
    gpu = fake_mem(GPU_PAGE)
    mr = core.reg_mr(gpu.addr, GPU_PAGE)
    gpu.close()  # the mapping pins the module's file; the MR keeps the memory alive
    result = {}

    def unload():
        try:
            rmmod("fake_client")
            result["rc"] = 0
        except OSError as e:
            result["rc"] = e.errno

    t = threading.Thread(target=unload)
    t.start()
    time.sleep(1.5)
    check("rmmod of the client blocks while an MR exists", t.is_alive(), result)
    check("... the module is going", module_state("fake_client") == "going",
          module_state("fake_client"))
    core.dereg_mr(mr)
    t.join(30)
    check("rmmod completes once the MR is deregistered", result.get("rc") == 0, result)
    check("the client module is gone", not loaded("fake_client"))
    check("no umem left", core_stat("live_umems") == 0)
    core.close()


def case_unreg_modref():
    """Client a, modref=1: a module reference per context makes rmmod refuse instead."""
    core = PeerCoreSim()
    gpu = fake_mem(GPU_PAGE)
    mr = core.reg_mr(gpu.addr, GPU_PAGE)
    gpu.close()
    expect_errno("rmmod refuses while a context holds the module", errno.EAGAIN, rmmod,
                 "fake_client")
    check("... the module stays live", module_state("fake_client") == "live")
    core.dereg_mr(mr)
    rmmod("fake_client")
    check("rmmod succeeds after dereg", not loaded("fake_client"))
    core.close()


def case_disassociate():
    """Client a (invalidating): the device goes away (uverbs' disassociate): every MR of the
    file is deregistered from a kernel worker, the fd stays; then the two stall channels: a
    registration waiting at its step while the core's invalidate waits to return, resumed
    apart."""
    a = FakeClient("a")
    a.clear()
    with PeerCoreSim() as core, fake_mem(2 * GPU_PAGE) as gpu, Buffer(2 * PAGE) as host:
        mrs = [core.reg_mr(gpu.addr, GPU_PAGE), core.reg_mr(host.addr, 2 * PAGE)]
        check("disassociate deregisters every MR of the file (2)", core.disassociate() == 2)
        expect_errno("... their ids are gone: ENOENT", errno.ENOENT, core.dereg_mr, mrs[0])
        check("... no MR and no umem left", core_stat("live_mrs") == 0 and
              core_stat("live_umems") == 0, stats()["core"])
        check("... the client saw dma_unmap, put_pages, release", ops(a)[-3:] ==
              ["dma_unmap", "put_pages", "release"] and a.live() == 0, ops(a))
        check("... a second disassociate finds nothing", core.disassociate() == 0)
        a.clear()
        first = core.reg(gpu.addr, GPU_PAGE, inject=STALL["invalidate_return"])
        res = {}

        def register():
            try:
                res["mr"] = core.reg_mr(gpu.addr + GPU_PAGE, GPU_PAGE,
                                        inject=STALL["after_get_pages"])
            except OSError as e:
                res["err"] = e.errno

        reg_th = threading.Thread(target=register)
        reg_th.start()
        core.stall_wait(STALL_CORE)
        inv_th = threading.Thread(
            target=lambda: a.invalidate(core.mr_info(first["id"])["core_context"]))
        inv_th.start()
        core.stall_wait(STALL_INVALIDATE)
        core.stall_resume(STALL_CORE)
        reg_th.join(10)
        check("stall channels: the registration went on while the invalidate still waited",
              not reg_th.is_alive() and inv_th.is_alive() and "mr" in res, res)
        core.stall_resume(STALL_INVALIDATE)
        inv_th.join(10)
        check("... then the invalidate returned", not inv_th.is_alive())
        expect_errno("resume with nothing stalled: ESRCH", errno.ESRCH, core.stall_resume)
        for m in (first["id"], res.get("mr")):
            if m:
                core.dereg_mr(m)


def case_exit():
    """Client a (invalidating): a process that exits with MRs leaves nothing behind."""
    a = FakeClient("a")
    a.clear()
    pid = os.fork()
    if pid == 0:
        try:
            core = PeerCoreSim()
            gpu = fake_mem(GPU_PAGE)
            host = Buffer(2 * PAGE)
            core.reg_mr(gpu.addr, GPU_PAGE)
            core.reg_mr(host.addr, 2 * PAGE)
            os._exit(0)
        except BaseException:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    check("a child registered two MRs and exited", os.WIFEXITED(status) and
          os.WEXITSTATUS(status) == 0, status)
    check("its MRs were deregistered at exit", core_stat("live_mrs") == 0 and
          core_stat("live_umems") == 0, stats()["core"])
    check("the client saw dma_unmap, put_pages, release", ops(a)[-3:] ==
          ["dma_unmap", "put_pages", "release"] and a.live() == 0, ops(a))


def case_nonic():
    """Client a: without the NIC, registrations reaching dma_map fail with ENODEV."""
    a = FakeClient("a")
    nic = stats()["core"]["nic"]
    drv = "/sys/bus/pci/drivers/peer_core_sim_nic"
    with open(f"{drv}/unbind", "w") as f:
        f.write(nic)
    check("NIC unbound", stats()["core"]["nic"] == "none", stats()["core"])
    with PeerCoreSim() as core, fake_mem(GPU_PAGE) as gpu, Buffer(PAGE) as host:
        a.clear()
        log = Kmsg()
        expect_errno("no NIC: ENODEV", errno.ENODEV, core.reg_mr, gpu.addr, GPU_PAGE)
        check("... with a log line", "no NIC" in log.text(), log.text())
        log.close()
        check("... after get_pages: put_pages, release", ops(a)[-2:] == ["put_pages", "release"] and
              "dma_map" not in ops(a), ops(a))
        core.dereg_mr(core.reg_mr(host.addr, PAGE))
        check("host memory still registers", True)
    with open(f"{drv}/bind", "w") as f:
        f.write(nic)
    check("NIC bound again", stats()["core"]["nic"] == nic, stats()["core"])


# ------------------------------------------------------------------ the suite

# (fake_client parameters, case) for every generation with sysfs on
CASES_SYSFS = (
    ("", case_basics),
    ("name=a", case_host),
    ("name=a,b", case_order),
    ("name=inv,p invalidating=1,0", case_cq),
    ("name=p,inv invalidating=0,1", case_callorder),
    ("name=a invalidating=1", case_errors),
    ("name=inv,uinv,ex0,exs invalidating=1,1,1,1 unmaps=0,1,2,3", case_inval),
    ("name=leg,plain legacy=1,0", case_legacy),
    ("name=a", case_fixup),
    ("name=a", case_dma),
    ("name=a,b,u invalidating=1,0,1 unmaps=0,0,1", case_sysfs),
    ("name=inv invalidating=1", case_window),
    ("name=inv invalidating=1", case_race),
    ("name=a", case_unreg),
    ("name=a modref=1", case_unreg_modref),
    ("name=a invalidating=1", case_exit),
    ("name=a", case_nonic),
    ("name=a invalidating=1", case_disassociate),
    ("name=m missing=release", case_norelease),
)
CASES_NO_SYSFS = (
    ("name=a", case_nosysfs),
    ("name=a,a", case_dupes),
)


def run_case(params, case):
    """One case with a fresh fake_client.ko; a crash is a failed check, cleanup still runs."""
    name = case.__name__[len("case_"):]
    log_mark(f"peer-core-sim {GEN} {name}")
    try:
        insmod(FAKE_KO, params)
    except OSError as e:
        check(f"insmod fake_client {params} (case {name})", False, e)
        return
    try:
        case()
    except Exception as e:  # the traceback goes to the log, the case counts as failed
        import traceback
        traceback.print_exc(file=sys.stdout)
        check(f"case {name} ran to its end", False, repr(e))
    if loaded("fake_client"):
        try:
            rmmod("fake_client")
            check(f"rmmod fake_client after case {name}", True)
        except OSError as e:
            check(f"rmmod fake_client after case {name}", False, e)


def no_page_size():
    """5.x cores do not list get_page_size as mandatory but call it at every registration: the
    client registers, its first registration fails (a real core calls the NULL pointer)."""
    log = Kmsg()
    try:
        insmod(FAKE_KO, "name=m missing=get_page_size")
    except OSError as e:
        check("5x: a client without get_page_size registers (not refused)", False, e)
        return
    check("5x: a client without get_page_size registers (not refused)",
          "missing mandatory function" not in log.text(), log.text())
    with PeerCoreSim() as core, fake_mem(GPU_PAGE) as gpu:
        expect_errno("... its first registration fails: EINVAL", errno.EINVAL, core.reg_mr,
                     gpu.addr, GPU_PAGE)
    check("... as a protocol violation naming it", "no get_page_size: a 5.x core calls it" in
          log.text(), log.text())
    log.close()
    m = FakeClient("m")
    check("... with everything undone", m.live() == 0 and core_stat("live_umems") == 0,
          (m.live(), core_stat("live_umems")))
    rmmod("fake_client")


def registration_rules():
    """Refusals: a missing mandatory op (release is optional: case_norelease), a duplicate
    name while memory_peers exists."""
    for op in ("acquire", "get_pages", "dma_map", "dma_unmap", "put_pages", "get_page_size"):
        if op == "get_page_size" and GEN != "4x":
            no_page_size()
            continue
        log = Kmsg()
        expect_errno(f"a client without {op} is refused", errno.EINVAL, insmod, FAKE_KO,
                     f"name=m missing={op}")
        check(f"... log: Peer memory m is missing mandatory function {op}",
              f"Peer memory m is missing mandatory function {op}" in log.text(), log.text())
        log.close()
    log = Kmsg()
    expect_errno("sysfs on: a second client named a is refused", errno.EINVAL, insmod, FAKE_KO,
                 "name=a,a")
    check("... log: memory_peers/a exists", "memory_peers/a exists" in log.text(), log.text())
    check("... and the first a is gone again", not os.path.exists("/sys/kernel/mm/memory_peers/a"))
    log.close()


# The generation markers a client detects the core by (CONTRACT 1.1), per build.
MARKERS = {"4x": {"ib_get_peer_private_data"}, "5x": set(),
           "5x-unmaps": {"ib_umem_stop_invalidation_notifier"}}


def module_symbols(name):
    """The symbols /proc/kallsyms lists for module NAME."""
    with open("/proc/kallsyms") as f:
        return {w[2] for w in (line.split() for line in f) if len(w) == 4 and w[3] == f"[{name}]"}


def load_core(sysfs):
    mod = core_module(GEN)
    params = " ".join(core_params(GEN, sysfs))
    try:
        insmod(core_ko(GEN), params)
    except OSError as e:
        return check(f"insmod {mod} {params}", False, e)
    with open(f"/sys/module/{mod}/parameters/generation") as f:
        check(f"{mod} loaded ({params})", f.read().strip() == detected(GEN))
    markers = MARKERS[detected(GEN)]
    syms = module_symbols(mod) & set().union(*MARKERS.values())
    check(f"{mod} has the markers of {detected(GEN)} only: {sorted(markers)}", syms == markers,
          sorted(syms))
    return True


def unload_core():
    core = stats()["core"]
    mod = core_module(GEN)
    check("no live umem and no live MR before unload",
          core["live_umems"] == 0 and core["live_mrs"] == 0, core)
    try:
        rmmod(mod)
        check(f"rmmod {mod}", not loaded(mod))
    except OSError as e:
        check(f"rmmod {mod}", False, e)


def builds_refuse_other_generations():
    """A build's exports say which generation it is: every other generation= is refused."""
    for gen in BUILDS:
        for other in BUILDS:
            if other == gen:
                continue
            log = Kmsg()
            expect_errno(f"{core_module(gen)} refuses generation={other}", errno.EINVAL, insmod,
                         core_ko(gen), f"generation={other}")
            lines = [ln for ln in log.text().splitlines() if "contradicts this build's exports" in ln]
            check(f"... in one log line naming both ({gen}, {other})", len(lines) == 1 and
                  f"generation={other} contradicts this build's exports (a {gen} core)" in lines[0],
                  log.text())
            log.close()
    doca = os.path.join(os.path.dirname(core_ko("5x-unmaps")), DOCA_CORE + ".ko")
    expect_errno(f"{DOCA_CORE} (5x-unmaps) refuses generation=4x", errno.EINVAL, insmod, doca,
                 "generation=4x")


def lines_refused():
    """line= and stop_bug= only where that line and build have them, each refusal one line."""
    for ko, params, want in (
            (core_ko("5x-unmaps"), "line=5.6", "invalid line=5.6"),
            (core_ko("5x-unmaps"), "stop_bug=1", "line 25.04 has the fix"),
            (core_ko("5x-unmaps"), "line=25.04 stop_bug=1", "line 25.04 has the fix"),
            (core_ko("5x"), "line=5.4-3", "line= and stop_bug= are for the 5x-unmaps builds"),
            (core_ko("4x"), "stop_bug=1", "line= and stop_bug= are for the 5x-unmaps builds")):
        log = Kmsg()
        expect_errno(f"insmod {os.path.basename(ko)} {params} is refused", errno.EINVAL, insmod,
                     ko, params)
        check(f"... log: {want}", want in log.text(), log.text())
        log.close()
    for line in ("5.4-3", "24.04"):
        try:
            insmod(core_ko("5x-unmaps"), f"line={line} stop_bug=1")
            check(f"line={line} stop_bug=1 loads (the bug is that line's)",
                  stats()["core"]["stop_bug"] == 1 and stats()["core"]["line"] == line,
                  stats()["core"])
            rmmod(core_module("5x-unmaps"))
        except OSError as e:
            check(f"line={line} stop_bug=1 loads (the bug is that line's)", False, e)


def run_generation():
    t0 = time.monotonic()
    print(f"=== generation {GEN}, memory_peers sysfs on", flush=True)
    if load_core(1):
        check("the edu device is the NIC", stats()["core"]["nic"] != "none", stats()["core"])
        for params, case in CASES_SYSFS:
            run_case(params, case)
        registration_rules()
        check("memory_peers is gone with the last client",
              not os.path.exists("/sys/kernel/mm/memory_peers"))
        # Planted: dma_map reporting nmap 0 (errors); on 4x also a negative acquire (order),
        # on 5.x the registration of a client without get_page_size (no_page_size).
        planted = 2
        check(f"protocol violations: the {planted} planted", core_stat("violations") == planted,
              core_stat("violations"))
        unload_core()
    print(f"=== generation {GEN}, memory_peers sysfs off", flush=True)
    if load_core(0):
        for params, case in CASES_NO_SYSFS:
            run_case(params, case)
        check("no protocol violation", core_stat("violations") == 0, core_stat("violations"))
        unload_core()
    print(f"=== generation {GEN}: {time.monotonic() - t0:.0f} s", flush=True)


def main():
    global GEN
    gens = [g for g in sys.argv[1:] if g] or GENERATIONS  # the runner may pass an empty word
    unknown = set(gens) - set(GENERATIONS)
    if unknown:
        print(f"usage: core_checks.py [{'|'.join(GENERATIONS)}]...: unknown {sorted(unknown)}")
        return 2
    for GEN in gens:
        random.seed(GEN)
        run_generation()
    GEN = "-"
    builds_refuse_other_generations()
    lines_refused()
    log = Kmsg()
    expect_errno("insmod generation=6x is refused", errno.EINVAL, insmod, core_ko("5x-unmaps"),
                 "generation=6x")
    check("... log: invalid generation=6x", "invalid generation=6x" in log.text(), log.text())
    print(f"[suite peer-core-sim] {TALLY['ok']} ok, {TALLY['failed']} failed", flush=True)
    return 1 if TALLY["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
