// SPDX-License-Identifier: MIT OR Apache-2.0
//! The pieces of a run: the buffers and sides, the loopback server thread, and the connected
//! client (with the thread answering the server's requests in bidirectional runs).

use std::sync::Arc;

use super::engine::{self, Side};
use super::mem::{Buffer, MemKind, RegPath};
use super::{cuda, cuda_alloc, ibv, rdmacm, BenchError, BenchOpts, Mode};

/// Allocates the buffer of a side (2 * half bytes) and, for dma-buf, exports it (the fd and
/// the offset in it).
pub(super) fn make_buffer(
    mem: MemKind,
    alloc: cuda_alloc::CudaAlloc,
    cuda: Option<&Arc<cuda::Cuda>>,
    half: usize,
    reg: RegPath,
) -> Result<(Buffer, Option<(engine::OwnedFdGuard, u64)>), BenchError> {
    let len = half * 2;
    let buf = match (mem, cuda) {
        (MemKind::Host, _) => Buffer::host(len)?,
        (MemKind::Sim, _) => Buffer::sim(len)?,
        (MemKind::Cuda, Some(c)) => Buffer::cuda(c.clone(), alloc, len)?,
        (MemKind::Cuda, None) => return Err(BenchError::Cuda("CUDA not initialised".to_owned())),
    };
    let dmabuf = match (reg, cuda) {
        (RegPath::Dmabuf(mapping), Some(c)) if mem == MemKind::Cuda => Some((
            engine::OwnedFdGuard(c.dmabuf_fd(buf.addr, buf.len, mapping)?),
            0,
        )),
        (RegPath::Dmabuf(_), _) => {
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

pub(super) fn new_side(
    opts: &BenchOpts,
    cuda: Option<&Arc<cuda::Cuda>>,
    mem: MemKind,
    reg: RegPath,
    half: usize,
) -> Result<Side, BenchError> {
    let (buf, dmabuf) = make_buffer(mem, opts.alloc, cuda, half, reg)?;
    if let RegPath::Dmabuf(mapping) = reg {
        // NCCL's probe first: a provider without dma-buf support says so precisely. Without a
        // device the GPU side was still done: the error says so (a host without a NIC).
        let probe = ibv::Context::open(opts.side.device.as_deref()).map_err(|e| match e {
            BenchError::NoDevice(why) => BenchError::NoDevice(format!(
                "{why}; the GPU side was done: {} bytes of GPU memory exported as a dma-buf \
                 ({} mapping type)",
                buf.len,
                mapping.name()
            )),
            e => e,
        })?;
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

/// `--rdma-cm` checks: librdmacm loads, one QP, one direction.
pub(super) fn check_cm(opts: &BenchOpts) -> Result<(), BenchError> {
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

pub(super) fn accept(
    l: &std::net::TcpListener,
) -> Result<(std::net::TcpStream, std::net::SocketAddr), BenchError> {
    l.accept()
        .map_err(|e| BenchError::Peer(format!("accept: {e}")))
}

/// Where the client connects: the TCP control address and, with --rdma-cm, the CM address.
pub(super) type Conn = (String, Option<std::net::SocketAddr>);

/// Runs a loopback server thread on 127.0.0.1 with the same memory kind; returns its address.
pub(super) fn spawn_loopback_server(
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
pub(super) struct Client {
    pub(super) side: Side,
    pub(super) ch: engine::Channel,
    pub(super) peer: engine::ConnInfo,
    pub(super) server: Option<std::thread::JoinHandle<Result<(), BenchError>>>,
    /// Bidirectional runs: the thread serving the server's requests on the second connection.
    pub(super) reverse: Option<std::thread::JoinHandle<Result<(), BenchError>>>,
}

impl Client {
    pub(super) fn connect(
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

    pub(super) fn finish(mut self) -> Result<(), BenchError> {
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

/// The error of a failed client run of a loopback pair: the server thread's when it failed on
/// its own (it saw the cause first, the client only the connection ending), the client's when
/// the server merely saw the client go away after the client's own failure (a refused RDMA
/// read, say).
pub(super) fn join_error(
    server: Option<std::thread::JoinHandle<Result<(), BenchError>>>,
    e: BenchError,
) -> BenchError {
    if let Some(h) = server {
        match h.join() {
            Ok(Err(BenchError::PeerClosed(_))) if !matches!(e, BenchError::PeerClosed(_)) => {}
            Ok(Err(se)) => return se,
            _ => {}
        }
    }
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(
        r: Result<(), BenchError>,
    ) -> Option<std::thread::JoinHandle<Result<(), BenchError>>> {
        Some(std::thread::spawn(move || r))
    }

    #[test]
    fn the_side_that_saw_the_cause_names_it() {
        let closed = || BenchError::PeerClosed("the peer closed the connection".to_owned());
        // The client's read was refused; the server only saw the client leave.
        let read = BenchError::Peer("read completion failed: remote access error".to_owned());
        let e = join_error(server(Err(closed())), read);
        assert!(e.to_string().contains("remote access error"), "{e}");
        // The server failed first (its registration); the client only saw it leave.
        let e = join_error(
            server(Err(BenchError::Register("EFAULT".to_owned()))),
            closed(),
        );
        assert!(matches!(e, BenchError::Register(_)), "{e}");
        // Both saw the connection end: the server's word, as before.
        let e = join_error(server(Err(closed())), closed());
        assert!(matches!(e, BenchError::PeerClosed(_)));
        let e = join_error(server(Ok(())), BenchError::Validation("byte 3".to_owned()));
        assert!(matches!(e, BenchError::Validation(_)));
    }
}
