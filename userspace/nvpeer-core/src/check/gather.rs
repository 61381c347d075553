// SPDX-License-Identifier: MIT OR Apache-2.0
//! The first step of `nvpeer check`: every fact read once from sysfs, procfs and the process
//! ([`Inputs`]). Nothing here judges; a file that cannot be read is recorded in
//! [`Facts::unreadable`] for the judging step to report.

use std::collections::BTreeMap;

use crate::error::{Error, Result};
use crate::host::Host;
use crate::kernel::{self, symbols};
use crate::nccl::{self, PeerMemoryVerdict};
use crate::pci::{self, Acs, PciAddress, PciDevice};
use crate::peermem::{self, Implementation, LoadedModule};
use crate::providers;
use crate::rdma;
use crate::topo::{PathClass, Topology};
use crate::verbs::Verbs;

use super::{AcsFinding, DmabufFacts, Facts, GpuFacts, Inputs, PeerClientInfo, MODULE_COUNTERS};

/// Reads every fact the checks are made from. Never fails as a whole: what cannot be read is
/// named in `unreadable` (by the facts field it would have filled) with the error.
pub fn gather(host: &Host, inputs: &Inputs) -> Facts {
    let mut unreadable = BTreeMap::new();
    let mut note = |fact: &str, e: &Error| {
        unreadable.insert(fact.to_owned(), e.to_string());
    };
    let kallsyms = kernel::kallsyms(host);
    let modules = peermem::loaded_modules(host)
        .inspect_err(|e| note("modules", e))
        .unwrap_or_default();
    let memory_peers = memory_peers(host)
        .inspect_err(|e| note("memory_peers", e))
        .ok()
        .flatten();
    let nvidia = providers::nvidia_driver(host, &kallsyms)
        .inspect_err(|e| note("nvidia", e))
        .ok()
        .flatten();
    let ib_core = providers::ib_core(host, &kallsyms)
        .inspect_err(|e| note("ib_core", e))
        .ok();
    let rdma_devices = rdma::devices(host).inspect_err(|e| note("rdma_devices", e));
    let pci_gpus = pci::gpus(host).inspect_err(|e| note("gpus", e));
    // None when the PCI or RDMA devices could not be read (their own checks say why).
    let topology = match (&pci_gpus, &rdma_devices) {
        (Ok(g), Ok(r)) => Some(Topology::build(g.clone(), r)),
        _ => None,
    };
    let gpus = match &pci_gpus {
        Ok(g) => {
            let (gpus, bars_error) = gpu_facts(host, g);
            if let Some(e) = bars_error {
                note("bars", &e);
            }
            gpus
        }
        Err(_) => Vec::new(),
    };
    let examined: Vec<&PciDevice> = match &topology {
        Some(t) => t
            .gpus
            .iter()
            .map(|g| &g.pci)
            .chain(t.nics.iter().filter_map(|n| n.pci.as_ref()))
            .collect(),
        None => Vec::new(),
    };
    let iommu = kernel::iommu(host, &examined)
        .inspect_err(|e| note("iommu", e))
        .ok();
    let acs = match &topology {
        Some(t) => acs_findings(host, t)
            .inspect_err(|e| note("acs", e))
            .unwrap_or_default(),
        None => Vec::new(),
    };
    let module_counters = module_counters(host, &modules);
    let modprobe_target = crate::modprobe::modprobe_target(host)
        .inspect_err(|e| note("modprobe_target", e))
        .ok()
        .flatten();
    let present = nccl::present_paths(host);
    let nccl_env = nccl::nccl_env(&inputs.env);
    let dmabuf = DmabufFacts {
        kernel: match kallsyms.lookup(symbols::IB_UMEM_DMABUF_GET) {
            Ok(found) => Some(found.is_some()),
            Err(_) => None,
        },
        gpu_open_kernel_module: nvidia.as_ref().and_then(|n| n.open_kernel_module),
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
    Facts {
        modules,
        memory_peers,
        nvidia,
        ib_core,
        kallsyms,
        rdma_devices: rdma_devices.unwrap_or_default(),
        verbs: inputs.verbs.clone(),
        gpus,
        topology,
        iommu,
        acs,
        memlock: inputs.memlock,
        nccl_env,
        nccl: verdicts,
        ucx: nccl::replay(&nccl::UCX_RULE, &present),
        ucx_gpu_direct_rdma: nccl::ucx_gpu_direct_rdma(&inputs.env),
        dmabuf,
        module_counters,
        modprobe_target,
        unreadable,
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

/// The [`MODULE_COUNTERS`] of each of our modules, as written (trimmed); a counter that cannot
/// be read is left out (they only illustrate `peer_clients`).
fn module_counters(
    host: &Host,
    modules: &[LoadedModule],
) -> BTreeMap<String, BTreeMap<String, String>> {
    modules
        .iter()
        .filter(|m| m.implementation == Implementation::Nvpeer)
        .map(|m| {
            let counters = MODULE_COUNTERS
                .iter()
                .filter_map(|c| {
                    let v = host
                        .read_sys(format!("module/{}/nvpeer/stats/{c}", m.name))
                        .ok()
                        .flatten()?;
                    Some(((*c).to_owned(), v.trim().to_owned()))
                })
                .collect();
            (m.name.clone(), counters)
        })
        .collect()
}

/// Every GPU with its BAR1; a `resource` file that cannot be read leaves that GPU's BAR1
/// unknown and is returned (the first such error).
fn gpu_facts(host: &Host, gpus: &[PciDevice]) -> (Vec<GpuFacts>, Option<Error>) {
    let mut first_error = None;
    let facts = gpus
        .iter()
        .enumerate()
        .map(|(i, g)| {
            let bar1 = match pci::bars(host, g) {
                Ok(bars) => bars.as_deref().and_then(pci::bar1).cloned(),
                Err(e) => {
                    first_error.get_or_insert(e);
                    None
                }
            };
            GpuFacts {
                label: format!("GPU{i}"),
                address: g.address,
                vendor: g.vendor,
                device: g.device,
                numa_node: g.numa_node,
                bar1,
            }
        })
        .collect();
    (facts, first_error)
}

/// The bridges a GPU-NIC path turns around at or passes below: from the deepest common bridge
/// down both sides. Only paths that can stay below the root complex (PIX, PXB) are examined.
fn path_bridges(gpu: &PciDevice, nic: &PciDevice) -> Vec<PciAddress> {
    let (a, b) = (gpu.path.bridges(), nic.path.bridges());
    let common = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    if common == 0 || gpu.root_complex != nic.root_complex {
        return Vec::new();
    }
    let mut out: Vec<PciAddress> = a[common - 1..].to_vec();
    for br in &b[common..] {
        if !out.contains(br) {
            out.push(*br);
        }
    }
    out
}

fn acs_findings(host: &Host, t: &Topology) -> Result<Vec<AcsFinding>> {
    let mut out = Vec::new();
    for near in &t.nearest {
        if near.class > PathClass::Pxb {
            continue;
        }
        let Some(gpu) = t.gpu(&near.gpu) else {
            continue;
        };
        for nic_name in &near.nics {
            let Some(nic) = t.nic(nic_name).and_then(|n| n.pci.as_ref()) else {
                continue;
            };
            for bridge in path_bridges(&gpu.pci, nic) {
                let acs = pci::acs(host, bridge)?;
                out.push(AcsFinding {
                    bridge,
                    gpu: near.gpu.clone(),
                    nic: nic_name.clone(),
                    redirecting: acs
                        .as_ref()
                        .map(Acs::p2p_hurting_bits)
                        .unwrap_or_default()
                        .into_iter()
                        .map(str::to_owned)
                        .collect(),
                    acs,
                });
            }
        }
    }
    Ok(out)
}
