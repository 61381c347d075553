// SPDX-License-Identifier: MIT OR Apache-2.0
//! `nvpeer detach`: unload the peer-memory module when no registration is live, else name the
//! holders.

use std::process::ExitCode;
use std::time::Duration;

use nvpeer_core::commands::detach::{self, Detach};
use nvpeer_core::commands::who;
use nvpeer_core::host::modtools::Kmod;
use nvpeer_core::host::Host;
use serde::Serialize;

use crate::output::{to_json, Out};

/// `nvpeer detach --json`.
#[derive(Serialize)]
struct Report<'a> {
    schema: &'static str,
    module: Option<String>,
    result: &'static str,
    /// Live registrations when it gave up (`held`).
    live: Option<u64>,
    /// `held`: who holds them, as `nvpeer who --json` lists holders (empty when the records
    /// cannot be read); `null` otherwise.
    holders: Option<&'a [who::Holder]>,
    line: String,
}

/// Exit 0 unloaded (or nothing loaded), 1 held (the holders named), 2 the kernel refused for
/// another reason or the host could not be read.
pub fn run(
    host: &Host,
    wait: u64,
    dry_run: bool,
    json: bool,
    out: &mut Out,
) -> std::io::Result<ExitCode> {
    let d = match detach::detach(
        host,
        &Kmod::system(),
        Duration::from_secs(wait),
        dry_run,
        &mut std::thread::sleep,
    ) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("nvpeer detach: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    let line = d.line();
    let code = d.exit_code();
    if json {
        let (module, result, live, holders) = match &d {
            Detach::NothingLoaded => (None, "nothing_loaded", None, None),
            Detach::Unloaded { module } => (Some(module.clone()), "unloaded", None, None),
            Detach::WouldUnload { module } => (Some(module.clone()), "would_unload", None, None),
            Detach::Held {
                module,
                live,
                holder_list,
                ..
            } => (
                Some(module.clone()),
                "held",
                Some(*live),
                Some(holder_list.as_slice()),
            ),
            Detach::Failed { module, .. } => (Some(module.clone()), "failed", None, None),
        };
        out.print(&to_json(
            &Report {
                schema: "nvpeer.detach/1",
                module,
                result,
                live,
                holders,
                line,
            },
            true,
        )?)?;
    } else if code == 0 {
        out.print(&format!("nvpeer detach: {line}\n"))?;
    } else {
        eprintln!("nvpeer detach: {line}");
    }
    Ok(ExitCode::from(code))
}
