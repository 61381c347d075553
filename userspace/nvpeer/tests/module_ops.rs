//! `nvpeer who`, `detach` and `attach` through the binary, on temporary sysfs/procfs trees laid
//! out as the module's records interface says (kmod/README.md, "Operations"): exit codes, one
//! line on errors, the JSON schemas. The provenance verdict against real module files and kmod's
//! tools is tests/install/test-provenance.sh.

use std::path::Path;
use std::process::{Command, Output};

const HEADER: &str =
    "# id tgid comm cgroup gpu va bytes client nic state age_ms pin pin_bytes shares\n";
const UUID: &str = "GPU-d09b8d4e-daef-237f-dd2d-1f194bd911ab";

fn write(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

/// A host with our module loaded, `live` registrations counted, and these record lines.
fn host(live: u64, records: Option<&str>) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let s = dir.path().join("sys");
    write(
        &s,
        "module/nvidia_peermem/nvpeer/implementation",
        "nvpeer 0.2.0\n",
    );
    write(
        &s,
        "module/nvidia_peermem/nvpeer/stats/live_contexts",
        &format!("{live}\n"),
    );
    if let Some(r) = records {
        write(
            &s,
            "kernel/debug/nvidia_peermem/registrations",
            &format!("{HEADER}{r}"),
        );
    }
    std::fs::create_dir_all(dir.path().join("proc")).unwrap();
    dir
}

fn nvpeer(root: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nvpeer"))
        .arg("--sysfs-root")
        .arg(root.join("sys"))
        .arg("--procfs-root")
        .arg(root.join("proc"))
        .args(args)
        .output()
        .unwrap()
}

/// A usage error (clap's own message): exit 2, naming `want`.
fn usage(o: &Output, want: &str) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains(want), "{err}");
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Exit 2 (or `code`) and exactly one line on stderr containing `want`.
fn one_line(o: &Output, code: i32, want: &str) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(code), "stderr: {err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains(want), "{err}");
}

const TWO: &str = "1 4242 train /slurm/job_7/step_0 GPU-d09b8d4e-daef-237f-dd2d-1f194bd911ab 0x7f0000000000 2097152 nv_mem 0000:04:00.0 mapped 1500 3 2097152 2\n\
                   2 4242 train /slurm/job_7/step_0 GPU-d09b8d4e-daef-237f-dd2d-1f194bd911ab 0x7f0000000000 2097152 nv_mem 0000:05:00.0 mapped 1400 3 2097152 2\n\
                   3 5151 serve /system.slice/serve.service GPU-d09b8d4e-daef-237f-dd2d-1f194bd911ab 0x7e0000000000 65536 nv_mem_nc 0000:04:00.0 mapped 90 4 65536 1\n";

#[test]
fn who_names_both_processes_with_their_bytes_per_gpu() {
    let h = host(3, Some(TWO));
    // The GPU: its UUID at 0000:03:00.0 (driver), with a 256 MiB BAR1 (PCI), and an RDMA NIC.
    let s = h.path().join("sys");
    let dev = "devices/pci0000:00/0000:00:01.0/0000:03:00.0";
    write(&s, &format!("{dev}/vendor"), "0x10de\n");
    write(&s, &format!("{dev}/device"), "0x2335\n");
    write(&s, &format!("{dev}/class"), "0x030200\n");
    let bar = "0x0000000000000000 0x0000000000000000 0x0000000000000000\n";
    write(
        &s,
        &format!("{dev}/resource"),
        &format!("0x00000000e0000000 0x00000000e0ffffff 0x0000000000040200\n{bar}0x000000a000000000 0x000000a00fffffff 0x000000000014220c\n"),
    );
    std::fs::create_dir_all(s.join("bus/pci/devices")).unwrap();
    std::os::unix::fs::symlink(
        format!("../../../{dev}"),
        s.join("bus/pci/devices/0000:03:00.0"),
    )
    .unwrap();
    write(
        &h.path().join("proc"),
        "driver/nvidia/gpus/0000:03:00.0/information",
        &format!("GPU UUID: \t {UUID}\nBus Location: \t 0000:03:00.0\n"),
    );
    let o = nvpeer(h.path(), &["who"]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let text = stdout(&o);
    let line = |what: &str| {
        text.lines()
            .find(|l| l.starts_with(what))
            .unwrap_or_else(|| panic!("no {what} in\n{text}"))
            .split_whitespace()
            .collect::<Vec<_>>()
    };
    // Two registrations of one pin through two NICs: 4 MiB registered, 2 MiB pinned.
    assert_eq!(
        line("train[4242]"),
        [
            "train[4242]",
            "/slurm/job_7/step_0",
            "GPU0",
            "2",
            "4",
            "MiB",
            "2",
            "MiB",
            "0000:04:00.0,0000:05:00.0",
            "1.5",
            "s"
        ]
    );
    assert_eq!(line("serve[5151]")[3..6], ["1", "64", "KiB"]);
    // Per GPU: the records' distinct pins (2 MiB + 64 KiB) against BAR1.
    let gpu = line("GPU0  ");
    assert_eq!(
        gpu[..9],
        [
            "GPU0",
            "0000:03:00.0",
            UUID,
            "2.1",
            "MiB",
            "256",
            "MiB",
            "0.8%",
            "2"
        ]
    );
    assert!(
        text.ends_with("nvidia_peermem: 3 live registrations\n"),
        "{text}"
    );

    let j: serde_json::Value =
        serde_json::from_slice(&nvpeer(h.path(), &["who", "--json"]).stdout).unwrap();
    assert_eq!(j["schema"], "nvpeer.who/1");
    assert_eq!(j["registrations"], 3);
    assert_eq!(j["holders"][0]["comm"], "train");
    assert_eq!(j["holders"][0]["pinned_bytes"], 2097152);
    assert_eq!(j["gpus"][0]["bar1_bytes"], 256u64 << 20);
    assert_eq!(j["records"][2]["cgroup"], "/system.slice/serve.service");
    let b = stdout(&nvpeer(h.path(), &["who", "--brief"]));
    assert_eq!(
        b,
        "train[4242] in /slurm/job_7/step_0: 2 registrations, 2 MiB; serve[5151] in /system.slice/serve.service: 1 registration, 64 KiB\n"
    );
}

/// Issue 46: with no peer-memory module loaded (a dma-buf host) nothing can be held through
/// one: `who` says so and exits 0, in every form (a Slurm epilog reads "nothing held" there).
#[test]
fn who_says_nothing_is_held_without_a_peer_memory_module() {
    let bare = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(bare.path().join("sys/module/ib_core")).unwrap();
    std::fs::create_dir_all(bare.path().join("proc")).unwrap();
    let o = nvpeer(bare.path(), &["who"]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    assert!(o.stderr.is_empty(), "{o:?}");
    assert_eq!(
        stdout(&o),
        "nothing held: no peer-memory module loaded (neither nvidia_peermem nor nv_peer_mem)\n"
    );
    let o = nvpeer(bare.path(), &["who", "--brief"]);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(
        stdout(&o),
        "no registrations: no peer-memory module loaded\n"
    );
    let o = nvpeer(bare.path(), &["who", "--json"]);
    assert_eq!(o.status.code(), Some(0));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["schema"], "nvpeer.who/1");
    assert!(j["module"].is_null(), "{j}");
    assert_eq!(j["registrations"], 0);
    assert_eq!(j["holders"], serde_json::json!([]));
    assert!(j["notes"][0]
        .as_str()
        .unwrap()
        .starts_with("nothing held: no peer-memory module loaded"));
}

#[test]
fn who_refuses_clearly_when_there_are_no_records() {
    // Another's module may hold pins that it keeps no records of: that is not "nothing held".
    let foreign = tempfile::tempdir().unwrap();
    write(
        &foreign.path().join("sys"),
        "module/nvidia_peermem/version",
        "580.159.04\n",
    );
    std::fs::create_dir_all(foreign.path().join("proc")).unwrap();
    one_line(
        &nvpeer(foreign.path(), &["who"]),
        2,
        "nvidia_peermem is NVIDIA nvidia-peermem, which keeps no registration records",
    );
    let h = host(0, None);
    one_line(&nvpeer(h.path(), &["who"]), 2, "debugfs is not mounted at");
    write(&h.path().join("sys"), "kernel/debug/dri/0/name", "x\n");
    one_line(
        &nvpeer(h.path(), &["who"]),
        2,
        "keeps no registration records",
    );
    let h = host(1, Some("1 4242 train /slurm/job_7 GPU-x 0x7f00\n"));
    one_line(
        &nvpeer(h.path(), &["who", "--json"]),
        2,
        "line 2: 6 fields, the header has 14",
    );
    usage(
        &nvpeer(h.path(), &["who", "--json", "--brief"]),
        "cannot be used with",
    );
}

#[test]
fn who_pages_through_thousands_of_records() {
    let mut r = String::new();
    for i in 0..4000u64 {
        r.push_str(&format!(
            "{i} {} job{} /slurm/job_{} {UUID} 0x{:x} 65536 nv_mem 0000:04:00.0 mapped {i} {i} 65536 1\n",
            100 + i % 4,
            i % 4,
            i % 4,
            i << 16
        ));
    }
    let h = host(4000, Some(&r));
    let o = nvpeer(h.path(), &["who", "--json"]);
    assert_eq!(o.status.code(), Some(0));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["registrations"], 4000);
    assert_eq!(j["holders"].as_array().unwrap().len(), 4);
    assert_eq!(j["gpus"][0]["pinned_bytes"], 4000u64 * 65536);
}

#[test]
fn detach_unloads_only_what_is_free_and_names_the_holders() {
    // Another sysfs root than this host's: it would unload on this host, so --dry-run is required.
    let h = host(0, Some(""));
    one_line(&nvpeer(h.path(), &["detach"]), 2, "add --dry-run");
    one_line(&nvpeer(h.path(), &["attach"]), 2, "add --dry-run");
    let o = nvpeer(h.path(), &["detach", "--dry-run"]);
    assert_eq!(
        (o.status.code(), stdout(&o).as_str()),
        (
            Some(0),
            "nvpeer detach: would unload nvidia_peermem [dry run]\n"
        )
    );

    let h = host(3, Some(TWO));
    let o = nvpeer(h.path(), &["detach", "--dry-run", "--wait", "1"]);
    one_line(
        &o,
        1,
        "nvpeer detach: nvidia_peermem not unloaded: 3 live registrations: train[4242] in /slurm/job_7/step_0: 2 registrations, 2 MiB; serve[5151]",
    );
    let j: serde_json::Value =
        serde_json::from_slice(&nvpeer(h.path(), &["detach", "--dry-run", "--json"]).stdout)
            .unwrap();
    assert_eq!(
        (
            j["schema"].as_str(),
            j["result"].as_str(),
            j["live"].as_u64()
        ),
        (Some("nvpeer.detach/1"), Some("held"), Some(3))
    );
    assert!(j["line"].as_str().unwrap().contains("serve[5151]"));
    // The holders as `who --json` lists them, not only inside the line.
    let holders: Vec<(String, u64)> = j["holders"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            (
                h["comm"].as_str().unwrap().to_owned(),
                h["registrations"].as_u64().unwrap(),
            )
        })
        .collect();
    assert!(
        holders.contains(&("train".to_owned(), 2)) && holders.iter().any(|(c, _)| c == "serve"),
        "{holders:?}"
    );

    let bare = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(bare.path().join("sys")).unwrap();
    std::fs::create_dir_all(bare.path().join("proc")).unwrap();
    let o = nvpeer(bare.path(), &["detach", "--dry-run"]);
    assert_eq!(
        stdout(&o),
        "nvpeer detach: no peer-memory module is loaded: nothing to detach\n"
    );
    usage(
        &nvpeer(bare.path(), &["detach", "--wait", "99999"]),
        "99999",
    );
}

#[test]
fn attach_without_a_module_to_load_says_so() {
    let bare = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(bare.path().join("sys")).unwrap();
    write(
        &bare.path().join("proc"),
        "sys/kernel/osrelease",
        "7.2.0-test\n",
    );
    one_line(
        &nvpeer(bare.path(), &["attach", "--dry-run"]),
        1,
        "nvpeer attach: not loading nvidia_peermem: modprobe nvidia_peermem finds no such module for kernel 7.2.0-test",
    );
    let j: serde_json::Value = serde_json::from_slice(
        &nvpeer(
            bare.path(),
            &["attach", "--dry-run", "--json", "--module", "nv_peer_mem"],
        )
        .stdout,
    )
    .unwrap();
    assert_eq!(j["schema"], "nvpeer.attach/1");
    assert_eq!(j["module"], "nv_peer_mem");
    assert_eq!(j["result"], "refused");
    assert!(j["verdict"].is_null());
    // The kernel's own RDMA stack: no peer-memory core to attach to, nothing to do (exit 0).
    write(
        &bare.path().join("proc"),
        "kallsyms",
        "0000000000000000 T ib_umem_dmabuf_get\t[ib_core]\n",
    );
    let o = nvpeer(bare.path(), &["attach", "--dry-run"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(
        stdout(&o).starts_with("nvpeer attach: nothing exports ib_register_peer_memory_client"),
        "{}",
        stdout(&o)
    );
    let h = host(0, Some(""));
    let o = nvpeer(h.path(), &["attach", "--dry-run"]);
    assert_eq!(
        stdout(&o),
        "nvpeer attach: nvidia_peermem (nvpeer) is already loaded: nothing to do\n"
    );
    usage(
        &nvpeer(
            h.path(),
            &["attach", "--dry-run", "--module", "nvidia-peermem"],
        ),
        "invalid value",
    );
}
