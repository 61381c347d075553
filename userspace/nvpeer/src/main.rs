// SPDX-License-Identifier: MIT OR Apache-2.0
//! `nvpeer`: the companion CLI of the nvpeer GPUDirect RDMA peer-memory module.
//!
//! Exit codes: 0 ready / success, 1 a check failed (`nccl-log`: not every network connection
//! was GDRDMA), 2 usage error or an error that kept the command from running (one line on
//! stderr, [`usage`]); `check --exit-codes nagios`: 0 ok, 1 warning, 2 critical, 3 unknown
//! (usage errors too).
//!
//! The clap definitions are in [`cli`], each subcommand's printing and exit code in
//! [`commands`]; what they compute is nvpeer-core's.

use std::process::ExitCode;

use nvpeer_core::check::{self, brief::NAGIOS_UNKNOWN};
use nvpeer_core::commands::selftest;
use nvpeer_core::host::Host;

mod cli;
mod commands;
mod gendocs;
mod output;
mod usage;

use cli::{Cli, Command, ExitCodesArg};
use output::Out;

/// A mistyped `--sysfs-root`/`--procfs-root` must not read as "nothing installed".
fn check_root(flag: &str, path: &std::path::Path) -> Result<(), String> {
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(format!("{flag} {}: not a directory", path.display())),
        Err(e) => Err(format!("{flag} {}: {e}", path.display())),
    }
}

/// `attach` and `detach` load and unload modules of the running kernel: with another sysfs root
/// (a fixture, a container's copy) that would act on a host the tree does not describe.
fn changes_this_host(host: &Host, command: &str, dry_run: bool) -> Result<(), String> {
    if host.is_live_sysfs() || dry_run {
        Ok(())
    } else {
        Err(format!(
            "nvpeer {command}: --sysfs-root names another tree than this host's /sys: add --dry-run"
        ))
    }
}

fn main() -> ExitCode {
    // `nvpeer __generate-docs OUTDIR`: man pages and completions (packaging).
    if let Some(code) = gendocs::intercept::<Cli>() {
        return code;
    }
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let cli = match usage::parse(&args) {
        Ok(cli) => cli,
        Err(code) => return code,
    };
    for (flag, path) in [
        ("--sysfs-root", &cli.sysfs_root),
        ("--procfs-root", &cli.procfs_root),
    ] {
        if let Err(e) = check_root(flag, path) {
            eprintln!("nvpeer: {e}");
            // Nagios reads stdout: the one line says why the host is UNKNOWN.
            if let Command::Check {
                exit_codes: ExitCodesArg::Nagios,
                ..
            } = cli.command
            {
                println!("nvpeer: unknown: {e}");
                return ExitCode::from(NAGIOS_UNKNOWN);
            }
            return ExitCode::from(2);
        }
    }
    let host = Host::new(&cli.sysfs_root, &cli.procfs_root);
    let mut out = Out::new();
    let result = match cli.command {
        Command::Check {
            json,
            brief,
            strict,
            all,
            exit_codes,
            facts,
            require,
            workload,
            as_job,
            expect_gpus,
            expect_nics,
            expect_rate,
        } => {
            if json && brief {
                eprintln!(
                    "nvpeer check: --brief is one line of text; it cannot be combined with --json"
                );
                return ExitCode::from(2);
            }
            let form = if json {
                commands::check::CheckForm::Json
            } else if brief {
                commands::check::CheckForm::Brief
            } else {
                commands::check::CheckForm::Table
            };
            commands::check::run(
                &host,
                facts.as_deref(),
                form,
                &commands::check::CheckFlags {
                    strict,
                    all,
                    codes: exit_codes.into(),
                    options: check::Options {
                        require: require.into(),
                        workload: workload.map(Into::into),
                        as_job,
                        expect: check::Expect {
                            gpus: expect_gpus,
                            nics: expect_nics,
                            rate_gbps: expect_rate,
                        },
                    },
                },
                &mut out,
            )
        }
        Command::Topo { json } => commands::topo::run(&host, json, &mut out),
        Command::Who { json, brief } => commands::who::run(&host, json, brief, &mut out),
        Command::Detach {
            wait,
            dry_run,
            json,
        } => {
            if let Err(e) = changes_this_host(&host, "detach", dry_run) {
                eprintln!("{e}");
                return ExitCode::from(2);
            }
            commands::detach::run(&host, wait, dry_run, json, &mut out)
        }
        Command::Attach {
            module,
            dry_run,
            json,
        } => {
            if let Err(e) = changes_this_host(&host, "attach", dry_run) {
                eprintln!("{e}");
                return ExitCode::from(2);
            }
            commands::attach::run(&host, &module, dry_run, json, &mut out)
        }
        Command::Stats {
            json,
            watch,
            count,
            format,
            textfile,
        } => match commands::stats::form(json, watch.is_some(), format.as_deref(), textfile) {
            Ok(commands::stats::StatsForm::Prometheus(dest)) => {
                commands::stats::run_prometheus(&host, dest.as_deref(), &mut out)
            }
            Ok(commands::stats::StatsForm::Text { json }) => {
                commands::stats::run_text(&host, json, watch, count, &mut out)
            }
            Err(e) => {
                eprintln!("nvpeer stats: {e}");
                return ExitCode::from(2);
            }
        },
        Command::Bench(args) if args.loopback_all => {
            commands::bench::run_loopback_all(&host, &args, &mut out)
        }
        Command::Bench(args) => commands::bench::run(&args, &mut out),
        Command::NcclLog { file, json } => commands::nccl_log::run(&file, json, &mut out),
        Command::Selftest {
            mem,
            alloc,
            size,
            device,
            gpu,
            json,
        } => {
            let opts = selftest::SelftestOpts {
                mem: mem.map(Into::into),
                alloc: alloc.into(),
                size,
                device,
                gpu,
                port: 1,
                gid_index: None,
            };
            commands::selftest::run(&host, &opts, json, &mut out)
        }
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
