//! RDMA devices and their ports from `/sys/class/infiniband`.

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::host::pci::PciDevice;
use crate::host::Host;

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
    /// The files of this device that could not be read or parsed and that decide what it is
    /// or whether it is up (its entry, its PCI function's link and ids, a port's `state`),
    /// each with why: their values are left unknown, the device is kept.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unreadable: Vec<String>,
    /// The same for the files that decide nothing (NUMA node, CPU list, PCIe link, a port's
    /// physical state, link layer and rate).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unreadable_details: Vec<String>,
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

/// The PCI function directory (relative to the sysfs root) of a device directory
/// `.../<function>/infiniband/<name>`.
fn pci_function_of(dir: &std::path::Path) -> Option<String> {
    let parent = dir.parent()?;
    if parent.file_name()? != "infiniband" {
        return None;
    }
    let function = parent.parent()?;
    crate::host::pci::PciPath::parse(function)?;
    Some(function.to_string_lossy().into_owned())
}

/// A port state as the kernel writes it: `4: ACTIVE`, `5: LinkUp` (a number, a colon, a name
/// of letters and `_`).
fn is_state(s: &str) -> bool {
    s.split_once(':').is_some_and(|(code, name)| {
        let name = name.trim();
        !code.is_empty()
            && code.len() <= 3
            && code.bytes().all(|b| b.is_ascii_digit())
            && !name.is_empty()
            && name.len() <= 32
            && name.bytes().all(|b| b.is_ascii_alphabetic() || b == b'_')
    })
}

/// A name the kernel writes (`ACTIVE`, `LinkUp`, `InfiniBand`, `400 Gb/sec (4X NDR)`): printable
/// ASCII, not empty, not too long; anything else is not the kernel's text.
fn is_kernel_word(s: &str) -> bool {
    !s.is_empty() && s.len() <= 64 && s.bytes().all(|b| (0x20..0x7f).contains(&b))
}

/// Every RDMA device, by name. A file that cannot be read or holds what the kernel never
/// writes leaves its value unknown (a port state `unknown`) and is named in the device's
/// `unreadable`; the device is kept, even one whose directory is a dangling link.
pub fn devices(host: &Host) -> Result<Vec<RdmaDevice>> {
    let mut out = Vec::new();
    for name in host.list_sys("class/infiniband")? {
        let base = format!("class/infiniband/{name}");
        let mut unreadable = Vec::new();
        // A dangling or looping link is not "a software device": it cannot be read.
        let resolved = match host.resolve_sys(&base) {
            Ok(Some(r)) => Some(r),
            Ok(None) => {
                unreadable.push(format!(
                    "{}: a link to nothing",
                    host.sys_path(&base).display()
                ));
                None
            }
            Err(e) => {
                unreadable.push(e.to_string());
                None
            }
        };
        // A hardware device's directory lies below its PCI function's (`<function>/infiniband/
        // <name>`): its `device` link must lead there. Without the link, the function is read
        // from there and the link named; a software device (rxe, siw) has neither.
        let function_dir = resolved.as_deref().and_then(pci_function_of);
        let mut device_dir = format!("{base}/device");
        let pci = match PciDevice::read(host, &device_dir) {
            Ok(Some(p)) => Some(p),
            Ok(None) => match &function_dir {
                Some(dir) => {
                    unreadable.push(format!(
                        "{}: absent or a link to nothing, though {name} lies below PCI function {dir}",
                        host.sys_path(&device_dir).display()
                    ));
                    device_dir.clone_from(dir);
                    PciDevice::read(host, dir).ok().flatten()
                }
                None => None,
            },
            Err(e) => {
                unreadable.push(e.to_string());
                None
            }
        };
        let mut unreadable_details = Vec::new();
        if let Some(p) = &pci {
            unreadable.extend(p.unreadable_ids.iter().cloned());
            unreadable_details.extend(p.unreadable.iter().cloned());
        }
        let driver = host
            .resolve_sys(format!("{device_dir}/driver"))
            .unwrap_or_else(|e| {
                unreadable.push(e.to_string());
                None
            })
            .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()));
        let mut ports = Vec::new();
        let numbers = host.list_sys(format!("{base}/ports")).unwrap_or_else(|e| {
            unreadable.push(e.to_string());
            Vec::new()
        });
        for number in numbers {
            let p = format!("{base}/ports/{number}");
            // `state` and `phys_state` are `N: NAME` (`4: ACTIVE`), the others free words.
            let word = |file: &str, code: bool, into: &mut Vec<String>| -> Option<String> {
                let rel = format!("{p}/{file}");
                match host.read_sys(&rel) {
                    Ok(Some(s)) => {
                        let w = if code {
                            Some(s.trim()).filter(|s| is_state(s)).map(strip_code)
                        } else {
                            Some(s.trim().to_owned()).filter(|w| is_kernel_word(w))
                        };
                        if w.is_none() {
                            into.push(format!(
                                "{}: unexpected content (not the kernel's text)",
                                host.sys_path(&rel).display()
                            ));
                        }
                        w
                    }
                    Ok(None) => None,
                    Err(e) => {
                        into.push(e.to_string());
                        None
                    }
                }
            };
            let state = word("state", true, &mut unreadable);
            let phys_state = word("phys_state", true, &mut unreadable_details);
            let link_layer = word("link_layer", false, &mut unreadable_details);
            let rate = word("rate", false, &mut unreadable_details);
            ports.push(Port {
                state: state.unwrap_or_else(|| "unknown".to_owned()),
                phys_state,
                link_layer,
                rate,
                number,
            });
        }
        out.push(RdmaDevice {
            name,
            driver,
            pci,
            ports,
            unreadable,
            unreadable_details,
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
