// SPDX-License-Identifier: MIT OR Apache-2.0
//! Every series `nvpeer stats --format prometheus` exposes: the check verdicts and facts of
//! a report, the module's and MOFED's `memory_peers` counters, with their HELP texts.

use super::exposition::{Exposition, Kind};
use crate::check::{GdrPath, Report};
use crate::commands::stats::Stats;
use crate::error::Error;
use crate::host::pci::PciAddress;
use crate::host::peermem::Implementation;

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
const MODULE_GAUGES: [&str; 4] = ["live_contexts", "live_pins", "pinned_pages", "pinned_bytes"];

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
        "pin_shares" => "Registrations that reused a live pin of the same range and process",
        "live_pins" => "NVIDIA pins held now (shared by the registrations of one range)",
        "unpins_left_to_callback" => {
            "Unpins from another process than the pinning one, left to NVIDIA's free callback"
        }
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
        "Verdict of each nvpeer check: 0 ok or info, 1 warn, 2 fail, 3 unknown",
    );
    for c in &report.checks {
        checks.set(&[("check", c.id)], c.status.gauge());
    }

    // Labels from fixed sets only (no free text, which would make a series per host and
    // reason): the state, the blocking row's id, the paths a ready verdict rests on.
    let state = if report.verdict.ready {
        "ready"
    } else if report.verdict.unknown {
        "unknown"
    } else {
        "not_ready"
    };
    let blocking = report.verdict.blocking.as_ref().map_or("", |b| b.check);
    let paths: Vec<&str> = report.verdict.paths.iter().map(|p| p.id()).collect();
    let paths = paths.join(",");
    e.family(
        "nvpeer_verdict_info",
        Kind::Gauge,
        "The host's verdict: state ready, not_ready or unknown; blocking the id of the row that decides a verdict that is not ready; paths what a ready verdict rests on (dmabuf, peer_memory, efa, comma-separated); always 1",
    )
    .set(
        &[("state", state), ("blocking", blocking), ("paths", &paths)],
        1,
    );
    for p in &report.pairs {
        for path in GdrPath::ALL {
            if path == GdrPath::Efa && !p.paths.contains(&path) && !p.why_not.contains_key(&path) {
                continue;
            }
            e.family(
                "nvpeer_gdr_path",
                Kind::Gauge,
                "1 when the path (dmabuf, peer_memory, efa) carries GPU memory between the GPU and the RDMA device (nvpeer check's pairs), else 0",
            )
            .set(
                &[
                    ("gpu", gpu_index(&p.gpu)),
                    ("device", &p.nic),
                    ("path", path.id()),
                ],
                u64::from(p.paths.contains(&path)),
            );
        }
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
    // GPU memory the module pins per GPU, next to nvpeer_gpu_bar1_bytes (same gpu and pci_bus_id
    // labels; DCGM's UUID label too, so a GPU the driver does not name still has one).
    for g in &st.gpus {
        let gpu = g
            .pci_bus_id
            .and_then(|a| facts.gpus.iter().find(|f| f.address == a))
            .map_or("", |f| gpu_index(&f.label));
        let bus = g.pci_bus_id.as_ref().map(nvml_bus_id).unwrap_or_default();
        e.family(
            "nvpeer_gpu_pinned_bytes",
            Kind::Gauge,
            "GPU memory the module pins now on this GPU, each NVIDIA pin once (/sys/module/<name>/nvpeer/gpus/<UUID>/pinned_bytes); compare with nvpeer_gpu_bar1_bytes",
        )
        .set(&[("gpu", gpu), ("pci_bus_id", &bus), ("UUID", &g.uuid)], g.pinned_bytes);
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

#[cfg(test)]
mod tests {
    use super::super::exposition::tests::parse;
    use super::super::{escape_label_value, render};
    use crate::check::{self, Inputs};
    use crate::host::Host;
    use std::fs;
    use std::path::Path;

    fn fixture(name: &str) -> Host {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures")
            .join(name);
        Host::new(dir.join("sys"), dir.join("proc"))
    }

    fn render_fixture(name: &str) -> String {
        let host = fixture(name);
        render(
            &crate::commands::stats::read(&host),
            &check::run(&host, &Inputs::fixture(), &check::Options::default()),
        )
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
        let report = check::run(&host, &Inputs::fixture(), &check::Options::default());
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
            let want = c.status.gauge().to_string();
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
    fn pinned_bytes_per_gpu_next_to_bar1() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/pix");
        let dir = tempfile::tempdir().unwrap();
        let copy = |from: &Path, to: &Path| {
            let status = std::process::Command::new("cp")
                .arg("-a")
                .arg(from)
                .arg(to)
                .status()
                .unwrap();
            assert!(status.success());
        };
        copy(&src.join("sys"), &dir.path().join("sys"));
        copy(&src.join("proc"), &dir.path().join("proc"));
        let uuid = "GPU-d09b8d4e-daef-237f-dd2d-1f194bd911ab";
        let g = dir
            .path()
            .join(format!("sys/module/nvidia_peermem/nvpeer/gpus/{uuid}"));
        fs::create_dir_all(&g).unwrap();
        for (f, v) in [
            ("pinned_bytes", "4194304"),
            ("pins", "2"),
            ("registrations", "2"),
        ] {
            fs::write(g.join(f), format!("{v}\n")).unwrap();
        }
        let host = Host::new(dir.path().join("sys"), dir.path().join("proc"));
        let text = render(
            &crate::commands::stats::read(&host),
            &check::run(&host, &Inputs::fixture(), &check::Options::default()),
        );
        assert!(
            text.contains(&format!(
                "nvpeer_gpu_pinned_bytes{{gpu=\"\",pci_bus_id=\"\",UUID=\"{uuid}\"}} 4194304"
            )),
            "{text}"
        );
        let info = dir.path().join("proc/driver/nvidia/gpus/0000:03:00.0");
        fs::create_dir_all(&info).unwrap();
        fs::write(
            info.join("information"),
            format!("GPU UUID: \t {uuid}\nBus Location: \t 0000:03:00.0\n"),
        )
        .unwrap();
        let text = render(
            &crate::commands::stats::read(&host),
            &check::run(&host, &Inputs::fixture(), &check::Options::default()),
        );
        let (types, _) = parse(&text);
        assert_eq!(types["nvpeer_gpu_pinned_bytes"], "gauge");
        assert!(
            text.contains(&format!(
                "nvpeer_gpu_pinned_bytes{{gpu=\"0\",pci_bus_id=\"00000000:03:00.0\",UUID=\"{uuid}\"}} 4194304"
            )),
            "{text}"
        );
        assert!(text.contains("nvpeer_gpu_bar1_bytes{gpu=\"0\",pci_bus_id=\"00000000:03:00.0\"}"));
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
            &crate::commands::stats::read(&host),
            &check::run(&host, &Inputs::fixture(), &check::Options::default()),
        );
        assert!(
            text.contains("nvpeer_info{implementation=\"none\",module=\"\""),
            "{text}"
        );
        assert!(text.contains("nvpeer_modules_loaded 0"));
        assert!(text.contains("nvpeer_ready 0"));
        assert!(text.contains("nvpeer_check_status{check=\"module\"} 2"));
    }
}
