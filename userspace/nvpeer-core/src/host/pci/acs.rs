// SPDX-License-Identifier: MIT OR Apache-2.0
//! Access Control Services in a function's config space: the control register, the bits that
//! send peer-to-peer traffic up to the root complex, and `rdma_topo`'s masks over them.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::PciAddress;
use crate::error::{Error, Result};
use crate::host::Host;

/// PCI Express extended capability id of Access Control Services.
pub const ACS_CAPABILITY_ID: u16 = 0x000d;
/// ACS control bits that send peer-to-peer traffic up to the root complex (or block it).
pub const ACS_P2P_REQUEST_REDIRECT: u16 = 0x0004;
pub const ACS_P2P_COMPLETION_REDIRECT: u16 = 0x0008;
pub const ACS_P2P_EGRESS_CONTROL: u16 = 0x0020;

/// What config space says about ACS on one function.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Acs {
    /// Config space stops before the extended capabilities (unprivileged reads give 64 bytes).
    NotReadable { bytes: usize },
    /// Readable, no ACS capability.
    Absent,
    /// The ACS control register.
    Present { offset: u16, control: u16 },
}

impl Acs {
    /// Names of the enabled bits that hurt peer-to-peer DMA.
    pub fn p2p_hurting_bits(&self) -> Vec<&'static str> {
        let Self::Present { control, .. } = self else {
            return Vec::new();
        };
        [
            (ACS_P2P_REQUEST_REDIRECT, "P2P Request Redirect"),
            (ACS_P2P_COMPLETION_REDIRECT, "P2P Completion Redirect"),
            (ACS_P2P_EGRESS_CONTROL, "P2P Egress Control"),
        ]
        .into_iter()
        .filter(|(bit, _)| control & bit != 0)
        .map(|(_, name)| name)
        .collect()
    }
}

fn le_u16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

fn le_u32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes([
        *b.get(at)?,
        *b.get(at + 1)?,
        *b.get(at + 2)?,
        *b.get(at + 3)?,
    ]))
}

/// Walks the extended capability list (from offset 0x100) of a config space image for ACS.
pub fn parse_acs(path: &Path, config: &[u8]) -> Result<Acs> {
    const EXT_START: usize = 0x100;
    if config.len() < EXT_START + 4 {
        return Ok(Acs::NotReadable {
            bytes: config.len(),
        });
    }
    let mut offset = EXT_START;
    // A well-formed list has at most (4096 - 256) / 4 entries; more means a loop.
    for _ in 0..(4096 - EXT_START) / 4 {
        let bad = |what: &'static str| {
            Error::parse(
                path,
                format!("extended capability header at {offset:#x}"),
                what,
            )
        };
        let header =
            le_u32(config, offset).ok_or_else(|| bad("a capability inside config space"))?;
        if header == 0 || header == 0xffff_ffff {
            return Ok(Acs::Absent);
        }
        let id = (header & 0xffff) as u16;
        let next = ((header >> 20) & 0xffc) as usize;
        if id == ACS_CAPABILITY_ID {
            let control = le_u16(config, offset + 6)
                .ok_or_else(|| bad("an ACS capability inside config space"))?;
            return Ok(Acs::Present {
                offset: offset as u16,
                control,
            });
        }
        if next == 0 {
            return Ok(Acs::Absent);
        }
        if next < EXT_START {
            return Err(bad("a next pointer of at least 0x100"));
        }
        offset = next;
    }
    Err(Error::parse(
        path,
        "extended capability list",
        "a list without a loop",
    ))
}

/// PCI Express extended capability id of Address Translation Services.
pub const ATS_CAPABILITY_ID: u16 = 0x000f;

/// Whether ATS is enabled (the Enable bit, 15, of the ATS control register at capability + 6):
/// `Some(false)` also where the function has no ATS capability; `None` where config space stops
/// before the extended capabilities or the list is malformed.
pub fn ats_enabled(config: &[u8]) -> Option<bool> {
    const EXT_START: usize = 0x100;
    let mut offset = EXT_START;
    for _ in 0..(4096 - EXT_START) / 4 {
        let header = le_u32(config, offset)?;
        if header == 0 || header == 0xffff_ffff {
            return Some(false);
        }
        if (header & 0xffff) as u16 == ATS_CAPABILITY_ID {
            return Some(le_u16(config, offset + 6)? & 0x8000 != 0);
        }
        let next = ((header >> 20) & 0xffc) as usize;
        if next == 0 {
            return Some(false);
        }
        if next < EXT_START {
            return None;
        }
        offset = next;
    }
    None
}

/// ATS of one function from its `config` file ([`ats_enabled`]); `None` when the file is absent
/// or short.
pub fn ats(host: &Host, address: PciAddress) -> Result<Option<bool>> {
    let rel = format!("bus/pci/devices/{address}/config");
    Ok(host
        .read_sys_bytes(&rel)?
        .and_then(|bytes| ats_enabled(&bytes)))
}

/// ACS of one function from its `config` file; `None` when the file is absent.
pub fn acs(host: &Host, address: PciAddress) -> Result<Option<Acs>> {
    let rel = format!("bus/pci/devices/{address}/config");
    match host.read_sys_bytes(&rel)? {
        Some(bytes) => parse_acs(&host.sys_path(&rel), &bytes).map(Some),
        None => Ok(None),
    }
}

/// The ACS control bits as `rdma_topo` writes masks over them, bit 6 first: Direct Translated
/// P2P, P2P Egress Control, Upstream Forwarding, P2P Completion Redirect, P2P Request Redirect,
/// Translation Blocking, Source Validation; `x` leaves a bit as it is (`xx110x1`).
pub fn acs_matches(control: u16, mask: &str) -> bool {
    mask.chars().rev().enumerate().all(|(bit, c)| match c {
        '1' => control & (1 << bit) != 0,
        '0' => control & (1 << bit) == 0,
        _ => true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config_with(caps: &[(u16, u16)]) -> Vec<u8> {
        // caps: (id, control) chained from 0x100 in steps of 0x10.
        let mut c = vec![0u8; 4096];
        for (i, (id, control)) in caps.iter().enumerate() {
            let at = 0x100 + i * 0x10;
            let next = if i + 1 < caps.len() { at + 0x10 } else { 0 };
            let header = u32::from(*id) | (1 << 16) | ((next as u32) << 20);
            c[at..at + 4].copy_from_slice(&header.to_le_bytes());
            c[at + 6..at + 8].copy_from_slice(&control.to_le_bytes());
        }
        c
    }

    #[test]
    fn ats_enable_bit() {
        assert_eq!(
            ats_enabled(&config_with(&[(ACS_CAPABILITY_ID, 0x1d)])),
            Some(false)
        );
        assert_eq!(
            ats_enabled(&config_with(&[
                (ACS_CAPABILITY_ID, 0x1d),
                (ATS_CAPABILITY_ID, 0x8000)
            ])),
            Some(true)
        );
        assert_eq!(
            ats_enabled(&config_with(&[(ATS_CAPABILITY_ID, 0x0004)])),
            Some(false)
        );
        assert_eq!(ats_enabled(&[0u8; 64]), None);
    }

    #[test]
    fn finds_acs_and_the_bits_that_hurt_p2p() {
        let p = Path::new("config");
        let cfg = config_with(&[(0x0001, 0), (ACS_CAPABILITY_ID, 0x001d)]);
        let acs = parse_acs(p, &cfg).unwrap();
        assert_eq!(
            acs,
            Acs::Present {
                offset: 0x110,
                control: 0x1d
            }
        );
        assert_eq!(
            acs.p2p_hurting_bits(),
            vec!["P2P Request Redirect", "P2P Completion Redirect"]
        );
        assert_eq!(
            parse_acs(p, &config_with(&[(0x0001, 0)])).unwrap(),
            Acs::Absent
        );
        assert_eq!(
            parse_acs(p, &[0u8; 64]).unwrap(),
            Acs::NotReadable { bytes: 64 }
        );
        // A next pointer back into the legacy area is malformed.
        let mut cfg = vec![0u8; 4096];
        cfg[0x100..0x104].copy_from_slice(&(0x0001u32 | (0x40 << 20)).to_le_bytes());
        assert!(parse_acs(p, &cfg).is_err());
        // A self loop is detected.
        let mut cfg = vec![0u8; 4096];
        cfg[0x100..0x104].copy_from_slice(&(0x0001u32 | (0x100 << 20)).to_le_bytes());
        let err = parse_acs(p, &cfg).unwrap_err().to_string();
        assert!(err.contains("loop"), "{err}");
    }

    #[test]
    fn acs_masks_as_rdma_topo_writes_them() {
        // UF + CR + SV, RR off: the DSP toward a ConnectX-8 DMA function.
        assert!(acs_matches(0x0019, "xx110x1"));
        assert!(acs_matches(0x001b, "xx110x1"), "x bits are free");
        assert!(!acs_matches(0x001d, "xx110x1"), "RR must be off");
        assert!(!acs_matches(0x0000, "xx101x1"));
        assert!(acs_matches(0x001c, "xx111x0"));
        assert!(!acs_matches(0x001d, "xx111x0"));
    }
}
