// SPDX-License-Identifier: MIT OR Apache-2.0
//! `nvpeer stats`: the counters as a table or JSON (once or `--watch`), or in the Prometheus
//! format on standard output or into a node_exporter textfile.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use nvpeer_core::check::{self, Inputs};
use nvpeer_core::commands::{metrics, render, stats};
use nvpeer_core::host::Host;

use crate::output::{to_json, Out};

pub enum StatsForm {
    /// The table, or JSON.
    Text { json: bool },
    /// The exposition format: on stdout, or into this textfile directory.
    Prometheus(Option<PathBuf>),
}

/// Which output `stats` was asked for; a contradiction or an unknown format is one line.
pub fn form(
    json: bool,
    watch: bool,
    format: Option<&str>,
    textfile: Option<PathBuf>,
) -> Result<StatsForm, String> {
    let prometheus = match format {
        None => textfile.is_some(),
        Some("prometheus") => true,
        Some("table") | Some("json") if textfile.is_some() => {
            return Err(
                "--textfile writes the prometheus format; it cannot be combined with --format table or json"
                    .to_owned(),
            )
        }
        Some("table") if json => {
            return Err("--format table contradicts --json".to_owned())
        }
        Some("table") => false,
        Some("json") => return Ok(StatsForm::Text { json: true }),
        Some(other) => {
            return Err(format!(
                "unknown --format {other:?}: use table, json or prometheus"
            ))
        }
    };
    if !prometheus {
        return Ok(StatsForm::Text { json });
    }
    if json {
        return Err(
            "--json contradicts the prometheus format (--format prometheus, --textfile)".to_owned(),
        );
    }
    if watch {
        return Err(
            "--watch is for the table and --json; run --format prometheus / --textfile from a timer"
                .to_owned(),
        );
    }
    Ok(StatsForm::Prometheus(textfile))
}

/// `stats --format prometheus` / `--textfile DIR`: the counters and every check's verdict (the
/// checks as `check --brief` runs them: sysfs, procfs, the libibverbs probe; no CUDA context,
/// no RDMA traffic). Counters that cannot be read are one line on stderr and exit 2, after
/// the rest (with `nvpeer_stats_readable 0`) was written.
pub fn run_prometheus(
    host: &Host,
    textfile: Option<&std::path::Path>,
    out: &mut Out,
) -> std::io::Result<ExitCode> {
    let st = stats::read(host);
    let report = check::run(host, &Inputs::live(host, false), &check::Options::default());
    let text = metrics::render(&st, &report);
    match textfile {
        Some(dir) => {
            if let Err(e) = metrics::write_textfile(dir, &text) {
                let flag = match e {
                    metrics::TextfileError::Dir { .. }
                    | metrics::TextfileError::NotADirectory { .. } => "--textfile ",
                    _ => "",
                };
                eprintln!("nvpeer stats: {flag}{e}");
                return Ok(ExitCode::from(2));
            }
        }
        None => out.print(&text)?,
    }
    Ok(match st {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("nvpeer stats: {e}");
            ExitCode::from(2)
        }
    })
}

pub fn run_text(
    host: &Host,
    json: bool,
    watch: Option<u64>,
    count: Option<u64>,
    out: &mut Out,
) -> std::io::Result<ExitCode> {
    let Some(interval) = watch.map(Duration::from_secs) else {
        return Ok(match stats::read(host) {
            Ok(st) => {
                out.print(&if json {
                    to_json(&st, true)?
                } else {
                    render::stats(&st, None)
                })?;
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("nvpeer stats: {e}");
                ExitCode::from(2)
            }
        });
    };
    // Refreshes are scheduled on a fixed grid so that slow reads do not make the period drift;
    // a read error (module unloaded mid-read, ...) is reported and the watch goes on.
    let start = Instant::now();
    let mut previous: Option<stats::Stats> = None;
    let mut refresh: u64 = 0;
    loop {
        refresh += 1;
        match stats::read(host) {
            Ok(st) => {
                if json {
                    out.print(&to_json(&st, false)?)?;
                } else {
                    let mut text = String::new();
                    if out.color {
                        text.push_str("\x1b[H\x1b[2J");
                    } else if refresh > 1 {
                        text.push('\n');
                    }
                    text.push_str(&format!(
                        "Every {}s, refresh {refresh}\n",
                        interval.as_secs()
                    ));
                    text.push_str(&render::stats(&st, previous.as_ref()));
                    out.print(&text)?;
                }
                previous = Some(st);
            }
            Err(e) => eprintln!("nvpeer stats: {e}"),
        }
        if count.is_some_and(|c| refresh >= c) {
            return Ok(ExitCode::SUCCESS);
        }
        let due = interval.saturating_mul(u32::try_from(refresh).unwrap_or(u32::MAX));
        std::thread::sleep(due.saturating_sub(start.elapsed()));
    }
}
