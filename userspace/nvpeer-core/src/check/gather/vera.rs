// SPDX-License-Identifier: MIT OR Apache-2.0
//! Facts of a Vera platform, in the shape rdma-core's `kernel-boot/rdma_topo` (master after
//! v64.0, `../shared/FIELD.md` U8, **[unverified]**) recognises: the Vera root ports (by id, or by
//! the layout: a Rubin GPU or a NIC board below them), and every GPU and ConnectX function below
//! one with its IOMMU group, ATS and its board's VPD serial number.

use std::collections::BTreeMap;

use crate::error::Result;
use crate::host::pci::{self, KnownDevice, PciAddress, PciDevice};
use crate::host::topo::Topology;
use crate::host::Host;

use super::super::{VeraFacts, VeraFunction};
use super::grace::{ancestor, is_nvidia_root_port};

/// The serial number (VPD `SN`) of a function's `vpd`: absent, unreadable or malformed: `None`.
fn vpd_sn(host: &Host, d: &PciDevice) -> Option<String> {
    let bytes = host
        .read_sys_bytes(format!("{}/vpd", d.sys_dir()))
        .ok()
        .flatten()?;
    pci::vpd_serial(&bytes)
}

/// The board serial number of every ConnectX function ([`connectx_kind`]), each `vpd` read once
/// for the run: the root-port rules and the functions' facts both look them up here.
fn serials(host: &Host, all: &[PciDevice]) -> BTreeMap<PciAddress, Option<String>> {
    all.iter()
        .filter(|d| connectx_kind(d).is_some())
        .map(|d| (d.address, vpd_sn(host, d)))
        .collect()
}

/// A ConnectX NIC function rdma_topo's Vera rules look at, by its ids.
fn connectx_kind(d: &PciDevice) -> Option<&'static str> {
    match KnownDevice::of(d.vendor, d.device) {
        Some(KnownDevice::ConnectX9) => Some("connectx9"),
        Some(KnownDevice::ConnectX8) => Some("connectx8"),
        Some(KnownDevice::ConnectX7) => Some("connectx7"),
        _ => None,
    }
}

/// `GPU0`, the NIC's RDMA device, or the address where it has none.
fn name_of(t: &Topology, d: &PciDevice) -> String {
    t.gpus
        .iter()
        .find(|g| g.pci.address == d.address)
        .map(|g| g.label.clone())
        .or_else(|| {
            t.nics
                .iter()
                .find(|n| n.pci.as_ref().is_some_and(|p| p.address == d.address))
                .map(|n| n.name.clone())
        })
        .unwrap_or_else(|| d.address.to_string())
}

/// The Vera root ports: those of the ids FIELD.md U8 gives (10de:2f95, 2f96), and any other
/// NVIDIA root port, not Grace's (`grace_ports`) and of an id this nvpeer does not list, that the
/// facts below it show to be one: a GPU the driver names as a Rubin (`rubin_gpus`, by its model)
/// directly below it (rdma_topo's NUMA-based shape), or a ConnectX function directly below it
/// whose board (VPD serial number) also has a function below a Vera root port (rdma_topo's
/// boards: one board's functions each on a root port of the same CPU). Each of the latter with
/// why (the `vera` row), as `grace_root_ports` does for Grace. Third: every other NVIDIA root
/// port, not Grace's and of an id this nvpeer does not list, with a ConnectX function below it,
/// each named with that function: nothing shows it is Vera's (a Vera CPU's root ports need not
/// all share one id, but neither is any other NVIDIA root port ruled out), so the `vera` row is
/// unknown for it rather than judging its NIC by rules that may not be its platform's.
///
/// **[unverified]**: only FIELD.md U8 says Vera boards group NIC functions by VPD serial number
/// and put GPUs and NIC functions each on a CPU root port; that a Rubin GPU below an NVIDIA root
/// port means Vera (not Grace) is nvpeer's reading of NVIDIA's product names (Vera Rubin), as
/// [`super::devices::is_rubin_model`] says.
fn vera_root_ports(
    serials: &BTreeMap<PciAddress, Option<String>>,
    all: &[PciDevice],
    t: &Topology,
    rubin_gpus: &[PciAddress],
    grace_ports: &[PciAddress],
) -> (Vec<PciAddress>, Vec<String>, Vec<String>) {
    let nvidia_rps: Vec<&PciDevice> = all
        .iter()
        .filter(|d| is_nvidia_root_port(d) && !grace_ports.contains(&d.address))
        .collect();
    let below = |rp: PciAddress| all.iter().filter(move |d| ancestor(d, 1) == Some(rp));
    let unlisted = |d: &&&PciDevice| KnownDevice::of(d.vendor, d.device).is_none();
    let mut ports: Vec<PciAddress> = nvidia_rps
        .iter()
        .filter(|d| KnownDevice::of(d.vendor, d.device) == Some(KnownDevice::VeraRootPort))
        .map(|d| d.address)
        .collect();
    let mut by_layout = Vec::new();
    let unlisted_id = |rp: &PciDevice| {
        format!(
            "root port {} ({:04x}:{:04x}, an id this nvpeer does not list)",
            rp.address, rp.vendor, rp.device
        )
    };
    for rp in nvidia_rps.iter().filter(unlisted) {
        if let Some(g) = below(rp.address).find(|d| rubin_gpus.contains(&d.address)) {
            ports.push(rp.address);
            by_layout.push(format!(
                "{} by a Rubin GPU, {} ({}), below it",
                unlisted_id(rp),
                name_of(t, g),
                g.address
            ));
        }
    }
    // Boards: the serial number of each ConnectX function below a Vera root port, until no other
    // root port joins (a board's function below a port taken by its board counts in turn).
    let serial = |d: &PciDevice| serials.get(&d.address).cloned().flatten();
    loop {
        let known: Vec<(String, &PciDevice)> = ports
            .iter()
            .flat_map(|rp| below(*rp))
            .filter_map(|d| Some((serial(d)?, d)))
            .collect();
        let joined = nvidia_rps
            .iter()
            .filter(unlisted)
            .filter(|rp| !ports.contains(&rp.address))
            .find_map(|rp| {
                below(rp.address).find_map(|d| {
                    let sn = serial(d)?;
                    let (_, other) = known.iter().find(|(s, _)| *s == sn)?;
                    Some((rp, d, sn, *other))
                })
            });
        let Some((rp, d, sn, other)) = joined else {
            break;
        };
        ports.push(rp.address);
        by_layout.push(format!(
            "{} by a NIC function, {} ({}), below it of board SN {sn}, whose {} ({}) is below a Vera root port",
            unlisted_id(rp),
            name_of(t, d),
            d.address,
            name_of(t, other),
            other.address
        ));
    }
    // Every other unlisted NVIDIA root port with a ConnectX function anywhere below it: not
    // shown to be Vera's (only on a host with a Vera root port: else there is no `vera` row).
    let unrecognised = if ports.is_empty() {
        Vec::new()
    } else {
        nvidia_rps
            .iter()
            .filter(unlisted)
            .filter(|rp| !ports.contains(&rp.address))
            .filter_map(|rp| {
                let nics: Vec<String> = all
                    .iter()
                    .filter(|d| d.address != rp.address && d.path.chain.contains(&rp.address))
                    .filter(|d| connectx_kind(d).is_some())
                    .map(|d| format!("{} ({})", name_of(t, d), d.address))
                    .collect();
                (!nics.is_empty())
                    .then(|| format!("{} with {} below it", unlisted_id(rp), nics.join(", ")))
            })
            .collect()
    };
    // In the order of the PCI functions, as the ids alone give them.
    let ports = all
        .iter()
        .map(|d| d.address)
        .filter(|a| ports.contains(a))
        .collect();
    (ports, by_layout, unrecognised)
}

/// `None` on a host without a Vera root port (10de:2f95, 2f96: [`KnownDevice::VeraRootPort`],
/// NVIDIA root ports per `pci.ids`, Vera's per FIELD.md U8 alone, or one the layout shows:
/// [`vera_root_ports`]). Else every GPU and
/// ConnectX NIC function below a Vera root port with its IOMMU group, how many functions share
/// it, and, for a NIC function, ATS and its board's serial number: what rdma_topo's Vera rules
/// look at (`../shared/FIELD.md` U8). `rubin_gpus`: the GPUs whose model is a Rubin (by the
/// driver's `information`); `grace_ports`: the Grace root ports, never taken as Vera's.
pub(super) fn vera(
    host: &Host,
    all: &[PciDevice],
    t: &Topology,
    rubin_gpus: &[PciAddress],
    grace_ports: &[PciAddress],
) -> Result<Option<VeraFacts>> {
    let serials = serials(host, all);
    let (root_ports, root_ports_by_layout, root_ports_unrecognised) =
        vera_root_ports(&serials, all, t, rubin_gpus, grace_ports);
    if root_ports.is_empty() {
        return Ok(None);
    }
    let mut functions = Vec::new();
    for d in all {
        let Some(rp) = d
            .path
            .bridges()
            .first()
            .copied()
            .filter(|rp| root_ports.contains(rp))
        else {
            continue;
        };
        let nic_kind = connectx_kind(d);
        let gpu = d.is_nvidia_gpu();
        let kind = match (gpu, nic_kind) {
            (true, _) => "gpu",
            (false, Some(k)) => k,
            (false, None) => continue,
        };
        let name = name_of(t, d);
        let iommu_group = pci::iommu_group(host, d.address)?;
        let iommu_group_size = iommu_group.as_ref().and_then(|g| {
            host.list_sys(format!("kernel/iommu_groups/{g}/devices"))
                .ok()
                .map(|v| v.len())
                .filter(|n| *n > 0)
        });
        functions.push(VeraFunction {
            address: d.address,
            name,
            kind: kind.to_owned(),
            root_port: rp,
            iommu_group,
            iommu_group_size,
            ats: if gpu {
                None
            } else {
                pci::ats(host, d.address)?
            },
            board_sn: Some(if gpu {
                None
            } else {
                serials.get(&d.address).cloned().flatten()
            }),
        });
    }
    Ok(Some(VeraFacts {
        root_ports,
        root_ports_by_layout,
        root_ports_unrecognised,
        functions,
    }))
}
