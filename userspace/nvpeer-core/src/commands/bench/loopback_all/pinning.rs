// SPDX-License-Identifier: MIT OR Apache-2.0
//! The CPUs a pair's transfer runs on: the NIC's NUMA node from sysfs, its CPU list, and the
//! affinity of the calling thread.

use serde::Serialize;

use crate::host::Host;

/// `0-15,32-47` -> [0..=15, 32..=47]; `None` when it is not a CPU list (or is empty).
pub fn parse_cpulist(text: &str) -> Option<Vec<usize>> {
    let mut cpus = Vec::new();
    for part in text.trim().split(',') {
        let part = part.trim();
        if part.is_empty() {
            continue;
        }
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (a.trim().parse().ok()?, b.trim().parse().ok()?),
            None => {
                let v: usize = part.parse().ok()?;
                (v, v)
            }
        };
        if a > b || b >= 1 << 16 {
            return None;
        }
        cpus.extend(a..=b);
    }
    cpus.sort_unstable();
    cpus.dedup();
    (!cpus.is_empty()).then_some(cpus)
}

/// Where a pair's transfer runs: the NIC's NUMA node and its CPUs, or why it is not pinned.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Pinning {
    /// `numa_node` of the NIC's PCI function (`-1`: the firmware did not say).
    pub numa_node: Option<i32>,
    /// The node's CPU list as sysfs gives it (`/sys/devices/system/node/node<N>/cpulist`, else
    /// the NIC's `local_cpulist`); `None` when the pair is not pinned.
    pub cpulist: Option<String>,
    #[serde(skip)]
    pub cpus: Vec<usize>,
    /// Why the pair is not pinned.
    pub note: Option<String>,
}

/// The pinning of a transfer over `nic`, read from sysfs.
pub fn pinning(host: &Host, nic: &str) -> Result<Pinning, crate::Error> {
    let base = format!("class/infiniband/{nic}/device");
    let unpinned = |numa_node, note: String| Pinning {
        numa_node,
        cpulist: None,
        cpus: Vec::new(),
        note: Some(note),
    };
    let Some(text) = host.read_sys(format!("{base}/numa_node"))? else {
        return Ok(unpinned(
            None,
            format!("{nic}: no PCI function (a software device): not pinned"),
        ));
    };
    let node =
        crate::host::pci::parse_numa_node(&host.sys_path(format!("{base}/numa_node")), &text)?;
    if node < 0 {
        return Ok(unpinned(
            Some(node),
            format!("{nic}: NUMA node -1 (the firmware did not say): not pinned"),
        ));
    }
    let list = match host.read_sys(format!("devices/system/node/node{node}/cpulist"))? {
        Some(l) => Some(l),
        None => host.read_sys(format!("{base}/local_cpulist"))?,
    };
    Ok(match list.as_deref().map(|l| (l, parse_cpulist(l))) {
        Some((l, Some(cpus))) => Pinning {
            numa_node: Some(node),
            cpulist: Some(l.trim().to_owned()),
            cpus,
            note: None,
        },
        _ => unpinned(
            Some(node),
            format!("{nic}: NUMA node {node} lists no CPUs: not pinned"),
        ),
    })
}

/// Restricts the calling thread to `cpus` (those of them it may use: a cgroup cpuset or a
/// Slurm allocation may hold fewer). `Err` says why it could not.
pub(super) fn pin_current_thread(cpus: &[usize]) -> Result<(), String> {
    use nix::sched::{sched_getaffinity, sched_setaffinity, CpuSet};
    use nix::unistd::Pid;
    let this = Pid::from_raw(0);
    let allowed = sched_getaffinity(this)
        .map_err(|e| format!("sched_getaffinity: {}", std::io::Error::from(e)))?;
    let mut set = CpuSet::new();
    let mut any = false;
    for &c in cpus {
        // is_set and set fail only for a CPU beyond CpuSet::count(): not one to pin to.
        if allowed.is_set(c).unwrap_or(false) && set.set(c).is_ok() {
            any = true;
        }
    }
    if !any {
        return Err("none of these CPUs is allowed to this process".to_owned());
    }
    sched_setaffinity(this, &set)
        .map_err(|e| format!("sched_setaffinity: {}", std::io::Error::from(e)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpulists() {
        assert_eq!(
            parse_cpulist("0-3,8,10-11\n"),
            Some(vec![0, 1, 2, 3, 8, 10, 11])
        );
        assert_eq!(parse_cpulist("5"), Some(vec![5]));
        assert_eq!(parse_cpulist(""), None);
        assert_eq!(parse_cpulist("3-1"), None);
        assert_eq!(parse_cpulist("a-b"), None);
    }
}
