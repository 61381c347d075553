// SPDX-License-Identifier: MIT OR Apache-2.0
//! `nvpeer bench --loopback-all`: the per-node GPUDirect RDMA bandwidth check. Each GPU is
//! paired with its nearest NIC (the `topo` answer), every pair runs the same loopback transfer
//! ([`super::run`] with `Mode::Loopback`, `--mem cuda --gpu N -d DEV`), pinned to the CPUs of
//! the NIC's NUMA node as operators' own `numactl -N` + `ib_write_bw --use_cuda` scripts do,
//! and `--min-gbps X` fails the pairs below X, each named in one line.
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
pub use report::{LoopbackAllReport, PairResult, PairStatus};
pub use runner::run;

pub const SCHEMA: &str = "nvpeer.bench-loopback-all/1";
