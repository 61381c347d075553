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
