//! The fixture sysfs trees of tests/fixtures (written by tests/fixtures/make-fixtures.py):
//! `topo` must give each fixture's expected-matrix, `check` the right verdicts, and broken
//! files clear messages instead of panics.

use std::fs;

use nvpeer_core::check::{self, Inputs, Status};
use nvpeer_core::commands::{render, stats};
use nvpeer_core::host::topo::{self, NcclPathType, PathClass};
use nvpeer_core::host::Host;
use proptest::prelude::*;

mod common;
use common::trees::{copy_tree, host, ready_assuming};
use common::{fixture_names, fixtures};

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
            "vgpu",
            "vm"
        ]
    );
}

/// The Vera fixtures (rdma_topo's NUMA-based shape): the platform recognised by its root ports,
/// each GPU and ConnectX-9 function with its IOMMU group, how many share it, ATS, and its board
/// (VPD serial number).
#[test]
fn vera_fixtures() {
    for name in ["vera", "vera-board", "vera-shared-group", "vera-unknown-rp"] {
        assert_matrix(name);
    }
    let f = check::gather(&host("vera"), &Inputs::fixture());
    assert!(f.grace.is_none());
    let v = f.vera.as_ref().expect("a Vera platform");
    assert_eq!(v.root_ports.len(), 2);
    let by_name = |f: &check::Facts, n: &str| {
        f.vera
            .as_ref()
            .unwrap()
            .functions
            .iter()
            .find(|x| x.name == n)
            .cloned()
            .unwrap()
    };
    let (gpu, nic) = (by_name(&f, "GPU0"), by_name(&f, "mlx5_0"));
    assert_eq!((gpu.kind.as_str(), nic.kind.as_str()), ("gpu", "connectx9"));
    assert_eq!(
        (gpu.iommu_group_size, nic.iommu_group_size),
        (Some(1), Some(1))
    );
    assert_eq!((gpu.ats, nic.ats), (None, Some(false)));
    let f = check::gather(&host("vera-shared-group"), &Inputs::fixture());
    let nic = by_name(&f, "mlx5_0");
    assert_eq!(
        (nic.iommu_group.as_deref(), nic.iommu_group_size, nic.ats),
        (Some("3"), Some(2), Some(true))
    );
    // Boards by VPD serial number: two ConnectX-9 functions of one board, and one whose `vpd` is
    // malformed (unknown, not guessed); the GPU has none. The `vera` fixture's NIC has no `vpd`.
    assert_eq!(
        by_name(&check::gather(&host("vera"), &Inputs::fixture()), "mlx5_0").board_sn,
        None
    );
    let f = check::gather(&host("vera-board"), &Inputs::fixture());
    let sn = |n: &str| by_name(&f, n).board_sn;
    assert_eq!(
        [sn("GPU0"), sn("mlx5_0"), sn("mlx5_1"), sn("mlx5_2")],
        [
            None,
            Some("MT2542X00001".to_owned()),
            Some("MT2542X00001".to_owned()),
            None
        ]
    );
    // Root ports of an id nvpeer does not list: Vera's by the Rubin GPU below one and by the
    // board (VPD serial number) of the NIC function below another; the third, whose NIC's vpd is
    // malformed, is not taken, and its function is not listed.
    let f = check::gather(&host("vera-unknown-rp"), &Inputs::fixture());
    let v = f.vera.as_ref().expect("Vera by the layout");
    let rps: Vec<String> = v.root_ports.iter().map(ToString::to_string).collect();
    assert_eq!(rps, ["0000:00:00.0", "0000:00:01.0", "0000:00:02.0"]);
    assert_eq!(
        v.root_ports_by_layout.len(),
        2,
        "{:?}",
        v.root_ports_by_layout
    );
    assert!(v.root_ports_by_layout[0].contains("by a Rubin GPU, GPU0"));
    assert!(v.root_ports_by_layout[1]
        .contains("mlx5_1 (0000:03:00.0), below it of board SN MT2542X00001"));
    assert!(v.functions.iter().all(|f| f.name != "mlx5_2"));
    // The listed fixture's facts carry no such reasons (and none in the JSON).
    let f = check::gather(&host("vera"), &Inputs::fixture());
    let v = f.vera.as_ref().expect("Vera by its ids");
    assert!(v.root_ports_by_layout.is_empty());
    assert!(!serde_json::to_string(&f)
        .expect("facts serialise")
        .contains("root_ports_by_layout"));
    // Not a Vera host: no such facts, and none in the JSON.
    let f = check::gather(&host("gb300"), &Inputs::fixture());
    assert!(f.vera.is_none());
    assert!(serde_json::to_value(&f).unwrap().get("vera").is_none());
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

/// The fixtures of the readiness paths: their matrices, and the facts the path rules read.
#[test]
fn path_fixtures() {
    for name in [
        "inbox-dmabuf",
        "topo-refused",
        "topo-override",
        "proprietary",
        "old-kernel",
        "efa",
    ] {
        assert_matrix(name);
    }
    let facts = |name: &str| check::gather(&host(name), &Inputs::fixture());
    let f = facts("topo-refused");
    assert!(!f.pairs[0].common_bridge && !f.pairs[0].coherent);
    assert_eq!(f.kernel_release.as_deref(), Some("6.8.0-45-generic"));
    let proc = f.nvidia_proc.unwrap();
    assert_eq!(proc.version.unwrap().release.as_deref(), Some("580.159.04"));
    assert_eq!(
        proc.params.unwrap().grdma_pci_topo_check_override(),
        Some(2)
    );
    assert_eq!(proc.gpus[0].model.as_deref(), Some("NVIDIA H200"));
    assert!(facts("inbox-dmabuf").pairs[0].common_bridge);
    let f = facts("efa");
    assert!(f.efa_nv_peermem);
    assert_eq!(f.hypervisor, Some(true));
    assert_eq!(f.pairs[0].nic_driver.as_deref(), Some("efa"));
    assert!(facts("proprietary").nvidia.unwrap().open_kernel_module == Some(false));
}

/// Issue 47's `/etc/nccl.conf`: read under the environment, named as the setting's source.
#[test]
fn nccl_conf_fixture_reads_etc_nccl_conf() {
    assert_matrix("nccl-conf");
    let f = check::gather(&host("nccl-conf"), &Inputs::fixture());
    assert_eq!(f.nccl_env.conf_files, ["/etc/nccl.conf"]);
    assert!(f.nccl_env.ib_disable);
    assert_eq!(
        f.nccl_env.ib_disable_source,
        nvpeer_core::check::nccl::Source::File {
            path: "/etc/nccl.conf".to_owned(),
            value: "1".to_owned()
        }
    );
}

/// Issue 36's fixtures: their matrices, and the facts gathered from them (GDRCopy through the
/// real `modinfo` on the fixture's module files, the job starters, the platform markers).
#[test]
fn gdrcopy_job_and_platform_fixtures() {
    for name in [
        "gin-ready",
        "gdrcopy-dummy",
        "job-starters",
        "geforce",
        "vgpu",
        "mig",
        "gb10",
        "confidential",
    ] {
        assert_matrix(name);
    }
    let facts = |name: &str| check::gather(&host(name), &Inputs::fixture());
    let f = facts("gdrcopy-dummy");
    let g = f.gdrcopy.unwrap();
    assert!(g.loaded && g.dummy_loaded);
    let installed = g.installed.unwrap();
    assert_eq!(
        installed.error, None,
        "kmod's modinfo reads the fixture's module file"
    );
    assert_eq!(installed.depends, ["nv-p2p-dummy"]);
    assert_eq!(installed.version.as_deref(), Some("2.4"));
    assert_eq!(
        installed.path,
        "/lib/modules/6.8.0-45-generic/updates/dkms/gdrdrv.ko"
    );
    assert_eq!(g.major, Some(508));
    assert!(g.device.is_none());
    assert_eq!(g.libraries[0].version, "2.5");
    let f = facts("job-starters");
    let j = f.job_starters.unwrap();
    let comms: Vec<&str> = j.starters.iter().map(|s| s.comm.as_str()).collect();
    assert_eq!(comms, ["containerd", "kubelet", "slurmd"]);
    assert_eq!(j.default_limit_memlock.as_deref(), Some("8M"));
    let p = f.process.unwrap();
    assert_eq!(p.cap_eff, Some(0xa804_25fb));
    assert!(p.cgroup[0].contains("cri-containerd-"));
    let c = facts("tegra").capability.unwrap();
    assert_eq!(c.soc_family.as_deref(), Some("Tegra"));
    let c = facts("confidential").capability.unwrap();
    assert_eq!(c.confidential.as_deref(), Some("tdx"));
    let c = facts("mig").capability.unwrap();
    assert_eq!(c.mig.get(&0), Some(&vec![1, 2]));
    assert_eq!(facts("gb10").gpus[0].device, 0x2e12);
}

/// The Grace fixtures in rdma_topo's shapes: the complex, its NIC matched by VPD V3, the ACS
/// roles.
#[test]
fn grace_fixtures() {
    use nvpeer_core::check::AcsRole;
    for name in ["gb300", "gb300-acs-cleared", "gh200"] {
        assert_matrix(name);
    }
    let f = check::gather(&host("gb300"), &Inputs::fixture());
    let g = f.grace.as_ref().unwrap();
    assert!(g.unrecognised.is_empty(), "{:?}", g.unrecognised);
    let [c] = g.complexes.as_slice() else {
        panic!("{:?}", g.complexes)
    };
    assert_eq!(c.gpu, "GPU0");
    assert_eq!(c.dma_function.to_string(), "0009:03:00.0");
    assert_eq!(c.nic.as_deref(), Some("mlx5_0"));
    assert_eq!(c.dma_iommu_group, c.gpu_iommu_group);
    let role = |bridge: &str| {
        g.acs_ports
            .iter()
            .find(|p| p.bridge.to_string() == bridge)
            .unwrap()
            .role
    };
    assert_eq!(role("0009:00:00.0"), AcsRole::ComplexRootPort);
    assert_eq!(role("0009:02:00.0"), AcsRole::TowardDma);
    assert_eq!(role("0009:02:01.0"), AcsRole::TowardGpu);
    assert_eq!(role("0009:05:00.0"), AcsRole::Other);
    assert_eq!(role("0000:00:00.0"), AcsRole::Other);
    let [p] = f.pairs.as_slice() else {
        panic!("{:?}", f.pairs)
    };
    assert!(p.coherent);
    assert_eq!(p.source, check::PairSource::DmaDirect);
    // Review R4: CDMM on 580.65.06 is ready through dma-buf, whose CDMM export came with 595's
    // nv-dmabuf.c: the verdict names that assumption.
    ready_assuming(
        &host("gb300"),
        "dma-buf export of CDMM memory on driver 580.65.06",
    );
    let f = check::gather(&host("gh200"), &Inputs::fixture());
    assert!(f.grace.as_ref().unwrap().complexes.is_empty());
    assert!(f.pairs[0].coherent && f.pairs[0].source == check::PairSource::Nearest);
    // A host without Grace root ports has no Grace facts.
    assert!(check::gather(&host("pix"), &Inputs::fixture())
        .grace
        .is_none());
}

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
