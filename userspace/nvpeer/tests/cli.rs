//! The binary's contract: exit codes, JSON schemas, no ANSI codes through a pipe.

use std::path::PathBuf;
use std::process::{Command, Output};

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
    assert!(stdout.lines().last().unwrap().starts_with("ready: "));
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
    assert_eq!(r["schema"], "nvpeer.check/1");
    assert_eq!(r["ready"], false);
    assert_eq!(r["checks"][0]["id"], "module");
    assert_eq!(r["checks"][0]["status"], "fail");
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
