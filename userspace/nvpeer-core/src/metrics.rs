// SPDX-License-Identifier: MIT OR Apache-2.0
//! `nvpeer stats --format prometheus` and `nvpeer stats --textfile DIR`: the module's counters,
//! MOFED's `memory_peers` counters and the verdict of every `nvpeer check` check in the
//! Prometheus text exposition format (version 0.0.4), for node_exporter's textfile collector.
//!
//! Conventions: one `nvpeer_` prefix, base units (bytes), `_total` on every counter, one
//! `# HELP` and one `# TYPE` line per family, no timestamps, and the label names of the
//! exporters the series are joined with: DCGM's `gpu` (the NVML index, which is PCI order like
//! our `GPU<n>`) and `pci_bus_id` (NVML's `00000000:3B:00.0`), node_exporter's `device` (and
//! `port`) for RDMA devices, as its infiniband collector has them.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use crate::check::{Report, Status};
use crate::error::Error;
use crate::pci::PciAddress;
use crate::peermem::Implementation;
use crate::stats::Stats;

/// The file node_exporter's textfile collector reads (`*.prom` in its directory).
pub const TEXTFILE_NAME: &str = "nvpeer.prom";

/// Prometheus metric type of a family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
}

impl Kind {
    fn label(self) -> &'static str {
        match self {
            Self::Counter => "counter",
            Self::Gauge => "gauge",
        }
    }
}

type Labels = Vec<(&'static str, String)>;

/// One metric family: its name, HELP text, type and samples (one per label set).
#[derive(Clone, Debug)]
pub struct Family {
    name: String,
    help: String,
    kind: Kind,
    samples: Vec<(Labels, u64)>,
}

impl Family {
    /// Sets the sample with these labels; a label set given twice keeps the last value, so
    /// that a family never holds two series with the same labels.
    pub fn set(&mut self, labels: &[(&'static str, &str)], value: u64) -> &mut Self {
        let labels: Labels = labels.iter().map(|(k, v)| (*k, (*v).to_owned())).collect();
        match self.samples.iter_mut().find(|(l, _)| *l == labels) {
            Some(sample) => sample.1 = value,
            None => self.samples.push((labels, value)),
        }
        self
    }

    pub fn name(&self) -> &str {
        &self.name
    }
}

/// Metric families in the order they were first named.
#[derive(Clone, Debug, Default)]
pub struct Exposition {
    families: Vec<Family>,
}

/// A metric name with every character outside `[a-zA-Z0-9_:]` replaced by `_` (a counter file
/// name the module may add one day must not break the exposition).
pub fn sanitize_name(name: &str) -> String {
    let mut out: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == ':' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if out.starts_with(|c: char| c.is_ascii_digit()) || out.is_empty() {
        out.insert(0, '_');
    }
    out
}

/// A label value as the exposition format writes it: `\` as `\\`, `"` as `\"`, a line feed
/// as `\n`.
pub fn escape_label_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// A HELP text: `\` as `\\`, a line feed as `\n` (quotes stay as they are).
fn escape_help(text: &str) -> String {
    text.replace('\\', "\\\\").replace('\n', "\\n")
}

impl Exposition {
    pub fn new() -> Self {
        Self::default()
    }

    /// The family `name` (sanitized; a counter gets `_total` appended when it lacks it),
    /// created on first use: later calls with the same name add samples to the same family.
    pub fn family(&mut self, name: &str, kind: Kind, help: &str) -> &mut Family {
        let mut name = sanitize_name(name);
        if kind == Kind::Counter && !name.ends_with("_total") {
            name.push_str("_total");
        }
        let index = match self.families.iter().position(|f| f.name == name) {
            Some(i) => i,
            None => {
                self.families.push(Family {
                    name,
                    help: help.to_owned(),
                    kind,
                    samples: Vec::new(),
                });
                self.families.len() - 1
            }
        };
        &mut self.families[index]
    }

    pub fn families(&self) -> &[Family] {
        &self.families
    }

    /// The text exposition: per family with samples `# HELP`, `# TYPE`, then its samples.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for f in self.families.iter().filter(|f| !f.samples.is_empty()) {
            let _ = writeln!(out, "# HELP {} {}", f.name, escape_help(&f.help));
            let _ = writeln!(out, "# TYPE {} {}", f.name, f.kind.label());
            for (labels, value) in &f.samples {
                out.push_str(&f.name);
                if !labels.is_empty() {
                    out.push('{');
                    for (i, (k, v)) in labels.iter().enumerate() {
                        if i > 0 {
                            out.push(',');
                        }
                        let _ = write!(out, "{k}=\"{}\"", escape_label_value(v));
                    }
                    out.push('}');
                }
                let _ = writeln!(out, " {value}");
            }
        }
        out
    }
}

/// NVML's PCI bus id, as DCGM's `pci_bus_id` label has it: `00000000:3B:00.0`.
pub fn nvml_bus_id(a: &PciAddress) -> String {
    format!(
        "{:08X}:{:02X}:{:02X}.{:X}",
        a.domain, a.bus, a.device, a.function
    )
}

/// DCGM's `gpu` label: the index of `GPU<n>`.
fn gpu_index(label: &str) -> &str {
    label.strip_prefix("GPU").unwrap_or(label)
}

fn implementation_id(i: Implementation) -> &'static str {
    match i {
        Implementation::Nvpeer => "nvpeer",
        Implementation::NvidiaPeermem => "nvidia_peermem",
        Implementation::MellanoxNvPeerMem => "mellanox_nv_peer_mem",
    }
}

/// Gauges among the module's `stats/*` files (the rest count events since load).
const MODULE_GAUGES: [&str; 3] = ["live_contexts", "pinned_pages", "pinned_bytes"];

/// HELP texts of the module's counters (kmod/README.md, "Statistics and logs").
fn module_help(name: &str) -> String {
    let known = match name {
        "live_contexts" => "Registrations in progress or alive (acquire .. release)",
        "acquired" => "acquire answers: GPU memory (ours)",
        "declined" => "acquire answers: not GPU memory (not ours)",
        "pin_calls" => "NVIDIA pin calls",
        "unpin_calls" => "NVIDIA unpin calls",
        "pinned_pages" => "64 KiB GPU pages pinned now",
        "pinned_bytes" => "Bytes of GPU memory pinned now",
        "registrations" => "Successful dma_map calls",
        "deregistrations" => "Successful dma_unmap calls",
        "sg_entries" => "SG entries handed to the core, summed over registrations",
        "revocations" => "NVIDIA free callbacks received (cudaFree while registered)",
        "invalidate_calls" => "Revocations that had to stop the NIC through the core",
        "failures" => "Failed callbacks, all causes",
        _ => "",
    };
    let file = format!("/sys/module/<name>/nvpeer/stats/{name}");
    if known.is_empty() {
        format!("The module's counter {file}")
    } else {
        format!("{known} ({file})")
    }
}

/// HELP texts of MOFED's `memory_peers` counters.
fn memory_peers_help(name: &str) -> String {
    let known = match name {
        "num_alloc_mrs" => "Memory regions the client acquired",
        "num_dealloc_mrs" => "Memory regions the client released",
        "num_reg_pages" => "Pages registered through the client",
        "num_dereg_pages" => "Pages deregistered through the client",
        "num_reg_bytes" => "Bytes registered through the client",
        "num_dereg_bytes" => "Bytes deregistered through the client",
        "num_free_callbacks" => "Invalidations (free callbacks) of the client",
        _ => "A counter of the client",
    };
    format!("{known} (/sys/kernel/mm/memory_peers/<client>/{name})")
}

/// Every series: the check verdicts and facts from `report` and the counters from `stats`
/// (`Err` when they could not be read: `nvpeer_stats_readable` is then 0 and the counters
/// are left out).
pub fn collect(stats: &std::result::Result<Stats, Error>, report: &Report) -> Exposition {
    let mut e = Exposition::new();
    let facts = &report.facts;

    let clients = facts
        .memory_peers
        .as_ref()
        .map(|c| {
            c.iter()
                .map(|c| c.name.as_str())
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default();
    let cli_version = env!("CARGO_PKG_VERSION");
    let info = e.family(
        "nvpeer_info",
        Kind::Gauge,
        "The loaded peer-memory module (implementation: nvpeer, nvidia_peermem, mellanox_nv_peer_mem or none; core: the generation it detected; clients: memory_peers clients); always 1",
    );
    if facts.modules.is_empty() {
        info.set(
            &[
                ("implementation", "none"),
                ("module", ""),
                ("version", ""),
                ("core", ""),
                ("clients", &clients),
                ("cli_version", cli_version),
            ],
            1,
        );
    }
    for m in &facts.modules {
        info.set(
            &[
                ("implementation", implementation_id(m.implementation)),
                ("module", &m.name),
                ("version", m.version.as_deref().unwrap_or("")),
                ("core", m.core.as_deref().unwrap_or("")),
                ("clients", &clients),
                ("cli_version", cli_version),
            ],
            1,
        );
    }
    e.family(
        "nvpeer_modules_loaded",
        Kind::Gauge,
        "Peer-memory modules loaded (nvidia_peermem, nv_peer_mem); 1 is right",
    )
    .set(&[], facts.modules.len() as u64);
    if let Some(core) = facts.ib_core.as_ref().and_then(|c| c.peer_core.as_ref()) {
        e.family(
            "nvpeer_peer_core_info",
            Kind::Gauge,
            "The exporter of ib_register_peer_memory_client, its core generation and MOFED version; always 1",
        )
        .set(
            &[
                ("provider", &core.provider),
                ("generation", core.generation.map_or("", |g| g.label())),
                ("version", core.version.as_deref().unwrap_or("")),
            ],
            1,
        );
    }

    e.family(
        "nvpeer_ready",
        Kind::Gauge,
        "1 when no nvpeer check failed (nvpeer check exit code 0), else 0",
    )
    .set(&[], u64::from(report.ready));
    let checks = e.family(
        "nvpeer_check_status",
        Kind::Gauge,
        "Verdict of each nvpeer check: 0 ok, 1 warn, 2 fail",
    );
    for c in &report.checks {
        let v = match c.status {
            Status::Ok => 0,
            Status::Warn => 1,
            Status::Fail => 2,
        };
        checks.set(&[("check", c.id)], v);
    }

    for g in &facts.gpus {
        if let Some(bar) = &g.bar1 {
            let bus = nvml_bus_id(&g.address);
            e.family(
                "nvpeer_gpu_bar1_bytes",
                Kind::Gauge,
                "Size of the GPU's BAR1 (its largest prefetchable BAR), which bounds the GPU memory a NIC can map",
            )
            .set(&[("gpu", gpu_index(&g.label)), ("pci_bus_id", &bus)], bar.size);
        }
    }
    if let Some(t) = &facts.topology {
        let bus_of = |label: &str| {
            t.gpu(label)
                .map(|g| nvml_bus_id(&g.pci.address))
                .unwrap_or_default()
        };
        for l in &t.links {
            let bus = bus_of(&l.gpu);
            e.family(
                "nvpeer_gpu_nic_path_info",
                Kind::Gauge,
                "PCIe path between a GPU and an RDMA device (class as nvidia-smi topo -m, nccl_class as NCCL's path type); always 1",
            )
            .set(
                &[
                    ("gpu", gpu_index(&l.gpu)),
                    ("pci_bus_id", &bus),
                    ("device", &l.nic),
                    ("class", l.class.label()),
                    ("nccl_class", l.nccl_class.label()),
                ],
                1,
            );
        }
        for n in &t.nearest {
            let bus = bus_of(&n.gpu);
            for nic in &n.nics {
                e.family(
                    "nvpeer_gpu_nearest_nic_info",
                    Kind::Gauge,
                    "The nearest RDMA device(s) of each GPU and their path class; always 1",
                )
                .set(
                    &[
                        ("gpu", gpu_index(&n.gpu)),
                        ("pci_bus_id", &bus),
                        ("device", nic),
                        ("class", n.class.label()),
                    ],
                    1,
                );
            }
        }
    }
    for d in &facts.rdma_devices {
        for p in &d.ports {
            e.family(
                "nvpeer_rdma_port_active",
                Kind::Gauge,
                "1 when the RDMA device's port is ACTIVE (/sys/class/infiniband/<device>/ports/<port>/state)",
            )
            .set(
                &[("device", &d.name), ("port", &p.number)],
                u64::from(p.is_active()),
            );
        }
    }

    let st = match stats {
        Ok(st) => st,
        Err(_) => {
            e.family(
                "nvpeer_stats_readable",
                Kind::Gauge,
                "1 when the module's and memory_peers' counters could be read, else 0 (nvpeer stats names the file)",
            )
            .set(&[], 0);
            return e;
        }
    };
    e.family(
        "nvpeer_stats_readable",
        Kind::Gauge,
        "1 when the module's and memory_peers' counters could be read, else 0 (nvpeer stats names the file)",
    )
    .set(&[], 1);
    for (name, value) in &st.counters {
        let kind = if MODULE_GAUGES.contains(&name.as_str()) {
            Kind::Gauge
        } else {
            Kind::Counter
        };
        e.family(&format!("nvpeer_module_{name}"), kind, &module_help(name))
            .set(&[], *value);
    }
    for f in &st.failures {
        let errno = f
            .errno
            .map_or_else(|| "other".to_owned(), |n| n.to_string());
        e.family(
            "nvpeer_module_callback_failures_total",
            Kind::Counter,
            "Failed callbacks of the module by callback and errno (/sys/module/<name>/nvpeer/failures)",
        )
        .set(&[("callback", &f.callback), ("errno", &errno)], f.count);
    }
    e.family(
        "nvpeer_memory_peers_present",
        Kind::Gauge,
        "1 when /sys/kernel/mm/memory_peers exists (MOFED's view of the peer clients, which older NCCL needs)",
    )
    .set(&[], u64::from(st.memory_peers.is_some()));
    for c in st.memory_peers.iter().flatten() {
        e.family(
            "nvpeer_memory_peers_client_info",
            Kind::Gauge,
            "A client registered with the peer-memory core (/sys/kernel/mm/memory_peers/<client>/version); always 1",
        )
        .set(
            &[
                ("client", &c.name),
                ("version", c.version.as_deref().unwrap_or("")),
            ],
            1,
        );
        for (name, value) in &c.counters {
            let short = name.strip_prefix("num_").unwrap_or(name);
            e.family(
                &format!("nvpeer_memory_peers_{short}_total"),
                Kind::Counter,
                &memory_peers_help(name),
            )
            .set(&[("client", &c.name)], *value);
        }
    }
    e
}

/// `collect(...).render()`.
pub fn render(stats: &std::result::Result<Stats, Error>, report: &Report) -> String {
    collect(stats, report).render()
}

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
    use crate::check::{self, Inputs};
    use crate::host::Host;
    use std::collections::{BTreeMap, BTreeSet};
    use std::fs;

    fn fixture(name: &str) -> Host {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures")
            .join(name);
        Host::new(dir.join("sys"), dir.join("proc"))
    }

    fn render_fixture(name: &str) -> String {
        let host = fixture(name);
        render(
            &crate::stats::read(&host),
            &check::run(&host, &Inputs::fixture()),
        )
    }

    /// (name, TYPE) per family, and every sample line as (series, value), checked for the
    /// rules of the text format this module promises.
    fn parse(text: &str) -> (BTreeMap<String, String>, Vec<(String, String)>) {
        let mut types = BTreeMap::new();
        let mut helps = BTreeSet::new();
        let mut samples = Vec::new();
        let mut seen = BTreeSet::new();
        let mut current = String::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# HELP ") {
                let name = rest.split(' ').next().unwrap().to_owned();
                assert!(helps.insert(name.clone()), "second HELP for {name}");
                current = name;
            } else if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').unwrap();
                assert_eq!(name, current, "TYPE of {name} not after its HELP");
                assert!(
                    types.insert(name.to_owned(), kind.to_owned()).is_none(),
                    "second TYPE for {name}"
                );
            } else {
                let (series, value) = line.rsplit_once(' ').unwrap();
                let name = series.split('{').next().unwrap();
                assert_eq!(name, current, "{series} outside its family");
                assert!(name.starts_with("nvpeer_"), "{name} without the prefix");
                assert!(seen.insert(series.to_owned()), "duplicate series {series}");
                value.parse::<u64>().unwrap();
                samples.push((series.to_owned(), value.to_owned()));
            }
        }
        for (name, kind) in &types {
            assert_eq!(
                kind == "counter",
                name.ends_with("_total"),
                "{name} is a {kind}"
            );
        }
        (types, samples)
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape_label_value(r#"a"b\c"#), r#"a\"b\\c"#);
        assert_eq!(escape_label_value("two\nlines"), "two\\nlines");
        assert_eq!(escape_label_value("nccl<=2.9.6"), "nccl<=2.9.6");
        let mut e = Exposition::new();
        e.family("nvpeer_x", Kind::Gauge, "back\\slash\nnewline \"quoted\"")
            .set(&[("check", "say \"hi\"\\\n")], 1);
        assert_eq!(
            e.render(),
            "# HELP nvpeer_x back\\\\slash\\nnewline \"quoted\"\n# TYPE nvpeer_x gauge\n\
             nvpeer_x{check=\"say \\\"hi\\\"\\\\\\n\"} 1\n"
        );
    }

    #[test]
    fn counters_get_total_and_names_are_sanitized() {
        let mut e = Exposition::new();
        assert_eq!(
            e.family("nvpeer_module_registrations", Kind::Counter, "h")
                .name(),
            "nvpeer_module_registrations_total"
        );
        assert_eq!(
            e.family("nvpeer_memory_peers_reg_bytes_total", Kind::Counter, "h")
                .name(),
            "nvpeer_memory_peers_reg_bytes_total"
        );
        assert_eq!(
            e.family("nvpeer_module_pinned_bytes", Kind::Gauge, "h")
                .name(),
            "nvpeer_module_pinned_bytes"
        );
        assert_eq!(
            sanitize_name("nvpeer_module_new-file.x"),
            "nvpeer_module_new_file_x"
        );
        assert_eq!(sanitize_name("9lives"), "_9lives");
    }

    #[test]
    fn one_help_and_type_per_family_and_no_duplicate_series() {
        let mut e = Exposition::new();
        for _ in 0..2 {
            e.family("nvpeer_a", Kind::Gauge, "first")
                .set(&[("x", "1")], 1);
            e.family("nvpeer_b", Kind::Counter, "other").set(&[], 3);
            e.family("nvpeer_a", Kind::Gauge, "ignored")
                .set(&[("x", "2")], 2);
        }
        e.family("nvpeer_a", Kind::Gauge, "").set(&[("x", "1")], 7);
        e.family("nvpeer_empty", Kind::Gauge, "no samples");
        let text = e.render();
        let (types, samples) = parse(&text);
        assert_eq!(types.len(), 2, "{text}");
        assert_eq!(
            samples,
            vec![
                ("nvpeer_a{x=\"1\"}".to_owned(), "7".to_owned()),
                ("nvpeer_a{x=\"2\"}".to_owned(), "2".to_owned()),
                ("nvpeer_b_total".to_owned(), "3".to_owned()),
            ]
        );
        assert!(!text.contains("nvpeer_empty"));
    }

    #[test]
    fn every_fixture_renders_valid_families() {
        for name in [
            "pix",
            "doca",
            "pxb",
            "phb",
            "node",
            "sys",
            "vm",
            "two-loaded",
            "malformed",
        ] {
            let text = render_fixture(name);
            let (types, samples) = parse(&text);
            assert!(types.contains_key("nvpeer_info"), "{name}");
            assert!(types.contains_key("nvpeer_check_status"), "{name}");
            assert!(
                samples
                    .iter()
                    .any(|(s, _)| s.starts_with("nvpeer_check_status{check=\"module\"}")),
                "{name}"
            );
        }
    }

    #[test]
    fn the_ready_fixture_has_every_kind_of_series() {
        let host = fixture("pix");
        let report = check::run(&host, &Inputs::fixture());
        let text = render_fixture("pix");
        let (types, samples) = parse(&text);
        let value = |series: &str| {
            samples
                .iter()
                .find(|(s, _)| s == series)
                .map(|(_, v)| v.as_str())
                .unwrap_or_else(|| panic!("no {series} in\n{text}"))
        };
        assert_eq!(
            value(
                "nvpeer_info{implementation=\"nvpeer\",module=\"nvidia_peermem\",version=\"0.1.0\",\
                 core=\"\",clients=\"nv_mem\",cli_version=\"0.1.0\"}"
            ),
            "1"
        );
        assert_eq!(value("nvpeer_ready"), "1");
        assert_eq!(value("nvpeer_modules_loaded"), "1");
        // One series per check, with its status as the value.
        let statuses: Vec<&(String, String)> = samples
            .iter()
            .filter(|(s, _)| s.starts_with("nvpeer_check_status{"))
            .collect();
        assert_eq!(statuses.len(), report.checks.len());
        for c in &report.checks {
            let want = match c.status {
                Status::Ok => "0",
                Status::Warn => "1",
                Status::Fail => "2",
            };
            assert_eq!(
                value(&format!(
                    "nvpeer_check_status{{check=\"{}\"}}",
                    escape_label_value(c.id)
                )),
                want
            );
        }
        assert_eq!(value("nvpeer_module_live_contexts"), "0");
        assert_eq!(types["nvpeer_module_live_contexts"], "gauge");
        assert_eq!(types["nvpeer_module_pinned_bytes"], "gauge");
        assert_eq!(value("nvpeer_module_registrations_total"), "12");
        assert_eq!(types["nvpeer_module_registrations_total"], "counter");
        assert_eq!(
            value("nvpeer_memory_peers_alloc_mrs_total{client=\"nv_mem\"}"),
            fs::read_to_string(host.sys_path("kernel/mm/memory_peers/nv_mem/num_alloc_mrs"))
                .unwrap()
                .trim()
        );
        assert_eq!(value("nvpeer_memory_peers_present"), "1");
        assert_eq!(value("nvpeer_stats_readable"), "1");
        // DCGM's labels per GPU, node_exporter's per RDMA device.
        assert!(samples
            .iter()
            .any(|(s, _)| s.starts_with("nvpeer_gpu_bar1_bytes{gpu=\"0\",pci_bus_id=\"00000000:")));
        assert_eq!(
            value("nvpeer_gpu_nearest_nic_info{gpu=\"0\",pci_bus_id=\"00000000:03:00.0\",device=\"mlx5_0\",class=\"PIX\"}"),
            "1"
        );
        assert!(samples
            .iter()
            .any(|(s, _)| s.starts_with("nvpeer_rdma_port_active{device=\"mlx5_0\",port=\"1\"}")));
        assert!(
            !text.contains("nvpeer_peer_core_info") || types["nvpeer_peer_core_info"] == "gauge"
        );
    }

    #[test]
    fn doca_reports_the_detected_core_and_no_memory_peers() {
        let text = render_fixture("doca");
        assert!(text.contains("core=\"5x-unmaps\""), "{text}");
        assert!(text.contains("nvpeer_memory_peers_present 0"), "{text}");
        assert!(text.contains("clients=\"\""), "{text}");
    }

    #[test]
    fn unreadable_counters_still_give_the_checks() {
        let text = render_fixture("malformed");
        assert!(text.contains("nvpeer_stats_readable 0"), "{text}");
        assert!(text.contains("nvpeer_check_status{check=\"module\"}"));
        assert!(!text.contains("nvpeer_module_registrations_total"));
    }

    #[test]
    fn no_module_is_an_info_series_of_none() {
        let sys = tempfile::tempdir().unwrap();
        let host = Host::new(sys.path(), "/nonexistent");
        let text = render(
            &crate::stats::read(&host),
            &check::run(&host, &Inputs::fixture()),
        );
        assert!(
            text.contains("nvpeer_info{implementation=\"none\",module=\"\""),
            "{text}"
        );
        assert!(text.contains("nvpeer_modules_loaded 0"));
        assert!(text.contains("nvpeer_ready 0"));
        assert!(text.contains("nvpeer_check_status{check=\"module\"} 2"));
    }

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
