// SPDX-License-Identifier: MIT OR Apache-2.0
//! The requester's connection set-up: hello with QP information, QPs connected, CM address.

use std::net::TcpStream;

use super::channel::{connect_retry, Channel, ConnInfo, Msg};
use super::side::{auto_gid, Side, SideOpts};
use crate::commands::bench::ibv::Context;
use crate::commands::bench::rdmacm;
use crate::commands::bench::BenchError;

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
pub(super) fn handshake(
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
