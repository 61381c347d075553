//! Read access to the host's sysfs and procfs under configurable roots ([`Host`]), and the
//! readers of host facts built on it, one file per source. They read and parse; judging is
//! [`crate::check`]'s.

pub mod kernel;
pub mod limits;
pub mod modprobe;
pub mod modtools;
pub mod nvidia_proc;
pub mod pci;
pub mod peermem;
pub mod provenance;
pub mod providers;
pub mod rdma;
pub mod records;
pub mod topo;
pub mod verbs;

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// The host as seen through `/sys` and `/proc` (or fixture trees standing in for them).
#[derive(Clone, Debug)]
pub struct Host {
    sys: PathBuf,
    proc: PathBuf,
}

impl Default for Host {
    fn default() -> Self {
        Self::new("/sys", "/proc")
    }
}

impl Host {
    pub fn new(sys: impl Into<PathBuf>, proc: impl Into<PathBuf>) -> Self {
        Self {
            sys: sys.into(),
            proc: proc.into(),
        }
    }

    /// True when this is the running host's own `/sys` (not a fixture or a container copy), so
    /// that probes which ask the kernel directly (libibverbs, getrlimit) describe the same host.
    pub fn is_live_sysfs(&self) -> bool {
        self.sys == Path::new("/sys")
    }

    /// True when this is the running host's own `/proc`.
    pub fn is_live_procfs(&self) -> bool {
        self.proc == Path::new("/proc")
    }

    /// Why the trees are not this running host's (`None`: both are), for what is then not
    /// probed: the libibverbs probe and getrlimit would describe another host than the trees.
    pub fn foreign_roots(&self) -> Option<&'static str> {
        match (self.is_live_sysfs(), self.is_live_procfs()) {
            (true, true) => None,
            (false, _) => Some("--sysfs-root is not /sys"),
            (true, false) => Some("--procfs-root is not /proc"),
        }
    }

    /// Path of `rel` (e.g. `module/nvidia_peermem/version`) under the sysfs root.
    pub fn sys_path(&self, rel: impl AsRef<Path>) -> PathBuf {
        self.sys.join(rel)
    }

    /// Path of `rel` (e.g. `dev/gdrdrv`, `etc/systemd/system`) in the host's root filesystem,
    /// which is the sysfs root's parent: `/` for `/sys`, `<fixture>` for `<fixture>/sys`.
    pub fn root_path(&self, rel: impl AsRef<Path>) -> PathBuf {
        match self.sys.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.join(rel),
            _ => Path::new(".").join(rel),
        }
    }

    /// A path under [`Host::root_path`] as the host itself names it (`/dev/gdrdrv`), whether the
    /// root is `/` or a fixture; another path as it is.
    pub fn root_name(&self, path: &Path) -> String {
        match path.strip_prefix(self.root_path("")) {
            Ok(rel) => format!("/{}", rel.display()),
            Err(_) => path.display().to_string(),
        }
    }

    /// Path of `rel` under the procfs root.
    pub fn proc_path(&self, rel: impl AsRef<Path>) -> PathBuf {
        self.proc.join(rel)
    }

    /// Contents of a sysfs file without the trailing newline; `None` when it does not exist.
    pub fn read_sys(&self, rel: impl AsRef<Path>) -> Result<Option<String>> {
        read_optional(&self.sys_path(rel))
    }

    /// Raw bytes of a sysfs file (PCI config space); `None` when it does not exist.
    pub fn read_sys_bytes(&self, rel: impl AsRef<Path>) -> Result<Option<Vec<u8>>> {
        let path = self.sys_path(rel);
        match std::fs::read(&path) {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(Error::Read { path, source }),
        }
    }

    /// Contents of a procfs file without the trailing newline; `None` when it does not exist.
    pub fn read_proc(&self, rel: impl AsRef<Path>) -> Result<Option<String>> {
        read_optional(&self.proc_path(rel))
    }

    /// Names of the entries of a sysfs directory, sorted; empty when it does not exist.
    pub fn list_sys(&self, rel: impl AsRef<Path>) -> Result<Vec<String>> {
        list_dir(&self.sys_path(rel))
    }

    pub fn sys_exists(&self, rel: impl AsRef<Path>) -> bool {
        self.sys_path(rel).exists()
    }

    /// Where a sysfs entry really lives, following every symlink, as a path relative to the
    /// sysfs root (e.g. `bus/pci/devices/0000:03:00.0` ->
    /// `devices/pci0000:00/0000:00:01.0/0000:03:00.0`). `None` when it does not exist.
    pub fn resolve_sys(&self, rel: impl AsRef<Path>) -> Result<Option<PathBuf>> {
        let path = self.sys_path(rel);
        let target = match std::fs::canonicalize(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(Error::Read { path, source }),
        };
        let root = std::fs::canonicalize(&self.sys).map_err(|source| Error::Read {
            path: self.sys.clone(),
            source,
        })?;
        match target.strip_prefix(&root) {
            Ok(inner) => Ok(Some(inner.to_path_buf())),
            Err(_) => Err(Error::OutsideRoot { path, target, root }),
        }
    }
}

/// A file that does not exist, or a link to nothing, which is not the same: the kernel makes
/// no dangling links, so one is an error (`NotFound`, naming it), not an absent file.
fn not_found(path: &Path, e: std::io::Error) -> Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => Err(Error::Read {
            path: path.to_owned(),
            source: std::io::Error::new(e.kind(), "a link to nothing"),
        }),
        _ => Ok(()),
    }
}

pub(crate) fn read_optional(path: &Path) -> Result<Option<String>> {
    match std::fs::read(path) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            Ok(Some(text.trim_end_matches('\n').to_owned()))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => not_found(path, e).map(|()| None),
        Err(source) => Err(Error::Read {
            path: path.to_owned(),
            source,
        }),
    }
}

pub(crate) fn list_dir(path: &Path) -> Result<Vec<String>> {
    let entries = match std::fs::read_dir(path) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(Error::Read {
                path: path.to_owned(),
                source,
            })
        }
    };
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| Error::Read {
            path: path.to_owned(),
            source,
        })?;
        names.push(entry.file_name().to_string_lossy().into_owned());
    }
    names.sort();
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_symlinks_relative_to_the_root() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("devices/pci0000:00/0000:00:01.0")).unwrap();
        std::fs::create_dir_all(root.join("bus/pci/devices")).unwrap();
        std::os::unix::fs::symlink(
            "../../../devices/pci0000:00/0000:00:01.0",
            root.join("bus/pci/devices/0000:00:01.0"),
        )
        .unwrap();
        let host = Host::new(root, "/nonexistent");
        assert_eq!(
            host.resolve_sys("bus/pci/devices/0000:00:01.0")
                .unwrap()
                .unwrap(),
            PathBuf::from("devices/pci0000:00/0000:00:01.0")
        );
        assert!(host
            .resolve_sys("bus/pci/devices/0000:00:02.0")
            .unwrap()
            .is_none());
    }

    #[test]
    fn a_symlink_leaving_the_root_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink("/", dir.path().join("escape")).unwrap();
        let host = Host::new(dir.path(), "/nonexistent");
        let err = host.resolve_sys("escape").unwrap_err().to_string();
        assert!(err.contains("outside the sysfs root"), "{err}");
    }
}
