// SPDX-License-Identifier: MIT OR Apache-2.0
//! The first step of `nvpeer check`: every fact read once, by source, into [`Facts`]. Nothing
//! here judges; a file that cannot be read is recorded in [`Facts::unreadable`] (by the facts
//! field it would have filled) for the rules to report.
//!
//! Sources: [`modules`] (`/sys/module`, `/sys/kernel/mm/memory_peers`), [`devices`] (the PCI
//! tree: GPUs, BARs, the GPU-NIC pairs, ACS), [`grace`] (Grace-Blackwell shapes), [`gdrcopy`]
//! (gdrdrv, `/dev/gdrdrv`, libgdrapi), [`jobs`] (the processes that start jobs, and this one),
//! [`capability`] (Tegra, confidential VMs, MIG instances), [`provenance`] (the installed
//! module's build provenance, through the kmod tools), and here the
//! kernel (`/proc/kallsyms`, `/proc/sys/kernel/osrelease`, `/proc/cpuinfo`, the IOMMU), the
//! NVIDIA driver (`/sys/module/nvidia`, `/proc/driver/nvidia`), the RDMA devices, and the
//! process ([`Inputs`]: environment, memlock, the libibverbs probe).

mod capability;
mod devices;
mod gdrcopy;
mod grace;
mod jobs;
mod modules;
mod provenance;

use std::collections::BTreeMap;

use crate::error::Error;
use crate::host::Host;
use crate::kernel::{self, symbols};
use crate::modtools::Kmod;
use crate::nccl::{self, PeerMemoryVerdict};
use crate::nvidia_proc;
use crate::pci::{self, PciDevice};
use crate::peermem;
use crate::providers;
use crate::rdma;
use crate::topo::Topology;
use crate::verbs::Verbs;

use super::{DmabufFacts, Facts, Inputs, GIN_ENV};

/// Reads every fact the checks are made from. Never fails as a whole: what cannot be read is
/// named in `unreadable` (by the facts field it would have filled) with the error.
pub fn gather(host: &Host, inputs: &Inputs) -> Facts {
    let mut unreadable = BTreeMap::new();
    let mut note = |fact: &str, e: &Error| {
        unreadable
            .entry(fact.to_owned())
            .and_modify(|all: &mut String| {
                all.push_str("; ");
                all.push_str(&e.to_string());
            })
            .or_insert_with(|| e.to_string());
    };
    let kallsyms = kernel::kallsyms(host);
    let loaded = peermem::loaded_modules(host)
        .inspect_err(|e| note("modules", e))
        .unwrap_or_default();
    let memory_peers = modules::memory_peers(host)
        .inspect_err(|e| note("memory_peers", e))
        .ok()
        .flatten();
    let nvidia_proc = {
        let reading = nvidia_proc::read(host);
        for (part, e) in &reading.errors {
            note(part.fact(), e);
        }
        reading.proc
    };
    let nvidia = providers::nvidia_driver(host, &kallsyms, nvidia_proc.as_ref())
        .inspect_err(|e| note("nvidia", e))
        .ok()
        .flatten();
    let ib_core = providers::ib_core(host, &kallsyms)
        .inspect_err(|e| note("ib_core", e))
        .ok();
    let rdma_devices = rdma::devices(host).inspect_err(|e| note("rdma_devices", e));
    let all_pci = pci::devices(host);
    let pci_gpus = all_pci
        .as_ref()
        .map(|all| {
            all.iter()
                .filter(|d| d.is_nvidia_gpu())
                .cloned()
                .collect::<Vec<_>>()
        })
        .map_err(|e| {
            note("gpus", e);
        });
    // None when the PCI or RDMA devices could not be read (their own checks say why).
    let topology = match (&pci_gpus, &rdma_devices) {
        (Ok(g), Ok(r)) => Some(Topology::build(g.clone(), r)),
        _ => None,
    };
    let gpus = match &pci_gpus {
        Ok(g) => {
            let (gpus, bars_error) = devices::gpu_facts(host, g);
            if let Some(e) = bars_error {
                note("bars", &e);
            }
            gpus
        }
        Err(()) => Vec::new(),
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
        Some(t) => devices::acs_findings(host, t)
            .inspect_err(|e| note("acs", e))
            .unwrap_or_default(),
        None => Vec::new(),
    };
    let grace = match (&all_pci, &topology) {
        (Ok(all), Some(t)) => grace::grace(host, all, t)
            .inspect_err(|e| note("grace", e))
            .ok()
            .flatten(),
        _ => None,
    };
    let pairs = match (&all_pci, &topology, &rdma_devices) {
        (Ok(all), Some(t), Ok(r)) => {
            devices::pairs(host, all, t, r, grace.as_ref(), nvidia_proc.as_ref())
                .inspect_err(|e| note("pairs", e))
                .unwrap_or_default()
        }
        _ => Vec::new(),
    };
    let module_counters = modules::module_counters(host, &loaded);
    let provenance = provenance::installed(host, &crate::modtools::Kmod::system())
        .inspect_err(|e| note("provenance", e))
        .ok()
        .flatten();
    let modprobe_target = crate::modprobe::modprobe_target(host)
        .inspect_err(|e| note("modprobe_target", e))
        .ok()
        .flatten();
    let kernel_release = kernel::os_release(host).ok().flatten();
    let hypervisor = kernel::hypervisor(host).ok().flatten();
    let present = nccl::present_paths(host);
    let nccl_env = nccl::nccl_env(&inputs.env);
    let dmabuf = DmabufFacts {
        kernel: match kallsyms.lookup(symbols::IB_UMEM_DMABUF_GET) {
            Ok(found) => Some(found.is_some()),
            Err(_) => None,
        },
        gpu_open_kernel_module: nvidia.as_ref().and_then(|n| n.open_kernel_module),
        nics: match &inputs.verbs {
            Verbs::Probed { devices, .. } => devices
                .iter()
                .map(|d| (d.name.clone(), d.dmabuf.clone()))
                .collect(),
            _ => BTreeMap::new(),
        },
        nccl_dmabuf_enable: nccl_env.dmabuf_enable,
    };
    let gdrcopy = gdrcopy::gdrcopy(host, &Kmod::system())
        .inspect_err(|e| note("gdrcopy", e))
        .ok();
    let job_starters = jobs::job_starters(host)
        .inspect_err(|e| note("job_starters", e))
        .ok();
    let process = jobs::process(host, &inputs.job_env)
        .inspect_err(|e| note("process", e))
        .ok();
    let capability = capability::capability(host)
        .inspect_err(|e| note("capability", e))
        .ok();
    let gin_env = inputs
        .job_env
        .iter()
        .filter(|(k, _)| GIN_ENV.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let verdicts: Vec<PeerMemoryVerdict> = nccl::NCCL_RULES
        .iter()
        .map(|r| nccl::replay(r, &present))
        .collect();
    Facts {
        modules: loaded,
        memory_peers,
        nvidia,
        nvidia_proc,
        ib_core,
        kallsyms,
        kernel_release,
        hypervisor,
        rdma_devices: rdma_devices.unwrap_or_default(),
        verbs: inputs.verbs.clone(),
        gpus,
        topology,
        pairs,
        grace,
        iommu,
        acs,
        memlock: inputs.memlock,
        nccl_env,
        nccl: verdicts,
        ucx: nccl::replay(&nccl::UCX_RULE, &present),
        ucx_gpu_direct_rdma: nccl::ucx_gpu_direct_rdma(&inputs.env),
        ucx_cuda_copy_dmabuf: nccl::ucx_cuda_copy_dmabuf(&inputs.env),
        dmabuf,
        efa_nv_peermem: host.sys_exists("module/efa_nv_peermem"),
        module_counters,
        provenance,
        modprobe_target,
        gdrcopy,
        job_starters,
        process,
        capability,
        gin_env,
        unreadable,
    }
}
