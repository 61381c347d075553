// SPDX-License-Identifier: MIT OR Apache-2.0
//! `nvpeer check --brief` and the exit codes of `check`, for fleets: one line per host that is
//! byte-identical on every healthy host (no times, counters, PIDs or addresses), so that
//! `clush -b` / `dshbak -c` fold the healthy hosts into one group and list the others by cause.

use crate::host::kernel::IommuMode;
use crate::host::limits::human_bytes;

use super::rules::{carried, uncarried, PairVerdict};
use super::{Check, Facts, Report, Require, Status};

/// How `check` maps its outcome to an exit code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitCodes {
    /// 0 ready, 1 not ready (2, usage and I/O errors, is the binary's).
    Default,
    /// Nagios plugin codes: 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN.
    Nagios,
}

/// Nagios' UNKNOWN: the host could not be read at all (e.g. a missing `--sysfs-root`).
pub const NAGIOS_UNKNOWN: u8 = 3;

/// The checks that make the host not ready: the failed ones, and with `strict` the warnings
/// too, in report order.
pub fn blocking(report: &Report, strict: bool) -> impl Iterator<Item = &Check> {
    report.checks.iter().filter(move |c| {
        c.status == Status::Fail || (strict && matches!(c.status, Status::Warn | Status::Unknown))
    })
}

/// [`blocking`] without the rows that follow from another's cause (one cause, one name).
fn blocking_causes(report: &Report, strict: bool) -> impl Iterator<Item = &Check> {
    blocking(report, strict).filter(|c| c.cause.is_none())
}

/// Ready as `check` reports it: the verdict is ready, and with `strict` no check warned either.
pub fn ready(report: &Report, strict: bool) -> bool {
    report.ready && blocking(report, strict).next().is_none()
}

/// A row as the brief lines name it: `<id> (<reason>)`.
fn named(check: &Check, report: &Report) -> String {
    format!(
        "{} ({})",
        check.id,
        reason(check, &report.facts, &report.pairs, report.require)
    )
}

/// The one line of `--brief`: `nvpeer: ready (dma-buf)` (the verdict), or
/// `nvpeer: not ready: <id> (<reason>), ...` naming every blocking check, the verdict's first.
/// Warnings are not named in the ready line: they would split the healthy hosts into groups
/// by harmless differences; `--strict` turns them into reasons not to be ready instead.
pub fn line(report: &Report, strict: bool) -> String {
    let mut causes: Vec<String> = blocking_causes(report, strict)
        .map(|c| named(c, report))
        .collect();
    if report.verdict.unknown || (report.verdict.degraded && causes.is_empty()) {
        return format!("nvpeer: {}\n", report.verdict.text);
    }
    if causes.is_empty() {
        match &report.verdict.blocking {
            Some(b) if !report.ready => causes.push(format!("{} ({})", b.check, b.reason)),
            _ => return format!("nvpeer: {}\n", report.verdict.text),
        }
    }
    format!("nvpeer: not ready: {}\n", causes.join(", "))
}

/// The exit code of `check` (not the usage and I/O errors, which the binary maps itself).
pub fn exit_code(report: &Report, strict: bool, codes: ExitCodes) -> u8 {
    let warned = report
        .checks
        .iter()
        .any(|c| matches!(c.status, Status::Warn | Status::Unknown));
    match codes {
        ExitCodes::Default => u8::from(!ready(report, strict)),
        ExitCodes::Nagios => match (report.ready, warned) {
            (false, _) if report.verdict.unknown => NAGIOS_UNKNOWN,
            // Used, at a fraction of its bandwidth: act (WARNING), unless warnings count.
            (false, _) if report.verdict.degraded && !strict => 1,
            (false, _) => 2,
            (true, true) if strict => 2,
            (true, true) => 1,
            (true, false) => 0,
        },
    }
}

/// `--brief --exit-codes nagios`: the Nagios plugin format, `NVPEER <STATE> - <verdict>[; warn:
/// <id> (<reason>), ...][; unknown: <id> (<reason>), ...] | ok=N info=N warn=N unknown=N fail=N`
/// (the rows that apply), with the state of [`exit_code`].
pub fn nagios_line(report: &Report, strict: bool) -> String {
    let state = match exit_code(report, strict, ExitCodes::Nagios) {
        0 => "OK",
        1 => "WARNING",
        2 => "CRITICAL",
        _ => "UNKNOWN",
    };
    let mut text = report.verdict.text.clone();
    if report.ready {
        // Each row under its own status: an unknown row is not a warning.
        for status in [Status::Warn, Status::Unknown] {
            let said: Vec<String> = report
                .checks
                .iter()
                .filter(|c| c.applies && c.cause.is_none() && c.status == status)
                .map(|c| named(c, report))
                .collect();
            if !said.is_empty() {
                text.push_str(&format!("; {}: {}", status.label(), said.join(", ")));
            }
        }
    }
    let count = |s: Status| {
        report
            .checks
            .iter()
            .filter(|c| c.applies && c.status == s)
            .count()
    };
    let perf: Vec<String> = Status::ALL
        .iter()
        .map(|s| format!("{}={}", s.label(), count(*s)))
        .collect();
    // `|` separates the performance data: none may appear in the text.
    format!(
        "NVPEER {state} - {} | {}\n",
        text.replace('|', "/"),
        perf.join(" ")
    )
}

/// At most this many characters of a reason taken from a check's detail.
const REASON_MAX: usize = 40;

/// A short reason that is the same on every host with the same problem: from the facts where
/// the detail would carry host-specific values, else the first clause of the detail.
pub fn reason(check: &Check, facts: &Facts, pairs: &[PairVerdict], require: Require) -> String {
    let known = match check.id {
        "paths" => Some(match pairs.iter().find(|p| !carried(&p.paths, require)) {
            None if pairs.is_empty() => "no GPU-NIC pair".to_owned(),
            None => "pairs carried".to_owned(),
            Some(p) => uncarried(p, require),
        }),
        "dmabuf" => pairs
            .iter()
            .find(|p| !p.paths.contains(&super::GdrPath::Dmabuf))
            .map(|p| format!("no dma-buf for {}", p.name()))
            .or_else(|| Some("no dma-buf".to_owned())),
        "efa" => Some("no EFA path".to_owned()),
        "grace"
            if check
                .detail
                .contains("IOMMU group: the dma-buf PCIe mapping") =>
        {
            Some("IOMMU groups differ".to_owned())
        }
        "cdmm" if check.detail.contains("nvidia_uvm is not loaded") => {
            Some("nvidia_uvm not loaded".to_owned())
        }
        "cdmm" if check.detail.contains("has it unset") => Some("no CONFIG_ZONE_DEVICE".to_owned()),
        "cdmm" if check.detail.contains("needs a kernel >= 6.0") => Some("kernel < 6.0".to_owned()),
        "cdmm" => Some("CDMM with invalidating pins".to_owned()),
        "module" => match facts.modules.as_slice() {
            [] => Some("none loaded".to_owned()),
            [m] => Some(m.implementation.describe().to_owned()),
            many => Some(format!("{} loaded", many.len())),
        },
        "memlock" => facts
            .memlock
            .and_then(|m| m.soft)
            .map(human_bytes)
            .or_else(|| Some("not unlimited".to_owned())),
        "nvidia_driver" if facts.nvidia.is_none() => Some("not loaded".to_owned()),
        "nvidia_driver" => Some("no nvidia_p2p_get_pages".to_owned()),
        "ib_core" => facts.ib_core.as_ref().map(|c| {
            match (&c.peer_core, c.kallsyms_readable, c.ib_core_loaded) {
                (None, true, _) => "no peer-memory core",
                (None, false, false) => "not loaded",
                (None, false, true) => "kallsyms not readable",
                (Some(_), _, _) => "core mismatch",
            }
            .to_owned()
        }),
        "peer_clients" => Some(
            match &facts.memory_peers {
                None if facts.modules.is_empty() => "no peer-memory client",
                None => "memory_peers absent",
                Some(c) if c.is_empty() => "no client registered",
                Some(_) => "client missing",
            }
            .to_owned(),
        ),
        // The release is what the hosts with this problem have in common.
        "core_bugs" => facts
            .ib_core
            .as_ref()
            .and_then(|c| c.ib_core_version.as_ref())
            .map(|v| format!("MOFED {v}")),
        "driver_reload" => Some("module holds ib_uverbs".to_owned()),
        "rdma_devices" if facts.rdma_devices.is_empty() => Some("none".to_owned()),
        "rdma_devices" => Some("no port active".to_owned()),
        "gpus" if facts.gpus.is_empty() => Some("none".to_owned()),
        "topology" => Some("nearest NIC beyond PXB".to_owned()),
        "iommu" => facts.iommu.as_ref().map(|i| {
            match i.mode {
                IommuMode::Translated => "translated",
                _ => "domain type unknown",
            }
            .to_owned()
        }),
        "acs" if facts.grace.is_some() && check.detail.starts_with("ACS differs") => {
            Some("not as rdma_topo requires".to_owned())
        }
        "acs" if facts.acs.iter().any(|f| !f.redirecting.is_empty()) => {
            Some("P2P redirected".to_owned())
        }
        "acs" => Some("config space not readable".to_owned()),
        "nccl_gdr" => Some("beyond NCCL_NET_GDR_LEVEL".to_owned()),
        "gdr_used" => pairs
            .iter()
            .find_map(|p| {
                let why = p.not_used.as_deref()?;
                let short = if why.starts_with("NCCL's distance rule") {
                    "beyond NCCL_NET_GDR_LEVEL"
                } else {
                    "no ACTIVE port"
                };
                Some(format!("{} not used: {short}", p.name()))
            })
            .or_else(|| {
                pairs
                    .iter()
                    .find(|p| !p.degraded.is_empty())
                    .map(|p| format!("{} degraded link", p.name()))
            }),
        "nccl" => Some("no peer memory".to_owned()),
        id if facts
            .nccl
            .iter()
            .chain(std::iter::once(&facts.ucx))
            .any(|v| v.consumer == id && !v.peer_memory) =>
        {
            Some("no peer memory".to_owned())
        }
        _ => None,
    };
    // A file that could not be read names the file after the first colon: keep only the kind.
    if check.detail.starts_with("could not check:") {
        return "unreadable".to_owned();
    }
    if check.detail.starts_with("not examined:") {
        return "not examined".to_owned();
    }
    known
        .or_else(|| Some(first_clause(&check.detail)).filter(|r| !r.is_empty()))
        .unwrap_or_else(|| check.status.label().to_owned())
}

/// The detail up to its first `:`, `;`, `,` or ` (`, cut to [`REASON_MAX`] characters at a
/// word boundary, with `…` where words were left out: never inside a word (a GPU model `NVIDIA
/// H200` cut to `NVIDIA H20` names another GPU). A first word longer than that is kept whole.
fn first_clause(detail: &str) -> String {
    let end = [": ", "; ", ", ", " ("]
        .iter()
        .filter_map(|sep| detail.find(sep))
        .min()
        .unwrap_or(detail.len());
    let clause = detail[..end].trim();
    let mut out = String::new();
    for word in clause.split_whitespace() {
        let more = usize::from(!out.is_empty()) + word.chars().count();
        if !out.is_empty() && out.chars().count() + more > REASON_MAX {
            out.push('…');
            break;
        }
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
    }
    // Parentheses would make the `id (reason)` list ambiguous.
    out.replace(['(', ')'], "")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::{run, Inputs, Options};
    use crate::host::limits::Memlock;
    use crate::host::Host;

    fn with_statuses(statuses: &[(&'static str, Status, &str)]) -> Report {
        let sys = tempfile::tempdir().unwrap();
        let mut report = run(
            &Host::new(sys.path(), std::path::Path::new("/nonexistent")),
            &Inputs::fixture(),
            &Options::default(),
        );
        report.checks = statuses
            .iter()
            .map(|&(id, status, detail)| Check {
                id,
                status,
                detail: detail.to_owned(),
                fix: None,
                applies: true,
                cause: None,
            })
            .collect();
        report.status = report
            .checks
            .iter()
            .map(|c| c.status)
            .max()
            .unwrap_or(Status::Ok);
        report.ready = report.status != Status::Fail;
        report.verdict.ready = report.ready;
        report.verdict.text = "ready (dma-buf)".to_owned();
        report
    }

    #[test]
    fn one_line_for_ready_warning_and_failing_hosts() {
        let ok = with_statuses(&[("gpus", Status::Ok, "GPU0 0000:03:00.0")]);
        assert_eq!(line(&ok, false), "nvpeer: ready (dma-buf)\n");
        assert_eq!(line(&ok, true), "nvpeer: ready (dma-buf)\n");

        let warn = with_statuses(&[
            ("gpus", Status::Ok, "GPU0"),
            (
                "parameters",
                Status::Warn,
                "peerdirect_support=1 on a 5x core; ...",
            ),
        ]);
        assert_eq!(line(&warn, false), "nvpeer: ready (dma-buf)\n");
        assert_eq!(
            line(&warn, true),
            "nvpeer: not ready: parameters (peerdirect_support=1 on a 5x core)\n"
        );

        let mut fail = with_statuses(&[
            (
                "module",
                Status::Fail,
                "no peer-memory module loaded (neither ...)",
            ),
            (
                "parameters",
                Status::Warn,
                "peerdirect_support=1 on a 5x core; ...",
            ),
            (
                "memlock",
                Status::Warn,
                "RLIMIT_MEMLOCK is 8 MiB (hard 8 MiB): ...",
            ),
            (
                "bar1",
                Status::Fail,
                "could not check: cannot read /sys/x: EACCES",
            ),
        ]);
        fail.facts.memlock = Some(Memlock {
            soft: Some(8 << 20),
            hard: Some(8 << 20),
        });
        assert_eq!(
            line(&fail, false),
            "nvpeer: not ready: module (none loaded), bar1 (unreadable)\n"
        );
        assert_eq!(
            line(&fail, true),
            "nvpeer: not ready: module (none loaded), parameters (peerdirect_support=1 on a 5x core), memlock (8 MiB), bar1 (unreadable)\n"
        );
        for r in [&ok, &warn, &fail] {
            for strict in [false, true] {
                assert_eq!(line(r, strict).lines().count(), 1);
            }
        }
    }

    #[test]
    fn exit_code_mapping() {
        let ok = with_statuses(&[("gpus", Status::Ok, "")]);
        let warn = with_statuses(&[("gpus", Status::Ok, ""), ("acs", Status::Warn, "")]);
        let fail = with_statuses(&[("acs", Status::Warn, ""), ("gpus", Status::Fail, "")]);
        let table = [
            // report, strict, default, nagios
            (&ok, false, 0, 0),
            (&ok, true, 0, 0),
            (&warn, false, 0, 1),
            (&warn, true, 1, 2),
            (&fail, false, 1, 2),
            (&fail, true, 1, 2),
        ];
        for (r, strict, default, nagios) in table {
            assert_eq!(exit_code(r, strict, ExitCodes::Default), default);
            assert_eq!(exit_code(r, strict, ExitCodes::Nagios), nagios);
        }
    }

    #[test]
    fn reasons_from_the_detail_are_short_and_unambiguous() {
        assert_eq!(first_clause("no port is ACTIVE"), "no port is ACTIVE");
        assert_eq!(first_clause("a: b"), "a");
        assert_eq!(first_clause("x (y)"), "x");
        // A single word is never cut.
        let long = "w".repeat(100);
        assert_eq!(first_clause(&long), long);
        // Cut at a word boundary, with the ellipsis, never inside a GPU's or NIC's model.
        let gpu =
            "GPU0 0000:03:00.0 [10de:2bb5] NVIDIA RTX PRO 6000 Blackwell Server Edition NUMA 0";
        assert_eq!(
            first_clause(gpu),
            "GPU0 0000:03:00.0 [10de:2bb5] NVIDIA RTX…"
        );
        let h200 = "GPU0 0000:03:00.0 [10de:2335] NVIDIA H200 NUMA 0; could not read: x";
        assert_eq!(first_clause(h200), "GPU0 0000:03:00.0 [10de:2335] NVIDIA…");
        let nic = "mlx5_0 MT2910 Family ConnectX-7 VPI adapter card 400Gb/s OSFP single-port";
        assert_eq!(first_clause(nic), "mlx5_0 MT2910 Family ConnectX-7 VPI…");
        for d in [gpu, h200, nic] {
            let r = first_clause(d);
            assert!(r.chars().count() <= REASON_MAX + 1, "{r}");
            let kept = r.trim_end_matches('…');
            assert!(d.starts_with(kept), "{r}");
            // The last word kept is whole: the detail goes on with a space.
            assert_eq!(d[kept.len()..].chars().next(), Some(' '), "{r}");
        }
        assert_eq!(first_clause("  a   b  "), "a b");
        assert!(!first_clause("odd(name) here").contains(['(', ')']));
        assert_eq!(first_clause(""), "");
    }
}
