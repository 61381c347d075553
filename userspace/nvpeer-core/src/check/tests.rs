// SPDX-License-Identifier: MIT OR Apache-2.0
//! Checks on small sysfs/procfs trees built in each test: gather and judge together.

use super::*;
use crate::host::Host;
use std::fs;

fn write(root: &std::path::Path, rel: &str, content: &str) {
    let p = root.join(rel);
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(p, content).unwrap();
}

/// The report of the tree; every one is judged again from its JSON to the same checks.
fn run_on(sys: &std::path::Path, proc: &std::path::Path) -> Report {
    let report = run(
        &Host::new(sys, proc),
        &Inputs::fixture(),
        &Options::default(),
    );
    let json = serde_json::to_vec(&report).unwrap();
    let facts = parse_facts(&json, "report.json").unwrap();
    assert_eq!(judge(&facts, &Options::default()).checks, report.checks);
    report
}

#[test]
fn empty_host_fails_with_a_fix_for_each_missing_piece() {
    let sys = tempfile::tempdir().unwrap();
    let report = run_on(sys.path(), std::path::Path::new("/nonexistent"));
    assert_eq!(report.status, Status::Fail);
    assert!(!report.ready);
    assert_eq!(report.schema, "nvpeer.check/2");
    for id in [
        "module",
        "peer_clients",
        "nvidia_driver",
        "ib_core",
        "rdma_devices",
        "gpus",
        "nccl",
        "ucx",
    ] {
        assert_eq!(report.get(id).unwrap().status, Status::Fail, "{id}");
    }
    for c in &report.checks {
        if c.status != Status::Ok {
            assert!(c.fix.is_some(), "{} has no fix", c.id);
        }
    }
}

#[test]
fn recognises_our_module_and_the_stand_ins() {
    let sys = tempfile::tempdir().unwrap();
    let proc = tempfile::tempdir().unwrap();
    let s = sys.path();
    write(s, "module/nvidia_peermem/version", "0.1.0\n");
    write(
        s,
        "module/nvidia_peermem/nvpeer/implementation",
        "nvpeer 0.1.0\n",
    );
    write(
        s,
        "module/nvidia_peermem/parameters/peerdirect_support",
        "0\n",
    );
    write(
        s,
        "module/nvidia_peermem/parameters/persistent_api_support",
        "1\n",
    );
    write(s, "module/nv_p2p_sim/parameters/api", "535\n");
    write(
        s,
        "module/peer_core_sim/parameters/generation",
        "5x-unmaps\n",
    );
    write(s, "module/peer_core_sim/parameters/sysfs", "Y\n");
    write(s, "kernel/mm/memory_peers/nv_mem/version", "0.1.0\n");
    write(s, "class/infiniband/rxe0/ports/1/state", "4: ACTIVE\n");
    write(s, "class/infiniband/rxe0/ports/1/link_layer", "Ethernet\n");
    write(
            proc.path(),
            "kallsyms",
            "0 T nvidia_p2p_get_pages\t[nv_p2p_sim]\n0 T nvidia_p2p_get_pages_persistent\t[nv_p2p_sim]\n\
             0 T ib_register_peer_memory_client\t[peer_core_sim]\n",
        );
    let report = run_on(s, proc.path());
    let status = |id: &str| report.get(id).unwrap().status;
    let detail = |id: &str| report.get(id).unwrap().detail.clone();
    assert_eq!(status("module"), Status::Ok, "{:?}", report.get("module"));
    assert!(detail("module").contains("nvpeer 0.1.0 loaded as nvidia_peermem"));
    assert_eq!(status("parameters"), Status::Ok);
    assert_eq!(status("peer_clients"), Status::Ok);
    assert!(detail("peer_clients").contains("nv_mem 0.1.0"));
    assert_eq!(status("nvidia_driver"), Status::Ok);
    assert!(detail("nvidia_driver").contains("nv_p2p_sim (test stand-in"));
    assert!(detail("nvidia_driver").contains("nvidia_p2p_get_pages_persistent"));
    assert_eq!(status("ib_core"), Status::Ok);
    assert!(detail("ib_core").contains("peer_core_sim (test stand-in"));
    assert!(detail("ib_core").contains("generation 5x-unmaps"));
    assert_eq!(status("rdma_devices"), Status::Ok);
    for id in ["nccl", "ucx"] {
        assert_eq!(status(id), Status::Ok, "{id}");
    }
    // No GPU in this tree: that is the only failure (and so no GPU-NIC pair).
    let failed: Vec<&str> = report
        .checks
        .iter()
        .filter(|c| c.status == Status::Fail)
        .map(|c| c.id)
        .collect();
    assert_eq!(failed, ["gpus", "paths"]);
    assert_eq!(report.verdict.text, "not ready: gpus (none)");
}

/// `peerdirect_support=0` on a 4.1-5.0 core: NVIDIA's module registers a client that core
/// misreads (a failure); ours detects the core and follows it (fine, said so).
#[test]
fn contradicting_peerdirect_support_fails_only_for_modules_that_obey_it() {
    for (marker, want) in [(Some("nvpeer 0.1.0\n"), Status::Ok), (None, Status::Fail)] {
        let sys = tempfile::tempdir().unwrap();
        let proc = tempfile::tempdir().unwrap();
        let s = sys.path();
        write(s, "module/nvidia_peermem/version", "0.1.0\n");
        if let Some(m) = marker {
            write(s, "module/nvidia_peermem/nvpeer/implementation", m);
            write(s, "module/nvidia_peermem/nvpeer/core", "4x\n");
        }
        write(
            s,
            "module/nvidia_peermem/parameters/peerdirect_support",
            "0\n",
        );
        write(s, "module/ib_core/version", "4.9-7.1.0.0\n");
        write(
                proc.path(),
                "kallsyms",
                "0 T ib_register_peer_memory_client\t[ib_core]\n0 T ib_get_peer_private_data\t[ib_core]\n",
            );
        let report = run_on(s, proc.path());
        let p = report.get("parameters").unwrap();
        assert_eq!(p.status, want, "{marker:?}: {}", p.detail);
        if marker.is_some() {
            assert!(p.detail.contains("nvpeer follows"), "{}", p.detail);
        }
    }
}

#[test]
fn memory_peers_off_warns_and_older_nccl_loses_detection() {
    let sys = tempfile::tempdir().unwrap();
    let s = sys.path();
    write(s, "module/nvidia_peermem/version", "0.1.0\n");
    write(
        s,
        "module/nvidia_peermem/nvpeer/implementation",
        "nvpeer 0.1.0\n",
    );
    write(s, "module/nvidia_peermem/nvpeer/stats/registrations", "3\n");
    write(s, "module/peer_core_sim/parameters/sysfs", "N\n");
    let report = run_on(s, std::path::Path::new("/nonexistent"));
    let pc = report.get("peer_clients").unwrap();
    assert_eq!(pc.status, Status::Info);
    assert!(
        pc.detail.contains("memory_peers is absent") && pc.detail.contains("registrations=3"),
        "{}",
        pc.detail
    );
    // One NCCL row: the newest releases detect the module, older ones would not: worth knowing.
    let nccl = report.get("nccl").unwrap();
    assert_eq!(nccl.status, Status::Info);
    assert!(
        nccl.detail
            .starts_with("NCCL 2.23.4 and later enable GPUDirect RDMA through peer memory")
            && nccl.detail.contains("NCCL 2.22.3 would not"),
        "{}",
        nccl.detail
    );
    assert_eq!(report.get("ucx").unwrap().status, Status::Ok);
}

#[test]
fn two_implementations_loaded_is_a_failure() {
    let sys = tempfile::tempdir().unwrap();
    write(sys.path(), "module/nvidia_peermem/version", "550.163.01\n");
    write(sys.path(), "module/nv_peer_mem/version", "1.3-0\n");
    let report = run_on(sys.path(), std::path::Path::new("/nonexistent"));
    let module = report.get("module").unwrap();
    assert_eq!(module.status, Status::Fail);
    assert!(module.detail.contains("NVIDIA nvidia-peermem"));
    assert!(module.detail.contains("Mellanox nv_peer_mem"));
    assert!(report.get("parameters").is_none());
}

#[test]
fn legacy_parameter_on_a_new_core_and_the_reverse() {
    // NVIDIA's module obeys the parameter (ours follows the core: the test above).
    let sys = tempfile::tempdir().unwrap();
    let s = sys.path();
    write(s, "module/nvidia_peermem/version", "550.163.01\n");
    write(
        s,
        "module/nvidia_peermem/parameters/peerdirect_support",
        "0\n",
    );
    write(s, "module/peer_core_sim/parameters/generation", "4x\n");
    let report = run_on(s, std::path::Path::new("/nonexistent"));
    assert_eq!(report.get("parameters").unwrap().status, Status::Fail);
    write(
        s,
        "module/nvidia_peermem/parameters/peerdirect_support",
        "1\n",
    );
    write(
        s,
        "module/peer_core_sim/parameters/generation",
        "5x-unmaps\n",
    );
    let report = run_on(s, std::path::Path::new("/nonexistent"));
    assert_eq!(report.get("parameters").unwrap().status, Status::Warn);
}

/// NVIDIA's module (no nvpeer marker) and a MOFED core in `exporter`, with kallsyms.
fn nvidia_module_on(
    exporter: &str,
    mofed: &str,
    persistent: Option<&str>,
) -> (tempfile::TempDir, tempfile::TempDir) {
    let sys = tempfile::tempdir().unwrap();
    let proc = tempfile::tempdir().unwrap();
    let s = sys.path();
    write(s, "module/nvidia_peermem/version", "550.163.01\n");
    write(
        s,
        "module/nvidia_peermem/parameters/peerdirect_support",
        "0\n",
    );
    if let Some(p) = persistent {
        write(
            s,
            "module/nvidia_peermem/parameters/persistent_api_support",
            p,
        );
    }
    write(s, "module/ib_core/version", mofed);
    write(
        proc.path(),
        "kallsyms",
        &format!(
            "0 T ib_register_peer_memory_client\t[{exporter}]\n\
                 0 T ib_umem_stop_invalidation_notifier\t[{exporter}]\n"
        ),
    );
    (sys, proc)
}

#[test]
fn ib_uverbs_held_without_a_holders_directory() {
    let (sys, proc) = nvidia_module_on("ib_uverbs", "24.07-0.6.1\n", Some("1\n"));
    // No holders directory and no refcnt: kallsyms alone says the module uses ib_uverbs.
    let report = run_on(sys.path(), proc.path());
    let reload = report.get("driver_reload").unwrap();
    assert_eq!(reload.status, Status::Info);
    assert!(
        reload
            .detail
            .contains("nvidia_peermem (kallsyms: ib_uverbs exports the core it registers with)"),
        "{}",
        reload.detail
    );
    assert!(reload
        .fix
        .as_deref()
        .unwrap()
        .contains("rmmod nvidia_peermem;"));
    // A refcnt of 0: nothing holds ib_uverbs, whatever is loaded.
    write(sys.path(), "module/ib_uverbs/refcnt", "0\n");
    let report = run_on(sys.path(), proc.path());
    assert_eq!(report.get("driver_reload").unwrap().status, Status::Ok);
    // A holders directory that does not list the module: it does not hold ib_uverbs.
    fs::create_dir_all(sys.path().join("module/ib_uverbs/holders/mlx5_ib")).unwrap();
    write(sys.path(), "module/ib_uverbs/refcnt", "1\n");
    let report = run_on(sys.path(), proc.path());
    assert_eq!(report.get("driver_reload").unwrap().status, Status::Ok);
}

#[test]
fn the_stop_notifier_bug_by_release_and_client() {
    // NVIDIA < 560 (no persistent_api_support): an invalidating nv_mem meets the
    // self-deadlock half of the bug.
    let (sys, proc) = nvidia_module_on("ib_core", "5.4-3.0.3\n", None);
    let report = run_on(sys.path(), proc.path());
    let bugs = report.get("core_bugs").unwrap();
    assert_eq!(bugs.status, Status::Warn);
    assert!(
        bugs.detail.contains("nvidia_peermem is invalidating")
            && bugs.detail.contains("self-deadlocks (a hung task"),
        "{}",
        bugs.detail
    );
    // The ib_core exporter is no reason for the ib_uverbs warning.
    assert!(report.get("driver_reload").is_none());
    for (version, persistent, says) in [
        ("25.04-0.6.1\n", Some("1\n"), "has the fix"),
        ("5.4-1.0.3.0\n", Some("1\n"), "predates"),
        ("24.10\n", Some("1\n"), "no claim"),
        ("OFED-internal-24.10\n", Some("1\n"), "no claim"),
    ] {
        let (sys, proc) = nvidia_module_on("ib_uverbs", version, persistent);
        let report = run_on(sys.path(), proc.path());
        let bugs = report.get("core_bugs").unwrap();
        assert_eq!(bugs.status, Status::Ok, "{version}: {bugs:?}");
        assert!(bugs.detail.contains(says), "{version}: {}", bugs.detail);
    }
    // No peer-memory module loaded: the bug is named, nothing meets it.
    let (sys, proc) = nvidia_module_on("ib_uverbs", "24.10-3.2.5\n", Some("1\n"));
    fs::remove_dir_all(sys.path().join("module/nvidia_peermem")).unwrap();
    let report = run_on(sys.path(), proc.path());
    let bugs = report.get("core_bugs").unwrap();
    assert_eq!(bugs.status, Status::Ok);
    assert!(
        bugs.detail.contains("no peer-memory module is loaded"),
        "{}",
        bugs.detail
    );
    assert!(report.get("driver_reload").is_none());
    // A core without a MOFED version (NV-Kernels, Ubuntu): no claim at all.
    fs::remove_file(sys.path().join("module/ib_core/version")).unwrap();
    let report = run_on(sys.path(), proc.path());
    assert!(report.get("core_bugs").is_none());
    assert!(report
        .get("ib_core")
        .unwrap()
        .detail
        .contains("not MOFED's"));
}

#[test]
fn a_stand_in_marker_wins_over_its_parameter_and_the_module_is_compared() {
    let sys = tempfile::tempdir().unwrap();
    let proc = tempfile::tempdir().unwrap();
    let s = sys.path();
    write(
        s,
        "module/nvidia_peermem/nvpeer/implementation",
        "nvpeer 0.1.0\n",
    );
    write(s, "module/nvidia_peermem/nvpeer/core", "5x\n");
    write(
        s,
        "module/peer_core_sim/parameters/generation",
        "5x-unmaps\n",
    );
    write(
        proc.path(),
        "kallsyms",
        "0 T ib_register_peer_memory_client\t[peer_core_sim]\n",
    );
    // The stand-in exports no marker: its parameter says 5x-unmaps, the module 5x.
    let report = run_on(s, proc.path());
    let c = report.get("ib_core").unwrap();
    assert_eq!(c.status, Status::Warn);
    assert!(
            c.detail.contains("nvidia_peermem detected 5x (/sys/module/nvidia_peermem/nvpeer/core) where peer_core_sim's generation parameter says 5x-unmaps"),
            "{}",
            c.detail
        );
    assert!(report.get("core_bugs").is_none() && report.get("driver_reload").is_none());
    // A marker it exports is what a client sees.
    write(
            proc.path(),
            "kallsyms",
            "0 T ib_register_peer_memory_client\t[peer_core_sim]\n0 T ib_get_peer_private_data\t[peer_core_sim]\n",
        );
    write(s, "module/nvidia_peermem/nvpeer/core", "4x\n");
    let report = run_on(s, proc.path());
    let c = report.get("ib_core").unwrap();
    assert_eq!(c.status, Status::Ok, "{c:?}");
    assert!(
        c.detail
            .contains("generation 4x: MOFED 4.1-5.0 (legacy PeerDirect) (from kallsyms)"),
        "{}",
        c.detail
    );
    assert!(
        c.detail.contains("nvidia_peermem detected 4x too"),
        "{}",
        c.detail
    );
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(
        json["facts"]["ib_core"]["peer_core"]["generation_from"],
        "kallsyms"
    );
}

#[test]
fn malformed_files_become_unknowns_that_name_the_file_and_keep_the_device() {
    let sys = tempfile::tempdir().unwrap();
    let s = sys.path();
    fs::create_dir_all(s.join("devices/pci0000:00/0000:00:01.0")).unwrap();
    write(s, "devices/pci0000:00/0000:00:01.0/vendor", "0x10de\n");
    write(s, "devices/pci0000:00/0000:00:01.0/class", "0x030200\n");
    write(s, "devices/pci0000:00/0000:00:01.0/device", "0x2330\n");
    write(s, "devices/pci0000:00/0000:00:01.0/numa_node", "zero\n");
    fs::create_dir_all(s.join("bus/pci/devices")).unwrap();
    std::os::unix::fs::symlink(
        "../../../devices/pci0000:00/0000:00:01.0",
        s.join("bus/pci/devices/0000:00:01.0"),
    )
    .unwrap();
    let report = run_on(s, std::path::Path::new("/nonexistent"));
    // The GPU is kept, its NUMA node unknown, said by the `sysfs` row (nothing rests on it
    // here: `gpus` is ok).
    let gpus = report.get("gpus").unwrap();
    assert_eq!(gpus.status, Status::Ok, "{gpus:?}");
    assert!(
        gpus.detail.starts_with("GPU0 0000:00:01.0"),
        "{}",
        gpus.detail
    );
    assert_eq!(report.facts.gpus.len(), 1, "{:?}", report.facts.gpus);
    assert_eq!(report.facts.gpus[0].numa_node, None);
    let sysfs = report.get("sysfs").unwrap();
    assert_eq!(sysfs.status, Status::Unknown);
    assert!(
        sysfs.detail.contains("numa_node") && sysfs.detail.contains("\"zero\""),
        "{}",
        sysfs.detail
    );
    // Its vendor unreadable: whether it is a GPU is unknown, and `gpus` says so.
    write(s, "devices/pci0000:00/0000:00:01.0/vendor", "zzz\n");
    let report = run_on(s, std::path::Path::new("/nonexistent"));
    let gpus = report.get("gpus").unwrap();
    assert_eq!(gpus.status, Status::Unknown);
    assert!(gpus.detail.contains("vendor"), "{}", gpus.detail);
}
