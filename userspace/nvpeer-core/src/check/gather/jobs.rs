// SPDX-License-Identifier: MIT OR Apache-2.0
//! Facts about where jobs start: the processes that start them (`slurmd`, `containerd`,
//! `dockerd`, `crio`, `kubelet`, found by `/proc/*/comm`), the memlock limit each passes on
//! (`/proc/<pid>/limits`) and where that limit comes from (its systemd unit's `LimitMEMLOCK=`,
//! read from the unit files, and `DefaultLimitMEMLOCK=`); and the process that runs `check`
//! (`/proc/self`: `CapEff`, uid, cgroup) with what says it runs in a container or job.
//!
//! Unit files are read rather than asked of `systemctl show`: fixture trees carry them, a
//! container sees the host's `/etc` where it is mounted, and the result is the same on a live
//! host (the unit file and its drop-ins in systemd's search order, the last assignment wins).

use std::collections::BTreeMap;

use crate::error::Result;
use crate::host::limits;
use crate::host::Host;

use super::super::{JobStarter, JobStarters, ProcessFacts, JOB_MARKER_ENV};

/// The `comm` of every process that starts jobs.
pub const STARTERS: [&str; 5] = ["slurmd", "containerd", "dockerd", "crio", "kubelet"];

/// systemd's unit directories, highest priority first (systemd.unit(5), system units).
const UNIT_DIRS: [&str; 5] = [
    "etc/systemd/system",
    "run/systemd/system",
    "usr/local/lib/systemd/system",
    "usr/lib/systemd/system",
    "lib/systemd/system",
];

pub(super) fn job_starters(host: &Host) -> Result<JobStarters> {
    let mut starters = Vec::new();
    for pid in crate::host::list_dir(&host.proc_path(""))? {
        let Ok(number) = pid.parse::<u32>() else {
            continue;
        };
        // A process that exits while it is read is simply not there.
        let Ok(Some(comm)) = host.read_proc(format!("{pid}/comm")) else {
            continue;
        };
        let comm = comm.trim();
        if !STARTERS.contains(&comm) {
            continue;
        }
        let memlock = host
            .read_proc(format!("{pid}/limits"))
            .ok()
            .flatten()
            .and_then(|t| limits::parse_proc_limits(&t));
        let unit = host
            .read_proc(format!("{pid}/cgroup"))
            .ok()
            .flatten()
            .and_then(|t| unit_of(&t));
        let (unit_limit_memlock, unit_limit_from) = match &unit {
            Some(u) => match unit_setting(host, u, "LimitMEMLOCK") {
                Some((value, file)) => (Some(value), Some(file)),
                None => (None, None),
            },
            None => (None, None),
        };
        starters.push(JobStarter {
            pid: number,
            comm: comm.to_owned(),
            memlock,
            unit,
            unit_limit_memlock,
            unit_limit_from,
        });
    }
    starters.sort_by_key(|s| s.pid);
    Ok(JobStarters {
        starters,
        default_limit_memlock: system_conf_setting(host, "DefaultLimitMEMLOCK"),
    })
}

/// The systemd service a process runs in: the last `*.service` component of its cgroup path
/// (v2 `0::/system.slice/containerd.service`, v1 `1:name=systemd:/system.slice/...`).
fn unit_of(cgroup: &str) -> Option<String> {
    let line = cgroup
        .lines()
        .find(|l| l.starts_with("0::"))
        .or_else(|| cgroup.lines().find(|l| l.contains(":name=systemd:")))?;
    let path = line.splitn(3, ':').nth(2)?;
    path.split('/')
        .rev()
        .find(|c| c.ends_with(".service"))
        .map(str::to_owned)
}

/// `key=` in the `[Service]`-style file `text`, last assignment wins; `None` when unset.
fn last_assignment(text: &str, key: &str) -> Option<String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.starts_with(['#', ';']))
        .filter_map(|l| l.split_once('='))
        .filter(|(k, _)| k.trim() == key)
        .map(|(_, v)| v.trim().to_owned())
        .next_back()
}

/// The unit file of `unit` (first in [`UNIT_DIRS`]) then its drop-ins (`<unit>.d/*.conf` of
/// every directory, by file name): the last `key=` and the file that set it.
fn unit_setting(host: &Host, unit: &str, key: &str) -> Option<(String, String)> {
    let mut files = Vec::new();
    if let Some(main) = UNIT_DIRS
        .iter()
        .map(|d| host.root_path(d).join(unit))
        .find(|p| p.is_file())
    {
        files.push(main);
    }
    let mut dropins: BTreeMap<String, std::path::PathBuf> = BTreeMap::new();
    for dir in UNIT_DIRS.iter().rev() {
        let d = host.root_path(dir).join(format!("{unit}.d"));
        for name in crate::host::list_dir(&d).unwrap_or_default() {
            if name.ends_with(".conf") {
                // A higher-priority directory's drop-in of the same name replaces the other.
                dropins.insert(name.clone(), d.join(&name));
            }
        }
    }
    files.extend(dropins.into_values());
    setting_in(host, &files, key)
}

/// `key=` of `/etc/systemd/system.conf` and `system.conf.d/*.conf`, last wins.
fn system_conf_setting(host: &Host, key: &str) -> Option<String> {
    let mut files = vec![host.root_path("etc/systemd/system.conf")];
    let d = host.root_path("etc/systemd/system.conf.d");
    files.extend(
        crate::host::list_dir(&d)
            .unwrap_or_default()
            .into_iter()
            .filter(|n| n.ends_with(".conf"))
            .map(|n| d.join(n)),
    );
    setting_in(host, &files, key).map(|(v, _)| v)
}

/// The last `key=` of `files` and the file (as the host names it) that set it.
fn setting_in(host: &Host, files: &[std::path::PathBuf], key: &str) -> Option<(String, String)> {
    let mut found = None;
    for f in files {
        if let Some(v) = std::fs::read_to_string(f)
            .ok()
            .and_then(|t| last_assignment(&t, key))
        {
            found = Some((v, host.root_name(f)));
        }
    }
    found
}

pub(super) fn process(host: &Host, job_env: &BTreeMap<String, String>) -> Result<ProcessFacts> {
    let status = host.read_proc("self/status")?.unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(str::trim)
    };
    let cap_eff = field("CapEff:").and_then(|v| u64::from_str_radix(v, 16).ok());
    let uid = field("Uid:")
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok());
    let cgroup = host
        .read_proc("self/cgroup")?
        .map(|t| t.lines().map(str::to_owned).collect())
        .unwrap_or_default();
    let mut markers: Vec<String> = [".dockerenv", "run/.containerenv"]
        .into_iter()
        .filter(|f| host.root_path(f).exists())
        .map(|f| format!("/{f}"))
        .collect();
    markers.extend(
        JOB_MARKER_ENV
            .iter()
            .filter(|k| job_env.contains_key(**k))
            .map(|k| (*k).to_owned()),
    );
    let open_files_soft = host
        .read_proc("self/limits")?
        .and_then(|t| crate::host::limits::parse_open_files(&t));
    Ok(ProcessFacts {
        cap_eff,
        uid,
        open_files_soft,
        cgroup,
        markers,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn write(root: &Path, rel: &str, content: &str) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, content).unwrap();
    }

    const LIMITS_8M: &str =
        "Limit                     Soft Limit           Hard Limit           Units     \n\
        Max locked memory         8388608              8388608              bytes     \n";

    #[test]
    fn starters_their_limits_and_units() {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        std::fs::create_dir_all(r.join("sys")).unwrap();
        write(r, "proc/812/comm", "containerd\n");
        write(r, "proc/812/limits", LIMITS_8M);
        write(
            r,
            "proc/812/cgroup",
            "0::/system.slice/containerd.service\n",
        );
        write(r, "proc/90/comm", "slurmd\n");
        write(
            r,
            "proc/90/cgroup",
            "1:name=systemd:/system.slice/slurmd.service\n",
        );
        write(r, "proc/7/comm", "bash\n");
        write(r, "proc/self/comm", "nvpeer\n");
        write(
            r,
            "lib/systemd/system/containerd.service",
            "[Service]\nLimitMEMLOCK=infinity\nExecStart=/usr/bin/containerd\n",
        );
        write(
            r,
            "etc/systemd/system/containerd.service.d/10-memlock.conf",
            "[Service]\n# site default\nLimitMEMLOCK=8M\n",
        );
        write(
            r,
            "etc/systemd/system.conf",
            "[Manager]\n#DefaultLimitMEMLOCK=\nDefaultLimitMEMLOCK=8M\n",
        );
        let j = job_starters(&Host::new(r.join("sys"), r.join("proc"))).unwrap();
        assert_eq!(j.default_limit_memlock.as_deref(), Some("8M"));
        let names: Vec<(u32, &str)> = j
            .starters
            .iter()
            .map(|s| (s.pid, s.comm.as_str()))
            .collect();
        assert_eq!(names, [(90, "slurmd"), (812, "containerd")]);
        let c = &j.starters[1];
        assert_eq!(c.memlock.unwrap().soft, Some(8 << 20));
        assert_eq!(c.unit.as_deref(), Some("containerd.service"));
        // The drop-in overrides the unit file.
        assert_eq!(c.unit_limit_memlock.as_deref(), Some("8M"));
        assert_eq!(
            c.unit_limit_from.as_deref(),
            Some("/etc/systemd/system/containerd.service.d/10-memlock.conf")
        );
        let s = &j.starters[0];
        assert_eq!(
            (s.memlock, s.unit.as_deref()),
            (None, Some("slurmd.service"))
        );
        assert_eq!(s.unit_limit_memlock, None);
    }

    #[test]
    fn the_process_itself() {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        std::fs::create_dir_all(r.join("sys")).unwrap();
        write(
            r,
            "proc/self/status",
            "Name:\tnvpeer\nUid:\t1000\t1000\t1000\t1000\nCapEff:\t0000000000004000\n",
        );
        write(
            r,
            "proc/self/cgroup",
            "0::/kubepods.slice/kubepods-pod1.slice/cri-containerd-ab12.scope\n",
        );
        write(r, ".dockerenv", "");
        let env = BTreeMap::from([("KUBERNETES_SERVICE_HOST".to_owned(), "set".to_owned())]);
        let p = process(&Host::new(r.join("sys"), r.join("proc")), &env).unwrap();
        assert_eq!(p.cap_eff, Some(1 << 14));
        assert_eq!(p.uid, Some(1000));
        assert_eq!(p.cgroup.len(), 1);
        assert_eq!(p.markers, ["/.dockerenv", "KUBERNETES_SERVICE_HOST"]);
        assert_eq!(
            unit_of("0::/user.slice/user-1000.slice/session-3.scope\n"),
            None
        );
    }
}
