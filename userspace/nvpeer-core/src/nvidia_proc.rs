// SPDX-License-Identifier: MIT OR Apache-2.0
//! What the NVIDIA driver says about its GPUs in `/proc/driver/nvidia/gpus/<bus id>/information`
//! (`Key: \t value` lines; the 580 layout of a real H200, `../shared/REAL-HOST-H200.txt`):
//!
//! ```text
//! GPU UUID: <TAB> GPU-d09b8d4e-daef-237f-dd2d-1f194bd911ab
//! Bus Location: <TAB> 0000:00:06.0
//! ```
//!
//! Only what `who` and the per-GPU metrics need: a GPU's UUID (as the module's records name it)
//! -> its PCI address. The same API as the fuller reader of `check` (issue 35), so that the two
//! merge by keeping that one.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::host::Host;
use crate::pci::PciAddress;

/// Where the files are, relative to the procfs root.
pub const DIR: &str = "driver/nvidia";

/// `/proc/driver/nvidia/gpus/<bus id>/information`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuInformation {
    /// The directory name: the GPU's PCI address.
    pub bus_id: String,
    /// `GPU UUID`, e.g. `GPU-d09b8d4e-...`.
    pub uuid: Option<String>,
    /// `Bus Location` (same as the directory name on Linux).
    pub bus_location: Option<PciAddress>,
}

/// Parses one `information` file of the GPU in directory `bus_id`.
pub fn parse_information(path: &str, bus_id: &str, text: &str) -> Result<GpuInformation> {
    let mut uuid = None;
    let mut bus_location = None;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let (k, v) = line
            .split_once(':')
            .ok_or_else(|| Error::parse(path, line, "\"Key: value\" per line"))?;
        let v = v.trim();
        match k.trim() {
            "GPU UUID" if !v.is_empty() => uuid = Some(v.to_owned()),
            "Bus Location" if !v.is_empty() => {
                bus_location =
                    Some(v.parse::<PciAddress>().map_err(|_| {
                        Error::parse(path, v, "a PCI address after \"Bus Location:\"")
                    })?)
            }
            _ => {}
        }
    }
    Ok(GpuInformation {
        bus_id: bus_id.to_owned(),
        uuid,
        bus_location,
    })
}

/// Everything of `/proc/driver/nvidia` read here.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NvidiaProc {
    /// One entry per `gpus/*/information`, by bus id.
    pub gpus: Vec<GpuInformation>,
}

impl NvidiaProc {
    /// The GPU with this UUID (`GPU-...`).
    pub fn gpu_by_uuid(&self, uuid: &str) -> Option<&GpuInformation> {
        self.gpus.iter().find(|g| g.uuid.as_deref() == Some(uuid))
    }
}

/// `Ok(None)` when `/proc/driver/nvidia` does not exist. A file that exists but cannot be read
/// or parsed is an error naming it.
pub fn read(host: &Host) -> Result<Option<NvidiaProc>> {
    if !host.proc_path(DIR).is_dir() {
        return Ok(None);
    }
    let mut gpus = Vec::new();
    for bus_id in crate::host::list_dir(&host.proc_path(format!("{DIR}/gpus")))? {
        let rel = format!("{DIR}/gpus/{bus_id}/information");
        if let Some(text) = host.read_proc(&rel)? {
            let path = host.proc_path(&rel).display().to_string();
            gpus.push(parse_information(&path, &bus_id, &text)?);
        }
    }
    Ok(Some(NvidiaProc { gpus }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Verbatim from a real H200 host (../shared/REAL-HOST-H200.txt), driver 580.159.04.
    const INFORMATION_580: &str = "Model: \t\t NVIDIA H200\nIRQ:   \t\t 41\n\
        GPU UUID: \t GPU-d09b8d4e-daef-237f-dd2d-1f194bd911ab\nVideo BIOS: \t 96.00.a5.00.1a\n\
        Bus Type: \t PCIe\nDMA Size: \t 52 bits\nDMA Mask: \t 0xfffffffffffff\n\
        Bus Location: \t 0000:00:06.0\nDevice Minor: \t 0\nGPU Firmware: \t 580.159.04\n\
        GPU Excluded:\t No\n";

    #[test]
    fn the_real_580_information_file() {
        let i = parse_information("information", "0000:00:06.0", INFORMATION_580).unwrap();
        assert_eq!(
            i.uuid.as_deref(),
            Some("GPU-d09b8d4e-daef-237f-dd2d-1f194bd911ab")
        );
        assert_eq!(i.bus_location, Some("0000:00:06.0".parse().unwrap()));
        let err = parse_information("f", "x", "Bus Location: 0000:zz\n").unwrap_err();
        assert!(err.to_string().contains("PCI address"), "{err}");
        assert!(parse_information("f", "x", "no colon here\n").is_err());
    }

    #[test]
    fn reads_every_gpu_directory() {
        let root = tempfile::tempdir().unwrap();
        let proc = root.path();
        assert_eq!(read(&Host::new("/x", proc)).unwrap(), None);
        let d = proc.join("driver/nvidia/gpus/0000:00:06.0");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("information"), INFORMATION_580).unwrap();
        let n = read(&Host::new("/x", proc)).unwrap().unwrap();
        let g = n
            .gpu_by_uuid("GPU-d09b8d4e-daef-237f-dd2d-1f194bd911ab")
            .unwrap();
        assert_eq!(g.bus_id, "0000:00:06.0");
        assert!(n.gpu_by_uuid("GPU-other").is_none());
    }
}
