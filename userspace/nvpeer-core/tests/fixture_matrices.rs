// SPDX-License-Identifier: MIT OR Apache-2.0
//! The fixture sysfs trees of tests/fixtures (written by tests/fixtures/make-fixtures.py): `topo`
//! must give each fixture's expected-matrix, and a pair's path its links (the rest of the fixture
//! tests: fixture_facts.rs, fixture_verdicts.rs, fixture_robustness.rs, fixture_changes.rs).

use std::fs;

use nvpeer_core::check::{self, Inputs, Status};
use nvpeer_core::commands::render;
use nvpeer_core::host::topo::{NcclPathType, PathClass};
use nvpeer_core::host::Host;

mod common;
use common::fixtures;
use common::trees::{assert_matrix, copy_tree, host};

#[test]
fn pix_fixture() {
    let t = assert_matrix("pix");
    assert_eq!(t.nearest[0].nics, ["mlx5_0"]);
    assert_eq!(t.nearest[0].class, PathClass::Pix);
    assert_eq!(t.gpus[0].pci.local_cpulist.as_deref(), Some("0-15"));
}

#[test]
fn pxb_fixture() {
    let t = assert_matrix("pxb");
    for n in &t.nearest {
        assert_eq!(n.nics, ["mlx5_1"]);
        assert_eq!(n.nccl_class, NcclPathType::Pix);
    }
}

#[test]
fn phb_fixture() {
    assert_matrix("phb");
}

#[test]
fn node_fixture_is_phb_to_nccl() {
    let t = assert_matrix("node");
    assert_eq!(t.links[0].class, PathClass::Node);
    assert_eq!(t.links[0].nccl_class, NcclPathType::Phb);
    assert!(render::topo(&t).contains("NODE(PHB)"));
}

#[test]
fn sys_fixture() {
    let t = assert_matrix("sys");
    assert_eq!(t.gpus[1].pci.numa_node, Some(1));
    assert_eq!(t.gpus[1].pci.local_cpulist.as_deref(), Some("32-63"));
    assert_eq!(t.nearest[1].nics, ["mlx5_1"]);
}

#[test]
fn flat_vm_fixture() {
    let t = assert_matrix("vm");
    // rxe0 has no PCI function: listed, not in the matrix.
    assert!(t.nic("rxe0").unwrap().pci.is_none());
    assert_eq!(t.gpus[0].pci.numa_node, Some(-1));
}

#[test]
fn every_fixture_with_a_matrix_is_tested() {
    let mut with_matrix: Vec<String> = fs::read_dir(fixtures())
        .unwrap()
        .filter_map(|e| {
            let e = e.unwrap();
            let name = e.file_name().to_string_lossy().into_owned();
            let text = fs::read_to_string(e.path().join("expected-matrix")).ok()?;
            text.lines().any(|l| !l.starts_with('#')).then_some(name)
        })
        .collect();
    with_matrix.sort();
    assert_eq!(
        with_matrix,
        [
            "confidential",
            "degraded-link",
            "degraded-upstream",
            "doca",
            "efa",
            "gb10",
            "gb300",
            "gb300-acs-cleared",
            "gb300-unknown-rp",
            "gdrcopy-dummy",
            "geforce",
            "gh200",
            "gin-ready",
            "inbox-dmabuf",
            "iommu-dmabuf-595",
            "job-starters",
            "lib-modes",
            "mana",
            "mig",
            "nccl-conf",
            "node",
            "old-kernel",
            "phb",
            "pix",
            "port-down",
            "proprietary",
            "pxb",
            "sys",
            "topo-override",
            "topo-refused",
            "vera",
            "vera-board",
            "vera-shared-group",
            "vera-unknown-rp",
            "vera-unlisted-nics",
            "vgpu",
            "vm"
        ]
    );
}

/// The links between switches on a pair's path, and only those: the two-level tree's link
/// between the switches (x8 of x16) is the pair's, the root port's link above the switch both
/// sit below (x4 of x16) is not, and neither are the GPU's and NIC's own links.
#[test]
fn degraded_upstream_fixture_reads_the_links_on_the_path_only() {
    assert_matrix("degraded-upstream");
    let f = check::gather(&host("degraded-upstream"), &Inputs::fixture());
    let links: Vec<(String, String, String)> = f.pairs[0]
        .path_links
        .iter()
        .map(|l| (l.port.to_string(), l.device.to_string(), l.link.describe()))
        .collect();
    assert_eq!(
        links,
        [(
            "0000:02:00.0".to_owned(),
            "0000:03:00.0".to_owned(),
            "x8 of x16, 32 GT/s of 32 GT/s".to_owned()
        )]
    );
    assert!(f.pairs[0].path_links[0].degraded());
    // Where GPU and NIC share a switch, no link above it is theirs.
    let pix = check::gather(&host("degraded-link"), &Inputs::fixture());
    assert!(pix.pairs[0].path_links.is_empty());
}

/// A link file on the pair's path that cannot be parsed leaves that link unknown, named with
/// the file, never dropped: the degraded host is not taken for a ready one (the row and the
/// verdict are `unknown`, naming the file), and the link's other files still read.
#[test]
fn an_unreadable_link_on_the_path_is_unknown_naming_the_file() {
    let work = tempfile::tempdir().unwrap();
    let root = work.path().join("degraded-upstream");
    copy_tree(&fixtures().join("degraded-upstream"), &root);
    let file = root.join("sys/bus/pci/devices/0000:03:00.0/current_link_width");
    fs::write(&file, "x8?\n").unwrap();
    let host = Host::new(root.join("sys"), root.join("proc"));
    let f = check::gather(&host, &Inputs::fixture());
    assert!(f.pairs[0].path_links.is_empty());
    assert_eq!(f.pairs[0].unknown_links.len(), 1);
    let said = &f.pairs[0].unknown_links[0];
    assert!(
        said.starts_with("link 0000:02:00.0 - 0000:03:00.0: ")
            && said.contains(&file.display().to_string()),
        "{said}"
    );
    let r = check::run(&host, &Inputs::fixture(), &check::Options::default());
    assert!(r.verdict.unknown && !r.verdict.ready, "{}", r.verdict.text);
    assert!(
        r.verdict
            .text
            .starts_with("unknown: gdr_used (GPU0-mlx5_0: link 0000:02:00.0 - 0000:03:00.0: ")
            && r.verdict.text.contains("current_link_width"),
        "{}",
        r.verdict.text
    );
    let row = r.checks.iter().find(|c| c.id == "gdr_used").unwrap();
    assert_eq!(row.status, Status::Unknown);
    assert!(row.detail.contains("current_link_width"), "{}", row.detail);
    // A link known to be degraded still says so beside an unknown one: the GPU's own link
    // x8 of x16 makes the pair degraded whatever the unreadable link is.
    fs::write(
        root.join("sys/bus/pci/devices/0000:05:00.0/current_link_width"),
        "8\n",
    )
    .unwrap();
    let r = check::run(&host, &Inputs::fixture(), &check::Options::default());
    assert!(r.verdict.degraded, "{}", r.verdict.text);
    let row = r.checks.iter().find(|c| c.id == "gdr_used").unwrap();
    assert_eq!(row.status, Status::Warn);
    assert!(row.detail.contains("current_link_width"), "{}", row.detail);
}

/// A NIC link whose speed the kernel prints `Unknown` beside a readable width (64 GT/s on a
/// kernel without PCIe 6.0 support: ConnectX-8): the width is still judged, never taken for no
/// link. Full width: whether it runs below its speed is unknown (the pair and the verdict are
/// `unknown`, naming it); narrowed: degraded, the width decides.
#[test]
fn a_link_speed_printed_unknown_still_has_its_width_judged() {
    let work = tempfile::tempdir().unwrap();
    let root = work.path().join("degraded-link");
    copy_tree(&fixtures().join("degraded-link"), &root);
    let dev = |a: &str, file: &str| root.join(format!("sys/bus/pci/devices/{a}/{file}"));
    // The GPU's link at full width; the NIC's speeds `Unknown`, x16 of x16.
    fs::write(dev("0000:03:00.0", "current_link_width"), "16\n").unwrap();
    for file in ["current_link_speed", "max_link_speed"] {
        fs::write(dev("0000:04:00.0", file), "Unknown\n").unwrap();
    }
    let host = Host::new(root.join("sys"), root.join("proc"));
    let f = check::gather(&host, &Inputs::fixture());
    let nic = f.pairs[0]
        .nic_link
        .expect("the NIC's link: its width is readable");
    assert_eq!((nic.speed, nic.width), (None, 16));
    assert_eq!(
        f.pairs[0].unknown_links.len(),
        1,
        "{:?}",
        f.pairs[0].unknown_links
    );
    assert!(f.pairs[0].unknown_links[0].starts_with("0000:04:00.0's link: link speed Unknown"));
    let r = check::run(&host, &Inputs::fixture(), &check::Options::default());
    assert!(r.verdict.unknown && !r.verdict.ready, "{}", r.verdict.text);
    assert!(
        r.verdict.text.contains("link speed Unknown"),
        "{}",
        r.verdict.text
    );
    // Narrowed: degraded by its width, its speed does not decide.
    fs::write(dev("0000:04:00.0", "current_link_width"), "8\n").unwrap();
    let f = check::gather(&host, &Inputs::fixture());
    assert!(
        f.pairs[0].unknown_links.is_empty(),
        "{:?}",
        f.pairs[0].unknown_links
    );
    let r = check::run(&host, &Inputs::fixture(), &check::Options::default());
    assert!(r.verdict.degraded, "{}", r.verdict.text);
    assert!(
        r.verdict
            .text
            .contains("mlx5_0 link x8 of x16, unknown GT/s of unknown GT/s"),
        "{}",
        r.verdict.text
    );
}

/// The top of a pair's chain whose class cannot be read: the links below it are unknown only
/// where the pair's traffic crosses one (PXB: the link between the switches), and said once,
/// not once from the GPU's side and again from the NIC's; where the traffic turns below the
/// top's links (PIX: one switch), nothing on the path is unknown.
#[test]
fn an_unreadable_top_of_the_chain_is_said_once_and_only_on_the_path() {
    let work = tempfile::tempdir().unwrap();
    let unknown_links = |name: &str| {
        let root = work.path().join(name);
        copy_tree(&fixtures().join(name), &root);
        fs::write(
            root.join("sys/bus/pci/devices/0000:00:01.0/class"),
            "bridge?\n",
        )
        .unwrap();
        let host = Host::new(root.join("sys"), root.join("proc"));
        check::gather(&host, &Inputs::fixture()).pairs[0]
            .unknown_links
            .clone()
    };
    let pxb = unknown_links("degraded-upstream");
    assert_eq!(pxb.len(), 1, "{pxb:?}");
    assert!(
        pxb[0].starts_with("links below 0000:00:01.0: ") && pxb[0].contains("class"),
        "{pxb:?}"
    );
    let pix = unknown_links("degraded-link");
    assert!(pix.is_empty(), "{pix:?}");
}
