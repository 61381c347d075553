// SPDX-License-Identifier: MIT OR Apache-2.0
//! The second step of `nvpeer check`: the rules, one file per concern, each from the facts
//! alone. A concern contributes rows ([`Check`]) and, where it decides a path, that path's
//! result for each GPU-NIC pair ([`paths`] puts a pair together):
//!
//! | file | rows | per pair |
//! |---|---|---|
//! | [`stack`] | `nvidia_driver`, `rdma_devices`, `verbs` | |
//! | [`capability`] | `gpu_gdr` | what GeForce, vGPU, MIG, GB10, Tegra and confidential VMs take away |
//! | [`peer_memory`] | `module`, `parameters`, `peer_clients`, `ib_core`, `modprobe`, `driver_reload`, `core_bugs` | peer memory |
//! | [`dmabuf`] | `dmabuf` | dma-buf, with NVIDIA's GRDMA topology rule |
//! | [`efa`] | `efa` | EFA (`efa_nv_peermem`) |
//! | [`provenance`] | `provenance` (the installed module's build against what runs) | |
//! | [`platform`] | `gpus`, `bar1`, `topology`, `iommu`, `acs` (Grace's too: rdma_topo's masks), `sysfs` | |
//! | [`inventory`] | `inventory` (`--expect-gpus`, `--expect-nics`, `--expect-rate`) | |
//! | [`grace`] | `grace` | the mapping (PCIe or C2C) |
//! | [`cdmm`] | `cdmm` (on Grace) | |
//! | [`vera`] | `vera`, and `iommu`/`acs` on Vera (rdma_topo's NUMA-based shape) | |
//! | [`consumers`] | `nccl_env`, `nccl...` per version, `nccl_gdr`, `ucx` | |
//! | [`memlock`] | `memlock` (this process; the job under `--as-job`), `job_memlock` | |
//! | [`gdrcopy`] | `gdrcopy`, `gdrcopy_device`, `gdrcopy_lib`, `gdrcopy_mode` (`gdrcopy/mode.rs`) | |
//! | [`gin`] | `gin_driver`, `gin_umem`, `gin_gdrcopy` (fail only under `--for gin`) | |
//! | [`paths`] | `paths` | `paths`, `preferred`, `mapping`, `why_not` |
//! | [`usage`] | `gdr_used` | `not_used`: a carried pair NCCL will not use (port, distance rule) |
//! | [`modes`] | `modes` (the library rows in `modes/lib_modes.rs`) | `modes`: how each library moves data |
//! | [`silent`] | `silent_failures` | |
//!
//! [`evaluate`] runs them in report order. A new concern is a new file (or folder) here, called
//! from [`evaluate`]; a path rule returns a [`PathResult`]. A rule file calls no other rule
//! file: what more than one rule asks (the GPU's kind, NCCL's decision per pair, GDRCopy's
//! backend, a dma-buf's mapping on Grace, ...) is in [`predicates`], and a concern's folder
//! (`peer_memory/`, `gdrcopy/`, `modes/`) holds its own parts. Where the platform cannot do GPUDirect
//! RDMA at all, [`capability::moot`] leaves `gpu_gdr` the one failure.

mod capability;
mod cdmm;
mod consumers;
mod dmabuf;
mod efa;
mod fold;
mod gdrcopy;
mod gin;
mod grace;
mod inventory;
mod memlock;
pub(crate) mod modes;
mod paths;
mod peer_memory;
mod platform;
mod predicates;
mod provenance;
mod silent;
mod stack;
mod usage;
mod vera;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::host::nvidia_proc::{self, DriverRelease, Params};

use super::{Check, Facts, Options, PairFacts};

use paths::settle;
pub(crate) use paths::{carried, uncarried};

/// A way GPU memory reaches the NIC.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GdrPath {
    /// `ibv_reg_dmabuf_mr` on a dma-buf the NVIDIA driver exports (no peer-memory module).
    Dmabuf,
    /// `ibv_reg_mr` on GPU memory through a MOFED peer-memory client (`nvidia_peermem`).
    PeerMemory,
    /// AWS EFA's own path through `efa_nv_peermem` (the NVIDIA P2P API re-exported to `efa`).
    Efa,
}

impl GdrPath {
    pub const ALL: [Self; 3] = [Self::Dmabuf, Self::PeerMemory, Self::Efa];

    /// As the JSON and the Prometheus label spell it.
    pub fn id(self) -> &'static str {
        match self {
            Self::Dmabuf => "dmabuf",
            Self::PeerMemory => "peer_memory",
            Self::Efa => "efa",
        }
    }

    /// For people.
    pub fn describe(self) -> &'static str {
        match self {
            Self::Dmabuf => "dma-buf",
            Self::PeerMemory => "peer memory",
            Self::Efa => "EFA",
        }
    }
}

/// How the NIC reaches GPU memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mapping {
    /// Through the GPU's PCIe BAR1.
    Pcie,
    /// Through the CPU and its C2C link: the page table is CPU-cacheable system memory on a
    /// coherent (Grace) platform.
    C2c,
}

impl Mapping {
    pub fn describe(self) -> &'static str {
        match self {
            Self::Pcie => "PCIe mapping",
            Self::C2c => "C2C mapping",
        }
    }
}

/// Why a path does not carry a pair, and what to do.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WhyNot {
    pub reason: String,
    pub fix: String,
}

/// One path's result for one pair.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathResult {
    /// `Err`: it does not work, and why.
    pub works: Result<(), WhyNot>,
    pub mapping: Option<Mapping>,
    /// What could not be probed and was assumed good (`--sysfs-root`: no libibverbs probe).
    pub not_probed: Vec<String>,
    pub notes: Vec<String>,
}

impl PathResult {
    fn works(mapping: Mapping) -> Self {
        Self {
            works: Ok(()),
            mapping: Some(mapping),
            not_probed: Vec::new(),
            notes: Vec::new(),
        }
    }

    fn fails(reason: impl Into<String>, fix: impl Into<String>) -> Self {
        Self {
            works: Err(WhyNot {
                reason: reason.into(),
                fix: fix.into(),
            }),
            mapping: None,
            not_probed: Vec::new(),
            notes: Vec::new(),
        }
    }
}

/// The verdict for one GPU-NIC pair (`pairs` in the JSON).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PairVerdict {
    pub gpu: String,
    pub nic: String,
    /// The GPU's PCI address (`0000:03:00.0`), as `nvidia-smi` and DCGM name it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_bus_id: Option<String>,
    /// The GPU's UUID (`GPU-...`, from the driver's `information`), when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_uuid: Option<String>,
    /// The NIC's PCI address.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nic_bus_id: Option<String>,
    pub class: crate::host::topo::PathClass,
    /// The paths that work for this pair.
    pub paths: Vec<GdrPath>,
    /// What NCCL and UCX of the installed (or assumed) versions would use: they try dma-buf
    /// first.
    pub preferred: Option<GdrPath>,
    /// The mapping of the preferred path.
    pub mapping: Option<Mapping>,
    /// Each path that does not work, and why.
    pub why_not: BTreeMap<GdrPath, WhyNot>,
    /// What could not be probed and was assumed good.
    pub not_probed: Vec<String>,
    pub notes: Vec<String>,
    /// A path carries the pair but NCCL will not use GPUDirect RDMA on it, and why (no ACTIVE
    /// port, NCCL's distance rule): the pair is not ready.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_used: Option<String>,
    /// Used, but over a PCIe link below what its devices can (fewer lanes, a lower speed): each
    /// such link named. The pair is not ready at full bandwidth; the verdict says `degraded`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub degraded: Vec<String>,
    /// Per library, the mode it will pick here and why ([`modes`]).
    pub modes: Vec<modes::LibraryMode>,
}

impl PairVerdict {
    /// `GPU0-mlx5_0`.
    pub fn name(&self) -> String {
        format!("{}-{}", self.gpu, self.nic)
    }
}

/// What every rule may look at: the facts, the policy, and what several rules derive alike.
pub(super) struct Ctx<'a> {
    pub f: &'a Facts,
    pub options: &'a Options,
    /// The NVIDIA driver's release: `/proc/driver/nvidia/version`, else `/sys/module/nvidia`.
    pub release: Option<DriverRelease>,
    pub params: Option<&'a Params>,
}

impl<'a> Ctx<'a> {
    fn new(f: &'a Facts, options: &'a Options) -> Self {
        let proc = f.nvidia_proc.as_ref();
        let release = proc
            .and_then(|p| p.version.as_ref())
            .and_then(|v| v.release())
            .or_else(|| {
                f.nvidia
                    .as_ref()
                    .filter(|n| !n.stand_in)
                    .and_then(|n| n.version.as_deref())
                    .and_then(DriverRelease::parse)
            });
        Self {
            f,
            options,
            release,
            params: proc.and_then(|p| p.params.as_ref()),
        }
    }

    /// The fact could not be read: why.
    fn unreadable(&self, fact: &str) -> Option<&'a str> {
        self.f.unreadable.get(fact).map(String::as_str)
    }

    /// A part of `/proc/driver/nvidia` could not be read or parsed: why. Facts of an nvpeer that
    /// read the directory as one keep a single `nvidia_proc` key, which stands for every part.
    fn proc_unreadable(&self, part: nvidia_proc::Part) -> Option<&'a str> {
        self.unreadable(part.fact())
            .or_else(|| self.unreadable("nvidia_proc"))
    }

    /// The NIC of a pair is an AWS EFA device.
    fn is_efa(pair: &PairFacts) -> bool {
        pair.nic_driver.as_deref() == Some("efa")
    }
}

/// How to bring `dev`'s first port that is not ACTIVE up, by its link layer, naming the device
/// and port (`rdma_devices` and `gdr_used` say it alike).
pub(super) fn port_up_fix(dev: &crate::host::rdma::RdmaDevice) -> String {
    let Some(port) = dev
        .ports
        .iter()
        .find(|p| !p.is_active())
        .or(dev.ports.first())
    else {
        return format!(
            "{} shows no port: check its driver's messages (`dmesg | grep {}`)",
            dev.name,
            dev.driver.as_deref().unwrap_or("mlx5")
        );
    };
    let (name, n) = (&dev.name, &port.number);
    let ib = format!(
        "check {name} port {n}'s cable and switch port, and that a subnet manager runs on the fabric (opensm or the switch's); `ibstat {name} {n}` shows its state"
    );
    let eth = format!(
        "bring {name} port {n}'s netdev up (`rdma link show {name}/{n}` names it, then `ip link set` it up) and check its cable and switch port"
    );
    match port.link_layer.as_deref() {
        Some("InfiniBand") => format!("{ib} (InfiniBand)"),
        Some("Ethernet") => format!("{eth} (RoCE)"),
        _ => format!("InfiniBand: {ib}; RoCE: {eth}"),
    }
}

/// Every row in report order and every pair, with the rows that another path makes unneeded
/// settled ([`settle`]).
pub(super) fn evaluate(f: &Facts, options: &Options) -> (Vec<Check>, Vec<PairVerdict>) {
    let ctx = Ctx::new(f, options);
    let peer_rows = peer_memory::rows(&ctx);
    let peer_host = peer_memory::host_state(&ctx, &peer_rows);
    let pairs: Vec<PairVerdict> = f
        .pairs
        .iter()
        .map(|p| {
            paths::pair(
                &ctx,
                p,
                capability::restrict(
                    &ctx,
                    p,
                    [
                        (GdrPath::Dmabuf, Some(dmabuf::pair(&ctx, p))),
                        (
                            GdrPath::PeerMemory,
                            Some(peer_memory::pair(&ctx, p, &peer_host)),
                        ),
                        (GdrPath::Efa, efa::pair(&ctx, p)),
                    ],
                ),
            )
        })
        .collect();
    let mut pairs = pairs;
    for (v, p) in pairs.iter_mut().zip(&f.pairs) {
        v.modes = modes::of_pair(&ctx, p, v);
    }
    let mut rows = vec![platform::gpus(&ctx), capability::row(&ctx, &pairs)];
    rows.extend(inventory::row(&ctx));
    rows.extend(stack::rows(&ctx));
    rows.push(paths::row(&ctx, &pairs));
    rows.push(usage::row(&ctx, &pairs));
    rows.push(dmabuf::row(&ctx, &pairs));
    rows.extend(efa::row(&ctx, &pairs));
    rows.extend(peer_rows);
    rows.extend(provenance::row(&ctx));
    rows.extend(platform::rows(&ctx));
    rows.extend(grace::rows(&ctx, &pairs));
    if ctx.f.grace.is_some() {
        rows.push(cdmm::row(&ctx));
    }
    rows.extend(vera::row(&ctx));
    rows.extend(consumers::rows(&ctx));
    rows.push(memlock::row(&ctx));
    rows.extend(memlock::starters_row(&ctx));
    rows.extend(gdrcopy::rows(&ctx));
    rows.extend(gin::rows(&ctx, &pairs));
    rows.push(modes::row(&ctx, &pairs));
    rows.push(silent::row(&ctx, &pairs));
    settle(&mut rows, &pairs, options.require, f);
    capability::moot(&ctx, &mut rows);
    fold::fold(&mut rows, f);
    (rows, pairs)
}
