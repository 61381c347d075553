// SPDX-License-Identifier: MIT OR Apache-2.0
//! `nvpeer nccl-log`: what an NCCL_DEBUG=INFO log says about GPU Direct RDMA.

use std::process::ExitCode;

use nvpeer_core::commands::{nccl_log, render};

use crate::output::{to_json, Out};

/// Exit 0 when every network connection was GDRDMA, 1 when not (some, none, NET/Socket), 3 for
/// a file with no NCCL line, 4 for an NCCL log without a network connection, 2 when the log
/// cannot be read.
pub fn run(file: &str, json: bool, out: &mut Out) -> std::io::Result<ExitCode> {
    let report = match nccl_log::read(file) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("nvpeer nccl-log: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    if json {
        out.print(&to_json(&report, true)?)?;
    } else {
        out.print(&render::nccl_log(&report))?;
    }
    Ok(ExitCode::from(report.summary.verdict.exit_code()))
}
