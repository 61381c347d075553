// SPDX-License-Identifier: MIT OR Apache-2.0
//! PCI devices as sysfs shows them: addresses, the bridge chain from the root complex, NUMA and
//! CPU affinity, BARs (`resource`) and the ACS control register in config space.

use std::fmt;
use std::path::Path;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::{Error, Result};
use crate::host::Host;

mod acs;
mod known;
mod link;

pub use acs::{
    acs, acs_matches, ats, ats_enabled, parse_acs, Acs, ACS_CAPABILITY_ID,
    ACS_P2P_COMPLETION_REDIRECT, ACS_P2P_EGRESS_CONTROL, ACS_P2P_REQUEST_REDIRECT,
};
pub use known::{parse_vpd, vpd_serial, KnownDevice, MELLANOX_VENDOR};
use link::read_link;
pub use link::PcieLink;

/// NVIDIA's PCI vendor id.
pub const NVIDIA_VENDOR: u16 = 0x10de;
/// PCI class codes (base class << 8 | subclass) of display controllers a CUDA GPU shows as:
/// VGA compatible (0x0300) and 3D controller (0x0302).
pub const GPU_CLASSES: [u32; 2] = [0x0300, 0x0302];

/// A PCI function address `DDDD:BB:DD.F` (the domain may be wider than 4 digits, e.g. VMD).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PciAddress {
    pub domain: u32,
    pub bus: u8,
    pub device: u8,
    pub function: u8,
}

impl fmt::Display for PciAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:04x}:{:02x}:{:02x}.{:x}",
            self.domain, self.bus, self.device, self.function
        )
    }
}

impl Serialize for PciAddress {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for PciAddress {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(|_| {
            serde::de::Error::custom(format!("{text:?} is not a PCI address (DDDD:BB:DD.F)"))
        })
    }
}

/// Why a string is not a PCI address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NotPciAddress;

impl FromStr for PciAddress {
    type Err = NotPciAddress;

    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        let (domain, rest) = s.split_once(':').ok_or(NotPciAddress)?;
        let (bus, rest) = rest.split_once(':').ok_or(NotPciAddress)?;
        let (device, function) = rest.split_once('.').ok_or(NotPciAddress)?;
        let hex = |t: &str, max_len: usize| {
            if t.is_empty() || t.len() > max_len || !t.bytes().all(|b| b.is_ascii_hexdigit()) {
                Err(NotPciAddress)
            } else {
                u32::from_str_radix(t, 16).map_err(|_| NotPciAddress)
            }
        };
        let domain = hex(domain, 8)?;
        let bus = hex(bus, 2)?;
        let device = hex(device, 2)?;
        let function = hex(function, 1)?;
        if device > 0x1f || function > 7 {
            return Err(NotPciAddress);
        }
        Ok(Self {
            domain,
            bus: bus as u8,
            device: device as u8,
            function: function as u8,
        })
    }
}

/// Where a PCI function sits: its root complex (the `pciDDDD:BB` component of its sysfs path)
/// and the functions from the root port down to itself (the last element is the function).
/// `Default` (no root complex, no chain) stands in for a path that a saved report does not carry
/// (the JSON leaves it out).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PciPath {
    pub root_complex: String,
    pub chain: Vec<PciAddress>,
}

impl PciPath {
    /// Parses a device path under `/sys/devices`, e.g.
    /// `devices/pci0000:00/0000:00:01.0/0000:01:00.0`. Components before the last root complex
    /// (ACPI or VMBus parents on some hypervisors) are skipped. `None` when there is no root
    /// complex component or a component after it is not a PCI address.
    pub fn parse(path: &Path) -> Option<Self> {
        let parts: Vec<&str> = path.iter().filter_map(|c| c.to_str()).collect();
        let root_at = parts.iter().rposition(|c| is_root_complex(c))?;
        let chain = parts[root_at + 1..]
            .iter()
            .map(|c| c.parse())
            .collect::<std::result::Result<Vec<PciAddress>, _>>()
            .ok()?;
        if chain.is_empty() {
            return None;
        }
        Some(Self {
            root_complex: parts[root_at].to_owned(),
            chain,
        })
    }

    /// The function itself.
    pub fn address(&self) -> PciAddress {
        // `parse` never builds an empty chain.
        self.chain.last().copied().unwrap_or(PciAddress {
            domain: 0,
            bus: 0,
            device: 0,
            function: 0,
        })
    }

    /// The bridges above the function, root port first.
    pub fn bridges(&self) -> &[PciAddress] {
        &self.chain[..self.chain.len().saturating_sub(1)]
    }
}

/// `pciDDDD:BB`: a PCI host bridge (root complex) in sysfs.
fn is_root_complex(component: &str) -> bool {
    let Some(rest) = component.strip_prefix("pci") else {
        return false;
    };
    let Some((domain, bus)) = rest.split_once(':') else {
        return false;
    };
    !domain.is_empty()
        && bus.len() == 2
        && domain.bytes().all(|b| b.is_ascii_hexdigit())
        && bus.bytes().all(|b| b.is_ascii_hexdigit())
}

/// One PCI function with what the topology and the checks need.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PciDevice {
    pub address: PciAddress,
    #[serde(with = "crate::hexid::u16")]
    pub vendor: u16,
    #[serde(with = "crate::hexid::u16")]
    pub device: u16,
    /// The 24-bit class code (base class, subclass, programming interface).
    #[serde(with = "crate::hexid::u32")]
    pub class: u32,
    #[serde(skip)]
    pub path: PciPath,
    pub root_complex: String,
    /// `numa_node`; `None` when the file is absent, `Some(-1)` when the kernel does not know.
    pub numa_node: Option<i32>,
    /// `local_cpulist`, e.g. `0-15,32-47`.
    pub local_cpulist: Option<String>,
    /// The PCIe link: its speed and width now and at most; `None` where sysfs has no link
    /// files (a root complex integrated function, a VM) or one could not be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<PcieLink>,
    /// The files of this function that could not be read or parsed, each with why: their
    /// values are left unknown (`None`), the function is kept.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unreadable: Vec<String>,
    /// The same for `vendor`, `device` and `class` (left 0): what the function is, and so
    /// whether it is a GPU or a NIC, is unknown.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unreadable_ids: Vec<String>,
    /// Why the link files could not be read or parsed (also in [`Self::unreadable`]): `link`
    /// is then unknown, not absent.
    #[serde(skip)]
    pub link_error: Option<String>,
}

impl PciDevice {
    /// Reads the function whose sysfs directory is `rel` (e.g. `bus/pci/devices/0000:03:00.0`
    /// or `class/infiniband/mlx5_0/device`). `None` when it does not exist or does not resolve
    /// to a PCI device path.
    ///
    /// Only a directory that cannot be resolved is an error; a file of it that cannot be read
    /// or parsed leaves that value unknown and is named in [`Self::unreadable`].
    pub fn read(host: &Host, rel: &str) -> Result<Option<Self>> {
        let Some(real) = host.resolve_sys(rel)? else {
            return Ok(None);
        };
        let Some(path) = PciPath::parse(&real) else {
            return Ok(None);
        };
        let mut unreadable = Vec::new();
        let mut unreadable_ids = Vec::new();
        // Every PCI function has these three files: one absent is not "0".
        let mut keep = |r: Result<Option<u64>>, file: &str| match r {
            Ok(Some(v)) => Some(v),
            Ok(None) => {
                unreadable_ids.push(format!(
                    "{}: absent",
                    host.sys_path(format!("{rel}/{file}")).display()
                ));
                None
            }
            Err(e) => {
                unreadable_ids.push(e.to_string());
                None
            }
        };
        let vendor =
            keep(read_hex(host, &format!("{rel}/vendor"), 0xffff), "vendor").unwrap_or(0) as u16;
        let device =
            keep(read_hex(host, &format!("{rel}/device"), 0xffff), "device").unwrap_or(0) as u16;
        let class =
            keep(read_hex(host, &format!("{rel}/class"), 0xff_ffff), "class").unwrap_or(0) as u32;
        let numa_node = host
            .read_sys(format!("{rel}/numa_node"))
            .and_then(|text| {
                text.map(|t| parse_numa_node(&host.sys_path(format!("{rel}/numa_node")), &t))
                    .transpose()
            })
            .unwrap_or_else(|e| {
                unreadable.push(e.to_string());
                None
            });
        let local_cpulist = host
            .read_sys(format!("{rel}/local_cpulist"))
            .unwrap_or_else(|e| {
                unreadable.push(e.to_string());
                None
            })
            .map(|s| s.trim().to_owned())
            .filter(|s| is_cpulist(s));
        let mut link_error = None;
        let link = read_link(host, rel).unwrap_or_else(|e| {
            unreadable.push(e.to_string());
            link_error = Some(e.to_string());
            None
        });
        Ok(Some(Self {
            address: path.address(),
            vendor,
            device,
            class,
            root_complex: path.root_complex.clone(),
            path,
            numa_node,
            local_cpulist,
            link,
            unreadable,
            unreadable_ids,
            link_error,
        }))
    }

    /// An NVIDIA display controller (VGA or 3D): a CUDA GPU.
    pub fn is_nvidia_gpu(&self) -> bool {
        self.vendor == NVIDIA_VENDOR && GPU_CLASSES.contains(&(self.class >> 8))
    }

    /// The sysfs directory of this function under `bus/pci/devices`.
    pub fn sys_dir(&self) -> String {
        format!("bus/pci/devices/{}", self.address)
    }
}

/// `local_cpulist` as the kernel writes it: `0-15,32-47` (digits, `-` and `,` only).
fn is_cpulist(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_digit() || b == b'-' || b == b',')
}

/// Every function under `bus/pci/devices`, by address. A function whose directory cannot be
/// resolved (a looping link) is left out and its error is in `skipped`; one whose files cannot
/// be read is kept (see [`PciDevice::unreadable`]).
pub fn devices_noting(host: &Host, skipped: &mut Vec<Error>) -> Result<Vec<PciDevice>> {
    let mut out: Vec<PciDevice> = Vec::new();
    for name in host.list_sys("bus/pci/devices")? {
        let rel = format!("bus/pci/devices/{name}");
        match PciDevice::read(host, &rel) {
            Ok(Some(dev)) => out.push(dev),
            // Every entry there is a link to a PCI function's directory.
            Ok(None) => skipped.push(Error::parse(
                host.sys_path(&rel),
                "a link to nothing, or to no PCI function",
                "a link to a PCI function's directory",
            )),
            Err(e) => skipped.push(e),
        }
    }
    // A kernel with NUMA gives every function a numa_node: one without, beside others with,
    // is not the kernel's tree (and the NODE/SYS class rests on it).
    if out.iter().any(|d| d.numa_node.is_some()) {
        for d in out.iter_mut().filter(|d| d.numa_node.is_none()) {
            let path = host.sys_path(format!("{}/numa_node", d.sys_dir()));
            if std::fs::symlink_metadata(&path).is_err() {
                d.unreadable.push(format!(
                    "{}: absent, though other functions have one",
                    path.display()
                ));
            }
        }
    }
    out.sort_by_key(|d| d.address);
    Ok(out)
}

/// Every function under `bus/pci/devices`, by address; a function that cannot be resolved
/// fails the whole (for callers that have nowhere to say what they left out).
pub fn devices(host: &Host) -> Result<Vec<PciDevice>> {
    let mut skipped = Vec::new();
    let out = devices_noting(host, &mut skipped)?;
    match skipped.into_iter().next() {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

/// The NVIDIA GPUs, by address (the order `nvidia-smi` and `CUDA_DEVICE_ORDER=PCI_BUS_ID` use).
pub fn gpus(host: &Host) -> Result<Vec<PciDevice>> {
    Ok(devices(host)?
        .into_iter()
        .filter(PciDevice::is_nvidia_gpu)
        .collect())
}

/// A hexadecimal sysfs value such as `0x10de`, at most `max`.
fn read_hex(host: &Host, rel: &str, max: u64) -> Result<Option<u64>> {
    let Some(text) = host.read_sys(rel)? else {
        return Ok(None);
    };
    parse_hex(&text, max).map(Some).ok_or_else(|| {
        Error::parse(
            host.sys_path(rel),
            text,
            "a hexadecimal number such as 0x10de",
        )
    })
}

/// `0x`-prefixed or bare hexadecimal, at most `max`.
pub fn parse_hex(text: &str, max: u64) -> Option<u64> {
    let t = text.trim();
    let digits = t
        .strip_prefix("0x")
        .or_else(|| t.strip_prefix("0X"))
        .unwrap_or(t);
    if digits.is_empty() || digits.len() > 16 {
        return None;
    }
    u64::from_str_radix(digits, 16).ok().filter(|v| *v <= max)
}

/// `numa_node`: a decimal number, `-1` when unknown.
pub fn parse_numa_node(path: &Path, text: &str) -> Result<i32> {
    text.trim()
        .parse::<i32>()
        .ok()
        .filter(|n| *n >= -1)
        .ok_or_else(|| Error::parse(path, text, "a NUMA node number or -1"))
}

/// `IORESOURCE_MEM`, `IORESOURCE_PREFETCH` and `IORESOURCE_MEM_64` of `include/linux/ioport.h`.
const IORESOURCE_MEM: u64 = 0x0000_0200;
const IORESOURCE_PREFETCH: u64 = 0x0000_2000;
const IORESOURCE_MEM_64: u64 = 0x0010_0000;

/// One memory BAR from the `resource` file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bar {
    pub index: usize,
    pub start: u64,
    pub size: u64,
    pub prefetchable: bool,
    pub is_64bit: bool,
}

/// Parses a `resource` file: one "start end flags" line of hex numbers per resource; lines 0-5
/// are the BARs (the rest: ROM, bridge windows, SR-IOV). Unassigned BARs (all zero) are skipped.
pub fn parse_resource(path: &Path, text: &str) -> Result<Vec<Bar>> {
    let mut bars = Vec::new();
    for (index, line) in text.lines().enumerate().take(6) {
        let bad = || Error::parse(path, line, "\"0x<start> 0x<end> 0x<flags>\" per line");
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [start, end, flags] = fields.as_slice() else {
            return Err(bad());
        };
        let start = parse_hex(start, u64::MAX).ok_or_else(bad)?;
        let end = parse_hex(end, u64::MAX).ok_or_else(bad)?;
        let flags = parse_hex(flags, u64::MAX).ok_or_else(bad)?;
        if flags & IORESOURCE_MEM == 0 || end == 0 {
            continue;
        }
        if end < start {
            return Err(bad());
        }
        bars.push(Bar {
            index,
            start,
            size: (end - start).saturating_add(1),
            prefetchable: flags & IORESOURCE_PREFETCH != 0,
            is_64bit: flags & IORESOURCE_MEM_64 != 0,
        });
    }
    Ok(bars)
}

/// The BARs of a function; `None` when its `resource` file is absent.
pub fn bars(host: &Host, dev: &PciDevice) -> Result<Option<Vec<Bar>>> {
    let rel = format!("{}/resource", dev.sys_dir());
    match host.read_sys(&rel)? {
        Some(text) => parse_resource(&host.sys_path(&rel), &text).map(Some),
        None => Ok(None),
    }
}

/// The GPU's BAR1 as the NVIDIA driver uses it for peer mappings: its largest prefetchable BAR.
pub fn bar1(bars: &[Bar]) -> Option<&Bar> {
    bars.iter()
        .filter(|b| b.prefetchable)
        .max_by_key(|b| (b.size, usize::MAX - b.index))
}

/// The IOMMU group of a function (`iommu_group` links to `kernel/iommu_groups/<n>`): its number
/// as a string; `None` without an IOMMU group.
pub fn iommu_group(host: &Host, address: PciAddress) -> Result<Option<String>> {
    let rel = format!("bus/pci/devices/{address}/iommu_group");
    let link = host.sys_path(&rel);
    let Some(target) = host.resolve_sys(&rel)? else {
        // No IOMMU: no link. A link to nothing is not that, nor is a function without a
        // link where the IOMMU has groups (it puts every function in one).
        let groups = host.list_sys("kernel/iommu_groups").unwrap_or_default();
        return match std::fs::symlink_metadata(&link) {
            Ok(_) => Err(Error::parse(
                link,
                "a link to nothing",
                "a link to a kernel/iommu_groups/N directory",
            )),
            Err(_) if !groups.is_empty() => Err(Error::parse(
                link,
                "absent",
                "a link to a kernel/iommu_groups/N directory (the IOMMU has groups)",
            )),
            Err(_) => Ok(None),
        };
    };
    let group = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
    match group {
        Some(g)
            if target
                .parent()
                .is_some_and(|p| p.ends_with("kernel/iommu_groups")) =>
        {
            Ok(Some(g))
        }
        _ => Err(Error::parse(
            link,
            target.display().to_string(),
            "a link to a kernel/iommu_groups/N directory",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_addresses_and_paths() {
        let a: PciAddress = "0000:3b:00.1".parse().unwrap();
        assert_eq!((a.domain, a.bus, a.device, a.function), (0, 0x3b, 0, 1));
        assert_eq!(a.to_string(), "0000:3b:00.1");
        assert!("0000:3b:00".parse::<PciAddress>().is_err());
        assert!("0000:3b:20.0".parse::<PciAddress>().is_err());
        assert!("pci0000:00".parse::<PciAddress>().is_err());
        let p = PciPath::parse(Path::new(
            "devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0",
        ))
        .unwrap();
        assert_eq!(p.root_complex, "pci0000:00");
        assert_eq!(p.chain.len(), 4);
        assert_eq!(p.bridges().len(), 3);
        assert_eq!(p.address().to_string(), "0000:03:00.0");
        // Hyper-V: the root complex sits below VMBus.
        let p = PciPath::parse(Path::new(
            "devices/LNXSYSTM:00/LNXSYBUS:00/VMBUS:00/abcd/pci7870:00/7870:00:00.0",
        ))
        .unwrap();
        assert_eq!(p.root_complex, "pci7870:00");
        assert!(PciPath::parse(Path::new("devices/virtual/net/lo")).is_none());
        assert!(PciPath::parse(Path::new("devices/pci0000:00/0000:00:01.0/net/eth0")).is_none());
    }

    #[test]
    fn parses_resource_and_picks_bar1() {
        let text = "0x00000000fa000000 0x00000000faffffff 0x0000000000040200\n\
                    0x0000038000000000 0x00000387ffffffff 0x000000000014220c\n\
                    0x0000000000000000 0x0000000000000000 0x0000000000000000\n\
                    0x0000038800000000 0x0000038801ffffff 0x000000000014220c\n\
                    0x0000000000000000 0x0000000000000000 0x0000000000000000\n\
                    0x000000000000e000 0x000000000000e07f 0x0000000000040101\n\
                    0x00000000fb000000 0x00000000fb07ffff 0x0000000000046200\n";
        let bars = parse_resource(Path::new("resource"), text).unwrap();
        assert_eq!(bars.len(), 3);
        let b1 = bar1(&bars).unwrap();
        assert_eq!((b1.index, b1.size), (1, 32 << 30));
        assert!(b1.is_64bit);
        assert!(parse_resource(Path::new("resource"), "0x1 0x2\n").is_err());
        assert!(parse_resource(Path::new("resource"), "0x10 0x1 0x200\n").is_err());
    }

    proptest! {
        #[test]
        fn vpd_parser_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = parse_vpd(&bytes);
            // A serial, where one comes out of any bytes at all, is printable ASCII.
            if let Some(sn) = vpd_serial(&bytes) {
                prop_assert!(sn.bytes().all(|b| b.is_ascii_graphic() || b == b' '));
            }
        }

        #[test]
        fn config_space_parser_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..4200)) {
            let _ = parse_acs(Path::new("config"), &bytes);
        }

        #[test]
        fn resource_parser_never_panics(text in "(0x[0-9a-f]{0,17} ?){0,4}(\n(0x[0-9a-f]{0,17} ?){0,4}){0,8}") {
            let _ = parse_resource(Path::new("resource"), &text);
        }

        #[test]
        fn path_and_address_parsers_never_panic(s in "[a-z0-9:./]{0,60}") {
            let _ = s.parse::<PciAddress>();
            let _ = PciPath::parse(Path::new(&s));
            let _ = parse_hex(&s, u64::MAX);
            let _ = parse_numa_node(Path::new("n"), &s);
        }

        #[test]
        fn addresses_round_trip(domain in 0u32..0x10000, bus: u8, device in 0u8..32, function in 0u8..8) {
            let a = PciAddress { domain, bus, device, function };
            prop_assert_eq!(a.to_string().parse::<PciAddress>().unwrap(), a);
        }
    }
}
