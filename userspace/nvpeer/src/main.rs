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
use nvpeer_core::stats;

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
    /// Show the module's counters and MOFED's memory_peers counters.
    Stats {
        /// Print the counters as JSON (one object; one per refresh with --watch).
        #[arg(long)]
        json: bool,
        /// Refresh every N seconds until interrupted.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
        watch: Option<u64>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let host = Host::new(&cli.sysfs_root, &cli.procfs_root);
    match cli.command {
        Command::Check { json } => run_check(&host, json),
        Command::Stats { json, watch } => run_stats(&host, json, watch),
    }
}

fn run_stats(host: &Host, json: bool, watch: Option<u64>) -> ExitCode {
    loop {
        let st = match stats::read(host) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("nvpeer stats: {e}");
                return ExitCode::from(2);
            }
        };
        if json {
            match serde_json::to_string(&st) {
                Ok(s) => println!("{s}"),
                Err(e) => {
                    eprintln!("nvpeer stats: cannot encode JSON: {e}");
                    return ExitCode::from(2);
                }
            }
        } else {
            print!("{}", render_stats(&st));
        }
        let Some(secs) = watch else {
            return ExitCode::SUCCESS;
        };
        std::thread::sleep(std::time::Duration::from_secs(secs));
        if !json {
            println!();
        }
    }
}

fn render_stats(st: &stats::Stats) -> String {
    let mut out = String::new();
    match &st.module {
        Some(name) => {
            out.push_str(&format!("nvpeer module {name}\n"));
            let width = st.counters.keys().map(String::len).max().unwrap_or(0);
            for (k, v) in &st.counters {
                out.push_str(&format!("  {k:<width$}  {v:>12}\n"));
            }
            for f in &st.failures {
                let errno = f.errno.map_or_else(|| "other".to_owned(), |e| e.to_string());
                out.push_str(&format!("  failed {:<13} errno {:<5} {:>8}\n", f.callback, errno, f.count));
            }
        }
        None => out.push_str("nvpeer module: not loaded (no /sys/module/<name>/nvpeer)\n"),
    }
    match &st.memory_peers {
        Some(clients) => {
            for c in clients {
                out.push_str(&format!(
                    "memory_peers/{} (version {})\n",
                    c.name,
                    c.version.as_deref().unwrap_or("?")
                ));
                for (k, v) in &c.counters {
                    out.push_str(&format!("  {k:<20}  {v:>12}\n"));
                }
            }
        }
        None => out.push_str("memory_peers: absent (/sys/kernel/mm/memory_peers)\n"),
    }
    out
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
