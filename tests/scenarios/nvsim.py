# SPDX-License-Identifier: GPL-2.0
"""Python driver of the nv_p2p_sim stand-in (tests/stand-ins/nv_p2p_sim), stdlib only.

    sim = NvP2pSim()                      # opens /dev/nv_p2p_sim
    buf = sim.alloc(4 << 20)              # "cudaMalloc": .va .size .id .mm (an mmap object)
    buf.mm[0:4] = b"abcd"                 # CPU access through the mapping
    sim.revoke_at(buf.va, "in_get_pages") # next get_pages on it fires the free callbacks
    sim.stall_at(buf.va, "in_get_pages")  # next get_pages* on it stops once registered ...
    sim.stall_wait(); sim.stall_resume()  # ... until resumed (from another thread)
    sim.fault("dma_map", nth=1, err=errno.ENOMEM)
    buf.free()                            # "cudaFree": free callbacks fire, tables are freed
    sim.counters()["pins"]                # same names as /sys/kernel/debug/nv_p2p_sim/counters

NvP2pSimTest drives the suite's test-only client module (test/nv_p2p_sim_test.ko), which calls
the P2P API on VAs of this process. Ioctl numbers and layouts mirror
tests/stand-ins/include/nvpeer_sim_uapi.h and tests/stand-ins/nv_p2p_sim/test/nv_p2p_sim_test.h.
"""
import ctypes
import errno
import fcntl
import mmap
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import totals  # noqa: E402

# ------------------------------------------------------------------ <asm-generic/ioctl.h>
_IOC_NONE, _IOC_WRITE, _IOC_READ = 0, 1, 2


def _IOC(direction, typ, nr, size):
    return (direction << 30) | (size << 16) | (ord(typ) << 8) | nr


def _IO(typ, nr):
    return _IOC(_IOC_NONE, typ, nr, 0)


def _IOW(typ, nr, size):
    return _IOC(_IOC_WRITE, typ, nr, size)


def _IOR(typ, nr, size):
    return _IOC(_IOC_READ, typ, nr, size)


def _IOWR(typ, nr, size):
    return _IOC(_IOC_READ | _IOC_WRITE, typ, nr, size)


# ------------------------------------------------------------------ nvpeer_sim_uapi.h
ALLOC_CONTIGUOUS = 0x0
ALLOC_FRAGMENTED = 0x1
GPUS = 4                                 # NV_P2P_SIM_GPUS: GPU n's UUID is GPU 0's with byte 15 ^ n
ALLOC_GPU_SHIFT = 8                      # NV_P2P_SIM_ALLOC_GPU(n)
_ALLOC = struct.Struct("=QIIQ")          # size, flags, id, mmap_offset
_FAULT = struct.Struct("=IIiI")          # fn, nth, err, pad
_REVOKE_AT = struct.Struct("=QII")       # va, point, pad
FN_NAMES = ("get_pages", "get_pages_persistent", "put_pages", "put_pages_persistent",
            "dma_map", "dma_unmap")
FN = {name: i for i, name in enumerate(FN_NAMES)}
REVOKE_POINTS = {"in_get_pages": 1, "in_dma_map": 2, "in_put_pages": 3}
_STALL_AT = struct.Struct("=QII")        # va, point, pad
STALL_POINTS = {"in_get_pages": 1}
_SCALARS = ("free_callbacks", "calls_in_callback", "stale_table_uses", "pins",
            "persistent_pins", "mappings", "allocations", "pages_pinned", "put_pages_not_found",
            "put_pages_other_process")
_COUNTERS = struct.Struct("=%dQ" % (2 * len(FN_NAMES) + len(_SCALARS)))

IOC_ALLOC = _IOWR("N", 1, _ALLOC.size)
IOC_FREE = _IOW("N", 2, 8)
IOC_FAULT = _IOW("N", 3, _FAULT.size)
IOC_REVOKE_AT = _IOW("N", 4, _REVOKE_AT.size)
IOC_COUNTERS = _IOR("N", 5, _COUNTERS.size)
IOC_RESET = _IO("N", 6)
IOC_STALL_AT = _IOW("N", 7, _STALL_AT.size)
IOC_STALL_WAIT = _IO("N", 8)
IOC_STALL_RESUME = _IO("N", 9)

DEV = "/dev/nv_p2p_sim"
DEBUGFS_COUNTERS = "/sys/kernel/debug/nv_p2p_sim/counters"
PAGE_64K = 64 << 10


def _ioctl(fd, req, buf=None):
    """ioctl with a mutable buffer; raises OSError(errno) on failure, returns the buffer."""
    if buf is None:
        fcntl.ioctl(fd, req, 0)
        return None
    b = bytearray(buf)
    fcntl.ioctl(fd, req, b, True)
    return bytes(b)


class Allocation:
    """One "cudaMalloc" allocation, mapped in this process."""

    def __init__(self, sim, size, alloc_id, offset):
        self.sim = sim
        self.size = size
        self.id = alloc_id
        self.offset = offset
        self.mm = mmap.mmap(sim.fd, size, flags=mmap.MAP_SHARED,
                            prot=mmap.PROT_READ | mmap.PROT_WRITE, offset=offset)
        anchor = ctypes.c_char.from_buffer(self.mm)
        self.va = ctypes.addressof(anchor)
        del anchor  # an exported buffer would keep mmap.close() from working
        self.freed = False

    def free(self):
        """cudaFree through the FREE ioctl: callbacks fire, the mapping loses its pages."""
        _ioctl(self.sim.fd, IOC_FREE, struct.pack("=Q", self.va))
        self.freed = True
        self.unmap()

    def unmap(self):
        """munmap (a cudaFree of its own when the allocation is still live)."""
        if not self.mm.closed:
            self.mm.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.unmap()


class NvP2pSim:
    """/dev/nv_p2p_sim: allocations, fault injection, revocation points, counters."""

    def __init__(self, dev=DEV):
        self.fd = os.open(dev, os.O_RDWR | os.O_CLOEXEC)

    def close(self):
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def alloc_raw(self, size, fragmented=False, gpu=0):
        """ALLOC only: returns (id, mmap_offset); the caller maps it (or not). gpu: the
        simulated GPU the memory is on (0 ... GPUS - 1), whose UUID its pins carry."""
        flags = ALLOC_FRAGMENTED if fragmented else ALLOC_CONTIGUOUS
        flags |= gpu << ALLOC_GPU_SHIFT
        out = _ioctl(self.fd, IOC_ALLOC, _ALLOC.pack(size, flags, 0, 0))
        _, _, alloc_id, offset = _ALLOC.unpack(out)
        return alloc_id, offset

    def alloc(self, size, fragmented=False, gpu=0):
        alloc_id, offset = self.alloc_raw(size, fragmented, gpu)
        return Allocation(self, size, alloc_id, offset)

    def free_va(self, va):
        _ioctl(self.fd, IOC_FREE, struct.pack("=Q", va))

    def fault(self, fn, nth=1, err=errno.EIO):
        """The nth call of fn from now fails with -err (nth 0 cancels)."""
        fn = FN[fn] if isinstance(fn, str) else fn
        _ioctl(self.fd, IOC_FAULT, _FAULT.pack(fn, nth, err, 0))
        if nth:
            totals.add("faults")

    def revoke_at(self, va, point):
        point = REVOKE_POINTS[point] if isinstance(point, str) else point
        _ioctl(self.fd, IOC_REVOKE_AT, _REVOKE_AT.pack(va, point, 0))

    def stall_at(self, va, point):
        """The next call on the allocation at VA stops at POINT (holding no lock) until
        stall_resume(); EBUSY while another stall is armed or stalled."""
        point = STALL_POINTS[point] if isinstance(point, str) else point
        _ioctl(self.fd, IOC_STALL_AT, _STALL_AT.pack(va, point, 0))

    def stall_wait(self):
        """Returns once a call is stalled; OSError(ETIMEDOUT) after 10 s."""
        _ioctl(self.fd, IOC_STALL_WAIT)

    def stall_resume(self):
        """Lets the stalled call go on; OSError(ESRCH) when none is stalled."""
        _ioctl(self.fd, IOC_STALL_RESUME)

    def counters(self):
        """Flat dict, names as in debugfs: calls_<fn>, failures_<fn>, free_callbacks, ..."""
        vals = _COUNTERS.unpack(_ioctl(self.fd, IOC_COUNTERS, bytes(_COUNTERS.size)))
        n = len(FN_NAMES)
        out = {}
        for i, name in enumerate(FN_NAMES):
            out["calls_" + name] = vals[i]
            out["failures_" + name] = vals[n + i]
        for i, name in enumerate(_SCALARS):
            out[name] = vals[2 * n + i]
        return out

    def reset(self):
        totals.add("revocations", self.counters()["free_callbacks"])
        _ioctl(self.fd, IOC_RESET)


def debugfs_counters(path=DEBUGFS_COUNTERS):
    """The debugfs text counters as a dict (includes backing_bytes, not in the ioctl)."""
    with open(path) as f:
        return {k: int(v) for k, v in (line.split() for line in f if line.strip())}


# ------------------------------------------------------------------ nv_p2p_sim_test.h
GET_CB, GET_NULL_CB, GET_PERSISTENT = 0, 1, 2
CB_NONE, CB_GET_PAGES, CB_PUT_PAGES, CB_DMA_MAP, CB_GET_PERSISTENT, CB_DMA_UNMAP = range(6)
PUT_PAGES, PUT_PERSISTENT, PUT_NULL = 0, 1, 2
FORCE_BAR1 = 1
OPT_NO_READ = 0x1
_T_GET = struct.Struct("=QQIIIIiI")      # va len mode flags cb_action slot ret opts
_T_PUT = struct.Struct("=IIQIi")         # slot mode va flags ret
_T_MAP = struct.Struct("=IIiI")          # slot map ret pad
_T_INFO_FIELDS = ("slot", "map", "cb_runs", "cb_ret", "pt_valid", "version", "page_size",
                  "entries", "flags_read", "flags", "uuid_nonzero", "pad", "phys0",
                  "map_valid", "map_version", "map_page_size_type", "map_entries",
                  "map_peer_ok", "map_breaks", "map_differs", "pad2", "dma0")
_T_INFO = struct.Struct("=IIIiIIIIIIIIQIIIIIIIIQ")
_T_RW = struct.Struct("=IIQQQII")
_T_MISC_FIELDS = ("free_page_table", "free_dma_mapping", "init_mapping", "destroy_mapping",
                  "rsync_register", "rsync_register_again", "rsync_register_after",
                  "rsync_get_registers", "persistent_api", "cap_persistent_pages")
_T_MISC = struct.Struct("=10i")
T_IOC_GET = _IOWR("T", 1, _T_GET.size)
T_IOC_PUT = _IOWR("T", 2, _T_PUT.size)
T_IOC_MAP = _IOWR("T", 3, _T_MAP.size)
T_IOC_UNMAP = _IOWR("T", 4, _T_MAP.size)
T_IOC_INFO = _IOWR("T", 5, _T_INFO.size)
T_IOC_RW = _IOW("T", 6, _T_RW.size)
T_IOC_MISC = _IOR("T", 7, _T_MISC.size)
T_IOC_RESET = _IO("T", 8)
TEST_DEV = "/dev/nv_p2p_sim_test"


class NvP2pSimTest:
    """The test-only client module. P2P return values come back as negative errnos."""

    def __init__(self, dev=TEST_DEV):
        self.fd = os.open(dev, os.O_RDWR | os.O_CLOEXEC)

    def close(self):
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def get(self, va, length, mode=GET_CB, flags=0, cb_action=CB_NONE, opts=0):
        """get_pages* on [va, va+length): returns (ret, slot)."""
        out = _T_GET.unpack(_ioctl(self.fd, T_IOC_GET,
                                   _T_GET.pack(va, length, mode, flags, cb_action, 0, 0,
                                               opts)))
        return out[6], out[5]

    def put(self, slot, mode=PUT_PAGES, va=0, flags=0):
        out = _T_PUT.unpack(_ioctl(self.fd, T_IOC_PUT, _T_PUT.pack(slot, mode, va, flags, 0)))
        return out[4]

    def map(self, slot):
        """dma_map_pages for the edu device: returns (ret, map index)."""
        out = _T_MAP.unpack(_ioctl(self.fd, T_IOC_MAP, _T_MAP.pack(slot, 0, 0, 0)))
        return out[2], out[1]

    def unmap(self, slot, index):
        out = _T_MAP.unpack(_ioctl(self.fd, T_IOC_UNMAP, _T_MAP.pack(slot, index, 0, 0)))
        return out[2]

    def info(self, slot, index=0):
        vals = _T_INFO.unpack(_ioctl(self.fd, T_IOC_INFO,
                                     _T_INFO.pack(slot, index, *([0] * 20))))
        return dict(zip(_T_INFO_FIELDS, vals))

    def rw(self, slot, index, offset, data=None, length=0):
        """Reads length bytes (data None) or writes data through the DMA addresses."""
        if data is None:
            buf = ctypes.create_string_buffer(length)
            write = 0
        else:
            buf = ctypes.create_string_buffer(bytes(data), len(data))
            length, write = len(data), 1
        _ioctl(self.fd, T_IOC_RW, _T_RW.pack(slot, index, offset, length,
                                             ctypes.addressof(buf), write, 0))
        return buf.raw[:length]

    def misc(self):
        vals = _T_MISC.unpack(_ioctl(self.fd, T_IOC_MISC, bytes(_T_MISC.size)))
        return dict(zip(_T_MISC_FIELDS, vals))

    def reset(self):
        _ioctl(self.fd, T_IOC_RESET)
