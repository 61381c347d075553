//! RDMA devices and their ports from `/sys/class/infiniband`.

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::host::Host;
use crate::pci::PciDevice;

/// One port of an RDMA device.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Port {
    pub number: String,
    /// `state` without its numeric prefix, e.g. `ACTIVE` (from `4: ACTIVE`).
    pub state: String,
    /// `phys_state` without its numeric prefix, e.g. `LinkUp`.
    pub phys_state: Option<String>,
    /// `InfiniBand` or `Ethernet` (RoCE).
    pub link_layer: Option<String>,
    /// `rate`, e.g. `400 Gb/sec (4X NDR)`.
    pub rate: Option<String>,
}

impl Port {
    pub fn is_active(&self) -> bool {
        self.state == "ACTIVE"
    }
}

/// One RDMA device (`/sys/class/infiniband/<name>`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RdmaDevice {
    pub name: String,
    /// The kernel driver of its PCI function (`mlx5_core`), when it has one.
    pub driver: Option<String>,
    /// Its PCI function; `None` for software devices (rxe, siw) without a `device` link.
    pub pci: Option<PciDevice>,
    pub ports: Vec<Port>,
}

/// `4: ACTIVE` -> `ACTIVE`; text without a numeric prefix is kept whole.
fn strip_code(text: &str) -> String {
    match text.split_once(':') {
        Some((code, name)) if code.trim().bytes().all(|b| b.is_ascii_digit()) => {
            name.trim().to_owned()
        }
        _ => text.trim().to_owned(),
    }
}

/// Every RDMA device, by name.
pub fn devices(host: &Host) -> Result<Vec<RdmaDevice>> {
    let mut out = Vec::new();
    for name in host.list_sys("class/infiniband")? {
        let base = format!("class/infiniband/{name}");
        let pci = PciDevice::read(host, &format!("{base}/device"))?;
        let driver = host
            .resolve_sys(format!("{base}/device/driver"))?
            .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()));
        let mut ports = Vec::new();
        for number in host.list_sys(format!("{base}/ports"))? {
            let p = format!("{base}/ports/{number}");
            ports.push(Port {
                state: host
                    .read_sys(format!("{p}/state"))?
                    .map_or_else(|| "unknown".to_owned(), |s| strip_code(&s)),
                phys_state: host
                    .read_sys(format!("{p}/phys_state"))?
                    .map(|s| strip_code(&s)),
                link_layer: host
                    .read_sys(format!("{p}/link_layer"))?
                    .map(|s| s.trim().to_owned()),
                rate: host
                    .read_sys(format!("{p}/rate"))?
                    .map(|s| s.trim().to_owned()),
                number,
            });
        }
        out.push(RdmaDevice {
            name,
            driver,
            pci,
            ports,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_state_codes() {
        assert_eq!(strip_code("4: ACTIVE"), "ACTIVE");
        assert_eq!(strip_code("5: LinkUp"), "LinkUp");
        assert_eq!(strip_code("weird"), "weird");
        assert_eq!(strip_code("x: y"), "x: y");
    }
}
