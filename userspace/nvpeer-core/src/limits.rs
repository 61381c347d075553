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
    fn reads_this_process_limit() {
        let m = Memlock::current();
        if let (Some(s), Some(h)) = (m.soft, m.hard) {
            assert!(s <= h);
        }
    }
}
