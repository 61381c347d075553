// SPDX-License-Identifier: MIT OR Apache-2.0
//! `nvpeer stats --textfile DIR`: the exposition written atomically where node_exporter's
//! textfile collector reads it.

use std::io::Write as _;
use std::path::{Path, PathBuf};

/// The file node_exporter's textfile collector reads (`*.prom` in its directory).
pub const TEXTFILE_NAME: &str = "nvpeer.prom";

/// Why the textfile could not be written.
#[derive(Debug, thiserror::Error)]
pub enum TextfileError {
    #[error("{}: {source}", dir.display())]
    Dir {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: not a directory", dir.display())]
    NotADirectory { dir: PathBuf },
    #[error("cannot write {}: {source}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot rename {} to {}: {source}", from.display(), to.display())]
    Rename {
        from: PathBuf,
        to: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Writes `text` to `dir/nvpeer.prom` atomically, as node_exporter's textfile collector asks:
/// a temporary file in `dir` (a name it does not read: not `*.prom`), synced, then renamed
/// over the old file. On every error the temporary file is removed. Returns the file's path.
pub fn write_textfile(dir: &Path, text: &str) -> std::result::Result<PathBuf, TextfileError> {
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            return Err(TextfileError::NotADirectory {
                dir: dir.to_owned(),
            })
        }
        Err(source) => {
            return Err(TextfileError::Dir {
                dir: dir.to_owned(),
                source,
            })
        }
    }
    let target = dir.join(TEXTFILE_NAME);
    let tmp = dir.join(format!(".{TEXTFILE_NAME}.{}.tmp", std::process::id()));
    let written = (|| {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        // A leftover of a killed run with the same PID: ours to replace.
        let _ = std::fs::remove_file(&tmp);
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(&tmp)?;
        // node_exporter usually runs as another user: readable whatever the umask.
        f.set_permissions(std::fs::Permissions::from_mode(0o644))?;
        f.write_all(text.as_bytes())?;
        f.sync_all()
    })();
    if let Err(source) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(TextfileError::Write { path: tmp, source });
    }
    if let Err(source) = std::fs::rename(&tmp, &target) {
        let _ = std::fs::remove_file(&tmp);
        return Err(TextfileError::Rename {
            from: tmp,
            to: target,
            source,
        });
    }
    Ok(target)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn textfile_is_replaced_atomically_and_errors_leave_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = write_textfile(dir.path(), "nvpeer_x 1\n").unwrap();
        assert_eq!(path, dir.path().join("nvpeer.prom"));
        write_textfile(dir.path(), "nvpeer_x 2\n").unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), "nvpeer_x 2\n");
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("nvpeer.prom")]);

        let missing = dir.path().join("missing");
        let err = write_textfile(&missing, "x").unwrap_err().to_string();
        assert!(
            err.contains("missing") && err.contains("No such file"),
            "{err}"
        );
        let err = write_textfile(&path, "x").unwrap_err().to_string();
        assert!(err.ends_with("not a directory"), "{err}");

        // The rename fails (a non-empty directory in the way): the temporary file goes.
        let blocked = tempfile::tempdir().unwrap();
        fs::create_dir_all(blocked.path().join("nvpeer.prom/inside")).unwrap();
        let err = write_textfile(blocked.path(), "x").unwrap_err().to_string();
        assert!(err.starts_with("cannot rename"), "{err}");
        let names: Vec<_> = fs::read_dir(blocked.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("nvpeer.prom")]);
    }
}
