// SPDX-License-Identifier: MIT OR Apache-2.0
//! Who holds pinned GPU memory, as the module records it (issue 37; the interface is
//! kmod/README.md, "Operations"): one line per live registration in
//! `/sys/kernel/debug/<module>/registrations` (root only), and per-GPU totals in
//! `/sys/module/<module>/nvpeer/gpus/GPU-<uuid>/` (anyone). This file reads and parses both;
//! `commands/who.rs` groups them.

use std::collections::BTreeSet;
use std::path::PathBuf;

use serde::Serialize;

use crate::error::{Error, Result};
use crate::host::peermem::{self, Implementation};
use crate::host::Host;

/// The records file of module `name`, relative to the sysfs root (debugfs is mounted at
/// `/sys/kernel/debug`).
pub fn records_rel(name: &str) -> String {
    format!("kernel/debug/{name}/registrations")
}

/// The columns every records file has, in the module's order (new ones are only appended).
pub const COLUMNS: [&str; 14] = [
    "id",
    "tgid",
    "comm",
    "cgroup",
    "gpu",
    "va",
    "bytes",
    "client",
    "nic",
    "state",
    "age_ms",
    "pin",
    "pin_bytes",
    "shares",
];

/// One live registration (acquire .. release).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Record {
    /// Unique for the module's lifetime.
    pub id: u64,
    /// The registering process in the reader's pid namespace; `None`: it exited, or is not
    /// visible from here.
    pub tgid: Option<u32>,
    /// Its process's name (`comm` of the thread group's leader) at registration; `-` for a
    /// process not visible from here.
    pub comm: String,
    /// Its cgroup v2 path at registration, relative to the reader's cgroup namespace.
    pub cgroup: String,
    /// `GPU-<uuid>`; `None` before the pin exists.
    pub gpu: Option<String>,
    /// The registered address; `None` for a process not visible from here (as its `comm`,
    /// GPU and NIC, which are then `-`).
    pub va: Option<u64>,
    /// Registered length.
    pub bytes: u64,
    /// `nv_mem` or `nv_mem_nc`.
    pub client: String,
    /// The DMA device's name (a PCI address for a PCI NIC); `None` before `dma_map`.
    pub nic: Option<String>,
    /// The context's state (`mapped`, `revoked`, ...).
    pub state: String,
    pub age_ms: u64,
    /// The NVIDIA pin it holds (shared by registrations of one range and process).
    pub pin: Option<u64>,
    pub pin_bytes: Option<u64>,
    /// Registrations on that pin.
    pub shares: Option<u64>,
}

/// Why the records cannot be had.
#[derive(Debug, thiserror::Error)]
pub enum RecordsError {
    /// Another peer-memory module is loaded: it may hold pins, and keeps no records of them.
    #[error(
        "{name} is {what}, which keeps no registration records: what it holds cannot be listed (`nvpeer detach --dry-run` says whether any registration is live)"
    )]
    NotOurs { name: String, what: &'static str },
    #[error("debugfs is not mounted at {path} (mount -t debugfs none /sys/kernel/debug)")]
    NoDebugfs { path: PathBuf },
    #[error(
        "{path} does not exist: the loaded {module} keeps no registration records (an nvpeer module older than issue 37's records)"
    )]
    NoRecords { module: String, path: PathBuf },
    #[error("cannot read {path}: {source}{hint}")]
    Unreadable {
        path: PathBuf,
        #[source]
        source: std::io::Error,
        hint: &'static str,
    },
    #[error("{path}: {why}")]
    Malformed { path: PathBuf, why: String },
    #[error(transparent)]
    Sysfs(#[from] Error),
}

/// `\ooo` escapes (comm, cgroup) back to bytes; a `\` not followed by three octal digits is kept.
pub fn unescape(field: &str) -> String {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = u32::from(b[i + 1] - b'0') * 64
                + u32::from(b[i + 2] - b'0') * 8
                + u32::from(b[i + 3] - b'0');
            if let Ok(byte) = u8::try_from(v) {
                out.push(byte);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Parses a records file: the header names the columns; every line has exactly as many fields.
pub fn parse(path: &std::path::Path, text: &str) -> std::result::Result<Vec<Record>, RecordsError> {
    let malformed = |why: String| RecordsError::Malformed {
        path: path.to_owned(),
        why,
    };
    let mut lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty());
    let Some((_, header)) = lines.next() else {
        return Err(malformed("empty: no header line".to_owned()));
    };
    let Some(names) = header.strip_prefix('#') else {
        return Err(malformed(format!(
            "the first line is not a '# id tgid ...' header: {header:?}"
        )));
    };
    let names: Vec<&str> = names.split_whitespace().collect();
    let mut at = [0usize; COLUMNS.len()];
    for (slot, want) in at.iter_mut().zip(COLUMNS) {
        *slot = names
            .iter()
            .position(|n| *n == want)
            .ok_or_else(|| malformed(format!("the header has no column {want:?}")))?;
    }
    let mut seen = BTreeSet::new();
    let mut records = Vec::new();
    for (index, line) in lines {
        let n = index + 1;
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() != names.len() {
            return Err(malformed(format!(
                "line {n}: {} fields, the header has {} (a truncated or unescaped record): {line:?}",
                fields.len(),
                names.len()
            )));
        }
        let f = |c: usize| fields[at[c]];
        let bad = |c: usize, what: &str| {
            malformed(format!("line {n}: {} {:?} is not {what}", COLUMNS[c], f(c)))
        };
        let num = |c: usize| f(c).parse::<u64>().map_err(|_| bad(c, "a number"));
        let opt_num = |c: usize| match f(c) {
            "-" => Ok(None),
            t => t
                .parse::<u64>()
                .map(Some)
                .map_err(|_| bad(c, "a number or -")),
        };
        let opt_text = |c: usize| match f(c) {
            "-" => None,
            t => Some(unescape(t)),
        };
        let va = match f(5) {
            "-" => None,
            t => Some(
                t.strip_prefix("0x")
                    .and_then(|h| u64::from_str_radix(h, 16).ok())
                    .ok_or_else(|| bad(5, "a 0x-prefixed address or -"))?,
            ),
        };
        let tgid = match f(1) {
            "-" => None,
            t => Some(t.parse::<u32>().map_err(|_| bad(1, "a pid or -"))?),
        };
        let gpu = opt_text(4);
        if gpu.as_deref().is_some_and(|g| !g.starts_with("GPU-")) {
            return Err(bad(4, "a GPU-<uuid> or -"));
        }
        let record = Record {
            id: num(0)?,
            tgid,
            comm: unescape(f(2)),
            cgroup: unescape(f(3)),
            gpu,
            va,
            bytes: num(6)?,
            client: unescape(f(7)),
            nic: opt_text(8),
            state: unescape(f(9)),
            age_ms: num(10)?,
            pin: opt_num(11)?,
            pin_bytes: opt_num(12)?,
            shares: opt_num(13)?,
        };
        // The module prints a registration at most once per read; a repeat would be counted twice.
        if seen.insert(record.id) {
            records.push(record);
        }
    }
    Ok(records)
}

/// Our loaded module's name (`nvidia_peermem` or `nv_peer_mem`); `None` when none is ours.
pub fn our_module(host: &Host) -> Result<Option<String>> {
    Ok(peermem::loaded_modules(host)?
        .into_iter()
        .find(|m| m.implementation == Implementation::Nvpeer)
        .map(|m| m.name))
}

/// Reads and parses the records of module `name`.
pub fn read(host: &Host, name: &str) -> std::result::Result<Vec<Record>, RecordsError> {
    let path = host.sys_path(records_rel(name));
    match std::fs::read(&path) {
        Ok(bytes) => parse(&path, &String::from_utf8_lossy(&bytes)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let debugfs = host.sys_path("kernel/debug");
            // An unmounted debugfs is an empty directory (or none); a mounted one lists files,
            // or refuses the listing to non-root.
            let mounted = match std::fs::read_dir(&debugfs) {
                Ok(mut entries) => entries.next().is_some(),
                Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                    return Err(RecordsError::Unreadable {
                        path,
                        source: e,
                        hint: " (debugfs is root-only: run as root)",
                    })
                }
                Err(_) => false,
            };
            if mounted {
                Err(RecordsError::NoRecords {
                    module: name.to_owned(),
                    path,
                })
            } else {
                Err(RecordsError::NoDebugfs { path: debugfs })
            }
        }
        Err(e) => {
            let hint = if e.kind() == std::io::ErrorKind::PermissionDenied {
                " (the records are root-only: run as root)"
            } else {
                ""
            };
            Err(RecordsError::Unreadable {
                path,
                source: e,
                hint,
            })
        }
    }
}

/// `/sys/module/<name>/nvpeer/gpus/GPU-<uuid>/*`: one GPU's totals.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct GpuTotals {
    pub uuid: String,
    /// GPU memory pinned now (each pin once).
    pub pinned_bytes: u64,
    pub pins: u64,
    pub registrations: u64,
}

/// The per-GPU totals of module `name`, by UUID; empty when the module has no such directory
/// (an older module, or no GPU pinned yet). Best-effort: a GPU whose files cannot be read (a
/// directory caught before its files exist, or after they went) is left out with a note (one
/// line each), so one GPU never hides the rest or the module's counters.
pub fn gpu_totals(host: &Host, name: &str) -> (Vec<GpuTotals>, Vec<String>) {
    let dir = format!("module/{name}/nvpeer/gpus");
    let left_out = |e: Error| format!("per-GPU totals left out: {e}");
    let uuids = match host.list_sys(&dir) {
        Ok(uuids) => uuids,
        Err(e) => return (Vec::new(), vec![left_out(e)]),
    };
    let mut out = Vec::new();
    let mut notes = Vec::new();
    for uuid in uuids.into_iter().filter(|u| u.starts_with("GPU-")) {
        match one_gpu(host, &format!("{dir}/{uuid}"), uuid) {
            Ok(t) => out.push(t),
            Err(e) => notes.push(left_out(e)),
        }
    }
    (out, notes)
}

/// The totals in one GPU's directory `rel`.
fn one_gpu(host: &Host, rel: &str, uuid: String) -> Result<GpuTotals> {
    let value = |file: &str| -> Result<u64> {
        let rel = format!("{rel}/{file}");
        let text = host.read_sys(&rel)?.unwrap_or_default();
        text.trim()
            .parse()
            .map_err(|_| Error::parse(host.sys_path(&rel), text, "an unsigned integer"))
    };
    Ok(GpuTotals {
        pinned_bytes: value("pinned_bytes")?,
        pins: value("pins")?,
        registrations: value("registrations")?,
        uuid,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    pub(crate) const HEADER: &str =
        "# id tgid comm cgroup gpu va bytes client nic state age_ms pin pin_bytes shares\n";
    const UUID: &str = "GPU-d09b8d4e-daef-237f-dd2d-1f194bd911ab";

    #[test]
    fn parses_records_with_escapes_and_dashes() {
        let text = format!(
            "{HEADER}17 4242 my\\040job /slurm/job_1234/step_0 {UUID} 0x7f3a40000000 2097152 nv_mem 0000:04:00.0 mapped 1520 9 2097152 2\n\
             18 - \\055 / - 0x1000 65536 nv_mem_nc - pinning 3 - - -\n\
             19 - - /../other - - 65536 nv_mem - mapped 5 7 65536 1\n"
        );
        let r = parse(Path::new("f"), &text).unwrap();
        assert_eq!(r.len(), 3);
        assert_eq!(r[0].comm, "my job");
        assert_eq!(r[0].tgid, Some(4242));
        assert_eq!(r[0].gpu.as_deref(), Some(UUID));
        assert_eq!(r[0].va, Some(0x7f3a_4000_0000));
        assert_eq!(
            (r[0].pin, r[0].pin_bytes, r[0].shares),
            (Some(9), Some(2097152), Some(2))
        );
        assert_eq!(r[0].nic.as_deref(), Some("0000:04:00.0"));
        assert_eq!(r[1].comm, "-");
        assert_eq!(
            (r[1].tgid, r[1].gpu.as_deref(), r[1].pin),
            (None, None, None)
        );
        // A process another pid namespace's: only its bytes, cgroup and pin are shown.
        assert_eq!(
            (r[2].tgid, r[2].va, r[2].gpu.as_deref(), r[2].nic.as_deref()),
            (None, None, None, None)
        );
        assert_eq!((r[2].bytes, r[2].pin_bytes), (65536, Some(65536)));
    }

    #[test]
    fn columns_are_found_by_name_and_new_ones_ignored() {
        let text = "# id tgid comm cgroup gpu va bytes client nic state age_ms pin pin_bytes shares numa\n\
                    1 1 a / - 0x0 1 nv_mem - pinning 0 - - - 0\n";
        assert_eq!(parse(Path::new("f"), text).unwrap()[0].id, 1);
    }

    #[test]
    fn bad_files_are_one_error_naming_the_line() {
        let cases = [
            ("", "no header"),
            ("17 4242 x\n", "not a '# id tgid"),
            ("# id tgid comm\n", "no column \"cgroup\""),
            (
                &format!("{HEADER}17 4242 python3 / {UUID} 0x7f3a40000000 2097\n"),
                "line 2: 7 fields",
            ),
            (
                &format!("{HEADER}x 1 a / - 0x0 1 nv_mem - s 0 - - -\n"),
                "id \"x\" is not a number",
            ),
            (
                &format!("{HEADER}1 1 a / - 7f 1 nv_mem - s 0 - - -\n"),
                "0x-prefixed",
            ),
            (
                &format!("{HEADER}1 1 a / nvidia0 0x0 1 nv_mem - s 0 - - -\n"),
                "GPU-<uuid>",
            ),
            (
                &format!("{HEADER}1 99999999999 a / - 0x0 1 nv_mem - s 0 - - -\n"),
                "pid",
            ),
        ];
        for (text, want) in cases {
            let e = parse(Path::new("/d/registrations"), text)
                .unwrap_err()
                .to_string();
            assert!(
                e.contains(want) && e.starts_with("/d/registrations: "),
                "{e}"
            );
        }
    }

    #[test]
    fn a_repeated_id_counts_once() {
        let line = "5 1 a / - 0x0 1 nv_mem - pinning 0 - - -\n";
        let text = format!("{HEADER}{line}{line}");
        assert_eq!(parse(Path::new("f"), &text).unwrap().len(), 1);
    }

    #[test]
    fn thousands_of_records() {
        let mut text = HEADER.to_owned();
        for i in 0..5000u64 {
            text.push_str(&format!(
                "{i} {} p{} /job/{} {UUID} 0x{:x} 65536 nv_mem 0000:04:00.0 mapped {i} {} 65536 1\n",
                1000 + i % 7,
                i % 7,
                i % 3,
                i << 16,
                i
            ));
        }
        let r = parse(Path::new("f"), &text).unwrap();
        assert_eq!(r.len(), 5000);
        assert_eq!(r[4999].age_ms, 4999);
    }

    proptest::proptest! {
        #[test]
        fn the_parser_never_panics(text in "[ -~\n\\\\]{0,300}") {
            let _ = parse(Path::new("f"), &text);
            let _ = unescape(&text);
        }
    }

    #[test]
    fn unescape_keeps_what_is_not_an_escape() {
        assert_eq!(unescape("a\\040b\\134c"), "a b\\c");
        assert_eq!(unescape("x\\9"), "x\\9");
        assert_eq!(unescape("x\\"), "x\\");
        assert_eq!(unescape("\\303\\251"), "é");
        assert_eq!(unescape("\\777"), "\\777");
    }

    fn write(root: &Path, rel: &str, text: &str) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    #[test]
    fn reading_says_why_there_are_no_records() {
        let dir = tempfile::tempdir().unwrap();
        let s = dir.path();
        let host = Host::new(s, "/nonexistent");
        write(
            s,
            "module/nvidia_peermem/nvpeer/implementation",
            "nvpeer 0.1.0\n",
        );
        assert_eq!(
            our_module(&host).unwrap().as_deref(),
            Some("nvidia_peermem")
        );
        let e = read(&host, "nvidia_peermem").unwrap_err();
        assert!(matches!(e, RecordsError::NoDebugfs { .. }), "{e}");
        write(s, "kernel/debug/other/file", "");
        let e = read(&host, "nvidia_peermem").unwrap_err();
        assert!(matches!(e, RecordsError::NoRecords { .. }), "{e}");
        write(s, &records_rel("nvidia_peermem"), HEADER);
        assert_eq!(read(&host, "nvidia_peermem").unwrap(), vec![]);
        // A mode that the reader cannot pass (root passes any: then nothing to check).
        use std::os::unix::fs::PermissionsExt;
        let p = host.sys_path(records_rel("nvidia_peermem"));
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o000)).unwrap();
        if std::fs::read(&p).is_err() {
            let e = read(&host, "nvidia_peermem").unwrap_err().to_string();
            assert!(e.contains("root-only"), "{e}");
        }
    }

    #[test]
    fn gpu_totals_by_uuid() {
        let dir = tempfile::tempdir().unwrap();
        let s = dir.path();
        let host = Host::new(s, "/nonexistent");
        let (none, errors) = gpu_totals(&host, "nvidia_peermem");
        assert!(none.is_empty() && errors.is_empty());
        let g = format!("module/nvidia_peermem/nvpeer/gpus/{UUID}");
        write(s, &format!("{g}/pinned_bytes"), "4194304\n");
        write(s, &format!("{g}/pins"), "2\n");
        write(s, &format!("{g}/registrations"), "3\n");
        let (t, errors) = gpu_totals(&host, "nvidia_peermem");
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(
            t,
            vec![GpuTotals {
                uuid: UUID.into(),
                pinned_bytes: 4194304,
                pins: 2,
                registrations: 3
            }]
        );
        // Review: one GPU caught before its files exist (or with a bad one) is left out with
        // its error; the others still count.
        let other = "GPU-00000000-0000-0000-0000-000000000001";
        write(
            s,
            &format!("module/nvidia_peermem/nvpeer/gpus/{other}/pins"),
            "two\n",
        );
        let (t, errors) = gpu_totals(&host, "nvidia_peermem");
        assert_eq!(
            t.iter().map(|t| t.uuid.as_str()).collect::<Vec<_>>(),
            [UUID]
        );
        let [e] = errors.as_slice() else {
            panic!("{errors:?}")
        };
        assert!(
            e.starts_with("per-GPU totals left out: ")
                && e.contains(other)
                && e.contains("unsigned integer"),
            "{e}"
        );
    }
}
