//! What the running kernel says about itself: exported symbols (`/proc/kallsyms`), the command
//! line (`/proc/cmdline`), its release (`/proc/sys/kernel/osrelease`), whether it runs under a
//! hypervisor (`/proc/cpuinfo`) and the IOMMU (`/sys/class/iommu`, `/sys/kernel/iommu_groups`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::host::pci::PciDevice;
use crate::host::Host;

/// Symbols whose presence the checks look for.
pub mod symbols {
    /// nvidia.ko's P2P API (and the stand-ins').
    pub const P2P_GET_PAGES: &str = "nvidia_p2p_get_pages";
    /// The persistent pinning API of drivers 535.43.02+ (CONTRACT 2.7).
    pub const P2P_GET_PAGES_PERSISTENT: &str = "nvidia_p2p_get_pages_persistent";
    /// The capability variable of drivers <= 530.
    pub const P2P_CAP_PERSISTENT_PAGES: &str = "nvidia_p2p_cap_persistent_pages";
    /// MOFED's peer-memory core (PeerDirect).
    pub const REGISTER_PEER_MEMORY_CLIENT: &str = "ib_register_peer_memory_client";
    /// Exported only by the legacy 4.1 ... 5.0 cores (peer private data; CONTRACT 1.1, 1.8).
    pub const GET_PEER_PRIVATE_DATA: &str = "ib_get_peer_private_data";
    /// Exported only by cores that honour `PEER_MEM_INVALIDATE_UNMAPS` (CONTRACT 1.1).
    pub const STOP_INVALIDATION_NOTIFIER: &str = "ib_umem_stop_invalidation_notifier";
    /// ib_core's dma-buf umem support (kernel >= 5.12): the kernel side of DMA-BUF registration.
    pub const IB_UMEM_DMABUF_GET: &str = "ib_umem_dmabuf_get";

    pub const ALL: [&str; 7] = [
        P2P_GET_PAGES,
        P2P_GET_PAGES_PERSISTENT,
        P2P_CAP_PERSISTENT_PAGES,
        REGISTER_PEER_MEMORY_CLIENT,
        GET_PEER_PRIVATE_DATA,
        STOP_INVALIDATION_NOTIFIER,
        IB_UMEM_DMABUF_GET,
    ];
}

/// Where a symbol lives.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "in", content = "module", rename_all = "snake_case")]
pub enum SymbolOwner {
    /// Built into the kernel image.
    Kernel,
    /// Exported by this module.
    Module(String),
}

impl SymbolOwner {
    pub fn describe(&self) -> String {
        match self {
            Self::Kernel => "the kernel".to_owned(),
            Self::Module(m) => m.clone(),
        }
    }
}

/// The symbols of [`symbols::ALL`] found in `/proc/kallsyms`.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Kallsyms {
    /// Absent, unreadable or empty (a container, a fixture tree, a locked-down kernel).
    Unavailable { reason: String },
    Read {
        found: BTreeMap<String, SymbolOwner>,
    },
}

impl Kallsyms {
    /// `Some(owner)` when found, `None` when absent, and `Err(reason)` when unknown.
    pub fn lookup(&self, symbol: &str) -> std::result::Result<Option<&SymbolOwner>, &str> {
        match self {
            Self::Unavailable { reason } => Err(reason),
            Self::Read { found } => Ok(found.get(symbol)),
        }
    }
}

/// Picks the wanted symbols out of kallsyms text ("address type name [module]" per line);
/// lines of another shape are skipped.
pub fn parse_kallsyms(text: &str, wanted: &[&str]) -> BTreeMap<String, SymbolOwner> {
    let mut found = BTreeMap::new();
    for line in text.lines() {
        let mut fields = line.split_whitespace();
        let (Some(_addr), Some(_kind), Some(name)) = (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        if !wanted.contains(&name) {
            continue;
        }
        let owner = match fields.next() {
            Some(m) if m.starts_with('[') && m.ends_with(']') && m.len() > 2 => {
                SymbolOwner::Module(m[1..m.len() - 1].to_owned())
            }
            _ => SymbolOwner::Kernel,
        };
        found.insert(name.to_owned(), owner);
    }
    found
}

/// A line of `/proc/kallsyms`: a hexadecimal address, a one-letter type, a name.
fn is_kallsyms_line(line: &str) -> bool {
    let mut f = line.split_whitespace();
    matches!(
        (f.next(), f.next(), f.next()),
        (Some(addr), Some(kind), Some(_))
            if addr.bytes().all(|b| b.is_ascii_hexdigit())
                && kind.len() == 1
                && kind.bytes().all(|b| b.is_ascii_alphabetic())
    )
}

/// Reads `/proc/kallsyms` for [`symbols::ALL`].
pub fn kallsyms(host: &Host) -> Kallsyms {
    match host.read_proc("kallsyms") {
        // Junk is not "no such symbol": only lines of `ADDRESS TYPE NAME` are kallsyms.
        Ok(Some(text)) if !text.trim().is_empty() && !text.lines().any(is_kallsyms_line) => {
            Kallsyms::Unavailable {
                reason: format!(
                    "{}: unexpected content (no `ADDRESS TYPE NAME` line)",
                    host.proc_path("kallsyms").display()
                ),
            }
        }
        Ok(Some(text)) if !text.trim().is_empty() => Kallsyms::Read {
            found: parse_kallsyms(&text, &symbols::ALL),
        },
        Ok(Some(_)) => Kallsyms::Unavailable {
            reason: format!("{} is empty", host.proc_path("kallsyms").display()),
        },
        Ok(None) => Kallsyms::Unavailable {
            reason: format!("{} does not exist", host.proc_path("kallsyms").display()),
        },
        Err(e) => Kallsyms::Unavailable {
            reason: e.to_string(),
        },
    }
}

/// `/proc/sys/kernel/osrelease`, trimmed; `None` when absent.
pub fn os_release(host: &Host) -> Result<Option<String>> {
    Ok(host
        .read_proc("sys/kernel/osrelease")?
        .map(|r| r.trim().to_owned())
        .filter(|r| !r.is_empty()))
}

/// The `MAJOR.MINOR` of a kernel release such as `6.8.0-45-generic`; `None` for another shape.
pub fn release_major_minor(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.trim().split(['.', '-', '+', '_']);
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// Whether the CPU flags in `/proc/cpuinfo` include `hypervisor` (x86: the kernel runs in a
/// VM); `None` without cpuinfo or without any `flags` line (arm64 has no such flag).
pub fn hypervisor(host: &Host) -> Result<Option<bool>> {
    let Some(text) = host.read_proc("cpuinfo")? else {
        return Ok(None);
    };
    let mut any_flags = false;
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        if key.trim() == "flags" {
            any_flags = true;
            if value.split_whitespace().any(|f| f == "hypervisor") {
                return Ok(Some(true));
            }
        }
    }
    Ok(any_flags.then_some(false))
}

/// The IOMMU-related parameters of a kernel command line, in order.
pub fn iommu_cmdline(cmdline: &str) -> Vec<String> {
    cmdline
        .split_whitespace()
        .take_while(|w| *w != "--")
        .filter(|w| {
            let key = w.split_once('=').map_or(*w, |(k, _)| k);
            matches!(
                key,
                "iommu" | "intel_iommu" | "amd_iommu" | "iommu.passthrough" | "iommu.strict"
            )
        })
        .map(str::to_owned)
        .collect()
}

/// How the IOMMU treats DMA.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IommuMode {
    /// No IOMMU device and no groups.
    Off,
    /// Identity (passthrough) domains: bus addresses are physical addresses.
    Passthrough,
    /// DMA translation (`DMA`, `DMA-FQ`): peer-to-peer addresses are remapped.
    Translated,
    /// Groups exist but their type could not be read.
    Unknown,
}

/// The IOMMU as sysfs and the command line show it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Iommu {
    pub mode: IommuMode,
    /// `/sys/class/iommu/*` (e.g. `dmar0`, `ivhd0`).
    pub units: Vec<String>,
    pub groups: usize,
    /// Domain type of each examined device's group: `identity`, `DMA`, `DMA-FQ`, ...
    pub device_domains: BTreeMap<String, String>,
    /// `iommu=`, `intel_iommu=`, `amd_iommu=`, `iommu.passthrough=` from `/proc/cmdline`.
    pub cmdline: Vec<String>,
}

/// The IOMMU mode, judged on the group types of `devices` (the GPUs and NICs) or, when there
/// are none, of all groups.
pub fn iommu(host: &Host, devices: &[&PciDevice]) -> Result<Iommu> {
    let units = host.list_sys("class/iommu")?;
    let group_names = host.list_sys("kernel/iommu_groups")?;
    let cmdline = host
        .read_proc("cmdline")?
        .map(|c| iommu_cmdline(&c))
        .unwrap_or_default();
    let mut device_domains = BTreeMap::new();
    let mut types = Vec::new();
    for dev in devices {
        if let Some(group) = host.resolve_sys(format!("{}/iommu_group", dev.sys_dir()))? {
            if let Some(t) = host.read_sys(group.join("type"))? {
                device_domains.insert(dev.address.to_string(), t.trim().to_owned());
                types.push(t.trim().to_owned());
            }
        }
    }
    if devices.is_empty() {
        for g in &group_names {
            if let Some(t) = host.read_sys(format!("kernel/iommu_groups/{g}/type"))? {
                types.push(t.trim().to_owned());
            }
        }
    }
    let mode = if units.is_empty() && group_names.is_empty() {
        IommuMode::Off
    } else if types.iter().any(|t| t.starts_with("DMA")) {
        IommuMode::Translated
    } else if !types.is_empty() && types.iter().all(|t| t == "identity") {
        IommuMode::Passthrough
    } else if group_names.is_empty() {
        // An IOMMU unit without groups translates nothing.
        IommuMode::Off
    } else {
        IommuMode::Unknown
    };
    Ok(Iommu {
        mode,
        units,
        groups: group_names.len(),
        device_domains,
        cmdline,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn finds_symbols_and_their_modules() {
        let text = "ffffffffc0a01000 T nvidia_p2p_get_pages\t[nv_p2p_sim]\n\
                    0000000000000000 T nvidia_p2p_get_pages_persistent [nv_p2p_sim]\n\
                    ffffffff81000000 T ib_umem_dmabuf_get\n\
                    garbage\n\
                    ffffffff81000000 T unrelated [x]\n";
        let found = parse_kallsyms(text, &symbols::ALL);
        assert_eq!(found.len(), 3);
        assert_eq!(
            found["nvidia_p2p_get_pages"],
            SymbolOwner::Module("nv_p2p_sim".to_owned())
        );
        assert_eq!(found["ib_umem_dmabuf_get"], SymbolOwner::Kernel);
    }

    #[test]
    fn picks_iommu_parameters_before_the_init_separator() {
        assert_eq!(
            iommu_cmdline("ro quiet intel_iommu=on iommu=pt amd_iommu=off -- iommu=off"),
            vec!["intel_iommu=on", "iommu=pt", "amd_iommu=off"]
        );
        assert!(iommu_cmdline("").is_empty());
    }

    #[test]
    fn kernel_releases_and_the_hypervisor_flag() {
        assert_eq!(release_major_minor("6.8.0-45-generic"), Some((6, 8)));
        assert_eq!(release_major_minor("5.4.0-150-generic"), Some((5, 4)));
        assert_eq!(release_major_minor("7.2.12+deb13-amd64"), Some((7, 2)));
        assert_eq!(release_major_minor("garbage"), None);
        let proc = tempfile::tempdir().unwrap();
        let host = Host::new("/nonexistent", proc.path());
        assert_eq!(hypervisor(&host).unwrap(), None);
        std::fs::write(
            proc.path().join("cpuinfo"),
            "processor\t: 0\nflags\t\t: fpu vme hypervisor lahf_lm\n",
        )
        .unwrap();
        assert_eq!(hypervisor(&host).unwrap(), Some(true));
        std::fs::write(proc.path().join("cpuinfo"), "flags\t\t: fpu vme\n").unwrap();
        assert_eq!(hypervisor(&host).unwrap(), Some(false));
    }

    proptest! {
        #[test]
        fn kallsyms_parser_never_panics(text in "[ -~\t\n\\[\\]]{0,400}") {
            let _ = parse_kallsyms(&text, &symbols::ALL);
            let _ = iommu_cmdline(&text);
        }
    }
}
