// SPDX-License-Identifier: MIT OR Apache-2.0
//! `nvpeer check`: the readiness checks, as a table, JSON or one line.

use std::process::ExitCode;

use nvpeer_core::check::brief::{self, ExitCodes, NAGIOS_UNKNOWN};
use nvpeer_core::check::{self, Inputs};
use nvpeer_core::commands::render;
use nvpeer_core::host::Host;

use crate::output::{to_json, Out};

#[derive(Clone, Copy)]
pub enum CheckForm {
    Table,
    Json,
    Brief,
}

/// `--strict`, `--exit-codes` and the policy (`--require`).
pub struct CheckFlags {
    pub strict: bool,
    /// `--all`: the table shows the rows that do not apply too.
    pub all: bool,
    pub codes: ExitCodes,
    pub options: check::Options,
}

/// `facts`: judge a saved report instead of `host` (`--facts FILE`); one that cannot be read is
/// one line on stderr and exit 2 (nagios: 3, UNKNOWN, with the line on stdout too).
pub fn run(
    host: &Host,
    facts: Option<&str>,
    form: CheckForm,
    flags: &CheckFlags,
    out: &mut Out,
) -> std::io::Result<ExitCode> {
    let (strict, codes) = (flags.strict, flags.codes);
    // The same checks in every form: --brief reads sysfs/procfs and probes libibverbs like the
    // table (no CUDA context, no RDMA traffic), only the rendering differs.
    let report = match facts {
        None => check::run(
            host,
            &Inputs::live(host, flags.options.as_job),
            &flags.options,
        ),
        Some(file) => match check::read_facts(file) {
            Ok(facts) => check::report(facts, &flags.options),
            Err(e) => {
                eprintln!("nvpeer check: --facts: {e}");
                if codes == ExitCodes::Nagios {
                    out.print(&format!("nvpeer: unknown: {e}\n"))?;
                    return Ok(ExitCode::from(NAGIOS_UNKNOWN));
                }
                return Ok(ExitCode::from(2));
            }
        },
    };
    match form {
        CheckForm::Json => out.print(&to_json(&report, true)?)?,
        CheckForm::Brief if codes == ExitCodes::Nagios => {
            out.print(&brief::nagios_line(&report, strict))?
        }
        CheckForm::Brief => out.print(&brief::line(&report, strict))?,
        CheckForm::Table => {
            let color = out.color;
            // The terminal's width where the shell says it (COLUMNS), else 100.
            let width = std::env::var("COLUMNS")
                .ok()
                .and_then(|c| c.parse::<usize>().ok())
                .filter(|w| *w >= 40)
                .unwrap_or(render::CHECK_WIDTH);
            out.print(&render::check(&report, color, flags.all, width))?;
        }
    }
    Ok(ExitCode::from(brief::exit_code(&report, strict, codes)))
}
