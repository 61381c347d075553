// SPDX-License-Identifier: MIT OR Apache-2.0
//! The server: serving a client, its side of each run, and bidirectional runs' reverse half.

use std::net::TcpStream;
use std::sync::mpsc;
use std::time::Duration;

use super::channel::{Channel, ConnInfo, Msg};
use super::connect::handshake;
use super::requester::{client_run, lat_signal, peer_polls, Measured, RunSpec};
use super::side::Side;
use super::validate::check_recv;
use crate::commands::bench::mem::pattern;
use crate::commands::bench::rdmacm;
use crate::commands::bench::{BenchError, Op};

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
}
