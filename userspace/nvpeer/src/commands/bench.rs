// SPDX-License-Identifier: MIT OR Apache-2.0
//! `nvpeer bench`: the arguments checked and turned into [`BenchOpts`], then a loopback or
//! client run, a server, or `--loopback-all`, and its report printed.

use std::io::IsTerminal;
use std::process::ExitCode;

use nvpeer_core::commands::bench::cuda_alloc::CudaAlloc;
use nvpeer_core::commands::bench::engine::SideOpts;
use nvpeer_core::commands::bench::mem::{MemKind, RegPath};
use nvpeer_core::commands::bench::plot::Plot;
use nvpeer_core::commands::bench::{self, BenchError, BenchOpts, Mode, Op};
use nvpeer_core::host::Host;

use crate::cli::{BenchArgs, DmabufMappingArg, FormatArg, OpArg, RegArg};
use crate::output::{to_json, Out};

fn bench_opts(a: &BenchArgs) -> BenchOpts {
    let mode = if a.server {
        Mode::Server {
            bind: format!("0.0.0.0:{}", a.port),
        }
    } else if let Some(h) = &a.host {
        Mode::Client {
            addr: if h.contains(':') && !h.starts_with('[') {
                format!("[{h}]:{}", a.port)
            } else {
                format!("{h}:{}", a.port)
            },
        }
    } else {
        Mode::Loopback
    };
    let sizes = if a.all {
        bench::all_sizes()
    } else {
        vec![a.size.unwrap_or(if a.lat { 2 } else { 65536 })]
    };
    BenchOpts {
        mode,
        op: a.op.map_or(Op::Write, op),
        sizes,
        iters: a.iters.unwrap_or(if a.lat { 1000 } else { 5000 }),
        latency: a.lat,
        validate: a.validate,
        verify_first: if a.loopback_all && !a.no_validate {
            bench::loopback_all::VERIFY_MESSAGES
        } else {
            0
        },
        mem: a.mem.map_or(
            if a.loopback_all {
                MemKind::Cuda
            } else {
                MemKind::Host
            },
            Into::into,
        ),
        alloc: a.alloc.into(),
        reg: match a.reg {
            RegArg::Mr => RegPath::RegMr,
            RegArg::Dmabuf => RegPath::Dmabuf(a.dmabuf_mapping.into()),
        },
        gpu: a.gpu,
        side: SideOpts {
            device: a.device.clone(),
            port: a.ib_port,
            gid_index: a.gid_index,
            depth: a.tx_depth,
            mtu: a.mtu,
            qps: usize::from(a.qps),
        },
        compare_staged: a.compare_staged,
        duration: a.duration.map(std::time::Duration::from_secs),
        max_size: a.max_size,
        bidirectional: a.bidirectional,
        rdma_cm: a.rdma_cm,
    }
}

fn op(o: OpArg) -> Op {
    match o {
        OpArg::Write => Op::Write,
        OpArg::Read => Op::Read,
        OpArg::Send => Op::Send,
        OpArg::WriteImm => Op::WriteImm,
    }
}

/// The checks every bench run makes before it starts: one line and exit 2 when one fails.
fn usage_error(a: &BenchArgs, opts: &BenchOpts) -> Option<String> {
    if opts.alloc != CudaAlloc::Device && opts.mem != MemKind::Cuda {
        return Some("--alloc is how CUDA memory is allocated: it needs --mem cuda".to_owned());
    }
    if matches!(a.dmabuf_mapping, DmabufMappingArg::Pcie) && !matches!(a.reg, RegArg::Dmabuf) {
        return Some(
            "--dmabuf-mapping is the mapping type of a dma-buf export: it needs --reg dmabuf"
                .to_owned(),
        );
    }
    if let Some(m) = a.mtu {
        if bench::engine::mtu_enum(m).is_none() {
            return Some(format!("--mtu {m}: use 256, 512, 1024, 2048 or 4096"));
        }
    }
    None
}

/// Exit code of a bench/selftest error: 1 when data did not verify, 2 otherwise.
fn fail(cmd: &str, e: &BenchError) -> ExitCode {
    eprintln!("nvpeer {cmd}: {e}");
    if matches!(e, BenchError::Validation(_)) {
        ExitCode::from(1)
    } else {
        ExitCode::from(2)
    }
}

pub fn run(a: &BenchArgs, out: &mut Out) -> std::io::Result<ExitCode> {
    let opts = bench_opts(a);
    if let Some(e) = usage_error(a, &opts) {
        eprintln!("nvpeer bench: {e}");
        return Ok(ExitCode::from(2));
    }
    if a.bidirectional && a.lat {
        eprintln!("nvpeer bench: -b/--bidirectional is for bandwidth runs, not with --lat");
        return Ok(ExitCode::from(2));
    }
    if opts.sizes.iter().any(|&s| s > opts.max_size) && !matches!(opts.mode, Mode::Client { .. }) {
        eprintln!(
            "nvpeer bench: message size above --max-size {}",
            opts.max_size
        );
        return Ok(ExitCode::from(2));
    }
    if let Mode::Server { .. } = opts.mode {
        return Ok(match bench::serve(&opts, &|line| eprintln!("{line}")) {
            Ok(peer) => {
                eprintln!(
                    "nvpeer bench server: client {} ({} memory, {}) done",
                    peer.device, peer.mem, peer.reg
                );
                ExitCode::SUCCESS
            }
            Err(e) => fail("bench", &e),
        });
    }
    let progress_on = std::io::stderr().is_terminal() && opts.sizes.len() > 1;
    let progress = |i: usize, n: usize, size: usize| {
        eprint!("\r[{}/{}] {} bytes...   ", i + 1, n, size);
        if i + 1 == n {
            eprintln!();
        }
    };
    let result = bench::run(
        &opts,
        progress_on.then_some(&progress as bench::Progress<'_>),
    );
    let report = match result {
        Ok(r) => r,
        Err(e) => {
            if matches!(e, BenchError::NoDevice(_) | BenchError::NoVerbs(_)) && opts.compare_staged
            {
                if let Some(copies) = staged_only(&opts) {
                    if let Some(path) = &a.plot {
                        let why = match &e {
                            BenchError::NoDevice(_) => "no RDMA device",
                            _ => "no libibverbs",
                        };
                        // Exit 2 either way: a failed write is one more line.
                        let _ = write_plot(path, &Plot::of_copies(opts.mem.label(), &copies, why));
                    }
                }
            }
            return Ok(fail("bench", &e));
        }
    };
    if a.json {
        out.print(&to_json(&report, true)?)?;
    } else if a.format == FormatArg::Perftest {
        out.print(&bench::report::perftest(&report))?;
    } else {
        out.print(&bench::report::human(&report))?;
    }
    // After the report: a plot that cannot be written loses no measurement.
    if let Some(path) = &a.plot {
        if let Err(code) = write_plot(path, &Plot::of_report(&report)) {
            return Ok(code);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `bench --loopback-all`: the table (or JSON) on stdout, then one line per failing pair on
/// stderr; exit 1 when a pair is below --min-gbps or was not measured.
pub fn run_loopback_all(host: &Host, a: &BenchArgs, out: &mut Out) -> std::io::Result<ExitCode> {
    if a.format == FormatArg::Perftest {
        eprintln!(
            "nvpeer bench: --loopback-all prints one row per pair: not with --format perftest"
        );
        return Ok(ExitCode::from(2));
    }
    let opts = bench_opts(a);
    if let Some(e) = usage_error(a, &opts) {
        eprintln!("nvpeer bench: {e}");
        return Ok(ExitCode::from(2));
    }
    if opts.sizes.iter().any(|&s| s > opts.max_size) {
        eprintln!(
            "nvpeer bench: message size above --max-size {}",
            opts.max_size
        );
        return Ok(ExitCode::from(2));
    }
    let tty = std::io::stderr().is_terminal();
    let progress = |i: usize, n: usize, name: &str| {
        if tty {
            eprintln!("[{}/{}] {name}...", i + 1, n);
        }
    };
    // Both directions unless one operation is asked for.
    let ops =
        a.op.map_or_else(|| vec![Op::Write, Op::Read], |o| vec![op(o)]);
    let report = match bench::loopback_all::run(host, &opts, &ops, a.min_gbps, &progress) {
        Ok(r) => r,
        Err(e) => return Ok(fail("bench", &e)),
    };
    if a.json {
        out.print(&to_json(&report, true)?)?;
    } else {
        out.print(&report.table())?;
    }
    for line in report.failure_lines() {
        eprintln!("{line}");
    }
    Ok(if report.failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// Writes the plot's SVG to `path`; the exit code of a failure, said in one line.
fn write_plot(path: &std::path::Path, plot: &Plot) -> Result<(), ExitCode> {
    let written = plot
        .svg()
        .and_then(|svg| std::fs::write(path, svg).map_err(|e| e.to_string()));
    written.map_err(|e| {
        eprintln!("nvpeer bench: --plot {}: {e}", path.display());
        ExitCode::from(2)
    })
}

/// Without an RDMA device, --compare-staged still measures the staging copies: printed on
/// stderr, and returned (size, microseconds) for the plot.
fn staged_only(opts: &BenchOpts) -> Option<Vec<(usize, f64)>> {
    let cuda = match bench::open_cuda(opts.mem, opts.gpu) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("nvpeer bench: {e}");
            return None;
        }
    };
    match bench::staged_copy_times(opts.mem, opts.alloc, cuda.as_ref(), &opts.sizes) {
        Ok(rows) => {
            let mut s = format!(
                "staging copies ({} memory -> host bounce buffer, verified), per message:\n{:>10} {:>11} {:>11}\n",
                opts.mem.label(),
                "size",
                "copy us",
                "GB/s"
            );
            for &(size, us) in &rows {
                s.push_str(&format!(
                    "{:>10} {:>11.2} {:>11.3}\n",
                    bench::report::size_str(size as u64),
                    us,
                    size as f64 / us / 1e3
                ));
            }
            eprint!("{s}");
            Some(rows)
        }
        Err(e) => {
            eprintln!("nvpeer bench: staging copies: {e}");
            None
        }
    }
}
