// SPDX-License-Identifier: MIT OR Apache-2.0
//! `nvpeer check --facts FILE`: a saved `check --json` judged again gives the same verdicts in
//! every output form, and what is not such a report is one line and a non-zero exit.

use std::io::Write;
use std::process::{Command, Output, Stdio};

#[path = "../../nvpeer-core/tests/common/mod.rs"]
mod common;
use common::{fixture_names, fixtures};

fn nvpeer(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nvpeer"))
        .args(args)
        .output()
        .unwrap()
}

/// `nvpeer --sysfs-root/--procfs-root <fixture> check ARGS`.
fn on_fixture(name: &str, args: &[&str]) -> Output {
    let dir = fixtures().join(name);
    let (sys, proc) = (dir.join("sys"), dir.join("proc"));
    let mut all = vec![
        "--sysfs-root",
        sys.to_str().unwrap(),
        "--procfs-root",
        proc.to_str().unwrap(),
        "check",
    ];
    all.extend_from_slice(args);
    nvpeer(&all)
}

fn with_facts(file: &str, args: &[&str]) -> Output {
    let mut all = vec!["check", "--facts", file];
    all.extend_from_slice(args);
    nvpeer(&all)
}

#[test]
fn every_fixture_is_judged_again_from_its_saved_json() {
    let dir = tempfile::tempdir().unwrap();
    let names = fixture_names();
    assert!(names.len() >= 9, "{names:?}");
    for name in &names {
        let live = on_fixture(name, &["--json"]);
        let saved = dir.path().join(format!("{name}.json"));
        std::fs::write(&saved, &live.stdout).unwrap();
        let file = saved.to_str().unwrap();
        let again = with_facts(file, &["--json"]);
        assert_eq!(again.status.code(), live.status.code(), "{name}");
        let (mut a, mut b): (serde_json::Value, serde_json::Value) = (
            serde_json::from_slice(&live.stdout).unwrap(),
            serde_json::from_slice(&again.stdout).unwrap(),
        );
        // When each judged is its own; a well-formed UTC time in both.
        for r in [&mut a, &mut b] {
            let time = r.as_object_mut().unwrap().remove("time").unwrap();
            let time = time.as_str().unwrap();
            assert!(time.len() == 20 && time.ends_with('Z'), "{time}");
        }
        assert!(
            a["checks"].as_array().is_some_and(|c| c.len() > 10),
            "{name}"
        );
        assert_eq!(a["checks"], b["checks"], "{name}");
        assert_eq!(a, b, "{name}: the report differs beyond its checks");
        // The other forms and exit codes are the same as on the tree itself.
        for args in [
            &[][..],
            &["--brief"],
            &["--brief", "--strict"],
            &["--strict", "--exit-codes", "nagios"],
            &["--brief", "--exit-codes", "nagios"],
        ] {
            let (l, r) = (on_fixture(name, args), with_facts(file, args));
            assert_eq!(l.stdout, r.stdout, "{name} {args:?}");
            assert_eq!(l.status.code(), r.status.code(), "{name} {args:?}");
        }
    }
}

#[test]
fn facts_from_standard_input_and_bare_facts() {
    let live = on_fixture("doca", &["--json"]);
    let report: serde_json::Value = serde_json::from_slice(&live.stdout).unwrap();
    let bare = serde_json::to_vec(&report["facts"]).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_nvpeer"))
        .args(["check", "--facts", "-", "--json"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(&bare).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), live.status.code());
    let again: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(again["checks"], report["checks"]);
}

#[test]
fn what_is_not_a_check_report_is_one_line_and_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let topo = Command::new(env!("CARGO_BIN_EXE_nvpeer"))
        .arg("--sysfs-root")
        .arg(fixtures().join("pix/sys"))
        .args(["topo", "--json"])
        .output()
        .unwrap();
    let missing = dir.path().join("missing.json");
    for (name, content, says) in [
        ("garbage.json", Some(&b"not json\n"[..]), "not JSON"),
        (
            "topo.json",
            Some(&topo.stdout[..]),
            "not a nvpeer.check/2 report",
        ),
        (
            "empty.json",
            Some(&b"{}"[..]),
            "not a `nvpeer check --json` report",
        ),
        ("missing.json", None, "cannot read"),
        (
            "old.json",
            Some(&br#"{"schema": "nvpeer.check/1", "facts": {"modules": []}}"#[..]),
            "older than `check --facts`",
        ),
    ] {
        let path = dir.path().join(name);
        if let Some(c) = content {
            std::fs::write(&path, c).unwrap();
        } else {
            assert_eq!(path, missing);
        }
        let file = path.to_str().unwrap();
        let out = with_facts(file, &[]);
        assert_eq!(out.status.code(), Some(2), "{name}");
        assert!(out.stdout.is_empty(), "{name}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(err.lines().count(), 1, "{name}: {err}");
        assert!(
            err.starts_with("nvpeer check: --facts: ") && err.contains(says) && err.contains(file),
            "{name}: {err}"
        );
        // Nagios: UNKNOWN, with the reason on stdout.
        let out = with_facts(file, &["--exit-codes", "nagios"]);
        assert_eq!(out.status.code(), Some(3), "{name}");
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(
            text.starts_with("nvpeer: unknown: ") && text.lines().count() == 1,
            "{text}"
        );
    }
}

#[test]
fn a_real_hosts_report_from_before_issue_36_is_judged_with_what_it_lacks_said() {
    // `nvpeer check --json` of a real H200 host (580.159.04, no RDMA NIC), saved by a release
    // that gathered no GDRCopy, job-starter, process or platform facts.
    let file = fixtures().join("reports/h200-580-2026-12-05.json");
    let saved: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    let file = file.to_str().unwrap();
    let out = with_facts(file, &["--json"]);
    assert_eq!(out.status.code(), Some(1));
    let mut r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // `nvpeer.check/2` says whether the verdict is unknown; the saved /1 report could not.
    assert_eq!(r["verdict"]["unknown"], false);
    r["verdict"].as_object_mut().unwrap().remove("unknown");
    assert_eq!(
        r["verdict"], saved["verdict"],
        "the same verdict as on the host"
    );
    let row = |id: &str| {
        r["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["id"] == id)
            .unwrap_or_else(|| panic!("no {id}"))
            .clone()
    };
    for id in ["job_memlock", "gdrcopy"] {
        let c = row(id);
        assert_eq!(c["status"], "unknown", "{c}");
        assert!(c["detail"]
            .as_str()
            .unwrap()
            .starts_with("not examined: the facts have no"));
    }
    let g = row("gpu_gdr");
    assert_eq!(g["status"], "ok");
    assert!(g["detail"].as_str().unwrap().starts_with("GPU0 NVIDIA H200: no GeForce, vGPU or GB10 marker; Tegra, confidential VMs and MIG not examined"));
    // The real 580 params: neither GIN setting, said without --for gin, failed with it.
    let d = row("gin_driver");
    assert_eq!(d["status"], "ok");
    let gin = with_facts(file, &["--json", "--for", "gin"]);
    let r: serde_json::Value = serde_json::from_slice(&gin.stdout).unwrap();
    let d = r["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "gin_driver")
        .unwrap();
    assert_eq!(d["status"], "fail");
    assert_eq!(
        d["detail"],
        "driver settings missing: RegistryDwords \"\" has no PeerMappingOverride=1: the GPU may not map the NIC's doorbells; EnableStreamMemOPs is 0, not 1: no stream memory operations"
    );
}

/// Facts of an older nvpeer record `ibv_reg_dmabuf_mr` present (`"reg_dmabuf_mr": true`) but
/// not its symbol version (no `reg_dmabuf_mr_versioned`), which decides dma-buf for NCCL. On a
/// dma-buf-only host replayed with `--facts` that is an unknown verdict (exit 3 with `--brief`
/// under nagios codes too: never "not ready", never "ready"); the version recorded, it is ready.
#[test]
fn an_unversioned_reg_dmabuf_mr_in_older_facts_is_unknown_where_it_decides() {
    let live = on_fixture("inbox-dmabuf", &["--json"]);
    let report: serde_json::Value = serde_json::from_slice(&live.stdout).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let replay = |verbs: serde_json::Value| {
        let mut facts = report["facts"].clone();
        facts["verbs"] = verbs;
        let file = dir.path().join("facts.json");
        std::fs::write(&file, serde_json::to_vec(&facts).unwrap()).unwrap();
        let out = with_facts(file.to_str().unwrap(), &["--json"]);
        let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        (out.status.code(), r)
    };
    let device =
        serde_json::json!([{ "name": "mlx5_0", "dmabuf": { "result": "supported", "errno": 9 } }]);
    let (code, r) = replay(serde_json::json!({
        "state": "probed", "devices": device, "reg_dmabuf_mr": true
    }));
    assert_eq!(r["verdict"]["unknown"], true, "{}", r["verdict"]);
    assert_eq!(r["verdict"]["ready"], false);
    assert_ne!(code, Some(0));
    let dmabuf = r["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "dmabuf")
        .unwrap();
    assert_eq!(dmabuf["status"], "unknown", "{dmabuf}");
    assert!(dmabuf["detail"]
        .as_str()
        .unwrap()
        .contains("whether NCCL can load libibverbs' ibv_reg_dmabuf_mr is unknown"));
    let nccl = r["pairs"][0]["modes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["library"] == "nccl")
        .unwrap();
    assert_eq!(nccl["mode"], "net IB, unknown (GDR, dma-buf or staged)");
    // The same facts with the version recorded: ready over dma-buf.
    let (code, r) = replay(serde_json::json!({
        "state": "probed", "devices": device, "reg_dmabuf_mr": true,
        "reg_dmabuf_mr_versioned": true
    }));
    assert_eq!(r["verdict"]["text"], "ready (dma-buf)", "{}", r["verdict"]);
    assert_eq!(code, Some(0));
}

/// UCX and NVSHMEM do not load `ibv_reg_dmabuf_mr` by NCCL's symbol version: the inbox-dmabuf
/// fixture's facts replayed with the version not recorded (an older nvpeer) or recorded as not
/// `IBVERBS_1.12` leave NCCL unknown or staged, while UCX and NVSHMEM still register dma-bufs and
/// say that the version does not decide it for them.
#[test]
fn replayed_facts_judge_ucx_and_nvshmem_dma_buf_without_the_verb_version() {
    let live = on_fixture("inbox-dmabuf", &["--json"]);
    let report: serde_json::Value = serde_json::from_slice(&live.stdout).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let device =
        serde_json::json!([{ "name": "mlx5_0", "dmabuf": { "result": "supported", "errno": 9 } }]);
    for (versioned, nccl) in [
        (None, "net IB, unknown (GDR, dma-buf or staged)"),
        (Some(false), "net IB, staged"),
    ] {
        let mut facts = report["facts"].clone();
        facts["verbs"] = serde_json::json!({
            "state": "probed", "devices": device, "reg_dmabuf_mr": true
        });
        if let Some(v) = versioned {
            facts["verbs"]["reg_dmabuf_mr_versioned"] = serde_json::json!(v);
        }
        let file = dir.path().join("facts.json");
        std::fs::write(&file, serde_json::to_vec(&facts).unwrap()).unwrap();
        let out = with_facts(file.to_str().unwrap(), &["--json"]);
        let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let modes = r["pairs"][0]["modes"].as_array().unwrap();
        let of = |library: &str| {
            modes
                .iter()
                .find(|m| m["library"] == library)
                .unwrap_or_else(|| panic!("no {library} in {modes:?}"))
        };
        assert_eq!(of("nccl")["mode"], nccl, "{versioned:?}");
        assert_eq!(of("ucx")["mode"], "IB, GDR, dma-buf", "{versioned:?}");
        assert!(
            of("ucx")["decided_by"]
                .as_str()
                .unwrap()
                .contains("UCX calls ibv_reg_dmabuf_mr directly, by its default symbol"),
            "{}",
            of("ucx")
        );
        assert_eq!(of("nvshmem")["mode"], "proxy (IBRC)", "{versioned:?}");
        assert!(
            of("nvshmem")["decided_by"]
                .as_str()
                .unwrap()
                .contains("; dma-buf; NVSHMEM loads ibv_reg_dmabuf_mr by dlsym"),
            "{}",
            of("nvshmem")
        );
    }
}
