//! `nvpeer check`: one line per readiness check with ok / warn / fail, and for every warn or
//! fail the cause and the fix.

use serde::Serialize;

use crate::error::Result;
use crate::host::Host;
use crate::peermem::{self, Implementation};

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
    /// What was found.
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
}

/// All checks of one run.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub checks: Vec<Check>,
}

impl Report {
    /// The worst status found.
    pub fn status(&self) -> Status {
        self.checks
            .iter()
            .map(|c| c.status)
            .max()
            .unwrap_or(Status::Ok)
    }
}

/// Runs every check against `host`.
pub fn run(host: &Host) -> Result<Report> {
    let mut checks = Vec::new();
    let modules = peermem::loaded_modules(host)?;
    checks.push(check_module(&modules));
    if let [module] = modules.as_slice() {
        checks.push(check_parameters(module));
    }
    checks.push(check_peer_clients(host)?);
    checks.push(check_p2p_provider(host)?);
    checks.push(check_rdma_devices(host)?);
    Ok(Report { checks })
}

fn check_module(modules: &[peermem::LoadedModule]) -> Check {
    match modules {
        [] => Check::fail(
            "module",
            "no peer-memory module loaded (neither nvidia_peermem nor nv_peer_mem)",
            "load it: `modprobe nvidia_peermem` after `make install`, or `insmod kmod/nvidia_peermem.ko`",
        ),
        [m] => {
            let version = m.version.as_deref().unwrap_or("(no version)");
            let detail = format!("{} {} loaded as {}", m.implementation.describe(), version, m.name);
            if m.implementation == Implementation::Nvpeer {
                Check::ok("module", detail)
            } else {
                Check::warn(
                    "module",
                    detail,
                    "GPUDirect RDMA works with it, but nvpeer's statistics and fixes are absent; see README 'Replacing nv_peer_mem / nvidia-peermem'",
                )
            }
        }
        many => Check::fail(
            "module",
            format!(
                "{} peer-memory modules loaded at once: {}",
                many.len(),
                many.iter()
                    .map(|m| format!("{} ({})", m.name, m.implementation.describe()))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            "only one may be loaded: `rmmod` all but one (they register the same client name nv_mem)",
        ),
    }
}

fn check_parameters(module: &peermem::LoadedModule) -> Check {
    if module.parameters.is_empty() {
        return Check::ok("parameters", format!("{} has no parameters", module.name));
    }
    let list = module
        .parameters
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ");
    Check::ok("parameters", list)
}

fn check_peer_clients(host: &Host) -> Result<Check> {
    let dir = "kernel/mm/memory_peers";
    if !host.sys_exists(dir) {
        return Ok(Check::warn(
            "peer_clients",
            "/sys/kernel/mm/memory_peers is absent (no MOFED peer-memory core, or MOFED >= 24.04 on a kernel without mm_kobj)",
            "NCCL >= 2.23 and UCX still detect GPUDirect RDMA through /sys/module/nvidia_peermem/version; older NCCL needs memory_peers",
        ));
    }
    let mut clients = Vec::new();
    for name in host.list_sys(dir)? {
        let version = host.read_sys(format!("{dir}/{name}/version"))?;
        clients.push(format!("{name} {}", version.unwrap_or_default()));
    }
    if clients.is_empty() {
        Ok(Check::fail(
            "peer_clients",
            "memory_peers exists but no client is registered",
            "load the peer-memory module; if it is loaded, its registration failed: see dmesg",
        ))
    } else {
        Ok(Check::ok("peer_clients", clients.join(", ")))
    }
}

fn check_p2p_provider(host: &Host) -> Result<Check> {
    if let Some(v) = host.read_sys("module/nvidia/version")? {
        return Ok(Check::ok("nvidia_driver", format!("nvidia {v}")));
    }
    if host.sys_exists("module/nv_p2p_sim") {
        return Ok(Check::ok(
            "nvidia_driver",
            "nv_p2p_sim (test stand-in for nvidia.ko's P2P API)",
        ));
    }
    Ok(Check::fail(
        "nvidia_driver",
        "nvidia.ko is not loaded: nothing provides the nvidia_p2p_* API",
        "install and load the NVIDIA GPU driver (`modprobe nvidia`)",
    ))
}

fn check_rdma_devices(host: &Host) -> Result<Check> {
    let devices = host.list_sys("class/infiniband")?;
    if devices.is_empty() {
        return Ok(Check::fail(
            "rdma_devices",
            "no RDMA device in /sys/class/infiniband",
            "load the NIC's RDMA driver (e.g. mlx5_ib) or MOFED (`/etc/init.d/openibd start`)",
        ));
    }
    let mut parts = Vec::new();
    for dev in &devices {
        for port in host.list_sys(format!("class/infiniband/{dev}/ports"))? {
            let base = format!("class/infiniband/{dev}/ports/{port}");
            let state = host.read_sys(format!("{base}/state"))?.unwrap_or_default();
            let link = host.read_sys(format!("{base}/link_layer"))?.unwrap_or_default();
            parts.push(format!("{dev}/{port} {state} {link}"));
        }
    }
    Ok(Check::ok("rdma_devices", parts.join(", ")))
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

    #[test]
    fn empty_host_fails_with_a_fix_for_each_missing_piece() {
        let sys = tempfile::tempdir().unwrap();
        let report = run(&Host::new(sys.path(), "/nonexistent")).unwrap();
        assert_eq!(report.status(), Status::Fail);
        let module = report.checks.iter().find(|c| c.id == "module").unwrap();
        assert_eq!(module.status, Status::Fail);
        for c in &report.checks {
            if c.status != Status::Ok {
                assert!(c.fix.is_some(), "{} has no fix", c.id);
            }
        }
    }

    #[test]
    fn recognises_our_module_and_reports_ready() {
        let sys = tempfile::tempdir().unwrap();
        let s = sys.path();
        write(s, "module/nvidia_peermem/version", "0.1.0\n");
        write(s, "module/nvidia_peermem/nvpeer/implementation", "nvpeer 0.1.0\n");
        write(s, "module/nvidia_peermem/parameters/peerdirect_support", "0\n");
        write(s, "module/nvidia/version", "595.45.04\n");
        write(s, "kernel/mm/memory_peers/nv_mem/version", "0.1.0\n");
        write(s, "class/infiniband/mlx5_0/ports/1/state", "4: ACTIVE\n");
        write(s, "class/infiniband/mlx5_0/ports/1/link_layer", "InfiniBand\n");
        let report = run(&Host::new(s, "/nonexistent")).unwrap();
        assert_eq!(report.status(), Status::Ok, "{report:?}");
        assert!(report.checks[0].detail.contains("nvpeer 0.1.0 loaded as nvidia_peermem"));
    }

    #[test]
    fn two_implementations_loaded_is_a_failure() {
        let sys = tempfile::tempdir().unwrap();
        write(sys.path(), "module/nvidia_peermem/version", "550.163.01\n");
        write(sys.path(), "module/nv_peer_mem/version", "1.3-0\n");
        let report = run(&Host::new(sys.path(), "/nonexistent")).unwrap();
        let module = &report.checks[0];
        assert_eq!(module.status, Status::Fail);
        assert!(module.detail.contains("NVIDIA nvidia-peermem"));
        assert!(module.detail.contains("Mellanox nv_peer_mem"));
    }
}
