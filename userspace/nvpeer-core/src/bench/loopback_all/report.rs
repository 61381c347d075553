// SPDX-License-Identifier: MIT OR Apache-2.0
//! The result of `--loopback-all`: one row per pair, the table, the JSON and the failure
//! lines.

use std::fmt::Write as _;

use serde::Serialize;

use super::{Pair, Pinning};
use crate::bench::mem::MemKind;
use crate::bench::BenchReport;

/// What pair a result is and how it went.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PairStatus {
    Ok,
    /// Measured below `--min-gbps`.
    Below,
    /// Not measured: no NIC, not visible to CUDA, or the transfer failed.
    Error,
}

/// One row.
#[derive(Clone, Debug, Serialize)]
pub struct PairResult {
    /// `GPU 0 (0000:17:00.0) - mlx5_0`.
    pub name: String,
    #[serde(flatten)]
    pub pair: Pair,
    pub cuda_ordinal: Option<i32>,
    /// All `None` for a pair that was not measured.
    #[serde(flatten)]
    pub pinning: Pinning,
    /// Average bandwidth of the largest message size, Gb/s.
    pub gbps: Option<f64>,
    pub status: PairStatus,
    pub error: Option<String>,
    /// The loopback bench's own report of the pair.
    pub bench: Option<BenchReport>,
}

/// `nvpeer bench --loopback-all --json`.
#[derive(Clone, Debug, Serialize)]
pub struct LoopbackAllReport {
    pub schema: &'static str,
    pub op: crate::bench::Op,
    pub mem: MemKind,
    pub sizes: Vec<u64>,
    pub iterations: u64,
    pub min_gbps: Option<f64>,
    pub pairs: Vec<PairResult>,
    /// Pairs below --min-gbps or not measured.
    pub failed: usize,
    /// GPUs left out (hidden by CUDA_VISIBLE_DEVICES).
    pub notes: Vec<String>,
}

impl LoopbackAllReport {
    /// One line per failing pair, for stderr and NHC's check_nvpeer_bw (which takes the first
    /// line with "below" or "fail"): `nvpeer bench: GPU 0 (0000:17:00.0) - mlx5_0: 42.1 Gb/s
    /// below --min-gbps 150`.
    pub fn failure_lines(&self) -> Vec<String> {
        self.pairs
            .iter()
            .filter_map(|p| match p.status {
                PairStatus::Ok => None,
                PairStatus::Below => Some(format!(
                    "nvpeer bench: {}: {:.1} Gb/s below --min-gbps {}",
                    p.name,
                    p.gbps.unwrap_or(0.0),
                    fmt_num(self.min_gbps.unwrap_or(0.0))
                )),
                PairStatus::Error => Some(format!(
                    "nvpeer bench: {}: failed: {}",
                    p.name,
                    p.error.as_deref().unwrap_or("not measured")
                )),
            })
            .collect()
    }

    /// The table (no word "below" or "fail" in it: those are the failure lines').
    pub fn table(&self) -> String {
        let mut s = String::new();
        let size = self.sizes.last().copied().unwrap_or(0);
        let _ = writeln!(
            s,
            "nvpeer bench --loopback-all: RDMA {} bandwidth, {} x {} per pair, {} memory",
            self.op.name(),
            crate::bench::report::size_str(size),
            self.iterations,
            self.mem.label()
        );
        let w = self
            .pairs
            .iter()
            .map(|p| p.name.len())
            .max()
            .unwrap_or(4)
            .max(4);
        let _ = writeln!(
            s,
            "  {:<w$}  {:<4}  {:>4}  {:<14}  {:>9}  status",
            "pair", "path", "NUMA", "CPUs", "Gb/s"
        );
        for p in &self.pairs {
            let pin = &p.pinning;
            let numa = pin
                .numa_node
                .map_or_else(|| "-".to_owned(), |n| n.to_string());
            let cpus = pin
                .cpulist
                .clone()
                .unwrap_or_else(|| "(not pinned)".to_owned());
            let gbps = p.gbps.map_or_else(|| "-".to_owned(), |g| format!("{g:.2}"));
            let status = match p.status {
                PairStatus::Ok => "ok",
                PairStatus::Below => "LOW",
                PairStatus::Error => "ERROR",
            };
            let _ = writeln!(
                s,
                "  {:<w$}  {:<4}  {:>4}  {:<14}  {:>9}  {status}",
                p.name,
                p.pair.class.map_or("-", |c| c.label()),
                numa,
                cpus,
                gbps
            );
        }
        let notes: Vec<&String> = self
            .notes
            .iter()
            .chain(self.pairs.iter().filter_map(|p| p.pinning.note.as_ref()))
            .collect();
        if !notes.is_empty() {
            let _ = writeln!(s, "notes:");
            for n in notes {
                let _ = writeln!(s, "  {n}");
            }
        }
        s
    }
}

/// 150 -> "150", 42.5 -> "42.5".
fn fmt_num(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.0}")
    } else {
        format!("{v}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::loopback_all::SCHEMA;

    fn result(name: &str, gbps: Option<f64>, status: PairStatus) -> PairResult {
        PairResult {
            name: name.to_owned(),
            pair: Pair {
                gpu: None,
                nic: Some("x".to_owned()),
                class: None,
            },
            cuda_ordinal: None,
            pinning: Pinning::default(),
            gbps,
            status,
            error: (status == PairStatus::Error).then(|| "no port".to_owned()),
            bench: None,
        }
    }

    #[test]
    fn failure_lines_name_the_pair_and_the_table_does_not_say_below() {
        let r = LoopbackAllReport {
            schema: SCHEMA,
            op: crate::bench::Op::Write,
            mem: MemKind::Cuda,
            sizes: vec![65536],
            iterations: 5000,
            min_gbps: Some(150.0),
            pairs: vec![
                result(
                    "GPU 0 (0000:17:00.0) - mlx5_0",
                    Some(42.13),
                    PairStatus::Below,
                ),
                result("GPU 1 (0000:2a:00.0) - mlx5_1", Some(180.0), PairStatus::Ok),
                result("GPU 2 (0000:3d:00.0) - mlx5_2", None, PairStatus::Error),
            ],
            failed: 2,
            notes: vec![],
        };
        assert_eq!(
            r.failure_lines(),
            [
                "nvpeer bench: GPU 0 (0000:17:00.0) - mlx5_0: 42.1 Gb/s below --min-gbps 150",
                "nvpeer bench: GPU 2 (0000:3d:00.0) - mlx5_2: failed: no port"
            ]
        );
        let table = r.table();
        assert_eq!(table.lines().count(), 5, "{table}");
        assert!(!table.contains("below") && !table.to_lowercase().contains("fail"));
        assert!(table.contains("42.13") && table.contains("LOW") && table.contains("ERROR"));
    }
}
