//! Process limits that matter for registering GPU memory.

use serde::{Deserialize, Serialize};

/// `RLIMIT_MEMLOCK` in bytes; `None` = unlimited.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Memlock {
    pub soft: Option<u64>,
    pub hard: Option<u64>,
}

impl Memlock {
    /// This process's limit (`getrlimit(RLIMIT_MEMLOCK)`; a failed call, which Linux never
    /// gives for this resource, reads as unlimited).
    pub fn current() -> Self {
        use nix::sys::resource::{getrlimit, Resource, RLIM_INFINITY};
        let (soft, hard) =
            getrlimit(Resource::RLIMIT_MEMLOCK).unwrap_or((RLIM_INFINITY, RLIM_INFINITY));
        let limit = |v: u64| (v != RLIM_INFINITY).then_some(v);
        Self {
            soft: limit(soft),
            hard: limit(hard),
        }
    }
}

impl Memlock {
    /// Neither the soft nor the hard limit is finite.
    pub fn unlimited(&self) -> bool {
        self.soft.is_none() && self.hard.is_none()
    }
}

/// The `Max locked memory` line of a `/proc/<pid>/limits` file (`fs/proc/base.c`: the name in a
/// 25-column field, then soft and hard limit, `unlimited` or bytes, then `bytes`); `None` when
/// the file has no such line or its values are not numbers.
pub fn parse_proc_limits(text: &str) -> Option<Memlock> {
    let rest = text
        .lines()
        .find_map(|l| l.strip_prefix("Max locked memory"))?;
    let mut values = rest.split_whitespace().map(|v| match v {
        "unlimited" => Some(None),
        n => n.parse::<u64>().ok().map(Some),
    });
    let soft = values.next()??;
    let hard = values.next()??;
    Some(Memlock { soft, hard })
}

/// The soft `Max open files` of a `/proc/<pid>/limits` file (`u64::MAX`: unlimited); `None`
/// when the line is absent or malformed.
pub fn parse_open_files(text: &str) -> Option<u64> {
    let rest = text
        .lines()
        .find_map(|l| l.strip_prefix("Max open files"))?;
    match rest.split_whitespace().next()? {
        "unlimited" => Some(u64::MAX),
        n => n.parse().ok(),
    }
}

/// A systemd resource limit as a unit file writes it (`LimitMEMLOCK=`, systemd.exec(5)): one
/// value for both or `SOFT:HARD`, each `infinity` or bytes with an optional binary suffix
/// (`K`, `M`, `G`, `T`, `P`, `E`, base 1024); `None` when it is neither.
pub fn parse_systemd_limit(text: &str) -> Option<Memlock> {
    fn one(v: &str) -> Option<Option<u64>> {
        let v = v.trim();
        if v == "infinity" {
            return Some(None);
        }
        let (digits, shift) = match v.char_indices().last()? {
            (i, c @ ('K' | 'M' | 'G' | 'T' | 'P' | 'E')) => {
                (&v[..i], 10 * (1 + "KMGTPE".find(c)? as u32))
            }
            _ => (v, 0),
        };
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let n: u64 = digits.parse().ok()?;
        n.checked_mul(1u64.checked_shl(shift)?).map(Some)
    }
    let (soft, hard) = match text.split_once(':') {
        Some((s, h)) => (one(s)?, one(h)?),
        None => {
            let v = one(text)?;
            (v, v)
        }
    };
    Some(Memlock { soft, hard })
}

/// `1536` -> `1.5 KiB`, binary units, for people.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 7] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else if value.fract() == 0.0 {
        format!("{value:.0} {}", UNITS[unit])
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_sizes() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(65536), "64 KiB");
        assert_eq!(human_bytes(256 << 20), "256 MiB");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(u64::MAX), "16 EiB");
    }

    #[test]
    fn proc_limits_and_systemd_limits() {
        // fs/proc/base.c's layout, as a real /proc/<pid>/limits shows it.
        let limits =
            "Limit                     Soft Limit           Hard Limit           Units     \n\
            Max cpu time              unlimited            unlimited            seconds   \n\
            Max locked memory         8388608              8388608              bytes     \n";
        assert_eq!(
            parse_proc_limits(limits),
            Some(Memlock {
                soft: Some(8 << 20),
                hard: Some(8 << 20)
            })
        );
        let unlimited =
            "Max locked memory         unlimited            unlimited            bytes     \n";
        assert!(parse_proc_limits(unlimited).unwrap().unlimited());
        assert_eq!(parse_proc_limits("Max cpu time 1 1 seconds\n"), None);
        assert_eq!(
            parse_proc_limits("Max locked memory  many  1 bytes\n"),
            None
        );
        let m = |soft, hard| Some(Memlock { soft, hard });
        assert_eq!(parse_systemd_limit("infinity"), m(None, None));
        assert_eq!(parse_systemd_limit("8M"), m(Some(8 << 20), Some(8 << 20)));
        assert_eq!(parse_systemd_limit("65536"), m(Some(65536), Some(65536)));
        assert_eq!(parse_systemd_limit("8M:infinity"), m(Some(8 << 20), None));
        for bad in ["", "8X", "M", "-1", "8M:", "lots"] {
            assert_eq!(parse_systemd_limit(bad), None, "{bad}");
        }
    }

    #[test]
    fn reads_this_process_limit() {
        let m = Memlock::current();
        if let (Some(s), Some(h)) = (m.soft, m.hard) {
            assert!(s <= h);
        }
    }
}
