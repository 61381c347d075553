//! The binary's contract: exit codes, JSON schemas, no ANSI codes through a pipe.

use std::path::PathBuf;
use std::process::{Command, Output};

#[path = "../../nvpeer-core/tests/common/mod.rs"]
mod common;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(name)
}

fn nvpeer_on(name: &str, args: &[&str]) -> Output {
    let dir = fixture(name);
    Command::new(env!("CARGO_BIN_EXE_nvpeer"))
        .arg("--sysfs-root")
        .arg(dir.join("sys"))
        .arg("--procfs-root")
        .arg(dir.join("proc"))
        .args(args)
        .output()
        .unwrap()
}

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn check_exit_codes() {
    let ready = nvpeer_on("pix", &["check"]);
    assert_eq!(
        ready.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&ready.stdout)
    );
    let stdout = String::from_utf8(ready.stdout).unwrap();
    assert!(!stdout.contains('\x1b'), "ANSI codes in a pipe");
    assert_eq!(
        stdout.lines().last().unwrap(),
        "ready (dma-buf and peer memory)"
    );
    // The rows that are not ok, one line per pair; `--all` every row.
    assert!(!stdout.lines().any(|l| l.starts_with("ok       gpus ")));
    assert!(stdout.lines().any(|l| l.starts_with("warn     acs ")));
    assert!(stdout
        .lines()
        .any(|l| l.starts_with("ok       GPU0-mlx5_0 ") && l.contains("0000:03:00.0")));
    let all = String::from_utf8(nvpeer_on("pix", &["check", "--all"]).stdout).unwrap();
    assert!(all.lines().any(|l| l.starts_with("ok       gpus ")));
    assert!(all.lines().any(|l| l.starts_with("ok       gin_umem ")));
    assert_eq!(nvpeer_on("two-loaded", &["check"]).status.code(), Some(1));
    assert_eq!(
        nvpeer_on("pix", &["check", "--bogus"]).status.code(),
        Some(2)
    );
}

#[test]
fn json_schemas() {
    let check = nvpeer_on("two-loaded", &["check", "--json"]);
    assert_eq!(check.status.code(), Some(1));
    let r = json(&check);
    assert_eq!(r["schema"], "nvpeer.check/2");
    assert_eq!(r["ready"], false);
    let module = r["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "module")
        .unwrap();
    assert_eq!(module["status"], "fail");
    assert!(r["verdict"]["text"]
        .as_str()
        .unwrap()
        .starts_with("not ready: "));
    let t = json(&nvpeer_on("sys", &["topo", "--json"]));
    assert_eq!(t["schema"], "nvpeer.topo/1");
    assert_eq!(t["links"].as_array().unwrap().len(), 4);
    let s = json(&nvpeer_on("pix", &["stats", "--json"]));
    assert_eq!(s["schema"], "nvpeer.stats/1");
    assert_eq!(s["module"], "nvidia_peermem");
}

#[test]
fn broken_files_exit_2_naming_the_file() {
    for cmd in ["topo", "stats"] {
        let out = nvpeer_on("malformed", &[cmd]);
        assert_eq!(out.status.code(), Some(2), "{cmd}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(
            err.starts_with(&format!("nvpeer {cmd}: ")) && err.contains("unexpected content"),
            "{err}"
        );
        assert!(!err.contains("panicked"), "{err}");
    }
}

fn nvpeer_env(env: &[(&str, &str)], args: &[&str]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_nvpeer"));
    for (k, v) in env {
        c.env(k, v);
    }
    c.args(args).output().unwrap()
}

/// One line on stderr, no panic.
fn one_line(out: &Output) -> String {
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    err
}

#[test]
fn bench_without_libibverbs_says_so() {
    let out = nvpeer_env(
        &[("NVPEER_LIBIBVERBS", "libibverbs-absent.so.1")],
        &["bench", "-n", "2"],
    );
    assert_eq!(out.status.code(), Some(2));
    let err = one_line(&out);
    assert!(
        err.starts_with("nvpeer bench: libibverbs unavailable: cannot load libibverbs-absent.so.1"),
        "{err}"
    );
}

/// A usage error of any subcommand is one line naming it and exit 2 (clap alone prints the usage
/// and a tip on several lines); under `check --exit-codes nagios` exit 3 (UNKNOWN) with the line
/// on stdout too; `--help` and `--version` still print and exit 0.
#[test]
fn usage_errors_are_one_line_and_exit_2() {
    for (args, starts) in [
        (
            &["detach", "--wait", "abc"][..],
            "nvpeer detach: invalid value 'abc' for '--wait",
        ),
        (
            &["who", "--json", "--brief"],
            "nvpeer who: the argument '--json' cannot be used with '--brief'",
        ),
        (
            &["attach", "--module", "foo"],
            "nvpeer attach: invalid value 'foo' for '--module",
        ),
        (
            &["check", "--require", "nvlink"],
            "nvpeer check: invalid value 'nvlink' for '--require",
        ),
        (
            &["bench", "--loopback-all", "--bogus"],
            "nvpeer bench: unexpected argument '--bogus' found",
        ),
        (
            &["stats", "--watch", "0"],
            "nvpeer stats: invalid value '0' for '--watch",
        ),
        (
            &["topo", "extra"],
            "nvpeer topo: unexpected argument 'extra' found",
        ),
        (&[], "nvpeer: a subcommand is required: check, topo"),
    ] {
        let out = nvpeer_env(&[], args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(out.stdout.is_empty(), "{args:?}");
        let err = one_line(&out);
        assert!(err.starts_with(starts), "{args:?}: {err}");
    }
    let out = nvpeer_env(
        &[],
        &["check", "--exit-codes", "nagios", "--require", "nvlink"],
    );
    assert_eq!(out.status.code(), Some(3));
    assert!(one_line(&out).starts_with("nvpeer check: invalid value 'nvlink'"));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.starts_with("nvpeer: unknown: nvpeer check: invalid value")
            && text.lines().count() == 1,
        "{text}"
    );
    for args in [&["--version"][..], &["check", "--help"], &["help", "who"]] {
        let out = nvpeer_env(&[], args);
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        assert!(!out.stdout.is_empty() && out.stderr.is_empty(), "{args:?}");
    }
}

#[test]
fn bench_malformed_arguments_are_usage_errors() {
    for args in [
        &["bench", "-s", "0"][..],
        &["bench", "-s", "12Q"],
        &["bench", "-s", "2G"],
        &["bench", "--op", "atomic"],
        &["bench", "-n", "0"],
        &["bench", "-t", "0"],
        &["bench", "--server", "somehost"],
        &["bench", "--all", "-s", "4096"],
        &["selftest", "--size", "0"],
    ] {
        let out = nvpeer_env(&[], args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(!String::from_utf8_lossy(&out.stderr).contains("panicked"));
    }
    let out = nvpeer_env(&[], &["bench", "--mtu", "1000"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(one_line(&out).contains("--mtu 1000: use 256, 512, 1024, 2048 or 4096"));
}

#[test]
fn bench_flags_of_issue_35_refuse_what_they_do_not_fit() {
    // clap's own refusals: --no-validate without --loopback-all, --plot with it, a bad mapping.
    for args in [
        &["bench", "--no-validate"][..],
        &[
            "bench",
            "--loopback-all",
            "--mem",
            "host",
            "--plot",
            "x.svg",
        ],
        &["bench", "--loopback-all", "--validate", "--no-validate"],
        &["bench", "--reg", "dmabuf", "--dmabuf-mapping", "c2c"],
    ] {
        let out = nvpeer_env(&[], args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(!String::from_utf8_lossy(&out.stderr).contains("panicked"));
    }
    // The PCIe mapping type is a dma-buf export's: one line, before anything is opened.
    for extra in [&[][..], &["--loopback-all"]] {
        let mut args = vec!["bench", "--mem", "cuda", "--dmabuf-mapping", "pcie"];
        args.extend_from_slice(extra);
        let out = nvpeer_env(&[], &args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert_eq!(
            one_line(&out).trim_end(),
            "nvpeer bench: --dmabuf-mapping is the mapping type of a dma-buf export: it needs --reg dmabuf"
        );
    }
}

#[test]
fn bench_plot_into_a_missing_directory_says_so() {
    // No RDMA device here (or none reachable): with --compare-staged on host memory the staging
    // copies are still measured and plotted, so the plot's own write error must surface.
    let out = nvpeer_env(
        &[("NVPEER_LIBIBVERBS", "libibverbs-absent.so.1")],
        &[
            "bench",
            "-s",
            "4096",
            "--compare-staged",
            "--plot",
            "/nonexistent/dir/p.svg",
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.lines()
            .any(|l| l.starts_with("nvpeer bench: --plot /nonexistent/dir/p.svg: ")),
        "{err}"
    );
}

#[test]
fn bench_plot_without_an_rdma_device_draws_the_staging_copies() {
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("copies.svg");
    let out = nvpeer_env(
        &[("NVPEER_LIBIBVERBS", "libibverbs-absent.so.1")],
        &[
            "bench",
            "-a",
            "--compare-staged",
            "--plot",
            svg.to_str().unwrap(),
        ],
    );
    // The transfer could not run (exit 2, the libibverbs line last), the copies were plotted.
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.lines()
            .last()
            .unwrap_or_default()
            .starts_with("nvpeer bench: libibverbs unavailable"),
        "{err}"
    );
    let d = common::svg::Drawn::read(&std::fs::read_to_string(&svg).unwrap());
    assert_eq!(
        d.missing(
            &[(
                nvpeer_core::commands::bench::plot::COPY,
                common::svg::FIRST,
                23
            )],
            None
        ),
        None,
        "{:?}",
        d.texts
    );
    assert!(
        d.has_text("no RDMA transfer: no libibverbs"),
        "{:?}",
        d.texts
    );
    assert!(d.has_text("8 MiB"), "{:?}", d.texts);
}

#[test]
fn bench_cuda_without_a_driver_says_so() {
    // This machine has no NVIDIA driver: the check happens before any cudarc call (which
    // would panic).
    if std::path::Path::new("/dev/nvidiactl").exists() {
        return;
    }
    let out = nvpeer_env(&[], &["bench", "--mem", "cuda", "-n", "2"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(one_line(&out).contains("CUDA: cannot load libcuda.so"));
}

#[test]
fn selftest_on_a_bare_host_fails_precisely() {
    if std::path::Path::new("/dev/nv_p2p_sim").exists()
        || std::path::Path::new("/dev/nvidiactl").exists()
    {
        return;
    }
    let out = nvpeer_on("pix", &["selftest", "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let r = json(&out);
    assert_eq!(r["schema"], "nvpeer.selftest/1");
    assert_eq!(r["passed"], false);
    let steps = r["steps"].as_array().unwrap();
    let gpu = steps.iter().find(|s| s["name"] == "gpu_memory").unwrap();
    assert_eq!(gpu["status"], "fail");
    assert!(gpu["detail"]
        .as_str()
        .unwrap()
        .contains("no GPU memory to test"));
}

fn stdout(out: &Output) -> String {
    String::from_utf8(out.stdout.clone()).unwrap()
}

/// Every fixture tree: `check --brief` is exactly one line, the same one twice, and agrees
/// with the exit code.
#[test]
fn brief_is_one_line_on_every_fixture() {
    let dir = fixture("");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if !path.join("sys").is_dir() {
            continue;
        }
        let name = path.file_name().unwrap().to_str().unwrap().to_owned();
        for strict in [false, true] {
            let mut args = vec!["check", "--brief"];
            if strict {
                args.push("--strict");
            }
            let started = std::time::Instant::now();
            let out = nvpeer_on(&name, &args);
            assert!(
                started.elapsed() < std::time::Duration::from_secs(5),
                "{name}"
            );
            let text = stdout(&out);
            assert_eq!(text.lines().count(), 1, "{name}: {text}");
            assert!(
                text.ends_with('\n') && !text.contains('\x1b'),
                "{name}: {text:?}"
            );
            assert_eq!(
                text,
                stdout(&nvpeer_on(&name, &args)),
                "{name}: not deterministic"
            );
            match out.status.code() {
                Some(0) => assert!(text.starts_with("nvpeer: ready ("), "{name}: {text}"),
                // Degraded: every pair used, one over a link that trained down (named).
                Some(1) => assert!(
                    text.starts_with("nvpeer: not ready: ")
                        || (!strict && text.starts_with("nvpeer: degraded: gdr_used (GPU")),
                    "{name}: {text}"
                ),
                c => panic!("{name}: exit {c:?}"),
            }
        }
        seen += 1;
    }
    assert!(
        seen >= 5,
        "only {seen} fixture trees under {}",
        dir.display()
    );
}

#[test]
fn brief_names_the_failing_checks() {
    let out = nvpeer_on("two-loaded", &["check", "--brief"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stdout(&out).starts_with("nvpeer: not ready: gpus (none), ")
            && stdout(&out).ends_with(", module (2 loaded)\n"),
        "{}",
        stdout(&out)
    );
    // pix has warnings (acs, core_bugs) but no failure: ready, unless --strict.
    let out = nvpeer_on("pix", &["check", "--brief"]);
    assert_eq!(
        (out.status.code(), stdout(&out).as_str()),
        (Some(0), "nvpeer: ready (dma-buf and peer memory)\n")
    );
    let strict = nvpeer_on("pix", &["check", "--brief", "--strict"]);
    assert_eq!(strict.status.code(), Some(1));
    // This process's memlock limit is not the tree's: --strict no longer depends on the shell.
    assert_eq!(stdout(&strict), "nvpeer: not ready: acs (P2P redirected)\n");
    assert_eq!(
        nvpeer_on("pix", &["check", "--strict"]).status.code(),
        Some(1)
    );
    // --brief is text only.
    let both = nvpeer_on("pix", &["check", "--brief", "--json"]);
    assert_eq!(both.status.code(), Some(2));
    assert!(both.stdout.is_empty());
    one_line(&both);
}

#[test]
fn nagios_exit_codes() {
    // pix warns (and fails nothing), two-loaded fails; nagios 0 needs a host without warnings,
    // which the unit tests of the mapping cover.
    let code = |name: &str, extra: &[&str]| {
        let mut args = vec!["check", "--brief", "--exit-codes", "nagios"];
        args.extend_from_slice(extra);
        nvpeer_on(name, &args).status.code()
    };
    assert_eq!(code("pix", &[]), Some(1));
    assert_eq!(code("pix", &["--strict"]), Some(2));
    assert_eq!(code("two-loaded", &[]), Some(2));
    // Issue 46: the ready hosts of the acceptance list are OK, also under --strict, in the
    // plugin format; a warning is named in the WARNING line.
    for name in ["doca", "gh200", "inbox-dmabuf", "gb300"] {
        for strict in [&[][..], &["--strict"][..]] {
            assert_eq!(code(name, strict), Some(0), "{name} {strict:?}");
        }
        let out = nvpeer_on(name, &["check", "--brief", "--exit-codes", "nagios"]);
        let line = stdout(&out);
        assert!(
            line.starts_with("NVPEER OK - ready (") && line.contains(" | ok="),
            "{name}: {line}"
        );
        assert!(
            line.trim_end().ends_with("warn=0 unknown=0 fail=0"),
            "{line}"
        );
    }
    let pix = stdout(&nvpeer_on(
        "pix",
        &["check", "--brief", "--exit-codes", "nagios"],
    ));
    assert!(
        pix.starts_with(
            "NVPEER WARNING - ready (dma-buf and peer memory); warn: acs (P2P redirected) | ok="
        ),
        "{pix}"
    );
    let port_down = stdout(&nvpeer_on(
        "port-down",
        &["check", "--brief", "--exit-codes", "nagios"],
    ));
    assert!(
        port_down.starts_with(
            "NVPEER CRITICAL - not ready: gdr_used (GPU0-mlx5_0 not used: no ACTIVE port) | "
        ),
        "{port_down}"
    );
    assert_eq!(
        nvpeer_on("pix", &["check", "--exit-codes", "default"])
            .status
            .code(),
        Some(0)
    );
    let missing = Command::new(env!("CARGO_BIN_EXE_nvpeer"))
        .args([
            "--sysfs-root",
            "/nonexistent/sys",
            "check",
            "--brief",
            "--exit-codes",
            "nagios",
        ])
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(3));
    assert!(stdout(&missing).starts_with("nvpeer: unknown: --sysfs-root /nonexistent/sys"));
    assert_eq!(stdout(&missing).lines().count(), 1);
}

/// `check --brief --exit-codes nagios` on the trees below `root`: exit code and the line.
fn nagios_line(root: &std::path::Path) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_nvpeer"))
        .arg("--sysfs-root")
        .arg(root.join("sys"))
        .arg("--procfs-root")
        .arg(root.join("proc"))
        .args(["check", "--brief", "--exit-codes", "nagios"])
        .output()
        .unwrap();
    (out.status.code(), stdout(&out))
}

/// Issue 46: in the Nagios line an `unknown` row is named as unknown, not as a warning (efa and
/// mana are ready with `silent_failures` unknown; the state stays WARNING: the verdict is ready).
#[test]
fn nagios_names_unknown_rows_unknown() {
    let (code, efa) = nagios_line(&fixture("efa"));
    assert_eq!(code, Some(1), "{efa}");
    assert!(
        efa.starts_with(
            "NVPEER WARNING - ready (EFA); warn: gin_gdrcopy (GDRCopy not usable); unknown: silent_failures (vm_bar_mapping) | "
        ),
        "{efa}"
    );
    let (code, mana) = nagios_line(&fixture("mana"));
    assert_eq!(code, Some(1), "{mana}");
    assert!(
        mana.starts_with(
            "NVPEER WARNING - ready (dma-buf); unknown: silent_failures (mana_dmabuf) | "
        ),
        "{mana}"
    );
    for l in [&efa, &mana] {
        assert!(l.trim_end().ends_with(" unknown=1 fail=0"), "{l}");
    }
}

/// Issue 46: a reason cut from a detail ends at a word boundary, never inside a word: a GPU's
/// model made long (`NVIDIA A100-SXM4-80GB`, which a cut at 40 characters made `NVIDIA A10`,
/// another GPU), with a bridge's `vendor` unreadable so that `gpus` is unknown on a ready host
/// and named in the Nagios line by the first clause of its detail.
#[test]
fn nagios_cuts_a_long_model_between_words() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    common::trees::copy_tree(&fixture("inbox-dmabuf"), root);
    let info = common::trees::first_information(&root.join("proc"));
    let text = std::fs::read_to_string(&info)
        .unwrap()
        .replace("NVIDIA H200", "NVIDIA A100-SXM4-80GB");
    std::fs::write(&info, text).unwrap();
    std::fs::write(
        root.join("sys/bus/pci/devices/0000:02:01.0/vendor"),
        "zzz\n",
    )
    .unwrap();
    let (code, long) = nagios_line(root);
    assert_eq!(code, Some(1), "{long}");
    assert!(
        long.starts_with(
            "NVPEER WARNING - ready (dma-buf); unknown: gpus (GPU0 0000:03:00.0 [10de:2335] NVIDIA…) | "
        ),
        "{long}"
    );
    assert!(!long.contains("A10…"), "{long}");
}

/// Review R2: a tree that is not this host's, by either root, gets neither the libibverbs
/// probe nor this process's memlock limit (they describe another host); `--as-job` measures the
/// limit still (the caller is the job judged).
#[test]
fn another_hosts_tree_is_not_probed_from_this_one() {
    let dir = fixture("inbox-dmabuf");
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_nvpeer"))
            .args(args)
            .args(["check", "--json"])
            .output()
            .unwrap();
        json(&out)["facts"].clone()
    };
    let proc_only = run(&["--procfs-root", dir.join("proc").to_str().unwrap()]);
    assert_eq!(
        proc_only["verbs"]["state"], "skipped",
        "{}",
        proc_only["verbs"]
    );
    assert_eq!(proc_only["verbs"]["reason"], "--procfs-root is not /proc");
    assert!(proc_only["memlock"].is_null(), "{}", proc_only["memlock"]);
    let both = [
        "--sysfs-root",
        dir.join("sys").to_str().unwrap(),
        "--procfs-root",
        dir.join("proc").to_str().unwrap(),
    ]
    .map(str::to_owned);
    let both: Vec<&str> = both.iter().map(String::as_str).collect();
    let tree = run(&both);
    assert_eq!(tree["verbs"]["reason"], "--sysfs-root is not /sys");
    assert!(tree["memlock"].is_null());
    let out = nvpeer_on("inbox-dmabuf", &["check", "--json", "--as-job"]);
    assert!(!json(&out)["facts"]["memlock"].is_null());
}
