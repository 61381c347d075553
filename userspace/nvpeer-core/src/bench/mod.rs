//! `nvpeer bench`: RDMA transfers from and into host or GPU memory over RC queue pairs,
//! measured per message size (bandwidth and latency as perftest reports them), with every byte
//! optionally verified, and the direct path compared with a host bounce buffer.
//!
//! Verbs: our own bindings over a run-time loaded libibverbs ([`ibv`]): `sideway` 0.4 builds a
//! C shim with cmake and bindgen at compile time (rdma-mummy-sys), which this workspace's
//! toolchain does not provide; the handful of entry points needed are bound here instead.

pub mod cuda;
pub mod cuda_alloc;
pub mod engine;
pub mod ibv;
pub mod loopback_all;
pub mod mem;
pub mod rdmacm;
pub mod report;
pub mod stats;

use std::sync::Arc;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use engine::{Side, SideOpts};
use mem::{Buffer, MemKind, RegPath};

/// Errors of `bench` and `selftest`; each is one line for the user.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("libibverbs unavailable: {0}")]
    NoVerbs(String),
    #[error("librdmacm unavailable (needed by --rdma-cm): {0}")]
    NoRdmaCm(String),
    #[error("no RDMA device: {0}")]
    NoDevice(String),
    #[error("{what} failed: {source}")]
    Verbs {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("registration failed: {0}")]
    Register(String),
    #[error("CUDA: {0}")]
    Cuda(String),
    #[error("memory: {0}")]
    Memory(String),
    #[error("peer: {0}")]
    Peer(String),
    #[error("data verification failed: {0}")]
    Validation(String),
    #[error("{0}")]
    Usage(String),
    #[error("{0}")]
    Selftest(String),
}

impl BenchError {
    pub fn verbs(what: impl Into<String>, source: std::io::Error) -> Self {
        Self::Verbs {
            what: what.into(),
            source,
        }
    }
}

/// The RDMA operation measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Op {
    Write,
    Read,
    Send,
    WriteImm,
}

impl Op {
    pub fn name(self) -> &'static str {
        match self {
            Op::Write => "write",
            Op::Read => "read",
            Op::Send => "send",
            Op::WriteImm => "write_imm",
        }
    }
}

/// Why an `ibv_reg_mr` of GPU memory failed, in words (EFAULT: nobody claimed the range).
pub fn describe_reg_error(what: &str, e: &std::io::Error, buf: &Buffer) -> String {
    let base = format!(
        "{what} of {} bytes of {} memory at {:#x}: {e}",
        buf.len,
        buf.kind.label(),
        buf.addr
    );
    if let (Some(libc::EFAULT), Some(f)) = (e.raw_os_error(), buf.facts()) {
        if f.path() != cuda_alloc::RegistrationPath::PeerMemory {
            return format!("{base}: cause: {}", f.explain());
        }
    }
    if e.raw_os_error() == Some(libc::EFAULT) && buf.kind != MemKind::Host {
        let module = std::path::Path::new("/sys/module/nvidia_peermem").exists()
            || std::path::Path::new("/sys/module/nv_peer_mem").exists();
        let cause = if !module {
            "the peer-memory module is not loaded (insmod/modprobe nvidia_peermem)".to_owned()
        } else if std::path::Path::new("/sys/kernel/mm/memory_peers").exists()
            && !std::path::Path::new("/sys/kernel/mm/memory_peers/nv_mem").exists()
        {
            "nvidia_peermem is loaded but its client is not registered with the IB core (no \
             /sys/kernel/mm/memory_peers/nv_mem: load order or a MOFED mismatch, see dmesg)"
                .to_owned()
        } else {
            "no peer-memory client took the range: the GPU may lack GPUDirect RDMA support \
             (CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED), or the pointer is not a CUDA \
             device allocation (cuMemAlloc/cudaMalloc)"
                .to_owned()
        };
        format!("{base}: likely cause: {cause}")
    } else {
        base
    }
}

/// Where the peer is.
#[derive(Clone, Debug)]
pub enum Mode {
    /// Client and server in this process on one device (the server runs in a thread).
    Loopback,
    Server {
        bind: String,
    },
    Client {
        addr: String,
    },
}

#[derive(Clone, Debug)]
pub struct BenchOpts {
    pub mode: Mode,
    pub op: Op,
    pub sizes: Vec<usize>,
    pub iters: u64,
    pub latency: bool,
    pub validate: bool,
    pub mem: MemKind,
    /// How CUDA memory is allocated (`--alloc`; --mem cuda only).
    pub alloc: cuda_alloc::CudaAlloc,
    pub reg: RegPath,
    pub gpu: i32,
    pub side: SideOpts,
    pub compare_staged: bool,
    /// Repeat batches of `iters` per size until this much time has passed.
    pub duration: Option<std::time::Duration>,
    /// Server: the largest message it accepts (its buffer is twice this).
    pub max_size: usize,
    /// Both sides post at once (perftest's -b): the server posts the same run on a second
    /// connection while the client posts on the first.
    pub bidirectional: bool,
    /// Connect the QP through librdmacm (the control messages still use TCP).
    pub rdma_cm: bool,
}

/// One measured size.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub size: u64,
    pub iterations: u64,
    pub bandwidth: Option<stats::Bandwidth>,
    pub latency: Option<stats::Latency>,
    /// Bytes compared with the expected pattern (0 without --validate); both directions'
    /// sum in bidirectional runs.
    pub verified_bytes: u64,
    /// Bidirectional runs: each direction (`bandwidth` is then their sum, as perftest -b).
    pub directions: Option<Vec<DirectionRow>>,
}

/// One direction of a bidirectional run, named by the side that posted the requests.
#[derive(Clone, Debug, Serialize)]
pub struct DirectionRow {
    /// "client" or "server".
    pub requester: &'static str,
    pub iterations: u64,
    pub bandwidth: stats::Bandwidth,
    pub verified_bytes: u64,
}

/// The same transfer staged through host memory.
#[derive(Clone, Debug, Serialize)]
pub struct StagedRow {
    pub size: u64,
    /// Per message, direct path.
    pub direct_us: f64,
    /// Per message: the copy into the bounce buffer.
    pub copy_us: f64,
    /// Per message: the transfer from the bounce buffer plus the copy.
    pub staged_us: f64,
    pub direct_gbps: f64,
    pub staged_gbps: f64,
    pub winner: &'static str,
}

pub const SCHEMA: &str = "nvpeer.bench/1";

#[derive(Clone, Debug, Serialize)]
pub struct BenchReport {
    pub schema: &'static str,
    pub op: Op,
    pub test: &'static str,
    pub device: String,
    pub peer_device: String,
    pub mem: String,
    pub reg: String,
    pub peer_mem: String,
    pub peer_reg: String,
    /// Queue pairs the messages were spread over.
    pub qps: usize,
    pub gpu: Option<cuda::GpuInfo>,
    pub validated: bool,
    /// Both sides posted at once (-b); rows carry `directions`.
    pub bidirectional: bool,
    /// How latency is taken for this operation.
    pub latency_method: Option<&'static str>,
    pub rows: Vec<Row>,
    pub staged: Option<Vec<StagedRow>>,
    pub recommendation: Option<String>,
}

/// perftest's `--all` sizes: 2 B .. 8 MiB.
pub fn all_sizes() -> Vec<usize> {
    (1..=23).map(|i| 1usize << i).collect()
}

/// Allocates the buffer of a side (2 * half bytes) and, for dma-buf, exports it.
fn make_buffer(
    mem: MemKind,
    alloc: cuda_alloc::CudaAlloc,
    cuda: Option<&Arc<cuda::Cuda>>,
    half: usize,
    reg: RegPath,
) -> Result<(Buffer, Option<(i32, u64)>), BenchError> {
    let len = half * 2;
    let buf = match (mem, cuda) {
        (MemKind::Host, _) => Buffer::host(len)?,
        (MemKind::Sim, _) => Buffer::sim(len)?,
        (MemKind::Cuda, Some(c)) => Buffer::cuda(c.clone(), alloc, len)?,
        (MemKind::Cuda, None) => return Err(BenchError::Cuda("CUDA not initialised".to_owned())),
    };
    let dmabuf = match (reg, cuda) {
        (RegPath::Dmabuf, Some(c)) if mem == MemKind::Cuda => {
            Some((c.dmabuf_fd(buf.addr, buf.len)?, 0))
        }
        (RegPath::Dmabuf, _) => {
            return Err(BenchError::Usage(
                "--reg dmabuf needs --mem cuda (dma-buf export of GPU memory)".to_owned(),
            ))
        }
        _ => None,
    };
    Ok((buf, dmabuf))
}

pub fn open_cuda(mem: MemKind, gpu: i32) -> Result<Option<Arc<cuda::Cuda>>, BenchError> {
    if mem == MemKind::Cuda {
        Ok(Some(Arc::new(cuda::Cuda::open(gpu)?)))
    } else {
        Ok(None)
    }
}

fn new_side(
    opts: &BenchOpts,
    cuda: Option<&Arc<cuda::Cuda>>,
    mem: MemKind,
    reg: RegPath,
    half: usize,
) -> Result<Side, BenchError> {
    let (buf, dmabuf) = make_buffer(mem, opts.alloc, cuda, half, reg)?;
    if reg == RegPath::Dmabuf {
        // NCCL's probe first: a provider without dma-buf support says so precisely.
        let probe = ibv::Context::open(opts.side.device.as_deref())?;
        if !ibv::dmabuf_capable(&probe) {
            return Err(BenchError::Register(format!(
                "{} does not support dma-buf registration (ibv_reg_dmabuf_mr probe with fd=-1 \
                 returned EOPNOTSUPP): use --reg mr (peer memory)",
                probe.name
            )));
        }
    }
    Side::new(&opts.side, buf, half, reg, dmabuf)
}

/// Per-size progress callback: (index, count, size).
pub type Progress<'a> = &'a dyn Fn(usize, usize, usize);

/// Runs the server: serves one client, then returns its connection facts.
pub fn serve(opts: &BenchOpts, ready: &dyn Fn(&str)) -> Result<engine::ConnInfo, BenchError> {
    let Mode::Server { bind } = &opts.mode else {
        return Err(BenchError::Usage("not a server".to_owned()));
    };
    check_cm(opts)?;
    let cuda = open_cuda(opts.mem, opts.gpu)?;
    let side = new_side(opts, cuda.as_ref(), opts.mem, opts.reg, opts.max_size)?;
    let listener = engine::listen(bind)?;
    let mut cm = if opts.rdma_cm {
        let a: std::net::SocketAddr = bind
            .parse()
            .map_err(|e| BenchError::Usage(format!("{bind}: {e}")))?;
        Some(rdmacm::listen(a)?)
    } else {
        None
    };
    ready(&format!(
        "nvpeer bench server: {} port {}, {} memory registered by {}, listening on {bind}",
        side.ctx.name,
        side.port,
        side.buf.kind.label(),
        side.reg.label(side.buf.kind)
    ));
    let (stream, _) = accept(&listener)?;
    let second = || -> Result<(engine::Side, std::net::TcpStream), BenchError> {
        let s = new_side(opts, cuda.as_ref(), opts.mem, opts.reg, opts.max_size)?;
        Ok((s, accept(&listener)?.0))
    };
    engine::serve_client(&side, stream, Some(&second), cm.as_mut())
}

/// `--rdma-cm` checks: librdmacm loads, one QP, one direction.
fn check_cm(opts: &BenchOpts) -> Result<(), BenchError> {
    if !opts.rdma_cm {
        return Ok(());
    }
    if opts.side.qps > 1 || opts.bidirectional {
        return Err(BenchError::Usage(
            "--rdma-cm connects one QP: not with --qps above 1 or -b".to_owned(),
        ));
    }
    rdmacm::check()
}

fn accept(
    l: &std::net::TcpListener,
) -> Result<(std::net::TcpStream, std::net::SocketAddr), BenchError> {
    l.accept()
        .map_err(|e| BenchError::Peer(format!("accept: {e}")))
}

/// Where the client connects: the TCP control address and, with --rdma-cm, the CM address.
type Conn = (String, Option<std::net::SocketAddr>);

/// Runs a loopback server thread on 127.0.0.1 with the same memory kind; returns its address.
fn spawn_loopback_server(
    opts: &BenchOpts,
    cuda: Option<Arc<cuda::Cuda>>,
    mem: MemKind,
    reg: RegPath,
    half: usize,
) -> Result<(Conn, std::thread::JoinHandle<Result<(), BenchError>>), BenchError> {
    let listener = engine::listen("127.0.0.1:0")?;
    let addr = listener
        .local_addr()
        .map_err(|e| BenchError::Peer(e.to_string()))?
        .to_string();
    let mut cm = if opts.rdma_cm {
        Some(rdmacm::listen(engine::cm_loopback_addr(&opts.side)?)?)
    } else {
        None
    };
    let cm_dst = cm.as_ref().map(|l| l.addr);
    let opts = opts.clone();
    let h = std::thread::spawn(move || -> Result<(), BenchError> {
        let side = new_side(&opts, cuda.as_ref(), mem, reg, half)?;
        let (stream, _) = accept(&listener)?;
        let second = || -> Result<(engine::Side, std::net::TcpStream), BenchError> {
            let s = new_side(&opts, cuda.as_ref(), mem, reg, half)?;
            Ok((s, accept(&listener)?.0))
        };
        engine::serve_client(&side, stream, Some(&second), cm.as_mut()).map(|_| ())
    });
    Ok(((addr, cm_dst), h))
}

/// A connected client: its side, channel and peer, and the loopback server thread if any.
struct Client {
    side: Side,
    ch: engine::Channel,
    peer: engine::ConnInfo,
    server: Option<std::thread::JoinHandle<Result<(), BenchError>>>,
    /// Bidirectional runs: the thread serving the server's requests on the second connection.
    reverse: Option<std::thread::JoinHandle<Result<(), BenchError>>>,
}

impl Client {
    fn connect(
        opts: &BenchOpts,
        cuda: Option<&Arc<cuda::Cuda>>,
        mem: MemKind,
        reg: RegPath,
        half: usize,
    ) -> Result<Self, BenchError> {
        let ((addr, cm_dst), server) = match &opts.mode {
            Mode::Loopback => {
                let (a, h) = spawn_loopback_server(opts, cuda.cloned(), mem, reg, half)?;
                (a, Some(h))
            }
            Mode::Client { addr } if opts.rdma_cm => {
                let dst = std::net::ToSocketAddrs::to_socket_addrs(addr.as_str())
                    .ok()
                    .and_then(|mut a| a.next())
                    .ok_or_else(|| BenchError::Usage(format!("cannot resolve {addr}")))?;
                ((addr.clone(), Some(dst)), None)
            }
            Mode::Client { addr } => ((addr.clone(), None), None),
            Mode::Server { .. } => {
                return Err(BenchError::Usage("a server is not a client".to_owned()))
            }
        };
        let side = match new_side(opts, cuda, mem, reg, half) {
            Ok(s) => s,
            Err(e) => {
                // Let the loopback server thread end: connect and leave.
                drop(std::net::TcpStream::connect(&addr));
                if let Some(h) = server {
                    let _ = h.join();
                }
                return Err(e);
            }
        };
        let (ch, peer) =
            match engine::client_connect(&side, &addr, opts.side.mtu, opts.bidirectional, cm_dst) {
                Ok(x) => x,
                Err(e) => return Err(join_error(server, e)),
            };
        // The second connection: the server posts, this side answers (in a thread).
        let reverse = opts.bidirectional.then(|| {
            let opts = opts.clone();
            let cuda = cuda.cloned();
            let addr = addr.clone();
            std::thread::spawn(move || -> Result<(), BenchError> {
                let side2 = new_side(&opts, cuda.as_ref(), mem, reg, half)?;
                let stream = engine::connect_retry(&addr)?;
                engine::serve_client(&side2, stream, None, None).map(|_| ())
            })
        });
        if (peer.half as usize) < half.min(opts.sizes.iter().copied().max().unwrap_or(0)) {
            return Err(BenchError::Usage(format!(
                "the server accepts messages up to {} bytes (its --max-size)",
                peer.half
            )));
        }
        Ok(Self {
            side,
            ch,
            peer,
            server,
            reverse,
        })
    }

    fn finish(mut self) -> Result<(), BenchError> {
        let r = self.ch.send(&engine::Msg::Bye);
        if let Some(h) = self.reverse.take() {
            match h.join() {
                Ok(Err(e)) => return Err(e),
                Err(_) => {
                    return Err(BenchError::Peer(
                        "the thread answering the server's requests panicked".to_owned(),
                    ))
                }
                Ok(Ok(())) => {}
            }
        }
        if let Some(h) = self.server.take() {
            match h.join() {
                Ok(Err(e)) => return Err(e),
                Err(_) => {
                    return Err(BenchError::Peer(
                        "the loopback server thread panicked".to_owned(),
                    ))
                }
                Ok(Ok(())) => {}
            }
        }
        r
    }
}

/// The server thread's error explains a client-side failure better (it saw it first).
fn join_error(
    server: Option<std::thread::JoinHandle<Result<(), BenchError>>>,
    e: BenchError,
) -> BenchError {
    if let Some(h) = server {
        if let Ok(Err(se)) = h.join() {
            return se;
        }
    }
    e
}

/// The client side: loopback or against `nvpeer bench --server`.
pub fn run(opts: &BenchOpts, progress: Option<Progress<'_>>) -> Result<BenchReport, BenchError> {
    if opts.sizes.is_empty() || opts.sizes.contains(&0) {
        return Err(BenchError::Usage(
            "message sizes must be at least 1 byte".to_owned(),
        ));
    }
    if opts.iters == 0 {
        return Err(BenchError::Usage("--iters must be at least 1".to_owned()));
    }
    if opts.side.qps > 1 && opts.latency {
        return Err(BenchError::Usage(
            "--qps above 1 is for bandwidth runs (latency uses one QP)".to_owned(),
        ));
    }
    if opts.bidirectional && opts.latency {
        return Err(BenchError::Usage(
            "-b/--bidirectional is for bandwidth runs (not with --lat)".to_owned(),
        ));
    }
    check_cm(opts)?;
    if opts.bidirectional && opts.compare_staged {
        return Err(BenchError::Usage(
            "--compare-staged does not combine with -b/--bidirectional".to_owned(),
        ));
    }
    if opts.compare_staged && !matches!(opts.mode, Mode::Loopback) {
        return Err(BenchError::Usage(
            "--compare-staged runs in loopback only (it needs a second connection)".to_owned(),
        ));
    }
    let cuda = open_cuda(opts.mem, opts.gpu)?;
    let half = opts.sizes.iter().copied().max().unwrap_or(1);
    let mut client = Client::connect(opts, cuda.as_ref(), opts.mem, opts.reg, half)?;
    let rows = match measure_all(&mut client, opts, progress) {
        Ok(r) => r,
        Err(e) => {
            let server = client.server.take();
            drop(client);
            return Err(join_error(server, e));
        }
    };
    let info = client.side.info()?;
    let peer = client.peer.clone();
    client.finish()?;

    let (staged, recommendation) = if opts.compare_staged {
        let (s, r) = compare_staged(opts, cuda.as_ref(), &rows)?;
        (Some(s), Some(r))
    } else {
        (None, None)
    };
    Ok(BenchReport {
        schema: SCHEMA,
        op: opts.op,
        test: if opts.latency { "latency" } else { "bandwidth" },
        device: info.device,
        peer_device: peer.device,
        mem: info.mem,
        reg: info.reg,
        peer_mem: peer.mem,
        peer_reg: peer.reg,
        qps: info.qpns.len().max(1),
        gpu: cuda.as_ref().map(|c| c.info.clone()),
        validated: opts.validate,
        bidirectional: opts.bidirectional,
        latency_method: opts.latency.then_some(match opts.op {
            Op::Read => "round trip of one RDMA read (as ib_read_lat)",
            Op::Write if opts.mem == MemKind::Cuda => {
                "round trip to the write's completion (GPU memory cannot be polled)"
            }
            _ => "ping-pong, half the round trip (as ib_write_lat/ib_send_lat)",
        }),
        rows,
        staged,
        recommendation,
    })
}

fn measure_all(
    client: &mut Client,
    opts: &BenchOpts,
    progress: Option<Progress<'_>>,
) -> Result<Vec<Row>, BenchError> {
    let mut rows = Vec::new();
    for (i, &size) in opts.sizes.iter().enumerate() {
        if let Some(p) = progress {
            p(i, opts.sizes.len(), size);
        }
        // With --duration, batches of --iters are repeated until the time is up.
        let started = Instant::now();
        let mut m = engine::Measured::default();
        let mut rev = engine::Measured::default();
        loop {
            let b = engine::client_run(
                &client.side,
                &mut client.ch,
                &client.peer,
                engine::RunSpec {
                    op: opts.op,
                    size,
                    iters: opts.iters,
                    latency: opts.latency,
                    validate: opts.validate,
                    bidir: opts.bidirectional,
                },
            )?;
            add(&mut m, b);
            if opts.bidirectional {
                add(&mut rev, engine::expect_reverse(&mut client.ch)?);
            }
            if opts.duration.is_none_or(|d| started.elapsed() >= d) {
                break;
            }
        }
        let bw = |m: &engine::Measured| stats::bandwidth(size as u64, &m.completions, m.elapsed);
        let directions = opts.bidirectional.then(|| {
            vec![
                DirectionRow {
                    requester: "client",
                    iterations: m.iters,
                    bandwidth: bw(&m),
                    verified_bytes: m.verified_bytes,
                },
                DirectionRow {
                    requester: "server",
                    iterations: rev.iters,
                    bandwidth: bw(&rev),
                    verified_bytes: rev.verified_bytes,
                },
            ]
        });
        let bandwidth = match &directions {
            Some(d) => Some(stats::sum(d.iter().map(|x| &x.bandwidth))),
            None => (!opts.latency).then(|| bw(&m)),
        };
        rows.push(Row {
            size: size as u64,
            iterations: m.iters,
            bandwidth,
            latency: stats::latency(&m.samples),
            verified_bytes: m.verified_bytes + rev.verified_bytes,
            directions,
        });
    }
    Ok(rows)
}

/// Appends a batch (its completion times follow the earlier batches').
fn add(m: &mut engine::Measured, b: engine::Measured) {
    let offset = m.elapsed;
    m.iters += b.iters;
    m.elapsed += b.elapsed;
    m.samples.extend(b.samples);
    m.completions
        .extend(b.completions.into_iter().map(|c| c + offset));
    m.verified_bytes += b.verified_bytes;
}

/// Per-message time of a row in microseconds.
fn per_message_us(r: &Row) -> f64 {
    match (&r.latency, &r.bandwidth) {
        (Some(l), _) => l.avg_us,
        (None, Some(b)) if b.msg_rate_mpps > 0.0 => 1.0 / b.msg_rate_mpps,
        _ => f64::INFINITY,
    }
}

/// Average time in microseconds to copy `size` bytes from the source memory into a host
/// bounce buffer (cuMemcpyDtoH for GPU memory, memcpy otherwise), verified once.
pub fn copy_time_us(
    src: &Buffer,
    bounce: &mut [u8],
    size: usize,
    reps: u32,
) -> Result<f64, BenchError> {
    let want = mem::pattern(size as u64, size);
    src.write(0, &want)?;
    src.read(0, &mut bounce[..size])?;
    if let Some(i) = mem::first_mismatch(&bounce[..size], &want) {
        return Err(BenchError::Validation(format!(
            "staged copy of {size} bytes: byte {i} differs"
        )));
    }
    let t = Instant::now();
    for _ in 0..reps {
        src.read(0, &mut bounce[..size])?;
    }
    Ok(t.elapsed().as_secs_f64() * 1e6 / f64::from(reps.max(1)))
}

/// The copy times alone (hosts without an RDMA device still learn the staging cost).
pub fn staged_copy_times(
    mem: MemKind,
    alloc: cuda_alloc::CudaAlloc,
    cuda: Option<&Arc<cuda::Cuda>>,
    sizes: &[usize],
) -> Result<Vec<(usize, f64)>, BenchError> {
    let max = sizes.iter().copied().max().unwrap_or(1);
    let (src, _) = make_buffer(mem, alloc, cuda, max, RegPath::RegMr)?;
    let mut bounce = vec![0u8; max];
    sizes
        .iter()
        .map(|&s| Ok((s, copy_time_us(&src, &mut bounce, s, reps_for(s))?)))
        .collect()
}

fn reps_for(size: usize) -> u32 {
    u32::try_from((64usize << 20) / size.max(1))
        .unwrap_or(u32::MAX)
        .clamp(3, 1000)
}

/// Runs the same sizes from a host bounce buffer and adds the copy into it.
fn compare_staged(
    opts: &BenchOpts,
    cuda: Option<&Arc<cuda::Cuda>>,
    direct: &[Row],
) -> Result<(Vec<StagedRow>, String), BenchError> {
    let copies = staged_copy_times(opts.mem, opts.alloc, cuda, &opts.sizes)?;
    let half = opts.sizes.iter().copied().max().unwrap_or(1);
    let mut host_opts = opts.clone();
    host_opts.validate = false;
    let mut client = Client::connect(&host_opts, None, MemKind::Host, RegPath::RegMr, half)?;
    let host_rows = match measure_all(&mut client, &host_opts, None) {
        Ok(r) => r,
        Err(e) => {
            let server = client.server.take();
            drop(client);
            return Err(join_error(server, e));
        }
    };
    client.finish()?;
    let mut rows = Vec::new();
    for ((d, h), (size, copy)) in direct.iter().zip(&host_rows).zip(&copies) {
        let direct_us = per_message_us(d);
        let staged_us = per_message_us(h) + copy;
        let gbps = |us: f64| *size as f64 * 8.0 / (us * 1e3);
        rows.push(StagedRow {
            size: *size as u64,
            direct_us,
            copy_us: *copy,
            staged_us,
            direct_gbps: gbps(direct_us),
            staged_gbps: gbps(staged_us),
            winner: if direct_us <= staged_us {
                "direct"
            } else {
                "staged"
            },
        });
    }
    let rec = recommend(&rows);
    Ok((rows, rec))
}

/// The one-line recommendation: the size from which the direct path wins at every larger size.
pub fn recommend(rows: &[StagedRow]) -> String {
    let Some(last_staged) = rows.iter().rposition(|r| r.winner == "staged") else {
        return "direct path wins at every measured size: register GPU memory directly".to_owned();
    };
    match rows.get(last_staged + 1) {
        None => "staged path wins up to the largest measured size: the direct path did not pay off on this host".to_owned(),
        Some(r) => format!(
            "use the direct path for messages of {} and larger, stage smaller ones through host memory",
            report::size_str(r.size)
        ),
    }
}

/// The selftest's transfer: a loopback RC connection whose client buffer is the memory under
/// test (one registration) and whose server buffer is host memory; RDMA write and RDMA read of
/// `opts.sizes[0]` bytes, every message verified. `during` runs while the memory is registered.
pub fn selftest_transfer<T>(
    opts: &BenchOpts,
    cuda: Option<Arc<cuda::Cuda>>,
    during: impl FnOnce(()) -> T,
) -> Result<(u64, T), BenchError> {
    let half = opts.sizes.first().copied().unwrap_or(1);
    let ((addr, _), server) =
        spawn_loopback_server(opts, None, MemKind::Host, RegPath::RegMr, half)?;
    let side = match new_side(opts, cuda.as_ref(), opts.mem, opts.reg, half) {
        Ok(s) => s,
        Err(e) => {
            drop(std::net::TcpStream::connect(&addr));
            let _ = server.join();
            return Err(e);
        }
    };
    let snapshot = during(());
    let (ch, peer) = match engine::client_connect(&side, &addr, None, false, None) {
        Ok(x) => x,
        Err(e) => return Err(join_error(Some(server), e)),
    };
    let mut client = Client {
        side,
        ch,
        peer,
        server: Some(server),
        reverse: None,
    };
    let mut bytes = 0;
    for op in [Op::Write, Op::Read] {
        let r = engine::client_run(
            &client.side,
            &mut client.ch,
            &client.peer,
            engine::RunSpec {
                op,
                size: half,
                iters: opts.iters,
                latency: false,
                validate: true,
                bidir: false,
            },
        );
        match r {
            Ok(m) => bytes += m.verified_bytes,
            Err(e) => {
                let server = client.server.take();
                drop(client);
                return Err(join_error(server, e));
            }
        }
    }
    client.finish()?;
    Ok((bytes, snapshot))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(size: u64, direct: f64, staged: f64) -> StagedRow {
        StagedRow {
            size,
            direct_us: direct,
            copy_us: 0.0,
            staged_us: staged,
            direct_gbps: 0.0,
            staged_gbps: 0.0,
            winner: if direct <= staged { "direct" } else { "staged" },
        }
    }

    #[test]
    fn recommendation_names_the_crossover() {
        let rows = [
            row(2, 5.0, 3.0),
            row(4096, 6.0, 5.0),
            row(65536, 9.0, 12.0),
            row(1 << 20, 80.0, 200.0),
        ];
        assert_eq!(
            recommend(&rows),
            "use the direct path for messages of 64 KiB and larger, stage smaller ones through host memory"
        );
        let all_direct = [row(2, 1.0, 3.0), row(4, 1.0, 3.0)];
        assert!(recommend(&all_direct).starts_with("direct path wins at every"));
        let none = [row(2, 5.0, 3.0)];
        assert!(recommend(&none).starts_with("staged path wins"));
        // A dip back to staged above a direct win moves the threshold up.
        let dip = [row(2, 1.0, 3.0), row(4, 5.0, 3.0), row(8, 1.0, 3.0)];
        assert!(recommend(&dip).contains("of 8 B and larger"));
    }

    #[test]
    fn all_sizes_span_2_bytes_to_8_mib() {
        let s = all_sizes();
        assert_eq!(s.first(), Some(&2));
        assert_eq!(s.last(), Some(&(8 << 20)));
        assert_eq!(s.len(), 23);
    }
}
