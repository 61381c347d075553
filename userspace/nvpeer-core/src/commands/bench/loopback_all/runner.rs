// SPDX-License-Identifier: MIT OR Apache-2.0
//! Runs every pair: the CUDA ordinal of its GPU, a thread pinned to its NIC's NUMA node, the
//! loopback transfer of each operation (each with its verification pass), and the verdict of
//! each direction against `--min-gbps`.

use super::pinning::pin_current_thread;
use super::report::DirectionResult;
use super::{
    match_ordinal, pinning, plan, LoopbackAllReport, Pair, PairResult, PairStatus, Pinning, SCHEMA,
};
use crate::commands::bench::mem::MemKind;
use crate::commands::bench::registration::{Got, Registration};
use crate::commands::bench::{BenchError, BenchOpts, BenchReport, Mode, Op};
use crate::host::Host;

/// CUDA's GPUs: (ordinal, PCI domain, bus, device).
fn cuda_gpus() -> Result<Vec<(i32, u32, u8, u8)>, BenchError> {
    use cudarc::driver::sys;
    use std::ffi::c_int;
    crate::commands::bench::cuda::available()?;
    let mut out = Vec::new();
    // SAFETY: libcuda and every symbol used were checked by available(); out pointers are
    // valid locals.
    unsafe {
        crate::commands::bench::cuda::check("cuInit", sys::cuInit(0))?;
        let mut count: c_int = 0;
        crate::commands::bench::cuda::check("cuDeviceGetCount", sys::cuDeviceGetCount(&mut count))?;
        for ordinal in 0..count {
            let mut dev: sys::CUdevice = 0;
            crate::commands::bench::cuda::check(
                "cuDeviceGet",
                sys::cuDeviceGet(&mut dev, ordinal),
            )?;
            let attr = |a: sys::CUdevice_attribute| -> Result<c_int, BenchError> {
                let mut v: c_int = 0;
                crate::commands::bench::cuda::check(
                    "cuDeviceGetAttribute",
                    sys::cuDeviceGetAttribute(&mut v, a, dev),
                )?;
                Ok(v)
            };
            let domain = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID)?;
            let bus = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID)?;
            let device = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID)?;
            out.push((
                ordinal,
                u32::try_from(domain).unwrap_or(u32::MAX),
                u8::try_from(bus).unwrap_or(u8::MAX),
                u8::try_from(device).unwrap_or(u8::MAX),
            ));
        }
    }
    Ok(out)
}

/// Average Gb/s of the largest message size of a bench report.
fn report_gbps(r: &BenchReport) -> Option<f64> {
    r.rows
        .iter()
        .max_by_key(|row| row.size)
        .and_then(|row| row.bandwidth.as_ref())
        .map(|b| b.avg_gbps)
}

/// Runs every pair: `base` is the transfer (its device, GPU, mode and operation are set per
/// pair and direction), `ops` the directions each pair runs, in order. `progress(i, n, name)` is
/// called before each pair.
pub fn run(
    host: &Host,
    base: &BenchOpts,
    ops: &[Op],
    min_gbps: Option<f64>,
    progress: &dyn Fn(usize, usize, &str),
) -> Result<LoopbackAllReport, BenchError> {
    if ops.is_empty() {
        return Err(BenchError::Usage(
            "--loopback-all: no operation to run".to_owned(),
        ));
    }
    if base.latency {
        return Err(BenchError::Usage(
            "--loopback-all measures bandwidth: not with --lat".to_owned(),
        ));
    }
    if base.compare_staged {
        return Err(BenchError::Usage(
            "--loopback-all does not combine with --compare-staged".to_owned(),
        ));
    }
    if let Some(m) = min_gbps {
        if !(m.is_finite() && m > 0.0) {
            return Err(BenchError::Usage(format!(
                "--min-gbps {m}: a positive number of Gb/s"
            )));
        }
    }
    let pairs = plan(host, base.mem)?;
    let mut notes = Vec::new();
    let cuda = if base.mem == MemKind::Cuda {
        Some(cuda_gpus().map_err(|e| {
            BenchError::Usage(format!(
                "--loopback-all measures GPU memory: {e} (--mem host or --mem sim pairs every \
                 RDMA device with host memory instead)"
            ))
        })?)
    } else {
        None
    };
    let hidden_ok = std::env::var_os("CUDA_VISIBLE_DEVICES").is_some();
    let mut results = Vec::new();
    let n = pairs.len();
    for (i, pair) in pairs.into_iter().enumerate() {
        let name = pair.name(base.mem);
        let ordinal = match (&cuda, &pair.gpu) {
            (Some(list), Some(g)) => match match_ordinal(g.pci_bus_id, list) {
                Some(o) => Some(o),
                None if hidden_ok => {
                    notes.push(format!(
                        "{} ({}): hidden by CUDA_VISIBLE_DEVICES, not measured",
                        g.label, g.pci_bus_id
                    ));
                    continue;
                }
                None => {
                    results.push(not_measured(
                        base,
                        name,
                        pair,
                        None,
                        "not visible to CUDA (the NVIDIA driver did not initialise it)",
                    ));
                    continue;
                }
            },
            _ => None,
        };
        let Some(nic) = pair.nic.clone() else {
            results.push(not_measured(
                base,
                name,
                pair,
                ordinal,
                "no RDMA device with a PCI function to pair it with",
            ));
            continue;
        };
        let mut pin = pinning(host, &nic).unwrap_or_else(|e| Pinning {
            numa_node: None,
            cpulist: None,
            cpus: Vec::new(),
            note: Some(format!("{nic}: {e}: not pinned")),
        });
        let mut opts = base.clone();
        opts.mode = Mode::Loopback;
        opts.side.device = Some(nic);
        opts.gpu = ordinal.unwrap_or(0);
        progress(i, n, &name);
        // A thread of its own: the affinity (inherited by the bench's server thread) and the
        // CUDA context current in it end with it.
        let cpus = pin.cpus.clone();
        let live = host.is_live_sysfs();
        let (pinned, outcomes) = std::thread::scope(|s| {
            s.spawn(|| {
                let pinned = if cpus.is_empty() || !live {
                    Ok(())
                } else {
                    pin_current_thread(&cpus)
                };
                let outcomes: Vec<_> = ops
                    .iter()
                    .map(|&op| {
                        let mut o = opts.clone();
                        o.op = op;
                        (op, crate::commands::bench::run(&o, None))
                    })
                    .collect();
                (pinned, outcomes)
            })
            .join()
        })
        .map_err(|_| BenchError::Peer(format!("{name}: the transfer thread panicked")))?;
        if let Err(why) = pinned {
            let list = pin.cpulist.take().unwrap_or_default();
            pin.note = Some(format!(
                "{}: NUMA node CPUs {list}: {why}: not pinned",
                opts.side.device.as_deref().unwrap_or("")
            ));
        }
        let directions: Vec<DirectionResult> = outcomes
            .into_iter()
            .map(|(op, outcome)| direction(op, outcome, min_gbps))
            .collect();
        // What the first run that got that far registered, else what was asked for.
        let registration = directions
            .iter()
            .find_map(|d| d.bench.as_ref().map(|b| b.registration))
            .unwrap_or_else(|| Registration::of(base.reg, base.mem, None));
        let status = directions
            .iter()
            .map(|d| d.status)
            .max()
            .unwrap_or(PairStatus::Error);
        let got = got(&directions, &registration);
        results.push(PairResult {
            name,
            pair,
            cuda_ordinal: ordinal,
            pinning: pin,
            registration,
            got,
            status,
            error: None,
            known_issue: PairResult::classify(&directions, base.mem),
            directions,
        });
    }
    if results.is_empty() {
        return Err(BenchError::Usage(format!(
            "--loopback-all: no GPU left to measure: {}",
            notes.join("; ")
        )));
    }
    let failed = results
        .iter()
        .filter(|r| r.status != PairStatus::Ok)
        .count();
    Ok(LoopbackAllReport {
        schema: SCHEMA,
        ops: ops.to_vec(),
        mem: base.mem,
        sizes: base.sizes.iter().map(|&s| s as u64).collect(),
        iterations: base.iters,
        verified_messages: if base.validate { 0 } else { base.verify_first },
        validated: base.validate,
        min_gbps,
        pairs: results,
        failed,
        notes,
    })
}

/// The mode a pair got: the registration of the directions that moved data, or none.
pub(super) fn got(directions: &[DirectionResult], registration: &Registration) -> Got {
    let moved: Vec<&str> = directions
        .iter()
        .filter(|d| d.status != PairStatus::Error)
        .map(|d| d.op.name())
        .collect();
    if moved.is_empty() {
        let why = directions
            .iter()
            .find_map(|d| d.error.as_deref())
            .unwrap_or("no direction ran");
        return Got::none(format!("no RDMA transfer completed: {why}"));
    }
    Got::moved(
        registration,
        format!(
            "RDMA {} measured through {}",
            moved.join(" and "),
            registration.label()
        ),
    )
}

/// The result of one direction: its rate against `--min-gbps`, or why it failed.
fn direction(
    op: Op,
    outcome: Result<BenchReport, BenchError>,
    min_gbps: Option<f64>,
) -> DirectionResult {
    match outcome {
        Ok(r) => {
            let g = report_gbps(&r);
            let status = match (g, min_gbps) {
                (Some(g), Some(m)) if g < m => PairStatus::Below,
                (Some(_), _) => PairStatus::Ok,
                (None, _) => PairStatus::Error,
            };
            DirectionResult {
                op,
                status,
                gbps: g,
                verified_bytes: r.rows.iter().map(|row| row.verified_bytes).sum(),
                error: g.is_none().then(|| "no bandwidth measured".to_owned()),
                bench: Some(r),
            }
        }
        Err(e) => DirectionResult {
            op,
            status: PairStatus::Error,
            gbps: None,
            verified_bytes: 0,
            error: Some(e.to_string()),
            bench: None,
        },
    }
}

fn not_measured(
    base: &BenchOpts,
    name: String,
    pair: Pair,
    ordinal: Option<i32>,
    why: &str,
) -> PairResult {
    PairResult {
        name,
        pair,
        cuda_ordinal: ordinal,
        pinning: Pinning::default(),
        registration: Registration::of(base.reg, base.mem, None),
        got: Got::none(format!("not measured: {why}")),
        status: PairStatus::Error,
        error: Some(why.to_owned()),
        directions: Vec::new(),
        known_issue: None,
    }
}
