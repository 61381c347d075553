// SPDX-License-Identifier: MIT OR Apache-2.0
//! Facts from the PCI tree: the GPUs with their BAR1, the GPU-NIC pairs whose paths are judged
//! (with what NVIDIA's topology rule looks at), and ACS on the bridges between them.

use crate::error::{Error, Result};
use crate::host::nvidia_proc::NvidiaProc;
use crate::host::pci::{self, Acs, KnownDevice, PciAddress, PciDevice};
use crate::host::rdma::RdmaDevice;
use crate::host::topo::{PathClass, Topology};
use crate::host::Host;

use super::super::{AcsFinding, GpuFacts, GraceFacts, PairFacts, PairSource, PathLink};

/// Every GPU with its BAR1; a `resource` file that cannot be read leaves that GPU's BAR1
/// unknown and is returned (the first such error).
pub(super) fn gpu_facts(host: &Host, gpus: &[PciDevice]) -> (Vec<GpuFacts>, Option<Error>) {
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

/// Why a link's speed is unknown where sysfs prints `Unknown` beside a readable width.
const SPEED_UNKNOWN: &str = "link speed Unknown in current_link_speed or max_link_speed (a kernel without PCIe 6.0 support prints that for 64 GT/s): whether it runs below its speed is unknown";

/// How many bridges the two paths share from the root port down (0: none, or different root
/// complexes).
fn common_bridges(a: &PciDevice, b: &PciDevice) -> usize {
    if a.root_complex != b.root_complex {
        return 0;
    }
    a.path
        .bridges()
        .iter()
        .zip(b.path.bridges())
        .take_while(|(x, y)| x == y)
        .count()
}

/// PCI class code (base class, subclass) of a PCI-to-PCI bridge: root ports and switch ports.
const PCI_BRIDGE_CLASS: u32 = 0x0604;

/// The links between bridges that traffic from `dev` crosses up to the bridges it shares with
/// the other end (`common` of them, from the root port down; 0: it goes up to the root port).
/// A chain from a root port alternates a downstream-facing port and the device below it: the
/// links are (chain[0], chain[1]), (chain[2], chain[3]), ...; (chain[1], chain[2]) is a switch's
/// internal bus. The device's own link (the last) is the pair's `gpu_link`/`nic_link`. A link
/// whose two ends do not show the same speed and width now is not taken for one (a layout this
/// reading does not know): left out, never guessed. One whose files could not be read or
/// parsed is unknown: its two ends and the error go to `unknown`, never silently dropped.
fn upstream_links(
    host: &Host,
    all: &[PciDevice],
    dev: &PciDevice,
    common: usize,
    unknown: &mut Vec<String>,
) -> Vec<PathLink> {
    let chain = &dev.path.chain;
    let find = |a: PciAddress| all.iter().find(|d| d.address == a);
    // A function on the path that `bus/pci/devices` names but that could not be read (its
    // entry does not resolve): its links are unknown. One not named there at all is gone.
    let unresolved = |a: PciAddress| {
        let entry = host.sys_path(format!("bus/pci/devices/{a}"));
        (find(a).is_none() && std::fs::symlink_metadata(&entry).is_ok())
            .then(|| format!("{}: does not resolve to a PCI function", entry.display()))
    };
    let Some(&top) = chain.first() else {
        return Vec::new();
    };
    // The links (chain[i], chain[i + 1]), i even, that the pair's traffic crosses: not the
    // device's own (the last), nor one both ends sit below (`common`).
    let on_path = (0..chain.len().saturating_sub(2))
        .step_by(2)
        .any(|i| i + 1 >= common);
    // What the top of the chain is could not be read: the links on the path below it are
    // unknown, said once for the pair (the GPU's side and the NIC's may share the top).
    let mut top_unknown = |why: String| {
        let said = format!("links below {top}: {why}");
        if on_path && !unknown.contains(&said) {
            unknown.push(said);
        }
    };
    if let Some(why) = unresolved(top) {
        top_unknown(why);
        return Vec::new();
    }
    // Whether the top of the chain is a root port rests on its class: unknown, so are the
    // links below it.
    if let Some(d) = find(top).filter(|d| !d.unreadable_ids.is_empty()) {
        top_unknown(d.unreadable_ids.join("; "));
        return Vec::new();
    }
    let starts_at_root_port = find(top).is_some_and(|d| d.class >> 8 == PCI_BRIDGE_CLASS);
    if !starts_at_root_port {
        return Vec::new();
    }
    let mut out = Vec::new();
    let mut i = 0;
    // The last link (chain[n-2], chain[n-1]) is the device's own.
    while i + 2 < chain.len() {
        let (port, below) = (chain[i], chain[i + 1]);
        i += 2;
        if i - 1 < common {
            // Both ends of the pair are below it: their traffic turns around lower down.
            continue;
        }
        let (port_dev, below_dev) = (find(port), find(below));
        let errors: Vec<String> = [port, below]
            .into_iter()
            .filter_map(unresolved)
            .chain(
                [port_dev, below_dev]
                    .into_iter()
                    .flatten()
                    .filter_map(|d| d.link_error.clone()),
            )
            .collect();
        if !errors.is_empty() {
            unknown.push(format!("link {port} - {below}: {}", errors.join("; ")));
            continue;
        }
        let (Some(p), Some(b)) = (
            port_dev.and_then(|d| d.link),
            below_dev.and_then(|d| d.link),
        ) else {
            continue;
        };
        if p.speed != b.speed || p.width != b.width {
            continue;
        }
        let link = pci::PcieLink {
            speed: b.speed,
            // The most both ends can; unknown where either end's is.
            max_speed: p.max_speed.zip(b.max_speed).map(|(p, b)| p.min(b)),
            width: b.width,
            max_width: p.max_width.min(b.max_width),
        };
        // Narrowed, the link is degraded whatever its speed: its speed does not decide.
        if link.speed_unknown() && !link.narrow() {
            unknown.push(format!("link {port} - {below}: {SPEED_UNKNOWN}"));
        }
        out.push(PathLink {
            port,
            device: below,
            link,
        });
    }
    out
}

/// The bridges a GPU-NIC path turns around at or passes below: from the deepest common bridge
/// down both sides. Only paths that can stay below the root complex (PIX, PXB) are examined.
fn path_bridges(gpu: &PciDevice, nic: &PciDevice) -> Vec<PciAddress> {
    let common = common_bridges(gpu, nic);
    if common == 0 {
        return Vec::new();
    }
    let (a, b) = (gpu.path.bridges(), nic.path.bridges());
    let mut out: Vec<PciAddress> = a[common - 1..].to_vec();
    for br in &b[common..] {
        if !out.contains(br) {
            out.push(*br);
        }
    }
    out
}

pub(super) fn acs_findings(host: &Host, t: &Topology) -> Result<Vec<AcsFinding>> {
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

/// A GPU NVIDIA names as the GPU of a Grace superchip, joined to the CPU by NVLink-C2C
/// (`NVIDIA GH200 480GB`, `NVIDIA GB200`, `NVIDIA GB300`, `NVIDIA GB10`), not a PCIe card (`NVIDIA
/// H100 PCIe`, `NVIDIA RTX PRO 6000 Blackwell ...`) that a Grace server may also hold below a
/// Grace root port. The model is the driver's (`information`); this is a reading of NVIDIA's
/// product names, not a flag the driver shows ([inferred]: the driver's own `nv->coherent` is not
/// exported).
pub(super) fn is_superchip_model(model: &str) -> bool {
    let name = model.strip_prefix("NVIDIA ").unwrap_or(model);
    let mut c = name.chars();
    c.next() == Some('G')
        && matches!(c.next(), Some('H' | 'B'))
        && c.next().is_some_and(|d| d.is_ascii_digit())
}

/// A GPU the driver names as a Rubin (`NVIDIA Rubin`, ...): directly below an NVIDIA CPU's root
/// port, a Vera Rubin node's GPU. **[unverified]**: Rubin's model strings are nvpeer's reading of
/// NVIDIA's product name (FIELD.md U8 gives only the Vera root-port ids), matched as the word
/// "Rubin" in the model, never a prefix guessed from a future name.
pub(super) fn is_rubin_model(model: &str) -> bool {
    model
        .split(|c: char| !c.is_ascii_alphanumeric())
        .any(|w| w.eq_ignore_ascii_case("rubin"))
}

/// The pairs whose paths are judged: each GPU with its nearest NIC(s), as `topo` finds them,
/// except that a GPU of a Grace-Blackwell DMA-Direct complex is paired with that complex's NIC
/// (its Data Direct partner, as `rdma_topo` pairs them). An `iommu_group` link that cannot be
/// read leaves that group unknown and its error in `unread`.
pub(super) fn pairs(
    unread: &mut Vec<Error>,
    host: &Host,
    all: &[PciDevice],
    t: &Topology,
    rdma_devices: &[RdmaDevice],
    grace: Option<&GraceFacts>,
    nvidia_proc: Option<&NvidiaProc>,
) -> Result<Vec<PairFacts>> {
    let mut out = Vec::new();
    for gpu in &t.gpus {
        let complex_nic = grace
            .into_iter()
            .flat_map(|g| &g.complexes)
            .find(|c| c.gpu == gpu.label)
            .and_then(|c| c.nic.clone());
        let (nics, source) = match complex_nic {
            Some(nic) => (vec![nic], PairSource::DmaDirect),
            None => match t.nearest.iter().find(|n| n.gpu == gpu.label) {
                Some(n) => (n.nics.clone(), PairSource::Nearest),
                None => continue,
            },
        };
        let root_port = gpu.pci.path.bridges().first().copied();
        let model = nvidia_proc
            .into_iter()
            .flat_map(|p| &p.gpus)
            .find(|i| i.bus_location == Some(gpu.pci.address))
            .and_then(|i| i.model.as_deref());
        // A Grace root port by its id or by the layout (`grace`'s root ports).
        let grace_port = root_port.is_some_and(|rp| {
            grace.is_some_and(|g| g.root_ports.contains(&rp))
                || all
                    .iter()
                    .find(|d| d.address == rp)
                    .and_then(|d| KnownDevice::of(d.vendor, d.device))
                    == Some(KnownDevice::GraceRootPort)
        });
        let coherent = grace_port && model.is_none_or(is_superchip_model);
        for nic_name in nics {
            let Some(nic) = t.nic(&nic_name).and_then(|n| n.pci.as_ref()) else {
                continue;
            };
            let Some(class) = t.class(&gpu.label, &nic_name) else {
                continue;
            };
            // The links on the pair's path whose files could not be read: the GPU's and the
            // NIC's own, then those between (below).
            let mut unknown_links: Vec<String> = [
                (gpu.pci.address, gpu.pci.link_error.as_deref()),
                (nic.address, nic.link_error.as_deref()),
            ]
            .into_iter()
            .filter_map(|(a, e)| Some(format!("{a}'s link: {}", e?)))
            .collect();
            // The NIC's speed decides (below it warns) unless its width already degrades it;
            // a GPU's speed is never judged (it trains down while idle).
            if nic.link.is_some_and(|l| l.speed_unknown() && !l.narrow()) {
                unknown_links.push(format!("{}'s link: {SPEED_UNKNOWN}", nic.address));
            }
            out.push(PairFacts {
                gpu: gpu.label.clone(),
                source,
                class,
                nccl_class: class.nccl(),
                common_bridge: common_bridges(&gpu.pci, nic) > 0,
                coherent,
                nic_driver: rdma_devices
                    .iter()
                    .find(|d| d.name == nic_name)
                    .and_then(|d| d.driver.clone()),
                nic_vendor: nic.vendor,
                nic_device: nic.device,
                gpu_iommu_group: pci::iommu_group(host, gpu.pci.address).unwrap_or_else(|e| {
                    unread.push(e);
                    None
                }),
                nic_iommu_group: pci::iommu_group(host, nic.address).unwrap_or_else(|e| {
                    unread.push(e);
                    None
                }),
                gpu_link: gpu.pci.link,
                nic_link: nic.link,
                path_links: {
                    let common = common_bridges(&gpu.pci, nic);
                    let mut links = upstream_links(host, all, &gpu.pci, common, &mut unknown_links);
                    links.extend(upstream_links(host, all, nic, common, &mut unknown_links));
                    links
                },
                unknown_links,
                nic: nic_name,
            });
        }
    }
    Ok(out)
}
