// SPDX-License-Identifier: MIT OR Apache-2.0
//! `nvpeer check`: one line per readiness check with ok / warn / fail, and for every warn or
//! fail the cause and the fix. The report also carries the facts the checks were made from
//! (`facts` in the JSON).
//!
//! Two steps: [`gather`] reads every fact once (sysfs, procfs, the process's environment and
//! limits, the libibverbs probe) into [`Facts`]; [`judge`] makes every check from those facts
//! alone. So a saved `check --json` from another node is judged again by [`read_facts`] and
//! [`report`] (`nvpeer check --facts FILE`), and the rules are tested on hand-made facts.

use std::collections::BTreeMap;

use std::io::Read;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::host::Host;
use crate::kernel::{Iommu, Kallsyms};
use crate::limits::Memlock;
use crate::nccl::{self, NcclEnv, PeerMemoryVerdict};
use crate::pci::{Acs, Bar, PciAddress};
use crate::peermem::LoadedModule;
use crate::providers::{IbCore, NvidiaDriver};
use crate::rdma::RdmaDevice;
use crate::topo::Topology;
use crate::verbs::{self, DmabufProbe, Verbs};

pub mod brief;
mod consumers;
mod gather;
mod installed;
mod platform;
#[cfg(test)]
mod rule_tests;
mod stack;
#[cfg(test)]
mod tests;

pub use gather::gather;
use installed::check_modprobe_target;

use consumers::{check_dmabuf, check_nccl_env, check_nccl_gdr, check_nccl_range, check_ucx};
use platform::{check_acs, check_bar1, check_gpus, check_iommu, check_topology};
use stack::{
    check_core_bugs, check_driver_reload, check_ib_core, check_memlock, check_module,
    check_nvidia_driver, check_parameters, check_peer_clients, check_rdma_devices, check_verbs,
};

/// The schema of `nvpeer check --json`.
pub const SCHEMA: &str = "nvpeer.check/1";

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Ok,
    Warn,
    Fail,
}

impl Status {
    pub fn label(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Warn => "warn",
            Self::Fail => "fail",
        }
    }
}

/// The outcome of one check.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Check {
    /// Stable identifier, e.g. `module`.
    pub id: &'static str,
    pub status: Status,
    /// What was found (for warn and fail: the cause).
    pub detail: String,
    /// For warn and fail: what to do about it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

impl Check {
    fn ok(id: &'static str, detail: impl Into<String>) -> Self {
        Self {
            id,
            status: Status::Ok,
            detail: detail.into(),
            fix: None,
        }
    }
    fn warn(id: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Self {
        Self {
            id,
            status: Status::Warn,
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }
    fn fail(id: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Self {
        Self {
            id,
            status: Status::Fail,
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }
    /// A check that depends on facts another check could not read.
    fn not_examined(id: &'static str, why: &str) -> Self {
        Self::warn(
            id,
            format!("not examined: {why}"),
            "fix the unreadable files the other check names",
        )
    }
    /// A check that could not be made because a file was unreadable or malformed (`e`: the
    /// error as [`Facts::unreadable`] keeps it).
    fn error(id: &'static str, e: &str) -> Self {
        Self::warn(
            id,
            format!("could not check: {e}"),
            "the file should be the kernel's text; check its permissions (some need root) or report the content as a bug",
        )
    }
}

/// What the checks need beyond sysfs and procfs: the process environment and probes that ask
/// the running system directly.
#[derive(Clone, Debug)]
pub struct Inputs {
    /// `NCCL_*` and `UCX_*` variables.
    pub env: BTreeMap<String, String>,
    /// `None`: not measured.
    pub memlock: Option<Memlock>,
    pub verbs: Verbs,
}

impl Inputs {
    /// The running process and host: environment, getrlimit, and libibverbs when `host` is the
    /// live `/sys` (probing the kernel about another tree would mix two hosts).
    pub fn live(host: &Host) -> Self {
        Self {
            env: nccl::relevant_env(),
            memlock: Some(Memlock::current()),
            verbs: if host.is_live_sysfs() {
                verbs::probe()
            } else {
                Verbs::Skipped {
                    reason: "--sysfs-root is not /sys".to_owned(),
                }
            },
        }
    }

    /// Nothing measured: for fixture trees.
    pub fn fixture() -> Self {
        Self {
            env: BTreeMap::new(),
            memlock: None,
            verbs: Verbs::Skipped {
                reason: "fixture tree".to_owned(),
            },
        }
    }
}

/// One peer client in `/sys/kernel/mm/memory_peers`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PeerClientInfo {
    pub name: String,
    pub version: Option<String>,
}

/// A GPU with its BAR1.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct GpuFacts {
    pub label: String,
    pub address: PciAddress,
    /// PCI vendor and device id.
    pub vendor: u16,
    pub device: u16,
    pub numa_node: Option<i32>,
    pub bar1: Option<Bar>,
}

/// ACS on one bridge of a GPU-NIC path.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct AcsFinding {
    pub bridge: PciAddress,
    pub gpu: String,
    pub nic: String,
    pub acs: Option<Acs>,
    /// The names of the enabled control bits that hurt P2P ([`Acs::p2p_hurting_bits`]).
    pub redirecting: Vec<String>,
}

/// What the DMA-BUF path (no peer-memory module needed) would have.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DmabufFacts {
    /// `ib_umem_dmabuf_get` is exported (kernel >= 5.12 ib_core); `None` = unknown.
    pub kernel: Option<bool>,
    /// The GPU driver is the open kernel module; `None` = unknown.
    pub gpu_open_kernel_module: Option<bool>,
    /// NCCL's probe per verbs device.
    pub nics: BTreeMap<String, DmabufProbe>,
    pub nccl_dmabuf_enable: bool,
}

impl DmabufFacts {
    /// Every part known and positive (CUDA >= 11.7 is not checked).
    fn possible(&self) -> bool {
        self.kernel == Some(true)
            && self.gpu_open_kernel_module == Some(true)
            && self.nccl_dmabuf_enable
            && self
                .nics
                .values()
                .any(|p| matches!(p, DmabufProbe::Supported { .. }))
    }
}

/// Our module's counters that `peer_clients` shows when `memory_peers` is absent.
pub const MODULE_COUNTERS: [&str; 3] = ["acquired", "registrations", "live_contexts"];

/// Everything the checks are made from ([`gather`]), and all that [`judge`] reads: the
/// `facts` of `nvpeer check --json`, which [`read_facts`] reads back.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Facts {
    pub modules: Vec<LoadedModule>,
    /// `None` when `/sys/kernel/mm/memory_peers` does not exist.
    pub memory_peers: Option<Vec<PeerClientInfo>>,
    pub nvidia: Option<NvidiaDriver>,
    pub ib_core: Option<IbCore>,
    pub kallsyms: Kallsyms,
    pub rdma_devices: Vec<RdmaDevice>,
    pub verbs: Verbs,
    pub gpus: Vec<GpuFacts>,
    pub topology: Option<Topology>,
    pub iommu: Option<Iommu>,
    pub acs: Vec<AcsFinding>,
    pub memlock: Option<Memlock>,
    pub nccl_env: NcclEnv,
    pub nccl: Vec<PeerMemoryVerdict>,
    pub ucx: PeerMemoryVerdict,
    /// `UCX_IB_GPU_DIRECT_RDMA`: `Some(false)` = disabled by the user.
    pub ucx_gpu_direct_rdma: Option<bool>,
    pub dmabuf: DmabufFacts,
    /// Our modules' [`MODULE_COUNTERS`] as written: module name -> counter -> value.
    pub module_counters: BTreeMap<String, BTreeMap<String, String>>,
    /// What `modprobe nvidia-peermem` would load (depmod's entry); `None`: no `modules.dep`.
    #[serde(default)]
    pub modprobe_target: Option<crate::modprobe::ModprobeTarget>,
    /// The facts that could not be read, by facts field (`modules`, `memory_peers`, `nvidia`,
    /// `ib_core`, `rdma_devices`, `gpus`, `bars` for the GPUs' BAR1, `iommu`, `acs`) -> why;
    /// their checks say "could not check". Facts without it (and so without the other fields
    /// added with `--facts`) come from an older release and are refused.
    pub unreadable: BTreeMap<String, String>,
}

/// All checks of one run: `nvpeer check --json` prints this.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub schema: &'static str,
    /// The worst status.
    pub status: Status,
    /// No check failed.
    pub ready: bool,
    pub checks: Vec<Check>,
    pub facts: Facts,
}

impl Report {
    /// The check with this id.
    pub fn get(&self, id: &str) -> Option<&Check> {
        self.checks.iter().find(|c| c.id == id)
    }
}

/// Runs every check against `host`: [`gather`], then [`judge`]. Unreadable or malformed files
/// turn into `warn` lines that name the file; nothing here fails as a whole.
pub fn run(host: &Host, inputs: &Inputs) -> Report {
    report(gather(host, inputs))
}

/// The report of `facts`: every check [`judge`] makes, the worst status, and the facts.
pub fn report(facts: Facts) -> Report {
    let checks = judge(&facts);
    let status = checks.iter().map(|c| c.status).max().unwrap_or(Status::Ok);
    Report {
        schema: SCHEMA,
        status,
        ready: status != Status::Fail,
        checks,
        facts,
    }
}

/// Every check, in report order, made from `facts` alone (no file is read here).
pub fn judge(f: &Facts) -> Vec<Check> {
    let unreadable = |fact: &str| f.unreadable.get(fact).map(String::as_str);
    let mut checks = Vec::new();
    checks.push(match unreadable("modules") {
        Some(e) => Check::error("module", e),
        None => check_module(&f.modules),
    });
    if let [module] = f.modules.as_slice() {
        checks.push(check_parameters(module, f.ib_core.as_ref()));
    }
    checks.push(match unreadable("memory_peers") {
        Some(e) => Check::error("peer_clients", e),
        None => check_peer_clients(
            &f.modules,
            f.memory_peers.as_deref(),
            f.nvidia.as_ref(),
            &f.module_counters,
        ),
    });
    checks.push(match unreadable("nvidia") {
        Some(e) => Check::error("nvidia_driver", e),
        None => check_nvidia_driver(f.nvidia.as_ref(), &f.kallsyms),
    });
    checks.push(match (unreadable("ib_core"), &f.ib_core) {
        (Some(e), _) => Check::error("ib_core", e),
        (None, Some(c)) => check_ib_core(c, &f.modules),
        (None, None) => Check::not_examined("ib_core", "the facts have no ib_core"),
    });
    checks.extend(match unreadable("modprobe_target") {
        Some(e) => Some(Check::error("modprobe", e)),
        None => check_modprobe_target(f.modprobe_target.as_ref(), &f.modules),
    });
    if let Some(c) = &f.ib_core {
        checks.extend(check_driver_reload(c, &f.modules));
        checks.extend(check_core_bugs(c, &f.modules));
    }
    checks.push(match unreadable("rdma_devices") {
        Some(e) => Check::error("rdma_devices", e),
        None => check_rdma_devices(&f.rdma_devices),
    });
    checks.push(check_verbs(&f.verbs, f.rdma_devices.len()));
    checks.push(match unreadable("gpus") {
        Some(e) => Check::error("gpus", e),
        None => check_gpus(&f.gpus),
    });
    checks.push(match (unreadable("gpus"), unreadable("bars")) {
        (Some(_), _) => Check::not_examined("bar1", "the GPUs could not be read (see `gpus`)"),
        (None, Some(e)) => Check::error("bar1", e),
        (None, None) => check_bar1(&f.gpus),
    });
    const NO_TOPOLOGY: &str = "PCI or RDMA devices could not be read (see `gpus`, `rdma_devices`)";
    checks.push(match &f.topology {
        Some(t) => check_topology(t),
        None => Check::not_examined("topology", NO_TOPOLOGY),
    });
    checks.push(match (unreadable("iommu"), &f.iommu) {
        (Some(e), _) => Check::error("iommu", e),
        (None, Some(i)) => check_iommu(i),
        (None, None) => Check::not_examined("iommu", "the facts have no iommu"),
    });
    checks.push(match (&f.topology, unreadable("acs")) {
        (None, _) => Check::not_examined("acs", NO_TOPOLOGY),
        (Some(_), Some(e)) => Check::error("acs", e),
        (Some(_), None) => check_acs(&f.acs),
    });
    checks.push(check_memlock(f.memlock));
    checks.push(check_nccl_env(&f.nccl_env));
    for rule in &nccl::NCCL_RULES {
        checks.push(match f.nccl.iter().find(|v| v.consumer == rule.id) {
            Some(v) => check_nccl_range(rule, v, &f.dmabuf),
            None => Check::not_examined(rule.id, "the facts have no verdict for it"),
        });
    }
    checks.push(check_nccl_gdr(&f.nccl_env, f.topology.as_ref()));
    checks.push(check_ucx(&f.ucx, f.ucx_gpu_direct_rdma, &f.dmabuf));
    checks.push(check_dmabuf(
        &f.dmabuf,
        &f.verbs,
        f.nccl.iter().any(|v| v.peer_memory),
    ));
    checks
}

/// Why a saved report could not be judged again.
#[derive(Debug, thiserror::Error)]
pub enum FactsError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: not JSON: {source}")]
    Json {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("{path}: schema {schema:?}: not a {SCHEMA} report")]
    Schema { path: PathBuf, schema: String },
    #[error("{path}: facts without `unreadable`, from an nvpeer older than `check --facts`: its verdicts cannot be reproduced; run `nvpeer check --json` of this release there")]
    OlderRelease { path: PathBuf },
    #[error("{path}: not a `nvpeer check --json` report or its facts: {source}")]
    Shape {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
}

/// The facts of a saved `nvpeer check --json` (or of a bare facts object) in the file at `path`,
/// `-` for standard input.
pub fn read_facts(path: &str) -> Result<Facts, FactsError> {
    let mut bytes = Vec::new();
    let result = if path == "-" {
        std::io::stdin().lock().read_to_end(&mut bytes)
    } else {
        std::fs::File::open(path).and_then(|mut f| f.read_to_end(&mut bytes))
    };
    result.map_err(|source| FactsError::Read {
        path: PathBuf::from(path),
        source,
    })?;
    parse_facts(&bytes, path)
}

/// [`read_facts`] on text already read; `source` names it in errors.
pub fn parse_facts(bytes: &[u8], source: &str) -> Result<Facts, FactsError> {
    let path = || PathBuf::from(source);
    let mut value: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|source| FactsError::Json {
            path: path(),
            source,
        })?;
    // A whole report: its schema must be ours, and its facts are what is judged.
    if let Some(schema) = value.get("schema") {
        if schema != SCHEMA {
            return Err(FactsError::Schema {
                path: path(),
                schema: schema
                    .as_str()
                    .map_or_else(|| schema.to_string(), str::to_owned),
            });
        }
        value = value
            .get_mut("facts")
            .map(serde_json::Value::take)
            .unwrap_or(serde_json::Value::Null);
    }
    if value.get("modules").is_some() && value.get("unreadable").is_none() {
        return Err(FactsError::OlderRelease { path: path() });
    }
    serde_json::from_value(value).map_err(|source| FactsError::Shape {
        path: path(),
        source,
    })
}
