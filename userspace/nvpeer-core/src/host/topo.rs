//! `nvpeer topo`: the GPU x NIC matrix with `nvidia-smi topo -m` classes, NUMA and CPU
//! affinity, the nearest NIC of each GPU, and the coarser class NCCL works with.
//!
//! The class of a GPU-NIC pair comes from their sysfs paths
//! (`/sys/devices/pciDDDD:BB/<root port>/<switch upstream>/<switch downstream>/.../<device>`):
//!
//! * different root complexes (`pciDDDD:BB`): `NODE` when both devices report the same NUMA node
//!   (`numa_node`, -1 counting as a node of its own), `SYS` otherwise;
//! * same root complex, no common bridge: `PHB` (the path goes through the host bridge);
//! * a common bridge: count the PCIe switches on the path. Below a root port, sysfs alternates
//!   switch upstream and downstream ports, so bridges at depth 1-2, 3-4, ... form one switch
//!   each. One switch (or none: functions of one device) is `PIX`, more is `PXB`. This is what
//!   `nvidia-smi` calls "a single PCIe bridge" vs "multiple PCIe bridges": a switch counts once.
//!
//! NCCL's path types (`graph/topo.h`) have no `NODE`: NCCL keys its CPU nodes by NUMA id, so two
//! root complexes of one NUMA node meet at the same CPU node and NCCL calls the path `PHB`;
//! `NODE` therefore becomes `PHB` in NCCL's column, the other classes are the same. (NCCL also
//! folds the two levels of Broadcom Gen4 PEX switches into one, which can turn a `PXB` into
//! `PIX`; that vendor rule is not replayed here.)

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::host::pci::{self, PciDevice, PciPath};
use crate::host::rdma::{self, RdmaDevice};
use crate::host::Host;

/// How far apart two PCI devices are, as `nvidia-smi topo -m` says it. Ordered near to far.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum PathClass {
    /// At most one PCIe switch between them.
    Pix,
    /// Several PCIe switches, not through the host bridge.
    Pxb,
    /// Through a PCIe host bridge (one root complex).
    Phb,
    /// Across host bridges within one NUMA node.
    Node,
    /// Across NUMA nodes (the SMP interconnect).
    Sys,
}

impl PathClass {
    pub fn label(self) -> &'static str {
        match self {
            Self::Pix => "PIX",
            Self::Pxb => "PXB",
            Self::Phb => "PHB",
            Self::Node => "NODE",
            Self::Sys => "SYS",
        }
    }

    /// NCCL's path type for this class (see the module comment: `NODE` is `PHB` to NCCL).
    pub fn nccl(self) -> NcclPathType {
        match self {
            Self::Pix => NcclPathType::Pix,
            Self::Pxb => NcclPathType::Pxb,
            Self::Phb | Self::Node => NcclPathType::Phb,
            Self::Sys => NcclPathType::Sys,
        }
    }
}

impl fmt::Display for PathClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// NCCL's path types (`graph/topo.h`), in NCCL's order; the PCIe ones are what a GPU-NIC pair
/// without NVLink or C2C can have. `NCCL_NET_GDR_LEVEL` is compared against this order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum NcclPathType {
    Loc,
    Nvl,
    Nvb,
    C2c,
    Pix,
    Pxb,
    P2c,
    Pxn,
    Phb,
    Sys,
}

impl NcclPathType {
    /// Every type `NCCL_NET_GDR_LEVEL` accepts by name, in order.
    pub const ALL: [Self; 10] = [
        Self::Loc,
        Self::Nvl,
        Self::Nvb,
        Self::C2c,
        Self::Pix,
        Self::Pxb,
        Self::P2c,
        Self::Pxn,
        Self::Phb,
        Self::Sys,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Self::Loc => "LOC",
            Self::Nvl => "NVL",
            Self::Nvb => "NVB",
            Self::C2c => "C2C",
            Self::Pix => "PIX",
            Self::Pxb => "PXB",
            Self::P2c => "P2C",
            Self::Pxn => "PXN",
            Self::Phb => "PHB",
            Self::Sys => "SYS",
        }
    }
}

impl fmt::Display for NcclPathType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// One end of a path: where the device sits and its NUMA node.
#[derive(Clone, Copy, Debug)]
pub struct Endpoint<'a> {
    pub path: &'a PciPath,
    pub numa_node: Option<i32>,
}

impl<'a> From<&'a PciDevice> for Endpoint<'a> {
    fn from(d: &'a PciDevice) -> Self {
        Self {
            path: &d.path,
            numa_node: d.numa_node,
        }
    }
}

/// The switch a bridge at `depth` (0 = root port) belongs to: the depth of its upstream port.
/// Root ports belong to the root complex, not to a switch.
fn switch_of(depth: usize) -> Option<usize> {
    match depth {
        0 => None,
        d if d % 2 == 1 => Some(d),
        d => Some(d - 1),
    }
}

/// The class of the path between two PCI devices (see the module comment for the rules).
pub fn classify(a: Endpoint<'_>, b: Endpoint<'_>) -> PathClass {
    if a.path.root_complex != b.path.root_complex {
        let numa = |n: Option<i32>| n.unwrap_or(-1);
        return if numa(a.numa_node) == numa(b.numa_node) {
            PathClass::Node
        } else {
            PathClass::Sys
        };
    }
    let (ab, bb) = (a.path.bridges(), b.path.bridges());
    let common = ab.iter().zip(bb).take_while(|(x, y)| x == y).count();
    if common == 0 {
        return PathClass::Phb;
    }
    // The traffic turns around at the deepest common bridge (depth common - 1) and passes every
    // bridge below it on both sides; count the distinct switches among those.
    let meet = common - 1;
    // A switch is keyed by the depth of its upstream port and, below the meeting point, by the
    // side it is on (the two sides have different switches at the same depth).
    let mut switches: Vec<(usize, Option<bool>)> = Vec::new();
    for (side, bridges) in [(false, ab), (true, bb)] {
        for depth in meet..bridges.len() {
            if let Some(upstream) = switch_of(depth) {
                // Switches at or above the meeting point are shared by both sides.
                let key = (upstream, (upstream > meet).then_some(side));
                if !switches.contains(&key) {
                    switches.push(key);
                }
            }
        }
    }
    if switches.len() <= 1 {
        PathClass::Pix
    } else {
        PathClass::Pxb
    }
}

/// A GPU in the topology.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Gpu {
    /// `GPU0`, `GPU1`, ... in PCI address order.
    pub label: String,
    #[serde(flatten)]
    pub pci: PciDevice,
}

/// An RDMA device in the topology.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Nic {
    pub name: String,
    /// `None` for software devices (rxe, siw) that have no PCI function of their own.
    pub pci: Option<PciDevice>,
}

/// One cell of the matrix.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Link {
    pub gpu: String,
    pub nic: String,
    pub class: PathClass,
    pub nccl_class: NcclPathType,
}

/// The nearest NIC(s) of one GPU.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Nearest {
    pub gpu: String,
    pub nics: Vec<String>,
    pub class: PathClass,
    pub nccl_class: NcclPathType,
}

/// The whole picture: `nvpeer topo --json` prints this.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Topology {
    /// Always [`SCHEMA`] (read back as such).
    #[serde(skip_deserializing, default = "schema")]
    pub schema: &'static str,
    pub gpus: Vec<Gpu>,
    pub nics: Vec<Nic>,
    pub links: Vec<Link>,
    pub nearest: Vec<Nearest>,
}

pub const SCHEMA: &str = "nvpeer.topo/1";

fn schema() -> &'static str {
    SCHEMA
}

impl Topology {
    /// Builds the topology from GPUs and RDMA devices already read.
    pub fn build(gpus: Vec<PciDevice>, rdma_devices: &[RdmaDevice]) -> Self {
        let gpus: Vec<Gpu> = gpus
            .into_iter()
            .enumerate()
            .map(|(i, pci)| Gpu {
                label: format!("GPU{i}"),
                pci,
            })
            .collect();
        let nics: Vec<Nic> = rdma_devices
            .iter()
            .map(|d| Nic {
                name: d.name.clone(),
                pci: d.pci.clone(),
            })
            .collect();
        let mut links = Vec::new();
        let mut nearest = Vec::new();
        for gpu in &gpus {
            let mut best: Option<(PathClass, Vec<String>)> = None;
            for nic in &nics {
                let Some(nic_pci) = &nic.pci else {
                    continue;
                };
                let class = classify((&gpu.pci).into(), nic_pci.into());
                links.push(Link {
                    gpu: gpu.label.clone(),
                    nic: nic.name.clone(),
                    class,
                    nccl_class: class.nccl(),
                });
                match &mut best {
                    Some((c, names)) if *c == class => names.push(nic.name.clone()),
                    Some((c, _)) if *c < class => {}
                    _ => best = Some((class, vec![nic.name.clone()])),
                }
            }
            if let Some((class, nics)) = best {
                nearest.push(Nearest {
                    gpu: gpu.label.clone(),
                    nics,
                    class,
                    nccl_class: class.nccl(),
                });
            }
        }
        Self {
            schema: SCHEMA,
            gpus,
            nics,
            links,
            nearest,
        }
    }

    /// The class between a GPU and a NIC, by label and name.
    pub fn class(&self, gpu: &str, nic: &str) -> Option<PathClass> {
        self.links
            .iter()
            .find(|l| l.gpu == gpu && l.nic == nic)
            .map(|l| l.class)
    }

    /// The GPU with this label.
    pub fn gpu(&self, label: &str) -> Option<&Gpu> {
        self.gpus.iter().find(|g| g.label == label)
    }

    /// The NIC with this name.
    pub fn nic(&self, name: &str) -> Option<&Nic> {
        self.nics.iter().find(|n| n.name == name)
    }
}

/// Reads GPUs and RDMA devices from the host and builds the topology.
/// A device file that could not be read fails it: a matrix with a guessed NUMA node or class
/// would be wrong (`check` keeps the device and says "unknown").
pub fn discover(host: &Host) -> Result<Topology> {
    let gpus = pci::gpus(host)?;
    let devices = rdma::devices(host)?;
    let unread = gpus
        .iter()
        .flat_map(|g| g.unreadable.iter().chain(&g.unreadable_ids))
        .chain(
            devices
                .iter()
                .flat_map(|d| d.unreadable.iter().chain(&d.unreadable_details)),
        )
        .next();
    if let Some(e) = unread {
        return Err(crate::error::Error::Device(e.clone()));
    }
    Ok(Topology::build(gpus, &devices))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn ep(path: &str) -> PciPath {
        PciPath::parse(Path::new(path)).unwrap()
    }

    fn class(a: &str, na: i32, b: &str, nb: i32) -> PathClass {
        let (pa, pb) = (ep(a), ep(b));
        classify(
            Endpoint {
                path: &pa,
                numa_node: Some(na),
            },
            Endpoint {
                path: &pb,
                numa_node: Some(nb),
            },
        )
    }

    const RP: &str = "devices/pci0000:00/0000:00:01.0";

    #[test]
    fn one_switch_is_pix() {
        let usp = format!("{RP}/0000:01:00.0");
        let gpu = format!("{usp}/0000:02:00.0/0000:03:00.0");
        let nic = format!("{usp}/0000:02:01.0/0000:04:00.0");
        assert_eq!(class(&gpu, 0, &nic, 0), PathClass::Pix);
        assert_eq!(class(&nic, 0, &gpu, 0), PathClass::Pix);
    }

    #[test]
    fn functions_of_one_device_are_pix() {
        assert_eq!(
            class(
                &format!("{RP}/0000:01:00.0"),
                0,
                &format!("{RP}/0000:01:00.1"),
                0
            ),
            PathClass::Pix
        );
    }

    #[test]
    fn two_switch_levels_are_pxb() {
        let usp = format!("{RP}/0000:01:00.0");
        let gpu = format!("{usp}/0000:02:00.0/0000:03:00.0/0000:04:00.0/0000:05:00.0");
        let nic = format!("{usp}/0000:02:01.0/0000:06:00.0");
        assert_eq!(class(&gpu, 0, &nic, 0), PathClass::Pxb);
        // Both below the second-level switch: one switch again.
        let nic2 = format!("{usp}/0000:02:00.0/0000:03:00.0/0000:04:01.0/0000:07:00.0");
        assert_eq!(class(&gpu, 0, &nic2, 0), PathClass::Pix);
        // Two sibling second-level switches below one top switch: three switches.
        let nic3 = format!("{usp}/0000:02:01.0/0000:08:00.0/0000:09:00.0/0000:0a:00.0");
        assert_eq!(class(&gpu, 0, &nic3, 0), PathClass::Pxb);
    }

    #[test]
    fn different_root_ports_are_phb() {
        assert_eq!(
            class(
                &format!("{RP}/0000:01:00.0"),
                0,
                "devices/pci0000:00/0000:00:02.0/0000:02:00.0",
                0
            ),
            PathClass::Phb
        );
        // A flat VM: everything on the root bus.
        assert_eq!(
            class(
                "devices/pci0000:00/0000:00:04.0",
                -1,
                "devices/pci0000:00/0000:00:05.0",
                -1
            ),
            PathClass::Phb
        );
    }

    #[test]
    fn host_bridges_and_sockets() {
        let a = "devices/pci0000:00/0000:00:01.0/0000:01:00.0";
        let b = "devices/pci0000:40/0000:40:01.0/0000:41:00.0";
        assert_eq!(class(a, 0, b, 0), PathClass::Node);
        assert_eq!(class(a, 0, b, 1), PathClass::Sys);
        assert_eq!(class(a, -1, b, -1), PathClass::Node);
        assert_eq!(class(a, -1, b, 0), PathClass::Sys);
    }

    #[test]
    fn nccl_merges_node_into_phb() {
        assert_eq!(PathClass::Node.nccl(), NcclPathType::Phb);
        assert_eq!(PathClass::Pix.nccl(), NcclPathType::Pix);
        assert_eq!(PathClass::Pxb.nccl(), NcclPathType::Pxb);
        assert_eq!(PathClass::Phb.nccl(), NcclPathType::Phb);
        assert_eq!(PathClass::Sys.nccl(), NcclPathType::Sys);
    }
}
