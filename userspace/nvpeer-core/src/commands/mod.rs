// SPDX-License-Identifier: MIT OR Apache-2.0
//! The subcommands beyond `check` (which is [`crate::check`]), on top of the host readers
//! ([`crate::host`]) and the judgement: each file or folder is one subcommand's logic, and
//! [`render`] is the human output of every report.

pub mod attach;
pub mod bench;
pub mod detach;
pub mod metrics;
pub mod nccl_log;
pub mod render;
pub mod selftest;
pub mod stats;
pub mod who;
