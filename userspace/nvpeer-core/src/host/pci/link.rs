// SPDX-License-Identifier: MIT OR Apache-2.0
//! The PCIe link of a function: speed and width now and at most (`current_link_*`,
//! `max_link_*`).

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::host::Host;

/// A PCIe link as sysfs shows it (`current_link_speed` `16.0 GT/s PCIe`, `max_link_speed`,
/// `current_link_width` `16`, `max_link_width`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PcieLink {
    /// MT/s (`16.0 GT/s` is 16000). `None`: the kernel prints `Unknown` for a link whose width
    /// it shows (a kernel without PCIe 6.0 support does so for 64 GT/s, a ConnectX-8's speed).
    pub speed: Option<u32>,
    pub max_speed: Option<u32>,
    pub width: u32,
    pub max_width: u32,
}

impl PcieLink {
    /// Fewer lanes than the device has: a bad seat, riser or cable; bandwidth divides.
    pub fn narrow(&self) -> bool {
        self.width < self.max_width
    }

    /// Below the device's top speed: trained down, or (a GPU) saving power while idle. `false`
    /// where either speed is unknown ([`PcieLink::speed_unknown`]).
    pub fn slow(&self) -> bool {
        matches!((self.speed, self.max_speed), (Some(s), Some(m)) if s < m)
    }

    /// Either speed printed `Unknown`: whether the link runs below its speed is not known.
    pub fn speed_unknown(&self) -> bool {
        self.speed.is_none() || self.max_speed.is_none()
    }

    /// `x8 of x16, 16 GT/s of 32 GT/s` (`unknown GT/s` for a speed the kernel prints `Unknown`).
    pub fn describe(&self) -> String {
        let gts = |mts: Option<u32>| {
            let Some(mts) = mts else {
                return "unknown".to_owned();
            };
            let s = format!("{:.1}", f64::from(mts) / 1000.0);
            s.strip_suffix(".0").map(str::to_owned).unwrap_or(s)
        };
        format!(
            "x{} of x{}, {} GT/s of {} GT/s",
            self.width,
            self.max_width,
            gts(self.speed),
            gts(self.max_speed)
        )
    }
}

/// `16.0 GT/s PCIe` (or `16 GT/s`, `2.5 GT/s`): MT/s; `Unknown` and anything else `None`.
fn parse_link_speed(text: &str) -> Option<u32> {
    let number = text.split_whitespace().next()?;
    let v: f64 = number.parse().ok()?;
    let ok = text.contains("GT/s") && v > 0.0 && v <= 256.0;
    // At most 256000 after the check: the cast cannot truncate.
    ok.then(|| (v * 1000.0).round() as u32)
}

/// The four link files of a PCIe function, as sysfs names them.
const LINK_FILES: [&str; 4] = [
    "current_link_speed",
    "max_link_speed",
    "current_link_width",
    "max_link_width",
];

/// The link width sysfs shows for a function whose config space reads as all ones (in D3cold,
/// or gone): the six bits of the Link Status register's width field all set.
const WIDTH_ALL_ONES: &str = "63";

/// The link of the function at `rel`: `Ok(None)` without link files or with a current width of
/// 0 (a link that is down, a root-complex-integrated endpoint, a VF: these print speed `Unknown`
/// and width 0), an error for files that are not the kernel's text, for width 63 (all ones: config
/// space unreadable, D3cold), and for one absent beside the others (the kernel writes all four
/// or none). A speed `Unknown` with a width of 1 to 32 is a link whose speed is unknown
/// (`speed`/`max_speed` `None`): a kernel without PCIe 6.0 support prints that for 64 GT/s; its
/// width is still judged.
pub(super) fn read_link(host: &Host, rel: &str) -> Result<Option<PcieLink>> {
    let mut texts = Vec::with_capacity(LINK_FILES.len());
    for file in LINK_FILES {
        texts.push(host.read_sys(format!("{rel}/{file}"))?);
    }
    if texts.iter().all(Option::is_none) {
        return Ok(None);
    }
    if let Some(i) = texts.iter().position(Option::is_none) {
        return Err(Error::Device(format!(
            "{}: absent, though the function's other link files are there",
            host.sys_path(format!("{rel}/{}", LINK_FILES[i])).display()
        )));
    }
    let mut texts = texts.into_iter().flatten();
    let (Some(speed), Some(max_speed), Some(width), Some(max_width)) =
        (texts.next(), texts.next(), texts.next(), texts.next())
    else {
        return Ok(None);
    };
    // Width 0: no link (down, or a function without one of its own).
    if width.trim() == "0" {
        return Ok(None);
    }
    let bad = |file: &str, text: &str, expected: &'static str| {
        Error::parse(host.sys_path(format!("{rel}/{file}")), text, expected)
    };
    let width_of = |file: &str, text: &str| {
        if text.trim() == WIDTH_ALL_ONES {
            return Err(bad(
                file,
                text,
                "a link width of 1 to 32 lanes (63 is all ones: the function's config space reads as all ones, in D3cold or gone)",
            ));
        }
        text.trim()
            .parse::<u32>()
            .ok()
            .filter(|w| (1..=32).contains(w))
            .ok_or_else(|| bad(file, text, "a link width of 1 to 32 lanes"))
    };
    let speed_of = |file: &str, text: &str, expected: &'static str| {
        if text.trim().starts_with("Unknown") {
            return Ok(None);
        }
        parse_link_speed(text)
            .map(Some)
            .ok_or_else(|| bad(file, text, expected))
    };
    Ok(Some(PcieLink {
        width: width_of("current_link_width", &width)?,
        max_width: width_of("max_link_width", &max_width)?,
        speed: speed_of(
            "current_link_speed",
            &speed,
            "a speed such as 16.0 GT/s PCIe",
        )?,
        max_speed: speed_of(
            "max_link_speed",
            &max_speed,
            "a speed such as 32.0 GT/s PCIe",
        )?,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host_with(files: &[(&str, &str)]) -> (tempfile::TempDir, Host) {
        let dir = tempfile::tempdir().unwrap();
        for (name, text) in files {
            let path = dir.path().join("f").join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        let host = Host::new(dir.path(), dir.path());
        (dir, host)
    }

    fn link(speed: &str, max: &str, width: &str, max_width: &str) -> Result<Option<PcieLink>> {
        let (_dir, host) = host_with(&[
            ("current_link_speed", speed),
            ("max_link_speed", max),
            ("current_link_width", width),
            ("max_link_width", max_width),
        ]);
        read_link(&host, "f")
    }

    #[test]
    fn links_as_sysfs_writes_them() {
        let l = link("16.0 GT/s PCIe\n", "32.0 GT/s PCIe\n", "8\n", "16\n")
            .unwrap()
            .unwrap();
        assert!(l.narrow() && l.slow());
        assert_eq!(l.describe(), "x8 of x16, 16 GT/s of 32 GT/s");
        let old = link("2.5 GT/s\n", "8 GT/s\n", "16\n", "16\n")
            .unwrap()
            .unwrap();
        assert_eq!(old.describe(), "x16 of x16, 2.5 GT/s of 8 GT/s");
        // A link that is down is no link, not a malformed one.
        assert_eq!(
            link("Unknown\n", "32.0 GT/s PCIe\n", "0\n", "16\n").unwrap(),
            None
        );
        assert_eq!(
            link("2.5 GT/s PCIe\n", "16.0 GT/s PCIe\n", "0\n", "16\n").unwrap(),
            None
        );
        // So is a root-complex-integrated endpoint's or a VF's: speeds Unknown, width 0.
        assert_eq!(link("Unknown\n", "Unknown\n", "0\n", "0\n").unwrap(), None);
        assert!(link("fast\n", "32.0 GT/s PCIe\n", "16\n", "16\n").is_err());
        assert!(link("16.0 GT/s PCIe\n", "32.0 GT/s PCIe\n", "99\n", "16\n").is_err());
    }

    /// 64 GT/s on a kernel without PCIe 6.0 support prints `Unknown`: the width is still read
    /// and judged, the speed is unknown (never taken for no link, nor for a full-speed one).
    #[test]
    fn an_unknown_speed_with_a_width_is_a_link_of_unknown_speed() {
        let l = link("Unknown\n", "Unknown\n", "8\n", "16\n")
            .unwrap()
            .expect("a link: its width is readable");
        assert!(l.narrow() && !l.slow() && l.speed_unknown());
        assert_eq!(l.describe(), "x8 of x16, unknown GT/s of unknown GT/s");
        let l = link("32.0 GT/s PCIe\n", "Unknown\n", "16\n", "16\n")
            .unwrap()
            .unwrap();
        assert!(!l.narrow() && !l.slow() && l.speed_unknown());
        assert_eq!((l.speed, l.max_speed), (Some(32000), None));
        let l = link("32.0 GT/s PCIe\n", "32.0 GT/s PCIe\n", "16\n", "16\n")
            .unwrap()
            .unwrap();
        assert!(!l.speed_unknown());
    }

    /// Width 63 (all ones): the function's config space read as all ones (D3cold): unreadable,
    /// an error naming the file, never a link nor no link.
    #[test]
    fn width_all_ones_is_unreadable() {
        for (width, max_width, file) in [
            ("63\n", "16\n", "current_link_width"),
            ("16\n", "63\n", "max_link_width"),
        ] {
            let e = link("Unknown\n", "Unknown\n", width, max_width)
                .unwrap_err()
                .to_string();
            assert!(e.contains(file) && e.contains("all ones"), "{e}");
        }
    }

    #[test]
    fn one_link_file_absent_beside_the_others_is_an_error_naming_it() {
        let (_dir, host) = host_with(&[
            ("current_link_speed", "16.0 GT/s PCIe\n"),
            ("max_link_speed", "32.0 GT/s PCIe\n"),
            ("max_link_width", "16\n"),
        ]);
        let e = read_link(&host, "f").unwrap_err().to_string();
        assert!(
            e.contains("current_link_width") && e.contains("absent"),
            "{e}"
        );
        // None of the four: no link (a VM, an integrated function).
        let (_dir, host) = host_with(&[("vendor", "0x10de\n")]);
        assert_eq!(read_link(&host, "f").unwrap(), None);
    }
}
