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
    written.push(page.generate_to(dir).map_err(io_err(dir))?);
    Ok(())
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
