//! `nvpeer nccl-log` through the binary: every fixture log's verdict, exit code, devices and
//! warnings, and standard input.

use std::path::PathBuf;
use std::process::{Command, Output};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(name)
}

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap()
}

fn stdout(out: &Output) -> String {
    String::from_utf8(out.stdout.clone()).unwrap()
}

/// One line on stderr, no panic.
fn one_line(out: &Output) -> String {
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    err
}

fn nccl_log(name: &str, json: bool) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_nvpeer"));
    c.arg("nccl-log").arg(fixture("nccl-logs").join(name));
    if json {
        c.arg("--json");
    }
    c.output().unwrap()
}

#[test]
fn nccl_log_fixtures() {
    // (file, exit code, verdict, net connections, GDRDMA ones, devices as (name, gdr, reason))
    type Dev<'a> = (&'a str, bool, Option<&'a str>);
    type Case<'a> = (&'a str, i32, &'a str, u64, u64, &'a [Dev<'a>]);
    let cases: [Case; 8] = [
        (
            "v2.9-old.log",
            1,
            "some",
            4,
            2,
            &[("mlx5_1", false, Some("no module"))],
        ),
        ("v2.18-all.log", 0, "all", 3, 3, &[]),
        (
            "v2.21-disabled.log",
            1,
            "none",
            3,
            0,
            &[("mlx5_0", false, None)],
        ),
        (
            "v2.27-mixed.log",
            1,
            "some",
            4,
            3,
            // One entry per device, however many lines announce it.
            &[("mlx5_0", true, None), ("mlx5_1", false, None)],
        ),
        (
            "v2.28-recent.log",
            0,
            "all",
            4,
            4,
            &[("mlx5_0", true, None), ("mlx5_1", true, None)],
        ),
        ("v2.18-socket.log", 1, "socket", 2, 0, &[]),
        // Not an NCCL log: its own exit code, not the one of "no GDR".
        ("empty.log", 3, "no_nccl_lines", 0, 0, &[]),
        ("no-nccl.log", 3, "no_nccl_lines", 0, 0, &[]),
    ];
    for (name, code, verdict, net, gdr, devices) in cases {
        let out = nccl_log(name, true);
        assert_eq!(out.status.code(), Some(code), "{name}");
        let r = json(&out);
        assert_eq!(r["schema"], "nvpeer.nccl-log/1");
        assert_eq!(r["summary"]["verdict"], verdict, "{name}");
        assert_eq!(r["summary"]["net_connections"], net, "{name}");
        assert_eq!(r["summary"]["gdr_connections"], gdr, "{name}");
        let got: Vec<_> = r["devices"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| (d["name"].clone(), d["gdr"].clone(), d["reason"].clone()))
            .collect();
        let want: Vec<_> = devices
            .iter()
            .map(|&(n, g, why)| {
                (
                    n.into(),
                    g.into(),
                    why.map_or(serde_json::Value::Null, Into::into),
                )
            })
            .collect();
        assert_eq!(got, want, "{name}");
        let text = stdout(&nccl_log(name, false));
        assert!(!text.contains("panicked"));
        assert!(
            text.lines().last().unwrap().contains(match verdict {
                "no_nccl_lines" => "no NCCL lines",
                "socket" => "RDMA not used: NCCL fell back to NET/Socket",
                _ => "GPU Direct RDMA used on",
            }),
            "{name}: {text}"
        );
    }
    let mixed = json(&nccl_log("v2.27-mixed.log", true));
    assert_eq!(mixed["devices"][0]["via"], "DMABUF");
    // NCCL WARN lines are reported, each once.
    assert_eq!(
        mixed["warnings"],
        serde_json::json!(["host1: Call to ibv_modify_qp failed with error Connection timed out"])
    );
    let socket = json(&nccl_log("v2.18-socket.log", true));
    assert_eq!(
        socket["warnings"],
        serde_json::json!(["host2: NET/IB : No device found, falling back to NET/Socket"])
    );
    assert!(stdout(&nccl_log("v2.18-socket.log", false))
        .contains("NCCL WARN host2: NET/IB : No device found, falling back to NET/Socket\n"));
    assert_eq!(mixed["connections"][3]["proxy_rank"], 0);
    assert_eq!(mixed["connections"][3]["pci"], true);
    assert_eq!(mixed["gpu_paths"][1]["distance"], 6);
    assert_eq!(mixed["summary"]["other_connections"], 1);
    let disabled = json(&nccl_log("v2.21-disabled.log", true));
    assert_eq!(disabled["summary"]["other_connections"], 2);
    let recent = json(&nccl_log("v2.28-recent.log", true));
    assert_eq!(recent["gpu_paths"][1]["pxn_via"], "GPU/0-102400");
    assert_eq!(recent["gpu_paths"][1]["gdr"], false);
    assert_eq!(recent["gpu_paths"][0]["mode"], "Default");
    assert_eq!(recent["connections"][3]["host"], "h200-b");
    let old = json(&nccl_log("v2.9-old.log", true));
    assert_eq!(old["connections"][0]["conn_index"], serde_json::Value::Null);
    assert_eq!(old["nccl_versions"][0], "2.9.9+cuda11.3");
    let missing = nccl_log("does-not-exist.log", false);
    assert_eq!(missing.status.code(), Some(2));
    one_line(&missing);
}

#[test]
fn nccl_log_reads_stdin() {
    let file = std::fs::File::open(fixture("nccl-logs").join("v2.18-all.log")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_nvpeer"))
        .args(["nccl-log", "-", "--json"])
        .stdin(file)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(json(&out)["source"], "-");
}

/// `nccl-log --help` says what it reads and every exit status in whole sentences (issue 46:
/// its one-paragraph text lost its last word and period, "exit 0 only when every network
/// connection was"); `nvpeer --help` lists it on one short line.
#[test]
fn nccl_log_help_has_whole_sentences() {
    let out = Command::new(env!("CARGO_BIN_EXE_nvpeer"))
        .args(["nccl-log", "--help"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let help = stdout(&out);
    let text: Vec<&str> = help.split("\n\n").take(3).collect();
    assert_eq!(
        text[0],
        "Read an NCCL_DEBUG=INFO log: did NCCL use GPU Direct RDMA, per NET device and per \
         connection"
    );
    assert!(
        text[1].starts_with("Per NET device") && text[1].ends_with("and NCCL's warnings."),
        "{help}"
    );
    assert_eq!(
        text[2].split_whitespace().collect::<Vec<_>>().join(" "),
        "Exit status: 0 when every network connection was GDRDMA; 1 when some or none was (or \
         NCCL fell back to NET/Socket); 2 for a usage error or an unreadable file; 3 for a file \
         without NCCL lines; 4 for an NCCL log without a network connection.",
        "{help}"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_nvpeer"))
        .arg("--help")
        .output()
        .unwrap();
    let line = stdout(&out)
        .lines()
        .find(|l| l.trim_start().starts_with("nccl-log"))
        .map(str::to_owned)
        .unwrap();
    assert!(
        line.ends_with("did NCCL use GPU Direct RDMA, per NET device and per connection"),
        "{line}"
    );
}
