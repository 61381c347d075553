// SPDX-License-Identifier: MIT OR Apache-2.0
//! What a bench run measured: one row per size, the staged comparison, the report
//! (`report.rs` prints it as text).

use serde::Serialize;

use super::options::Op;
use super::registration::Registration;
use super::{cuda, stats};

/// One measured size.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub size: u64,
    pub iterations: u64,
    pub bandwidth: Option<stats::Bandwidth>,
    pub latency: Option<stats::Latency>,
    /// Bytes compared with the expected pattern (0 without --validate); both directions'
    /// sum in bidirectional runs.
    pub verified_bytes: u64,
    /// Bidirectional runs: each direction (`bandwidth` is then their sum, as perftest -b).
    pub directions: Option<Vec<DirectionRow>>,
}

/// One direction of a bidirectional run, named by the side that posted the requests.
#[derive(Clone, Debug, Serialize)]
pub struct DirectionRow {
    /// "client" or "server".
    pub requester: &'static str,
    pub iterations: u64,
    pub bandwidth: stats::Bandwidth,
    pub verified_bytes: u64,
}

/// The same transfer staged through host memory.
#[derive(Clone, Debug, Serialize)]
pub struct StagedRow {
    pub size: u64,
    /// Per message, direct path.
    pub direct_us: f64,
    /// Per message: the copy into the bounce buffer.
    pub copy_us: f64,
    /// Per message: the transfer from the bounce buffer plus the copy.
    pub staged_us: f64,
    pub direct_gbps: f64,
    pub staged_gbps: f64,
    pub winner: &'static str,
}

pub const SCHEMA: &str = "nvpeer.bench/1";

#[derive(Clone, Debug, Serialize)]
pub struct BenchReport {
    pub schema: &'static str,
    pub op: Op,
    pub test: &'static str,
    pub device: String,
    pub peer_device: String,
    pub mem: String,
    pub reg: String,
    pub peer_mem: String,
    pub peer_reg: String,
    /// The local buffer's registration path.
    pub registration: Registration,
    /// Queue pairs the messages were spread over.
    pub qps: usize,
    pub gpu: Option<cuda::GpuInfo>,
    pub validated: bool,
    /// Both sides posted at once (-b); rows carry `directions`.
    pub bidirectional: bool,
    /// How latency is taken for this operation.
    pub latency_method: Option<&'static str>,
    pub rows: Vec<Row>,
    pub staged: Option<Vec<StagedRow>>,
    pub recommendation: Option<String>,
}
