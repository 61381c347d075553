// SPDX-License-Identifier: MIT OR Apache-2.0
//! What `modprobe nvidia-peermem` would load: depmod's choice for the module name in
//! `/lib/modules/<release>/modules.dep`. A driver reload, the boot, and the NVIDIA GPU Operator's
//! peer-memory container (a plain `modprobe nvidia-peermem`) all load that file, whatever is
//! loaded now.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::host::Host;

/// The module name `modprobe` resolves (it treats `-` and `_` alike).
const MODULE: &str = "nvidia_peermem";
/// Our module's `description=` in its `.modinfo` (kmod/client/nvpeer_main.rs).
const OUR_DESCRIPTION: &[u8] =
    b"description=GPUDirect RDMA peer-memory client for NVIDIA GPU memory (nvpeer";

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TargetKind {
    /// This project's module.
    Nvpeer,
    /// Another `nvidia_peermem` (NVIDIA's, from the driver package or its DKMS).
    Other,
    /// A compressed module file (`.ko.xz`, `.ko.zst`, `.ko.gz`): its `.modinfo` is not read.
    Unread,
}

/// depmod's entry for `nvidia_peermem` on the running kernel.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModprobeTarget {
    /// The kernel release whose `modules.dep` was read.
    pub release: String,
    /// The module file as `modules.dep` names it (relative to `/lib/modules/<release>`);
    /// `None`: no `nvidia_peermem` there.
    pub path: Option<String>,
    pub kind: Option<TargetKind>,
}

/// `None` when `modules.dep` of the running kernel cannot be found (a fixture without `lib/`,
/// a container without `/lib/modules`): nothing to say then.
pub fn modprobe_target(host: &Host) -> Result<Option<ModprobeTarget>> {
    let Some(release) = host.read_proc("sys/kernel/osrelease")? else {
        return Ok(None);
    };
    let release = release.trim().to_owned();
    // /lib beside the sysfs root: /sys/../lib on a host, <fixture>/lib in tests.
    let dir = host.sys_path("..").join("lib/modules").join(&release);
    let dep = dir.join("modules.dep");
    let text = match std::fs::read_to_string(&dep) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(Error::Read {
                path: dep,
                source: e,
            })
        }
    };
    let Some(path) = chosen(&text) else {
        return Ok(Some(ModprobeTarget {
            release,
            path: None,
            kind: None,
        }));
    };
    let kind = if path.ends_with(".ko") {
        let file = if path.starts_with('/') {
            host.sys_path("..").join(path.trim_start_matches('/'))
        } else {
            dir.join(path)
        };
        let bytes = std::fs::read(&file).map_err(|e| Error::Read {
            path: file.clone(),
            source: e,
        })?;
        if bytes
            .windows(OUR_DESCRIPTION.len())
            .any(|w| w == OUR_DESCRIPTION)
        {
            TargetKind::Nvpeer
        } else {
            TargetKind::Other
        }
    } else {
        TargetKind::Unread
    };
    Ok(Some(ModprobeTarget {
        release,
        path: Some(path.to_owned()),
        kind: Some(kind),
    }))
}

/// The `modules.dep` entry of `nvidia_peermem`: depmod lists one file per module name, the one
/// its search order (updates/ before the kernel's own tree by default) chose.
fn chosen(modules_dep: &str) -> Option<&str> {
    dep_entry(modules_dep, MODULE)
}

/// The `modules.dep` entry of module `name` (`-` and `_` alike, as modprobe treats them).
fn dep_entry<'a>(modules_dep: &'a str, name: &str) -> Option<&'a str> {
    let name = name.replace('-', "_");
    modules_dep.lines().find_map(|line| {
        let (path, _deps) = line.split_once(':')?;
        let file = path.rsplit('/').next()?;
        let stem = file.split(".ko").next()?;
        (file.contains(".ko") && stem.replace('-', "_") == name).then_some(path.trim())
    })
}

/// Roots whose `lib/modules/<release>` may hold the module files of what is loaded: the host's
/// own, then the roots that the NVIDIA Network Operator's DOCA driver container and the GPU
/// Operator's driver container share with the host (they load modules from there).
pub const MODULE_ROOTS: [&str; 3] = ["", "run/mellanox/drivers", "run/nvidia/driver"];

/// A module file that `modprobe <name>` would load from one of [`MODULE_ROOTS`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModuleFile {
    /// The root it was found under (`/`, `/run/mellanox/drivers`, ...).
    pub root: String,
    /// The file, as an absolute path on this host (under the sysfs root's parent in tests).
    pub path: std::path::PathBuf,
}

/// The running kernel's release (`/proc/sys/kernel/osrelease`); `None` when it cannot be read.
pub fn running_release(host: &Host) -> Result<Option<String>> {
    Ok(host
        .read_proc("sys/kernel/osrelease")?
        .map(|r| r.trim().to_owned()))
}

/// Every file that `modules.dep` names for module `name` under each of [`MODULE_ROOTS`], for
/// the running release, in that order. A root without `modules.dep` is skipped.
pub fn module_files(host: &Host, release: &str, name: &str) -> Result<Vec<ModuleFile>> {
    let mut found = Vec::new();
    // Beside the sysfs root: / on a host, <fixture> in tests.
    let sys = host.sys_path("");
    let beside = match sys.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => std::path::PathBuf::from("."),
    };
    for root in MODULE_ROOTS {
        let base = beside.join(root);
        let dir = base.join("lib/modules").join(release);
        let dep = dir.join("modules.dep");
        let text = match std::fs::read_to_string(&dep) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(source) => return Err(Error::Read { path: dep, source }),
        };
        if let Some(rel) = dep_entry(&text, name) {
            let path = if rel.starts_with('/') {
                base.join(rel.trim_start_matches('/'))
            } else {
                dir.join(rel)
            };
            found.push(ModuleFile {
                root: format!("/{root}"),
                path,
            });
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_entry_by_module_name_whatever_its_spelling() {
        let dep = "kernel/drivers/infiniband/core/ib_core.ko.zst:\n\
                   updates/dkms/nvidia-peermem.ko.zst: kernel/drivers/infiniband/core/ib_core.ko.zst\n";
        assert_eq!(chosen(dep), Some("updates/dkms/nvidia-peermem.ko.zst"));
        assert_eq!(
            chosen("updates/nvidia_peermem.ko: \n"),
            Some("updates/nvidia_peermem.ko")
        );
        assert_eq!(
            chosen("kernel/nvidia_peermem_extra.ko:\nkernel/x.ko:\n"),
            None
        );
        assert_eq!(chosen(""), None);
    }

    #[test]
    fn tells_ours_from_another_and_a_missing_dep_file() {
        let root = tempfile::tempdir().unwrap();
        let sys = root.path().join("sys");
        let proc = root.path().join("proc");
        std::fs::create_dir_all(&sys).unwrap();
        std::fs::create_dir_all(proc.join("sys/kernel")).unwrap();
        std::fs::write(proc.join("sys/kernel/osrelease"), "7.2.0-test\n").unwrap();
        let host = Host::new(&sys, &proc);
        assert_eq!(modprobe_target(&host).unwrap(), None);
        let dir = root.path().join("lib/modules/7.2.0-test");
        std::fs::create_dir_all(dir.join("updates")).unwrap();
        std::fs::write(dir.join("modules.dep"), "updates/nvidia_peermem.ko:\n").unwrap();
        let mut ko = b"\x7fELF....license=GPL\0".to_vec();
        ko.extend_from_slice(OUR_DESCRIPTION);
        ko.extend_from_slice(b", Rust)\0");
        std::fs::write(dir.join("updates/nvidia_peermem.ko"), &ko).unwrap();
        let t = modprobe_target(&host).unwrap().unwrap();
        assert_eq!(t.kind, Some(TargetKind::Nvpeer));
        assert_eq!(t.path.as_deref(), Some("updates/nvidia_peermem.ko"));
        std::fs::write(
            dir.join("updates/nvidia_peermem.ko"),
            b"description=NVIDIA GPU memory plug-in\0",
        )
        .unwrap();
        assert_eq!(
            modprobe_target(&host).unwrap().unwrap().kind,
            Some(TargetKind::Other)
        );
        std::fs::write(dir.join("modules.dep"), "kernel/nvidia-peermem.ko.xz:\n").unwrap();
        assert_eq!(
            modprobe_target(&host).unwrap().unwrap().kind,
            Some(TargetKind::Unread)
        );
        std::fs::write(dir.join("modules.dep"), "kernel/other.ko:\n").unwrap();
        let t = modprobe_target(&host).unwrap().unwrap();
        assert_eq!((t.path, t.kind), (None, None));
    }
}
