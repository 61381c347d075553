// SPDX-License-Identifier: MIT OR Apache-2.0
//! One module per subcommand: each turns the parsed arguments into nvpeer-core calls, prints
//! the result and says the exit code.

pub mod attach;
pub mod bench;
pub mod check;
pub mod detach;
pub mod nccl_log;
pub mod selftest;
pub mod stats;
pub mod topo;
pub mod who;
