//! `nvpeer`: the companion CLI of the nvpeer GPUDirect RDMA peer-memory module.
//!
//! Exit codes: 0 ready / success, 1 a check failed, 2 usage error (clap) or an error that kept
//! the command from running (one line on stderr).

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use nvpeer_core::check::{self, Status};
use nvpeer_core::host::Host;

#[derive(Parser)]
#[command(name = "nvpeer", version, about = "Verify and measure GPUDirect RDMA through the nvpeer peer-memory module")]
struct Cli {
    /// Root of the sysfs tree to read (for fixtures and containers).
    #[arg(long, global = true, default_value = "/sys", value_name = "DIR")]
    sysfs_root: PathBuf,
    /// Root of the procfs tree to read.
    #[arg(long, global = true, default_value = "/proc", value_name = "DIR")]
    procfs_root: PathBuf,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Check that this host is ready for GPUDirect RDMA; exit 0 when ready, 1 when a check fails.
    Check {
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let host = Host::new(&cli.sysfs_root, &cli.procfs_root);
    match cli.command {
        Command::Check { json } => run_check(&host, json),
    }
}

fn run_check(host: &Host, json: bool) -> ExitCode {
    let report = match check::run(host) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("nvpeer check: {e}");
            return ExitCode::from(2);
        }
    };
    if json {
        match serde_json::to_string_pretty(&report) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                eprintln!("nvpeer check: cannot encode JSON: {e}");
                return ExitCode::from(2);
            }
        }
    } else {
        print!("{}", render_table(&report, std::io::stdout().is_terminal()));
    }
    if report.status() == Status::Fail {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

fn render_table(report: &check::Report, color: bool) -> String {
    let width = report.checks.iter().map(|c| c.id.len()).max().unwrap_or(0);
    let mut out = String::new();
    for c in &report.checks {
        let label = c.status.label();
        let label = if color {
            let code = match c.status {
                Status::Ok => "32",
                Status::Warn => "33",
                Status::Fail => "31",
            };
            format!("\x1b[{code}m{label:<4}\x1b[0m")
        } else {
            format!("{label:<4}")
        };
        out.push_str(&format!("{label}  {:<width$}  {}\n", c.id, c.detail));
        if let Some(fix) = &c.fix {
            out.push_str(&format!("{:<4}  {:<width$}  fix: {fix}\n", "", ""));
        }
    }
    out
}
