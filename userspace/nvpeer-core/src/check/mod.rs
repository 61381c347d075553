//! `nvpeer check`: one line per readiness check with ok / warn / fail, and for every warn or
//! fail the cause and the fix. The report also carries the facts the checks were made from
//! (`facts` in the JSON).

use std::collections::BTreeMap;

use serde::Serialize;

use crate::error::{Error, Result};
use crate::host::Host;
use crate::kernel::{self, symbols, Iommu, Kallsyms};
use crate::limits::Memlock;
use crate::nccl::{self, NcclEnv, PeerMemoryVerdict};
use crate::pci::{self, Acs, Bar, PciAddress, PciDevice};
use crate::peermem::{self, LoadedModule};
use crate::providers::{self, IbCore, NvidiaDriver};
use crate::rdma::{self, RdmaDevice};
use crate::topo::Topology;
use crate::verbs::{self, DmabufProbe, Verbs};

pub mod brief;
mod consumers;
mod platform;
mod stack;

use consumers::{check_dmabuf, check_nccl_env, check_nccl_gdr, check_nccl_range, check_ucx};
use platform::{
    acs_findings, check_acs, check_bar1, check_gpus, check_iommu, check_topology, gpu_facts,
};
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
#[derive(Clone, Debug, Serialize)]
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
    /// A check that could not be made because a file was unreadable or malformed.
    fn error(id: &'static str, e: &Error) -> Self {
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
#[derive(Clone, Debug, Serialize)]
pub struct PeerClientInfo {
    pub name: String,
    pub version: Option<String>,
}

/// A GPU with its BAR1.
#[derive(Clone, Debug, Serialize)]
pub struct GpuFacts {
    pub label: String,
    pub address: PciAddress,
    pub numa_node: Option<i32>,
    pub bar1: Option<Bar>,
}

/// ACS on one bridge of a GPU-NIC path.
#[derive(Clone, Debug, Serialize)]
pub struct AcsFinding {
    pub bridge: PciAddress,
    pub gpu: String,
    pub nic: String,
    pub acs: Option<Acs>,
    pub redirecting: Vec<&'static str>,
}

/// What the DMA-BUF path (no peer-memory module needed) would have.
#[derive(Clone, Debug, Serialize)]
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

/// Everything the checks were made from.
#[derive(Clone, Debug, Serialize)]
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

/// Runs every check against `host`. Unreadable or malformed files turn into `warn` lines that
/// name the file; nothing here fails as a whole.
pub fn run(host: &Host, inputs: &Inputs) -> Report {
    let kallsyms = kernel::kallsyms(host);
    let modules = peermem::loaded_modules(host);
    let memory_peers = memory_peers(host);
    let nvidia = providers::nvidia_driver(host, &kallsyms);
    let ib_core = providers::ib_core(host, &kallsyms);
    let rdma_devices = rdma::devices(host);
    let gpus = pci::gpus(host);
    // None when the PCI or RDMA devices could not be read (their own checks say why).
    let topology = match (&gpus, &rdma_devices) {
        (Ok(g), Ok(r)) => Some(Topology::build(g.clone(), r)),
        _ => None,
    };
    let present = nccl::present_paths(host);
    let nccl_env = nccl::nccl_env(&inputs.env);

    let mut checks = Vec::new();
    let modules_ok = modules.as_ref().ok().cloned().unwrap_or_default();
    let ib_core_ok = ib_core.as_ref().ok().cloned();
    let nvidia_ok = nvidia.as_ref().ok().cloned().flatten();

    checks.push(match &modules {
        Ok(m) => check_module(m),
        Err(e) => Check::error("module", e),
    });
    if let [module] = modules_ok.as_slice() {
        checks.push(check_parameters(module, ib_core_ok.as_ref()));
    }
    checks.push(match &memory_peers {
        Ok(mp) => check_peer_clients(host, &modules_ok, mp.as_deref(), nvidia_ok.as_ref()),
        Err(e) => Check::error("peer_clients", e),
    });
    checks.push(match &nvidia {
        Ok(n) => check_nvidia_driver(n.as_ref(), &kallsyms),
        Err(e) => Check::error("nvidia_driver", e),
    });
    checks.push(match &ib_core {
        Ok(c) => check_ib_core(c, &modules_ok),
        Err(e) => Check::error("ib_core", e),
    });
    if let Some(c) = &ib_core_ok {
        checks.extend(check_driver_reload(c, &modules_ok));
        checks.extend(check_core_bugs(c, &modules_ok));
    }
    checks.push(match &rdma_devices {
        Ok(d) => check_rdma_devices(d),
        Err(e) => Check::error("rdma_devices", e),
    });
    checks.push(check_verbs(
        &inputs.verbs,
        rdma_devices.as_ref().map(Vec::len).unwrap_or(0),
    ));

    let gpu_facts = gpus.as_ref().ok().map(|g| gpu_facts(host, g));
    checks.push(match &gpus {
        Ok(g) => check_gpus(g),
        Err(e) => Check::error("gpus", e),
    });
    checks.push(match &gpu_facts {
        Some(Ok(g)) => check_bar1(g),
        Some(Err(e)) => Check::error("bar1", e),
        None => Check::not_examined("bar1", "the GPUs could not be read (see `gpus`)"),
    });
    checks.push(match &topology {
        Some(t) => check_topology(t),
        None => Check::not_examined(
            "topology",
            "PCI or RDMA devices could not be read (see `gpus`, `rdma_devices`)",
        ),
    });

    let examined: Vec<&PciDevice> = match &topology {
        Some(t) => t
            .gpus
            .iter()
            .map(|g| &g.pci)
            .chain(t.nics.iter().filter_map(|n| n.pci.as_ref()))
            .collect(),
        None => Vec::new(),
    };
    let iommu = kernel::iommu(host, &examined);
    checks.push(match &iommu {
        Ok(i) => check_iommu(i),
        Err(e) => Check::error("iommu", e),
    });
    let acs = topology.as_ref().map(|t| acs_findings(host, t));
    checks.push(match &acs {
        Some(Ok(a)) => check_acs(a),
        Some(Err(e)) => Check::error("acs", e),
        None => Check::not_examined(
            "acs",
            "PCI or RDMA devices could not be read (see `gpus`, `rdma_devices`)",
        ),
    });
    checks.push(check_memlock(inputs.memlock));

    let dmabuf = DmabufFacts {
        kernel: match kallsyms.lookup(symbols::IB_UMEM_DMABUF_GET) {
            Ok(found) => Some(found.is_some()),
            Err(_) => None,
        },
        gpu_open_kernel_module: nvidia_ok.as_ref().and_then(|n| n.open_kernel_module),
        nics: match &inputs.verbs {
            Verbs::Probed { devices } => devices
                .iter()
                .map(|d| (d.name.clone(), d.dmabuf.clone()))
                .collect(),
            _ => BTreeMap::new(),
        },
        nccl_dmabuf_enable: nccl_env.dmabuf_enable,
    };
    let verdicts: Vec<PeerMemoryVerdict> = nccl::NCCL_RULES
        .iter()
        .map(|r| nccl::replay(r, &present))
        .collect();
    let ucx = nccl::replay(&nccl::UCX_RULE, &present);
    let ucx_switch = nccl::ucx_gpu_direct_rdma(&inputs.env);

    checks.push(check_nccl_env(&nccl_env));
    for (rule, verdict) in nccl::NCCL_RULES.iter().zip(&verdicts) {
        checks.push(check_nccl_range(rule, verdict, &dmabuf));
    }
    checks.push(check_nccl_gdr(&nccl_env, topology.as_ref()));
    checks.push(check_ucx(&ucx, ucx_switch, &dmabuf));
    checks.push(check_dmabuf(
        &dmabuf,
        &inputs.verbs,
        verdicts.iter().any(|v| v.peer_memory),
    ));

    let status = checks.iter().map(|c| c.status).max().unwrap_or(Status::Ok);
    Report {
        schema: SCHEMA,
        status,
        ready: status != Status::Fail,
        checks,
        facts: Facts {
            modules: modules_ok,
            memory_peers: memory_peers.ok().flatten(),
            nvidia: nvidia_ok,
            ib_core: ib_core_ok,
            kallsyms,
            rdma_devices: rdma_devices.unwrap_or_default(),
            verbs: inputs.verbs.clone(),
            gpus: gpu_facts.and_then(Result::ok).unwrap_or_default(),
            topology,
            iommu: iommu.ok(),
            acs: acs.and_then(Result::ok).unwrap_or_default(),
            memlock: inputs.memlock,
            nccl_env,
            nccl: verdicts,
            ucx,
            ucx_gpu_direct_rdma: ucx_switch,
            dmabuf,
        },
    }
}

fn memory_peers(host: &Host) -> Result<Option<Vec<PeerClientInfo>>> {
    let dir = "kernel/mm/memory_peers";
    if !host.sys_exists(dir) {
        return Ok(None);
    }
    let mut clients = Vec::new();
    for name in host.list_sys(dir)? {
        clients.push(PeerClientInfo {
            version: host.read_sys(format!("{dir}/{name}/version"))?,
            name,
        });
    }
    Ok(Some(clients))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn write(root: &std::path::Path, rel: &str, content: &str) {
        let p = root.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, content).unwrap();
    }

    fn run_on(sys: &std::path::Path, proc: &std::path::Path) -> Report {
        run(&Host::new(sys, proc), &Inputs::fixture())
    }

    #[test]
    fn empty_host_fails_with_a_fix_for_each_missing_piece() {
        let sys = tempfile::tempdir().unwrap();
        let report = run_on(sys.path(), std::path::Path::new("/nonexistent"));
        assert_eq!(report.status, Status::Fail);
        assert!(!report.ready);
        assert_eq!(report.schema, "nvpeer.check/1");
        for id in [
            "module",
            "peer_clients",
            "nvidia_driver",
            "ib_core",
            "rdma_devices",
            "gpus",
            "nccl>=2.23.4",
            "ucx",
        ] {
            assert_eq!(report.get(id).unwrap().status, Status::Fail, "{id}");
        }
        for c in &report.checks {
            if c.status != Status::Ok {
                assert!(c.fix.is_some(), "{} has no fix", c.id);
            }
        }
    }

    #[test]
    fn recognises_our_module_and_the_stand_ins() {
        let sys = tempfile::tempdir().unwrap();
        let proc = tempfile::tempdir().unwrap();
        let s = sys.path();
        write(s, "module/nvidia_peermem/version", "0.1.0\n");
        write(
            s,
            "module/nvidia_peermem/nvpeer/implementation",
            "nvpeer 0.1.0\n",
        );
        write(
            s,
            "module/nvidia_peermem/parameters/peerdirect_support",
            "0\n",
        );
        write(
            s,
            "module/nvidia_peermem/parameters/persistent_api_support",
            "1\n",
        );
        write(s, "module/nv_p2p_sim/parameters/api", "535\n");
        write(
            s,
            "module/peer_core_sim/parameters/generation",
            "5x-unmaps\n",
        );
        write(s, "module/peer_core_sim/parameters/sysfs", "Y\n");
        write(s, "kernel/mm/memory_peers/nv_mem/version", "0.1.0\n");
        write(s, "class/infiniband/rxe0/ports/1/state", "4: ACTIVE\n");
        write(s, "class/infiniband/rxe0/ports/1/link_layer", "Ethernet\n");
        write(
            proc.path(),
            "kallsyms",
            "0 T nvidia_p2p_get_pages\t[nv_p2p_sim]\n0 T nvidia_p2p_get_pages_persistent\t[nv_p2p_sim]\n\
             0 T ib_register_peer_memory_client\t[peer_core_sim]\n",
        );
        let report = run_on(s, proc.path());
        let status = |id: &str| report.get(id).unwrap().status;
        let detail = |id: &str| report.get(id).unwrap().detail.clone();
        assert_eq!(status("module"), Status::Ok, "{:?}", report.get("module"));
        assert!(detail("module").contains("nvpeer 0.1.0 loaded as nvidia_peermem"));
        assert_eq!(status("parameters"), Status::Ok);
        assert_eq!(status("peer_clients"), Status::Ok);
        assert!(detail("peer_clients").contains("nv_mem 0.1.0"));
        assert_eq!(status("nvidia_driver"), Status::Ok);
        assert!(detail("nvidia_driver").contains("nv_p2p_sim (test stand-in"));
        assert!(detail("nvidia_driver").contains("nvidia_p2p_get_pages_persistent"));
        assert_eq!(status("ib_core"), Status::Ok);
        assert!(detail("ib_core").contains("peer_core_sim (test stand-in"));
        assert!(detail("ib_core").contains("generation 5x-unmaps"));
        assert_eq!(status("rdma_devices"), Status::Ok);
        for id in [
            "nccl<=2.9.6",
            "nccl=2.9.8..2.21.5",
            "nccl=2.22.3",
            "nccl>=2.23.4",
            "ucx",
        ] {
            assert_eq!(status(id), Status::Ok, "{id}");
        }
        // No GPU in this tree: that is the only failure.
        let failed: Vec<&str> = report
            .checks
            .iter()
            .filter(|c| c.status == Status::Fail)
            .map(|c| c.id)
            .collect();
        assert_eq!(failed, ["gpus"]);
    }

    /// `peerdirect_support=0` on a 4.1-5.0 core: NVIDIA's module registers a client that core
    /// misreads (a failure); ours detects the core and follows it (fine, said so).
    #[test]
    fn contradicting_peerdirect_support_fails_only_for_modules_that_obey_it() {
        for (marker, want) in [(Some("nvpeer 0.1.0\n"), Status::Ok), (None, Status::Fail)] {
            let sys = tempfile::tempdir().unwrap();
            let proc = tempfile::tempdir().unwrap();
            let s = sys.path();
            write(s, "module/nvidia_peermem/version", "0.1.0\n");
            if let Some(m) = marker {
                write(s, "module/nvidia_peermem/nvpeer/implementation", m);
                write(s, "module/nvidia_peermem/nvpeer/core", "4x\n");
            }
            write(
                s,
                "module/nvidia_peermem/parameters/peerdirect_support",
                "0\n",
            );
            write(s, "module/ib_core/version", "4.9-7.1.0.0\n");
            write(
                proc.path(),
                "kallsyms",
                "0 T ib_register_peer_memory_client\t[ib_core]\n0 T ib_get_peer_private_data\t[ib_core]\n",
            );
            let report = run_on(s, proc.path());
            let p = report.get("parameters").unwrap();
            assert_eq!(p.status, want, "{marker:?}: {}", p.detail);
            if marker.is_some() {
                assert!(p.detail.contains("nvpeer follows"), "{}", p.detail);
            }
        }
    }

    #[test]
    fn memory_peers_off_warns_and_older_nccl_loses_detection() {
        let sys = tempfile::tempdir().unwrap();
        let s = sys.path();
        write(s, "module/nvidia_peermem/version", "0.1.0\n");
        write(
            s,
            "module/nvidia_peermem/nvpeer/implementation",
            "nvpeer 0.1.0\n",
        );
        write(s, "module/nvidia_peermem/nvpeer/stats/registrations", "3\n");
        write(s, "module/peer_core_sim/parameters/sysfs", "N\n");
        let report = run_on(s, std::path::Path::new("/nonexistent"));
        let pc = report.get("peer_clients").unwrap();
        assert_eq!(pc.status, Status::Warn);
        assert!(
            pc.detail.contains("memory_peers is absent") && pc.detail.contains("registrations=3"),
            "{}",
            pc.detail
        );
        assert_eq!(report.get("nccl=2.22.3").unwrap().status, Status::Warn);
        assert_eq!(report.get("nccl>=2.23.4").unwrap().status, Status::Ok);
        assert_eq!(report.get("ucx").unwrap().status, Status::Ok);
    }

    #[test]
    fn two_implementations_loaded_is_a_failure() {
        let sys = tempfile::tempdir().unwrap();
        write(sys.path(), "module/nvidia_peermem/version", "550.163.01\n");
        write(sys.path(), "module/nv_peer_mem/version", "1.3-0\n");
        let report = run_on(sys.path(), std::path::Path::new("/nonexistent"));
        let module = report.get("module").unwrap();
        assert_eq!(module.status, Status::Fail);
        assert!(module.detail.contains("NVIDIA nvidia-peermem"));
        assert!(module.detail.contains("Mellanox nv_peer_mem"));
        assert!(report.get("parameters").is_none());
    }

    #[test]
    fn legacy_parameter_on_a_new_core_and_the_reverse() {
        // NVIDIA's module obeys the parameter (ours follows the core: the test above).
        let sys = tempfile::tempdir().unwrap();
        let s = sys.path();
        write(s, "module/nvidia_peermem/version", "550.163.01\n");
        write(
            s,
            "module/nvidia_peermem/parameters/peerdirect_support",
            "0\n",
        );
        write(s, "module/peer_core_sim/parameters/generation", "4x\n");
        let report = run_on(s, std::path::Path::new("/nonexistent"));
        assert_eq!(report.get("parameters").unwrap().status, Status::Fail);
        write(
            s,
            "module/nvidia_peermem/parameters/peerdirect_support",
            "1\n",
        );
        write(
            s,
            "module/peer_core_sim/parameters/generation",
            "5x-unmaps\n",
        );
        let report = run_on(s, std::path::Path::new("/nonexistent"));
        assert_eq!(report.get("parameters").unwrap().status, Status::Warn);
    }

    /// NVIDIA's module (no nvpeer marker) and a MOFED core in `exporter`, with kallsyms.
    fn nvidia_module_on(
        exporter: &str,
        mofed: &str,
        persistent: Option<&str>,
    ) -> (tempfile::TempDir, tempfile::TempDir) {
        let sys = tempfile::tempdir().unwrap();
        let proc = tempfile::tempdir().unwrap();
        let s = sys.path();
        write(s, "module/nvidia_peermem/version", "550.163.01\n");
        write(
            s,
            "module/nvidia_peermem/parameters/peerdirect_support",
            "0\n",
        );
        if let Some(p) = persistent {
            write(
                s,
                "module/nvidia_peermem/parameters/persistent_api_support",
                p,
            );
        }
        write(s, "module/ib_core/version", mofed);
        write(
            proc.path(),
            "kallsyms",
            &format!(
                "0 T ib_register_peer_memory_client\t[{exporter}]\n\
                 0 T ib_umem_stop_invalidation_notifier\t[{exporter}]\n"
            ),
        );
        (sys, proc)
    }

    #[test]
    fn ib_uverbs_held_without_a_holders_directory() {
        let (sys, proc) = nvidia_module_on("ib_uverbs", "24.07-0.6.1\n", Some("1\n"));
        // No holders directory and no refcnt: kallsyms alone says the module uses ib_uverbs.
        let report = run_on(sys.path(), proc.path());
        let reload = report.get("driver_reload").unwrap();
        assert_eq!(reload.status, Status::Warn);
        assert!(
            reload.detail.contains(
                "nvidia_peermem (kallsyms: ib_uverbs exports the core it registers with)"
            ),
            "{}",
            reload.detail
        );
        assert!(reload
            .fix
            .as_deref()
            .unwrap()
            .contains("rmmod nvidia_peermem;"));
        // A refcnt of 0: nothing holds ib_uverbs, whatever is loaded.
        write(sys.path(), "module/ib_uverbs/refcnt", "0\n");
        let report = run_on(sys.path(), proc.path());
        assert_eq!(report.get("driver_reload").unwrap().status, Status::Ok);
        // A holders directory that does not list the module: it does not hold ib_uverbs.
        fs::create_dir_all(sys.path().join("module/ib_uverbs/holders/mlx5_ib")).unwrap();
        write(sys.path(), "module/ib_uverbs/refcnt", "1\n");
        let report = run_on(sys.path(), proc.path());
        assert_eq!(report.get("driver_reload").unwrap().status, Status::Ok);
    }

    #[test]
    fn the_stop_notifier_bug_by_release_and_client() {
        // NVIDIA < 560 (no persistent_api_support): an invalidating nv_mem meets the
        // self-deadlock half of the bug.
        let (sys, proc) = nvidia_module_on("ib_core", "5.4-3.0.3\n", None);
        let report = run_on(sys.path(), proc.path());
        let bugs = report.get("core_bugs").unwrap();
        assert_eq!(bugs.status, Status::Warn);
        assert!(
            bugs.detail.contains("nvidia_peermem is invalidating")
                && bugs.detail.contains("self-deadlocks (a hung task"),
            "{}",
            bugs.detail
        );
        // The ib_core exporter is no reason for the ib_uverbs warning.
        assert!(report.get("driver_reload").is_none());
        for (version, persistent, says) in [
            ("25.04-0.6.1\n", Some("1\n"), "has the fix"),
            ("5.4-1.0.3.0\n", Some("1\n"), "predates"),
            ("24.10\n", Some("1\n"), "no claim"),
            ("OFED-internal-24.10\n", Some("1\n"), "no claim"),
        ] {
            let (sys, proc) = nvidia_module_on("ib_uverbs", version, persistent);
            let report = run_on(sys.path(), proc.path());
            let bugs = report.get("core_bugs").unwrap();
            assert_eq!(bugs.status, Status::Ok, "{version}: {bugs:?}");
            assert!(bugs.detail.contains(says), "{version}: {}", bugs.detail);
        }
        // No peer-memory module loaded: the bug is named, nothing meets it.
        let (sys, proc) = nvidia_module_on("ib_uverbs", "24.10-3.2.5\n", Some("1\n"));
        fs::remove_dir_all(sys.path().join("module/nvidia_peermem")).unwrap();
        let report = run_on(sys.path(), proc.path());
        let bugs = report.get("core_bugs").unwrap();
        assert_eq!(bugs.status, Status::Ok);
        assert!(
            bugs.detail.contains("no peer-memory module is loaded"),
            "{}",
            bugs.detail
        );
        assert!(report.get("driver_reload").is_none());
        // A core without a MOFED version (NV-Kernels, Ubuntu): no claim at all.
        fs::remove_file(sys.path().join("module/ib_core/version")).unwrap();
        let report = run_on(sys.path(), proc.path());
        assert!(report.get("core_bugs").is_none());
        assert!(report
            .get("ib_core")
            .unwrap()
            .detail
            .contains("not MOFED's"));
    }

    #[test]
    fn a_stand_in_marker_wins_over_its_parameter_and_the_module_is_compared() {
        let sys = tempfile::tempdir().unwrap();
        let proc = tempfile::tempdir().unwrap();
        let s = sys.path();
        write(
            s,
            "module/nvidia_peermem/nvpeer/implementation",
            "nvpeer 0.1.0\n",
        );
        write(s, "module/nvidia_peermem/nvpeer/core", "5x\n");
        write(
            s,
            "module/peer_core_sim/parameters/generation",
            "5x-unmaps\n",
        );
        write(
            proc.path(),
            "kallsyms",
            "0 T ib_register_peer_memory_client\t[peer_core_sim]\n",
        );
        // The stand-in exports no marker: its parameter says 5x-unmaps, the module 5x.
        let report = run_on(s, proc.path());
        let c = report.get("ib_core").unwrap();
        assert_eq!(c.status, Status::Warn);
        assert!(
            c.detail.contains("nvidia_peermem detected 5x (/sys/module/nvidia_peermem/nvpeer/core) where peer_core_sim's generation parameter says 5x-unmaps"),
            "{}",
            c.detail
        );
        assert!(report.get("core_bugs").is_none() && report.get("driver_reload").is_none());
        // A marker it exports is what a client sees.
        write(
            proc.path(),
            "kallsyms",
            "0 T ib_register_peer_memory_client\t[peer_core_sim]\n0 T ib_get_peer_private_data\t[peer_core_sim]\n",
        );
        write(s, "module/nvidia_peermem/nvpeer/core", "4x\n");
        let report = run_on(s, proc.path());
        let c = report.get("ib_core").unwrap();
        assert_eq!(c.status, Status::Ok, "{c:?}");
        assert!(
            c.detail
                .contains("generation 4x: MOFED 4.1-5.0 (legacy PeerDirect) (from kallsyms)"),
            "{}",
            c.detail
        );
        assert!(
            c.detail.contains("nvidia_peermem detected 4x too"),
            "{}",
            c.detail
        );
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(
            json["facts"]["ib_core"]["peer_core"]["generation_from"],
            "kallsyms"
        );
    }

    #[test]
    fn malformed_files_become_warnings_that_name_the_file() {
        let sys = tempfile::tempdir().unwrap();
        let s = sys.path();
        fs::create_dir_all(s.join("devices/pci0000:00/0000:00:01.0")).unwrap();
        write(s, "devices/pci0000:00/0000:00:01.0/vendor", "0x10de\n");
        write(s, "devices/pci0000:00/0000:00:01.0/class", "0x030200\n");
        write(s, "devices/pci0000:00/0000:00:01.0/numa_node", "zero\n");
        fs::create_dir_all(s.join("bus/pci/devices")).unwrap();
        std::os::unix::fs::symlink(
            "../../../devices/pci0000:00/0000:00:01.0",
            s.join("bus/pci/devices/0000:00:01.0"),
        )
        .unwrap();
        let report = run_on(s, std::path::Path::new("/nonexistent"));
        let gpus = report.get("gpus").unwrap();
        assert_eq!(gpus.status, Status::Warn);
        assert!(
            gpus.detail.contains("numa_node") && gpus.detail.contains("\"zero\""),
            "{}",
            gpus.detail
        );
    }

    #[test]
    fn memlock_limits() {
        assert_eq!(
            check_memlock(Some(Memlock {
                soft: None,
                hard: None
            }))
            .status,
            Status::Ok
        );
        let c = check_memlock(Some(Memlock {
            soft: Some(8 << 20),
            hard: Some(8 << 20),
        }));
        assert_eq!(c.status, Status::Warn);
        assert!(c.detail.contains("8 MiB"));
    }
}
