// SPDX-License-Identifier: MIT OR Apache-2.0
//! UCX's, NVSHMEM's and libfabric's settings, read where each library reads them, and their
//! installed releases (issue 47 item 1).
//!
//! * UCX: the environment, then `ucx.conf` (`UCX_CONFIG_FILE_NAME`, `src/ucs/config/parser.h`;
//!   an INI file of `UCX_NAME=value` lines, `ucs_config_parse_config_file`), which UCX looks for
//!   in its build's `sysconfdir/ucx` (`UCX_CONFIG_DIR`): `/etc/ucx` for distribution and
//!   MLNX_OFED/DOCA packages, `/usr/local/etc/ucx` for a source build, HPC-X's `etc/ucx`. That
//!   the environment wins over the file is assumed (not verified in UCX's sources), as is the
//!   choice of the first of those files that exists. Lines in a `[section]` apply only where
//!   its filter (CPU vendor, model, DMI product) matches, which is not evaluated: they are
//!   skipped.
//! * NVSHMEM: the environment, then its config files (NVSHMEM 3.6.5 release notes: "configuration
//!   file support (similar to NCCL)"). The file names are **unverified**: read as NCCL's are
//!   (`NVSHMEM_CONF_FILE`, else `~/.nvshmem.conf`, then `/etc/nvshmem.conf`), `NAME=value`
//!   lines, the environment first.
//! * libfabric: the environment only (`fi_param_get`).
//!
//! Releases: UCX's and libfabric's `Version:` of their pkg-config files (`ucx.pc`,
//! `libfabric.pc`; `/opt/amazon/efa` for AWS's EFA installer), NVSHMEM's of the file name
//! `libnvshmem_host.so.<major>.<minor>.<patch>`.

use std::collections::BTreeMap;

use crate::error::Result;
use crate::host::Host;

use super::super::{InstalledLibrary, LibraryFacts, LibrarySetting, LIBRARY_ENV};

/// Where UCX's `ucx.conf` is looked for (relative to the root), first found used.
const UCX_CONF: [&str; 3] = [
    "etc/ucx/ucx.conf",
    "usr/local/etc/ucx/ucx.conf",
    "opt/hpcx/ucx/etc/ucx/ucx.conf",
];

const PKGCONFIG_DIRS: [&str; 8] = [
    "usr/lib/x86_64-linux-gnu/pkgconfig",
    "usr/lib/aarch64-linux-gnu/pkgconfig",
    "usr/lib64/pkgconfig",
    "usr/lib/pkgconfig",
    "usr/local/lib/pkgconfig",
    "opt/hpcx/ucx/lib/pkgconfig",
    "opt/amazon/efa/lib/pkgconfig",
    "opt/amazon/efa/lib64/pkgconfig",
];

const NVSHMEM_DIRS: [&str; 9] = [
    "usr/lib/x86_64-linux-gnu",
    "usr/lib/x86_64-linux-gnu/nvshmem/12",
    "usr/lib/x86_64-linux-gnu/nvshmem/13",
    "usr/lib/aarch64-linux-gnu/nvshmem/12",
    "usr/lib/aarch64-linux-gnu/nvshmem/13",
    "usr/lib64",
    "usr/local/lib",
    "opt/nvshmem/lib",
    "usr/local/nvshmem/lib",
];

/// `NAME=value` lines outside any `[section]`; `#` and `;` start comments.
fn conf_lines(text: &str) -> BTreeMap<String, String> {
    let mut in_section = false;
    let mut vars = BTreeMap::new();
    for line in text.lines() {
        let l = line.trim();
        if l.starts_with('[') {
            in_section = true;
            continue;
        }
        if in_section || l.is_empty() || l.starts_with('#') || l.starts_with(';') {
            continue;
        }
        if let Some((k, v)) = l.split_once('=') {
            vars.insert(k.trim().to_owned(), v.trim().to_owned());
        }
    }
    vars
}

fn read_conf(host: &Host, path: &str) -> Result<Option<BTreeMap<String, String>>> {
    let on_host = host.root_path(path.trim_start_matches('/'));
    Ok(crate::host::read_optional(&on_host)?.map(|t| conf_lines(&t)))
}

/// `Version:` of a pkg-config file.
fn pc_version(text: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.strip_prefix("Version:"))
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
}

/// `3.4.5` of `libnvshmem_host.so.3.4.5`; `None` for the SONAME links (`.so.3`, `.so`).
fn nvshmem_version(file_name: &str) -> Option<String> {
    let v = file_name.strip_prefix("libnvshmem_host.so.")?;
    let parts: Vec<&str> = v.split('.').collect();
    (parts.len() >= 2
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit())))
    .then(|| v.to_owned())
}

fn installed(host: &Host) -> Result<Vec<InstalledLibrary>> {
    let mut found = Vec::new();
    let mut seen = Vec::new();
    let mut add =
        |found: &mut Vec<InstalledLibrary>, library: &str, version, file: &std::path::Path| {
            let real = std::fs::canonicalize(file).unwrap_or_else(|_| file.to_path_buf());
            if seen.contains(&real) {
                return;
            }
            seen.push(real);
            found.push(InstalledLibrary {
                library: library.to_owned(),
                version,
                path: host.root_name(file),
            });
        };
    for dir in PKGCONFIG_DIRS {
        for (library, pc) in [("ucx", "ucx.pc"), ("libfabric", "libfabric.pc")] {
            let file = host.root_path(dir).join(pc);
            if let Some(v) = crate::host::read_optional(&file)?
                .as_deref()
                .and_then(pc_version)
            {
                add(&mut found, library, v, &file);
            }
        }
    }
    for dir in NVSHMEM_DIRS {
        let path = host.root_path(dir);
        for name in crate::host::list_dir(&path)? {
            if let Some(v) = nvshmem_version(&name) {
                add(&mut found, "nvshmem", v, &path.join(&name));
            }
        }
    }
    Ok(found)
}

/// The settings of [`LIBRARY_ENV`] from `env` and the libraries' config files, and the releases.
pub(super) fn libraries(
    host: &Host,
    env: &BTreeMap<String, String>,
    home: Option<&str>,
) -> Result<LibraryFacts> {
    let mut facts = LibraryFacts::default();
    for name in LIBRARY_ENV {
        if let Some(v) = env.get(name) {
            facts.settings.insert(
                name.to_owned(),
                LibrarySetting {
                    value: v.clone(),
                    file: None,
                },
            );
        }
    }
    let mut files: Vec<(String, &str)> = Vec::new();
    if let Some(ucx) = UCX_CONF.iter().find(|p| host.root_path(p).is_file()) {
        files.push((format!("/{ucx}"), "UCX_"));
    }
    let nvshmem_first = match env.get("NVSHMEM_CONF_FILE").filter(|v| !v.is_empty()) {
        Some(f) => Some(f.clone()),
        None => home.map(|h| format!("{}/.nvshmem.conf", h.trim_end_matches('/'))),
    };
    files.extend(
        nvshmem_first
            .into_iter()
            .chain(std::iter::once("/etc/nvshmem.conf".to_owned()))
            .map(|p| (p, "NVSHMEM_")),
    );
    for (path, prefix) in files {
        let Some(vars) = read_conf(host, &path)? else {
            continue;
        };
        for (k, v) in vars {
            if k.starts_with(prefix) && LIBRARY_ENV.contains(&k.as_str()) {
                facts.settings.entry(k).or_insert_with(|| LibrarySetting {
                    value: v,
                    file: Some(path.clone()),
                });
            }
        }
        facts.conf_files.push(path);
    }
    facts.installed = installed(host)?;
    Ok(facts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(root: &std::path::Path, rel: &str, text: &str) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    #[test]
    fn reads_settings_files_and_releases() {
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path();
        std::fs::create_dir_all(r.join("sys")).unwrap();
        std::fs::create_dir_all(r.join("proc")).unwrap();
        write(
            r,
            "etc/ucx/ucx.conf",
            "# UCX\nUCX_IB_GPU_DIRECT_RDMA=no\nUCX_TLS = rc,cuda_copy\n[Grace]\nCPU model=Grace\nUCX_TLS=tcp\n",
        );
        write(r, "etc/nvshmem.conf", "NVSHMEM_IB_ENABLE_IBGDA=1\n");
        write(
            r,
            "usr/lib/x86_64-linux-gnu/pkgconfig/ucx.pc",
            "prefix=/usr\nName: ucx\nVersion: 1.18.0\n",
        );
        write(
            r,
            "opt/amazon/efa/lib/pkgconfig/libfabric.pc",
            "Version: 2.1.0amzn3.0\n",
        );
        write(
            r,
            "usr/lib/x86_64-linux-gnu/nvshmem/12/libnvshmem_host.so.3.4.5",
            "",
        );
        write(
            r,
            "usr/lib/x86_64-linux-gnu/nvshmem/12/libnvshmem_host.so.3",
            "",
        );
        let host = Host::new(r.join("sys"), r.join("proc"));
        let env = BTreeMap::from([("UCX_TLS".to_owned(), "all".to_owned())]);
        let f = libraries(&host, &env, None).unwrap();
        // The environment wins; a [section]'s lines are not taken.
        assert_eq!(f.settings["UCX_TLS"].value, "all");
        assert_eq!(f.settings["UCX_TLS"].file, None);
        assert_eq!(
            f.settings["UCX_IB_GPU_DIRECT_RDMA"],
            LibrarySetting {
                value: "no".to_owned(),
                file: Some("/etc/ucx/ucx.conf".to_owned())
            }
        );
        assert_eq!(
            f.settings["NVSHMEM_IB_ENABLE_IBGDA"].file.as_deref(),
            Some("/etc/nvshmem.conf")
        );
        assert_eq!(f.conf_files, ["/etc/ucx/ucx.conf", "/etc/nvshmem.conf"]);
        assert_eq!(f.version("ucx").unwrap().version, "1.18.0");
        assert_eq!(f.version("libfabric").unwrap().version, "2.1.0amzn3.0");
        let n = f.version("nvshmem").unwrap();
        assert_eq!(n.version, "3.4.5");
        assert_eq!(
            n.path,
            "/usr/lib/x86_64-linux-gnu/nvshmem/12/libnvshmem_host.so.3.4.5"
        );
    }
}
