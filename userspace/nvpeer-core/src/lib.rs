//! Logic of the `nvpeer` companion CLI: host readiness checks for GPUDirect RDMA through the
//! nvpeer peer-memory module, the GPU-NIC topology, and the module's statistics. Everything
//! reads the host through [`host::Host`], whose sysfs and procfs roots are parameters, so tests
//! run against fixture trees; the binary only parses arguments and prints.
//!
//! Three layers, each using only the ones before it:
//!
//! 1. [`host`]: the readers of host facts (PCI, kernel, `/proc/driver/nvidia`, `modprobe`,
//!    limits, RDMA devices, libibverbs, the module tools and records, the GPU-NIC topology).
//!    They read and parse; they do not judge.
//! 2. [`check`]: judgement, from the facts alone (its rules share their predicates through
//!    `check/rules/predicates.rs`, never through each other's files), the replay of NCCL's and
//!    UCX's own rules ([`check::nccl`]) and the build-provenance verdict
//!    ([`check::provenance`]).
//! 3. [`commands`]: what each subcommand does beyond `check` (attach, detach, who, stats,
//!    metrics, nccl-log, bench, selftest) and the human rendering of reports.
//!
//! [`error`], [`clock`] and [`hexid`] are shared by all three.

pub mod check;
pub mod clock;
pub mod commands;
pub mod error;
pub mod hexid;
pub mod host;

pub use error::{Error, Result};
