// SPDX-License-Identifier: MIT OR Apache-2.0
//! `nvpeer bench --loopback-all`: the per-node GPUDirect RDMA bandwidth check. Each GPU is
//! paired with its nearest NIC (the `topo` answer), every pair runs the same loopback transfer
//! ([`super::run`] with `Mode::Loopback`, `--mem cuda --gpu N -d DEV`), pinned to the CPUs of
//! the NIC's NUMA node as operators' own `numactl -N` + `ib_write_bw --use_cuda` scripts do,
//! and `--min-gbps X` fails the pairs below X, each named in one line.
//!
//! Without GPUs (`--mem host` or `--mem sim`), every RDMA device is paired once with host
//! memory (or the nv_p2p_sim stand-in's), so the same machinery runs over Soft-RoCE.
//!
//! The pairing ([`gpu_pairs`], [`device_pairs`]), the CUDA ordinal lookup ([`match_ordinal`])
//! and the CPU list parsing ([`parse_cpulist`]) are pure functions; only [`run`] moves data.

use std::fmt::Write as _;

use serde::Serialize;

use super::mem::MemKind;
use super::{BenchError, BenchOpts, BenchReport, Mode};
use crate::host::Host;
use crate::pci::PciAddress;
use crate::rdma::RdmaDevice;
use crate::topo::{self, PathClass, Topology};

pub const SCHEMA: &str = "nvpeer.bench-loopback-all/1";

/// The GPU of a pair.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PairGpu {
    /// Position in PCI address order (`GPU0` is 0): nvidia-smi's index.
    pub index: usize,
    pub label: String,
    pub pci_bus_id: PciAddress,
}

/// One GPU (or host memory) with one RDMA device.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Pair {
    /// `None`: host (or sim) memory.
    pub gpu: Option<PairGpu>,
    /// `None`: a GPU without any RDMA device that has a PCI function (nothing to pair with).
    pub nic: Option<String>,
    /// The GPU-NIC path class (`nvidia-smi topo -m`); `None` for host memory.
    pub class: Option<PathClass>,
}

impl Pair {
    /// `GPU 0 (0000:17:00.0) - mlx5_0`, `host memory - rxe0`.
    pub fn name(&self, mem: MemKind) -> String {
        let left = match &self.gpu {
            Some(g) => format!("GPU {} ({})", g.index, g.pci_bus_id),
            None if mem == MemKind::Sim => "sim memory".to_owned(),
            None => "host memory".to_owned(),
        };
        format!("{left} - {}", self.nic.as_deref().unwrap_or("(no NIC)"))
    }
}

/// Each GPU with its nearest NIC. Where several NICs are equally near, the one given to the
/// fewest GPUs so far is taken (the first in name order on a tie), so that GPUs sharing a
/// switch with two NICs are spread over both, as NCCL's rings are. A GPU with no NIC that has
/// a PCI function gets a pair without a NIC (it cannot be measured).
pub fn gpu_pairs(t: &Topology) -> Vec<Pair> {
    let mut used: Vec<(String, usize)> = Vec::new();
    let mut pairs = Vec::new();
    for (index, gpu) in t.gpus.iter().enumerate() {
        let nearest = t.nearest.iter().find(|n| n.gpu == gpu.label);
        let choice = nearest.and_then(|n| {
            n.nics
                .iter()
                .min_by_key(|nic| {
                    used.iter()
                        .find(|(name, _)| name == *nic)
                        .map_or(0, |(_, c)| *c)
                })
                .map(|nic| (nic.clone(), n.class))
        });
        if let Some((nic, _)) = &choice {
            match used.iter_mut().find(|(name, _)| name == nic) {
                Some((_, c)) => *c += 1,
                None => used.push((nic.clone(), 1)),
            }
        }
        pairs.push(Pair {
            gpu: Some(PairGpu {
                index,
                label: gpu.label.clone(),
                pci_bus_id: gpu.pci.address,
            }),
            class: choice.as_ref().map(|(_, c)| *c),
            nic: choice.map(|(n, _)| n),
        });
    }
    pairs
}

/// Every RDMA device once, with host memory.
pub fn device_pairs(devices: &[RdmaDevice]) -> Vec<Pair> {
    devices
        .iter()
        .map(|d| Pair {
            gpu: None,
            nic: Some(d.name.clone()),
            class: None,
        })
        .collect()
}

/// `0-15,32-47` -> [0..=15, 32..=47]; `None` when it is not a CPU list (or is empty).
pub fn parse_cpulist(text: &str) -> Option<Vec<usize>> {
    let mut cpus = Vec::new();
    for part in text.trim().split(',') {
        let part = part.trim();
        if part.is_empty() {
            continue;
        }
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (a.trim().parse().ok()?, b.trim().parse().ok()?),
            None => {
                let v: usize = part.parse().ok()?;
                (v, v)
            }
        };
        if a > b || b >= 1 << 16 {
            return None;
        }
        cpus.extend(a..=b);
    }
    cpus.sort_unstable();
    cpus.dedup();
    (!cpus.is_empty()).then_some(cpus)
}

/// Where a pair's transfer runs: the NIC's NUMA node and its CPUs, or why it is not pinned.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Pinning {
    /// `numa_node` of the NIC's PCI function (`-1`: the firmware did not say).
    pub numa_node: Option<i32>,
    /// The node's CPU list as sysfs gives it (`/sys/devices/system/node/node<N>/cpulist`, else
    /// the NIC's `local_cpulist`); `None` when the pair is not pinned.
    pub cpulist: Option<String>,
    #[serde(skip)]
    pub cpus: Vec<usize>,
    /// Why the pair is not pinned.
    pub note: Option<String>,
}

/// The pinning of a transfer over `nic`, read from sysfs.
pub fn pinning(host: &Host, nic: &str) -> Result<Pinning, crate::Error> {
    let base = format!("class/infiniband/{nic}/device");
    let unpinned = |numa_node, note: String| Pinning {
        numa_node,
        cpulist: None,
        cpus: Vec::new(),
        note: Some(note),
    };
    let Some(text) = host.read_sys(format!("{base}/numa_node"))? else {
        return Ok(unpinned(
            None,
            format!("{nic}: no PCI function (a software device): not pinned"),
        ));
    };
    let node = crate::pci::parse_numa_node(&host.sys_path(format!("{base}/numa_node")), &text)?;
    if node < 0 {
        return Ok(unpinned(
            Some(node),
            format!("{nic}: NUMA node -1 (the firmware did not say): not pinned"),
        ));
    }
    let list = match host.read_sys(format!("devices/system/node/node{node}/cpulist"))? {
        Some(l) => Some(l),
        None => host.read_sys(format!("{base}/local_cpulist"))?,
    };
    Ok(match list.as_deref().map(|l| (l, parse_cpulist(l))) {
        Some((l, Some(cpus))) => Pinning {
            numa_node: Some(node),
            cpulist: Some(l.trim().to_owned()),
            cpus,
            note: None,
        },
        _ => unpinned(
            Some(node),
            format!("{nic}: NUMA node {node} lists no CPUs: not pinned"),
        ),
    })
}

/// The CUDA ordinal of the GPU at `addr`, from CUDA's (ordinal, domain, bus, device) list
/// (CUDA numbers GPUs fastest first unless CUDA_DEVICE_ORDER=PCI_BUS_ID, and
/// CUDA_VISIBLE_DEVICES renumbers them: the PCI address is what identifies a GPU).
pub fn match_ordinal(addr: PciAddress, cuda: &[(i32, u32, u8, u8)]) -> Option<i32> {
    cuda.iter()
        .find(|(_, d, b, dev)| *d == addr.domain && *b == addr.bus && *dev == addr.device)
        .map(|(o, ..)| *o)
}

/// What pair a result is and how it went.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PairStatus {
    Ok,
    /// Measured below `--min-gbps`.
    Below,
    /// Not measured: no NIC, not visible to CUDA, or the transfer failed.
    Error,
}

/// One row.
#[derive(Clone, Debug, Serialize)]
pub struct PairResult {
    /// `GPU 0 (0000:17:00.0) - mlx5_0`.
    pub name: String,
    #[serde(flatten)]
    pub pair: Pair,
    pub cuda_ordinal: Option<i32>,
    /// All `None` for a pair that was not measured.
    #[serde(flatten)]
    pub pinning: Pinning,
    /// Average bandwidth of the largest message size, Gb/s.
    pub gbps: Option<f64>,
    pub status: PairStatus,
    pub error: Option<String>,
    /// The loopback bench's own report of the pair.
    pub bench: Option<BenchReport>,
}

/// `nvpeer bench --loopback-all --json`.
#[derive(Clone, Debug, Serialize)]
pub struct LoopbackAllReport {
    pub schema: &'static str,
    pub op: super::Op,
    pub mem: MemKind,
    pub sizes: Vec<u64>,
    pub iterations: u64,
    pub min_gbps: Option<f64>,
    pub pairs: Vec<PairResult>,
    /// Pairs below --min-gbps or not measured.
    pub failed: usize,
    /// GPUs left out (hidden by CUDA_VISIBLE_DEVICES).
    pub notes: Vec<String>,
}

impl LoopbackAllReport {
    /// One line per failing pair, for stderr and NHC's check_nvpeer_bw (which takes the first
    /// line with "below" or "fail"): `nvpeer bench: GPU 0 (0000:17:00.0) - mlx5_0: 42.1 Gb/s
    /// below --min-gbps 150`.
    pub fn failure_lines(&self) -> Vec<String> {
        self.pairs
            .iter()
            .filter_map(|p| match p.status {
                PairStatus::Ok => None,
                PairStatus::Below => Some(format!(
                    "nvpeer bench: {}: {:.1} Gb/s below --min-gbps {}",
                    p.name,
                    p.gbps.unwrap_or(0.0),
                    fmt_num(self.min_gbps.unwrap_or(0.0))
                )),
                PairStatus::Error => Some(format!(
                    "nvpeer bench: {}: failed: {}",
                    p.name,
                    p.error.as_deref().unwrap_or("not measured")
                )),
            })
            .collect()
    }

    /// The table (no word "below" or "fail" in it: those are the failure lines').
    pub fn table(&self) -> String {
        let mut s = String::new();
        let size = self.sizes.last().copied().unwrap_or(0);
        let _ = writeln!(
            s,
            "nvpeer bench --loopback-all: RDMA {} bandwidth, {} x {} per pair, {} memory",
            self.op.name(),
            super::report::size_str(size),
            self.iterations,
            self.mem.label()
        );
        let w = self
            .pairs
            .iter()
            .map(|p| p.name.len())
            .max()
            .unwrap_or(4)
            .max(4);
        let _ = writeln!(
            s,
            "  {:<w$}  {:<4}  {:>4}  {:<14}  {:>9}  status",
            "pair", "path", "NUMA", "CPUs", "Gb/s"
        );
        for p in &self.pairs {
            let pin = &p.pinning;
            let numa = pin
                .numa_node
                .map_or_else(|| "-".to_owned(), |n| n.to_string());
            let cpus = pin
                .cpulist
                .clone()
                .unwrap_or_else(|| "(not pinned)".to_owned());
            let gbps = p.gbps.map_or_else(|| "-".to_owned(), |g| format!("{g:.2}"));
            let status = match p.status {
                PairStatus::Ok => "ok",
                PairStatus::Below => "LOW",
                PairStatus::Error => "ERROR",
            };
            let _ = writeln!(
                s,
                "  {:<w$}  {:<4}  {:>4}  {:<14}  {:>9}  {status}",
                p.name,
                p.pair.class.map_or("-", |c| c.label()),
                numa,
                cpus,
                gbps
            );
        }
        let notes: Vec<&String> = self
            .notes
            .iter()
            .chain(self.pairs.iter().filter_map(|p| p.pinning.note.as_ref()))
            .collect();
        if !notes.is_empty() {
            let _ = writeln!(s, "notes:");
            for n in notes {
                let _ = writeln!(s, "  {n}");
            }
        }
        s
    }
}

/// 150 -> "150", 42.5 -> "42.5".
fn fmt_num(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.0}")
    } else {
        format!("{v}")
    }
}

/// The pairs to measure for `mem`: GPUs with their nearest NICs (CUDA memory) or every RDMA
/// device with host memory. Errors when there is nothing to pair.
pub fn plan(host: &Host, mem: MemKind) -> Result<Vec<Pair>, BenchError> {
    let sysfs = |e: crate::Error| BenchError::NoDevice(format!("cannot read sysfs: {e}"));
    if mem == MemKind::Cuda {
        let t = topo::discover(host).map_err(sysfs)?;
        if t.gpus.is_empty() {
            return Err(BenchError::Usage(format!(
                "--loopback-all: no NVIDIA GPU in {} (--mem host or --mem sim pairs every RDMA \
                 device with host memory instead)",
                host.sys_path("bus/pci/devices").display()
            )));
        }
        if t.nics.is_empty() {
            return Err(BenchError::NoDevice(format!(
                "no RDMA device in {}",
                host.sys_path("class/infiniband").display()
            )));
        }
        Ok(gpu_pairs(&t))
    } else {
        let devices = crate::rdma::devices(host).map_err(sysfs)?;
        if devices.is_empty() {
            return Err(BenchError::NoDevice(format!(
                "no RDMA device in {}",
                host.sys_path("class/infiniband").display()
            )));
        }
        Ok(device_pairs(&devices))
    }
}

/// CUDA's GPUs: (ordinal, PCI domain, bus, device).
fn cuda_gpus() -> Result<Vec<(i32, u32, u8, u8)>, BenchError> {
    use cudarc::driver::sys;
    use std::ffi::c_int;
    super::cuda::available()?;
    let mut out = Vec::new();
    // SAFETY: libcuda and every symbol used were checked by available(); out pointers are
    // valid locals.
    unsafe {
        super::cuda::check("cuInit", sys::cuInit(0))?;
        let mut count: c_int = 0;
        super::cuda::check("cuDeviceGetCount", sys::cuDeviceGetCount(&mut count))?;
        for ordinal in 0..count {
            let mut dev: sys::CUdevice = 0;
            super::cuda::check("cuDeviceGet", sys::cuDeviceGet(&mut dev, ordinal))?;
            let attr = |a: sys::CUdevice_attribute| -> Result<c_int, BenchError> {
                let mut v: c_int = 0;
                super::cuda::check(
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

/// Restricts the calling thread to `cpus` (those of them it may use: a cgroup cpuset or a
/// Slurm allocation may hold fewer). `Err` says why it could not.
fn pin_current_thread(cpus: &[usize]) -> Result<(), String> {
    // SAFETY: cpu_set_t is plain data; the calls get its size and a valid pointer.
    unsafe {
        let mut allowed: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut allowed) != 0 {
            return Err(format!(
                "sched_getaffinity: {}",
                std::io::Error::last_os_error()
            ));
        }
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        let mut any = false;
        for &c in cpus {
            if c < libc::CPU_SETSIZE as usize && libc::CPU_ISSET(c, &allowed) {
                libc::CPU_SET(c, &mut set);
                any = true;
            }
        }
        if !any {
            return Err("none of these CPUs is allowed to this process".to_owned());
        }
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(format!(
                "sched_setaffinity: {}",
                std::io::Error::last_os_error()
            ));
        }
    }
    Ok(())
}

/// Average Gb/s of the largest message size of a bench report.
fn report_gbps(r: &BenchReport) -> Option<f64> {
    r.rows
        .iter()
        .max_by_key(|row| row.size)
        .and_then(|row| row.bandwidth.as_ref())
        .map(|b| b.avg_gbps)
}

/// Runs every pair: `base` is the transfer (its device, GPU and mode are set per pair).
/// `progress(i, n, name)` is called before each pair.
pub fn run(
    host: &Host,
    base: &BenchOpts,
    min_gbps: Option<f64>,
    progress: &dyn Fn(usize, usize, &str),
) -> Result<LoopbackAllReport, BenchError> {
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
        let (pinned, outcome) = std::thread::scope(|s| {
            s.spawn(|| {
                let pinned = if cpus.is_empty() || !live {
                    Ok(())
                } else {
                    pin_current_thread(&cpus)
                };
                (pinned, super::run(&opts, None))
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
        let (gbps, status, error, bench) = match outcome {
            Ok(r) => {
                let g = report_gbps(&r);
                let status = match (g, min_gbps) {
                    (Some(g), Some(m)) if g < m => PairStatus::Below,
                    (Some(_), _) => PairStatus::Ok,
                    (None, _) => PairStatus::Error,
                };
                let error = g.is_none().then(|| "no bandwidth measured".to_owned());
                (g, status, error, Some(r))
            }
            Err(e) => (None, PairStatus::Error, Some(e.to_string()), None),
        };
        results.push(PairResult {
            name,
            pair,
            cuda_ordinal: ordinal,
            pinning: pin,
            gbps,
            status,
            error,
            bench,
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
        op: base.op,
        mem: base.mem,
        sizes: base.sizes.iter().map(|&s| s as u64).collect(),
        iterations: base.iters,
        min_gbps,
        pairs: results,
        failed,
        notes,
    })
}

fn not_measured(name: String, pair: Pair, ordinal: Option<i32>, why: &str) -> PairResult {
    PairResult {
        name,
        pair,
        cuda_ordinal: ordinal,
        pinning: Pinning::default(),
        gbps: None,
        status: PairStatus::Error,
        error: Some(why.to_owned()),
        bench: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pci::{PciDevice, PciPath};
    use std::path::Path;

    fn dev(path: &str, numa: i32) -> PciDevice {
        let p = PciPath::parse(Path::new(path)).unwrap();
        PciDevice {
            address: p.address(),
            vendor: 0x10de,
            device: 0x2330,
            class: 0x030200,
            root_complex: p.root_complex.clone(),
            path: p,
            numa_node: Some(numa),
            local_cpulist: None,
        }
    }

    fn nic(name: &str, path: Option<&str>) -> RdmaDevice {
        RdmaDevice {
            name: name.to_owned(),
            driver: None,
            pci: path.map(|p| dev(p, 0)),
            ports: Vec::new(),
        }
    }

    const SW: &str = "devices/pci0000:00/0000:00:01.0/0000:01:00.0";

    #[test]
    fn gpus_sharing_two_equally_near_nics_are_spread() {
        // Four GPUs and two NICs below one switch: every pair is PIX.
        let gpus = (0..4)
            .map(|i| dev(&format!("{SW}/0000:02:0{i}.0/0000:1{i}:00.0"), 0))
            .collect();
        let nics = [
            nic("mlx5_0", Some(&format!("{SW}/0000:02:08.0/0000:20:00.0"))),
            nic("mlx5_1", Some(&format!("{SW}/0000:02:09.0/0000:21:00.0"))),
        ];
        let t = Topology::build(gpus, &nics);
        let got: Vec<_> = gpu_pairs(&t)
            .iter()
            .map(|p| p.nic.clone().unwrap())
            .collect();
        assert_eq!(got, ["mlx5_0", "mlx5_1", "mlx5_0", "mlx5_1"]);
    }

    #[test]
    fn a_gpu_without_a_pci_nic_has_an_empty_pair() {
        let t = Topology::build(
            vec![dev(&format!("{SW}/0000:02:00.0/0000:10:00.0"), 0)],
            &[nic("rxe0", None)],
        );
        let p = gpu_pairs(&t);
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].nic, None);
        assert_eq!(p[0].name(MemKind::Cuda), "GPU 0 (0000:10:00.0) - (no NIC)");
    }

    #[test]
    fn host_memory_pairs_every_device_once() {
        let p = device_pairs(&[nic("mlx5_0", Some(SW)), nic("rxe0", None)]);
        let names: Vec<_> = p.iter().map(|x| x.name(MemKind::Host)).collect();
        assert_eq!(names, ["host memory - mlx5_0", "host memory - rxe0"]);
        assert_eq!(p[1].name(MemKind::Sim), "sim memory - rxe0");
        assert!(p.iter().all(|x| x.gpu.is_none() && x.class.is_none()));
    }

    #[test]
    fn cpulists() {
        assert_eq!(
            parse_cpulist("0-3,8,10-11\n"),
            Some(vec![0, 1, 2, 3, 8, 10, 11])
        );
        assert_eq!(parse_cpulist("5"), Some(vec![5]));
        assert_eq!(parse_cpulist(""), None);
        assert_eq!(parse_cpulist("3-1"), None);
        assert_eq!(parse_cpulist("a-b"), None);
    }

    #[test]
    fn ordinals_follow_the_pci_address_not_cuda_order() {
        let addr: PciAddress = "0000:17:00.0".parse().unwrap();
        let cuda = [(0, 0, 0xca, 0), (1, 0, 0x17, 0)];
        assert_eq!(match_ordinal(addr, &cuda), Some(1));
        assert_eq!(match_ordinal("0001:17:00.0".parse().unwrap(), &cuda), None);
    }

    fn result(name: &str, gbps: Option<f64>, status: PairStatus) -> PairResult {
        PairResult {
            name: name.to_owned(),
            pair: Pair {
                gpu: None,
                nic: Some("x".to_owned()),
                class: None,
            },
            cuda_ordinal: None,
            pinning: Pinning::default(),
            gbps,
            status,
            error: (status == PairStatus::Error).then(|| "no port".to_owned()),
            bench: None,
        }
    }

    #[test]
    fn failure_lines_name_the_pair_and_the_table_does_not_say_below() {
        let r = LoopbackAllReport {
            schema: SCHEMA,
            op: super::super::Op::Write,
            mem: MemKind::Cuda,
            sizes: vec![65536],
            iterations: 5000,
            min_gbps: Some(150.0),
            pairs: vec![
                result(
                    "GPU 0 (0000:17:00.0) - mlx5_0",
                    Some(42.13),
                    PairStatus::Below,
                ),
                result("GPU 1 (0000:2a:00.0) - mlx5_1", Some(180.0), PairStatus::Ok),
                result("GPU 2 (0000:3d:00.0) - mlx5_2", None, PairStatus::Error),
            ],
            failed: 2,
            notes: vec![],
        };
        assert_eq!(
            r.failure_lines(),
            [
                "nvpeer bench: GPU 0 (0000:17:00.0) - mlx5_0: 42.1 Gb/s below --min-gbps 150",
                "nvpeer bench: GPU 2 (0000:3d:00.0) - mlx5_2: failed: no port"
            ]
        );
        let table = r.table();
        assert_eq!(table.lines().count(), 5, "{table}");
        assert!(!table.contains("below") && !table.to_lowercase().contains("fail"));
        assert!(table.contains("42.13") && table.contains("LOW") && table.contains("ERROR"));
    }
}
