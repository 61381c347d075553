// SPDX-License-Identifier: MIT OR Apache-2.0
//! Parsing the command line: a usage error is one line on stderr naming the subcommand and exit
//! 2 (`check --exit-codes nagios`: 3, UNKNOWN, with the line on stdout too, which is what Nagios
//! reads), not clap's several lines of usage; `--help` and `--version` print as clap prints them.

use std::ffi::OsString;
use std::process::ExitCode;

use clap::error::ErrorKind;
use clap::{CommandFactory, Parser};
use nvpeer_core::check::brief::NAGIOS_UNKNOWN;

use crate::cli::Cli;

/// The parsed command line, or the exit code after the help, the version or a usage error was
/// printed.
pub fn parse(args: &[OsString]) -> Result<Cli, ExitCode> {
    Cli::try_parse_from(args).map_err(|e| report(&e, args))
}

fn report(e: &clap::Error, args: &[OsString]) -> ExitCode {
    if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
        // Printing help into a closed pipe is no error of the user's.
        let _ = e.print();
        return ExitCode::SUCCESS;
    }
    let sub = subcommand(args);
    let line = line(e, sub.as_deref());
    eprintln!("{line}");
    if sub.as_deref() == Some("check") && nagios(args) {
        println!("nvpeer: unknown: {line}");
        return ExitCode::from(NAGIOS_UNKNOWN);
    }
    ExitCode::from(2)
}

/// The first subcommand name among the arguments.
fn subcommand(args: &[OsString]) -> Option<String> {
    let cmd = Cli::command();
    let names: Vec<&str> = cmd.get_subcommands().map(|s| s.get_name()).collect();
    args.iter()
        .skip(1)
        .filter_map(|a| a.to_str())
        .find(|a| names.contains(a))
        .map(str::to_owned)
}

/// `--exit-codes nagios` or `--exit-codes=nagios` among the arguments.
fn nagios(args: &[OsString]) -> bool {
    let args: Vec<&str> = args.iter().filter_map(|a| a.to_str()).collect();
    args.contains(&"--exit-codes=nagios")
        || args.windows(2).any(|w| w == ["--exit-codes", "nagios"])
}

/// `nvpeer check: invalid value 'nvlink' for '--require <PATH>' [possible values: any, dmabuf,
/// peermem] (see nvpeer check --help)`: clap's first paragraph on one line, without its usage
/// and tips.
fn line(e: &clap::Error, sub: Option<&str>) -> String {
    let who = match sub {
        Some(s) => format!("nvpeer {s}"),
        None => "nvpeer".to_owned(),
    };
    let message = if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
        let cmd = Cli::command();
        let names: Vec<&str> = cmd
            .get_subcommands()
            .map(|s| s.get_name())
            .filter(|n| *n != "help")
            .collect();
        format!("a subcommand is required: {}", names.join(", "))
    } else {
        let rendered = e.render().to_string();
        rendered
            .lines()
            .map(str::trim)
            .take_while(|l| !l.is_empty())
            .collect::<Vec<_>>()
            .join(" ")
    };
    let message = message.strip_prefix("error: ").unwrap_or(&message);
    format!("{who}: {message} (see `{who} --help`)")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Vec<OsString> {
        std::iter::once("nvpeer")
            .chain(line.split_whitespace())
            .map(OsString::from)
            .collect()
    }

    fn error_line(cmdline: &str) -> String {
        let a = args(cmdline);
        let Err(e) = Cli::try_parse_from(&a) else {
            panic!("{cmdline} parsed")
        };
        line(&e, subcommand(&a).as_deref())
    }

    #[test]
    fn one_line_naming_the_subcommand() {
        assert_eq!(
            error_line("check --require nvlink"),
            "nvpeer check: invalid value 'nvlink' for '--require <PATH>' [possible values: any, dmabuf, peermem] (see `nvpeer check --help`)"
        );
        assert_eq!(
            error_line("detach --wait abc"),
            "nvpeer detach: invalid value 'abc' for '--wait <SECONDS>': invalid digit found in string (see `nvpeer detach --help`)"
        );
        assert!(error_line("").starts_with("nvpeer: a subcommand is required: check, topo,"));
        for cmdline in [
            "who --json --brief",
            "attach --module foo",
            "bench --bogus",
            "frobnicate",
        ] {
            let l = error_line(cmdline);
            assert!(
                !l.contains('\n') && !l.contains("Usage:") && !l.contains("tip:"),
                "{l}"
            );
        }
    }

    #[test]
    fn nagios_is_recognised_in_both_spellings() {
        assert!(nagios(&args("check --exit-codes nagios --bogus")));
        assert!(nagios(&args("check --exit-codes=nagios --bogus")));
        assert!(!nagios(&args("check --exit-codes default --bogus")));
    }
}
