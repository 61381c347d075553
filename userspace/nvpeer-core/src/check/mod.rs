// SPDX-License-Identifier: MIT OR Apache-2.0
//! `nvpeer check`: is this host ready for GPUDirect RDMA, through which path, for every GPU-NIC
//! pair: dma-buf, peer memory (a MOFED peer-memory client such as this project's module) or
//! EFA; through which mapping (PCIe BAR1 or C2C); and if not, why not. One row per check with
//! ok / warn / fail, and for every warn or fail the cause and the fix.
//!
//! Three steps, each in its own place:
//!
//! 1. **Facts** ([`gather`], one file per source: loaded modules, PCI devices and the
//!    Grace-Blackwell shapes, the rest in `gather/mod.rs`): every fact read once into [`Facts`]
//!    (sysfs, procfs, the environment, the libibverbs probe). Nothing is judged there; `facts`
//!    in the JSON is exactly this, so a saved `check --json` is judged again by [`read_facts`]
//!    and [`report`] (`nvpeer check --facts FILE`).
//! 2. **Rules** ([`rules`], one file per concern: the host stack, peer memory, dma-buf, EFA,
//!    the PCIe platform, Grace, the consumers NCCL and UCX): from the facts alone, every row
//!    ([`Check`]) and, per pair, whether each path works ([`PairVerdict`]).
//! 3. **The verdict** ([`verdict::verdict`]): one small pure function over the rules' results,
//!    `ready (dma-buf)` ... or `not ready: <the first blocking reason>`.
//!
//! A new concern is a new rule file and, where it needs them, new facts (GPU-initiated
//! networking, GDRCopy, memlock where jobs start and the platforms that cannot came so): neither
//! the steps nor the verdict change.

use std::io::Read;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub mod brief;
mod facts;
mod gather;
pub mod nccl;
pub mod provenance;
mod rules;
pub mod verdict;

#[cfg(test)]
mod cdmm_rule_tests;
#[cfg(test)]
mod fix_tests;
#[cfg(test)]
mod gdrcopy_mode_rule_tests;
#[cfg(test)]
mod job_rule_tests;
#[cfg(test)]
mod lib_modes_rule_tests;
#[cfg(test)]
mod modes_rule_tests;
#[cfg(test)]
mod nccl_conf_rule_tests;
#[cfg(test)]
mod path_rule_tests;
#[cfg(test)]
mod platform_rule_tests;
#[cfg(test)]
mod rule_tests;
#[cfg(test)]
mod silent_rule_tests;
#[cfg(test)]
mod tests;

pub use facts::{
    AcsFinding, AcsPort, AcsRole, CapabilityFacts, CdmmFacts, DeviceNode, DmaDirectComplex,
    DmabufFacts, Facts, GdrapiLibrary, GdrcopyFacts, GdrdrvFile, GpuFacts, GraceFacts, Inputs,
    InstalledLibrary, JobStarter, JobStarters, LibraryFacts, LibrarySetting, PairFacts, PairSource,
    PathLink, PeerClientInfo, ProcessFacts, VeraFacts, VeraFunction, GIN_ENV, JOB_MARKER_ENV,
    LIBRARY_ENV, MODULE_COUNTERS,
};
pub use gather::gather;
pub use rules::modes::gdr_words;
pub use rules::{GdrPath, Mapping, PairVerdict, WhyNot};
pub use verdict::Verdict;

/// The schema of `nvpeer check --json`: 2 since issue 46 (statuses `info` and `unknown`,
/// `applies`, `host`, `nvpeer_version`, `time`, PCI ids as hexadecimal strings, pairs with the
/// GPU's bus id and UUID).
pub const SCHEMA: &str = "nvpeer.check/2";

/// The schemas whose facts `--facts` judges: this one and `nvpeer.check/1`, whose facts are
/// the same but for PCI ids written as numbers.
pub const SCHEMAS_READ: [&str; 2] = [SCHEMA, "nvpeer.check/1"];

/// Every row id `check` can print, in report order (the man page and the docs' table list
/// them; `tests/fixture_verdicts.rs` holds every fixture's rows to this list).
pub const CHECK_IDS: [&str; 41] = [
    "gpus",
    "gpu_gdr",
    "inventory",
    "nvidia_driver",
    "rdma_devices",
    "verbs",
    "gdr_used",
    "sysfs",
    "paths",
    "dmabuf",
    "efa",
    "module",
    "parameters",
    "peer_clients",
    "ib_core",
    "modprobe",
    "provenance",
    "driver_reload",
    "core_bugs",
    "bar1",
    "topology",
    "iommu",
    "acs",
    "grace",
    "cdmm",
    "vera",
    "nccl_env",
    "nccl",
    "nccl_gdr",
    "ucx",
    "memlock",
    "job_memlock",
    "gdrcopy",
    "gdrcopy_device",
    "gdrcopy_lib",
    "gdrcopy_mode",
    "gin_driver",
    "gin_umem",
    "gin_gdrcopy",
    "modes",
    "silent_failures",
];

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// As it should be.
    Ok,
    /// True and worth knowing; nothing to do.
    Info,
    /// Act, or GPUDirect RDMA is degraded.
    Warn,
    /// Could not tell, and it matters: a fact was unreadable or malformed.
    Unknown,
    /// GPUDirect RDMA will not work on a path asked for.
    Fail,
}

impl Status {
    pub const ALL: [Self; 5] = [Self::Ok, Self::Info, Self::Warn, Self::Unknown, Self::Fail];

    pub fn label(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Info => "info",
            Self::Warn => "warn",
            Self::Unknown => "unknown",
            Self::Fail => "fail",
        }
    }

    /// The Prometheus value: 0 ok or info, 1 warn, 2 fail, 3 unknown (Nagios' order).
    pub fn gauge(self) -> u64 {
        match self {
            Self::Ok | Self::Info => 0,
            Self::Warn => 1,
            Self::Fail => 2,
            Self::Unknown => 3,
        }
    }
}

fn is_true(b: &bool) -> bool {
    *b
}

/// The outcome of one check (one row of the table).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Check {
    /// Stable identifier, e.g. `module`.
    pub id: &'static str,
    pub status: Status,
    /// What was found (for warn and fail: the cause).
    pub detail: String,
    /// For warn and fail: what to do about it; for info: advice for later (`note:`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
    /// False: the row does not apply to this host or run (a path no pair needs, a workload not
    /// asked for, something not installed); the table hides it unless `--all`.
    #[serde(skip_serializing_if = "is_true")]
    pub applies: bool,
    /// The row whose cause this one follows from (`nvidia_driver` for `paths` without
    /// nvidia.ko): the table lists it on that row, `--brief` does not name it; its fix is that
    /// row's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cause: Option<&'static str>,
}

impl Check {
    pub(crate) fn new(
        id: &'static str,
        status: Status,
        detail: String,
        fix: Option<String>,
    ) -> Self {
        Self {
            id,
            status,
            detail,
            fix,
            applies: true,
            cause: None,
        }
    }
    fn ok(id: &'static str, detail: impl Into<String>) -> Self {
        Self::new(id, Status::Ok, detail.into(), None)
    }
    /// True and worth knowing, nothing to do now; `note`: advice for when it matters.
    fn info(id: &'static str, detail: impl Into<String>, note: impl Into<String>) -> Self {
        Self::new(id, Status::Info, detail.into(), Some(note.into()))
    }
    fn warn(id: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Self {
        Self::new(id, Status::Warn, detail.into(), Some(fix.into()))
    }
    fn fail(id: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Self {
        Self::new(id, Status::Fail, detail.into(), Some(fix.into()))
    }
    /// A row that does not apply to this host or run (hidden unless `--all`).
    fn not_applicable(id: &'static str, detail: impl Into<String>) -> Self {
        Self::ok(id, detail).hidden()
    }
    /// This row, marked as not applying (status `ok`, no fix).
    fn hidden(mut self) -> Self {
        self.status = Status::Ok;
        self.fix = None;
        self.applies = false;
        self
    }
    /// A check that depends on facts another check could not read.
    fn not_examined(id: &'static str, why: &str) -> Self {
        Self::new(
            id,
            Status::Unknown,
            format!("not examined: {why}"),
            Some("fix the unreadable files the other check names".to_owned()),
        )
    }
    /// A check that could not be made because a file was unreadable or malformed (`e`: the
    /// error as [`Facts::unreadable`] keeps it).
    fn error(id: &'static str, e: &str) -> Self {
        Self::new(
            id,
            Status::Unknown,
            format!("could not check: {e}"),
            Some("the file should be the kernel's text; check its permissions (some need root) or report the content as a bug".to_owned()),
        )
    }
}

/// Which path an operator's policy demands (`check --require`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Require {
    /// Any path that carries GPU memory (dma-buf, peer memory or EFA).
    #[default]
    Any,
    /// dma-buf for every pair.
    Dmabuf,
    /// A peer-memory client for every pair (on EFA: `efa_nv_peermem`).
    Peermem,
}

impl Require {
    pub fn label(self) -> &'static str {
        match self {
            Self::Any => "any",
            Self::Dmabuf => "dmabuf",
            Self::Peermem => "peermem",
        }
    }
}

/// A workload whose own needs `check --for` judges besides GPUDirect RDMA's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Workload {
    /// GPU-initiated networking: NCCL GIN (GDAKI), NVSHMEM IBGDA, DeepEP.
    Gin,
}

/// How the facts are judged: the operator's policy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Options {
    pub require: Require,
    /// `--for gin`: the workload's rows fail instead of informing, and a ready verdict says so.
    pub workload: Option<Workload>,
    /// `--as-job`: `memlock` judges the calling process as the job it runs in (its limit,
    /// CapEff, the runtime that started it); the job starters are not judged.
    pub as_job: bool,
    /// `--expect-gpus`, `--expect-nics`, `--expect-rate`: the `inventory` row.
    pub expect: Expect,
}

/// What the node must have, as NHC's inventory checks say it: fewer fails `inventory`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Expect {
    pub gpus: Option<usize>,
    /// RDMA devices with a PCI function.
    pub nics: Option<usize>,
    /// Every NIC port's rate at least this many Gb/s.
    pub rate_gbps: Option<u32>,
}

/// All checks of one run: `nvpeer check --json` prints this.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub schema: &'static str,
    /// The host's name (`/proc/sys/kernel/hostname` under the procfs root; `--facts`: the
    /// saved host's), when known.
    pub host: Option<String>,
    /// The nvpeer that judged.
    pub nvpeer_version: &'static str,
    /// When it judged, UTC (RFC 3339).
    pub time: String,
    /// The worst status of any check.
    pub status: Status,
    /// The verdict is ready (= exit code 0 without `--strict`).
    pub ready: bool,
    /// `ready (dma-buf)`, ..., or `not ready: <first blocking reason>`, with what it rests on.
    pub verdict: Verdict,
    /// The policy the verdict was made under (`--require`).
    pub require: Require,
    /// `--for`: the workload judged besides GPUDirect RDMA.
    #[serde(rename = "for")]
    pub workload: Option<Workload>,
    /// `--as-job`.
    pub as_job: bool,
    /// Every GPU-NIC pair `topo` finds, with the paths that work for it.
    pub pairs: Vec<PairVerdict>,
    pub checks: Vec<Check>,
    pub facts: Facts,
}

impl Report {
    /// The check with this id.
    pub fn get(&self, id: &str) -> Option<&Check> {
        self.checks.iter().find(|c| c.id == id)
    }
}

/// What the rules and the verdict make of one set of facts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Judgement {
    pub checks: Vec<Check>,
    pub pairs: Vec<PairVerdict>,
    pub verdict: Verdict,
}

/// Runs every check against `host`: [`gather`], then [`report`]. Unreadable or malformed files
/// turn into `warn` lines that name the file; nothing here fails as a whole.
pub fn run(host: &crate::host::Host, inputs: &Inputs, options: &Options) -> Report {
    report(gather(host, inputs), options)
}

/// The report of `facts`: every row and pair the rules make, the verdict, the worst status.
pub fn report(facts: Facts, options: &Options) -> Report {
    let Judgement {
        checks,
        pairs,
        verdict,
    } = judge(&facts, options);
    let status = checks.iter().map(|c| c.status).max().unwrap_or(Status::Ok);
    Report {
        schema: SCHEMA,
        host: facts.hostname.clone(),
        nvpeer_version: env!("CARGO_PKG_VERSION"),
        time: crate::clock::now_utc(),
        status,
        ready: verdict.ready,
        verdict,
        require: options.require,
        workload: options.workload,
        as_job: options.as_job,
        pairs,
        checks,
        facts,
    }
}

/// Every row in report order, every pair, and the verdict, made from `facts` alone (no file is
/// read here).
pub fn judge(facts: &Facts, options: &Options) -> Judgement {
    let (checks, pairs) = rules::evaluate(facts, options);
    let mut verdict = verdict::verdict(&checks, &pairs, options.require, |c| {
        brief::reason(c, facts, &pairs, options.require)
    });
    if verdict.ready && options.workload == Some(Workload::Gin) {
        verdict.text.push_str(" for GIN");
    }
    Judgement {
        checks,
        pairs,
        verdict,
    }
}

/// Why a saved report could not be judged again.
#[derive(Debug, thiserror::Error)]
pub enum FactsError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: not JSON: {source}")]
    Json {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("{path}: schema {schema:?}: not a {SCHEMA} report")]
    Schema { path: PathBuf, schema: String },
    #[error("{path}: facts without `unreadable`, from an nvpeer older than `check --facts`: its verdicts cannot be reproduced; run `nvpeer check --json` of this release there")]
    OlderRelease { path: PathBuf },
    #[error("{path}: not a `nvpeer check --json` report or its facts: {source}")]
    Shape {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
}

/// The facts of a saved `nvpeer check --json` (or of a bare facts object) in the file at `path`,
/// `-` for standard input.
pub fn read_facts(path: &str) -> Result<Facts, FactsError> {
    let mut bytes = Vec::new();
    let result = if path == "-" {
        std::io::stdin().lock().read_to_end(&mut bytes)
    } else {
        std::fs::File::open(path).and_then(|mut f| f.read_to_end(&mut bytes))
    };
    result.map_err(|source| FactsError::Read {
        path: PathBuf::from(path),
        source,
    })?;
    parse_facts(&bytes, path)
}

/// [`read_facts`] on text already read; `source` names it in errors.
pub fn parse_facts(bytes: &[u8], source: &str) -> Result<Facts, FactsError> {
    let path = || PathBuf::from(source);
    let mut value: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|source| FactsError::Json {
            path: path(),
            source,
        })?;
    // A whole report: its schema must be ours, and its facts are what is judged.
    if let Some(schema) = value.get("schema") {
        if !SCHEMAS_READ.iter().any(|s| schema == *s) {
            return Err(FactsError::Schema {
                path: path(),
                schema: schema
                    .as_str()
                    .map_or_else(|| schema.to_string(), str::to_owned),
            });
        }
        value = value
            .get_mut("facts")
            .map(serde_json::Value::take)
            .unwrap_or(serde_json::Value::Null);
    }
    if value.get("modules").is_some() && value.get("unreadable").is_none() {
        return Err(FactsError::OlderRelease { path: path() });
    }
    serde_json::from_value(value).map_err(|source| FactsError::Shape {
        path: path(),
        source,
    })
}
