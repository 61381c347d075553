//! Read access to the host's sysfs and procfs under configurable roots.

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

    /// Path of `rel` (e.g. `module/nvidia_peermem/version`) under the sysfs root.
    pub fn sys_path(&self, rel: impl AsRef<Path>) -> PathBuf {
        self.sys.join(rel)
    }

    /// Path of `rel` under the procfs root.
    pub fn proc_path(&self, rel: impl AsRef<Path>) -> PathBuf {
        self.proc.join(rel)
    }

    /// Contents of a sysfs file without the trailing newline; `None` when it does not exist.
    pub fn read_sys(&self, rel: impl AsRef<Path>) -> Result<Option<String>> {
        read_optional(&self.sys_path(rel))
    }

    /// Names of the entries of a sysfs directory, sorted; empty when it does not exist.
    pub fn list_sys(&self, rel: impl AsRef<Path>) -> Result<Vec<String>> {
        list_dir(&self.sys_path(rel))
    }

    pub fn sys_exists(&self, rel: impl AsRef<Path>) -> bool {
        self.sys_path(rel).exists()
    }
}

pub(crate) fn read_optional(path: &Path) -> Result<Option<String>> {
    match std::fs::read_to_string(path) {
        Ok(s) => Ok(Some(s.trim_end_matches('\n').to_owned())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
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
