// SPDX-License-Identifier: MIT OR Apache-2.0
//! `nvpeer attach`: load the peer-memory module when its build provenance fits what runs.

use std::process::ExitCode;

use nvpeer_core::commands::attach::{self, Attach};
use nvpeer_core::host::modtools::Kmod;
use nvpeer_core::host::Host;
use serde::Serialize;

use crate::output::{to_json, Out};

/// `nvpeer attach --json`.
#[derive(Serialize)]
struct Report<'a> {
    schema: &'static str,
    module: &'a str,
    result: &'static str,
    /// `compatible`, `rebuild: ...`, `unknown: ...` (also when refused for a rebuild); `null`
    /// when not judged.
    verdict: Option<String>,
    line: String,
}

/// Exit 0 when loaded or nothing to do, 1 when refused or `modprobe` failed (the line on
/// stderr: the journal under nvpeer-attach.service), 2 when it could not run.
pub fn run(
    host: &Host,
    module: &str,
    dry_run: bool,
    json: bool,
    out: &mut Out,
) -> std::io::Result<ExitCode> {
    let a = match attach::attach(host, &Kmod::system(), module, dry_run) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("nvpeer attach: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    let line = a.line(module);
    let code = a.exit_code();
    if json {
        let (result, verdict) = match &a {
            Attach::AlreadyLoaded { .. } => ("already_loaded", None),
            Attach::NoPeerCore => ("no_peer_core", None),
            Attach::Loaded { verdict } => ("loaded", Some(verdict.to_string())),
            Attach::WouldLoad { verdict } => ("would_load", Some(verdict.to_string())),
            Attach::Refused { verdict, .. } => {
                ("refused", verdict.as_ref().map(ToString::to_string))
            }
            Attach::LoadFailed { verdict, .. } => ("load_failed", Some(verdict.to_string())),
        };
        out.print(&to_json(
            &Report {
                schema: "nvpeer.attach/1",
                module,
                result,
                verdict,
                line,
            },
            true,
        )?)?;
    } else if code == 0 {
        out.print(&format!("nvpeer attach: {line}\n"))?;
    } else {
        eprintln!("nvpeer attach: {line}");
    }
    Ok(ExitCode::from(code))
}
