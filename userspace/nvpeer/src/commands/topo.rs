// SPDX-License-Identifier: MIT OR Apache-2.0
//! `nvpeer topo`: the GPU x NIC PCIe topology.

use std::process::ExitCode;

use nvpeer_core::commands::render;
use nvpeer_core::host::topo;
use nvpeer_core::host::Host;

use crate::output::{to_json, Out};

pub fn run(host: &Host, json: bool, out: &mut Out) -> std::io::Result<ExitCode> {
    let topology = match topo::discover(host) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("nvpeer topo: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    if json {
        out.print(&to_json(&topology, true)?)?;
    } else {
        out.print(&render::topo(&topology))?;
    }
    Ok(ExitCode::SUCCESS)
}
