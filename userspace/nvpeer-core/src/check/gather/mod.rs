// SPDX-License-Identifier: MIT OR Apache-2.0
//! The first step of `nvpeer check`: every fact read once, by source, into [`Facts`]. Nothing
//! here judges; a file that cannot be read is recorded in [`Facts::unreadable`] (by the facts
//! field it would have filled) for the rules to report.
//!
//! Sources: [`modules`] (`/sys/module`, `/sys/kernel/mm/memory_peers`), [`devices`] (the PCI
//! tree: GPUs, BARs, the GPU-NIC pairs, ACS), [`grace`] (Grace-Blackwell shapes), [`vera`] (Vera
//! root ports, GPUs and NIC functions below them, boards), [`gdrcopy`]
//! (gdrdrv, `/dev/gdrdrv`, libgdrapi), [`jobs`] (the processes that start jobs, and this one),
//! [`capability`] (Tegra, confidential VMs, MIG instances), [`provenance`] (the installed
//! module's build provenance, through the kmod tools), and here the
//! kernel (`/proc/kallsyms`, `/proc/sys/kernel/osrelease`, `/proc/cpuinfo`, the IOMMU), the
//! NVIDIA driver (`/sys/module/nvidia`, `/proc/driver/nvidia`), the RDMA devices, and the
//! process ([`Inputs`]: environment, memlock, the libibverbs probe).

mod capability;
mod cdmm;
mod devices;
mod gdrcopy;
mod grace;
mod jobs;
mod libraries;
mod modules;
mod provenance;
mod vera;

use std::collections::BTreeMap;

use crate::check::nccl::{self, PeerMemoryVerdict};
use crate::error::Error;
use crate::host::kernel::{self, symbols};
use crate::host::modtools::Kmod;
use crate::host::nvidia_proc;
use crate::host::pci::{self, PciDevice};
use crate::host::peermem;
use crate::host::providers;
use crate::host::rdma;
use crate::host::topo::Topology;
use crate::host::verbs::Verbs;
use crate::host::Host;

use super::{DmabufFacts, Facts, Inputs, GIN_ENV};

/// Adds `why` to what `unreadable[fact]` says.
fn note_text(unreadable: &mut BTreeMap<String, String>, fact: &str, why: &str) {
    unreadable
        .entry(fact.to_owned())
        .and_modify(|all: &mut String| {
            all.push_str("; ");
            all.push_str(why);
        })
        .or_insert_with(|| why.to_owned());
}

/// Reads every fact the checks are made from. Never fails as a whole: what cannot be read is
/// named in `unreadable` (by the facts field it would have filled) with the error.
pub fn gather(host: &Host, inputs: &Inputs) -> Facts {
    let mut unreadable = BTreeMap::new();
    let note = |unreadable: &mut BTreeMap<String, String>, fact: &str, e: &Error| {
        note_text(unreadable, fact, &e.to_string());
    };
    let kallsyms = kernel::kallsyms(host);
    let loaded = peermem::loaded_modules(host)
        .inspect_err(|e| note(&mut unreadable, "modules", e))
        .unwrap_or_default();
    // The peer-memory modules are out-of-tree: each has a version (NCCL >= 2.23.4 looks for
    // it), so a module directory without one is not the kernel's.
    for m in loaded.iter().filter(|m| m.version.is_none()) {
        note_text(
            &mut unreadable,
            "modules",
            &format!(
                "{}: absent",
                host.sys_path(format!("module/{}/version", m.name))
                    .display()
            ),
        );
    }
    let memory_peers = modules::memory_peers(host)
        .inspect_err(|e| note(&mut unreadable, "memory_peers", e))
        .ok()
        .flatten();
    let nvidia_proc = {
        let reading = nvidia_proc::read(host);
        for (part, e) in &reading.errors {
            note(&mut unreadable, part.fact(), e);
        }
        reading.proc
    };
    let nvidia = providers::nvidia_driver(host, &kallsyms, nvidia_proc.as_ref())
        .inspect_err(|e| note(&mut unreadable, "nvidia", e))
        .ok()
        .flatten();
    let ib_core = providers::ib_core(host, &kallsyms)
        .inspect_err(|e| note(&mut unreadable, "ib_core", e))
        .ok();
    let rdma_devices =
        rdma::devices(host).inspect_err(|e| note(&mut unreadable, "rdma_devices", e));
    // A device file that cannot be read or parsed leaves that value unknown, never the
    // device out: `pci` and `rdma` name each such file (the `gpus` and `rdma_devices` rows).
    // `pci` and `rdma`: what decides which devices there are and whether they are up (the
    // `gpus` and `rdma_devices` rows); `pci_details`, `rdma_details`: the rest (`sysfs`).
    if let Ok(devices) = &rdma_devices {
        for d in devices {
            for problem in &d.unreadable {
                note_text(&mut unreadable, "rdma", problem);
            }
            for problem in &d.unreadable_details {
                note_text(&mut unreadable, "rdma_details", problem);
            }
        }
    }
    let mut skipped = Vec::new();
    let all_pci = pci::devices_noting(host, &mut skipped);
    for e in &skipped {
        note_text(&mut unreadable, "pci", &e.to_string());
    }
    if let Ok(all) = &all_pci {
        for d in all {
            for problem in &d.unreadable_ids {
                note_text(&mut unreadable, "pci", problem);
            }
            for problem in &d.unreadable {
                note_text(&mut unreadable, "pci_details", problem);
            }
        }
    }
    let pci_gpus = all_pci
        .as_ref()
        .map(|all| {
            all.iter()
                .filter(|d| d.is_nvidia_gpu())
                .cloned()
                .collect::<Vec<_>>()
        })
        .map_err(|e| {
            note(&mut unreadable, "gpus", e);
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
                note(&mut unreadable, "bars", &e);
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
        .inspect_err(|e| note(&mut unreadable, "iommu", e))
        .ok();
    let acs = match &topology {
        Some(t) => devices::acs_findings(host, t)
            .inspect_err(|e| note(&mut unreadable, "acs", e))
            .unwrap_or_default(),
        None => Vec::new(),
    };
    // The GPUs NVIDIA names as a Grace superchip's (GH200, GB200, GB300): their root ports are
    // Grace's whatever their ids.
    let superchip_gpus: Vec<pci::PciAddress> = nvidia_proc
        .iter()
        .flat_map(|p| &p.gpus)
        .filter(|i| i.model.as_deref().is_some_and(devices::is_superchip_model))
        .filter_map(|i| i.bus_location)
        .collect();
    let grace = match (&all_pci, &topology) {
        (Ok(all), Some(t)) => grace::grace(host, all, t, &superchip_gpus)
            .inspect_err(|e| note(&mut unreadable, "grace", e))
            .ok()
            .flatten(),
        _ => None,
    };
    // The GPUs the driver names as a Rubin: their root ports are Vera's whatever their ids,
    // unless Grace's.
    let rubin_gpus: Vec<pci::PciAddress> = nvidia_proc
        .iter()
        .flat_map(|p| &p.gpus)
        .filter(|i| i.model.as_deref().is_some_and(devices::is_rubin_model))
        .filter_map(|i| i.bus_location)
        .collect();
    let grace_ports = grace
        .as_ref()
        .map(|g| g.root_ports.as_slice())
        .unwrap_or_default();
    let vera = match (&all_pci, &topology) {
        (Ok(all), Some(t)) => vera::vera(host, all, t, &rubin_gpus, grace_ports)
            .inspect_err(|e| note(&mut unreadable, "vera", e))
            .ok()
            .flatten(),
        _ => None,
    };
    // The IOMMU groups the Grace rules compare: a link that cannot be read is unknown, not
    // "no group".
    let mut unread_groups = Vec::new();
    for c in grace.iter().flat_map(|g| &g.complexes) {
        for a in [c.gpu_address, c.dma_function] {
            if let Err(e) = pci::iommu_group(host, a) {
                unread_groups.push(e);
            }
        }
    }
    let pairs = match (&all_pci, &topology, &rdma_devices) {
        (Ok(all), Some(t), Ok(r)) => devices::pairs(
            &mut unread_groups,
            host,
            all,
            t,
            r,
            grace.as_ref(),
            nvidia_proc.as_ref(),
        )
        .inspect_err(|e| note(&mut unreadable, "pairs", e))
        .unwrap_or_default(),
        _ => Vec::new(),
    };
    for e in &unread_groups {
        note(&mut unreadable, "iommu_groups", e);
    }
    let module_counters = modules::module_counters(host, &loaded);
    let provenance = provenance::installed(host, &crate::host::modtools::Kmod::system())
        .inspect_err(|e| note(&mut unreadable, "provenance", e))
        .ok()
        .flatten();
    let modprobe_target = crate::host::modprobe::modprobe_target(host)
        .inspect_err(|e| note(&mut unreadable, "modprobe_target", e))
        .ok()
        .flatten();
    let kernel_release = kernel::os_release(host).ok().flatten();
    let hypervisor = kernel::hypervisor(host).ok().flatten();
    let present = nccl::present_paths(host);
    // NCCL's config files under the environment, as NCCL layers them; `~` is the home of the
    // user check runs as (a job's user may have another `~/.nccl.conf`).
    let nccl_files = nccl::conf_files(host, &inputs.env, inputs.home.as_deref());
    let nccl_env = nccl::nccl_env_with_files(&inputs.env, &nccl_files);
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
        .inspect_err(|e| note(&mut unreadable, "gdrcopy", e))
        .ok();
    let job_starters = jobs::job_starters(host)
        .inspect_err(|e| note(&mut unreadable, "job_starters", e))
        .ok();
    let process = jobs::process(host, &inputs.job_env)
        .inspect_err(|e| note(&mut unreadable, "process", e))
        .ok();
    let capability = capability::capability(host)
        .inspect_err(|e| note(&mut unreadable, "capability", e))
        .ok();
    let cdmm = cdmm::cdmm(host, kernel_release.as_deref())
        .inspect_err(|e| note(&mut unreadable, "cdmm", e))
        .ok();
    let libraries = libraries::libraries(host, &inputs.env, inputs.home.as_deref())
        .inspect_err(|e| note(&mut unreadable, "libraries", e))
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
        vera,
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
        cdmm,
        gin_env,
        libraries,
        unreadable,
        hostname: host
            .read_proc("sys/kernel/hostname")
            .ok()
            .flatten()
            .map(|h| h.trim().to_owned())
            .filter(|h| !h.is_empty()),
    }
}
