//! The transfer engine: RC queue pairs (one, or `--qps` for bandwidth runs), QP information
//! exchanged over TCP, and the per-size runs of the client (who posts) and the server (who
//! receives, echoes and verifies).
//!
//! Each side's buffer has two halves of `half` bytes: the source half `[0, half)` that it sends,
//! writes or serves reads from, and the sink half `[half, 2*half)` that the peer writes or
//! sends into (reads land in the client's sink half too).
//!
//! Loopback runs the server in a thread of the same process, on the same device, connected
//! over 127.0.0.1: one code path for both modes.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::ibv::{self, Context, Cq, Mr, Qp, QpAttr, Sge, Wc};
use super::mem::{first_mismatch, pattern, Buffer, RegPath};
use super::rdmacm;
use super::{describe_reg_error, BenchError, Op};

/// Requests per signalled completion in bandwidth runs (perftest's default --cq-mod).
const CQ_MOD: u64 = 100;
/// Messages up to this size are posted inline (the QP is created with this much inline room).
pub const MAX_INLINE: u32 = 64;

/// Most QPs one side creates (`--qps`).
pub const MAX_QPS: usize = 16;

/// How often a waiting side checks that the peer's TCP connection is still open.
const PROBE_INTERVAL: Duration = Duration::from_millis(100);

/// How long a side waits for a completion, a byte or a message before it calls the peer gone.
pub const PROGRESS_TIMEOUT: Duration = Duration::from_secs(20);

/// What each side tells the other about itself.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ConnInfo {
    pub qpn: u32,
    /// Every QP of the side (`--qps`), the first one is `qpn`.
    #[serde(default)]
    pub qpns: Vec<u32>,
    pub psn: u32,
    pub lid: u16,
    pub gid: [u8; 16],
    pub addr: u64,
    pub rkey: u32,
    pub half: u64,
    pub mem: String,
    pub reg: String,
    pub device: String,
}

/// The messages on the TCP connection (one JSON object per line).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "msg", rename_all = "snake_case")]
pub enum Msg {
    Hello {
        info: ConnInfo,
        mtu: Option<u32>,
        /// Bidirectional runs: the client opens a second connection on which the server
        /// posts the requests (roles reversed).
        #[serde(default)]
        bidir: bool,
        /// The QP is connected through librdmacm after this exchange.
        #[serde(default)]
        rdma_cm: bool,
    },
    Run {
        op: Op,
        size: u64,
        iters: u64,
        latency: bool,
        validate: bool,
        /// The server posts the same run on the second connection at the same time.
        #[serde(default)]
        bidir: bool,
    },
    /// Bidirectional runs: what the server measured as the requester of the second
    /// connection (sent after the `Result` of the client's run).
    Reverse {
        iters: u64,
        elapsed_ns: u64,
        completions_ns: Vec<u64>,
        verified_bytes: u64,
        error: Option<String>,
        /// The error is a data mismatch.
        #[serde(default)]
        mismatch: bool,
    },
    Ready,
    /// Validate mode: message `seed` has been delivered; the server checks it.
    Check {
        seed: u64,
    },
    Done,
    Result {
        ok: bool,
        verified_bytes: u64,
        error: Option<String>,
    },
    Bye,
}

pub struct Channel {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
    /// The client's CM connection of an --rdma-cm run, kept as long as the channel.
    cm: Option<rdmacm::Cm>,
}

impl Channel {
    pub fn new(stream: TcpStream) -> Result<Self, BenchError> {
        stream.set_nodelay(true).ok();
        stream
            .set_read_timeout(Some(PROGRESS_TIMEOUT * 3))
            .map_err(|e| BenchError::Peer(format!("socket: {e}")))?;
        let writer = stream
            .try_clone()
            .map_err(|e| BenchError::Peer(format!("socket: {e}")))?;
        Ok(Self {
            reader: BufReader::new(stream),
            writer,
            cm: None,
        })
    }

    pub fn send(&mut self, m: &Msg) -> Result<(), BenchError> {
        let mut line = serde_json::to_string(m).map_err(|e| BenchError::Peer(e.to_string()))?;
        line.push('\n');
        self.writer
            .write_all(line.as_bytes())
            .map_err(|e| BenchError::Peer(format!("lost the connection to the peer: {e}")))
    }

    pub fn recv(&mut self) -> Result<Msg, BenchError> {
        let mut line = String::new();
        match self.reader.read_line(&mut line) {
            Ok(0) => Err(BenchError::Peer(
                "the peer closed the connection (killed or exited)".to_owned(),
            )),
            Ok(_) => serde_json::from_str(&line)
                .map_err(|e| BenchError::Peer(format!("unexpected message from the peer: {e}"))),
            Err(e) => Err(BenchError::Peer(format!(
                "lost the connection to the peer: {e}"
            ))),
        }
    }
}

/// The queue pairs of a side and their two CQs; field order is drop order.
pub struct Queues {
    qps: Vec<Qp>,
    send_cq: Cq,
    recv_cq: Cq,
}

/// One side: device, queues (created once the QP count is known), buffer and its
/// registration. Field order is drop order.
pub struct Side {
    queues: std::cell::OnceCell<Queues>,
    mr: Mr,
    pub buf: Buffer,
    _dmabuf_fd: Option<OwnedFdGuard>,
    pub ctx: Context,
    pub half: usize,
    pub port: u8,
    pub gid_index: i32,
    pub reg: RegPath,
    pub depth: u32,
    psn: u32,
    peer_fd: AtomicI32,
    want_qps: usize,
}

pub struct OwnedFdGuard(pub i32);
impl Drop for OwnedFdGuard {
    fn drop(&mut self) {
        // SAFETY: an fd we own, closed once.
        unsafe { libc::close(self.0) };
    }
}

/// Options of a side.
#[derive(Clone, Debug)]
pub struct SideOpts {
    pub device: Option<String>,
    pub port: u8,
    pub gid_index: Option<i32>,
    pub depth: u32,
    pub mtu: Option<u32>,
    /// QPs of a client (a server takes the client's count).
    pub qps: usize,
}

/// The GID index to use: the first IPv4-mapped GID (what perftest and NCCL pick on RoCE v2),
/// else the first non-zero one.
fn auto_gid(ctx: &Context, port: u8) -> i32 {
    let mut first = None;
    for i in 0..16 {
        let Some(g) = ctx.gid(port, i) else { continue };
        if g == [0; 16] {
            continue;
        }
        if g[..10] == [0; 10] && g[10] == 0xff && g[11] == 0xff {
            return i;
        }
        first.get_or_insert(i);
    }
    first.unwrap_or(0)
}

/// Maps an MTU in bytes to `enum ibv_mtu`.
pub fn mtu_enum(bytes: u32) -> Option<u32> {
    match bytes {
        256 => Some(1),
        512 => Some(2),
        1024 => Some(3),
        2048 => Some(4),
        4096 => Some(5),
        _ => None,
    }
}

impl Side {
    /// Opens the device and registers `buf` (2 * half bytes) the way `reg` says.
    pub fn new(
        opts: &SideOpts,
        buf: Buffer,
        half: usize,
        reg: RegPath,
        dmabuf: Option<(i32, u64)>,
    ) -> Result<Self, BenchError> {
        let ctx = Context::open(opts.device.as_deref())?;
        let (state, _, _, _) = ctx.port(opts.port)?;
        if state != 4 {
            return Err(BenchError::NoDevice(format!(
                "{} port {} is not ACTIVE (state {state})",
                ctx.name, opts.port
            )));
        }
        let (mr, fd_guard) = match (reg, dmabuf) {
            (RegPath::Dmabuf, Some((fd, offset))) => (
                Mr::register_dmabuf(&ctx, fd, offset, buf.len, buf.addr).map_err(|e| {
                    BenchError::Register(describe_reg_error("ibv_reg_dmabuf_mr", &e, &buf))
                })?,
                Some(OwnedFdGuard(fd)),
            ),
            _ => (
                Mr::register(&ctx, buf.addr, buf.len).map_err(|e| {
                    BenchError::Register(describe_reg_error("ibv_reg_mr", &e, &buf))
                })?,
                None,
            ),
        };
        let gid_index = opts.gid_index.unwrap_or_else(|| auto_gid(&ctx, opts.port));
        let psn = std::process::id().wrapping_mul(2_654_435_761) & 0xff_ffff;
        Ok(Self {
            queues: std::cell::OnceCell::new(),
            mr,
            buf,
            _dmabuf_fd: fd_guard,
            ctx,
            half,
            port: opts.port,
            gid_index,
            reg,
            depth: opts.depth,
            psn,
            peer_fd: AtomicI32::new(-1),
            want_qps: opts.qps,
        })
    }

    /// Creates `n` RC QPs sharing two CQs (once; later calls keep the first set).
    pub fn create_qps(&self, n: usize) -> Result<(), BenchError> {
        if self.queues.get().is_some() {
            return Ok(());
        }
        let n = n.clamp(1, MAX_QPS);
        let per_qp = self.depth + 2;
        let cqe = i32::try_from((per_qp as usize * 2 + 16) * n).unwrap_or(i32::MAX);
        let send_cq = Cq::new(&self.ctx, cqe)?;
        let recv_cq = Cq::new(&self.ctx, cqe)?;
        let mut qps = Vec::with_capacity(n);
        for _ in 0..n {
            qps.push(Qp::new(&self.ctx, &send_cq, &recv_cq, per_qp)?);
        }
        let _ = self.queues.set(Queues {
            qps,
            send_cq,
            recv_cq,
        });
        Ok(())
    }

    fn q(&self) -> Result<&Queues, BenchError> {
        self.queues
            .get()
            .ok_or_else(|| BenchError::Peer("queue pairs used before they were created".to_owned()))
    }

    /// The QP that carries message `seed`.
    fn qp_for(&self, seed: u64) -> Result<&Qp, BenchError> {
        let q = self.q()?;
        let i = (seed % q.qps.len().max(1) as u64) as usize;
        q.qps
            .get(i)
            .ok_or_else(|| BenchError::Peer("no queue pair".to_owned()))
    }

    fn nqps(&self) -> usize {
        self.queues.get().map_or(1, |q| q.qps.len().max(1))
    }

    /// The first (with --rdma-cm the only) QP.
    pub fn qp0(&self) -> Result<&Qp, BenchError> {
        self.q()?
            .qps
            .first()
            .ok_or_else(|| BenchError::Peer("no queue pair".to_owned()))
    }

    /// The buffer as the peer addresses it: (address, rkey, half size).
    pub fn remote(&self) -> rdmacm::Remote {
        (self.buf.addr, self.mr.rkey, self.half as u64)
    }

    pub fn info(&self) -> Result<ConnInfo, BenchError> {
        let (_, _, lid, _) = self.ctx.port(self.port)?;
        Ok(ConnInfo {
            qpn: self.q()?.qps.first().map_or(0, |q| q.qpn),
            qpns: self.q()?.qps.iter().map(|q| q.qpn).collect(),
            psn: self.psn,
            lid,
            gid: self.ctx.gid(self.port, self.gid_index).unwrap_or([0; 16]),
            addr: self.buf.addr,
            rkey: self.mr.rkey,
            half: self.half as u64,
            mem: self.buf.kind.label().to_owned(),
            reg: self.reg.label(self.buf.kind).to_owned(),
            device: self.ctx.name.clone(),
        })
    }

    /// INIT -> RTR -> RTS against the peer.
    pub fn connect(&self, peer: &ConnInfo, mtu: Option<u32>) -> Result<(), BenchError> {
        let remote = if peer.qpns.is_empty() {
            vec![peer.qpn]
        } else {
            peer.qpns.clone()
        };
        let q = self.q()?;
        if remote.len() != q.qps.len() {
            return Err(BenchError::Peer(format!(
                "the peer has {} queue pairs, this side {}",
                remote.len(),
                q.qps.len()
            )));
        }
        for (qp, rqpn) in q.qps.iter().zip(remote) {
            self.connect_one(qp, rqpn, peer, mtu)?;
        }
        Ok(())
    }

    fn connect_one(
        &self,
        qp: &Qp,
        rqpn: u32,
        peer: &ConnInfo,
        mtu: Option<u32>,
    ) -> Result<(), BenchError> {
        let (_, active_mtu, _, link_layer) = self.ctx.port(self.port)?;
        let mut a = QpAttr::new();
        a.qp_state(ibv::QPS_INIT);
        a.pkey_index(0);
        a.port_num(self.port);
        a.qp_access_flags(
            ibv::ACCESS_LOCAL_WRITE | ibv::ACCESS_REMOTE_WRITE | ibv::ACCESS_REMOTE_READ,
        );
        qp.modify(
            &mut a,
            ibv::QP_STATE | ibv::QP_PKEY_INDEX | ibv::QP_PORT | ibv::QP_ACCESS_FLAGS,
            "INIT",
        )?;
        let mut a = QpAttr::new();
        a.qp_state(ibv::QPS_RTR);
        let path_mtu = match mtu {
            Some(m) => mtu_enum(m).ok_or_else(|| {
                BenchError::Usage(format!("--mtu {m}: use 256, 512, 1024, 2048 or 4096"))
            })?,
            None => active_mtu,
        };
        a.path_mtu(path_mtu.min(active_mtu.max(1)));
        a.dest_qp_num(rqpn);
        a.rq_psn(peer.psn);
        a.max_dest_rd_atomic(16);
        a.min_rnr_timer(12);
        // link_layer 2 = Ethernet (RoCE): a GRH is required.
        let global = link_layer == 2 || peer.lid == 0;
        a.ah(
            &peer.gid,
            u8::try_from(self.gid_index).unwrap_or(0),
            peer.lid,
            global,
            self.port,
        );
        qp.modify(
            &mut a,
            ibv::QP_STATE
                | ibv::QP_AV
                | ibv::QP_PATH_MTU
                | ibv::QP_DEST_QPN
                | ibv::QP_RQ_PSN
                | ibv::QP_MAX_DEST_RD_ATOMIC
                | ibv::QP_MIN_RNR_TIMER,
            "RTR",
        )?;
        let mut a = QpAttr::new();
        a.qp_state(ibv::QPS_RTS);
        a.timeout(14);
        a.retry_cnt(7);
        a.rnr_retry(7);
        a.sq_psn(self.psn);
        a.max_rd_atomic(16);
        qp.modify(
            &mut a,
            ibv::QP_STATE
                | ibv::QP_TIMEOUT
                | ibv::QP_RETRY_CNT
                | ibv::QP_RNR_RETRY
                | ibv::QP_SQ_PSN
                | ibv::QP_MAX_QP_RD_ATOMIC,
            "RTS",
        )
    }

    fn src_sge(&self, size: usize) -> Sge {
        Sge {
            addr: self.buf.addr,
            length: size as u32,
            lkey: self.mr.lkey,
        }
    }

    fn sink_sge(&self, size: usize) -> Sge {
        Sge {
            addr: self.buf.addr + self.half as u64,
            length: size as u32,
            lkey: self.mr.lkey,
        }
    }

    /// Posts one operation of `size` bytes to the peer's buffer; `imm` carries the seed.
    fn post(
        &self,
        op: Op,
        size: usize,
        peer: &ConnInfo,
        seed: u64,
        from_sink: bool,
    ) -> Result<(), BenchError> {
        self.post_flags(op, size, peer, seed, from_sink, true)
    }

    /// `post` with the completion optional (bandwidth runs signal every `CQ_MOD`-th request).
    fn post_flags(
        &self,
        op: Op,
        size: usize,
        peer: &ConnInfo,
        seed: u64,
        from_sink: bool,
        signaled: bool,
    ) -> Result<(), BenchError> {
        let mut sge = if from_sink {
            self.sink_sge(size)
        } else {
            self.src_sge(size)
        };
        let (opcode, raddr) = match op {
            Op::Write => (ibv::WR_RDMA_WRITE, peer.addr + peer.half),
            Op::WriteImm => (ibv::WR_RDMA_WRITE_WITH_IMM, peer.addr + peer.half),
            Op::Send => (ibv::WR_SEND, 0),
            // Reads fetch the peer's source half into our sink half.
            Op::Read => {
                sge = self.sink_sge(size);
                (ibv::WR_RDMA_READ, peer.addr)
            }
        };
        let mut flags = if signaled { ibv::SEND_SIGNALED } else { 0 };
        if op != Op::Read && size <= MAX_INLINE as usize {
            flags |= ibv::SEND_INLINE;
        }
        let mut wr = ibv::send_wr(opcode, &mut sge, raddr, peer.rkey, seed as u32, flags);
        wr.wr_id = seed;
        self.qp_for(seed)?.post_send(&mut wr)
    }

    /// Posts a receive on the QP that carries message `seed`.
    fn post_recv(&self, size: usize, seed: u64) -> Result<(), BenchError> {
        let mut sge = self.sink_sge(size.max(1));
        self.qp_for(seed)?.post_recv(&mut sge, seed)
    }

    /// Waits for `n` completions on a CQ; fails on an error status or no progress.
    fn wait(&self, cq: &Cq, n: usize, what: &str) -> Result<Vec<Wc>, BenchError> {
        let mut got = Vec::with_capacity(n);
        let mut wc = [Wc::default(); 16];
        let mut last = Instant::now();
        let mut probe = Instant::now();
        while got.len() < n {
            let want = (n - got.len()).min(16);
            let k = cq.poll(&mut wc[..want])?;
            if k == 0 {
                self.idle(what, &mut probe, last)?;
                std::hint::spin_loop();
                continue;
            }
            last = Instant::now();
            for w in &wc[..k] {
                check_completion(what, w)?;
                got.push(*w);
            }
        }
        Ok(got)
    }

    /// While no completion arrives: checks every `PROBE_INTERVAL` that the peer is still there,
    /// and gives up after `PROGRESS_TIMEOUT` without progress (since `last`).
    fn idle(&self, what: &str, probe: &mut Instant, last: Instant) -> Result<(), BenchError> {
        if probe.elapsed() > PROBE_INTERVAL {
            *probe = Instant::now();
            self.check_peer(what)?;
        }
        if last.elapsed() > PROGRESS_TIMEOUT {
            return Err(BenchError::Peer(format!(
                "no {what} completion for {} s: the peer stopped responding",
                PROGRESS_TIMEOUT.as_secs()
            )));
        }
        Ok(())
    }

    /// Remembers the TCP connection to the peer, whose end tells that the peer is gone.
    pub fn set_peer(&self, stream: &TcpStream) {
        self.peer_fd.store(stream.as_raw_fd(), Ordering::Relaxed);
    }

    /// Fails when the peer's TCP connection has ended (process killed or exited).
    fn check_peer(&self, what: &str) -> Result<(), BenchError> {
        let fd = self.peer_fd.load(Ordering::Relaxed);
        if fd < 0 {
            return Ok(());
        }
        let mut b = 0u8;
        // SAFETY: peeks at most one byte into a local; the fd is our open socket.
        let n = unsafe {
            libc::recv(
                fd,
                (&mut b as *mut u8).cast(),
                1,
                libc::MSG_PEEK | libc::MSG_DONTWAIT,
            )
        };
        let gone = n == 0
            || (n < 0
                && matches!(
                    std::io::Error::last_os_error().raw_os_error(),
                    Some(libc::ECONNRESET) | Some(libc::ENOTCONN) | Some(libc::EPIPE)
                ));
        if gone {
            return Err(BenchError::Peer(format!(
                "the peer closed the connection (killed or exited) while a {what} completion was awaited"
            )));
        }
        Ok(())
    }

    /// Polls our sink's byte `off` until it equals `want` (write ping-pong).
    fn wait_byte(&self, off: usize, want: u8) -> Result<(), BenchError> {
        let t = Instant::now();
        let mut probe = Instant::now();
        let mut spins: u32 = 0;
        while self.buf.peek(off) != want {
            spins = spins.wrapping_add(1);
            if spins % 4096 == 0 && probe.elapsed() > PROBE_INTERVAL {
                probe = Instant::now();
                self.check_peer("RDMA write")?;
            }
            if spins % 4096 == 0 && t.elapsed() > PROGRESS_TIMEOUT {
                return Err(BenchError::Peer(format!(
                    "no RDMA write arrived for {} s: the peer stopped responding",
                    PROGRESS_TIMEOUT.as_secs()
                )));
            }
            std::hint::spin_loop();
        }
        Ok(())
    }

    fn verify_sink(&self, seed: u64, size: usize, what: &str) -> Result<u64, BenchError> {
        let want = pattern(seed, size);
        let mut got = vec![0u8; size];
        self.buf.read(self.half, &mut got)?;
        match first_mismatch(&got, &want) {
            None => Ok(size as u64),
            Some(i) => Err(BenchError::Validation(format!(
                "{what}: {size}-byte message {seed}: byte {i} is {:#04x}, expected {:#04x}",
                got[i], want[i]
            ))),
        }
    }
}

/// One (operation, size) run.
#[derive(Clone, Copy, Debug)]
pub struct RunSpec {
    pub op: Op,
    pub size: usize,
    pub iters: u64,
    pub latency: bool,
    pub validate: bool,
    /// The peer posts the same run towards us at the same time (second connection).
    pub bidir: bool,
}

/// What the client measured for one (op, size).
#[derive(Clone, Debug, Default)]
pub struct Measured {
    pub iters: u64,
    pub elapsed: Duration,
    /// Per-iteration times in ns (latency mode: one-way for ping-pong ops).
    pub samples: Vec<f64>,
    /// Completion times since start (bandwidth mode), for the peak.
    pub completions: Vec<Duration>,
    pub verified_bytes: u64,
}

/// The client's run of one (op, size) against a connected server.
pub fn client_run(
    side: &Side,
    ch: &mut Channel,
    peer: &ConnInfo,
    spec: RunSpec,
) -> Result<Measured, BenchError> {
    let RunSpec {
        op,
        size,
        iters,
        latency,
        validate,
        bidir,
    } = spec;
    ch.send(&Msg::Run {
        op,
        size: size as u64,
        iters,
        latency,
        validate,
        bidir,
    })?;
    match ch.recv()? {
        Msg::Ready => {}
        Msg::Result { error, .. } => {
            return Err(BenchError::Peer(format!(
                "server refused: {}",
                error.unwrap_or_default()
            )))
        }
        m => return Err(BenchError::Peer(format!("unexpected reply {m:?}"))),
    }
    let mut m = Measured {
        iters,
        ..Default::default()
    };
    // Reads fetch the server's source half, which holds pattern(size) for the whole run.
    let read_seed = size as u64;
    let poll_write = op == Op::Write && latency && side.buf.cpu_visible() && peer_polls(peer);
    let start = Instant::now();
    if latency {
        // Ping-pong (write with memory polling, send/write-imm with receive completions) or,
        // for read and write from non-CPU-visible memory, the completion round trip.
        for seed in 0..iters {
            if validate || seed == 0 {
                side.buf.write(0, &pattern(seed, size))?;
            }
            let t0 = Instant::now();
            match op {
                Op::Send | Op::WriteImm => {
                    side.post_recv(size, seed)?;
                    let sig = lat_signal(seed, iters, side.depth);
                    side.post_flags(op, size, peer, seed, false, sig)?;
                    let wc = side.wait(&side.q()?.recv_cq, 1, "receive")?;
                    m.samples.push(t0.elapsed().as_nanos() as f64 / 2.0);
                    if sig {
                        side.wait(&side.q()?.send_cq, 1, "send")?;
                    }
                    if op == Op::WriteImm && u32::from_be(wc[0].imm_data) != seed as u32 {
                        return Err(BenchError::Validation(format!(
                            "write-with-immediate echo {seed} carried immediate {}",
                            u32::from_be(wc[0].imm_data)
                        )));
                    }
                    if validate {
                        m.verified_bytes += side.verify_sink(seed, size, "echo")?;
                    }
                }
                Op::Write if poll_write => {
                    let last = size - 1;
                    let want = pattern(seed, size)[last];
                    side.buf.poke(side.half + last, !want);
                    if !validate {
                        // The tag byte must change each iteration for the peer to see it.
                        side.buf.poke(last, want);
                    }
                    let sig = lat_signal(seed, iters, side.depth);
                    side.post_flags(op, size, peer, seed, false, sig)?;
                    side.wait_byte(side.half + last, want)?;
                    m.samples.push(t0.elapsed().as_nanos() as f64 / 2.0);
                    if sig {
                        side.wait(&side.q()?.send_cq, 1, "write")?;
                    }
                    if validate {
                        m.verified_bytes += side.verify_sink(seed, size, "write echo")?;
                    }
                }
                Op::Write | Op::Read => {
                    if validate && op == Op::Read {
                        side.buf.write(side.half, &pattern(read_seed + 1, size))?;
                    }
                    side.post(op, size, peer, seed, false)?;
                    side.wait(&side.q()?.send_cq, 1, "send")?;
                    m.samples.push(t0.elapsed().as_nanos() as f64);
                    if validate {
                        if op == Op::Read {
                            m.verified_bytes += side.verify_sink(read_seed, size, "read")?;
                        } else {
                            ch.send(&Msg::Check { seed })?;
                            m.verified_bytes += expect_checked(ch)?;
                        }
                    }
                }
            }
        }
    } else {
        let depth = if validate {
            1
        } else {
            side.depth.max(1) as u64
        };
        // Like perftest's --cq-mod: one completion per CQ_MOD requests (at most the depth).
        // With several QPs every request is signalled (completions of different QPs interleave).
        let multi = side.nqps() > 1;
        let cq_mod = if multi { 1 } else { CQ_MOD.min(depth) };
        let mut posted = 0u64;
        let mut done = 0u64;
        if !validate {
            side.buf.write(0, &pattern(0, size))?;
        }
        let mut wc = [Wc::default(); 16];
        let mut last = Instant::now();
        let mut probe = Instant::now();
        while done < iters {
            while posted < iters && posted - done < depth {
                if validate {
                    if op == Op::Read {
                        side.buf.write(side.half, &pattern(read_seed + 1, size))?;
                    } else {
                        side.buf.write(0, &pattern(posted, size))?;
                    }
                }
                let signaled = validate || posted % cq_mod == cq_mod - 1 || posted + 1 == iters;
                side.post_flags(op, size, peer, posted, false, signaled)?;
                posted += 1;
            }
            let k = side.q()?.send_cq.poll(&mut wc)?;
            if k == 0 {
                side.idle(op.name(), &mut probe, last)?;
                continue;
            }
            last = Instant::now();
            for w in &wc[..k] {
                check_completion(op.name(), w)?;
                // A signalled completion also completes the unsignalled requests before it.
                let now = start.elapsed();
                let upto = if multi { done + 1 } else { w.wr_id + 1 };
                for _ in done..upto {
                    m.completions.push(now);
                }
                done = upto;
                if validate {
                    if op == Op::Read {
                        m.verified_bytes += side.verify_sink(read_seed, size, "read")?;
                    } else {
                        ch.send(&Msg::Check { seed: w.wr_id })?;
                        m.verified_bytes += expect_checked(ch)?;
                    }
                }
            }
        }
    }
    m.elapsed = start.elapsed();
    ch.send(&Msg::Done)?;
    match ch.recv()? {
        Msg::Result {
            ok: true,
            verified_bytes,
            ..
        } => {
            let _ = verified_bytes;
            Ok(m)
        }
        Msg::Result { error, .. } => Err(BenchError::Validation(format!(
            "server: {}",
            error.unwrap_or_default()
        ))),
        other => Err(BenchError::Peer(format!("unexpected reply {other:?}"))),
    }
}

/// Ping-pong: one signalled send per 16 (at most the depth) and the last; the completion is
/// reaped after the iteration's measured time.
fn lat_signal(seed: u64, iters: u64, depth: u32) -> bool {
    let m = u64::from(depth).clamp(1, 16);
    seed % m == m - 1 || seed + 1 == iters
}

fn expect_checked(ch: &mut Channel) -> Result<u64, BenchError> {
    match ch.recv()? {
        Msg::Result {
            ok: true,
            verified_bytes,
            ..
        } => Ok(verified_bytes),
        Msg::Result { error, .. } => Err(BenchError::Validation(format!(
            "server: {}",
            error.unwrap_or_default()
        ))),
        other => Err(BenchError::Peer(format!("unexpected reply {other:?}"))),
    }
}

fn result_msg(r: Result<u64, BenchError>) -> Msg {
    match r {
        Ok(n) => Msg::Result {
            ok: true,
            verified_bytes: n,
            error: None,
        },
        Err(e) => Msg::Result {
            ok: false,
            verified_bytes: 0,
            error: Some(e.to_string()),
        },
    }
}

/// The server's side of one (op, size): prepares, answers checks, receives, echoes.
fn server_run(
    side: &Side,
    ch: &mut Channel,
    peer: &ConnInfo,
    spec: RunSpec,
) -> Result<(), BenchError> {
    let RunSpec {
        op,
        size,
        iters,
        latency,
        validate,
        ..
    } = spec;
    if size == 0 || size > side.half {
        ch.send(&Msg::Result {
            ok: false,
            verified_bytes: 0,
            error: Some(format!("size {size} outside 1..={}", side.half)),
        })?;
        return Ok(());
    }
    if op == Op::Read {
        side.buf.write(0, &pattern(size as u64, size))?;
    }
    let receives = matches!(op, Op::Send | Op::WriteImm);
    let prepost = if receives {
        if latency {
            1
        } else {
            iters.min(u64::from(side.depth.max(1)))
        }
    } else {
        0
    };
    for seed in 0..prepost {
        side.post_recv(size, seed)?;
    }
    if op == Op::Write && latency && side.buf.cpu_visible() {
        side.buf
            .poke(side.half + size - 1, !pattern(0, size)[size - 1]);
    }
    ch.send(&Msg::Ready)?;
    let mut verified = 0u64;
    if latency
        && op != Op::Read
        && (op != Op::Write || (peer_polls(peer) && side.buf.cpu_visible()))
    {
        for seed in 0..iters {
            match op {
                Op::Send | Op::WriteImm => {
                    let wc = side.wait(&side.q()?.recv_cq, 1, "receive")?;
                    check_recv(op, &wc[0], seed, size)?;
                    if validate {
                        verified += side.verify_sink(seed, size, "received")?;
                    }
                    if seed + 1 < iters {
                        side.post_recv(size, seed + 1)?;
                    }
                    // Echo what arrived, from the sink half.
                    let sig = lat_signal(seed, iters, side.depth);
                    side.post_flags(op, size, peer, seed, true, sig)?;
                    if sig {
                        side.wait(&side.q()?.send_cq, 1, "echo")?;
                    }
                }
                Op::Write => {
                    let last = size - 1;
                    let want = pattern(seed, size)[last];
                    side.wait_byte(side.half + last, want)?;
                    if validate {
                        verified += side.verify_sink(seed, size, "written")?;
                    }
                    // Echo from the source half (never from the sink, which the next
                    // request may overwrite), after re-arming the sink's tag byte.
                    if validate {
                        side.buf.write(0, &pattern(seed, size))?;
                    } else {
                        if seed == 0 {
                            side.buf.write(0, &pattern(0, size))?;
                        }
                        side.buf.poke(last, want);
                    }
                    let next = pattern(seed + 1, size)[last];
                    side.buf.poke(side.half + last, !next);
                    let sig = lat_signal(seed, iters, side.depth);
                    side.post_flags(op, size, peer, seed, false, sig)?;
                    if sig {
                        side.wait(&side.q()?.send_cq, 1, "echo")?;
                    }
                }
                Op::Read => {}
            }
        }
    } else if receives {
        let mut posted = prepost;
        for _ in 0..iters {
            let checked = if validate {
                match ch.recv()? {
                    Msg::Check { seed } => Some(seed),
                    other => {
                        return Err(BenchError::Peer(format!(
                            "expected a check request, got {other:?}"
                        )))
                    }
                }
            } else {
                None
            };
            let wc = side.wait(&side.q()?.recv_cq, 1, "receive")?;
            // Each receive was posted for one message (its wr_id), on the QP that carries it;
            // a QP delivers in order, so the completion says which message arrived.
            let seed = wc[0].wr_id;
            let r = match checked {
                Some(c) if c != seed => Err(BenchError::Validation(format!(
                    "message {c} was sent, message {seed} was received"
                ))),
                _ => Ok(()),
            }
            .and_then(|()| check_recv(op, &wc[0], seed, size))
            .and_then(|()| {
                if validate {
                    side.verify_sink(seed, size, "received")
                } else {
                    Ok(0)
                }
            });
            if posted < iters {
                side.post_recv(size, posted)?;
                posted += 1;
            }
            if validate {
                let failed = r.is_err();
                verified += r.as_ref().copied().unwrap_or(0);
                ch.send(&result_msg(r))?;
                if failed {
                    return Ok(());
                }
            } else {
                r?;
            }
        }
    } else if validate && op == Op::Write {
        for _ in 0..iters {
            let seed = match ch.recv()? {
                Msg::Check { seed } => seed,
                other => {
                    return Err(BenchError::Peer(format!(
                        "expected a check request, got {other:?}"
                    )))
                }
            };
            let r = side.verify_sink(seed, size, "written");
            let failed = r.is_err();
            verified += r.as_ref().copied().unwrap_or(0);
            ch.send(&result_msg(r))?;
            if failed {
                return Ok(());
            }
        }
    }
    match ch.recv()? {
        Msg::Done => ch.send(&Msg::Result {
            ok: true,
            verified_bytes: verified,
            error: None,
        }),
        other => Err(BenchError::Peer(format!("expected done, got {other:?}"))),
    }
}

/// Whether the client polls its memory for write echoes (only for CPU-visible memory).
fn peer_polls(peer: &ConnInfo) -> bool {
    !peer.mem.starts_with("cuda")
}

fn check_recv(op: Op, wc: &Wc, seed: u64, size: usize) -> Result<(), BenchError> {
    if wc.byte_len as usize != size && op == Op::Send {
        return Err(BenchError::Validation(format!(
            "received {} bytes, expected {size}",
            wc.byte_len
        )));
    }
    if op == Op::WriteImm {
        if wc.opcode != ibv::WC_RECV_RDMA_WITH_IMM {
            return Err(BenchError::Validation(format!(
                "completion opcode {} is not RECV_RDMA_WITH_IMM",
                wc.opcode
            )));
        }
        if u32::from_be(wc.imm_data) != seed as u32 {
            return Err(BenchError::Validation(format!(
                "immediate {} where {seed} was expected",
                u32::from_be(wc.imm_data)
            )));
        }
    }
    Ok(())
}

/// Makes the server's side and stream of a bidirectional run's second connection (the client
/// connects to the same listener again).
pub type SecondConn<'a> = &'a dyn Fn() -> Result<(Side, TcpStream), BenchError>;

/// The server's requester of a bidirectional run: a thread that owns the second connection's
/// side and runs what it is sent, at the same time as the server answers the client.
struct Reverse {
    tx: Option<mpsc::Sender<RunSpec>>,
    rx: mpsc::Receiver<Result<Measured, BenchError>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Reverse {
    fn start(side: Side, stream: TcpStream, mtu: Option<u32>, nqps: usize) -> Self {
        let (tx, specs) = mpsc::channel::<RunSpec>();
        let (results, rx) = mpsc::channel();
        let thread = std::thread::spawn(move || {
            let (mut ch, peer) = match handshake(&side, stream, mtu, nqps, false) {
                Ok(x) => x,
                Err(e) => {
                    let _ = results.send(Err(e));
                    return;
                }
            };
            for spec in specs {
                let r = client_run(&side, &mut ch, &peer, spec);
                let failed = r.is_err();
                let _ = results.send(r);
                if failed {
                    return;
                }
            }
            let _ = ch.send(&Msg::Bye);
        });
        Self {
            tx: Some(tx),
            rx,
            thread: Some(thread),
        }
    }

    /// Runs `spec` as the requester while `fwd` serves the client's run.
    fn run(
        &mut self,
        spec: RunSpec,
        fwd: impl FnOnce() -> Result<(), BenchError>,
    ) -> Result<Result<Measured, BenchError>, BenchError> {
        let sent = self.tx.as_ref().map(|t| t.send(spec).is_ok());
        let f = fwd();
        // A thread that ended early left its error in the channel.
        let ended = || BenchError::Peer("the server's requester thread ended".to_owned());
        let r = if sent == Some(true) {
            self.rx.recv().unwrap_or_else(|_| Err(ended()))
        } else {
            self.rx.try_recv().unwrap_or_else(|_| Err(ended()))
        };
        f.map(|()| r)
    }
}

impl Drop for Reverse {
    fn drop(&mut self) {
        // The thread says bye on the second connection and ends; waited for, so that a
        // server process does not exit before its bye has been sent.
        self.tx.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn reverse_msg(r: &Result<Measured, BenchError>) -> Msg {
    match r {
        Ok(m) => Msg::Reverse {
            iters: m.iters,
            elapsed_ns: m.elapsed.as_nanos() as u64,
            completions_ns: m.completions.iter().map(|c| c.as_nanos() as u64).collect(),
            verified_bytes: m.verified_bytes,
            error: None,
            mismatch: false,
        },
        Err(e) => Msg::Reverse {
            iters: 0,
            elapsed_ns: 0,
            completions_ns: Vec::new(),
            verified_bytes: 0,
            error: Some(e.to_string()),
            mismatch: matches!(e, BenchError::Validation(_)),
        },
    }
}

/// The client's reading of the server's `Reverse` message.
pub fn expect_reverse(ch: &mut Channel) -> Result<Measured, BenchError> {
    match ch.recv()? {
        Msg::Reverse {
            error: Some(e),
            mismatch,
            ..
        } => Err(if mismatch {
            BenchError::Validation(format!("server to client: {e}"))
        } else {
            BenchError::Peer(format!("the server's requests failed: {e}"))
        }),
        Msg::Reverse {
            iters,
            elapsed_ns,
            completions_ns,
            verified_bytes,
            ..
        } => Ok(Measured {
            iters,
            elapsed: Duration::from_nanos(elapsed_ns),
            samples: Vec::new(),
            completions: completions_ns
                .into_iter()
                .map(Duration::from_nanos)
                .collect(),
            verified_bytes,
        }),
        other => Err(BenchError::Peer(format!(
            "expected the server's measurement, got {other:?}"
        ))),
    }
}

/// Serves one client on `stream` until it says bye (or disappears). `second` makes the second
/// connection of a bidirectional run (None: such runs are refused).
pub fn serve_client(
    side: &Side,
    stream: TcpStream,
    second: Option<SecondConn<'_>>,
    cm: Option<&mut rdmacm::Listener>,
) -> Result<ConnInfo, BenchError> {
    side.set_peer(&stream);
    let mut ch = Channel::new(stream)?;
    let Msg::Hello {
        info: mut peer,
        mtu,
        bidir,
        rdma_cm,
    } = ch.recv()?
    else {
        return Err(BenchError::Peer("the client did not say hello".to_owned()));
    };
    if rdma_cm != cm.is_some() {
        return Err(BenchError::Usage(
            "--rdma-cm must be given on both sides (client and server)".to_owned(),
        ));
    }
    let nqps = peer.qpns.len().max(1);
    side.create_qps(nqps)?;
    ch.send(&Msg::Hello {
        info: side.info()?,
        mtu,
        bidir,
        rdma_cm,
    })?;
    match cm {
        Some(l) => {
            let (addr, rkey, half) = l.accept(side.qp0()?, side.remote())?;
            (peer.addr, peer.rkey, peer.half) = (addr, rkey, half);
        }
        None => side.connect(&peer, mtu)?,
    }
    let mut reverse = match (bidir, second) {
        (false, _) => None,
        (true, Some(make)) => {
            let (side2, stream2) = make()?;
            Some(Reverse::start(side2, stream2, mtu, nqps))
        }
        (true, None) => {
            return Err(BenchError::Peer(
                "bidirectional run asked on a one-way connection".to_owned(),
            ))
        }
    };
    loop {
        match ch.recv()? {
            Msg::Run {
                op,
                size,
                iters,
                latency,
                validate,
                bidir,
            } => {
                let spec = RunSpec {
                    op,
                    size: size as usize,
                    iters,
                    latency,
                    validate,
                    bidir: false,
                };
                match (bidir, reverse.as_mut()) {
                    (false, _) => server_run(side, &mut ch, &peer, spec)?,
                    (true, Some(rev)) => {
                        let r = rev.run(spec, || server_run(side, &mut ch, &peer, spec))?;
                        ch.send(&reverse_msg(&r))?;
                        r?;
                    }
                    (true, None) => {
                        return Err(BenchError::Peer(
                            "bidirectional run without a second connection".to_owned(),
                        ))
                    }
                }
            }
            Msg::Bye => return Ok(peer),
            other => return Err(BenchError::Peer(format!("unexpected message {other:?}"))),
        }
    }
}

/// Connects to a server and exchanges QP information; `bidir` asks for a bidirectional run
/// (the caller then connects a second time and serves that connection).
pub fn client_connect(
    side: &Side,
    addr: &str,
    mtu: Option<u32>,
    bidir: bool,
    cm: Option<std::net::SocketAddr>,
) -> Result<(Channel, ConnInfo), BenchError> {
    let stream = connect_retry(addr)?;
    let Some(dst) = cm else {
        return handshake(side, stream, mtu, side.want_qps, bidir);
    };
    side.create_qps(1)?;
    let (mut ch, mut peer) = hello(side, stream, mtu, bidir, true)?;
    let (c, (a, rkey, half)) = rdmacm::connect(dst, side.qp0()?, side.remote())?;
    (peer.addr, peer.rkey, peer.half) = (a, rkey, half);
    ch.cm = Some(c);
    Ok((ch, peer))
}

/// The loopback CM address: the IPv4 address of the device's netdev (its IPv4-mapped GID).
pub fn cm_loopback_addr(opts: &SideOpts) -> Result<std::net::SocketAddr, BenchError> {
    let ctx = Context::open(opts.device.as_deref())?;
    let i = opts.gid_index.unwrap_or_else(|| auto_gid(&ctx, opts.port));
    match ctx.gid(opts.port, i) {
        Some(g) if g[..10] == [0; 10] && g[10] == 0xff && g[11] == 0xff => Ok(
            std::net::SocketAddr::from(([g[12], g[13], g[14], g[15]], 0)),
        ),
        _ => Err(BenchError::Usage(format!(
            "--rdma-cm in loopback needs an IPv4 address on {}'s network interface",
            ctx.name
        ))),
    }
}

/// The requester's half of the QP information exchange on a connected stream.
fn handshake(
    side: &Side,
    stream: TcpStream,
    mtu: Option<u32>,
    nqps: usize,
    bidir: bool,
) -> Result<(Channel, ConnInfo), BenchError> {
    side.create_qps(nqps)?;
    let (ch, peer) = hello(side, stream, mtu, bidir, false)?;
    side.connect(&peer, mtu)?;
    Ok((ch, peer))
}

/// The requester's Hello and the server's answer, once the QPs exist.
fn hello(
    side: &Side,
    stream: TcpStream,
    mtu: Option<u32>,
    bidir: bool,
    rdma_cm: bool,
) -> Result<(Channel, ConnInfo), BenchError> {
    side.set_peer(&stream);
    let mut ch = Channel::new(stream)?;
    ch.send(&Msg::Hello {
        info: side.info()?,
        mtu,
        bidir,
        rdma_cm,
    })?;
    let Msg::Hello { info: peer, .. } = ch.recv()? else {
        return Err(BenchError::Peer("the server did not say hello".to_owned()));
    };
    Ok((ch, peer))
}

/// A failed work completion as an error that names a peer that went away.
fn check_completion(what: &str, w: &Wc) -> Result<(), BenchError> {
    if w.status == 0 {
        return Ok(());
    }
    Err(BenchError::Peer(format!(
        "{what} completion failed: {} (status {}, vendor error {:#x}){}",
        ibv::wc_status_str(w.status),
        w.status,
        w.vendor_err,
        // IBV_WC_RETRY_EXC_ERR, IBV_WC_WR_FLUSH_ERR
        if w.status == 12 || w.status == 5 {
            ": the peer is gone (killed or disconnected)"
        } else {
            ""
        }
    )))
}

pub fn connect_retry(addr: &str) -> Result<TcpStream, BenchError> {
    let t = Instant::now();
    loop {
        match TcpStream::connect(addr) {
            Ok(s) => return Ok(s),
            Err(e)
                if t.elapsed() < Duration::from_secs(15)
                    && e.kind() == std::io::ErrorKind::ConnectionRefused =>
            {
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => return Err(BenchError::Peer(format!("cannot connect to {addr}: {e}"))),
        }
    }
}

/// Binds the server's listener.
pub fn listen(addr: &str) -> Result<TcpListener, BenchError> {
    TcpListener::bind(addr).map_err(|e| BenchError::Peer(format!("cannot listen on {addr}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reverse_measurement_round_trips_through_the_control_message() {
        let m = Measured {
            iters: 3,
            elapsed: Duration::from_micros(30),
            samples: Vec::new(),
            completions: vec![
                Duration::from_micros(10),
                Duration::from_micros(20),
                Duration::from_micros(30),
            ],
            verified_bytes: 12288,
        };
        let line = serde_json::to_string(&reverse_msg(&Ok(m))).expect("serialises");
        let back: Msg = serde_json::from_str(&line).expect("parses");
        let Msg::Reverse {
            iters,
            elapsed_ns,
            completions_ns,
            verified_bytes,
            error: None,
            ..
        } = back
        else {
            panic!("not a successful Reverse: {line}");
        };
        assert_eq!((iters, elapsed_ns, verified_bytes), (3, 30_000, 12288));
        assert_eq!(completions_ns, [10_000, 20_000, 30_000]);
        let bad = reverse_msg(&Err(BenchError::Validation("byte 3".to_owned())));
        assert!(matches!(bad, Msg::Reverse { mismatch: true, .. }));
    }

    #[test]
    fn messages_of_a_peer_without_the_new_fields_parse() {
        let run =
            r#"{"msg":"run","op":"write","size":8,"iters":1,"latency":false,"validate":true}"#;
        assert!(matches!(
            serde_json::from_str::<Msg>(run),
            Ok(Msg::Run { bidir: false, .. })
        ));
    }
}
