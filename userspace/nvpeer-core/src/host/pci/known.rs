// SPDX-License-Identifier: MIT OR Apache-2.0
//! The PCI devices the readiness rules know by id (Grace and Vera root ports, ConnectX and
//! BlueField parts) and the VPD that pairs a ConnectX-8 NIC with its DMA function.

use serde::{Deserialize, Serialize};

use super::NVIDIA_VENDOR;

/// PCI devices the readiness rules recognise by vendor and device id: NVIDIA's Grace root ports
/// and the ConnectX / BlueField parts of its Grace-Blackwell complexes (the table of rdma-core's
/// `kernel-boot/rdma_topo`, 2025-2026).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KnownDevice {
    /// 10de:22b1, 22b2, 22b8: a root port of NVIDIA's Grace CPU (GH200, GB200, GB300).
    GraceRootPort,
    /// 10de:2f95, 2f96: a root port of NVIDIA's Vera CPU (Vera Rubin), the ids rdma_topo lists
    /// (`../shared/FIELD.md` U8: rdma-core commits after v64.0, master; the rdma_topo versions
    /// this nvpeer could read list only Grace's). The ids are NVIDIA root ports: the PCI ID
    /// Repository (Debian's `pci.ids` 2026.10.24) names them "TB500 RP x16" and "TB500 RP x8"
    /// (2f97 ... 2f99 are its x4, x2 and x1 ports, which rdma_topo does not list: not taken
    /// here); that TB500 is Vera is U8's reading, **[unverified]** beyond it. rdma-core PR #1779
    /// (merged 2026-07) names Grace-Vera among the "NUMA-based" platforms, NICs and GPUs each
    /// directly under a CPU root port.
    VeraRootPort,
    /// 15b3:1021.
    #[serde(rename = "connectx7")]
    ConnectX7,
    /// 15b3:1023.
    #[serde(rename = "connectx8")]
    ConnectX8,
    /// 15b3:1025: "CX9 Family [ConnectX-9]" in the PCI ID Repository (Debian's `pci.ids`
    /// 2026.10.24), UCX's `UCS_TOPO_GROUPS_CX9_DEVICE_ID` (openucx/ucx PR #11939); in
    /// rdma_topo's table per FIELD.md U8.
    #[serde(rename = "connectx9")]
    ConnectX9,
    /// 15b3:2100: the ConnectX-8 DMA function (Data Direct), beside the GPU.
    #[serde(rename = "connectx8_dma")]
    ConnectX8Dma,
    /// 15b3:197c: an upstream or downstream port of a ConnectX's PCIe switch.
    #[serde(rename = "connectx_switch")]
    ConnectXSwitch,
    /// 15b3:a2dc.
    #[serde(rename = "bluefield3")]
    BlueField3,
    /// 15b3:197b: a port of a BlueField-3's PCIe switch.
    #[serde(rename = "bluefield3_switch")]
    BlueField3Switch,
}

/// Mellanox's (NVIDIA Networking's) PCI vendor id.
pub const MELLANOX_VENDOR: u16 = 0x15b3;

impl KnownDevice {
    pub fn of(vendor: u16, device: u16) -> Option<Self> {
        Some(match (vendor, device) {
            (NVIDIA_VENDOR, 0x22b1 | 0x22b2 | 0x22b8) => Self::GraceRootPort,
            (NVIDIA_VENDOR, 0x2f95 | 0x2f96) => Self::VeraRootPort,
            (MELLANOX_VENDOR, 0x1021) => Self::ConnectX7,
            (MELLANOX_VENDOR, 0x1023) => Self::ConnectX8,
            (MELLANOX_VENDOR, 0x1025) => Self::ConnectX9,
            (MELLANOX_VENDOR, 0x2100) => Self::ConnectX8Dma,
            (MELLANOX_VENDOR, 0x197c) => Self::ConnectXSwitch,
            (MELLANOX_VENDOR, 0xa2dc) => Self::BlueField3,
            (MELLANOX_VENDOR, 0x197b) => Self::BlueField3Switch,
            _ => return None,
        })
    }

    pub fn describe(self) -> &'static str {
        match self {
            Self::GraceRootPort => "Grace root port",
            Self::VeraRootPort => "Vera root port",
            Self::ConnectX7 => "ConnectX-7",
            Self::ConnectX8 => "ConnectX-8",
            Self::ConnectX9 => "ConnectX-9",
            Self::ConnectX8Dma => "ConnectX-8 DMA function",
            Self::ConnectXSwitch => "ConnectX switch port",
            Self::BlueField3 => "BlueField-3",
            Self::BlueField3Switch => "BlueField-3 switch port",
        }
    }

    /// The bridges whose ACS `rdma_topo` configures.
    pub fn is_acs_managed_bridge(self) -> bool {
        matches!(
            self,
            Self::GraceRootPort | Self::ConnectXSwitch | Self::BlueField3Switch
        )
    }
}

/// A VPD-R keyword (`SN`, `V3`) and its value.
type VpdKeyword<'a> = ([u8; 2], &'a [u8]);

/// The identifier string and the read-only section's (VPD-R) keywords of a `vpd` file (PCI VPD:
/// small and large resource tags), as far as it is well-formed: as `rdma_topo`'s `parse_vpd`
/// reads it, a tag or keyword whose length runs past the data ends the walk, and what came
/// before it stays. Never panics on any input.
fn vpd_fields(vpd: &[u8]) -> (Option<&[u8]>, Vec<VpdKeyword<'_>>) {
    const LARGE: u8 = 0x80;
    const END_SMALL: u8 = 0x78;
    const END_LARGE: u8 = 0x79;
    const ID_STRING: u8 = 0x82;
    const VPD_R: u8 = 0x90;
    let (mut name, mut keywords) = (None, Vec::new());
    let mut rest = vpd;
    while let Some(&tag) = rest.first() {
        if tag == END_SMALL || tag == END_LARGE {
            break;
        }
        let (header, len) = if tag & LARGE != 0 {
            match rest.get(1..3) {
                Some(l) => (3, usize::from(u16::from_le_bytes([l[0], l[1]]))),
                None => break,
            }
        } else {
            (1, usize::from(tag & 0x07))
        };
        let Some(item) = rest.get(header..header + len) else {
            break;
        };
        if tag == ID_STRING {
            name = Some(item);
        }
        if tag == VPD_R {
            let mut kw = item;
            while kw.len() >= 3 {
                let klen = usize::from(kw[2]);
                let Some(value) = kw.get(3..3 + klen) else {
                    break;
                };
                keywords.push(([kw[0], kw[1]], value));
                kw = &kw[3 + klen..];
            }
        }
        rest = &rest[header + len..];
    }
    (name, keywords)
}

/// The V3 keyword (the board's UUID, which a ConnectX-8 PF and its DMA function share) and the
/// identifier string of a `vpd` file (PCI VPD: small and large resource tags; VPD-R keywords).
pub fn parse_vpd(vpd: &[u8]) -> (Option<String>, Option<String>) {
    let (name, keywords) = vpd_fields(vpd);
    let v3 = keywords
        .iter()
        .rev()
        .find(|(k, _)| k == b"V3")
        .and_then(|(_, v)| std::str::from_utf8(v).ok().map(str::to_owned));
    let name = name.and_then(|n| std::str::from_utf8(n).ok().map(|s| s.trim().to_owned()));
    (v3, name)
}

/// The serial number (the `SN` keyword of the read-only section, PCI VPD's "Serial Number") of a
/// `vpd` file: the board `rdma_topo` groups NIC functions into (`NVCX_Topo.Board`, its
/// `vpd_sn`). `None` where the VPD has no such keyword, is malformed before it, or the value is
/// not printable ASCII once trailing blanks and NULs are trimmed: unknown, never a guess.
/// **[unverified]**: the `rdma_topo` revisions read (rdma-core, 2025-2026) parse only V3 and the
/// identifier string, and its unit test mocks `vpd_sn`; reading it from VPD-R's `SN` keyword
/// (what `lspci -vv` shows as "[SN] Serial number") is nvpeer's reading of the name.
pub fn vpd_serial(vpd: &[u8]) -> Option<String> {
    let (_, keywords) = vpd_fields(vpd);
    let (_, value) = keywords.iter().rev().find(|(k, _)| k == b"SN")?;
    let s = std::str::from_utf8(value).ok()?;
    let s = s.trim_matches(|c: char| c.is_ascii_whitespace() || c == '\0');
    (!s.is_empty() && s.bytes().all(|b| b.is_ascii_graphic() || b == b' ')).then(|| s.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vpd_name_and_v3() {
        let mut vpd = vec![0x82, 11, 0];
        vpd.extend_from_slice(b"ConnectX-8 ");
        let keywords = [b"PN".as_slice(), &[3], b"abc", b"V3", &[4], b"u-1d"].concat();
        vpd.extend_from_slice(&[0x90, keywords.len() as u8, 0]);
        vpd.extend_from_slice(&keywords);
        vpd.push(0x78);
        assert_eq!(
            parse_vpd(&vpd),
            (Some("u-1d".to_owned()), Some("ConnectX-8".to_owned()))
        );
        assert_eq!(parse_vpd(&vpd[..5]), (None, None));
        assert_eq!(parse_vpd(&[]), (None, None));
    }

    /// A VPD with an identifier string and a VPD-R section of `keywords`.
    fn vpd_with(keywords: &[u8]) -> Vec<u8> {
        let mut vpd = vec![0x82, 10, 0];
        vpd.extend_from_slice(b"ConnectX-9");
        vpd.extend_from_slice(&[0x90, keywords.len() as u8, 0]);
        vpd.extend_from_slice(keywords);
        vpd.push(0x78);
        vpd
    }

    #[test]
    fn vpd_serial_number() {
        let kw = [
            b"PN".as_slice(),
            &[3],
            b"abc",
            b"SN",
            &[14],
            b"MT2542X00001  ",
        ]
        .concat();
        let vpd = vpd_with(&kw);
        assert_eq!(vpd_serial(&vpd).as_deref(), Some("MT2542X00001"));
        // Malformed: unknown, never a panic or a wrong serial.
        assert_eq!(vpd_serial(&[]), None);
        assert_eq!(vpd_serial(&vpd[..20]), None, "cut inside VPD-R");
        let long = [b"SN".as_slice(), &[200], b"MT2542X00001"].concat();
        assert_eq!(
            vpd_serial(&vpd_with(&long)),
            None,
            "keyword longer than its section"
        );
        assert_eq!(
            vpd_serial(&vpd_with(b"SN\x04\xff\xfe\x00\x01")),
            None,
            "not ASCII"
        );
        assert_eq!(vpd_serial(&vpd_with(b"SN\x03\x00\x00 ")), None, "blank");
        assert_eq!(vpd_serial(&vpd_with(b"PN\x03abc")), None, "no SN");
        // A large tag whose length runs past the file.
        assert_eq!(vpd_serial(&[0x90, 0xff, 0xff, b'S', b'N', 1, b'x']), None);
    }

    #[test]
    fn known_devices() {
        assert_eq!(
            KnownDevice::of(0x10de, 0x22b8),
            Some(KnownDevice::GraceRootPort)
        );
        assert_eq!(
            KnownDevice::of(0x15b3, 0x2100),
            Some(KnownDevice::ConnectX8Dma)
        );
        assert_eq!(KnownDevice::of(0x15b3, 0x1017), None);
        assert_eq!(
            KnownDevice::of(0x10de, 0x2f96),
            Some(KnownDevice::VeraRootPort)
        );
        assert_eq!(
            KnownDevice::of(0x15b3, 0x1025),
            Some(KnownDevice::ConnectX9)
        );
        // pci.ids' other TB500 root ports (x4, x2, x1) are not in rdma_topo's table: not by id.
        assert_eq!(KnownDevice::of(0x10de, 0x2f97), None);
        // A Vera root port is not one whose ACS rdma_topo's Grace masks manage.
        assert!(!KnownDevice::VeraRootPort.is_acs_managed_bridge());
    }
}
