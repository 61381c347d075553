// SPDX-License-Identifier: MIT OR Apache-2.0
//! The result of `--loopback-all`: per pair its registration path and one result per
//! direction (RDMA write, RDMA read), the known failure class a pair shows, the table, the JSON
//! and the failure lines.

use std::fmt::Write as _;

use serde::Serialize;

use super::{Pair, Pinning};
use crate::commands::bench::mem::MemKind;
use crate::commands::bench::registration::{Got, Registration};
use crate::commands::bench::{BenchReport, Op};

/// How a direction (or a pair: the worst of its directions) went.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PairStatus {
    Ok,
    /// Measured below `--min-gbps`.
    Below,
    /// Not measured: no NIC, not visible to CUDA, or the transfer failed.
    Error,
}

/// One direction of a pair: an operation's verification pass and measurement.
#[derive(Clone, Debug, Serialize)]
pub struct DirectionResult {
    pub op: Op,
    pub status: PairStatus,
    /// Average bandwidth of the largest message size, Gb/s.
    pub gbps: Option<f64>,
    /// Bytes compared with their pattern (the verification pass, or every message with
    /// `--validate`).
    pub verified_bytes: u64,
    pub error: Option<String>,
    /// The loopback bench's own report of this direction.
    pub bench: Option<BenchReport>,
}

/// A known failure class, named with its sources and what users do about it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct KnownIssue {
    pub id: &'static str,
    pub summary: String,
    pub references: &'static [&'static str],
    pub workaround: &'static str,
}

/// The NIC writes into the memory but its reads of it fail: NVIDIA/open-gpu-kernel-modules
/// #1253 (reads of GPU BAR1 fail on some chipsets, no AER logged, only a completion error) and
/// open-mpi/ompi#13183 (RDMA read "Remote Access Error" on DGX B200). NCCL reads GPU memory by
/// default; `NCCL_NET_GDR_READ=0` makes it use writes only.
pub fn reads_fail_writes_work(mem: MemKind) -> KnownIssue {
    let mut summary = "RDMA writes into this memory work and RDMA reads of it fail: the known \
                       \"writes work, reads fail\" class"
        .to_owned();
    if mem == MemKind::Host {
        summary.push_str(
            " (seen with GPU memory; with host memory, as here, the NIC, its driver or the \
             network refuses the reads)",
        );
    }
    KnownIssue {
        id: "reads_fail_writes_work",
        summary,
        references: &["NVIDIA/open-gpu-kernel-modules#1253", "open-mpi/ompi#13183"],
        workaround: "NCCL_NET_GDR_READ=0 (NCCL then has the NIC write into GPU memory only)",
    }
}

/// One pair.
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
    /// The path the pair's memory took to the NIC (as asked for when no run got that far).
    pub registration: Registration,
    /// The mode the pair got, in `check`'s words (`GDR, dma-buf`, `GDR, peer memory`, `staged`,
    /// `none`): compare with `check`'s NCCL line of the pair.
    pub got: Got,
    /// The worst of the directions (`error` for a pair that was not measured).
    pub status: PairStatus,
    /// Why the pair was not measured at all (no NIC, not visible to CUDA).
    pub error: Option<String>,
    /// One per operation, in the order run.
    pub directions: Vec<DirectionResult>,
    /// The known failure class the directions' outcomes match, if any.
    pub known_issue: Option<KnownIssue>,
}

impl PairResult {
    /// The class of a pair whose write direction worked and whose read direction failed.
    pub fn classify(directions: &[DirectionResult], mem: MemKind) -> Option<KnownIssue> {
        let status = |op| directions.iter().find(|d| d.op == op).map(|d| d.status);
        match (status(Op::Write), status(Op::Read)) {
            (Some(PairStatus::Ok | PairStatus::Below), Some(PairStatus::Error)) => {
                Some(reads_fail_writes_work(mem))
            }
            _ => None,
        }
    }
}

/// `nvpeer bench --loopback-all --json`.
#[derive(Clone, Debug, Serialize)]
pub struct LoopbackAllReport {
    pub schema: &'static str,
    /// The operations every pair ran, in order.
    pub ops: Vec<Op>,
    pub mem: MemKind,
    pub sizes: Vec<u64>,
    pub iterations: u64,
    /// Messages per size moved one at a time with every byte compared before measuring
    /// (0 with `--no-validate`).
    pub verified_messages: u64,
    /// Every measured message verified too (`--validate`: one in flight).
    pub validated: bool,
    pub min_gbps: Option<f64>,
    pub pairs: Vec<PairResult>,
    /// Pairs with a direction below --min-gbps or not measured.
    pub failed: usize,
    /// GPUs left out (hidden by CUDA_VISIBLE_DEVICES).
    pub notes: Vec<String>,
}

impl LoopbackAllReport {
    /// One line per failing direction (or pair not measured), for stderr and NHC's
    /// check_nvpeer_bw (which takes the first line with "below" or "fail"): `nvpeer bench:
    /// GPU 0 (0000:17:00.0) - mlx5_0: RDMA write 42.1 Gb/s below --min-gbps 150`; a read that
    /// failed where the write worked names the known class and its workaround.
    pub fn failure_lines(&self) -> Vec<String> {
        let mut lines = Vec::new();
        for p in &self.pairs {
            if p.directions.is_empty() && p.status != PairStatus::Ok {
                lines.push(format!(
                    "nvpeer bench: {}: failed: {}",
                    p.name,
                    p.error.as_deref().unwrap_or("not measured")
                ));
            }
            for d in &p.directions {
                match d.status {
                    PairStatus::Ok => {}
                    PairStatus::Below => lines.push(format!(
                        "nvpeer bench: {}: RDMA {} {:.1} Gb/s below --min-gbps {}",
                        p.name,
                        d.op.name(),
                        d.gbps.unwrap_or(0.0),
                        fmt_num(self.min_gbps.unwrap_or(0.0))
                    )),
                    PairStatus::Error => {
                        let mut line = format!(
                            "nvpeer bench: {}: RDMA {} failed: {}",
                            p.name,
                            d.op.name(),
                            d.error.as_deref().unwrap_or("not measured")
                        );
                        if let (Op::Read, Some(k)) = (d.op, &p.known_issue) {
                            let _ = write!(
                                line,
                                "; {} ({}); workaround: {}",
                                k.summary,
                                k.references.join(", "),
                                k.workaround
                            );
                        }
                        lines.push(line);
                    }
                }
            }
        }
        lines
    }

    /// The table: a row per pair and direction (no word "below" or "fail" in it: those are
    /// the failure lines').
    pub fn table(&self) -> String {
        let mut s = String::new();
        let size = self.sizes.last().copied().unwrap_or(0);
        let ops: Vec<&str> = self.ops.iter().map(|o| o.name()).collect();
        let checked = if self.validated {
            "every message verified".to_owned()
        } else if self.verified_messages > 0 {
            format!(
                "{} messages per size verified first",
                self.verified_messages
            )
        } else {
            "payload not verified".to_owned()
        };
        let _ = writeln!(
            s,
            "nvpeer bench --loopback-all: RDMA {} bandwidth, {} x {} per pair and direction, {} memory, {checked}",
            ops.join(" and "),
            crate::commands::bench::report::size_str(size),
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
        let rw = self
            .pairs
            .iter()
            .map(|p| p.registration.label().len())
            .max()
            .unwrap_or(12)
            .max(12);
        let _ = writeln!(
            s,
            "  {:<w$}  {:<4}  {:>4}  {:<14}  {:<rw$}  {:<9}  {:>9}  status",
            "pair", "path", "NUMA", "CPUs", "registration", "op", "Gb/s"
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
            let class = p.pair.class.map_or("-", |c| c.label());
            let reg = p.registration.label();
            let rows: Vec<(&str, Option<f64>, PairStatus)> = if p.directions.is_empty() {
                vec![("-", None, p.status)]
            } else {
                p.directions
                    .iter()
                    .map(|d| (d.op.name(), d.gbps, d.status))
                    .collect()
            };
            for (op, gbps, status) in rows {
                let gbps = gbps.map_or_else(|| "-".to_owned(), |g| format!("{g:.2}"));
                let status = match status {
                    PairStatus::Ok => "ok",
                    PairStatus::Below => "LOW",
                    PairStatus::Error => "ERROR",
                };
                let _ = writeln!(
                    s,
                    "  {:<w$}  {class:<4}  {numa:>4}  {cpus:<14}  {reg:<rw$}  {op:<9}  {gbps:>9}  {status}",
                    p.name
                );
            }
        }
        // The mode each pair got, in check's words (no "fail" here: see the failure lines).
        let _ = writeln!(s, "modes got (as check names them):");
        for p in &self.pairs {
            let shown = if p.got.mode == "none" {
                "not measured".to_owned()
            } else {
                p.got.shown_by.clone()
            };
            let _ = writeln!(s, "  {}: {} ({shown})", p.name, p.got.mode);
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
    use crate::commands::bench::loopback_all::SCHEMA;
    use crate::commands::bench::mem::RegPath;

    fn direction(op: Op, gbps: Option<f64>, status: PairStatus) -> DirectionResult {
        DirectionResult {
            op,
            status,
            gbps,
            verified_bytes: 0,
            error: (status == PairStatus::Error).then(|| "no port".to_owned()),
            bench: None,
        }
    }

    fn result(name: &str, directions: Vec<DirectionResult>) -> PairResult {
        let status = directions
            .iter()
            .map(|d| d.status)
            .max()
            .unwrap_or(PairStatus::Error);
        PairResult {
            name: name.to_owned(),
            pair: Pair {
                gpu: None,
                nic: Some("x".to_owned()),
                class: None,
            },
            cuda_ordinal: None,
            pinning: Pinning::default(),
            registration: Registration::of(RegPath::RegMr, MemKind::Cuda, None),
            got: super::super::runner::got(
                &directions,
                &Registration::of(RegPath::RegMr, MemKind::Cuda, None),
            ),
            status,
            error: directions
                .is_empty()
                .then(|| "no RDMA device with a PCI function".to_owned()),
            known_issue: PairResult::classify(&directions, MemKind::Cuda),
            directions,
        }
    }

    fn report(pairs: Vec<PairResult>) -> LoopbackAllReport {
        LoopbackAllReport {
            schema: SCHEMA,
            ops: vec![Op::Write, Op::Read],
            mem: MemKind::Cuda,
            sizes: vec![65536],
            iterations: 5000,
            verified_messages: 16,
            validated: false,
            min_gbps: Some(150.0),
            failed: pairs.iter().filter(|p| p.status != PairStatus::Ok).count(),
            pairs,
            notes: vec![],
        }
    }

    #[test]
    fn failure_lines_name_the_pair_and_direction_and_the_table_does_not_say_below() {
        use PairStatus::*;
        let r = report(vec![
            result(
                "GPU 0 (0000:17:00.0) - mlx5_0",
                vec![
                    direction(Op::Write, Some(42.13), Below),
                    direction(Op::Read, Some(180.0), Ok),
                ],
            ),
            result(
                "GPU 1 (0000:2a:00.0) - mlx5_1",
                vec![
                    direction(Op::Write, Some(180.0), Ok),
                    direction(Op::Read, Some(181.0), Ok),
                ],
            ),
            result("GPU 2 (0000:3d:00.0) - (no NIC)", vec![]),
        ]);
        assert_eq!(r.failed, 2);
        assert_eq!(
            r.failure_lines(),
            [
                "nvpeer bench: GPU 0 (0000:17:00.0) - mlx5_0: RDMA write 42.1 Gb/s below --min-gbps 150",
                "nvpeer bench: GPU 2 (0000:3d:00.0) - (no NIC): failed: no RDMA device with a PCI function"
            ]
        );
        let table = r.table();
        // Header, column names, two rows for each measured pair, one for the other; then the
        // modes got, one line per pair, in check's words.
        assert_eq!(table.lines().count(), 11, "{table}");
        assert!(
            table.contains("  GPU 1 (0000:2a:00.0) - mlx5_1: GDR, peer memory (RDMA write and read measured through peer memory (ibv_reg_mr))\n")
                && table.contains("  GPU 2 (0000:3d:00.0) - (no NIC): none (not measured)\n"),
            "{table}"
        );
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["pairs"][1]["got"]["mode"], "GDR, peer memory");
        assert_eq!(json["pairs"][1]["got"]["path"], "peer_memory");
        assert_eq!(json["pairs"][2]["got"]["mode"], "none");
        assert!(json["pairs"][2]["got"]["path"].is_null());
        assert!(!table.contains("below") && !table.to_lowercase().contains("fail"));
        assert!(table.contains("42.13") && table.contains("LOW") && table.contains("ERROR"));
        assert!(table.contains("peer memory (ibv_reg_mr)"), "{table}");
        assert!(
            table.contains("write and read bandwidth")
                && table.contains("16 messages per size verified first"),
            "{table}"
        );
        assert!(r.pairs.iter().all(|p| p.known_issue.is_none()));
    }

    #[test]
    fn a_read_failing_where_the_write_works_is_the_known_class() {
        use PairStatus::*;
        let r = report(vec![result(
            "GPU 0 (0000:17:00.0) - mlx5_0",
            vec![
                direction(Op::Write, Some(180.0), Ok),
                direction(Op::Read, None, Error),
            ],
        )]);
        let k = r.pairs[0].known_issue.as_ref().expect("classified");
        assert_eq!(k.id, "reads_fail_writes_work");
        let lines = r.failure_lines();
        assert_eq!(lines.len(), 1, "{lines:?}");
        let l = &lines[0];
        assert!(
            l.starts_with(
                "nvpeer bench: GPU 0 (0000:17:00.0) - mlx5_0: RDMA read failed: no port; "
            ),
            "{l}"
        );
        assert!(
            l.contains("\"writes work, reads fail\"")
                && l.contains("NVIDIA/open-gpu-kernel-modules#1253")
                && l.contains("open-mpi/ompi#13183")
                && l.contains("workaround: NCCL_NET_GDR_READ=0"),
            "{l}"
        );
        // Both failing, or only the write: not that class.
        let both = [
            direction(Op::Write, None, Error),
            direction(Op::Read, None, Error),
        ];
        assert!(PairResult::classify(&both, MemKind::Cuda).is_none());
        let write_only = [
            direction(Op::Write, None, Error),
            direction(Op::Read, Some(1.0), Ok),
        ];
        assert!(PairResult::classify(&write_only, MemKind::Cuda).is_none());
        // A read below --min-gbps is slow, not failing.
        let slow = [
            direction(Op::Write, Some(9.0), Ok),
            direction(Op::Read, Some(1.0), Below),
        ];
        assert!(PairResult::classify(&slow, MemKind::Cuda).is_none());
        // Host memory: the same class, said to be seen with GPU memory.
        let host = PairResult::classify(
            &[
                direction(Op::Write, Some(1.0), Ok),
                direction(Op::Read, None, Error),
            ],
            MemKind::Host,
        )
        .unwrap();
        assert!(
            host.summary.contains("with host memory, as here"),
            "{}",
            host.summary
        );
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["pairs"][0]["known_issue"]["workaround"], k.workaround);
        assert_eq!(json["pairs"][0]["directions"][1]["op"], "read");
        assert_eq!(json["pairs"][0]["directions"][1]["status"], "error");
        assert_eq!(json["pairs"][0]["registration"]["path"], "peer_memory");
    }
}
