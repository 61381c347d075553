// SPDX-License-Identifier: MIT OR Apache-2.0
//! `nvpeer __generate-docs OUTDIR`: man pages and shell completions from the clap definitions,
//! for packaging (`make install`, `make deb`). Not a subcommand of [`crate::Cli`], so neither the
//! pages nor the completions list it. Writes
//!   OUTDIR/man/man1/nvpeer.1 and nvpeer-<subcommand>.1 (clap_mangen, one page per subcommand),
//!   OUTDIR/completions/bash/nvpeer, OUTDIR/completions/zsh/_nvpeer,
//!   OUTDIR/completions/fish/nvpeer.fish (clap_complete).

use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::CommandFactory;
use clap_complete::Shell;

/// The first argument that selects the generator.
pub const ARG: &str = "__generate-docs";

#[derive(Debug, thiserror::Error)]
pub enum GenDocsError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> GenDocsError + '_ {
    move |source| GenDocsError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The completion files: shell, directory under OUTDIR/completions, file name.
const COMPLETIONS: [(Shell, &str, &str); 3] = [
    (Shell::Bash, "bash", "nvpeer"),
    (Shell::Zsh, "zsh", "_nvpeer"),
    (Shell::Fish, "fish", "nvpeer.fish"),
];

/// Writes the man pages and completions of `cmd` under `out`; returns the files written.
pub fn generate(cmd: clap::Command, out: &Path) -> Result<Vec<PathBuf>, GenDocsError> {
    let man = out.join("man").join("man1");
    fs::create_dir_all(&man).map_err(io_err(&man))?;
    let mut written = Vec::new();
    let mut built = cmd.clone().disable_help_subcommand(true);
    built.build();
    let source = format!("nvpeer {}", env!("CARGO_PKG_VERSION"));
    man_pages(&built, &source, &man, &mut written)?;
    written.sort();
    for (shell, dir, file) in COMPLETIONS {
        let dir = out.join("completions").join(dir);
        fs::create_dir_all(&dir).map_err(io_err(&dir))?;
        let path = dir.join(file);
        let mut buf = Vec::new();
        clap_complete::generate(shell, &mut cmd.clone(), "nvpeer", &mut buf);
        fs::write(&path, buf).map_err(io_err(&path))?;
        written.push(path);
    }
    Ok(written)
}

/// One page for `cmd` and for each of its visible subcommands, recursively (clap_mangen's
/// generate_to, with the version in every page's footer).
fn man_pages(
    cmd: &clap::Command,
    source: &str,
    dir: &Path,
    written: &mut Vec<PathBuf>,
) -> Result<(), GenDocsError> {
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        man_pages(sub, source, dir, written)?;
    }
    let page = clap_mangen::Man::new(cmd.clone())
        .source(source)
        .manual("nvpeer manual");
    let path = dir.join(page.get_filename());
    let mut roff = Vec::new();
    page.render(&mut roff).map_err(io_err(&path))?;
    roff.extend_from_slice(extra_sections(cmd.get_name()).as_bytes());
    fs::write(&path, roff).map_err(io_err(&path))?;
    written.push(path);
    Ok(())
}

/// Roff-escapes `-` (a minus sign in a command line, not a hyphen) and a leading `.` or `'`.
fn roff_text(line: &str) -> String {
    let line = line.replace('\\', "\\e").replace('-', "\\-");
    if line.starts_with(['.', '\'']) {
        format!("\\&{line}")
    } else {
        line
    }
}

/// One `.SH` section: paragraphs of text, or (`examples`) pairs of a comment and a command.
fn section(title: &str, body: &[&str]) -> String {
    let mut out = format!(".SH \"{title}\"\n");
    for item in body {
        out.push_str(".TP\n");
        match item.split_once(" :: ") {
            Some((head, text)) => out.push_str(&format!(
                "\\fB{}\\fR\n{}\n",
                roff_text(head),
                roff_text(text)
            )),
            None => out.push_str(&format!("{}\n", roff_text(item))),
        }
    }
    out
}

/// EXIT STATUS and EXAMPLES of page `name` (`nvpeer` or a subcommand), and for `check` the
/// row ids ([`nvpeer_core::check::CHECK_IDS`]). Each line is `head :: text`.
fn extra_sections(name: &str) -> String {
    let (status, examples): (&[&str], &[&str]) = match name {
        "check" => (
            &[
                "0 :: ready: no check failed (with --strict: none warned either)",
                "1 :: not ready: a check failed (with --strict: or warned)",
                "2 :: usage error or the host could not be read",
                "--exit-codes nagios :: 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN (the verdict rests on a fact that could not be read; usage errors stay 2)",
            ],
            &[
                "nvpeer check :: the rows that need attention and one line per GPU-NIC pair",
                "nvpeer check --all :: every row, ok ones too",
                "nvpeer check --brief --exit-codes nagios :: one Nagios plugin line",
                "nvpeer check --json > node.json && nvpeer check --facts node.json :: judge a saved report again",
                "nvpeer check --require dmabuf --expect-gpus 8 --expect-nics 8 :: fail unless dma-buf carries every pair and the node has its 8 GPUs and 8 NICs",
            ],
        ),
        "nccl-log" => (
            &[
                "0 :: every network connection was GDRDMA",
                "1 :: some or no connection was GDRDMA, or NCCL fell back to NET/Socket",
                "2 :: usage error or an unreadable file",
                "3 :: no NCCL lines in the file",
                "4 :: an NCCL log without a network connection",
            ],
            &["NCCL_DEBUG=INFO mpirun ... 2>&1 | tee run.log; nvpeer nccl-log run.log :: what NCCL said about GPUDirect RDMA"],
        ),
        "detach" => (
            &[
                "0 :: unloaded, or nothing to unload",
                "1 :: registrations are still live: their holders are named",
                "2 :: usage error or a failure to run",
            ],
            &["nvpeer detach --wait 30 && /etc/init.d/openibd restart :: unload before a network-stack reload"],
        ),
        "attach" => (
            &[
                "0 :: loaded, or nothing to attach to",
                "1 :: not loaded: a rebuild is needed, the file is not nvpeer's or there is none, or modprobe failed",
                "2 :: usage error or a failure to run",
            ],
            &["nvpeer attach --dry-run :: what it would do, loading nothing"],
        ),
        "selftest" => (
            &[
                "0 :: the registration went through the module",
                "1 :: a step failed",
                "2 :: usage error or a failure to run",
            ],
            &["nvpeer selftest :: allocate, register, move a verified pattern, deregister, compare counters"],
        ),
        "bench" => (
            &[
                "0 :: every transfer completed (and verified)",
                "1 :: received data did not verify, or a pair failed",
                "2 :: usage error or a failure to run",
            ],
            &[
                "nvpeer bench --mem cuda :: loopback from GPU memory on one device",
                "nvpeer bench --server & nvpeer bench HOST :: between two hosts over TCP",
            ],
        ),
        "who" => (
            &[
                "0 :: printed; also where no peer-memory module is loaded (nothing held, and why)",
                "2 :: usage error, records that cannot be read, or another's peer-memory module loaded (it keeps no records)",
            ],
            &[
                "sudo nvpeer who :: who holds pinned GPU memory",
                "sudo nvpeer who --brief :: one line for a drain reason or a log",
            ],
        ),
        "topo" => (
            &["0 :: printed", "2 :: usage error or a malformed sysfs file"],
            &["nvpeer topo --json :: the GPU x NIC matrix as JSON"],
        ),
        "stats" => (
            &["0 :: printed", "2 :: usage error or a malformed sysfs file"],
            &["nvpeer stats --format prometheus :: the counters for node_exporter"],
        ),
        _ => (
            &[
                "0 :: ready / success",
                "1 :: a check failed, or the command's own failure (see its page)",
                "2 :: usage error or a failure to run",
            ],
            &[
                "nvpeer check :: is this node ready for GPUDirect RDMA",
                "nvpeer topo :: the GPU x NIC topology",
            ],
        ),
    };
    let mut out = section("EXIT STATUS", status);
    out.push_str(&section("EXAMPLES", examples));
    if name == "check" {
        out.push_str(".SH \"CHECK IDS\"\n");
        out.push_str(&roff_text(&nvpeer_core::check::CHECK_IDS.join(", ")));
        out.push('\n');
    }
    out
}

/// When the command line is `nvpeer __generate-docs OUTDIR`, generates for `C` and returns the
/// exit code (0, or 2 with one line on stderr); otherwise None and main parses as usual.
pub fn intercept<C: CommandFactory>() -> Option<ExitCode> {
    let args: Vec<OsString> = std::env::args_os().collect();
    if args.get(1).map(|a| a == ARG) != Some(true) {
        return None;
    }
    let [_, _, out] = args.as_slice() else {
        eprintln!("nvpeer {ARG}: usage: nvpeer {ARG} OUTDIR");
        return Some(ExitCode::from(2));
    };
    match generate(C::command(), Path::new(out)) {
        Ok(files) => {
            for f in files {
                println!("{}", f.display());
            }
            Some(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!("nvpeer {ARG}: {e}");
            Some(ExitCode::from(2))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_pages_per_subcommand_and_completions() {
        let dir = tempfile::tempdir().expect("tempdir");
        let files = generate(crate::Cli::command(), dir.path()).expect("generate");
        let names: Vec<String> = files
            .iter()
            .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .collect();
        for want in [
            "nvpeer.1",
            "nvpeer-check.1",
            "nvpeer-stats.1",
            "nvpeer-bench.1",
            "nvpeer",
            "_nvpeer",
            "nvpeer.fish",
        ] {
            assert!(
                names.iter().any(|n| n == want),
                "{want} missing in {names:?}"
            );
        }
        assert!(!names.iter().any(|n| n.contains("help")), "{names:?}");
        let check = fs::read_to_string(dir.path().join("man/man1/nvpeer-check.1")).expect("page");
        assert!(
            check.starts_with(".ie"),
            "not roff: {}",
            &check[..40.min(check.len())]
        );
        assert!(check.contains("brief"), "check page lacks --brief");
        for want in [
            ".SH \"EXIT STATUS\"",
            ".SH \"EXAMPLES\"",
            ".SH \"CHECK IDS\"",
        ] {
            assert!(check.contains(want), "check page lacks {want}");
        }
        for id in nvpeer_core::check::CHECK_IDS {
            assert!(
                check.contains(&id.replace('-', "\\-")),
                "check page lacks {id}"
            );
        }
        assert!(
            check.contains("nagios"),
            "check page lacks its Nagios exit codes"
        );
        for page in files
            .iter()
            .filter(|p| p.extension().is_some_and(|e| e == "1"))
        {
            let text = fs::read_to_string(page).expect("page");
            assert!(
                text.contains(".SH \"EXIT STATUS\"") && text.contains(".SH \"EXAMPLES\""),
                "{} lacks EXIT STATUS or EXAMPLES",
                page.display()
            );
        }
        let bash = fs::read_to_string(dir.path().join("completions/bash/nvpeer")).expect("bash");
        assert!(bash.contains("complete -F") && bash.contains("nccl-log"));
        assert!(!bash.contains(ARG), "the generator must not be completed");
        let zsh = fs::read_to_string(dir.path().join("completions/zsh/_nvpeer")).expect("zsh");
        assert!(zsh.starts_with("#compdef nvpeer"));
        let fish = fs::read_to_string(dir.path().join("completions/fish/nvpeer.fish")).expect("f");
        assert!(fish.contains("complete -c nvpeer"));
    }

    #[test]
    fn unwritable_outdir_is_an_error_with_the_path() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("plain-file");
        fs::write(&file, "x").expect("write");
        let err = generate(crate::Cli::command(), &file).expect_err("must fail");
        assert!(err.to_string().contains("plain-file"), "{err}");
    }
}
