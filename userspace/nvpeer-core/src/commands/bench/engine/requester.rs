// SPDX-License-Identifier: MIT OR Apache-2.0
//! The measuring side's bandwidth and latency loops of one (operation, size) run.

use std::time::{Duration, Instant};

use super::channel::{Channel, ConnInfo, Msg};
use super::side::Side;
use super::validate::check_completion;
use crate::commands::bench::ibv::{self, Wc};
use crate::commands::bench::mem::pattern;
use crate::commands::bench::{BenchError, Op};

/// Requests per signalled completion in bandwidth runs (perftest's default --cq-mod).
const CQ_MOD: u64 = 100;

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
                    if op == Op::WriteImm && ibv::wc_imm(&wc[0]) != seed as u32 {
                        return Err(BenchError::Validation(format!(
                            "write-with-immediate echo {seed} carried immediate {}",
                            ibv::wc_imm(&wc[0])
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
pub(super) fn lat_signal(seed: u64, iters: u64, depth: u32) -> bool {
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

/// Whether the client polls its memory for write echoes (only for CPU-visible memory).
pub(super) fn peer_polls(peer: &ConnInfo) -> bool {
    !peer.mem.starts_with("cuda")
}
