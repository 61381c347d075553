// SPDX-License-Identifier: MIT OR Apache-2.0
//! What `check` says of the fixture trees: the ready ones ready and quiet, the rows that must
//! warn or fail, every row id listed; and `stats` of the ready fixture.

use nvpeer_core::check::{self, Inputs, Status};
use nvpeer_core::commands::{render, stats};

mod common;
use common::fixture_names;
use common::trees::{assert_matrix, host};

#[test]
fn the_ready_fixture_is_ready() {
    let report = check::run(&host("pix"), &Inputs::fixture(), &check::Options::default());
    assert!(
        report.ready,
        "{}",
        render::check(&report, false, true, render::CHECK_WIDTH)
    );
    let status = |id: &str| report.get(id).unwrap().status;
    for id in [
        "module",
        "parameters",
        "peer_clients",
        "nvidia_driver",
        "ib_core",
        "rdma_devices",
        "gpus",
        "bar1",
        "topology",
        "iommu",
        "nccl",
        "nccl_gdr",
        "ucx",
        "dmabuf",
    ] {
        assert_eq!(status(id), Status::Ok, "{id}: {:?}", report.get(id));
    }
    // The GPU's switch port has ACS redirection on.
    let acs = report.get("acs").unwrap();
    assert_eq!(acs.status, Status::Warn);
    assert!(acs.detail.contains("0000:02:00.0") && acs.detail.contains("P2P Request Redirect"));
    assert!(!acs.detail.contains("0000:02:01.0"), "{}", acs.detail);
    let ib_core = &report.get("ib_core").unwrap().detail;
    assert!(
        ib_core.starts_with("ib_core exports ib_register_peer_memory_client")
            && ib_core.contains("MOFED 23.10-1.1.9")
            && ib_core.contains("generation 5x-unmaps"),
        "{ib_core}"
    );
    // MLNX_OFED 23.10 with our persistent client: the `!=` bug of 5.4-3 ... 24.10. The core is
    // in ib_core, so nothing is said about ib_uverbs. Harmless on production kernels: info.
    assert_eq!(status("core_bugs"), Status::Info);
    assert!(report.get("driver_reload").is_none());
    assert!(report
        .get("iommu")
        .unwrap()
        .detail
        .starts_with("passthrough"));
    assert!(report.get("bar1").unwrap().detail.contains("64 GiB"));
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["schema"], "nvpeer.check/2");
    assert_eq!(json["facts"]["nvidia"]["version"], "570.86.15");
    assert_eq!(json["facts"]["memory_peers"][0]["name"], "nv_mem");
}

#[test]
fn doca_fixture_core_in_ib_uverbs() {
    assert_matrix("doca");
    let report = check::run(
        &host("doca"),
        &Inputs::fixture(),
        &check::Options::default(),
    );
    assert!(
        report.ready,
        "{}",
        render::check(&report, false, true, render::CHECK_WIDTH)
    );
    let get = |id: &str| {
        report.get(id).unwrap_or_else(|| {
            panic!(
                "no {id} check: {}",
                render::check(&report, false, true, render::CHECK_WIDTH)
            )
        })
    };
    let ib_core = get("ib_core");
    assert_eq!(ib_core.status, Status::Ok, "{ib_core:?}");
    for part in [
        "ib_uverbs exports ib_register_peer_memory_client",
        "DOCA-OFED >= 24.07",
        "MOFED 24.10-3.2.5 (/sys/module/ib_core/version)",
        "generation 5x-unmaps: UNMAPS-capable (MOFED 5.1-2.5.8.0.60, 5.4-3 and later) (from kallsyms)",
        "nvidia_peermem detected 5x-unmaps too",
    ] {
        assert!(ib_core.detail.contains(part), "{part}: {}", ib_core.detail);
    }
    let reload = get("driver_reload");
    assert_eq!(reload.status, Status::Info);
    assert!(
        reload
            .detail
            .contains("nvidia_peermem (/sys/module/ib_uverbs/holders/nvidia_peermem, refcnt 3)")
            && reload.detail.contains("`/etc/init.d/openibd restart`")
            && reload.detail.contains("doca-driver-build#481")
            // Holders that are not peer-memory modules are openibd's own business.
            && !reload.detail.contains("mlx5_ib"),
        "{}",
        reload.detail
    );
    let fix = reload.fix.as_deref().unwrap();
    assert!(
        fix.contains("rmmod nvidia_peermem; /etc/init.d/openibd restart; modprobe nvidia_peermem"),
        "{fix}"
    );
    let bugs = get("core_bugs");
    assert_eq!(bugs.status, Status::Info);
    for part in [
        "MOFED 24.10-3.2.5",
        "ib_umem_stop_invalidation_notifier `!=` bug",
        "fixed in MOFED/DOCA-OFED 25.04",
        "nvidia_peermem is persistent (persistent_api_support=1)",
        "'bad unlock balance'",
        "self-deadlocks",
    ] {
        assert!(bugs.detail.contains(part), "{part}: {}", bugs.detail);
    }
    let fix = bugs.fix.as_deref().unwrap();
    assert!(
        fix.contains("upgrade to DOCA-OFED 25.04") && fix.contains("lock debugging"),
        "{fix}"
    );
    // No memory_peers on this kernel: our counters stand in, and older NCCL is said (one row).
    // All of it is worth knowing and nothing to act on: the ready DOCA host has no warning.
    assert_eq!(get("peer_clients").status, Status::Info);
    let mut said: Vec<&str> = report
        .checks
        .iter()
        .filter(|c| c.status != Status::Ok)
        .map(|c| c.id)
        .collect();
    said.sort_unstable();
    assert_eq!(said, ["core_bugs", "driver_reload", "nccl", "peer_clients"]);
    assert!(report
        .checks
        .iter()
        .filter(|c| c.status != Status::Ok)
        .all(|c| c.status == Status::Info));
    let json = serde_json::to_value(&report).unwrap();
    let core = &json["facts"]["ib_core"]["peer_core"];
    assert_eq!(core["provider"], "ib_uverbs");
    assert_eq!(core["version"], "24.10-3.2.5");
    assert_eq!(core["generation"], "5x-unmaps");
    assert_eq!(core["generation_from"], "kallsyms");
    assert_eq!(core["holders"][1], "nvidia_peermem");
    assert_eq!(json["facts"]["modules"][0]["core"], "5x-unmaps");
    assert!(json["facts"]["memory_peers"].is_null());
}

#[test]
fn two_implementations_fail_the_module_check() {
    let report = check::run(
        &host("two-loaded"),
        &Inputs::fixture(),
        &check::Options::default(),
    );
    let module = report.get("module").unwrap();
    assert_eq!(module.status, Status::Fail);
    assert!(
        module.detail.contains("nvidia_peermem (nvpeer)")
            && module.detail.contains("nv_peer_mem (Mellanox nv_peer_mem)")
    );
    assert!(module.fix.as_deref().unwrap().contains("rmmod"));
}

#[test]
fn small_bar1_and_phb_warn() {
    let report = check::run(&host("phb"), &Inputs::fixture(), &check::Options::default());
    assert_eq!(report.get("bar1").unwrap().status, Status::Warn);
    assert!(report.get("bar1").unwrap().detail.contains("256 MiB"));
    assert_eq!(report.get("topology").unwrap().status, Status::Warn);
    // Said, not warned: `gdr_used` carries the cause (one cause, one fix).
    assert_eq!(report.get("nccl_gdr").unwrap().status, Status::Info);
    let mut inputs = Inputs::fixture();
    inputs.env.insert("NCCL_NET_GDR_LEVEL".into(), "PHB".into());
    let report = check::run(&host("phb"), &inputs, &check::Options::default());
    assert_eq!(report.get("nccl_gdr").unwrap().status, Status::Ok);
}

#[test]
fn stats_of_the_ready_fixture() {
    let st = stats::read(&host("pix")).unwrap();
    assert_eq!(st.schema, "nvpeer.stats/1");
    assert_eq!(st.counters["registrations"], 12);
    let text = render::stats(&st, Some(&st));
    assert!(
        text.contains("registrations") && text.contains("+0"),
        "{text}"
    );
}

/// Every row any fixture prints (with an inventory expected) has its id in `check::CHECK_IDS`,
/// the list the man page and the docs give.
#[test]
fn every_row_id_is_listed() {
    let mut options = check::Options::default();
    options.expect.gpus = Some(1);
    let mut seen = std::collections::BTreeSet::new();
    for name in &fixture_names() {
        let report = check::run(&host(name), &Inputs::fixture(), &options);
        for c in &report.checks {
            assert!(
                check::CHECK_IDS.contains(&c.id),
                "{name}: row {} is not in check::CHECK_IDS",
                c.id
            );
            seen.insert(c.id);
        }
    }
    assert!(
        seen.len() >= 35,
        "the fixtures print {} ids: {seen:?}",
        seen.len()
    );
}

/// Issue 46 ("fixes that assume a source checkout"): what `check` says works on an installed
/// system. The Debian package installs the binary, its man pages and completions, no README or
/// other Markdown file: no row or pair of any fixture may send the reader to one.
#[test]
fn no_row_points_to_a_file_the_package_does_not_install() {
    let mut wrong = Vec::new();
    for name in fixture_names() {
        let report = check::run(&host(&name), &Inputs::fixture(), &check::Options::default());
        let said = serde_json::to_string(&(&report.checks, &report.pairs)).unwrap();
        for word in ["README", ".md"] {
            if let Some(at) = said.find(word) {
                let from = said[..at]
                    .char_indices()
                    .rev()
                    .nth(80)
                    .map_or(0, |(i, _)| i);
                wrong.push(format!("{name}: ...{}", &said[from..at + word.len()]));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
