//! Human output: aligned tables, colour only when asked for (the binary asks when stdout is a
//! terminal).

use crate::check::{Report, Status};
use crate::nccl_log;
use crate::stats::Stats;
use crate::topo::{PathClass, Topology};

/// A table whose columns are padded to their widest cell; the last column is not padded.
#[derive(Clone, Debug, Default)]
pub struct Table {
    rows: Vec<Vec<Cell>>,
}

#[derive(Clone, Debug)]
struct Cell {
    text: String,
    /// ANSI colour code applied around the padded text.
    color: Option<&'static str>,
    right: bool,
}

impl Table {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a row of left-aligned cells.
    pub fn row<I, S>(&mut self, cells: I) -> &mut Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.rows.push(
            cells
                .into_iter()
                .map(|c| Cell {
                    text: c.into(),
                    color: None,
                    right: false,
                })
                .collect(),
        );
        self
    }

    /// Colours cell `col` of the last row (only rendered when colour is on).
    pub fn color_last(&mut self, col: usize, code: &'static str) -> &mut Self {
        if let Some(cell) = self.rows.last_mut().and_then(|r| r.get_mut(col)) {
            cell.color = Some(code);
        }
        self
    }

    /// Right-aligns cell `col` of the last row (numbers).
    pub fn right_last(&mut self, col: usize) -> &mut Self {
        if let Some(cell) = self.rows.last_mut().and_then(|r| r.get_mut(col)) {
            cell.right = true;
        }
        self
    }

    pub fn render(&self, color: bool) -> String {
        let columns = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        let mut widths = vec![0usize; columns];
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate() {
                widths[i] = widths[i].max(cell.text.chars().count());
            }
        }
        let mut out = String::new();
        for row in &self.rows {
            let mut line = String::new();
            for (i, cell) in row.iter().enumerate() {
                if i > 0 {
                    line.push_str("  ");
                }
                let last = i + 1 == row.len();
                let pad = widths[i].saturating_sub(cell.text.chars().count());
                let padded = if cell.right {
                    format!("{}{}", " ".repeat(pad), cell.text)
                } else if last {
                    cell.text.clone()
                } else {
                    format!("{}{}", cell.text, " ".repeat(pad))
                };
                match (color, cell.color) {
                    (true, Some(code)) => line.push_str(&format!("\x1b[{code}m{padded}\x1b[0m")),
                    _ => line.push_str(&padded),
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

fn status_color(s: Status) -> &'static str {
    match s {
        Status::Ok => "32",
        Status::Info => "36",
        Status::Warn => "33",
        Status::Unknown => "35",
        Status::Fail => "31",
    }
}

/// The status column is as wide as its longest label (`unknown`), whatever the rows.
const STATUS_WIDTH: usize = 7;

/// `nvpeer check`: status, id, what was found; a `fix:` line under every warn, unknown and
/// fail, a `note:` line under info; a summary line. Rows that do not apply are left out
/// unless `all`.
pub fn check(report: &Report, color: bool, all: bool) -> String {
    let mut t = Table::new();
    let shown = report.checks.iter().filter(|c| all || c.applies);
    for c in shown {
        t.row([
            format!("{:<STATUS_WIDTH$}", c.status.label()),
            c.id.to_owned(),
            c.detail.clone(),
        ])
        .color_last(0, status_color(c.status));
        if let Some(fix) = &c.fix {
            let label = if c.status == Status::Info {
                "note"
            } else {
                "fix"
            };
            t.row([String::new(), String::new(), format!("{label}: {fix}")]);
        }
    }
    let applying = || report.checks.iter().filter(|c| c.applies);
    let count = |s: Status| applying().filter(|c| c.status == s).count();
    let hidden = report.checks.iter().filter(|c| !c.applies).count();
    let mut out = t.render(color);
    let v = &report.verdict;
    if !v.not_probed.is_empty() {
        out.push_str(&format!(
            "not probed, assumed good: {}\n",
            v.not_probed.join("; ")
        ));
    }
    // The verdict last: `ready (dma-buf): ...` or `not ready: <id> (<reason>): ...`.
    let counts: Vec<String> = Status::ALL
        .iter()
        .map(|s| format!("{} {}", count(*s), s.label()))
        .collect();
    out.push_str(&format!("{}: {}", v.text, counts.join(", ")));
    if hidden > 0 && !all {
        out.push_str(&format!(" ({hidden} not applicable, shown by --all)"));
    }
    out.push('\n');
    out
}

/// `nvpeer topo`: the matrix like `nvidia-smi topo -m` (each cell the class, with NCCL's class
/// in parentheses where it differs), affinity columns, the nearest NIC, and a legend.
pub fn topo(t: &Topology) -> String {
    let pci_nics: Vec<_> = t.nics.iter().filter(|n| n.pci.is_some()).collect();
    let mut out = String::new();
    if t.gpus.is_empty() {
        out.push_str("no NVIDIA GPU on the PCI bus\n");
    }
    if pci_nics.is_empty() {
        out.push_str("no RDMA NIC on the PCI bus\n");
    }
    if !t.gpus.is_empty() && !pci_nics.is_empty() {
        let mut table = Table::new();
        let mut header = vec![String::new()];
        header.extend(pci_nics.iter().map(|n| n.name.clone()));
        header.extend(["CPU Affinity", "NUMA Affinity", "Nearest NIC"].map(String::from));
        table.row(header);
        for gpu in &t.gpus {
            let mut row = vec![gpu.label.clone()];
            for nic in &pci_nics {
                row.push(
                    t.class(&gpu.label, &nic.name)
                        .map_or_else(|| "?".to_owned(), class_cell),
                );
            }
            row.push(
                gpu.pci
                    .local_cpulist
                    .clone()
                    .unwrap_or_else(|| "N/A".to_owned()),
            );
            row.push(numa(gpu.pci.numa_node));
            row.push(t.nearest.iter().find(|n| n.gpu == gpu.label).map_or_else(
                || "-".to_owned(),
                |n| format!("{} {}", n.nics.join(","), class_cell(n.class)),
            ));
            table.row(row);
        }
        out.push_str(&table.render(false));
        out.push('\n');
    }
    let mut devices = Table::new();
    devices.row(["Device", "PCI", "Root complex", "NUMA", "CPUs"]);
    for g in &t.gpus {
        devices.row([
            g.label.clone(),
            g.pci.address.to_string(),
            g.pci.root_complex.clone(),
            numa(g.pci.numa_node),
            g.pci
                .local_cpulist
                .clone()
                .unwrap_or_else(|| "N/A".to_owned()),
        ]);
    }
    for n in &t.nics {
        match &n.pci {
            Some(p) => devices.row([
                n.name.clone(),
                p.address.to_string(),
                p.root_complex.clone(),
                numa(p.numa_node),
                p.local_cpulist.clone().unwrap_or_else(|| "N/A".to_owned()),
            ]),
            None => devices.row([
                n.name.as_str(),
                "-",
                "software device, not on PCI",
                "-",
                "-",
            ]),
        };
    }
    if !t.gpus.is_empty() || !t.nics.is_empty() {
        out.push_str(&devices.render(false));
        out.push('\n');
    }
    out.push_str(
        "Legend:\n\
         \x20 PIX  = at most one PCIe switch between them\n\
         \x20 PXB  = several PCIe switches, not through the PCIe host bridge\n\
         \x20 PHB  = through a PCIe host bridge (one root complex, typically the CPU)\n\
         \x20 NODE = across PCIe host bridges within one NUMA node\n\
         \x20 SYS  = across NUMA nodes (the SMP interconnect, e.g. QPI/UPI)\n\
         \x20 X(Y) = nvidia-smi class X, NCCL path type Y (NCCL has no NODE: it calls it PHB)\n",
    );
    out
}

/// `PIX`, or `NODE(PHB)` where NCCL's path type differs.
fn class_cell(c: PathClass) -> String {
    if c.nccl().label() == c.label() {
        c.to_string()
    } else {
        format!("{c}({})", c.nccl())
    }
}

fn numa(n: Option<i32>) -> String {
    match n {
        Some(n) if n >= 0 => n.to_string(),
        _ => "N/A".to_owned(),
    }
}

/// `nvpeer stats`: one aligned table of every counter; with a previous reading, a column of
/// the change since then.
pub fn stats(st: &Stats, previous: Option<&Stats>) -> String {
    let mut t = Table::new();
    let mut header = vec!["Source", "Counter", "Value"];
    if previous.is_some() {
        header.push("Change");
    }
    t.row(header);
    let delta = |old: Option<u64>, new: u64| match old {
        Some(o) if new >= o => format!("+{}", new - o),
        Some(o) => format!("-{}", o - new),
        None => "new".to_owned(),
    };
    let source = st.module.as_ref().map(|m| format!("{m} (nvpeer)"));
    match &source {
        Some(src) => {
            for (k, v) in &st.counters {
                let mut row = vec![src.clone(), k.clone(), v.to_string()];
                if let Some(p) = previous {
                    row.push(delta(p.counters.get(k).copied(), *v));
                }
                t.row(row).right_last(2);
            }
            for f in &st.failures {
                let errno = f
                    .errno
                    .map_or_else(|| "other".to_owned(), |e| e.to_string());
                let name = format!("failed {} errno {errno}", f.callback);
                let mut row = vec![src.clone(), name, f.count.to_string()];
                if let Some(p) = previous {
                    let old = p
                        .failures
                        .iter()
                        .find(|o| o.callback == f.callback && o.errno == f.errno)
                        .map(|o| o.count);
                    row.push(delta(old, f.count));
                }
                t.row(row).right_last(2);
            }
        }
        None => {
            t.row([
                "nvpeer",
                "module not loaded (no /sys/module/<name>/nvpeer)",
                "",
            ]);
        }
    }
    match &st.memory_peers {
        Some(clients) if clients.is_empty() => {
            t.row(["memory_peers", "no client registered", ""]);
        }
        Some(clients) => {
            for c in clients {
                let src = format!(
                    "memory_peers/{} {}",
                    c.name,
                    c.version.as_deref().unwrap_or("?")
                );
                for (k, v) in &c.counters {
                    let mut row = vec![src.clone(), k.clone(), v.to_string()];
                    if let Some(p) = previous {
                        let old = p
                            .memory_peers
                            .as_ref()
                            .and_then(|cs| cs.iter().find(|o| o.name == c.name))
                            .and_then(|o| o.counters.get(k).copied());
                        row.push(delta(old, *v));
                    }
                    t.row(row).right_last(2);
                }
            }
        }
        None => {
            t.row(["memory_peers", "absent (/sys/kernel/mm/memory_peers)", ""]);
        }
    }
    let mut out = t.render(false);
    for n in &st.notes {
        out.push_str(&format!("note: {n}\n"));
    }
    out
}

/// `nvpeer nccl-log`: the NET devices, the distance rule per GPU/HCA, the connections, and the
/// verdict as the last line.
pub fn nccl_log(r: &nccl_log::Report) -> String {
    let host = |h: &Option<String>| h.clone().unwrap_or_else(|| "-".to_owned());
    let yes = |b: bool| if b { "yes" } else { "no" };
    let mut out = String::new();
    if !r.nccl_versions.is_empty() {
        out.push_str(&format!(
            "NCCL {}
",
            r.nccl_versions.join(", ")
        ));
    }
    if !r.devices.is_empty() {
        let mut t = Table::new();
        t.row(["Host", "Net", "HCA", "GDR", "Why"]);
        for d in &r.devices {
            let why = match (&d.via, &d.reason) {
                (Some(v), _) => format!("via {v}"),
                (None, Some(reason)) => reason.clone(),
                (None, None) => String::new(),
            };
            t.row([
                host(&d.host),
                d.net.clone(),
                format!("{} {}", d.index, d.name),
                yes(d.gdr).to_owned(),
                why,
            ]);
        }
        out.push_str(&t.render(false));
        out.push('\n');
    }
    if !r.gpu_paths.is_empty() {
        let mut t = Table::new();
        t.row([
            "Host",
            "GPU",
            "HCA",
            "GDR",
            "Distance rule (NCCL_NET_GDR_LEVEL)",
        ]);
        for p in &r.gpu_paths {
            t.row([
                host(&p.host),
                p.gpu.clone(),
                p.hca.clone(),
                yes(p.gdr).to_owned(),
                format!(
                    "distance {} {} {}{}",
                    p.distance,
                    if p.gdr { "<=" } else { ">" },
                    p.limit,
                    p.pxn_via
                        .as_ref()
                        .map_or_else(String::new, |v| format!(" (PXN via {v})"))
                ),
            ]);
        }
        out.push_str(&t.render(false));
        out.push('\n');
    }
    if !r.connections.is_empty() {
        let mut t = Table::new();
        t.row(["Host", "Channel", "Ranks", "Dir", "Net", "GDRDMA"]);
        for c in &r.connections {
            let mut flags = Vec::new();
            if c.pci {
                flags.push("PCI".to_owned());
            }
            if c.shared {
                flags.push("shared".to_owned());
            }
            if let Some(p) = c.proxy_rank {
                flags.push(format!("proxy rank {p}"));
            }
            let gdr = if flags.is_empty() {
                yes(c.gdr).to_owned()
            } else {
                format!("{} ({})", yes(c.gdr), flags.join(", "))
            };
            t.row([
                host(&c.host),
                match c.conn_index {
                    Some(i) => format!("{:02}/{i}", c.channel),
                    None => format!("{:02}", c.channel),
                },
                format!("{} -> {}", c.from_rank, c.to_rank),
                c.direction.clone(),
                format!("{}/{}", c.net, c.dev),
                gdr,
            ]);
        }
        out.push_str(&t.render(false));
        out.push('\n');
    }
    for w in &r.warnings {
        out.push_str(&format!("NCCL WARN {w}\n"));
    }
    let s = &r.summary;
    out.push_str(&match s.verdict {
        nccl_log::Verdict::NoNcclLines => format!("{}: no NCCL lines\n", r.source),
        v => format!(
            "{}: {} ({} of {} network connections GDRDMA)\n",
            r.source,
            v.sentence(),
            s.gdr_connections,
            s.net_connections
        ),
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_pads_columns_and_trims_lines() {
        let mut t = Table::new();
        t.row(["a", "bb", "c"]).row(["ccc", "d", ""]);
        assert_eq!(t.render(false), "a    bb  c\nccc  d\n");
    }

    #[test]
    fn colour_only_when_asked() {
        let mut t = Table::new();
        t.row(["ok", "x"]).color_last(0, "32");
        assert!(!t.render(false).contains('\x1b'));
        assert!(t.render(true).contains("\x1b[32mok\x1b[0m"));
    }

    #[test]
    fn numbers_align_right() {
        let mut t = Table::new();
        t.row(["a", "1", "x"]).right_last(1);
        t.row(["b", "100", "y"]).right_last(1);
        assert_eq!(t.render(false), "a    1  x\nb  100  y\n");
    }
}
