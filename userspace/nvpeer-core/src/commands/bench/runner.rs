// SPDX-License-Identifier: MIT OR Apache-2.0
//! The runs: the server serving one client, the client run (loopback or against a server)
//! size by size, and the selftest's verified transfer.

use std::sync::Arc;
use std::time::Instant;

use super::client::{
    accept, check_cm, join_error, new_side, open_cuda, spawn_loopback_server, Client,
};
use super::engine;
use super::mem::{MemKind, RegPath};
use super::staged::compare_staged;
use super::{
    cuda, rdmacm, stats, BenchError, BenchOpts, BenchReport, DirectionRow, Mode, Op, Progress, Row,
    SCHEMA,
};

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
    let registration = client.side.registration();
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
        registration,
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

pub(super) fn measure_all(
    client: &mut Client,
    opts: &BenchOpts,
    progress: Option<Progress<'_>>,
) -> Result<Vec<Row>, BenchError> {
    let mut rows = Vec::new();
    for (i, &size) in opts.sizes.iter().enumerate() {
        if let Some(p) = progress {
            p(i, opts.sizes.len(), size);
        }
        // One batch of --iters at this size, as the options ask.
        let batch = engine::RunSpec {
            op: opts.op,
            size,
            iters: opts.iters,
            latency: opts.latency,
            validate: opts.validate,
            bidir: opts.bidirectional,
        };
        // The verification pass: one message at a time, every byte compared.
        let verified_first = if opts.verify_first > 0 && !opts.validate {
            let first = engine::RunSpec {
                iters: opts.verify_first,
                latency: false,
                validate: true,
                bidir: false,
                ..batch
            };
            engine::client_run(&client.side, &mut client.ch, &client.peer, first)?.verified_bytes
        } else {
            0
        };
        // With --duration, batches of --iters are repeated until the time is up.
        let started = Instant::now();
        let mut m = engine::Measured::default();
        let mut rev = engine::Measured::default();
        loop {
            let b = engine::client_run(&client.side, &mut client.ch, &client.peer, batch)?;
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
            verified_bytes: verified_first + m.verified_bytes + rev.verified_bytes,
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
