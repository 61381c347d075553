//! The fixture sysfs trees of tests/fixtures (written by tests/fixtures/make-fixtures.py):
//! `topo` must give each fixture's expected-matrix, `check` the right verdicts, and broken
//! files clear messages instead of panics.

use std::fs;
use std::path::{Path, PathBuf};

use nvpeer_core::check::{self, Inputs, Status};
use nvpeer_core::host::Host;
use nvpeer_core::topo::{self, NcclPathType, PathClass};
use nvpeer_core::{render, stats};
use proptest::prelude::*;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures")
}

fn host(name: &str) -> Host {
    let dir = fixtures().join(name);
    Host::new(dir.join("sys"), dir.join("proc"))
}

/// `GPU NIC CLASS` lines of a fixture's expected-matrix.
fn expected_matrix(name: &str) -> Vec<(String, String, String)> {
    let text = fs::read_to_string(fixtures().join(name).join("expected-matrix")).unwrap();
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f[0].to_owned(), f[1].to_owned(), f[2].to_owned())
        })
        .collect()
}

fn assert_matrix(name: &str) -> topo::Topology {
    let t = topo::discover(&host(name)).unwrap();
    let expected = expected_matrix(name);
    assert!(!expected.is_empty(), "{name} has no expected matrix");
    assert_eq!(t.links.len(), expected.len(), "{name}: {:?}", t.links);
    for (gpu, nic, class) in expected {
        let got = t
            .class(&gpu, &nic)
            .unwrap_or_else(|| panic!("{name}: no link {gpu}-{nic}"));
        assert_eq!(got.label(), class, "{name}: {gpu}-{nic}");
    }
    t
}

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
    assert_eq!(with_matrix, ["node", "phb", "pix", "pxb", "sys", "vm"]);
}

#[test]
fn the_ready_fixture_is_ready() {
    let report = check::run(&host("pix"), &Inputs::fixture());
    assert!(report.ready, "{}", render::check(&report, false));
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
        "nccl>=2.23.4",
        "nccl<=2.9.6",
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
    assert!(report
        .get("ib_core")
        .unwrap()
        .detail
        .contains("24.10-1.1.4"));
    assert!(report
        .get("iommu")
        .unwrap()
        .detail
        .starts_with("passthrough"));
    assert!(report.get("bar1").unwrap().detail.contains("64 GiB"));
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["schema"], "nvpeer.check/1");
    assert_eq!(json["facts"]["nvidia"]["version"], "570.86.15");
    assert_eq!(json["facts"]["memory_peers"][0]["name"], "nv_mem");
}

#[test]
fn two_implementations_fail_the_module_check() {
    let report = check::run(&host("two-loaded"), &Inputs::fixture());
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
    let report = check::run(&host("phb"), &Inputs::fixture());
    assert_eq!(report.get("bar1").unwrap().status, Status::Warn);
    assert!(report.get("bar1").unwrap().detail.contains("256 MiB"));
    assert_eq!(report.get("topology").unwrap().status, Status::Warn);
    assert_eq!(report.get("nccl_gdr").unwrap().status, Status::Warn);
    let mut inputs = Inputs::fixture();
    inputs.env.insert("NCCL_NET_GDR_LEVEL".into(), "PHB".into());
    let report = check::run(&host("phb"), &inputs);
    assert_eq!(report.get("nccl_gdr").unwrap().status, Status::Ok);
}

#[test]
fn malformed_files_give_messages_naming_the_file() {
    let h = host("malformed");
    let report = check::run(&h, &Inputs::fixture());
    let gpus = report.get("gpus").unwrap();
    assert_eq!(gpus.status, Status::Warn);
    assert!(
        gpus.detail.contains("numa_node") && gpus.detail.contains("\"zero\""),
        "{}",
        gpus.detail
    );
    let err = topo::discover(&h).unwrap_err().to_string();
    assert!(err.contains("0000:00:04.0/numa_node"), "{err}");
    let err = stats::read(&h).unwrap_err().to_string();
    assert!(
        err.contains("stats/registrations") && err.contains("many"),
        "{err}"
    );
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

/// Copies a fixture's sys tree (symlinks as symlinks) into `to`.
fn copy_tree(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        let kind = entry.file_type().unwrap();
        if kind.is_symlink() {
            std::os::unix::fs::symlink(fs::read_link(entry.path()).unwrap(), &target).unwrap();
        } else if kind.is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            fs::copy(entry.path(), &target).unwrap();
        }
    }
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
        let report = check::run(&h, &Inputs::fixture());
        let _ = render::check(&report, false);
        let _ = serde_json::to_string(&report).unwrap();
        if let Ok(t) = topo::discover(&h) {
            let _ = render::topo(&t);
        }
        if let Ok(st) = stats::read(&h) {
            let _ = render::stats(&st, None);
        }
    }
}
