// SPDX-License-Identifier: MIT OR Apache-2.0
//! Broken fixture files give clear messages naming the file instead of panics (also under
//! fuzzing), and every fixture's verdicts come back from its saved JSON (`check --facts`).

use std::fs;

use nvpeer_core::check::{self, Inputs, Status};
use nvpeer_core::commands::{render, stats};
use nvpeer_core::host::topo;
use nvpeer_core::host::Host;
use proptest::prelude::*;

mod common;
use common::trees::{copy_tree, host};
use common::{fixture_names, fixtures};

#[test]
fn malformed_files_give_messages_naming_the_file() {
    let h = host("malformed");
    let report = check::run(&h, &Inputs::fixture(), &check::Options::default());
    // Both GPUs kept; the broken numa_node said by `sysfs`, as unknown.
    assert_eq!(report.facts.gpus.len(), 2);
    let sysfs = report.get("sysfs").unwrap();
    assert_eq!(sysfs.status, Status::Unknown);
    assert!(
        sysfs.detail.contains("numa_node") && sysfs.detail.contains("\"zero\""),
        "{}",
        sysfs.detail
    );
    let err = topo::discover(&h).unwrap_err().to_string();
    assert!(err.contains("0000:00:04.0/numa_node"), "{err}");
    let err = stats::read(&h).unwrap_err().to_string();
    assert!(
        err.contains("stats/registrations") && err.contains("many"),
        "{err}"
    );
}

/// `report`'s checks are what its saved JSON judges to (whole report and bare facts).
fn assert_rejudged(report: &check::Report, what: &str) {
    let saved = serde_json::to_string_pretty(report).unwrap();
    let mut again = check::report(
        check::parse_facts(saved.as_bytes(), what).unwrap(),
        &check::Options::default(),
    );
    // When each judged is its own.
    again.time.clone_from(&report.time);
    assert_eq!(again.checks, report.checks, "{what}");
    assert_eq!((again.status, again.ready), (report.status, report.ready));
    // Nothing is lost on the way: the facts print the same again.
    assert_eq!(
        serde_json::to_string_pretty(&again).unwrap(),
        saved,
        "{what}"
    );
    let bare = serde_json::to_string(&report.facts).unwrap();
    let facts = check::parse_facts(bare.as_bytes(), what).unwrap();
    assert_eq!(
        check::judge(&facts, &check::Options::default()).checks,
        report.checks,
        "{what}"
    );
}

/// The acceptance of `check --facts`: every fixture's verdicts come back from its saved JSON,
/// also with NCCL/UCX variables and a memlock limit set.
#[test]
fn every_fixture_is_judged_again_from_its_json() {
    let names = fixture_names();
    assert!(names.len() >= 9, "{names:?}");
    for name in &names {
        let report = check::run(&host(name), &Inputs::fixture(), &check::Options::default());
        assert_rejudged(&report, name);
        let mut inputs = Inputs::fixture();
        inputs.env.insert("NCCL_NET_GDR_LEVEL".into(), "PIX".into());
        inputs.env.insert("NCCL_IB_DISABLE".into(), "bogus".into());
        inputs
            .env
            .insert("UCX_IB_GPU_DIRECT_RDMA".into(), "no".into());
        inputs.memlock = Some(nvpeer_core::host::limits::Memlock {
            soft: Some(8 << 20),
            hard: None,
        });
        assert_rejudged(
            &check::run(&host(name), &inputs, &check::Options::default()),
            name,
        );
    }
    // The malformed tree's unreadable files are facts too.
    let report = check::run(
        &host("malformed"),
        &Inputs::fixture(),
        &check::Options::default(),
    );
    assert!(!report.facts.unreadable.is_empty());
}

/// The files of the ready fixture that the parsers read, each overwritten with random bytes.
const FUZZED: [&str; 9] = [
    "devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0/numa_node",
    "devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0/resource",
    "devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0/class",
    "devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/config",
    "module/nvidia_peermem/nvpeer/failures",
    "module/nvidia_peermem/nvpeer/stats/registrations",
    "kernel/mm/memory_peers/nv_mem/num_alloc_mrs",
    "module/ib_core/version",
    "devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:04:00.0/infiniband/mlx5_0/ports/1/state",
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Bounded fuzz: any content in any of those files gives results or errors, never a panic.
    #[test]
    fn garbage_in_sysfs_never_panics(which in 0..FUZZED.len(), bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let dir = tempfile::tempdir().unwrap();
        let sys = dir.path().join("sys");
        copy_tree(&fixtures().join("pix/sys"), &sys);
        fs::write(sys.join(FUZZED[which]), &bytes).unwrap();
        let h = Host::new(&sys, fixtures().join("pix/proc"));
        let report = check::run(&h, &Inputs::fixture(), &check::Options::default());
        let _ = render::check(&report, false, true, render::CHECK_WIDTH);
        assert_rejudged(&report, FUZZED[which]);
        if let Ok(t) = topo::discover(&h) {
            let _ = render::topo(&t);
        }
        if let Ok(st) = stats::read(&h) {
            let _ = render::stats(&st, None);
        }
    }
}
