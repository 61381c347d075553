// SPDX-License-Identifier: MIT OR Apache-2.0
//! `nvpeer bench`: RDMA transfers from and into host or GPU memory over RC queue pairs,
//! measured per message size (bandwidth and latency as perftest reports them), with every byte
//! optionally verified, and the direct path compared with a host bounce buffer.
//!
//! Verbs: our own bindings over a run-time loaded libibverbs ([`ibv`]): `sideway` 0.4 builds a
//! C shim with cmake and bindgen at compile time (rdma-mummy-sys), which this workspace's
//! toolchain does not provide; the handful of entry points needed are bound here instead.
//!
//! This module's own files: `options.rs` (what to run), `client.rs` (buffers, sides, the
//! loopback server thread and the connected client), `runner.rs` (the server, the client run,
//! the selftest's transfer), `staged.rs` (the host bounce-buffer comparison), `results.rs`
//! (what a run measured; `report.rs` prints it, `plot.rs` draws it), `registration.rs` (the
//! path a registration took) and `error.rs`.

pub mod cuda;
pub mod cuda_alloc;
pub mod engine;
pub mod ibv;
pub mod loopback_all;
pub mod mem;
pub mod plot;
pub mod rdmacm;
pub mod registration;
pub mod report;
pub mod stats;

mod client;
mod error;
mod options;
mod results;
mod runner;
mod staged;

pub use client::open_cuda;
pub use error::{describe_reg_error, BenchError};
pub use options::{all_sizes, BenchOpts, Mode, Op, Progress};
pub use results::{BenchReport, DirectionRow, Row, StagedRow, SCHEMA};
pub use runner::{run, selftest_transfer, serve};
pub use staged::{copy_time_us, crossover, recommend, staged_copy_times};
