// SPDX-License-Identifier: MIT OR Apache-2.0
//! What the NVIDIA driver says about itself in `/proc/driver/nvidia`: `version` (flavour and
//! release), `params` (the module parameters / registry keys in effect) and
//! `gpus/<bus id>/information` (one file per GPU: model, UUID, bus location). The layouts are
//! those of the 580 driver (a real H200 host: `../shared/REAL-HOST-H200.txt`), which the
//! open kernel modules print from `kernel-open/nvidia/nv-procfs.c`:
//!
//! ```text
//! NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (nixbld@)
//! GrdmaPciTopoCheckOverride: 0
//! CoherentGPUMemoryMode: ""
//! Bus Location: <tab> 0000:00:06.0
//! ```
//!
//! Every reader of these files goes through here: `check` (dma-buf export, the GRDMA topology
//! rule, CDMM), and whoever needs a GPU's UUID -> PCI address (`information`).

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::host::pci::PciAddress;
use crate::host::Host;

/// Where the files are, relative to the procfs root.
pub const DIR: &str = "driver/nvidia";

/// Which kernel modules the driver is: NVIDIA's open kernel modules (GPL/MIT, the only ones that
/// export GPU memory as dma-buf) or the proprietary ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Flavour {
    Open,
    Proprietary,
}

/// A driver release such as `580.65.06`, ordered as releases are (numerically, part by part).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DriverRelease(Vec<u32>);

impl DriverRelease {
    /// `580.159.04` -> [580, 159, 4]; `None` unless it is two or three dot-separated numbers.
    pub fn parse(text: &str) -> Option<Self> {
        let parts: Vec<u32> = text
            .trim()
            .split('.')
            .map(|p| {
                if p.is_empty() || p.len() > 6 || !p.bytes().all(|b| b.is_ascii_digit()) {
                    None
                } else {
                    p.parse().ok()
                }
            })
            .collect::<Option<_>>()?;
        (2..=3).contains(&parts.len()).then_some(Self(parts))
    }

    /// This release is `major.minor.patch` or later.
    pub fn at_least(&self, release: [u32; 3]) -> bool {
        let mut mine = self.0.clone();
        mine.resize(3, 0);
        mine.as_slice() >= release.as_slice()
    }

    pub fn major(&self) -> u32 {
        self.0[0]
    }
}

impl fmt::Display for DriverRelease {
    /// The usual spelling: `580.65.06` (the third part has two digits).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.as_slice() {
            [a, b] => write!(f, "{a}.{b:02}"),
            [a, b, c] => write!(f, "{a}.{b:02}.{c:02}"),
            other => write!(f, "{other:?}"),
        }
    }
}

/// `/proc/driver/nvidia/version`, first line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionFile {
    pub flavour: Flavour,
    /// `580.159.04` as printed; `None` when the line has no release number.
    pub release: Option<String>,
    /// `x86_64`, `aarch64`.
    pub arch: Option<String>,
}

impl VersionFile {
    pub fn release(&self) -> Option<DriverRelease> {
        self.release.as_deref().and_then(DriverRelease::parse)
    }
}

/// Parses the `NVRM version:` line: `NVIDIA UNIX Open Kernel Module for <arch>  <release> ...`
/// (open) or `NVIDIA UNIX <arch> Kernel Module  <release>  <date>` (proprietary).
pub fn parse_version(path: &str, text: &str) -> Result<VersionFile> {
    let bad = || {
        Error::parse(
            path,
            text.lines().next().unwrap_or(""),
            "\"NVRM version: NVIDIA UNIX ... Kernel Module ... <release> ...\"",
        )
    };
    let line = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("NVRM version:"))
        .ok_or_else(bad)?;
    let words: Vec<&str> = line.split_whitespace().collect();
    let module_at = words
        .windows(2)
        .position(|w| w == ["Kernel", "Module"])
        .ok_or_else(bad)?;
    let flavour = if module_at > 0 && words[module_at - 1] == "Open" {
        Flavour::Open
    } else {
        Flavour::Proprietary
    };
    let arch = match flavour {
        // "... Open Kernel Module for x86_64 ..."
        Flavour::Open => (words.get(module_at + 2) == Some(&"for"))
            .then(|| words.get(module_at + 3))
            .flatten(),
        // "... UNIX x86_64 Kernel Module ..."
        Flavour::Proprietary => module_at.checked_sub(1).and_then(|i| words.get(i)),
    }
    .filter(|a| !matches!(**a, "UNIX" | "NVIDIA"))
    .map(|a| (*a).to_owned());
    let release = words[module_at + 2..]
        .iter()
        .find(|w| DriverRelease::parse(w).is_some())
        .map(|w| (*w).to_owned());
    Ok(VersionFile {
        flavour,
        release,
        arch,
    })
}

/// `/proc/driver/nvidia/params`: one `Name: value` per line, strings in double quotes
/// (`RegistryDwords: ""`), numbers in decimal.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Params(pub BTreeMap<String, String>);

/// The values `NVreg_GrdmaPciTopoCheckOverride` takes (`nv-reg.h`): 0 the driver decides, 1 allow
/// every GPUDirect RDMA peer, 2 deny every one.
pub const GRDMA_OVERRIDE_ALLOW: u64 = 1;
pub const GRDMA_OVERRIDE_DENY: u64 = 2;

impl Params {
    /// The value as printed, quotes included.
    pub fn raw(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }

    /// A numeric parameter; `None` when absent or not a number.
    pub fn number(&self, name: &str) -> Option<u64> {
        self.raw(name)?.trim().parse().ok()
    }

    /// A string parameter without its quotes (`""` -> empty).
    pub fn string(&self, name: &str) -> Option<&str> {
        let v = self.raw(name)?.trim();
        Some(
            v.strip_prefix('"')
                .and_then(|v| v.strip_suffix('"'))
                .unwrap_or(v),
        )
    }

    /// `GrdmaPciTopoCheckOverride` (570.86.15 and later print it).
    pub fn grdma_pci_topo_check_override(&self) -> Option<u64> {
        self.number("GrdmaPciTopoCheckOverride")
    }

    /// `CoherentGPUMemoryMode`: `""` the default (GPU memory onlined as a NUMA node on coherent
    /// platforms), `"driver"` Coherent Driver-based Memory Management (CDMM).
    pub fn coherent_gpu_memory_mode(&self) -> Option<&str> {
        self.string("CoherentGPUMemoryMode")
    }

    /// `RegistryDwords`: the `NVreg_RegistryDwords` string (`"Key=Value;Key=Value"`).
    pub fn registry_dwords(&self) -> Option<&str> {
        self.string("RegistryDwords")
    }

    /// One key of `RegistryDwords` (`PeerMappingOverride=1` -> `Some("1")`).
    pub fn registry_dword(&self, key: &str) -> Option<&str> {
        self.registry_dwords()?
            .split(';')
            .filter_map(|kv| kv.split_once('='))
            .find(|(k, _)| k.trim() == key)
            .map(|(_, v)| v.trim())
    }

    /// `EnableStreamMemOPs`.
    pub fn enable_stream_mem_ops(&self) -> Option<u64> {
        self.number("EnableStreamMemOPs")
    }
}

/// Parses `params`; a line without `: ` is an error naming it (the driver prints none).
/// The lines of `params` that are `Name: value`, the others left out.
fn parse_params_lines(text: &str) -> Params {
    Params(
        text.lines()
            .filter_map(|l| l.split_once(':'))
            .filter(|(n, _)| !n.trim().is_empty() && !n.contains(char::is_whitespace))
            .map(|(n, v)| (n.trim().to_owned(), v.trim().to_owned()))
            .collect(),
    )
}

pub fn parse_params(path: &str, text: &str) -> Result<Params> {
    let mut out = BTreeMap::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let (name, value) = line
            .split_once(':')
            .filter(|(n, _)| !n.trim().is_empty() && !n.contains(char::is_whitespace))
            .ok_or_else(|| Error::parse(path, line, "\"Name: value\" per line"))?;
        out.insert(name.trim().to_owned(), value.trim().to_owned());
    }
    // The driver writes every parameter: an empty file is not its text.
    if out.is_empty() {
        return Err(Error::parse(path, text, "\"Name: value\" per line"));
    }
    Ok(Params(out))
}

/// `/proc/driver/nvidia/gpus/<bus id>/information`: `Key: \t value` lines.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuInformation {
    /// The directory name: the GPU's PCI address.
    pub bus_id: String,
    /// `Model`, e.g. `NVIDIA H200`.
    pub model: Option<String>,
    /// `GPU UUID`, e.g. `GPU-d09b8d4e-...`.
    pub uuid: Option<String>,
    /// `Bus Type`: `PCIe`, ...
    pub bus_type: Option<String>,
    /// `Bus Location` (same as the directory name on Linux).
    pub bus_location: Option<PciAddress>,
    /// `GPU Excluded`: `Yes` / `No`.
    pub excluded: Option<bool>,
    /// Every line as printed (`Video BIOS`, `DMA Mask`, `GPU Firmware`, ...).
    pub fields: BTreeMap<String, String>,
}

/// Parses one `information` file of the GPU in directory `bus_id`.
pub fn parse_information(path: &str, bus_id: &str, text: &str) -> Result<GpuInformation> {
    let mut fields = BTreeMap::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let (k, v) = line
            .split_once(':')
            .ok_or_else(|| Error::parse(path, line, "\"Key: value\" per line"))?;
        fields.insert(k.trim().to_owned(), v.trim().to_owned());
    }
    let get = |k: &str| fields.get(k).filter(|v| !v.is_empty()).cloned();
    let bus_location = match get("Bus Location") {
        Some(text) => Some(
            text.parse::<PciAddress>()
                .map_err(|_| Error::parse(path, text, "a PCI address after \"Bus Location:\""))?,
        ),
        None => None,
    };
    Ok(GpuInformation {
        bus_id: bus_id.to_owned(),
        model: get("Model"),
        uuid: get("GPU UUID"),
        bus_type: get("Bus Type"),
        bus_location,
        excluded: get("GPU Excluded").map(|v| v.eq_ignore_ascii_case("yes")),
        fields,
    })
}

/// Everything of `/proc/driver/nvidia` the CLI reads.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NvidiaProc {
    /// `None`: no `version` file (the driver is not loaded, or a stand-in that shows none).
    pub version: Option<VersionFile>,
    /// `None`: no `params` file.
    pub params: Option<Params>,
    /// One entry per `gpus/*/information`, by bus id.
    pub gpus: Vec<GpuInformation>,
}

impl NvidiaProc {
    /// The GPU with this UUID (`GPU-...`).
    pub fn gpu_by_uuid(&self, uuid: &str) -> Option<&GpuInformation> {
        self.gpus.iter().find(|g| g.uuid.as_deref() == Some(uuid))
    }
}

/// The parts of `/proc/driver/nvidia`, each read on its own: one that cannot be read or parsed
/// leaves the others whole (an odd line in `params` must not hide `version`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    Version,
    Params,
    /// `gpus/*/information`: one bad file loses that GPU only.
    Gpus,
}

impl Part {
    /// The key `check` keeps this part's error under in its facts' `unreadable`.
    pub fn fact(self) -> &'static str {
        match self {
            Self::Version => "nvidia_proc.version",
            Self::Params => "nvidia_proc.params",
            Self::Gpus => "nvidia_proc.gpus",
        }
    }
}

/// What [`read`] found: every part that could be read, and the error of each that could not.
#[derive(Debug, Default)]
pub struct Reading {
    /// `None` when `/proc/driver/nvidia` does not exist.
    pub proc: Option<NvidiaProc>,
    pub errors: Vec<(Part, Error)>,
}

/// Reads the three kinds of files, each on its own; `proc` is `None` when `/proc/driver/nvidia`
/// does not exist. A file that exists but cannot be read or parsed is an error naming it, and
/// leaves its part empty.
pub fn read(host: &Host) -> Reading {
    let path = |rel: &str| host.proc_path(rel).display().to_string();
    let mut errors = Vec::new();
    if !host.proc_path(DIR).is_dir() {
        return Reading { proc: None, errors };
    }
    // The driver writes both files whenever the directory exists: one absent is unreadable,
    // not "no such setting".
    let absent = |rel: &str| Error::parse(host.proc_path(rel), "", "the file (absent)");
    let version_rel = format!("{DIR}/version");
    let version = host
        .read_proc(&version_rel)
        .and_then(|t| {
            t.ok_or_else(|| absent(&version_rel))
                .and_then(|t| parse_version(&path(&version_rel), &t))
                .map(Some)
        })
        .unwrap_or_else(|e| {
            errors.push((Part::Version, e));
            None
        });
    let params_rel = format!("{DIR}/params");
    // An odd line loses itself only: the lines that parse are kept, the file is named.
    let params = host
        .read_proc(&params_rel)
        .and_then(|t| t.ok_or_else(|| absent(&params_rel)))
        .map(|t| match parse_params(&path(&params_rel), &t) {
            Ok(p) => Some(p),
            Err(e) => {
                let kept = parse_params_lines(&t);
                errors.push((Part::Params, e));
                (!kept.0.is_empty()).then_some(kept)
            }
        })
        .unwrap_or_else(|e| {
            errors.push((Part::Params, e));
            None
        });
    let mut gpus = Vec::new();
    let bus_ids =
        crate::host::list_dir(&host.proc_path(format!("{DIR}/gpus"))).unwrap_or_else(|e| {
            errors.push((Part::Gpus, e));
            Vec::new()
        });
    for bus_id in bus_ids {
        let rel = format!("{DIR}/gpus/{bus_id}/information");
        match host.read_proc(&rel).and_then(|t| {
            t.map(|t| parse_information(&path(&rel), &bus_id, &t))
                .transpose()
        }) {
            Ok(Some(info)) => gpus.push(info),
            Ok(None) => {}
            Err(e) => errors.push((Part::Gpus, e)),
        }
    }
    Reading {
        proc: Some(NvidiaProc {
            version,
            params,
            gpus,
        }),
        errors,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Verbatim from a real H200 host (../shared/REAL-HOST-H200.txt), driver 580.159.04.
    const VERSION_580: &str = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (nixbld@)  \nGCC version:  gcc version 15.3.0 (GCC) \n";
    const PARAMS_580: &str = "ResmanDebugLevel: 4294967295\nRmLogonRC: 1\nEnableStreamMemOPs: 0\n\
        DmaRemapPeerMmio: 1\nGrdmaPciTopoCheckOverride: 0\nCoherentGPUMemoryMode: \"\"\n\
        RegistryDwords: \"\"\nRegistryDwordsPerDevice: \"\"\nRmMsg: \"\"\n";
    const INFORMATION_580: &str = "Model: \t\t NVIDIA H200\nIRQ:   \t\t 41\n\
        GPU UUID: \t GPU-d09b8d4e-daef-237f-dd2d-1f194bd911ab\nVideo BIOS: \t 96.00.a5.00.1a\n\
        Bus Type: \t PCIe\nDMA Size: \t 52 bits\nDMA Mask: \t 0xfffffffffffff\n\
        Bus Location: \t 0000:00:06.0\nDevice Minor: \t 0\nGPU Firmware: \t 580.159.04\n\
        GPU Excluded:\t No\n";

    #[test]
    fn the_real_580_files() {
        let v = parse_version("version", VERSION_580).unwrap();
        assert_eq!(v.flavour, Flavour::Open);
        assert_eq!(v.release.as_deref(), Some("580.159.04"));
        assert_eq!(v.arch.as_deref(), Some("x86_64"));
        let r = v.release().unwrap();
        assert!(r.at_least([580, 65, 6]) && !r.at_least([590, 44, 1]));
        assert_eq!(r.to_string(), "580.159.04");

        let p = parse_params("params", PARAMS_580).unwrap();
        assert_eq!(p.grdma_pci_topo_check_override(), Some(0));
        assert_eq!(p.coherent_gpu_memory_mode(), Some(""));
        assert_eq!(p.registry_dwords(), Some(""));
        assert_eq!(p.enable_stream_mem_ops(), Some(0));
        assert_eq!(p.registry_dword("PeerMappingOverride"), None);

        let i = parse_information("information", "0000:00:06.0", INFORMATION_580).unwrap();
        assert_eq!(i.model.as_deref(), Some("NVIDIA H200"));
        assert_eq!(
            i.uuid.as_deref(),
            Some("GPU-d09b8d4e-daef-237f-dd2d-1f194bd911ab")
        );
        assert_eq!(i.bus_type.as_deref(), Some("PCIe"));
        assert_eq!(i.bus_location, Some("0000:00:06.0".parse().unwrap()));
        assert_eq!(i.excluded, Some(false));
        assert_eq!(i.fields["Video BIOS"], "96.00.a5.00.1a");
    }

    #[test]
    fn proprietary_and_arm_version_lines() {
        let v = parse_version(
            "v",
            "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024\n",
        )
        .unwrap();
        assert_eq!(v.flavour, Flavour::Proprietary);
        assert_eq!(v.release.as_deref(), Some("550.54.15"));
        assert_eq!(v.arch.as_deref(), Some("x86_64"));
        let v = parse_version(
            "v",
            "NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  580.65.06  Release Build  (dvs-builder@U22)  Sun Jul 27 06:54:38 UTC 2025\n",
        )
        .unwrap();
        assert_eq!(
            (v.flavour, v.arch.as_deref()),
            (Flavour::Open, Some("aarch64"))
        );
        let err = parse_version("/proc/driver/nvidia/version", "garbage\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("/proc/driver/nvidia/version"), "{err}");
    }

    #[test]
    fn registry_dwords_keys() {
        let p = parse_params(
            "params",
            "RegistryDwords: \"PeerMappingOverride=1; RMForceStaticBar1=0\"\n",
        )
        .unwrap();
        assert_eq!(p.registry_dword("PeerMappingOverride"), Some("1"));
        assert_eq!(p.registry_dword("RMForceStaticBar1"), Some("0"));
        assert!(parse_params("params", "no colon here\n").is_err());
    }

    #[test]
    fn releases_order_numerically() {
        let r = |s| DriverRelease::parse(s).unwrap();
        assert!(r("580.65.06") > r("575.64.05"));
        assert!(r("570.86.15").at_least([570, 86, 15]));
        assert!(!r("570.86.10").at_least([570, 86, 15]));
        assert!(r("595.45").at_least([595, 0, 0]));
        assert!(DriverRelease::parse("5.x").is_none());
        assert!(DriverRelease::parse("580").is_none());
    }

    proptest! {
        #[test]
        fn parsers_never_panic(text in "[ -~\t\n\"]{0,300}") {
            let _ = parse_version("v", &text);
            let _ = parse_params("p", &text);
            let _ = parse_information("i", "0000:00:00.0", &text);
            let _ = DriverRelease::parse(&text);
        }
    }
}
