//! `nvpeer stats`: the module's own counters (`/sys/module/<name>/nvpeer/`) and MOFED's
//! `memory_peers` counters, when present.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::error::{Error, Result};
use crate::host::pci::PciAddress;
use crate::host::peermem::{self, Implementation};
use crate::host::Host;
use crate::host::{nvidia_proc, records};

/// The counter files of `/sys/kernel/mm/memory_peers/<client>/` (CONTRACT 1.9; the eighth
/// file is `version`).
pub const MEMORY_PEERS_COUNTERS: [&str; 7] = [
    "num_alloc_mrs",
    "num_dealloc_mrs",
    "num_reg_pages",
    "num_dereg_pages",
    "num_reg_bytes",
    "num_dereg_bytes",
    "num_free_callbacks",
];

/// One failure cell: callback, errno (None = any other errno), count.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Failure {
    pub callback: String,
    pub errno: Option<i32>,
    pub count: u64,
}

/// Counters of one MOFED peer-memory client.
#[derive(Clone, Debug, Serialize)]
pub struct PeerClient {
    pub name: String,
    pub version: Option<String>,
    pub counters: BTreeMap<String, u64>,
}

/// GPU memory pinned on one GPU (`/sys/module/<name>/nvpeer/gpus/GPU-<uuid>/`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct GpuPinned {
    pub uuid: String,
    /// From `/proc/driver/nvidia/gpus/*/information`; `None` when the UUID is not there.
    pub pci_bus_id: Option<PciAddress>,
    pub pinned_bytes: u64,
    pub pins: u64,
    pub registrations: u64,
}

/// The schema of `nvpeer stats --json`.
pub const SCHEMA: &str = "nvpeer.stats/1";

/// One reading of every counter: `nvpeer stats --json` prints this (one per line with --watch).
#[derive(Clone, Debug, Serialize)]
pub struct Stats {
    pub schema: &'static str,
    /// Seconds since the Unix epoch when the counters were read.
    pub time: f64,
    /// The loaded module's name, when it is ours.
    pub module: Option<String>,
    /// `/sys/module/<name>/nvpeer/stats/*`
    pub counters: BTreeMap<String, u64>,
    pub failures: Vec<Failure>,
    /// `None` when `/sys/kernel/mm/memory_peers` does not exist.
    pub memory_peers: Option<Vec<PeerClient>>,
    /// Per GPU, from our module's `nvpeer/gpus/` (empty for a module without it).
    pub gpus: Vec<GpuPinned>,
    /// What was left out, one line each: a GPU whose totals could not be read (caught between
    /// its directory and its files); the module's own counters still count.
    pub notes: Vec<String>,
}

fn parse_u64(host: &Host, rel: &str, text: &str) -> Result<u64> {
    text.trim()
        .parse()
        .map_err(|_| Error::parse(host.sys_path(rel), text, "an unsigned integer"))
}

/// Parses the `failures` file: "<callback> <errno|other> <count>" per line.
pub fn parse_failures(host: &Host, rel: &str, text: &str) -> Result<Vec<Failure>> {
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let bad = || {
            Error::parse(
                host.sys_path(rel),
                line,
                "\"<callback> <errno|other> <count>\"",
            )
        };
        let mut it = line.split_whitespace();
        let (Some(cb), Some(err), Some(count), None) = (it.next(), it.next(), it.next(), it.next())
        else {
            return Err(bad());
        };
        let errno = match err {
            "other" => None,
            e => Some(e.parse().map_err(|_| bad())?),
        };
        out.push(Failure {
            callback: cb.to_owned(),
            errno,
            count: count.parse().map_err(|_| bad())?,
        });
    }
    Ok(out)
}

/// Reads every counter available on `host`.
pub fn read(host: &Host) -> Result<Stats> {
    let ours = peermem::loaded_modules(host)?
        .into_iter()
        .find(|m| m.implementation == Implementation::Nvpeer);
    let mut counters = BTreeMap::new();
    let mut failures = Vec::new();
    let mut gpus = Vec::new();
    let mut notes = Vec::new();
    if let Some(m) = &ours {
        (gpus, notes) = gpu_pinned(host, &m.name);
        let dir = format!("module/{}/nvpeer/stats", m.name);
        for name in host.list_sys(&dir)? {
            let rel = format!("{dir}/{name}");
            if let Some(v) = host.read_sys(&rel)? {
                counters.insert(name, parse_u64(host, &rel, &v)?);
            }
        }
        let rel = format!("module/{}/nvpeer/failures", m.name);
        if let Some(text) = host.read_sys(&rel)? {
            failures = parse_failures(host, &rel, &text)?;
        }
    }
    let memory_peers = if host.sys_exists("kernel/mm/memory_peers") {
        let mut clients = Vec::new();
        for name in host.list_sys("kernel/mm/memory_peers")? {
            let base = format!("kernel/mm/memory_peers/{name}");
            let mut c = BTreeMap::new();
            for counter in MEMORY_PEERS_COUNTERS {
                let rel = format!("{base}/{counter}");
                if let Some(v) = host.read_sys(&rel)? {
                    c.insert(counter.to_owned(), parse_u64(host, &rel, &v)?);
                }
            }
            clients.push(PeerClient {
                version: host.read_sys(format!("{base}/version"))?,
                name,
                counters: c,
            });
        }
        Some(clients)
    } else {
        None
    };
    let time = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    Ok(Stats {
        schema: SCHEMA,
        time,
        module: ours.map(|m| m.name),
        counters,
        failures,
        memory_peers,
        gpus,
        notes,
    })
}

/// The module's per-GPU totals, each with its PCI address where the driver names the UUID (a
/// `/proc/driver/nvidia` that cannot be read leaves the addresses out: the totals still count),
/// and a note for each GPU whose totals could not be read.
fn gpu_pinned(host: &Host, name: &str) -> (Vec<GpuPinned>, Vec<String>) {
    let (totals, notes) = records::gpu_totals(host, name);
    let proc = if totals.is_empty() {
        None
    } else {
        nvidia_proc::read(host).proc
    };
    let gpus = totals
        .into_iter()
        .map(|t| GpuPinned {
            pci_bus_id: proc
                .as_ref()
                .and_then(|p| p.gpu_by_uuid(&t.uuid))
                .and_then(|g| g.bus_location),
            uuid: t.uuid,
            pinned_bytes: t.pinned_bytes,
            pins: t.pins,
            registrations: t.registrations,
        })
        .collect();
    (gpus, notes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn write(root: &std::path::Path, rel: &str, content: &str) {
        let p = root.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, content).unwrap();
    }

    #[test]
    fn reads_module_and_memory_peers_counters() {
        let sys = tempfile::tempdir().unwrap();
        let s = sys.path();
        write(
            s,
            "module/nvidia_peermem/nvpeer/implementation",
            "nvpeer 0.1.0\n",
        );
        write(s, "module/nvidia_peermem/nvpeer/stats/registrations", "5\n");
        write(
            s,
            "module/nvidia_peermem/nvpeer/failures",
            "dma_map 14 2\nget_pages other 1\n",
        );
        write(s, "kernel/mm/memory_peers/nv_mem/version", "0.1.0\n");
        write(s, "kernel/mm/memory_peers/nv_mem/num_alloc_mrs", "3\n");
        let st = read(&Host::new(s, "/nonexistent")).unwrap();
        assert_eq!(st.module.as_deref(), Some("nvidia_peermem"));
        assert_eq!(st.counters["registrations"], 5);
        assert_eq!(st.failures.len(), 2);
        assert_eq!(st.failures[0].errno, Some(14));
        assert_eq!(st.failures[1].errno, None);
        let mp = st.memory_peers.unwrap();
        assert_eq!(mp[0].name, "nv_mem");
        assert_eq!(mp[0].counters["num_alloc_mrs"], 3);
        assert!(st.gpus.is_empty());
    }

    #[test]
    fn reads_the_per_gpu_totals_with_their_pci_address() {
        let root = tempfile::tempdir().unwrap();
        let (s, p) = (root.path().join("sys"), root.path().join("proc"));
        let uuid = "GPU-d09b8d4e-daef-237f-dd2d-1f194bd911ab";
        write(
            &s,
            "module/nvidia_peermem/nvpeer/implementation",
            "nvpeer 0.2.0\n",
        );
        let g = format!("module/nvidia_peermem/nvpeer/gpus/{uuid}");
        for (f, v) in [
            ("pinned_bytes", "131072"),
            ("pins", "2"),
            ("registrations", "3"),
        ] {
            write(&s, &format!("{g}/{f}"), &format!("{v}\n"));
        }
        let host = Host::new(&s, &p);
        let st = read(&host).unwrap();
        assert_eq!(st.gpus[0].pinned_bytes, 131072);
        assert_eq!(st.gpus[0].pci_bus_id, None);
        write(
            &p,
            "driver/nvidia/gpus/0000:03:00.0/information",
            &format!("GPU UUID: \t {uuid}\nBus Location: \t 0000:03:00.0\n"),
        );
        let st = read(&host).unwrap();
        assert_eq!(st.gpus[0].pci_bus_id, Some("0000:03:00.0".parse().unwrap()));
        assert_eq!((st.gpus[0].pins, st.gpus[0].registrations), (2, 3));
        // Review: a GPU directory caught before its files exist no longer fails the whole read
        // (the Slurm epilog's leak check needs the module's counters): it is a note.
        write(
            &s,
            "module/nvidia_peermem/nvpeer/stats/live_contexts",
            "1\n",
        );
        let late = "GPU-00000000-0000-0000-0000-000000000001";
        fs::create_dir_all(s.join(format!("module/nvidia_peermem/nvpeer/gpus/{late}"))).unwrap();
        let st = read(&host).unwrap();
        assert_eq!(st.counters["live_contexts"], 1);
        assert_eq!(st.gpus.len(), 1);
        let [note] = st.notes.as_slice() else {
            panic!("{:?}", st.notes)
        };
        assert!(
            note.starts_with("per-GPU totals left out: ") && note.contains(late),
            "{note}"
        );
        assert!(crate::commands::render::stats(&st, None).contains(&format!("note: {note}\n")));
    }

    #[test]
    fn malformed_counter_is_a_clear_error() {
        let sys = tempfile::tempdir().unwrap();
        let s = sys.path();
        write(
            s,
            "module/nvidia_peermem/nvpeer/implementation",
            "nvpeer 0.1.0\n",
        );
        write(
            s,
            "module/nvidia_peermem/nvpeer/stats/registrations",
            "lots\n",
        );
        let err = read(&Host::new(s, "/nonexistent")).unwrap_err().to_string();
        assert!(
            err.contains("registrations") && err.contains("unsigned integer"),
            "{err}"
        );
    }

    proptest::proptest! {
        #[test]
        fn failures_parser_never_panics(text in "[a-z_0-9 \n-]{0,120}") {
            let _ = parse_failures(&Host::new("/x", "/y"), "f", &text);
            let _ = parse_u64(&Host::new("/x", "/y"), "f", &text);
        }
    }

    #[test]
    fn malformed_failures_line_is_rejected() {
        let host = Host::new("/x", "/y");
        assert!(parse_failures(&host, "f", "dma_map 14").is_err());
        assert!(parse_failures(&host, "f", "dma_map x 2").is_err());
        assert_eq!(parse_failures(&host, "f", "\n").unwrap(), vec![]);
    }
}
