// SPDX-License-Identifier: MIT OR Apache-2.0
//! The module tools the provenance, attach and detach logic needs, behind one trait so that tests
//! replace them: kmod's `modinfo` and `modprobe` (Debian's `kmod` package; they read compressed
//! modules and both forms of exported CRCs, which a hand-written ELF reader would have to
//! relearn), and the `delete_module` system call (through nix), which unloads exactly one module,
//! unlike `modprobe -r`, which would also try to remove the softdeps (`nvidia`, `ib_core`).

use std::collections::BTreeMap;
use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Why a tool could not answer.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    #[error("cannot run {tool}: {source}")]
    Spawn {
        tool: String,
        #[source]
        source: std::io::Error,
    },
    /// The tool ran and failed; `message` is its first line on stderr.
    #[error("{command} failed (exit {code}): {message}")]
    Failed {
        command: String,
        code: i32,
        message: String,
    },
    /// The tool's output is not in the form it documents.
    #[error("{command}: unexpected output line {line:?}")]
    Output { command: String, line: String },
}

/// Why `delete_module` refused.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum UnloadError {
    /// EBUSY / EWOULDBLOCK: the module is in use (a registration, a holder).
    #[error("{name} is in use")]
    Busy { name: String },
    /// ENOENT: not loaded (any more).
    #[error("{name} is not loaded")]
    NotLoaded { name: String },
    /// EPERM: needs CAP_SYS_MODULE.
    #[error("not permitted to unload {name} (needs root: CAP_SYS_MODULE)")]
    NotPermitted { name: String },
    #[error("cannot unload {name}: {errno}")]
    Other { name: String, errno: String },
}

/// What the provenance, attach and detach logic asks of the system.
pub trait ModuleTools {
    /// `modinfo -0 FILE`: every `key=value` of the file's `.modinfo`, in file order (keys such
    /// as `nvpeer_import` repeat).
    fn modinfo(&self, file: &Path) -> Result<Vec<(String, String)>, ToolError>;
    /// `modprobe --show-exports FILE`: the CRC of every symbol the file exports (0 when the
    /// kernel was built without `CONFIG_MODVERSIONS`).
    fn exports(&self, file: &Path) -> Result<BTreeMap<String, u32>, ToolError>;
    /// `modprobe NAME`: loads the module with its softdeps and `modprobe.d` options.
    fn load(&self, name: &str) -> Result<(), ToolError>;
    /// `delete_module(NAME, O_NONBLOCK)`: unloads this one module, now or never.
    fn unload(&self, name: &str) -> Result<(), UnloadError>;
}

/// The system's tools: `modinfo` and `modprobe` found on `PATH`, else in `/usr/sbin` or `/sbin`
/// (systemd units and udev have them on `PATH`; a user's shell may not).
#[derive(Clone, Debug)]
pub struct Kmod {
    pub modinfo: PathBuf,
    pub modprobe: PathBuf,
}

impl Kmod {
    pub fn system() -> Self {
        Self {
            modinfo: find_tool("modinfo"),
            modprobe: find_tool("modprobe"),
        }
    }
}

fn find_tool(name: &str) -> PathBuf {
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .chain(["/usr/sbin", "/sbin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|p| p.is_file());
    on_path.unwrap_or_else(|| PathBuf::from(name))
}

/// Runs a tool; its stdout on success, else [`ToolError::Failed`] with the first stderr line.
fn run(tool: &Path, args: &[&std::ffi::OsStr]) -> Result<Vec<u8>, ToolError> {
    let command = std::iter::once(tool.as_os_str())
        .chain(args.iter().copied())
        .map(|a| a.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ");
    let out = Command::new(tool)
        .args(args)
        .env("LC_ALL", "C")
        .output()
        .map_err(|source| ToolError::Spawn {
            tool: tool.display().to_string(),
            source,
        })?;
    if out.status.success() {
        return Ok(out.stdout);
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    Err(ToolError::Failed {
        command,
        code: out.status.code().unwrap_or(-1),
        message: stderr
            .lines()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("(no message)")
            .trim()
            .to_owned(),
    })
}

/// Parses `modinfo -0` output: NUL-separated `key=value` records, after the `filename:` one.
pub fn parse_modinfo(out: &[u8]) -> Vec<(String, String)> {
    String::from_utf8_lossy(out)
        .split('\0')
        .filter(|r| !r.is_empty() && !r.starts_with("filename:"))
        .filter_map(|r| r.split_once('='))
        .map(|(k, v)| (k.trim().to_owned(), v.trim_end_matches('\n').to_owned()))
        .collect()
}

/// Parses `modprobe --show-exports` output: one `0xCRC<TAB>symbol` per line.
pub fn parse_exports(command: &str, out: &str) -> Result<BTreeMap<String, u32>, ToolError> {
    let mut crcs = BTreeMap::new();
    for line in out.lines().filter(|l| !l.trim().is_empty()) {
        let bad = || ToolError::Output {
            command: command.to_owned(),
            line: line.to_owned(),
        };
        let mut f = line.split_whitespace();
        let (Some(crc), Some(symbol), None) = (f.next(), f.next(), f.next()) else {
            return Err(bad());
        };
        let crc = parse_crc(crc).ok_or_else(bad)?;
        crcs.insert(symbol.to_owned(), crc);
    }
    Ok(crcs)
}

/// `0x1a2b3c4d` (as Module.symvers and kmod print CRCs; 64-bit on some arches, whose upper half
/// is zero).
pub fn parse_crc(text: &str) -> Option<u32> {
    let hex = text.strip_prefix("0x")?;
    if hex.is_empty() || hex.len() > 16 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(hex, 16)
        .ok()
        .and_then(|v| u32::try_from(v).ok())
}

impl ModuleTools for Kmod {
    fn modinfo(&self, file: &Path) -> Result<Vec<(String, String)>, ToolError> {
        let out = run(&self.modinfo, &["-0".as_ref(), file.as_os_str()])?;
        Ok(parse_modinfo(&out))
    }

    fn exports(&self, file: &Path) -> Result<BTreeMap<String, u32>, ToolError> {
        let out = run(
            &self.modprobe,
            &["--show-exports".as_ref(), file.as_os_str()],
        )?;
        let command = format!(
            "{} --show-exports {}",
            self.modprobe.display(),
            file.display()
        );
        parse_exports(&command, &String::from_utf8_lossy(&out))
    }

    fn load(&self, name: &str) -> Result<(), ToolError> {
        run(&self.modprobe, &[name.as_ref()]).map(drop)
    }

    fn unload(&self, name: &str) -> Result<(), UnloadError> {
        use nix::errno::Errno;
        use nix::kmod::{delete_module, DeleteModuleFlags};
        let c_name = CString::new(name).map_err(|_| UnloadError::Other {
            name: name.to_owned(),
            errno: "a module name cannot contain NUL".to_owned(),
        })?;
        let name = name.to_owned();
        match delete_module(&c_name, DeleteModuleFlags::O_NONBLOCK) {
            Ok(()) => Ok(()),
            Err(Errno::EBUSY | Errno::EWOULDBLOCK) => Err(UnloadError::Busy { name }),
            Err(Errno::ENOENT) => Err(UnloadError::NotLoaded { name }),
            Err(Errno::EPERM) => Err(UnloadError::NotPermitted { name }),
            Err(e) => Err(UnloadError::Other {
                name,
                errno: e.desc().to_owned(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modinfo_records_keep_repeated_keys_in_order() {
        let out = b"filename:       /lib/modules/7.2.0/updates/nvidia_peermem.ko\0\
            vermagic=7.2.0 SMP mod_unload modversions\0\
            nvpeer_import=ib_register_peer_memory_client 0x1a2b3c4d ib_core\0\
            nvpeer_import=nvidia_p2p_get_pages - nvidia\0";
        let kv = parse_modinfo(out);
        assert_eq!(kv.len(), 3);
        assert_eq!(kv[0].0, "vermagic");
        assert_eq!(
            kv[2],
            (
                "nvpeer_import".into(),
                "nvidia_p2p_get_pages - nvidia".into()
            )
        );
    }

    #[test]
    fn exports_and_crcs() {
        let e = parse_exports(
            "x",
            "0x1a2b3c4d\tib_register_peer_memory_client\n0x00000000\tfoo\n",
        )
        .unwrap();
        assert_eq!(e["ib_register_peer_memory_client"], 0x1a2b3c4d);
        assert_eq!(e["foo"], 0);
        assert!(parse_exports("x", "0xzz\tfoo\n").is_err());
        assert!(parse_exports("x", "0x12 foo bar\n").is_err());
        assert_eq!(parse_crc("0x000000001a2b3c4d"), Some(0x1a2b3c4d));
        assert_eq!(parse_crc("0x1ffffffff"), None);
        for bad in ["", "0x", "1a2b", "-", "0x-1"] {
            assert_eq!(parse_crc(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_failing_tool_is_one_line_naming_the_command() {
        let k = Kmod {
            modinfo: PathBuf::from("/bin/false"),
            modprobe: PathBuf::from("/nonexistent/modprobe"),
        };
        let e = k.modinfo(Path::new("/x.ko")).unwrap_err().to_string();
        assert!(e.contains("/bin/false -0 /x.ko failed (exit 1)"), "{e}");
        let e = k.load("nvidia_peermem").unwrap_err().to_string();
        assert!(e.starts_with("cannot run /nonexistent/modprobe"), "{e}");
    }
}
