// SPDX-License-Identifier: MIT OR Apache-2.0
//! One side's verbs resources, QP set-up and connection, posting and completion waiting.

use std::net::TcpStream;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::socket::{recv, MsgFlags};

use super::channel::{ConnInfo, PROGRESS_TIMEOUT};
use super::validate::{self, check_completion};
use crate::commands::bench::ibv::{self, sys, Context, Cq, Mr, Qp, QpAttr, Sge, Wc};
use crate::commands::bench::mem::{Buffer, RegPath};
use crate::commands::bench::rdmacm;
use crate::commands::bench::registration::Registration;
use crate::commands::bench::{describe_reg_error, BenchError, Op};

/// Most QPs one side creates (`--qps`).
pub const MAX_QPS: usize = 16;

/// How often a waiting side checks that the peer's TCP connection is still open.
const PROBE_INTERVAL: Duration = Duration::from_millis(100);

/// The queue pairs of a side and their two CQs; field order is drop order.
pub struct Queues {
    qps: Vec<Qp>,
    pub(super) send_cq: Cq,
    pub(super) recv_cq: Cq,
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
    pub(super) want_qps: usize,
}

pub struct OwnedFdGuard(pub i32);
impl Drop for OwnedFdGuard {
    fn drop(&mut self) {
        // SAFETY: an fd we own, closed once (here).
        let fd = unsafe { OwnedFd::from_raw_fd(self.0) };
        let _ = nix::unistd::close(fd);
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
pub(super) fn auto_gid(ctx: &Context, port: u8) -> i32 {
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

/// Whether the peer has ended the TCP connection `fd`: a peek at one byte reads end-of-file
/// or a reset, without waiting and without consuming data.
fn peer_gone(fd: RawFd) -> bool {
    let mut b = [0u8; 1];
    matches!(
        recv(fd, &mut b, MsgFlags::MSG_PEEK | MsgFlags::MSG_DONTWAIT),
        Ok(0) | Err(Errno::ECONNRESET | Errno::ENOTCONN | Errno::EPIPE)
    )
}

/// Maps an MTU in bytes to `enum ibv_mtu`.
pub fn mtu_enum(bytes: u32) -> Option<u32> {
    match bytes {
        256 => Some(sys::IBV_MTU_256),
        512 => Some(sys::IBV_MTU_512),
        1024 => Some(sys::IBV_MTU_1024),
        2048 => Some(sys::IBV_MTU_2048),
        4096 => Some(sys::IBV_MTU_4096),
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
        dmabuf: Option<(OwnedFdGuard, u64)>,
    ) -> Result<Self, BenchError> {
        let ctx = Context::open(opts.device.as_deref())?;
        let (state, _, _, _) = ctx.port(opts.port)?;
        if state != sys::IBV_PORT_ACTIVE {
            return Err(BenchError::NoDevice(format!(
                "{} port {} is not ACTIVE (state {state})",
                ctx.name, opts.port
            )));
        }
        let (mr, fd_guard) = match (reg, dmabuf) {
            (RegPath::Dmabuf(_), Some((fd, offset))) => (
                Mr::register_dmabuf(&ctx, fd.0, offset, buf.len, buf.addr).map_err(|e| {
                    BenchError::Register(describe_reg_error("ibv_reg_dmabuf_mr", &e, &buf))
                })?,
                Some(fd),
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

    pub(super) fn q(&self) -> Result<&Queues, BenchError> {
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

    pub(super) fn nqps(&self) -> usize {
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
            mem: self.buf.describe(),
            reg: self.buf.reg_label(self.reg).to_owned(),
            device: self.ctx.name.clone(),
        })
    }

    /// The registration path this side's buffer took.
    pub fn registration(&self) -> Registration {
        Registration::of(self.reg, self.buf.kind, self.buf.facts().map(|f| f.path()))
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
        // Ethernet (RoCE): a GRH is required.
        let global = u32::from(link_layer) == sys::IBV_LINK_LAYER_ETHERNET || peer.lid == 0;
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
    pub(super) fn post(
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
    pub(super) fn post_flags(
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
        if op != Op::Read && size <= ibv::MAX_INLINE as usize {
            flags |= ibv::SEND_INLINE;
        }
        let mut wr = ibv::send_wr(opcode, &mut sge, raddr, peer.rkey, seed as u32, flags);
        wr.wr_id = seed;
        self.qp_for(seed)?.post_send(&mut wr)
    }

    /// Posts a receive on the QP that carries message `seed`.
    pub(super) fn post_recv(&self, size: usize, seed: u64) -> Result<(), BenchError> {
        let mut sge = self.sink_sge(size.max(1));
        self.qp_for(seed)?.post_recv(&mut sge, seed)
    }

    /// Waits for `n` completions on a CQ; fails on an error status or no progress.
    pub(super) fn wait(&self, cq: &Cq, n: usize, what: &str) -> Result<Vec<Wc>, BenchError> {
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
    pub(super) fn idle(
        &self,
        what: &str,
        probe: &mut Instant,
        last: Instant,
    ) -> Result<(), BenchError> {
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
        if peer_gone(fd) {
            return Err(BenchError::Peer(format!(
                "the peer closed the connection (killed or exited) while a {what} completion was awaited"
            )));
        }
        Ok(())
    }

    /// Polls our sink's byte `off` until it equals `want` (write ping-pong).
    pub(super) fn wait_byte(&self, off: usize, want: u8) -> Result<(), BenchError> {
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

    pub(super) fn verify_sink(
        &self,
        seed: u64,
        size: usize,
        what: &str,
    ) -> Result<u64, BenchError> {
        validate::verify(&self.buf, self.half, seed, size, what)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mtu_bytes_map_to_the_ibv_mtu_values() {
        let got: Vec<_> = [128, 256, 512, 1024, 2048, 4096, 8192]
            .into_iter()
            .map(mtu_enum)
            .collect();
        // The numbers the engine used before the generated constants: enum ibv_mtu.
        assert_eq!(
            got,
            [None, Some(1), Some(2), Some(3), Some(4), Some(5), None]
        );
    }

    #[test]
    fn a_closed_peer_is_gone_an_open_or_talking_one_is_not() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("listen");
        let ours = TcpStream::connect(l.local_addr().expect("addr")).expect("connect");
        let (mut theirs, _) = l.accept().expect("accept");
        assert!(!peer_gone(ours.as_raw_fd()), "open, nothing sent");
        std::io::Write::write_all(&mut theirs, b"x").expect("write");
        std::thread::sleep(Duration::from_millis(50));
        assert!(!peer_gone(ours.as_raw_fd()), "data pending");
        assert!(!peer_gone(ours.as_raw_fd()), "the peek left the byte there");
        let mut ours = ours;
        let mut b = [0u8; 1];
        std::io::Read::read_exact(&mut ours, &mut b).expect("read");
        drop(theirs);
        std::thread::sleep(Duration::from_millis(50));
        assert!(peer_gone(ours.as_raw_fd()), "closed by the peer");
    }

    #[test]
    fn port_constants_are_the_numbers_the_engine_compared() {
        assert_eq!(sys::IBV_PORT_ACTIVE, 4);
        assert_eq!(
            [
                sys::IBV_LINK_LAYER_UNSPECIFIED,
                sys::IBV_LINK_LAYER_INFINIBAND,
                sys::IBV_LINK_LAYER_ETHERNET
            ],
            [0, 1, 2]
        );
    }
}
