# SPDX-License-Identifier: GPL-2.0
"""Python driver for peer_core_sim (tests/stand-ins/peer_core_sim), the MOFED peer-memory core
stand-in: /dev/peer_core_sim ioctls, its debugfs counters and the memory_peers sysfs files.
Also drives the stand-in's test-only client (fake_client.ko): its "GPU memory" and debugfs knobs.

Standard library only. The ioctl numbers are computed from the definitions in
tests/stand-ins/include/nvpeer_sim_uapi.h (read at import), with the struct layouts below.

    from coresim import PeerCoreSim
    with PeerCoreSim() as core:
        mr = core.reg_mr(addr, size)            # OSError(errno) on failure
        core.dma_write(mr, 0, b"hello")
        assert core.dma_read(mr, 0, 5) == b"hello"
        info = core.mr_info(mr)                 # {'state': 'mapped', 'sg': [(dma, len), ...], ...}
        core.dereg_mr(mr)
"""
import ctypes
import fcntl
import mmap
import os
import re
import struct

UAPI_HEADER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "stand-ins",
                           "include", "nvpeer_sim_uapi.h")

# struct layouts (little-endian, as the header says; every struct padded to 8 bytes)
REG = struct.Struct("<QQIIIIII64s")   # peer_core_sim_reg: addr size access kind inject id peer pad client
DMA = struct.Struct("<IIQQQ")          # peer_core_sim_dma: id dir offset len buf
MR_INFO = struct.Struct("<IIIIQQQII")  # peer_core_sim_mr_info
SGE = struct.Struct("<QQ")             # peer_core_sim_sge: dma_address length
PEER_INFO = struct.Struct("<Q64s")     # peer_core_sim_peer_info: peer_id name
U32 = struct.Struct("<I")
C_TYPES = {
    "struct peer_core_sim_reg": REG.size,
    "struct peer_core_sim_dma": DMA.size,
    "struct peer_core_sim_mr_info": MR_INFO.size,
    "struct peer_core_sim_peer_info": PEER_INFO.size,
    "__u32": 4,
    "__u64": 8,
}

# linux/ioctl.h (x86, generic layout)
_IOC_NONE, _IOC_WRITE, _IOC_READ = 0, 1, 2
_IOC_DIRS = {"_IO": _IOC_NONE, "_IOW": _IOC_WRITE, "_IOR": _IOC_READ, "_IOWR": _IOC_READ | _IOC_WRITE}


def _ioc(direction, kind, nr, size):
    return (direction << 30) | (size << 16) | (ord(kind) << 8) | nr


def parse_uapi(path=UAPI_HEADER):
    """Returns ({ioctl name: number}, {constant name: value}) from the uapi header."""
    with open(path) as f:
        text = f.read()
    ioctls = {}
    for m in re.finditer(r"#define\s+(PEER_CORE_SIM_\w+)\s+(_IO|_IOW|_IOR|_IOWR)\('(.)',\s*(\d+)(?:,\s*([^)]+?))?\s*\)",
                         text):
        name, macro, kind, nr, ctype = m.groups()
        size = C_TYPES[ctype.strip()] if ctype else 0
        ioctls[name] = _ioc(_IOC_DIRS[macro], kind, int(nr), size)
    consts = {}
    for m in re.finditer(r"#define\s+(PEER_CORE_SIM_\w+)\s+(0x[0-9a-fA-F]+|\d+)\b", text):
        consts[m.group(1)] = int(m.group(2), 0)
    for body in re.findall(r"enum\s+peer_core_sim_\w+\s*\{(.*?)\};", text, re.S):
        value = -1
        for m in re.finditer(r"(PEER_CORE_SIM_\w+)(?:\s*=\s*(\d+))?\s*(?:,|$)", re.sub(r"/\*.*?\*/", "", body, flags=re.S)):
            value = int(m.group(2)) if m.group(2) else value + 1
            consts[m.group(1)] = value
    return ioctls, consts


IOCTLS, CONSTS = parse_uapi()
IOC_REG_MR = IOCTLS["PEER_CORE_SIM_IOC_REG_MR"]
IOC_DEREG_MR = IOCTLS["PEER_CORE_SIM_IOC_DEREG_MR"]
IOC_DMA = IOCTLS["PEER_CORE_SIM_IOC_DMA"]
IOC_MR_INFO = IOCTLS["PEER_CORE_SIM_IOC_MR_INFO"]
KINDS = {"mr": CONSTS["PEER_CORE_SIM_UMEM_MR"], "cq": CONSTS["PEER_CORE_SIM_UMEM_CQ"]}
ACCESS_WRITE = CONSTS["PEER_CORE_SIM_ACCESS_WRITE"]
FAIL_AFTER_MAP = CONSTS["PEER_CORE_SIM_REG_FAIL_AFTER_MAP"]
STALL = {"after_acquire": CONSTS["PEER_CORE_SIM_REG_STALL_AFTER_ACQUIRE"],
         "after_get_pages": CONSTS["PEER_CORE_SIM_REG_STALL_AFTER_GET_PAGES"],
         "after_dma_map": CONSTS["PEER_CORE_SIM_REG_STALL_AFTER_MAP"],
         "in_dereg": CONSTS["PEER_CORE_SIM_REG_STALL_IN_DEREG"],
         "dereg_unlocked": CONSTS["PEER_CORE_SIM_REG_STALL_DEREG_UNLOCKED"],
         "invalidate_return": CONSTS["PEER_CORE_SIM_REG_STALL_INVALIDATE_RETURN"]}
IOC_STALL_WAIT = IOCTLS["PEER_CORE_SIM_IOC_STALL_WAIT"]
IOC_STALL_RESUME = IOCTLS["PEER_CORE_SIM_IOC_STALL_RESUME"]
IOC_DISASSOCIATE = IOCTLS["PEER_CORE_SIM_IOC_DISASSOCIATE"]
# The stall channels (nvpeer_sim_uapi.h): 0 any, 1 registration/dereg points, 2 the core's
# invalidate returning into the client (STALL["invalidate_return"]).
STALL_ANY, STALL_CORE, STALL_INVALIDATE = 0, 1, 2
IOC_PEER_PRIVATE_DATA = IOCTLS["PEER_CORE_SIM_IOC_PEER_PRIVATE_DATA"]
DMA_TO_MR = CONSTS["PEER_CORE_SIM_DMA_TO_MR"]
DMA_FROM_MR = CONSTS["PEER_CORE_SIM_DMA_FROM_MR"]
STATES = {CONSTS["PEER_CORE_SIM_MR_MAPPED"]: "mapped",
          CONSTS["PEER_CORE_SIM_MR_INVALIDATED"]: "invalidated",
          CONSTS["PEER_CORE_SIM_MR_HOST"]: "host"}

# The core stand-in's builds (tests/stand-ins/peer_core_sim/pcs.h): one per generation, each
# exporting what that generation's cores export, so a client's load-time detection sees the
# generation the stand-in acts; DOCA_CORE is the 5x-unmaps one under DOCA-OFED 24.07+'s name.
CORE_MODULES = {"4x": "peer_core_sim_4x", "5x": "peer_core_sim_5x", "5x-unmaps": "peer_core_sim"}
DOCA_CORE = "ib_uverbs"
# The tests' core generations: the three export sets, and two more MOFED lines of the 5x-unmaps
# build (its parameter line=, pcs.h). A client detects 5x-unmaps on all three UNMAPS lines.
#   5.4-3      the 5.4 LTS line: page size before dma_map, no SG trimming, memory_peers
#   24.04      24.04 ... 24.10 on a new kernel: 5.5+'s SG trimming, no memory_peers, num_dereg_pages
#              0 (5.5 ... 23.10, the same flow with memory_peers and counted dereg pages, have no line)
#   5x-unmaps  25.04+ (line 25.04, memory_peers on: a kernel still exporting mm_kobj)
GENERATIONS = ("4x", "5x", "5.4-3", "24.04", "5x-unmaps")
LINES = {"5.4-3": "5.4-3", "24.04": "24.04", "5x-unmaps": "25.04"}


def detected(generation):
    """The generation a client detects at load on the stand-in of GENERATION."""
    return "5x-unmaps" if generation in LINES else generation


def honours_unmaps(generation):
    """_ex and PEER_MEM_INVALIDATE_UNMAPS honoured (5.4-3 and later)."""
    return generation in LINES


def trims_sgls(generation):
    """5.5+: fix_peer_sgls trims the SG to the PAGE_SIZE range, page size read after dma_map."""
    return generation in ("24.04", "5x-unmaps")


def counts_dereg_pages(generation):
    """num_dereg_pages grows at dereg (before 24.04's sgt_append zeroing, CONTRACT 1.9)."""
    return generation not in ("24.04", "5x-unmaps")


def default_sysfs(generation):
    """memory_peers as that generation's stand-in is loaded by the suites."""
    return 0 if generation == "24.04" else 1


def core_params(generation, sysfs=None, stop_bug=False):
    """The insmod parameters of the stand-in build of GENERATION."""
    params = [f"generation={detected(generation)}"]
    if generation in LINES:
        params.append(f"line={LINES[generation]}")
    params.append(f"sysfs={default_sysfs(generation) if sysfs is None else sysfs}")
    if stop_bug:
        params.append("stop_bug=1")
    return params
CORE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "stand-ins",
                        "peer_core_sim")


def core_module(generation):
    """The module name of the core stand-in of GENERATION."""
    return CORE_MODULES[detected(generation)]


def core_ko(generation, ko_dir=None):
    """Its .ko: in the stand-in's build tree, or in KO_DIR (a flat directory of modules)."""
    return os.path.join(ko_dir or CORE_DIR, core_module(generation) + ".ko")


DEBUGFS = "/sys/kernel/debug/peer_core_sim/stats"
MEMORY_PEERS = "/sys/kernel/mm/memory_peers"
SYSFS_FILES = ("version", "num_alloc_mrs", "num_dealloc_mrs", "num_reg_pages", "num_dereg_pages",
               "num_reg_bytes", "num_dereg_bytes", "num_free_callbacks")


def _kv(tokens):
    out = {}
    for t in tokens:
        k, _, v = t.partition("=")
        out[k] = int(v) if re.fullmatch(r"-?\d+", v) else v
    return out


def parse_stats(text):
    """debugfs stats -> {'core': {...}, 'calls': {...}, 'inval_calls': {...}, 'clients': [...]}.
    clients is a list (names may repeat when sysfs is off)."""
    out = {"clients": []}
    for line in text.splitlines():
        section, *tokens = line.split()
        if section == "client":
            out["clients"].append(_kv(tokens))
        else:
            out[section] = _kv(tokens)
    return out


def stats():
    with open(DEBUGFS) as f:
        return parse_stats(f.read())


def sysfs_stats(name):
    """The eight /sys/kernel/mm/memory_peers/<name>/ files (ints, version a str), or None."""
    d = os.path.join(MEMORY_PEERS, name)
    if not os.path.isdir(d):
        return None
    out = {}
    for f in SYSFS_FILES:
        with open(os.path.join(d, f)) as fh:
            v = fh.read().rstrip("\n")
        out[f] = v if f == "version" else int(v)
    return out


def peer_stats(name):
    """The eight memory_peers values of client NAME: from sysfs when the stand-in creates it,
    else from its debugfs (which has them also with memory_peers off, as MOFED keeps them)."""
    from_sysfs = sysfs_stats(name)
    if from_sysfs is not None:
        return from_sysfs
    for c in stats()["clients"]:
        if c["name"] == name:
            return {k: c[k] for k in SYSFS_FILES if k in c}
    return None


class Buffer:
    """A user mapping with a known address: anonymous memory or a device mapping."""

    def __init__(self, size, path=None):
        if path:
            fd = os.open(path, os.O_RDWR)
            try:
                self.map = mmap.mmap(fd, size)
            finally:
                os.close(fd)
        else:
            self.map = mmap.mmap(-1, size)
        self.size = size
        anchor = ctypes.c_char.from_buffer(self.map)
        self.addr = ctypes.addressof(anchor)
        del anchor

    def write(self, offset, data):
        self.map[offset:offset + len(data)] = data

    def read(self, offset, n):
        return bytes(self.map[offset:offset + n])

    def close(self):
        if self.map is not None:
            self.map.close()
            self.map = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class PeerCoreSim:
    """/dev/peer_core_sim. Every failing call raises OSError with the kernel's errno."""

    def __init__(self, path="/dev/peer_core_sim"):
        self.fd = os.open(path, os.O_RDWR)
        self.last = None  # the last successful registration: {'id', 'peer', 'client'}

    def close(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def reg(self, addr, size, writable=True, kind="mr", inject=0):
        """REG_MR: returns {'id', 'peer', 'client'}."""
        buf = bytearray(REG.pack(addr, size, ACCESS_WRITE if writable else 0, KINDS[kind],
                                 inject, 0, 0, 0, b""))
        fcntl.ioctl(self.fd, IOC_REG_MR, buf, True)
        f = REG.unpack(buf)
        self.last = {"id": f[5], "peer": f[6], "client": f[8].split(b"\0", 1)[0].decode()}
        return self.last

    def reg_mr(self, addr, size, writable=True, kind="mr", inject=0):
        return self.reg(addr, size, writable, kind, inject)["id"]

    def stall_wait(self, channel=STALL_ANY):
        """Returns once a call made with a STALL flag waits at its step (on CHANNEL)."""
        fcntl.ioctl(self.fd, IOC_STALL_WAIT, channel)

    def stall_resume(self, channel=STALL_ANY):
        """Lets the stalled call of CHANNEL (default: every stalled one) go on."""
        fcntl.ioctl(self.fd, IOC_STALL_RESUME, channel)

    def disassociate(self):
        """The device goes away: every MR of this file is deregistered from a kernel worker, as
        uverbs' disassociate does on a NIC reset, unbind or removal. Returns how many."""
        return fcntl.ioctl(self.fd, IOC_DISASSOCIATE, 0)

    def dereg_mr(self, mr_id):
        fcntl.ioctl(self.fd, IOC_DEREG_MR, bytearray(U32.pack(mr_id)), True)

    def peer_private_data(self, name, peer_id=1):
        """ib_get_peer_private_data(ucontext, peer_id, name), as uverbs' SET_CONTEXT_PEER_INFO
        reaches it on a 4.1-5.0 core: returns on 0, raises OSError otherwise (ENOENT: no client
        of that name has both legacy ctx callbacks; EINVAL: they returned NULL; EOPNOTSUPP: not
        a 4x core)."""
        fcntl.ioctl(self.fd, IOC_PEER_PRIVATE_DATA, bytearray(PEER_INFO.pack(peer_id, name.encode())))

    def _dma(self, mr_id, direction, offset, cbuf, n):
        req = bytearray(DMA.pack(mr_id, direction, offset, n, ctypes.addressof(cbuf)))
        fcntl.ioctl(self.fd, IOC_DMA, req, True)

    def dma_write(self, mr_id, offset, data):
        """The "NIC" writes data into the MR at offset (an RDMA write landing)."""
        cbuf = ctypes.create_string_buffer(bytes(data), len(data) or 1)
        self._dma(mr_id, DMA_TO_MR, offset, cbuf, len(data))

    def dma_read(self, mr_id, offset, n):
        """The "NIC" reads n bytes of the MR at offset (an RDMA read source)."""
        cbuf = ctypes.create_string_buffer(n or 1)
        self._dma(mr_id, DMA_FROM_MR, offset, cbuf, n)
        return cbuf.raw[:n]

    def mr_info(self, mr_id, max_sge=256):
        """MR_INFO: state, nmap, nents, page_size, core_context and 'sg' [(dma, len), ...] as the
        NIC sees the table (after the core's fix-ups; empty once invalidated)."""
        sg = ctypes.create_string_buffer(max(max_sge, 1) * SGE.size)
        buf = bytearray(MR_INFO.pack(mr_id, 0, 0, 0, 0, 0, ctypes.addressof(sg) if max_sge else 0,
                                     max_sge, 0))
        fcntl.ioctl(self.fd, IOC_MR_INFO, buf, True)
        _, state, nmap, nents, page_size, core_context, _, _, _ = MR_INFO.unpack(buf)
        n = 0 if STATES.get(state) == "invalidated" else min(nmap, max_sge)
        entries = [SGE.unpack_from(sg.raw, i * SGE.size) for i in range(n)]
        return {"state": STATES.get(state, state), "nmap": nmap, "nents": nents,
                "page_size": page_size, "core_context": core_context, "sg": entries}

    @staticmethod
    def stats():
        return stats()

    @staticmethod
    def sysfs_stats(name):
        return sysfs_stats(name)

    @staticmethod
    def peer_stats(name):
        return peer_stats(name)


# ---------------------------------------------------------------- the test-only fake client

FAKE_DEBUGFS = "/sys/kernel/debug/fake_client"
FAKE_MEM = "/dev/fake_peer_mem"
GPU_PAGE = 64 * 1024


def fake_mem(size):
    """A 64 KiB aligned VM_PFNMAP "GPU memory" mapping of fake_client.ko (GUP cannot pin it)."""
    return Buffer(size, FAKE_MEM)


class FakeClient:
    """One client of fake_client.ko: /sys/kernel/debug/fake_client/<name>/."""

    def __init__(self, name):
        self.name = name
        self.dir = os.path.join(FAKE_DEBUGFS, name)

    def _path(self, knob):
        return os.path.join(self.dir, knob)

    def set(self, knob, value):
        with open(self._path(knob), "w") as f:
            f.write(str(value))

    def get(self, knob):
        with open(self._path(knob)) as f:
            return int(f.read().strip(), 0)

    def log(self):
        """The call log: [{'fn': 'get_pages', 'ctx': 1, ..., 'inv': 0}, ...]."""
        with open(self._path("log")) as f:
            lines = f.read().splitlines()
        out = []
        for line in lines:
            fn, *tokens = line.split()
            entry = _kv(tokens)
            entry["fn"] = fn
            out.append(entry)
        return out

    def calls(self):
        """Just the function names of the log, in order."""
        return [e["fn"] for e in self.log()]

    def clear(self):
        self.set("log", "clear")

    def invalidate(self, core_context):
        """What NVIDIA's free callback makes the client do; returns when the core returned."""
        self.set("invalidate", core_context)

    def live(self):
        return self.get("live")


class Kmsg:
    """The kernel log records written after this object was made (read through /dev/kmsg: no
    exec of dmesg needed)."""

    def __init__(self):
        self.fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        os.lseek(self.fd, 0, os.SEEK_END)
        self.lines = []

    def read(self):
        """Every record since creation, one message per list item."""
        while True:
            try:
                rec = os.read(self.fd, 8192)
            except BlockingIOError:
                break
            except BrokenPipeError:  # records overwritten meanwhile
                continue
            self.lines.append(rec.decode(errors="replace").split(";", 1)[-1].split("\n", 1)[0])
        return self.lines

    def text(self):
        """The same, as one string."""
        return "\n".join(self.read())

    def close(self):
        os.close(self.fd)
