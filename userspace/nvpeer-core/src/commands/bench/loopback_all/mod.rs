// SPDX-License-Identifier: MIT OR Apache-2.0
//! `nvpeer bench --loopback-all`: the per-node GPUDirect RDMA bandwidth check. Each GPU is
//! paired with its nearest NIC (the `topo` answer), every pair runs the same loopback transfer
//! ([`super::run`] with `Mode::Loopback`, `--mem cuda --gpu N -d DEV`), pinned to the CPUs of
//! the NIC's NUMA node as operators' own `numactl -N` + `ib_write_bw --use_cuda` scripts do,
//! once per direction (RDMA write, then RDMA read, each size's first messages verified byte by
//! byte), and `--min-gbps X` fails the directions below X, each named in one line. A pair whose
//! writes work and whose reads fail is named as the known class of that symptom, with its
//! workaround.
//!
//! Without GPUs (`--mem host` or `--mem sim`), every RDMA device is paired once with host
//! memory (or the nv_p2p_sim stand-in's), so the same machinery runs over Soft-RoCE.
//!
//! The pairing ([`gpu_pairs`], [`device_pairs`]), the CUDA ordinal lookup ([`match_ordinal`])
//! and the CPU list parsing ([`parse_cpulist`]) are pure functions; only [`run`] moves data.
//!
//! `pairing.rs` chooses the pairs, `pinning.rs` the CPUs of each, `runner.rs` runs them and
//! `report.rs` is the result: the table, the JSON and the failure lines.

mod pairing;
mod pinning;
mod report;
mod runner;

pub use pairing::{device_pairs, gpu_pairs, match_ordinal, plan, Pair, PairGpu};
pub use pinning::{parse_cpulist, pinning, Pinning};
pub use report::{
    reads_fail_writes_work, DirectionResult, KnownIssue, LoopbackAllReport, PairResult, PairStatus,
};
pub use runner::run;

/// `/2`: per pair `directions` (one per operation) and `registration`; `op` became `ops`.
pub const SCHEMA: &str = "nvpeer.bench-loopback-all/2";

/// Messages per size moved one at a time, every byte compared, before each direction is
/// measured (unless `--no-validate`).
pub const VERIFY_MESSAGES: u64 = 16;
