//! `nvpeer selftest`: proves that a GPU registration goes through our module. Allocates GPU
//! memory (CUDA, or the nv_p2p_sim stand-in's "GPU memory" in the test VM), checks it (pointer
//! attributes, dma-buf export, staged copies), snapshots the module's counters, registers the
//! buffer with the RDMA device, moves a verified pattern, deregisters, frees, and checks that
//! exactly one registration with the expected pages and bytes, and its release, went through
//! our client.
//!
//! Registration: `ibv_reg_mr` on the RDMA device, or, when /dev/peer_core_sim exists (the test
//! VM: upstream ib_core has no peer-memory hook), the stand-in core's REG_MR test interface,
//! which runs the same peer-memory client calls MOFED's core would.

use std::ffi::c_int;
use std::sync::Arc;

use serde::Serialize;

use crate::bench::cuda::Cuda;
use crate::bench::cuda_alloc::{CudaAlloc, RegistrationPath};
use crate::bench::mem::{first_mismatch, pattern, Buffer, MemKind, RegPath};
use crate::bench::{self, BenchError, BenchOpts, Mode, Op};
use crate::host::Host;
use crate::stats;

pub const SCHEMA: &str = "nvpeer.selftest/1";
const PEER_CORE_SIM: &str = "/dev/peer_core_sim";
const GPU_PAGE: u64 = 64 << 10;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Ok,
    Fail,
    Skip,
}

#[derive(Clone, Debug, Serialize)]
pub struct Step {
    pub name: &'static str,
    pub status: Status,
    pub detail: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct SelftestReport {
    pub schema: &'static str,
    pub passed: bool,
    pub memory: String,
    pub registration: String,
    pub size: u64,
    pub steps: Vec<Step>,
}

#[derive(Clone, Debug)]
pub struct SelftestOpts {
    pub mem: Option<MemKind>,
    /// How CUDA memory is allocated.
    pub alloc: CudaAlloc,
    pub size: usize,
    pub device: Option<String>,
    pub gpu: i32,
    pub port: u8,
    pub gid_index: Option<i32>,
}

struct Run {
    steps: Vec<Step>,
}

impl Run {
    fn ok(&mut self, name: &'static str, detail: impl Into<String>) {
        self.steps.push(Step {
            name,
            status: Status::Ok,
            detail: detail.into(),
        });
    }
    fn fail(&mut self, name: &'static str, detail: impl Into<String>) {
        self.steps.push(Step {
            name,
            status: Status::Fail,
            detail: detail.into(),
        });
    }
    fn skip(&mut self, name: &'static str, detail: impl Into<String>) {
        self.steps.push(Step {
            name,
            status: Status::Skip,
            detail: detail.into(),
        });
    }
}

fn choose_mem(opts: &SelftestOpts) -> Result<MemKind, String> {
    if let Some(m) = opts.mem {
        return Ok(m);
    }
    if bench::cuda::available().is_ok() {
        return Ok(MemKind::Cuda);
    }
    if std::path::Path::new("/dev/nv_p2p_sim").exists() {
        return Ok(MemKind::Sim);
    }
    Err(format!(
        "no GPU memory to test: {}, and no nv_p2p_sim stand-in (/dev/nv_p2p_sim)",
        bench::cuda::available()
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
    ))
}

/// Runs the self-test; every step is recorded, later steps run where they still make sense.
pub fn run(host: &Host, opts: &SelftestOpts) -> SelftestReport {
    let mut r = Run { steps: Vec::new() };
    let size = opts.size.max(1).div_ceil(GPU_PAGE as usize) * GPU_PAGE as usize;
    let via_sim_core = std::path::Path::new(PEER_CORE_SIM).exists();
    let mut report = SelftestReport {
        schema: SCHEMA,
        passed: false,
        memory: String::new(),
        registration: String::new(),
        size: size as u64,
        steps: Vec::new(),
    };

    // ---------------------------------------------------------------- the module
    let before = match stats::read(host) {
        Ok(s) if s.module.is_some() => {
            r.ok(
                "module",
                format!(
                    "{} loaded (nvpeer), counters readable",
                    s.module.clone().unwrap_or_default()
                ),
            );
            Some(s)
        }
        Ok(_) => {
            r.fail(
                "module",
                "the nvpeer peer-memory module is not loaded (no /sys/module/nvidia_peermem/nvpeer): \
                 load it with `modprobe nvidia_peermem` (or insmod kmod/nvidia_peermem.ko)",
            );
            None
        }
        Err(e) => {
            r.fail("module", format!("cannot read the module's counters: {e}"));
            None
        }
    };

    // ---------------------------------------------------------------- GPU memory
    let mem = match choose_mem(opts) {
        Ok(m) => m,
        Err(e) => {
            r.fail("gpu_memory", e);
            report.steps = r.steps;
            return report;
        }
    };
    report.memory = mem.label().to_owned();
    if opts.alloc != CudaAlloc::Device && mem != MemKind::Cuda {
        r.fail(
            "allocate",
            format!(
                "--alloc {} is a CUDA allocation: it needs --mem cuda",
                opts.alloc.api()
            ),
        );
        report.steps = r.steps;
        return report;
    }
    let cuda = if mem == MemKind::Cuda {
        match Cuda::open(opts.gpu) {
            Ok(c) => {
                r.ok(
                    "cuda",
                    format!(
                        "GPU {}: {}, CUDA driver API {}, GPUDirect RDMA {}, dma-buf {}",
                        c.info.ordinal,
                        c.info.name,
                        bench::cuda::version_str(c.info.driver_version),
                        if c.info.gpudirect_rdma_supported {
                            "supported"
                        } else {
                            "NOT supported"
                        },
                        if c.info.dmabuf_supported {
                            "supported"
                        } else {
                            "not supported"
                        }
                    ),
                );
                Some(Arc::new(c))
            }
            Err(e) => {
                r.fail("cuda", e.to_string());
                report.steps = r.steps;
                return report;
            }
        }
    } else {
        None
    };
    let buf = match mem {
        MemKind::Cuda => cuda
            .as_ref()
            .ok_or_else(|| BenchError::Cuda("not initialised".to_owned()))
            .and_then(|c| Buffer::cuda(c.clone(), opts.alloc, size)),
        MemKind::Sim => Buffer::sim(size),
        MemKind::Host => Buffer::host(size),
    };
    let buf = match buf {
        Ok(b) => {
            report.memory = b.describe();
            r.ok(
                "allocate",
                format!(
                    "{} bytes of {} memory at {:#x}",
                    b.len,
                    b.describe(),
                    b.addr
                ),
            );
            b
        }
        Err(e) => {
            r.fail("allocate", e.to_string());
            report.steps = r.steps;
            return report;
        }
    };
    // The registration path the pointer takes, from the pointer and allocation-property
    // queries: only GPU memory through the peer-memory client is what this self-test proves.
    let mut path = RegistrationPath::PeerMemory;
    if let Some(c) = &cuda {
        match c.pointer_facts(buf.addr) {
            Ok(f) => {
                path = f.path();
                let attrs = format!(
                    "MEMORY_TYPE={}, IS_MANAGED={}, IS_GPU_DIRECT_RDMA_CAPABLE={}{}",
                    f.memory_type,
                    u8::from(f.is_managed),
                    f.gpudirect_rdma_capable
                        .map_or("unanswered".to_owned(), |v| u8::from(v).to_string()),
                    f.vmm_rdma_flag.map_or(String::new(), |v| format!(
                        ", VMM allocation gpuDirectRDMACapable={}",
                        u8::from(v)
                    ))
                );
                if path == RegistrationPath::PeerMemory {
                    r.ok("pointer_attributes", format!("{attrs}: {}", f.explain()));
                } else {
                    r.fail("pointer_attributes", format!("{attrs}: {}", f.explain()));
                }
            }
            Err(e) => r.fail("pointer_attributes", e.to_string()),
        }
        let dmabuf = if path == RegistrationPath::HostPages {
            Err(None)
        } else {
            c.dmabuf_fd(buf.addr, buf.len).map_err(Some)
        };
        match dmabuf {
            Ok(fd) => {
                r.ok(
                    "dmabuf_export",
                    format!(
                        "cuMemGetHandleForAddressRange gave dma-buf fd {fd} for {} bytes",
                        buf.len
                    ),
                );
                // SAFETY: the fd we were just given.
                unsafe { libc::close(fd as c_int) };
            }
            Err(Some(e)) => r.fail("dmabuf_export", e.to_string()),
            Err(None) => r.skip(
                "dmabuf_export",
                "dma-buf export is for device memory; this pointer is host pages",
            ),
        }
    } else {
        r.skip("pointer_attributes", "not CUDA memory");
        r.skip("dmabuf_export", "not CUDA memory");
    }
    // Staged copies: host -> GPU -> host, verified, and the copy time.
    let mut bounce = vec![0u8; size];
    match bench::copy_time_us(&buf, &mut bounce, size, 10) {
        Ok(us) => r.ok(
            "staged_copy",
            format!(
                "{} bytes host -> {} -> host verified; GPU -> host copy {:.1} us ({:.2} GB/s)",
                size,
                mem.label(),
                us,
                size as f64 / us / 1e3
            ),
        ),
        Err(e) => r.fail("staged_copy", e.to_string()),
    }

    // ---------------------------------------------------------------- registration
    let during;
    if path != RegistrationPath::PeerMemory {
        report.registration = buf.reg_label(RegPath::RegMr).to_owned();
        r.skip(
            "register",
            "not attempted: this pointer does not take the peer-memory path (pointer_attributes)",
        );
        during = None;
    } else if via_sim_core && mem == MemKind::Sim {
        report.registration =
            "peer_core_sim test interface (REG_MR ioctl: the MOFED core stand-in)".to_owned();
        during = sim_core_register(&mut r, host, &buf, size);
    } else {
        report.registration = RegPath::RegMr.label(mem).to_owned();
        during = verbs_register(&mut r, host, opts, mem, cuda.clone(), size);
    }
    drop(buf);
    r.ok("free", "GPU memory freed");

    // ---------------------------------------------------------------- the counters
    match (before, during, stats::read(host)) {
        _ if path != RegistrationPath::PeerMemory => {
            r.skip("counters", "no registration through our client to count")
        }
        (Some(b), Some(d), Ok(a)) => compare_counters(&mut r, &b, &d, &a, size as u64),
        (None, _, _) => r.fail("counters", "module not loaded: nothing to compare"),
        (_, None, _) => r.fail("counters", "no registration went through"),
        (_, _, Err(e)) => r.fail("counters", e.to_string()),
    }
    report.passed = r.steps.iter().all(|s| s.status != Status::Fail);
    report.steps = r.steps;
    report
}

fn delta(a: &stats::Stats, b: &stats::Stats, k: &str) -> i128 {
    i128::from(*a.counters.get(k).unwrap_or(&0)) - i128::from(*b.counters.get(k).unwrap_or(&0))
}

fn peer_delta(a: &stats::Stats, b: &stats::Stats, k: &str) -> Option<i128> {
    let get = |s: &stats::Stats| {
        s.memory_peers
            .as_ref()?
            .iter()
            .find(|p| p.name == "nv_mem")
            .and_then(|p| p.counters.get(k).copied())
    };
    Some(i128::from(get(a)?) - i128::from(get(b)?))
}

fn compare_counters(
    r: &mut Run,
    before: &stats::Stats,
    during: &stats::Stats,
    after: &stats::Stats,
    size: u64,
) {
    let pages = size / GPU_PAGE;
    let size_i = i128::from(size);
    // (counter, expected change while registered, expected change after the release)
    let expected: [(&str, i128, i128); 5] = [
        ("registrations", 1, 1),
        ("deregistrations", 0, 1),
        ("live_contexts", 1, 0),
        ("pinned_bytes", size_i, 0),
        ("pinned_pages", i128::from(pages), 0),
    ];
    let mut bad = Vec::new();
    for (key, while_registered, after_release) in expected {
        for (when, snapshot, exp) in [
            ("during", during, while_registered),
            ("after", after, after_release),
        ] {
            let got = delta(snapshot, before, key);
            if got != exp {
                bad.push(format!("{key} {when}: {got}, expected {exp}"));
            }
        }
    }
    if bad.is_empty() {
        r.ok(
            "module_counters",
            format!(
                "exactly one registration of {pages} GPU pages ({size} bytes) through our client, and its release"
            ),
        );
    } else {
        r.fail("module_counters", bad.join("; "));
    }
    match (
        peer_delta(during, before, "num_alloc_mrs"),
        peer_delta(during, before, "num_reg_bytes"),
        peer_delta(after, before, "num_dealloc_mrs"),
        peer_delta(after, before, "num_dereg_bytes"),
    ) {
        (Some(1), Some(rb), Some(1), Some(db)) if rb == i128::from(size) && db == rb => r.ok(
            "memory_peers",
            format!("nv_mem: num_alloc_mrs +1, num_reg_bytes +{rb}, num_dealloc_mrs +1, num_dereg_bytes +{db}"),
        ),
        (None, ..) => r.skip("memory_peers", "/sys/kernel/mm/memory_peers/nv_mem is absent"),
        (a, rb, d, db) => r.fail(
            "memory_peers",
            format!(
                "nv_mem: num_alloc_mrs {a:?}, num_reg_bytes {rb:?}, num_dealloc_mrs {d:?}, num_dereg_bytes {db:?}; expected +1, +{size}, +1, +{size}"
            ),
        ),
    }
}

// ---------------------------------------------------------------- peer_core_sim path

const fn ioc(dir: u64, ty: u8, nr: u64, size: u64) -> u64 {
    (dir << 30) | (size << 16) | ((ty as u64) << 8) | nr
}
const PCS_REG_MR: u64 = ioc(3, b'P', 1, 104);
const PCS_DEREG_MR: u64 = ioc(1, b'P', 2, 4);
const PCS_DMA: u64 = ioc(1, b'P', 3, 32);

#[repr(C)]
struct PcsReg {
    addr: u64,
    size: u64,
    access: u32,
    kind: u32,
    inject: u32,
    id: u32,
    peer: u32,
    pad: u32,
    client: [u8; 64],
}
const _: () = assert!(std::mem::size_of::<PcsReg>() == 104);

#[repr(C)]
struct PcsDma {
    id: u32,
    dir: u32,
    offset: u64,
    len: u64,
    buf: u64,
}

/// The stand-in NIC's DMA between MR `id` (from its start) and `data`: `dir` 0 writes `data`
/// into the MR, 1 reads the MR into `data`.
fn sim_dma(fd: libc::c_int, id: u32, dir: u32, data: &mut [u8]) -> Result<(), std::io::Error> {
    let mut dma = PcsDma {
        id,
        dir,
        offset: 0,
        len: data.len() as u64,
        buf: data.as_mut_ptr() as u64,
    };
    // SAFETY: struct peer_core_sim_dma; `data` outlives the call and holds `len` bytes.
    if unsafe { libc::ioctl(fd, PCS_DMA as _, &mut dma) } != 0 {
        return Err(errno());
    }
    Ok(())
}

fn errno() -> std::io::Error {
    std::io::Error::last_os_error()
}

fn diagnose(host: &Host, e: &std::io::Error) -> String {
    if e.raw_os_error() != Some(libc::EFAULT) {
        return e.to_string();
    }
    let module = host.sys_path("module/nvidia_peermem").exists()
        || host.sys_path("module/nv_peer_mem").exists();
    let cause = if !module {
        "the peer-memory module is not loaded (modprobe nvidia_peermem)"
    } else if host.sys_path("kernel/mm/memory_peers").exists()
        && !host.sys_path("kernel/mm/memory_peers/nv_mem").exists()
    {
        "nvidia_peermem is loaded but its client is not registered with the IB core (see dmesg)"
    } else {
        "no peer-memory client took the range: GPU without GPUDirect RDMA support, or the pointer is not a CUDA allocation"
    };
    format!("{e}: likely cause: {cause}")
}

fn sim_core_register(r: &mut Run, host: &Host, buf: &Buffer, size: usize) -> Option<stats::Stats> {
    let path = c"/dev/peer_core_sim";
    // SAFETY: a NUL-terminated path.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if fd < 0 {
        r.fail(
            "register",
            format!("cannot open {PEER_CORE_SIM}: {}", errno()),
        );
        return None;
    }
    let mut reg = PcsReg {
        addr: buf.addr,
        size: size as u64,
        access: 1,
        kind: 0,
        inject: 0,
        id: 0,
        peer: 0,
        pad: 0,
        client: [0; 64],
    };
    // SAFETY: struct peer_core_sim_reg, in/out.
    let rc = unsafe { libc::ioctl(fd, PCS_REG_MR as _, &mut reg) };
    let during = if rc != 0 {
        r.fail(
            "register",
            format!(
                "peer_core_sim REG_MR of {size} bytes at {:#x}: {}",
                buf.addr,
                diagnose(host, &errno())
            ),
        );
        None
    } else {
        let client = String::from_utf8_lossy(reg.client.split(|&b| b == 0).next().unwrap_or(&[]))
            .into_owned();
        if reg.peer == 1 && client == "nv_mem" {
            r.ok(
                "register",
                format!("peer_core_sim REG_MR (test interface of the MOFED core stand-in): taken by peer client {client}, MR {}", reg.id),
            );
        } else {
            r.fail(
                "register",
                format!(
                    "registered, but not through our client: peer={} client={client:?}",
                    reg.peer
                ),
            );
        }
        let during = stats::read(host).ok();
        // The "NIC" writes a pattern into the MR, the CPU checks it; then the CPU writes
        // another and the "NIC" reads it back.
        let mut a = pattern(1, size);
        let mut got = vec![0u8; size];
        let r1 = sim_dma(fd, reg.id, 0, &mut a)
            .map_err(|e| format!("DMA into the MR: {e}"))
            .and_then(|()| buf.read(0, &mut got).map_err(|e| e.to_string()))
            .and_then(|()| match first_mismatch(&got, &a) {
                None => Ok(()),
                Some(i) => Err(format!("NIC write: byte {i} differs in GPU memory")),
            });
        let b = pattern(2, size);
        let mut back = vec![0u8; size];
        let r2 = buf.write(0, &b).map_err(|e| e.to_string()).and_then(|()| {
            sim_dma(fd, reg.id, 1, &mut back).map_err(|e| format!("DMA from the MR: {e}"))?;
            match first_mismatch(&back, &b) {
                None => Ok(()),
                Some(i) => Err(format!("NIC read: byte {i} differs")),
            }
        });
        match (r1, r2) {
            (Ok(()), Ok(())) => r.ok(
                "transfer",
                format!("{size} bytes written into and {size} read from GPU memory by the NIC stand-in, every byte verified"),
            ),
            (Err(e), _) | (_, Err(e)) => r.fail("transfer", e),
        }
        let id = reg.id;
        // SAFETY: a __u32 MR id of this fd.
        if unsafe { libc::ioctl(fd, PCS_DEREG_MR as _, &id) } != 0 {
            r.fail("deregister", format!("DEREG_MR: {}", errno()));
        } else {
            r.ok("deregister", format!("MR {id} deregistered"));
        }
        during
    };
    // SAFETY: opened above.
    unsafe { libc::close(fd) };
    during
}

// ---------------------------------------------------------------- ibv_reg_mr path

fn verbs_register(
    r: &mut Run,
    host: &Host,
    opts: &SelftestOpts,
    mem: MemKind,
    cuda: Option<Arc<Cuda>>,
    size: usize,
) -> Option<stats::Stats> {
    let ctx = match bench::ibv::Context::open(opts.device.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            let why = match &e {
                BenchError::NoDevice(_) | BenchError::NoVerbs(_) => format!(
                    "{e}. GPUDirect RDMA needs an RDMA NIC (ConnectX/BlueField with MOFED/DOCA-OFED, or \
                     any verbs device for dma-buf); this host has none, so the registration and the \
                     transfer cannot be tested here (the GPU side above was)"
                ),
                _ => e.to_string(),
            };
            r.fail("register", why);
            return None;
        }
    };
    drop(ctx);
    // A loopback transfer: the client's buffer is the GPU memory under test, the server's is
    // host memory, so exactly one GPU registration happens. Write then read, every byte checked.
    let side = crate::bench::engine::SideOpts {
        device: opts.device.clone(),
        port: opts.port,
        gid_index: opts.gid_index,
        depth: 1,
        mtu: None,
        qps: 1,
    };
    let bo = BenchOpts {
        mode: Mode::Loopback,
        op: Op::Write,
        sizes: vec![size / 2],
        iters: 4,
        latency: false,
        validate: true,
        mem,
        alloc: opts.alloc,
        reg: RegPath::RegMr,
        gpu: opts.gpu,
        side,
        compare_staged: false,
        duration: None,
        max_size: size / 2,
        bidirectional: false,
        rdma_cm: false,
    };
    match bench::selftest_transfer(&bo, cuda, |_| stats::read(host).ok()) {
        Ok((bytes, during)) => {
            r.ok(
                "register",
                format!(
                    "ibv_reg_mr of {size} bytes of {} memory (peer-memory path)",
                    mem.label()
                ),
            );
            r.ok(
                "transfer",
                format!("RDMA write into and read from GPU memory, {bytes} bytes verified"),
            );
            r.ok("deregister", "ibv_dereg_mr");
            during
        }
        Err(e) => {
            let msg = match &e {
                BenchError::Register(m) => m.clone(),
                other => other.to_string(),
            };
            r.fail("register", msg);
            None
        }
    }
}
