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
    /// MT/s (`16.0 GT/s` is 16000).
    pub speed: u32,
    pub max_speed: u32,
    pub width: u32,
    pub max_width: u32,
}

impl PcieLink {
    /// Fewer lanes than the device has: a bad seat, riser or cable; bandwidth divides.
    pub fn narrow(&self) -> bool {
        self.width < self.max_width
    }

    /// Below the device's top speed: trained down, or (a GPU) saving power while idle.
    pub fn slow(&self) -> bool {
        self.speed < self.max_speed
    }

    /// `x8 of x16, 16 GT/s of 32 GT/s`.
    pub fn describe(&self) -> String {
        let gts = |mts: u32| {
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

/// The link of the function at `rel`: `Ok(None)` without link files (or a speed `Unknown`, as
/// a link that is down shows), an error for files that are not the kernel's text, and for one
/// absent beside the others (the kernel writes all four or none).
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
    // A link that is down (an empty slot's root port) shows `Unknown` speeds or width 0.
    if speed.trim().starts_with("Unknown")
        || max_speed.trim().starts_with("Unknown")
        || width.trim() == "0"
    {
        return Ok(None);
    }
    let bad = |file: &str, text: &str, expected: &'static str| {
        Error::parse(host.sys_path(format!("{rel}/{file}")), text, expected)
    };
    let width_of = |file: &str, text: &str| {
        text.trim()
            .parse::<u32>()
            .ok()
            .filter(|w| (1..=32).contains(w))
            .ok_or_else(|| bad(file, text, "a link width of 1 to 32 lanes"))
    };
    Ok(Some(PcieLink {
        speed: parse_link_speed(&speed).ok_or_else(|| {
            bad(
                "current_link_speed",
                &speed,
                "a speed such as 16.0 GT/s PCIe",
            )
        })?,
        max_speed: parse_link_speed(&max_speed).ok_or_else(|| {
            bad(
                "max_link_speed",
                &max_speed,
                "a speed such as 32.0 GT/s PCIe",
            )
        })?,
        width: width_of("current_link_width", &width)?,
        max_width: width_of("max_link_width", &max_width)?,
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
        assert!(link("fast\n", "32.0 GT/s PCIe\n", "16\n", "16\n").is_err());
        assert!(link("16.0 GT/s PCIe\n", "32.0 GT/s PCIe\n", "99\n", "16\n").is_err());
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
