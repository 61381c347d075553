//! `nvpeer`: the companion CLI of the nvpeer GPUDirect RDMA peer-memory module.
//!
//! Exit codes: 0 ready / success, 1 a check failed, 2 usage error (clap) or an error that kept
//! the command from running (one line on stderr).

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use nvpeer_core::check::{self, Inputs};
use nvpeer_core::host::Host;
use nvpeer_core::{render, stats, topo};

#[derive(Parser)]
#[command(
    name = "nvpeer",
    version,
    about = "Verify and measure GPUDirect RDMA through the nvpeer peer-memory module",
    after_help = "Exit codes: 0 ready / success, 1 a check failed, 2 usage error or a failure to run."
)]
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
        /// Print the report as JSON (schema nvpeer.check/1).
        #[arg(long)]
        json: bool,
    },
    /// Show the GPU x NIC PCIe topology (nvidia-smi topo -m classes, NCCL's path types).
    Topo {
        /// Print the topology as JSON (schema nvpeer.topo/1).
        #[arg(long)]
        json: bool,
    },
    /// Show the module's counters and MOFED's memory_peers counters.
    Stats {
        /// Print the counters as JSON (schema nvpeer.stats/1; one object per line with --watch).
        #[arg(long)]
        json: bool,
        /// Refresh every N seconds until interrupted, with the change since the last refresh.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=86400))]
        watch: Option<u64>,
        /// With --watch: stop after this many refreshes.
        #[arg(long, value_name = "COUNT", requires = "watch", value_parser = clap::value_parser!(u64).range(1..))]
        count: Option<u64>,
    },
}

/// Where output goes; a closed pipe (`nvpeer stats --watch 1 | head`) ends the command quietly.
struct Out {
    stdout: std::io::Stdout,
    color: bool,
}

impl Out {
    fn new() -> Self {
        let stdout = std::io::stdout();
        let color = stdout.is_terminal() && std::env::var_os("NO_COLOR").is_none();
        Self { stdout, color }
    }

    fn print(&mut self, text: &str) -> std::io::Result<()> {
        let mut lock = self.stdout.lock();
        lock.write_all(text.as_bytes())?;
        lock.flush()
    }
}

/// A mistyped `--sysfs-root`/`--procfs-root` must not read as "nothing installed".
fn check_root(flag: &str, path: &std::path::Path) -> Result<(), String> {
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(format!("{flag} {}: not a directory", path.display())),
        Err(e) => Err(format!("{flag} {}: {e}", path.display())),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    for (flag, path) in [("--sysfs-root", &cli.sysfs_root), ("--procfs-root", &cli.procfs_root)] {
        if let Err(e) = check_root(flag, path) {
            eprintln!("nvpeer: {e}");
            return ExitCode::from(2);
        }
    }
    let host = Host::new(&cli.sysfs_root, &cli.procfs_root);
    let mut out = Out::new();
    let result = match cli.command {
        Command::Check { json } => run_check(&host, json, &mut out),
        Command::Topo { json } => run_topo(&host, json, &mut out),
        Command::Stats { json, watch, count } => run_stats(&host, json, watch, count, &mut out),
    };
    match result {
        Ok(code) => code,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("nvpeer: cannot write output: {e}");
            ExitCode::from(2)
        }
    }
}

fn to_json<T: serde::Serialize>(value: &T, pretty: bool) -> std::io::Result<String> {
    let text = if pretty {
        serde_json::to_string_pretty(value)
    } else {
        serde_json::to_string(value)
    };
    text.map(|mut s| {
        s.push('\n');
        s
    })
    .map_err(std::io::Error::other)
}

fn run_check(host: &Host, json: bool, out: &mut Out) -> std::io::Result<ExitCode> {
    let report = check::run(host, &Inputs::live(host));
    if json {
        out.print(&to_json(&report, true)?)?;
    } else {
        let color = out.color;
        out.print(&render::check(&report, color))?;
    }
    Ok(if report.ready {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn run_topo(host: &Host, json: bool, out: &mut Out) -> std::io::Result<ExitCode> {
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

fn run_stats(
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
