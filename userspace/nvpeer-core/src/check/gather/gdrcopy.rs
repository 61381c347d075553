// SPDX-License-Identifier: MIT OR Apache-2.0
//! Facts about GDRCopy (NVIDIA/gdrcopy): its kernel module `gdrdrv` as it runs
//! (`/sys/module/gdrdrv`, `/proc/driver/gdrdrv/params`, `/proc/devices`) and as `modprobe` would
//! load it next (`modinfo` of the file `modules.dep` names, through issue 37's
//! [`ModuleTools`]), the device node `/dev/gdrdrv` and the installed `libgdrapi`. What gdrdrv
//! shows is read from its source (`src/gdrdrv/gdrdrv.c`): `MODULE_VERSION`, the description
//! "GDRCopy kernel-mode driver built for <flavour> NVIDIA driver", parameters of mode 0 (so not
//! in sysfs) printed by `/proc/driver/gdrdrv/params` instead, and a character device registered
//! as `gdrdrv` that gdrcopy's install scripts create as `/dev/gdrdrv`.

use std::collections::BTreeMap;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::Path;

use crate::error::{Error, Result};
use crate::host::modprobe;
use crate::host::modtools::ModuleTools;
use crate::host::Host;

use super::super::{DeviceNode, GdrapiLibrary, GdrcopyFacts, GdrdrvFile};

/// The module name, as `modprobe` and sysfs spell it.
const MODULE: &str = "gdrdrv";

/// Where distributions and gdrcopy's `make lib_install` put `libgdrapi` (relative to the root).
const LIBRARY_DIRS: [&str; 8] = [
    "usr/lib/x86_64-linux-gnu",
    "usr/lib/aarch64-linux-gnu",
    "usr/lib64",
    "usr/lib",
    "usr/local/lib",
    "usr/local/lib64",
    "opt/gdrcopy/lib",
    "opt/gdrcopy/lib64",
];

pub(super) fn gdrcopy(host: &Host, tools: &dyn ModuleTools) -> Result<GdrcopyFacts> {
    let sys = format!("module/{MODULE}");
    let params = host
        .read_proc("driver/gdrdrv/params")?
        .map(|text| parse_params(&text));
    Ok(GdrcopyFacts {
        loaded: host.sys_exists(&sys),
        version: host
            .read_sys(format!("{sys}/version"))?
            .map(|v| v.trim().to_owned()),
        params,
        dummy_loaded: host.sys_exists("module/nv_p2p_dummy"),
        installed: installed(host, tools)?,
        device: device_node(host, &host.root_path("dev/gdrdrv"))?,
        major: match host.read_proc("devices")? {
            Some(text) => char_major(&text, MODULE),
            None => None,
        },
        libraries: libraries(host)?,
    })
}

/// `Key: value` lines of `/proc/driver/gdrdrv/params`.
fn parse_params(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect()
}

/// The major number of character device `name` in `/proc/devices`.
fn char_major(text: &str, name: &str) -> Option<u32> {
    text.lines()
        .skip_while(|l| !l.starts_with("Character devices:"))
        .take_while(|l| !l.starts_with("Block devices:"))
        .find_map(|l| {
            let (major, dev) = l.trim().split_once(char::is_whitespace)?;
            (dev.trim() == name).then(|| major.parse().ok()).flatten()
        })
}

/// The gdrdrv file of the running release's `modules.dep` (the host's own tree: what a
/// `modprobe gdrdrv` there loads), read by `modinfo`.
fn installed(host: &Host, tools: &dyn ModuleTools) -> Result<Option<GdrdrvFile>> {
    let Some(release) = modprobe::running_release(host)? else {
        return Ok(None);
    };
    let Some(file) = modprobe::module_files(host, &release, MODULE)?
        .into_iter()
        .find(|f| f.root == "/")
    else {
        return Ok(None);
    };
    let mut out = GdrdrvFile {
        path: host.root_name(&file.path),
        version: None,
        depends: Vec::new(),
        description: None,
        error: None,
    };
    match tools.modinfo(&file.path) {
        Ok(info) => {
            for (key, value) in info {
                match key.as_str() {
                    "version" => out.version = Some(value),
                    "description" => out.description = Some(value),
                    "depends" => out.depends.extend(
                        value
                            .split(',')
                            .map(str::trim)
                            .filter(|d| !d.is_empty())
                            .map(str::to_owned),
                    ),
                    _ => {}
                }
            }
        }
        Err(e) => out.error = Some(e.to_string()),
    }
    Ok(Some(out))
}

fn device_node(host: &Host, path: &Path) -> Result<Option<DeviceNode>> {
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(Error::Read {
                path: path.to_owned(),
                source,
            })
        }
    };
    // Linux's dev_t: the major number in bits 8..19 and 32..43 (glibc's gnu_dev_major).
    let rdev = meta.rdev();
    let major = ((rdev >> 8) & 0xfff) | ((rdev >> 32) & !0xfff);
    Ok(Some(DeviceNode {
        path: host.root_name(path),
        mode: meta.permissions().mode() & 0o7777,
        uid: meta.uid(),
        gid: meta.gid(),
        major: meta
            .file_type()
            .is_char_device()
            .then(|| u32::try_from(major).ok())
            .flatten(),
    }))
}

/// `2.5` of `libgdrapi.so.2.5` (and `2.5.1`); `None` for the SONAME and development links
/// (`libgdrapi.so.2`, `libgdrapi.so`).
fn library_version(file_name: &str) -> Option<String> {
    let version = file_name.strip_prefix("libgdrapi.so.")?;
    let parts: Vec<&str> = version.split('.').collect();
    ((2..=3).contains(&parts.len())
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit())))
    .then(|| version.to_owned())
}

fn libraries(host: &Host) -> Result<Vec<GdrapiLibrary>> {
    let mut found: Vec<GdrapiLibrary> = Vec::new();
    let mut seen = Vec::new();
    for dir in LIBRARY_DIRS {
        let path = host.root_path(dir);
        for name in crate::host::list_dir(&path)? {
            let Some(version) = library_version(&name) else {
                continue;
            };
            let file = path.join(&name);
            // /usr/lib64 may be /usr/lib, /lib a link to /usr/lib: one file, listed once.
            let real = std::fs::canonicalize(&file).unwrap_or_else(|_| file.clone());
            if seen.contains(&real) {
                continue;
            }
            seen.push(real);
            found.push(GdrapiLibrary {
                path: host.root_name(&file),
                version,
            });
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::modtools::{ToolError, UnloadError};
    use std::path::PathBuf;

    /// `modinfo` answers from a table; every other tool is unused here.
    struct Modinfo(Vec<(String, String)>);

    impl ModuleTools for Modinfo {
        fn modinfo(&self, _file: &Path) -> std::result::Result<Vec<(String, String)>, ToolError> {
            Ok(self.0.clone())
        }
        fn exports(&self, _file: &Path) -> std::result::Result<BTreeMap<String, u32>, ToolError> {
            unreachable!("gdrcopy reads no exports")
        }
        fn load(&self, _name: &str) -> std::result::Result<(), ToolError> {
            unreachable!("gdrcopy loads nothing")
        }
        fn unload(&self, _name: &str) -> std::result::Result<(), UnloadError> {
            unreachable!("gdrcopy unloads nothing")
        }
    }

    fn write(root: &Path, rel: &str, content: &str) -> PathBuf {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, content).unwrap();
        p
    }

    #[test]
    fn a_loaded_gdrdrv_built_against_the_dummy() {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        write(r, "sys/module/gdrdrv/version", "2.4\n");
        write(r, "sys/module/nv_p2p_dummy/refcnt", "1\n");
        write(
            r,
            "proc/driver/gdrdrv/params",
            "Version: 2.4\nBuilt for NVIDIA driver flavor: opensource\nUse persistent mapping: no\ndbg_enabled: 0\ninfo_enabled: 0\n",
        );
        write(
            r,
            "proc/devices",
            "Character devices:\n  1 mem\n508 gdrdrv\n\nBlock devices:\n  8 sd\n",
        );
        write(r, "proc/sys/kernel/osrelease", "6.8.0-45-generic\n");
        write(
            r,
            "lib/modules/6.8.0-45-generic/modules.dep",
            "updates/dkms/gdrdrv.ko.zst: updates/dkms/nv-p2p-dummy.ko.zst\n",
        );
        write(
            r,
            "lib/modules/6.8.0-45-generic/updates/dkms/gdrdrv.ko.zst",
            "",
        );
        write(r, "dev/gdrdrv", "");
        write(r, "usr/lib/x86_64-linux-gnu/libgdrapi.so.2.5", "");
        std::os::unix::fs::symlink(
            "libgdrapi.so.2.5",
            r.join("usr/lib/x86_64-linux-gnu/libgdrapi.so.2"),
        )
        .unwrap();
        let host = Host::new(r.join("sys"), r.join("proc"));
        let tools = Modinfo(vec![
            ("version".into(), "2.4".into()),
            ("depends".into(), "nv-p2p-dummy".into()),
            (
                "description".into(),
                "GDRCopy kernel-mode driver built for opensource NVIDIA driver".into(),
            ),
        ]);
        let f = gdrcopy(&host, &tools).unwrap();
        assert!(f.loaded && f.dummy_loaded);
        assert_eq!(f.version.as_deref(), Some("2.4"));
        assert_eq!(
            f.params.as_ref().unwrap()["Built for NVIDIA driver flavor"],
            "opensource"
        );
        assert_eq!(f.major, Some(508));
        let installed = f.installed.unwrap();
        assert_eq!(installed.depends, ["nv-p2p-dummy"]);
        assert_eq!(
            installed.path,
            "/lib/modules/6.8.0-45-generic/updates/dkms/gdrdrv.ko.zst"
        );
        let dev = f.device.unwrap();
        assert_eq!(dev.major, None, "a regular file is no character device");
        assert_eq!(f.libraries.len(), 1, "{:?}", f.libraries);
        assert_eq!(f.libraries[0].version, "2.5");
    }

    #[test]
    fn nothing_of_gdrcopy() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("sys")).unwrap();
        let host = Host::new(root.path().join("sys"), root.path().join("proc"));
        assert_eq!(
            gdrcopy(&host, &Modinfo(Vec::new())).unwrap(),
            GdrcopyFacts::default()
        );
    }

    #[test]
    fn names_and_numbers() {
        assert_eq!(library_version("libgdrapi.so.2.5").as_deref(), Some("2.5"));
        assert_eq!(
            library_version("libgdrapi.so.2.4.1").as_deref(),
            Some("2.4.1")
        );
        for no in [
            "libgdrapi.so.2",
            "libgdrapi.so",
            "libgdrapi.so.2.x",
            "libfoo.so.2.5",
        ] {
            assert_eq!(library_version(no), None, "{no}");
        }
        assert_eq!(
            char_major(
                "Character devices:\n511 gdrdrv\nBlock devices:\n511 gdrdrv\n",
                "gdrdrv"
            ),
            Some(511)
        );
        assert_eq!(char_major("Block devices:\n511 gdrdrv\n", "gdrdrv"), None);
    }
}
