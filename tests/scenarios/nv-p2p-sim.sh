# SPDX-License-Identifier: GPL-2.0
# The nv_p2p_sim stand-in proves its own behaviour (CONTRACT.md 2, as tests/stand-ins/nv_p2p_sim
# models it), through its user interface (tests/scenarios/nvsim.py) and the test-only client
# module test/nv_p2p_sim_test.ko. Build first on the host:
#   make -C "$KDIR" M="$PWD/tests/stand-ins/nv_p2p_sim" modules
# then: tests/vm/run.sh nv-p2p-sim
. "$(dirname "$0")/lib.sh"
SIM_DIR=$REPO/tests/stand-ins/nv_p2p_sim
SIM_KO=$SIM_DIR/nv_p2p_sim.ko
SIM530_KO=$SIM_DIR/nv_p2p_sim_530.ko
TEST_KO=$SIM_DIR/test/nv_p2p_sim_test.ko
PARAMS=/sys/module/nv_p2p_sim/parameters
PY=${NVPEER_PYTHON:-/usr/bin/python3}
export PYTHONPATH=$REPO/tests/scenarios PYTHONDONTWRITEBYTECODE=1

for ko in "$SIM_KO" "$SIM530_KO" "$TEST_KO"; do
    [ -f "$ko" ] || { not_ok "$ko not built (make -C \$KDIR M=$SIM_DIR modules)"; finish; exit 1; }
done

# Checks written in Python: `check(desc, cond)` / `eq(desc, expected, actual)` print lib.sh-style
# lines, counted here; a Python exception counts as one failure.
PRELUDE='
import errno, os, signal, struct, sys, time
from nvsim import *
K64, M2, M4 = 64 << 10, 2 << 20, 4 << 20
BAR = 1 << 62
def check(desc, cond, detail=""):
    print(("ok    " + desc) if cond else ("FAIL  " + desc + (": " + str(detail) if detail != "" else "")), flush=True)
    return cond
def eq(desc, expected, actual):
    return check(desc, expected == actual, "expected %r, got %r" % (expected, actual))
def err_of(fn, *args, **kw):
    try:
        fn(*args, **kw)
    except OSError as e:
        return e.errno
    return 0
sim = NvP2pSim()
t = NvP2pSimTest() if os.path.exists(TEST_DEV) else None
OUTSTANDING = ("pins", "persistent_pins", "mappings", "pages_pinned")
def outstanding():
    c = sim.counters()
    return {k: c[k] for k in OUTSTANDING}
def settled(desc):
    eq(desc + ": no pin, mapping or pinned page outstanding", dict.fromkeys(OUTSTANDING, 0), outstanding())
def delta(before, after, *keys):
    return tuple(after[k] - before[k] for k in keys)
'
py() {
    local desc=$1 out rc line
    out=$("$PY" -c "$PRELUDE$(cat)" 2>&1); rc=$?
    while IFS= read -r line; do
        case "$line" in
        "ok    "*) PASSED=$((PASSED + 1)); echo "$line" ;;
        "FAIL  "*) FAILED=$((FAILED + 1)); echo "$line" ;;
        *) echo "      $line" ;;
        esac
    done <<<"$out"
    [ $rc -eq 0 ] || not_ok "$desc: python exited $rc"
}
# log_has MARK REGEX: the kernel log since `mark MARK` matches (no <(...): the VM may lack /dev/fd).
log_has() { dmesg_since "$1" | grep -qE "$2"; }
unload_all() {
    for m in nv_p2p_sim_test nv_p2p_sim nv_p2p_sim_530; do
        [ -e /sys/module/$m ] && rmmod $m
    done
    return 0
}

# ------------------------------------------------------------------ load, parameters
echo "== load and parameters"
for bad in api=600 pt_version=0x00030000; do
    mark "bad-$bad"
    expect_fail "insmod nv_p2p_sim $bad is refused" insmod "$SIM_KO" "$bad"
    expect "refusal is logged ($bad)" log_has "bad-$bad" "nv_p2p_sim: invalid ${bad%%=*}="
done
expect "insmod nv_p2p_sim.ko" insmod "$SIM_KO"
expect "/dev/nv_p2p_sim is a character device" test -c /dev/nv_p2p_sim
expect "debugfs counters file exists" test -r /sys/kernel/debug/nv_p2p_sim/counters
expect_eq "default api" 535 "$(cat $PARAMS/api)"
expect_eq "default align_check" 1 "$(cat $PARAMS/align_check)"
expect_eq "default pt_version (0x00010002)" 65538 "$(cat $PARAMS/pt_version)"
expect_eq "default cpu_cacheable" 0 "$(cat $PARAMS/cpu_cacheable)"
expect_eq "default pin_cost_ns" 0 "$(cat $PARAMS/pin_cost_ns)"
expect_eq "pin_cost_ns is writable (0644)" 644 "$(stat -c %a $PARAMS/pin_cost_ns)"
expect_eq "api is read-only (0444)" 444 "$(stat -c %a $PARAMS/api)"
expect_eq "module license" GPL "$(modinfo -F license "$SIM_KO")"
expect_fail "nv_p2p_sim_530.ko cannot load beside it (same symbols)" insmod "$SIM530_KO"
mark load535
expect "insmod the test client" insmod "$TEST_KO"
expect_fail "rmmod nv_p2p_sim while a client uses it is refused" rmmod nv_p2p_sim
expect "the test client found the persistent API (symbol_get)" \
    log_has load535 "nv_p2p_sim_test: loaded: persistent API found, cap_persistent_pages absent"

py "stateless calls" <<'EOF'
m = t.misc()
eq("nvidia_p2p_free_page_table is a no-op returning 0", 0, m["free_page_table"])
eq("nvidia_p2p_free_dma_mapping is a no-op returning 0", 0, m["free_dma_mapping"])
eq("nvidia_p2p_init_mapping returns -ENOTSUPP (524)", -524, m["init_mapping"])
eq("nvidia_p2p_destroy_mapping returns -ENOTSUPP (524)", -524, m["destroy_mapping"])
eq("register_rsync_driver: first registration 0", 0, m["rsync_register"])
eq("register_rsync_driver: second registration -EBUSY", -errno.EBUSY, m["rsync_register_again"])
eq("register_rsync_driver: 0 again after unregister", 0, m["rsync_register_after"])
eq("get_rsync_registers returns -ENODEV", -errno.ENODEV, m["rsync_get_registers"])
eq("535 build exports get/put_pages_persistent", 1, m["persistent_api"])
eq("535 build does not export nvidia_p2p_cap_persistent_pages", -1, m["cap_persistent_pages"])
EOF

# ------------------------------------------------------------------ GPU memory
echo "== allocations and the user mapping"
py "allocations" <<'EOF'
import ctypes, mmap as _mmap
eq("ALLOC size 0 -> EINVAL", errno.EINVAL, err_of(sim.alloc_raw, 0))
eq("ALLOC size not a multiple of 64 KiB -> EINVAL", errno.EINVAL, err_of(sim.alloc_raw, K64 + 4096))
import nvsim
eq("ALLOC unknown flags -> EINVAL", errno.EINVAL,
   err_of(nvsim._ioctl, sim.fd, IOC_ALLOC, nvsim._ALLOC.pack(K64, 0x2, 0, 0)))
before = sim.counters()["allocations"]
a = sim.alloc(M4)
check("ALLOC id > 0", a.id > 0, a.id)
eq("mapping is 2 MiB aligned", 0, a.va % M2)
eq("allocations counter +1", before + 1, sim.counters()["allocations"])
eq("memory starts zeroed", bytes(M4), a.mm[:])
data = os.urandom(M4)
a.mm[:] = data
eq("CPU writes read back through the mapping", data, a.mm[:])
flags = ""
with open("/proc/self/smaps") as f:
    cur = False
    for line in f:
        if "-" in line.split()[0] and not line.startswith("VmFlags"):
            lo = int(line.split("-")[0], 16)
            cur = lo == a.va
        elif cur and line.startswith("VmFlags:"):
            flags = line.split()[1:]
for fl, what in (("io", "VM_IO"), ("pf", "VM_PFNMAP"), ("de", "VM_DONTEXPAND"), ("dd", "VM_DONTDUMP"), ("dc", "VM_DONTCOPY")):
    check("mapping has " + what, fl in flags, flags)
# GUP (here through /proc/self/mem, access_remote_vm) cannot reach VM_IO|VM_PFNMAP memory.
fd = os.open("/proc/self/mem", os.O_RDONLY)
try:
    os.pread(fd, 16, a.va)
    got = 0
except OSError as e:
    got = e.errno
os.close(fd)
check("get_user_pages cannot reach it (/proc/self/mem read fails)", got != 0, got)
# Mapping rules.
i2, off2 = sim.alloc_raw(K64)
eq("MAP_PRIVATE is refused", errno.EINVAL, err_of(_mmap.mmap, sim.fd, K64, flags=_mmap.MAP_PRIVATE, offset=off2))
eq("a length other than the allocation's is refused", errno.EINVAL, err_of(_mmap.mmap, sim.fd, 2 * K64, offset=off2))
eq("an unknown offset is refused", errno.EINVAL, err_of(_mmap.mmap, sim.fd, K64, offset=off2 + (1 << 40)))
m2 = _mmap.mmap(sim.fd, K64, offset=off2)
eq("an allocation maps only once", errno.EINVAL, err_of(_mmap.mmap, sim.fd, K64, offset=off2))
m2.close()
eq("FREE of a VA that is no allocation start -> EINVAL", errno.EINVAL, err_of(sim.free_va, a.va + K64))
a.free()
eq("FREE and munmap bring allocations back", before, sim.counters()["allocations"])
EOF

# ------------------------------------------------------------------ page tables and DMA mappings
echo "== get_pages, page tables, dma_map"
mark align
py "page tables" <<'EOF'
sim.reset()
a = sim.alloc(M4)
data = os.urandom(M4)
a.mm[:] = data
ret, s = t.get(a.va, M4)
eq("get_pages of a whole allocation -> 0", 0, ret)
i = t.info(s)
eq("table version 0x00010002 by default", 0x00010002, i["version"])
eq("page_size NVIDIA_P2P_PAGE_SIZE_64KB", 1, i["page_size"])
eq("entries = length / 64 KiB", M4 // K64, i["entries"])
eq("1.x table: flags not read (not there)", 0, i["flags_read"])
eq("gpu_uuid set, not all zeroes", 1, i["uuid_nonzero"])
check("physical_address is a BAR address (bit 62), not a DMA address", i["phys0"] & BAR, hex(i["phys0"]))
c = sim.counters()
eq("counters: 1 pin, 64 pages pinned", (1, 64), (c["pins"], c["pages_pinned"]))
ret, m0 = t.map(s)
eq("dma_map_pages -> 0", 0, ret)
i = t.info(s, m0)
eq("mapping version 0x00020003", 0x00020003, i["map_version"])
eq("mapping page_size_type 64KB", 1, i["map_page_size_type"])
eq("mapping entries = table entries", M4 // K64, i["map_entries"])
eq("mapping pci_dev is the peer", 1, i["map_peer_ok"])
eq("every dma_address differs from physical_address", 1, i["map_differs"])
eq("physical_address = dma_address | bit 62", i["phys0"], i["dma0"] | BAR)
eq("DMA reads see what the CPU wrote (dma_addresses are the pages' physical addresses)", data, t.rw(s, m0, 0, length=M4))
new = os.urandom(3 * K64 + 100)
t.rw(s, m0, K64 - 50, new)
eq("CPU reads see what DMA wrote, across page boundaries", new, a.mm[K64 - 50:K64 - 50 + len(new)])
ret, m1 = t.map(s)
eq("a second mapping of the same table -> 0", 0, ret)
eq("counters: 2 mappings", 2, sim.counters()["mappings"])
eq("dma_unmap_pages -> 0", 0, t.unmap(s, m0))
eq("dma_unmap_pages of the same mapping again -> 0 (no double free)", 0, t.unmap(s, m0))
eq("counters: 1 mapping left", 1, sim.counters()["mappings"])
eq("put_pages -> 0 (and frees the mapping still attached)", 0, t.put(s))
settled("after put_pages")
# Sub-ranges and range rules.
ret, s = t.get(a.va + K64, 2 * K64)
eq("get_pages of a 64 KiB aligned sub-range -> 0", (0, 2), (ret, t.info(s)["entries"]))
ret, m = t.map(s)
eq("sub-range DMA starts at its own offset", bytes(a.mm[K64:K64 + 32]), t.rw(s, m, 0, length=32))
eq("put_pages with a VA other than the pinned one -> -EINVAL", -errno.EINVAL, t.put(s, va=a.va))
eq("put_pages with its VA -> 0", 0, t.put(s))
eq("get_pages VA not 64 KiB aligned -> -EINVAL", -errno.EINVAL, t.get(a.va + 4096, K64)[0])
eq("get_pages length not 64 KiB aligned -> -EINVAL", -errno.EINVAL, t.get(a.va, 4096)[0])
eq("get_pages past the end of the allocation -> -EINVAL", -errno.EINVAL, t.get(a.va, M4 + K64)[0])
import mmap as _mmap
anon = _mmap.mmap(-1, M2)
import ctypes
anon_va = ctypes.addressof(ctypes.c_char.from_buffer(anon))
eq("get_pages on host memory (no allocation) -> -EINVAL", -errno.EINVAL, t.get(anon_va & ~(K64 - 1), K64)[0])
eq("get_pages length 0 -> -EINVAL", -errno.EINVAL, t.get(a.va, 0)[0])
eq("get_pages with a NULL free_callback (535) -> -EINVAL", -errno.EINVAL, t.get(a.va, K64, mode=GET_NULL_CB)[0])
eq("put_pages(NULL) -> 0", 0, t.put(0, mode=PUT_NULL))
settled("after the refused calls")
t.reset()
a.free()
EOF
expect "misaligned get_pages logs the NVRM line" log_has align "NVRM: Invalid argument in nv_p2p_get_pages.*not aligned"

py "layout" <<'EOF'
for frag, size in ((False, M4), (False, 2 * M4), (True, M4)):
    a = sim.alloc(size, fragmented=frag)
    ret, s = t.get(a.va, size)
    ret2, m = t.map(s)
    i = t.info(s, m)
    name = "fragmented" if frag else "contiguous"
    if frag:
        eq("%s %d MiB: no two consecutive 64 KiB pages are adjacent" % (name, size >> 20), i["map_entries"] - 1, i["map_breaks"])
    else:
        check("%s %d MiB: 4 MiB chunks (at most one break per 4 MiB)" % (name, size >> 20), i["map_breaks"] <= size // M4, i["map_breaks"])
    data = os.urandom(size)
    a.mm[:] = data
    eq("%s: DMA view equals CPU view byte for byte" % name, data, t.rw(s, m, 0, length=size))
    t.put(s)
    a.free()
settled("after the layout checks")
EOF

echo "== persistent pins"
py "persistent" <<'EOF'
b0 = debugfs_counters()["backing_bytes"]
a = sim.alloc(M4)
data = os.urandom(M4)
a.mm[:] = data
ret, s = t.get(a.va, M4, mode=GET_PERSISTENT)
eq("get_pages_persistent -> 0", 0, ret)
c = sim.counters()
eq("counters: 1 persistent pin, no callback pin", (1, 0), (c["persistent_pins"], c["pins"]))
eq("get_pages_persistent unknown flag -> -EINVAL", -errno.EINVAL, t.get(a.va, K64, mode=GET_PERSISTENT, flags=2)[0])
ret, m = t.map(s)
eq("dma_map of a persistent table -> 0", 0, ret)
eq("put_pages of a persistent table -> -EINVAL", -errno.EINVAL, t.put(s))
cb0 = sim.counters()["free_callbacks"]
sim.free_va(a.va)
c = sim.counters()
eq("FREE does not revoke a persistent pin (no callback)", cb0, c["free_callbacks"])
eq("FREE unregisters the allocation", 0, c["allocations"])
eq("persistent pin still outstanding after FREE", 1, c["persistent_pins"])
eq("memory kept while the persistent pin lives", b0 + M4, debugfs_counters()["backing_bytes"])
eq("DMA still reads the data after FREE", data, t.rw(s, m, 0, length=M4))
eq("get_pages on the freed VA -> -EINVAL", -errno.EINVAL, t.get(a.va, K64)[0])
eq("put_pages_persistent flags != 0 -> -EINVAL", -errno.EINVAL, t.put(s, mode=PUT_PERSISTENT, flags=1))
eq("put_pages_persistent -> 0", 0, t.put(s, mode=PUT_PERSISTENT))
eq("memory released on the last put_pages_persistent", b0, debugfs_counters()["backing_bytes"])
c0 = sim.counters()["stale_table_uses"]
eq("put_pages_persistent of a table already put -> -EINVAL", -errno.EINVAL, t.put(s, mode=PUT_PERSISTENT))
eq("... counted as a stale table use", c0 + 1, sim.counters()["stale_table_uses"])
a.unmap()
a = sim.alloc(M4)
ret, s = t.get(a.va, M4, mode=GET_PERSISTENT, flags=FORCE_BAR1)
eq("get_pages_persistent FORCE_BAR1_MAPPING -> 0", 0, ret)
eq("dma_map of a FORCE_BAR1 table -> -ENOTSUPP (524)", -524, t.map(s)[0])
eq("put_pages_persistent of it -> 0", 0, t.put(s, mode=PUT_PERSISTENT))
a.free()
settled("after the persistent checks")
eq("no backing memory left", b0, debugfs_counters()["backing_bytes"])
t.reset()
EOF

# ------------------------------------------------------------------ free callbacks
echo "== free callbacks (cudaFree, munmap, exit)"
mark callbacks
py "callbacks" <<'EOF'
sim.reset()
a = sim.alloc(M4)
r1, s1 = t.get(a.va, M4)
r2, s2 = t.get(a.va, M2)
t.map(s1)
t.map(s1)
c = sim.counters()
eq("two pins, two mappings", (2, 2), (c["pins"], c["mappings"]))
sim.free_va(a.va)
c = sim.counters()
eq("FREE fires each pin's free callback once", (1, 1), (t.info(s1)["cb_runs"], t.info(s2)["cb_runs"]))
eq("free_callbacks counter 2", 2, c["free_callbacks"])
eq("tables and mappings freed after the callbacks", (0, 0, 0), (c["pins"], c["mappings"], c["pages_pinned"]))
eq("allocation unregistered", 0, c["allocations"])
# RM finds a pin by address and table: a put_pages that lost the race to the callback is
# answered 0 even when the freed table's memory already holds a new pin (kmalloc reuse).
b = sim.alloc(M2)
r3, s3 = t.get(b.va, M2)
eq("a new pin after the callbacks", (0, 1), (r3, sim.counters()["pins"]))
eq("put_pages after the callback -> 0 (nothing freed twice)", 0, t.put(s2))
eq("... not a stale use", 0, sim.counters()["stale_table_uses"])
eq("... counted as not found", 1, sim.counters()["put_pages_not_found"])
eq("... the new pin (maybe at the freed table's address) untouched", 1, sim.counters()["pins"])
eq("put_pages of the new pin -> 0", 0, t.put(s3))
sim.free_va(b.va)
eq("dma_unmap after the callback -> 0", 0, t.unmap(s1, 0))
eq("... counted as a stale table use", 1, sim.counters()["stale_table_uses"])
eq("dma_map after the callback -> -EINVAL", -errno.EINVAL, t.map(s1)[0])
eq("... counted as a stale table use", 2, sim.counters()["stale_table_uses"])
eq("get_pages on the freed VA -> -EINVAL", -errno.EINVAL, t.get(a.va, K64)[0])
a.unmap()
# The zapped mapping faults (in a child: it dies of SIGBUS).
pid = os.fork()
if pid == 0:
    s = NvP2pSim()
    b = s.alloc(K64)
    b.mm[0] = 1
    s.free_va(b.va)
    b.mm[0]
    os._exit(0)
_, st = os.waitpid(pid, 0)
check("touching freed memory faults (SIGBUS)", os.WIFSIGNALED(st) and os.WTERMSIG(st) == signal.SIGBUS, st)
# Forbidden calls from inside the callback fail -EIO; dma_unmap is allowed.
sim.reset()
a = sim.alloc(M4)
slots = {}
for act in (CB_GET_PAGES, CB_PUT_PAGES, CB_DMA_MAP, CB_GET_PERSISTENT, CB_DMA_UNMAP):
    ret, s = t.get(a.va, K64, cb_action=act)
    slots[act] = s
t.map(slots[CB_DMA_UNMAP])
t.map(slots[CB_DMA_UNMAP])
sim.free_va(a.va)
for act, name in ((CB_GET_PAGES, "get_pages"), (CB_PUT_PAGES, "put_pages"), (CB_DMA_MAP, "dma_map_pages"), (CB_GET_PERSISTENT, "get_pages_persistent")):
    eq("%s from inside the free callback -> -EIO" % name, -errno.EIO, t.info(slots[act])["cb_ret"])
c = sim.counters()
eq("calls_in_callback counts them", 4, c["calls_in_callback"])
eq("dma_unmap (+ free_* no-ops) from inside the callback -> 0", 0, t.info(slots[CB_DMA_UNMAP])["cb_ret"])
eq("... both mappings unmapped by the callback", (2, 0), (c["calls_dma_unmap"], c["failures_dma_unmap"]))
settled("after the callbacks")
a.unmap()
t.reset()
# munmap is a cudaFree.
sim.reset()
a = sim.alloc(M4)
ret, s = t.get(a.va, M4)
t.map(s)
a.unmap()
c = sim.counters()
eq("munmap fires the free callback", (1, 1), (t.info(s)["cb_runs"], c["free_callbacks"]))
eq("munmap unregisters the allocation", 0, c["allocations"])
settled("after munmap")
t.reset()
# Process exit is a cudaFree; so is close of a never-mapped allocation.
rfd, wfd = os.pipe()
pid = os.fork()
if pid == 0:
    s = NvP2pSim()
    b = s.alloc(M4)
    s.alloc_raw(K64)
    ret, slot = t.get(b.va, M4)
    t.map(slot)
    os.write(wfd, struct.pack("=ii", ret, slot))
    os._exit(0)
_, st = os.waitpid(pid, 0)
ret, slot = struct.unpack("=ii", os.read(rfd, 8))
eq("child pinned its memory", 0, ret)
c = sim.counters()
eq("process exit fires the free callback", 1, t.info(slot)["cb_runs"])
eq("process exit frees all its allocations", 0, c["allocations"])
settled("after process exit")
t.reset()
# A forked child sharing the file can FREE the parent's allocation.
a = sim.alloc(M4)
ret, s = t.get(a.va, M4)
pid = os.fork()
if pid == 0:
    sim.free_va(a.va)
    os._exit(0)
os.waitpid(pid, 0)
eq("FREE from a forked child fires the callback", 1, t.info(s)["cb_runs"])
eq("... and the parent's VA is gone", -errno.EINVAL, t.get(a.va, K64)[0])
settled("after the child's FREE")
a.unmap()
t.reset()
# RM looks pins up among the calling process's objects: a forked child's put_pages of the
# parent's pin finds nothing, answers 0 and frees nothing; the callback still comes.
sim.reset()
a = sim.alloc(M4)
ret, s = t.get(a.va, M4)
pid = os.fork()
if pid == 0:
    os._exit(0 if t.put(s) == 0 else 1)
_, st = os.waitpid(pid, 0)
eq("put_pages from another process -> 0", 0, os.waitstatus_to_exitcode(st))
c = sim.counters()
eq("... nothing freed, counted as another process's", (1, 1, 0),
   (c["pins"], c["put_pages_other_process"], c["put_pages_not_found"]))
sim.free_va(a.va)
eq("... the pin's free callback still fires at the FREE", 1, t.info(s)["cb_runs"])
settled("after the FREE")
a.unmap()
t.reset()
EOF
expect "calls from inside a callback are logged" log_has callbacks "called with the RM API lock held by this thread"

# ------------------------------------------------------------------ fault injection
echo "== fault injection"
py "faults" <<'EOF'
sim.reset()
a = sim.alloc(M4)
def pinned():
    ret, s = t.get(a.va, K64)
    assert ret == 0, ret
    return s
cases = [
    ("get_pages", errno.ENOMEM, lambda: t.get(a.va, K64)[0]),
    ("get_pages_persistent", errno.EFAULT, lambda: t.get(a.va, K64, mode=GET_PERSISTENT)[0]),
    ("dma_map", errno.EIO, lambda: t.map(pinned())[0]),
]
for fn, err, call in cases:
    b = sim.counters()
    sim.fault(fn, 1, err)
    eq("fault %s nth=1 -> -%s" % (fn, errno.errorcode[err]), -err, call())
    c = sim.counters()
    eq("... counted in calls_%s and failures_%s" % (fn, fn), (1, 1), delta(b, c, "calls_" + fn, "failures_" + fn))
    eq("next %s call succeeds" % fn, 0, call())
t.reset()
# nth = 2: the second call fails.
sim.fault("get_pages", 2, errno.EAGAIN)
eq("fault nth=2: first call succeeds", 0, t.get(a.va, K64)[0])
eq("fault nth=2: second call fails", -errno.EAGAIN, t.get(a.va, K64)[0])
t.reset()
# put_pages / put_pages_persistent / dma_unmap: the object stays live after an injected failure.
s = pinned()
sim.fault("put_pages", 1, errno.EBUSY)
eq("fault put_pages -> -EBUSY", -errno.EBUSY, t.put(s))
eq("... the pin is still live", 1, sim.counters()["pins"])
eq("put_pages again -> 0", 0, t.put(s))
ret, s = t.get(a.va, K64, mode=GET_PERSISTENT)
sim.fault("put_pages_persistent", 1, errno.ENODEV)
eq("fault put_pages_persistent -> -ENODEV", -errno.ENODEV, t.put(s, mode=PUT_PERSISTENT))
eq("put_pages_persistent again -> 0", 0, t.put(s, mode=PUT_PERSISTENT))
s = pinned()
ret, m = t.map(s)
sim.fault("dma_unmap", 1, errno.EINVAL)
eq("fault dma_unmap -> -EINVAL", -errno.EINVAL, t.unmap(s, m))
eq("... the mapping is still live", 1, sim.counters()["mappings"])
eq("dma_unmap again -> 0", 0, t.unmap(s, m))
t.put(s)
c = sim.counters()
for fn in FN_NAMES:
    check("failures_%s counted" % fn, c["failures_" + fn] >= 1, c["failures_" + fn])
# RESET clears pending faults and the call counters.
sim.fault("get_pages", 1, errno.EIO)
sim.reset()
c = sim.counters()
eq("RESET zeroes call and failure counters", [0] * 12, [c["calls_" + f] for f in FN_NAMES] + [c["failures_" + f] for f in FN_NAMES])
eq("RESET cancels pending faults", 0, t.get(a.va, K64)[0])
eq("FAULT with err 0 -> EINVAL", errno.EINVAL, err_of(sim.fault, "get_pages", 1, 0))
eq("FAULT with an unknown fn -> EINVAL", errno.EINVAL, err_of(sim.fault, 6, 1, 5))
t.reset()
a.free()
settled("after fault injection")
EOF

# ------------------------------------------------------------------ revocation points
echo "== REVOKE_AT"
py "revoke" <<'EOF'
sim.reset()
a = sim.alloc(M4)
eq("REVOKE_AT an unknown VA -> EINVAL", errno.EINVAL, err_of(sim.revoke_at, a.va + M4, "in_get_pages"))
eq("REVOKE_AT an unknown point -> EINVAL", errno.EINVAL, err_of(sim.revoke_at, a.va, 9))
# In get_pages: the callback runs before get_pages returns, with the RM lock held by the caller.
sim.revoke_at(a.va, "in_get_pages")
ret, s = t.get(a.va, M4, cb_action=CB_PUT_PAGES)
i = t.info(s)
eq("IN_GET_PAGES: get_pages still returns 0", 0, ret)
eq("IN_GET_PAGES: the callback already ran on return", 1, i["cb_runs"])
eq("IN_GET_PAGES: a P2P call from that callback -> -EIO (RM lock held by get_pages' caller)", -errno.EIO, i["cb_ret"])
eq("IN_GET_PAGES: the table is already freed", 0, sim.counters()["pins"])
eq("IN_GET_PAGES: put_pages afterwards -> 0", 0, t.put(s))
eq("the point fires once: next get_pages is normal", (0, 0), (lambda r: (r[0], t.info(r[1])["cb_runs"]))(t.get(a.va, K64)))
t.reset()
# In dma_map: after the table was read, before the mapping is linked, every callback pin of
# the allocation is revoked. Mapping a persistent pin there is safe (no callback; NVIDIA keeps
# it). Mapping a callback pin there is nvidia.ko's use-after-free (the pin is freed under the
# call, which then writes into it): that case fails a VM by design and runs in
# tests/reference/expect-breaks.sh (revocation in_dma_map, for both clients).
r, s1 = t.get(a.va, M2, mode=GET_PERSISTENT)
r, s2 = t.get(a.va + K64, K64)
r, s3 = t.get(a.va + M2, K64)
sim.revoke_at(a.va, "in_dma_map")
b = sim.counters()
ret, m = t.map(s1)
eq("IN_DMA_MAP on a persistent pin: dma_map_pages -> 0", 0, ret)
eq("IN_DMA_MAP: every callback pin of the allocation revoked, the persistent one not", (1, 1, 0),
   (t.info(s2)["cb_runs"], t.info(s3)["cb_runs"], t.info(s1)["cb_runs"]))
c = sim.counters()
eq("IN_DMA_MAP: free_callbacks +2, no stale use, the new mapping linked", (2, 0, 1),
   delta(b, c, "free_callbacks", "stale_table_uses", "mappings"))
eq("IN_DMA_MAP: the mapping reaches the persistent pin's pages", bytes(a.mm[:64]), t.rw(s1, m, 0, length=64))
eq("IN_DMA_MAP: put_pages_persistent frees it with its mapping -> 0", 0, t.put(s1, mode=PUT_PERSISTENT))
eq("IN_DMA_MAP: the point fires once: next dma_map of a callback pin is normal", 0, t.map(t.get(a.va, K64)[1])[0])
t.reset()
# In put_pages: the callback wins, put_pages returns 0 and frees nothing twice.
r, s = t.get(a.va, K64)
t.map(s)
sim.revoke_at(a.va, "in_put_pages")
b = sim.counters()
eq("IN_PUT_PAGES: put_pages -> 0", 0, t.put(s))
eq("IN_PUT_PAGES: the callback ran", 1, t.info(s)["cb_runs"])
c = sim.counters()
eq("IN_PUT_PAGES: free_callbacks +1, no stale use", (1, 0), delta(b, c, "free_callbacks", "stale_table_uses"))
settled("after the revocation points")
sim.revoke_at(a.va, "in_get_pages")
sim.reset()
eq("RESET clears revocation points", 0, t.info(t.get(a.va, K64)[1])["cb_runs"])
t.reset()
a.free()
EOF

# ------------------------------------------------------------------ stall points
echo "== STALL_AT"
py "stall" <<'EOF'
import threading
sim.reset()
a = sim.alloc(M4)
b = sim.alloc(M2)
eq("STALL_AT an unknown VA -> EINVAL", errno.EINVAL, err_of(sim.stall_at, a.va + M4, "in_get_pages"))
eq("STALL_AT an unknown point -> EINVAL", errno.EINVAL, err_of(sim.stall_at, a.va, 9))
eq("STALL_RESUME with nothing stalled -> ESRCH", errno.ESRCH, err_of(sim.stall_resume))
t0 = time.monotonic()
eq("STALL_WAIT with nothing stalled -> ETIMEDOUT", errno.ETIMEDOUT, err_of(sim.stall_wait))
check("... after 10 s", 9.5 <= time.monotonic() - t0 < 15, "%.1f s" % (time.monotonic() - t0))
def stalled_get(*args, **kw):
    """get_pages* in a thread; returns (thread, result dict) once STALL_WAIT said it stalled."""
    res = {}
    th = threading.Thread(target=lambda: res.update(r=t.get(*args, **kw)))
    th.start()
    res["wait"] = err_of(sim.stall_wait)
    return th, res
def free_in_thread(va):
    """cudaFree of VA from another thread: True when it completed within 5 s."""
    done = threading.Event()
    th = threading.Thread(target=lambda: (sim.free_va(va), done.set()))
    th.start()
    ok = done.wait(5)
    th.join()
    return ok
# A callback pin on b, made before the stall: its cudaFree needs the RM lock and sim_lock.
r, sb = t.get(b.va, K64)
sim.stall_at(a.va, "in_get_pages")
eq("a second STALL_AT while one is armed -> EBUSY", errno.EBUSY, err_of(sim.stall_at, b.va, "in_get_pages"))
th, res = stalled_get(a.va, M4, opts=OPT_NO_READ)
eq("STALL_WAIT returns 0 once get_pages stalls", 0, res["wait"])
check("the stalled get_pages has not returned", th.is_alive())
c = sim.counters()
eq("the stalled pin is registered already", (2, 1 + M4 // K64), (c["pins"], c["pages_pinned"]))
eq("STALL_AT while a call is stalled -> EBUSY", errno.EBUSY, err_of(sim.stall_at, b.va, "in_get_pages"))
check("the stall holds neither the RM lock nor sim_lock: a cudaFree of another pinned buffer completes",
      free_in_thread(b.va))
check("a cudaFree of the stalled call's own buffer completes", free_in_thread(a.va))
check("... the get_pages is still stalled", th.is_alive())
c = sim.counters()
eq("... both callbacks ran, nothing pinned", (2, 0), (c["free_callbacks"], c["pins"]))
eq("STALL_RESUME -> 0", 0, err_of(sim.stall_resume))
th.join(5)
check("the resumed get_pages returns", not th.is_alive())
eq("... with 0 (its table already freed by its callback)", 0, res.get("r", (None,))[0])
eq("... its callback ran once", 1, t.info(res["r"][1])["cb_runs"])
eq("STALL_RESUME after it went on -> ESRCH", errno.ESRCH, err_of(sim.stall_resume))
b.unmap()
a.unmap()
t.reset()
# get_pages_persistent stalls the same way; calls on other allocations do not stall.
a = sim.alloc(M4)
b = sim.alloc(M2)
sim.stall_at(a.va, "in_get_pages")
t0 = time.monotonic()
eq("get_pages on another allocation -> 0", 0, t.get(b.va, K64)[0])
check("... without stalling", time.monotonic() - t0 < 5, time.monotonic() - t0)
th, res = stalled_get(a.va, M2, mode=GET_PERSISTENT, opts=OPT_NO_READ)
eq("STALL_WAIT returns 0 once get_pages_persistent stalls", 0, res["wait"])
eq("... its persistent pin registered", 1, sim.counters()["persistent_pins"])
eq("STALL_RESUME -> 0", 0, err_of(sim.stall_resume))
th.join(5)
eq("the resumed get_pages_persistent returns 0", (False, 0), (th.is_alive(), res.get("r", (None,))[0]))
eq("... the pin works: dma_map -> 0", 0, t.map(res["r"][1])[0])
t.reset()
# The point fires once; RESET and a cudaFree disarm an armed stall (a stall would take 60 s).
t0 = time.monotonic()
eq("the point fired once: the next get_pages -> 0", 0, t.get(a.va, K64)[0])
sim.stall_at(a.va, "in_get_pages")
sim.reset()
eq("RESET disarms it: get_pages -> 0", 0, t.get(a.va, K64)[0])
sim.stall_at(b.va, "in_get_pages")
t.reset()
b.free()
eq("a cudaFree of the armed allocation disarms it: STALL_AT elsewhere -> 0", 0,
   err_of(sim.stall_at, a.va, "in_get_pages"))
sim.reset()
check("... and no call stalled meanwhile", time.monotonic() - t0 < 10, "%.1f s" % (time.monotonic() - t0))
t.reset()
a.free()
settled("after the stall checks")
EOF

# ------------------------------------------------------------------ races
echo "== cudaFree and munmap racing get/dma_map/put (lockdep, hung tasks, leaks)"
py "races" <<'EOF'
import threading
sim.reset()
bad = []
pinned = [0]
# Callback pins are pinned and put, persistent pins also DMA-mapped: a cudaFree during the
# dma_map of a callback pin is nvidia.ko's use-after-free (see REVOKE_AT above), which the
# stand-in reproduces faithfully; a run here must stay clean.
def worker(a, stop, persistent):
    mode, put = (GET_PERSISTENT, PUT_PERSISTENT) if persistent else (GET_CB, PUT_PAGES)
    while not stop.is_set():
        ret, s = t.get(a.va, M2, mode=mode, opts=OPT_NO_READ)
        if ret == -errno.EINVAL:
            continue                 # already freed
        if ret != 0:
            bad.append(("get_pages", ret))
            continue
        pinned[0] += 1
        if persistent:
            mret = t.map(s)[0]
            if mret != 0:
                bad.append(("dma_map", mret))
        pret = t.put(s, mode=put)
        if pret != 0:
            bad.append(("put_pages", pret))
for r in range(16):
    a = sim.alloc(M2, fragmented=bool(r & 4))
    stop = threading.Event()
    th = [threading.Thread(target=worker, args=(a, stop, k == 1)) for k in range(2)]
    for x in th:
        x.start()
    time.sleep(0.02 * (r % 4))
    if r % 2:
        sim.free_va(a.va)            # cudaFree in this thread
    a.unmap()                        # or munmap: freed from the work item
    stop.set()
    for x in th:
        x.join()
eq("no unexpected return value while freeing under the workers", [], bad[:5])
check("the workers pinned while racing", pinned[0] > 0, pinned[0])
c = sim.counters()
print("%d pins taken, %d revoked by the frees" % (pinned[0], c["free_callbacks"]))
eq("no stale table use", 0, c["stale_table_uses"])
eq("every allocation freed", 0, c["allocations"])
settled("after the races")
t.reset()
EOF

# ------------------------------------------------------------------ runtime parameters
echo "== align_check=0 and pin_cost_ns"
echo 0 > $PARAMS/align_check
py "align_check=0" <<'EOF'
a = sim.alloc(M4)
ret, s = t.get(a.va + 4096, K64)
eq("align_check=0: unaligned get_pages -> 0", 0, ret)
eq("align_check=0: the range is rounded out to 64 KiB pages", 2, t.info(s)["entries"])
eq("align_check=0: put_pages with the same VA -> 0", 0, t.put(s))
a.free()
settled("after align_check=0")
EOF
echo 1 > $PARAMS/align_check
echo 200000 > $PARAMS/pin_cost_ns
py "pin_cost_ns" <<'EOF'
a = sim.alloc(M4)
t0 = time.monotonic()
ret, s = t.get(a.va, M4)
dt = time.monotonic() - t0
check("pin_cost_ns=200000: pinning 64 pages takes >= 12.8 ms", ret == 0 and dt >= 0.0128, "%.4f s" % dt)
t.put(s)
a.free()
EOF
echo 0 > $PARAMS/pin_cost_ns

echo "== unload with state, counters settle"
py "open file blocks unload" <<'EOF'
import subprocess
r = subprocess.run(["rmmod", "nv_p2p_sim_test"], capture_output=True)
check("rmmod of a client with a file open is refused", r.returncode != 0, r.returncode)
a = sim.alloc(M4)
t.get(a.va, M4)
t.get(a.va, K64, mode=GET_PERSISTENT)
sim.stall_at(a.va, "in_get_pages")  # left armed: the unload below must not wait for it
EOF
expect "rmmod the test client holding pins (it puts them)" rmmod nv_p2p_sim_test
py "settled" <<'EOF'
c = sim.counters()
eq("everything put by the client's teardown", (0, 0, 0), (c["pins"], c["persistent_pins"], c["mappings"]))
eq("process exit freed its allocation", 0, c["allocations"])
eq("no backing memory left", 0, debugfs_counters()["backing_bytes"])
EOF
expect "debugfs counters text has every counter" \
    test "$(grep -cE '^(calls|failures)_[a-z_]+ [0-9]+$|^(free_callbacks|calls_in_callback|stale_table_uses|pins|persistent_pins|mappings|allocations|pages_pinned|put_pages_not_found|backing_bytes) -?[0-9]+$' /sys/kernel/debug/nv_p2p_sim/counters)" = 22
expect "rmmod nv_p2p_sim" rmmod nv_p2p_sim
expect_fail "/dev/nv_p2p_sim is gone" test -e /dev/nv_p2p_sim

# ------------------------------------------------------------------ 2.x page tables
echo "== pt_version=0x00020000"
expect "insmod pt_version=0x00020000 cpu_cacheable=1" insmod "$SIM_KO" pt_version=0x00020000 cpu_cacheable=1
expect "insmod the test client" insmod "$TEST_KO"
py "2.x tables" <<'EOF'
a = sim.alloc(M4)
ret, s = t.get(a.va, M4)
i = t.info(s)
eq("2.x: version 0x00020000", 0x00020000, i["version"])
eq("2.x: flags present and CPU_CACHEABLE set", (1, 1), (i["flags_read"], i["flags"]))
open("/sys/module/nv_p2p_sim/parameters/cpu_cacheable", "w").write("0")
ret, s2 = t.get(a.va, K64)
eq("2.x: cpu_cacheable=0 -> flags 0", (1, 0), (t.info(s2)["flags_read"], t.info(s2)["flags"]))
ret, m = t.map(s)
eq("2.x: dma_map works the same", 0, ret)
t.reset()
a.free()
settled("after 2.x")
EOF
unload_all

# ------------------------------------------------------------------ the <= 530 API
echo "== api=530 on the 535 build"
expect "insmod nv_p2p_sim api=530" insmod "$SIM_KO" api=530
expect "insmod the test client" insmod "$TEST_KO"
py "api=530" <<'EOF'
a = sim.alloc(M4)
eq("api=530: get_pages_persistent -> -EOPNOTSUPP", -errno.EOPNOTSUPP, t.get(a.va, K64, mode=GET_PERSISTENT)[0])
ret, s = t.get(a.va, M4, mode=GET_NULL_CB)
eq("api=530: get_pages with a NULL callback -> 0 (persistent pin)", 0, ret)
eq("... counted as a persistent pin", (1, 0), (sim.counters()["persistent_pins"], sim.counters()["pins"]))
ret, s2 = t.get(a.va, K64)
sim.free_va(a.va)
eq("api=530: FREE revokes the callback pin only", (1, 0, 1), (t.info(s2)["cb_runs"], sim.counters()["pins"], sim.counters()["persistent_pins"]))
ret, m = t.map(s)
eq("api=530: the NULL-callback pin still maps after FREE", 0, ret)
eq("api=530: put_pages releases it -> 0", 0, t.put(s))
a.unmap()
settled("after api=530")
eq("no backing memory left", 0, debugfs_counters()["backing_bytes"])
t.reset()
EOF
unload_all

echo "== nv_p2p_sim_530.ko"
expect_fail "nv_p2p_sim_530 refuses api=535" insmod "$SIM530_KO" api=535
expect "insmod nv_p2p_sim_530.ko" insmod "$SIM530_KO"
expect "/dev/nv_p2p_sim from the 530 build" test -c /dev/nv_p2p_sim
mark load530
expect "insmod the test client against it" insmod "$TEST_KO"
expect "the client finds cap_persistent_pages and no persistent calls" \
    log_has load530 "nv_p2p_sim_test: loaded: persistent API absent, cap_persistent_pages found"
py "530 build" <<'EOF'
m = t.misc()
eq("530 build: get/put_pages_persistent not exported", 0, m["persistent_api"])
eq("530 build: nvidia_p2p_cap_persistent_pages = 1", 1, m["cap_persistent_pages"])
a = sim.alloc(M4)
ret, s = t.get(a.va, M4, mode=GET_NULL_CB)
eq("530 build: NULL callback pins persistently", (0, 1), (ret, sim.counters()["persistent_pins"]))
ret, s2 = t.get(a.va, M4)
t.map(s2)
a.free()
eq("530 build: cudaFree revokes the callback pin", 1, t.info(s2)["cb_runs"])
eq("530 build: put_pages of the persistent pin -> 0", 0, t.put(s))
settled("530 build")
t.reset()
# 515-530 put_pages reads the table (gpu_uuid, bPersistent) itself: after its callback won, it
# reads freed memory. Still answered 0 (RM does not find it), but counted as a stale use.
sim.reset()
a = sim.alloc(M4)
ret, s = t.get(a.va, M2)
sim.free_va(a.va)
eq("530 build: put_pages after the callback -> 0", 0, t.put(s))
c = sim.counters()
eq("... not found, and a stale use (it read the freed table)", (1, 1), (c["put_pages_not_found"], c["stale_table_uses"]))
a.unmap()
sim.reset()
a = sim.alloc(M4)
ret, s = t.get(a.va, M2)
t.map(s)
sim.revoke_at(a.va, "in_put_pages")
eq("530 build: IN_PUT_PAGES: put_pages -> 0", 0, t.put(s))
c = sim.counters()
eq("530 build: IN_PUT_PAGES: the callback ran, the freed table was read (stale use +1)", (1, 1, 1),
   (t.info(s)["cb_runs"], c["free_callbacks"], c["stale_table_uses"]))
ret, s = t.get(a.va, M2)
eq("530 build: put_pages of a live table -> 0, no stale use", (0, 1), (t.put(s), sim.counters()["stale_table_uses"]))
a.free()
settled("530 build put_pages")
sim.reset()
t.reset()
EOF
unload_all
expect_fail "nothing left loaded" test -e /sys/module/nv_p2p_sim_530
finish
