//! Human output: aligned tables, colour only when asked for (the binary asks when stdout is a
//! terminal).

use crate::check::{Report, Status};
use crate::commands::nccl_log;
use crate::commands::stats::Stats;
use crate::host::topo::{PathClass, Topology};

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

/// The width `check` wraps its text to where the terminal's is not known (a pipe, a log).
pub const CHECK_WIDTH: usize = 100;

/// `text` in lines of at most `width` characters, broken at spaces (a word longer than a line
/// is cut).
fn wrap(text: &str, width: usize) -> Vec<String> {
    let width = width.max(20);
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split(' ') {
        let mut word = word.to_owned();
        while word.chars().count() > width {
            if !line.is_empty() {
                lines.push(std::mem::take(&mut line));
            }
            let cut: String = word.chars().take(width).collect();
            word = word.chars().skip(width).collect();
            lines.push(cut);
        }
        let len = line.chars().count();
        if len > 0 && len + 1 + word.chars().count() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(&word);
    }
    if !line.is_empty() || lines.is_empty() {
        lines.push(line);
    }
    lines
}

/// One pair's line: ok when a path carries it and NCCL uses it, warn when it does over a
/// degraded link, fail otherwise.
fn pair_line(p: &crate::check::PairVerdict) -> (Status, String, String) {
    let status = if p.paths.is_empty() || p.not_used.is_some() {
        Status::Fail
    } else if !p.degraded.is_empty() {
        Status::Warn
    } else {
        Status::Ok
    };
    let ends = match (&p.gpu_bus_id, &p.nic_bus_id) {
        (Some(g), Some(n)) => format!(" {g} - {n}"),
        _ => String::new(),
    };
    let paths: Vec<&str> = p.paths.iter().map(|g| g.describe()).collect();
    let mut what = if paths.is_empty() {
        "no path".to_owned()
    } else {
        paths.join(" + ")
    };
    if let Some(m) = p.mapping {
        what.push_str(&format!(" ({})", m.describe()));
    }
    if let Some(why) = &p.not_used {
        what.push_str(&format!("; not used: {why}"));
    }
    if !p.degraded.is_empty() {
        what.push_str(&format!("; degraded: {}", p.degraded.join("; ")));
    }
    (status, p.name(), format!("{}{ends}: {what}", p.class))
}

/// `nvpeer check`: the rows that are not ok (`all`: every row, also those that do not apply),
/// each with its status, id and what was found, a `fix:` under warn, unknown and fail, a
/// `note:` under info; one line per GPU-NIC pair; what was assumed; the counts; the verdict
/// last. Text is wrapped to `width` columns under the detail column.
pub fn check(report: &Report, color: bool, all: bool, width: usize) -> String {
    let shown: Vec<&crate::check::Check> = report
        .checks
        .iter()
        .filter(|c| all || (c.applies && c.status != Status::Ok && c.cause.is_none()))
        .collect();
    let pairs: Vec<(Status, String, String)> = report.pairs.iter().map(pair_line).collect();
    let id_width = shown
        .iter()
        .map(|c| c.id.len())
        .chain(pairs.iter().map(|p| p.1.len()))
        .max()
        .unwrap_or(0);
    let indent = STATUS_WIDTH + 2 + id_width + 2;
    let text_width = width.saturating_sub(indent).max(30);
    let mut out = String::new();
    let mut row = |status: Status, id: &str, lines: Vec<String>| {
        let label = format!("{:<STATUS_WIDTH$}", status.label());
        let label = if color {
            format!("\x1b[{}m{label}\x1b[0m", status_color(status))
        } else {
            label
        };
        for (n, line) in lines.iter().enumerate() {
            if n == 0 {
                out.push_str(&format!("{label}  {id:<id_width$}  {line}"));
            } else {
                out.push_str(&format!("{}{line}", " ".repeat(indent)));
            }
            out.truncate(out.trim_end().len());
            out.push('\n');
        }
    };
    for c in &shown {
        let mut lines = wrap(&c.detail, text_width);
        match (&c.fix, c.cause) {
            // One cause, one fix: a folded row's is its cause's.
            (_, Some(cause)) => lines.extend(wrap(
                &format!("follows from: {cause} (its fix)"),
                text_width,
            )),
            (Some(fix), None) => {
                let label = if c.status == Status::Info {
                    "note"
                } else {
                    "fix"
                };
                lines.extend(wrap(&format!("{label}: {fix}"), text_width));
            }
            (None, None) => {}
        }
        let folded: Vec<String> = report
            .checks
            .iter()
            .filter(|f| f.cause == Some(c.id))
            .map(|f| format!("{} ({})", f.id, f.status.label()))
            .collect();
        if !folded.is_empty() {
            lines.extend(wrap(
                &format!("also from this cause: {}", folded.join(", ")),
                text_width,
            ));
        }
        row(c.status, c.id, lines);
    }
    for (status, name, what) in &pairs {
        row(*status, name, wrap(what, text_width));
    }
    let v = &report.verdict;
    if !v.not_probed.is_empty() {
        for line in wrap(
            &format!("not probed, assumed good: {}", v.not_probed.join("; ")),
            width,
        ) {
            out.push_str(&line);
            out.push('\n');
        }
    }
    let applying = || report.checks.iter().filter(|c| c.applies);
    let count = |s: Status| applying().filter(|c| c.status == s).count();
    let hidden = report.checks.iter().filter(|c| !c.applies).count();
    let counts: Vec<String> = Status::ALL
        .iter()
        .map(|s| format!("{} {}", count(*s), s.label()))
        .collect();
    let mut summary = format!("rows: {}", counts.join(", "));
    let folded = applying()
        .filter(|c| c.cause.is_some() && c.status != Status::Ok)
        .count();
    if folded > 0 {
        summary.push_str(&format!(", {folded} folded under their cause"));
    }
    if !all {
        summary.push_str(&format!(
            " (ok rows{}: --all shows them)",
            if hidden > 0 {
                format!(" and {hidden} not applicable")
            } else {
                String::new()
            }
        ));
    }
    for line in wrap(&summary, width) {
        out.push_str(&line);
        out.push('\n');
    }
    // The verdict last: `ready (dma-buf)`, `not ready: <id> (<reason>)`, `unknown: ...`.
    for line in wrap(&v.text, width) {
        out.push_str(&line);
        out.push('\n');
    }
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
