// SPDX-License-Identifier: MIT OR Apache-2.0
//! Facts of a Grace-Blackwell platform, in the shapes rdma-core's `kernel-boot/rdma_topo`
//! (NVIDIA, 2025-2026) recognises: the Grace root ports, the ConnectX-8 DMA-Direct complexes
//! (root port -> ConnectX switch -> {DMA function, switch -> switch -> GPU}, the NIC function
//! matched to its DMA function by the VPD V3 keyword), and the ACS of every Grace root port and
//! ConnectX switch port with the role `rdma_topo` gives it.

use std::collections::BTreeMap;

use crate::error::Result;
use crate::host::pci::{self, KnownDevice, PciAddress, PciDevice};
use crate::host::topo::Topology;
use crate::host::Host;

use super::super::{AcsPort, AcsRole, DmaDirectComplex, GraceFacts};

/// What `d` is: by its ids, or a Grace root port of an id this nvpeer does not list that the
/// layout showed to be one (`grace_rps`, see [`grace_root_ports`]).
fn kind(d: &PciDevice, grace_rps: &[PciAddress]) -> Option<KnownDevice> {
    if grace_rps.contains(&d.address) {
        return Some(KnownDevice::GraceRootPort);
    }
    KnownDevice::of(d.vendor, d.device)
}

/// An NVIDIA PCI bridge on a root bus (no bridge above it): a CPU's root port.
pub(super) fn is_nvidia_root_port(d: &PciDevice) -> bool {
    d.vendor == pci::NVIDIA_VENDOR && d.class >> 8 == 0x0604 && d.path.bridges().is_empty()
}

/// The Grace root ports: those of the ids NVIDIA lists, and any other NVIDIA root port above a
/// Grace superchip's GPU (`superchip_gpus`, by its model) or a ConnectX-8 DMA function (only
/// Grace-Blackwell has the DMA-Direct shape). Each of the latter with why (the `grace` row).
fn grace_root_ports(
    all: &[PciDevice],
    superchip_gpus: &[PciAddress],
) -> (Vec<PciAddress>, Vec<String>) {
    let mut ports = Vec::new();
    let mut by_layout = Vec::new();
    for rp in all.iter().filter(|d| is_nvidia_root_port(d)) {
        if KnownDevice::of(rp.vendor, rp.device) == Some(KnownDevice::GraceRootPort) {
            ports.push(rp.address);
            continue;
        }
        let below = |d: &&PciDevice| d.address != rp.address && d.path.chain.contains(&rp.address);
        let why = if let Some(g) = all
            .iter()
            .filter(below)
            .find(|d| superchip_gpus.contains(&d.address))
        {
            format!("a Grace superchip's GPU {} below it", g.address)
        } else if let Some(dma) = all
            .iter()
            .filter(below)
            .find(|d| KnownDevice::of(d.vendor, d.device) == Some(KnownDevice::ConnectX8Dma))
        {
            format!("a ConnectX-8 DMA function {} below it", dma.address)
        } else {
            continue;
        };
        ports.push(rp.address);
        by_layout.push(format!(
            "root port {} ({:04x}:{:04x}, an id this nvpeer does not list) by {why}",
            rp.address, rp.vendor, rp.device
        ));
    }
    (ports, by_layout)
}

/// The V3 keyword of a function's `vpd` (absent or unreadable: `None`, as `rdma_topo` treats it).
fn vpd_v3(host: &Host, d: &PciDevice) -> Option<String> {
    let bytes = host
        .read_sys_bytes(format!("{}/vpd", d.sys_dir()))
        .ok()
        .flatten()?;
    pci::parse_vpd(&bytes).0
}

/// The function `levels` steps above `d` (1: its parent), when that is a PCI function.
pub(super) fn ancestor(d: &PciDevice, levels: usize) -> Option<PciAddress> {
    let chain = &d.path.chain;
    chain.len().checked_sub(levels + 1).map(|i| chain[i])
}

/// One complex per DMA function, or why its surroundings are not `rdma_topo`'s shape.
struct Found {
    complex: DmaDirectComplex,
    root_port: PciAddress,
    toward_dma: PciAddress,
    toward_gpu: PciAddress,
}

fn complex(
    host: &Host,
    all: &[PciDevice],
    t: &Topology,
    dma: &PciDevice,
    grace_rps: &[PciAddress],
) -> std::result::Result<Found, String> {
    let kind = |d: &PciDevice| kind(d, grace_rps);
    let is = |a: Option<PciAddress>, k: KnownDevice| {
        a.and_then(|a| all.iter().find(|d| d.address == a))
            .and_then(kind)
            == Some(k)
    };
    let (dsp, usp, rp) = (ancestor(dma, 1), ancestor(dma, 2), ancestor(dma, 3));
    if !is(dsp, KnownDevice::ConnectXSwitch)
        || !is(usp, KnownDevice::ConnectXSwitch)
        || !is(rp, KnownDevice::GraceRootPort)
    {
        return Err(format!(
            "DMA function {} is not below ConnectX switch ports on a Grace root port",
            dma.address
        ));
    }
    let (Some(dsp), Some(usp), Some(rp)) = (dsp, usp, rp) else {
        return Err(format!("DMA function {} has no parents", dma.address));
    };
    let below: Vec<&PciDevice> = all
        .iter()
        .filter(|d| d.address != rp && d.path.chain.contains(&rp))
        .collect();
    let gpus: Vec<&&PciDevice> = below.iter().filter(|d| d.is_nvidia_gpu()).collect();
    let [gpu] = gpus.as_slice() else {
        return Err(format!(
            "{} GPUs below the root port {rp} of DMA function {} (rdma_topo expects one)",
            gpus.len(),
            dma.address
        ));
    };
    let (dsp2, usp2, dsp1) = (ancestor(gpu, 1), ancestor(gpu, 2), ancestor(gpu, 3));
    if !is(dsp2, KnownDevice::ConnectXSwitch)
        || !is(usp2, KnownDevice::ConnectXSwitch)
        || !is(dsp1, KnownDevice::ConnectXSwitch)
        || ancestor(gpu, 4) != Some(usp)
    {
        return Err(format!(
            "the GPU {} below DMA function {} is not behind two ConnectX switch levels of its switch",
            gpu.address, dma.address
        ));
    }
    let expected = [
        Some(dma.address),
        Some(dsp),
        Some(usp),
        Some(gpu.address),
        dsp2,
        usp2,
        dsp1,
    ];
    if below.len() != expected.len() || below.iter().any(|d| !expected.contains(&Some(d.address))) {
        return Err(format!(
            "unexpected PCI functions below the root port {rp} of DMA function {}",
            dma.address
        ));
    }
    let label = t
        .gpus
        .iter()
        .find(|g| g.pci.address == gpu.address)
        .map(|g| g.label.clone())
        .unwrap_or_else(|| gpu.address.to_string());
    let v3 = vpd_v3(host, dma);
    let nic_fn = v3.as_ref().and_then(|v3| {
        all.iter()
            .filter(|d| {
                d.address != dma.address
                    && matches!(
                        kind(d),
                        Some(KnownDevice::ConnectX7 | KnownDevice::ConnectX8)
                    )
                    && vpd_v3(host, d).as_ref() == Some(v3)
            })
            .map(|d| d.address)
            .min()
    });
    let nic = nic_fn.and_then(|a| {
        t.nics
            .iter()
            .find(|n| n.pci.as_ref().is_some_and(|p| p.address == a))
            .map(|n| n.name.clone())
    });
    Ok(Found {
        complex: DmaDirectComplex {
            gpu: label,
            gpu_address: gpu.address,
            dma_function: dma.address,
            nic,
            nic_address: nic_fn,
            dma_iommu_group: pci::iommu_group(host, dma.address).ok().flatten(),
            gpu_iommu_group: pci::iommu_group(host, gpu.address).ok().flatten(),
        },
        root_port: rp,
        toward_dma: dsp,
        toward_gpu: dsp1.unwrap_or(usp),
    })
}

/// `None` on a host without a Grace root port. `superchip_gpus`: the GPUs whose model is a Grace
/// superchip's (by the driver's `information`).
pub(super) fn grace(
    host: &Host,
    all: &[PciDevice],
    t: &Topology,
    superchip_gpus: &[PciAddress],
) -> Result<Option<GraceFacts>> {
    let (root_ports, by_layout) = grace_root_ports(all, superchip_gpus);
    if root_ports.is_empty() {
        return Ok(None);
    }
    let kind = |d: &PciDevice| kind(d, &root_ports);
    let devices: BTreeMap<String, KnownDevice> = all
        .iter()
        .filter_map(|d| Some((d.address.to_string(), kind(d)?)))
        .collect();
    let mut facts = GraceFacts {
        root_ports: root_ports.clone(),
        devices,
        root_ports_by_layout: by_layout,
        ..GraceFacts::default()
    };
    let mut roles: BTreeMap<PciAddress, AcsRole> = BTreeMap::new();
    for dma in all
        .iter()
        .filter(|d| kind(d) == Some(KnownDevice::ConnectX8Dma))
    {
        match complex(host, all, t, dma, &root_ports) {
            Ok(found) => {
                roles.insert(found.root_port, AcsRole::ComplexRootPort);
                roles.insert(found.toward_dma, AcsRole::TowardDma);
                roles.insert(found.toward_gpu, AcsRole::TowardGpu);
                facts.complexes.push(found.complex);
            }
            Err(why) => facts.unrecognised.push(why),
        }
    }
    for d in all {
        let Some(k) = kind(d).filter(|k| k.is_acs_managed_bridge()) else {
            continue;
        };
        facts.acs_ports.push(AcsPort {
            bridge: d.address,
            kind: k,
            role: roles.get(&d.address).copied().unwrap_or(AcsRole::Other),
            acs: pci::acs(host, d.address)?,
        });
    }
    Ok(Some(facts))
}
