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

mod common;
use common::{fixture_names, fixtures};

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
    assert_eq!(
        with_matrix,
        [
            "confidential",
            "degraded-link",
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
            "job-starters",
            "mig",
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
            "vgpu",
            "vm"
        ]
    );
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

/// Review R6: a Grace root port alone does not make a GPU coherent. The gh200 host with its GPU
/// named as a PCIe card (a Grace server holding an H100 PCIe) is no coherent pair: its peer
/// memory maps through PCIe, and NVIDIA's topology rule is not skipped for it.
#[test]
fn a_pcie_gpu_below_a_grace_root_port_is_not_coherent() {
    let (_dir, sys, proc) = fixture_copy("gh200");
    let info = first_information(&proc);
    let text = fs::read_to_string(&info).unwrap();
    assert!(text.contains("NVIDIA GH200 480GB"));
    fs::write(
        &info,
        text.replace("NVIDIA GH200 480GB", "NVIDIA H100 PCIe"),
    )
    .unwrap();
    let report = check::run(
        &Host::new(&sys, &proc),
        &Inputs::fixture(),
        &check::Options::default(),
    );
    let pair = &report.facts.pairs[0];
    assert!(!pair.coherent, "{pair:?}");
    assert_eq!(report.pairs[0].mapping, Some(check::Mapping::Pcie));
}

#[test]
fn the_ready_fixture_is_ready() {
    let report = check::run(&host("pix"), &Inputs::fixture(), &check::Options::default());
    assert!(report.ready, "{}", render::check(&report, false, true));
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
    assert!(report.ready, "{}", render::check(&report, false, true));
    let get = |id: &str| {
        report
            .get(id)
            .unwrap_or_else(|| panic!("no {id} check: {}", render::check(&report, false, true)))
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

/// The first GPU's `/proc/driver/nvidia/gpus/*/information` under procfs root `proc`.
fn first_information(proc: &Path) -> PathBuf {
    fs::read_dir(proc.join("driver/nvidia/gpus"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path()
        .join("information")
}

/// `host` is "ready (dma-buf)", with what the verdict assumed starting with `assumed`. With
/// `NCCL_NET_GDR_LEVEL=PHB`, so that NCCL's distance rule uses a pair through the CPU too.
fn ready_assuming(host: &Host, assumed: &str) {
    let mut inputs = Inputs::fixture();
    inputs.env.insert("NCCL_NET_GDR_LEVEL".into(), "PHB".into());
    let report = check::run(host, &inputs, &check::Options::default());
    assert_eq!(report.verdict.text, "ready (dma-buf)");
    assert!(
        report
            .verdict
            .not_probed
            .iter()
            .any(|n| n.starts_with(assumed)),
        "{assumed}: {:?}",
        report.verdict.not_probed
    );
}

/// A copy of a fixture (symlinks as symlinks) in a temporary directory, to be changed.
fn fixture_copy(name: &str) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let (sys, proc) = (dir.path().join("sys"), dir.path().join("proc"));
    copy_tree(&fixtures().join(name).join("sys"), &sys);
    copy_tree(&fixtures().join(name).join("proc"), &proc);
    (dir, sys, proc)
}

#[test]
fn the_module_disagreeing_with_kallsyms_is_named() {
    let (_dir, sys, proc) = fixture_copy("doca");
    let detected = sys.join("module/nvidia_peermem/nvpeer/core");
    for (written, status, says) in [
        (
            "4x\n",
            Status::Fail,
            "but nvidia_peermem detected 4x (/sys/module/nvidia_peermem/nvpeer/core) where kallsyms says 5x-unmaps",
        ),
        (
            "5x\n",
            Status::Warn,
            "but nvidia_peermem detected 5x (/sys/module/nvidia_peermem/nvpeer/core) where kallsyms says 5x-unmaps",
        ),
        (
            "6x\n",
            Status::Warn,
            "nvidia_peermem reports core \"6x\" in /sys/module/nvidia_peermem/nvpeer/core",
        ),
    ] {
        fs::write(&detected, written).unwrap();
        // Where peer memory is demanded, the rule's own status.
        let peermem = check::Options {
            require: check::Require::Peermem,
            ..check::Options::default()
        };
        let report = check::run(&Host::new(&sys, &proc), &Inputs::fixture(), &peermem);
        let c = report.get("ib_core").unwrap();
        assert_eq!(c.status, status, "{written}: {c:?}");
        assert!(c.detail.contains(says), "{written}: {}", c.detail);
        assert!(c.fix.is_some());
        // This DOCA host also has dma-buf: the broken peer memory is no blocker, but stays said.
        let report = check::run(
            &Host::new(&sys, &proc),
            &Inputs::fixture(),
            &check::Options::default(),
        );
        let c = report.get("ib_core").unwrap();
        assert_eq!(c.status, Status::Warn, "{written}: {c:?}");
        assert!(c.detail.contains(says), "{written}: {}", c.detail);
        assert!(report.ready, "{written}");
    }
}

#[test]
fn old_mofed_has_neither_warning() {
    // The ready fixture's host with an older MLNX_OFED: 5.4-2 (UNMAPS not yet: neither marker)
    // and 4.9 LTS (the legacy core, ib_get_peer_private_data). Both put the core in ib_core and
    // predate the `!=` bug, our persistent client notwithstanding; the module holds ib_core.
    for (version, kallsyms_marker) in [
        ("5.4-2.4.1.3\n", None),
        (
            "4.9-7.1.0.0\n",
            Some("ffffffffc0800080 T ib_get_peer_private_data\t[ib_core]\n"),
        ),
    ] {
        let (_dir, sys, proc) = fixture_copy("pix");
        fs::write(sys.join("module/ib_core/version"), version).unwrap();
        fs::create_dir_all(sys.join("module/ib_core/holders/nvidia_peermem")).unwrap();
        let kallsyms: String = fs::read_to_string(proc.join("kallsyms"))
            .unwrap()
            .lines()
            .filter(|l| !l.contains("ib_umem_stop_invalidation_notifier"))
            .map(|l| format!("{l}\n"))
            .chain(kallsyms_marker.map(str::to_owned))
            .collect();
        fs::write(proc.join("kallsyms"), kallsyms).unwrap();
        let report = check::run(
            &Host::new(&sys, &proc),
            &Inputs::fixture(),
            &check::Options::default(),
        );
        let bugs = report.get("core_bugs").unwrap();
        assert_eq!(bugs.status, Status::Ok, "{version}: {bugs:?}");
        assert!(bugs.detail.contains("predates"), "{}", bugs.detail);
        assert!(report.get("driver_reload").is_none(), "{version}");
        let ib_core = &report.get("ib_core").unwrap().detail;
        let generation = if kallsyms_marker.is_some() {
            "generation 4x: MOFED 4.1-5.0 (legacy PeerDirect) (from kallsyms)"
        } else {
            "generation 5x: MOFED 4.0 or 5.1-5.4-2 (no INVALIDATE_UNMAPS) (from kallsyms)"
        };
        assert!(ib_core.contains(generation), "{ib_core}");
        assert!(
            ib_core.contains(&format!("MOFED {}", version.trim())),
            "{ib_core}"
        );
    }
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

/// Review B3: `/proc/driver/nvidia`'s files are read each on its own. One odd line in `params`
/// (or a bad `information`) loses that file only: the dma-buf host stays ready on its `version`,
/// and the rows that need the file say it could not be read, naming it.
#[test]
fn one_bad_file_of_proc_driver_nvidia_loses_that_file_only() {
    let (_dir, sys, proc) = fixture_copy("inbox-dmabuf");
    let nv = proc.join("driver/nvidia");
    let mut params = fs::read_to_string(nv.join("params")).unwrap();
    params.push_str("Some odd line\n");
    fs::write(nv.join("params"), params).unwrap();
    let h = Host::new(&sys, &proc);
    let run = |options: &check::Options| check::run(&h, &Inputs::fixture(), options);
    let report = run(&check::Options::default());
    assert!(report.ready, "{}", report.verdict.text);
    assert_eq!(report.verdict.text, "ready (dma-buf)");
    assert_eq!(report.get("nvidia_driver").unwrap().status, Status::Ok);
    let why = &report.facts.unreadable["nvidia_proc.params"];
    assert!(
        why.contains("params") && why.contains("Some odd line"),
        "{why}"
    );
    let gpu_gdr = report.get("gpu_gdr").unwrap();
    assert!(gpu_gdr.detail.contains("NVIDIA H200"), "{}", gpu_gdr.detail);
    let gin = run(&check::Options {
        workload: Some(check::Workload::Gin),
        ..Default::default()
    });
    let row = gin.get("gin_driver").unwrap();
    assert_eq!(row.status, Status::Fail, "{row:?}");
    assert!(
        row.detail.contains("could not read") && row.detail.contains("Some odd line"),
        "{}",
        row.detail
    );

    // A GPU's `information` that cannot be parsed: that GPU's model is unknown, and says why.
    let info = first_information(&proc);
    fs::write(&info, "no colon here\n").unwrap();
    let report = run(&check::Options::default());
    assert_eq!(report.verdict.text, "ready (dma-buf)");
    let gpu_gdr = report.get("gpu_gdr").unwrap();
    assert!(
        gpu_gdr.detail.contains("model unknown (could not read")
            && gpu_gdr.detail.contains("information"),
        "{}",
        gpu_gdr.detail
    );

    // An unreadable `version` leaves dma-buf unknown (open or proprietary?) with the true
    // reason, and so the verdict of this dma-buf-only host: unknown, naming the file.
    fs::write(nv.join("version"), "garbage\n").unwrap();
    let report = run(&check::Options::default());
    assert!(!report.ready);
    assert!(
        report.verdict.unknown && report.verdict.text.contains("driver/nvidia/version"),
        "{}",
        report.verdict.text
    );
    let why = &report.pairs[0].why_not[&check::GdrPath::Dmabuf];
    assert!(
        why.reason.contains("could not read") && why.reason.contains("version"),
        "{why:?}"
    );
    assert_eq!(report.get("nvidia_driver").unwrap().status, Status::Unknown);
}

/// Review B6: the EFA host without `efa_nv_peermem` is carried by dma-buf alone: not
/// "ready (EFA)", and what is not needed is so because dma-buf is ready.
#[test]
fn an_efa_host_without_efa_nv_peermem_is_ready_through_dma_buf() {
    let (_dir, sys, proc) = fixture_copy("efa");
    fs::remove_dir_all(sys.join("module/efa_nv_peermem")).unwrap();
    let report = check::run(
        &Host::new(&sys, &proc),
        &Inputs::fixture(),
        &check::Options::default(),
    );
    assert_eq!(report.verdict.text, "ready (dma-buf)");
    assert_eq!(report.verdict.paths, [check::GdrPath::Dmabuf]);
    assert!(report.pairs[0].why_not[&check::GdrPath::Efa]
        .reason
        .contains("efa_nv_peermem is not loaded"));
    let module = report.get("module").unwrap();
    assert!(
        module.detail.starts_with("not needed: dma-buf ready"),
        "{}",
        module.detail
    );
}

/// Review R1: without the regkey, NVIDIA refuses a pair with no common PCIe bridge only on a
/// chipset RM flags unsupported, which nothing outside the driver shows: `topo-refused` with
/// `GrdmaPciTopoCheckOverride: 0` is ready through dma-buf, the assumption named.
#[test]
fn a_pair_without_a_common_bridge_is_ready_with_the_chipset_assumed() {
    let (_dir, sys, proc) = fixture_copy("topo-refused");
    let params = proc.join("driver/nvidia/params");
    let text = fs::read_to_string(&params).unwrap();
    assert!(text.contains("GrdmaPciTopoCheckOverride: 2\n"));
    fs::write(
        &params,
        text.replace(
            "GrdmaPciTopoCheckOverride: 2\n",
            "GrdmaPciTopoCheckOverride: 0\n",
        ),
    )
    .unwrap();
    ready_assuming(
        &Host::new(&sys, &proc),
        "NVIDIA's unsupported-chipset rule for GPU0-mlx5_0",
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
    let again = check::report(
        check::parse_facts(saved.as_bytes(), what).unwrap(),
        &check::Options::default(),
    );
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
        inputs.memlock = Some(nvpeer_core::limits::Memlock {
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
        let report = check::run(&h, &Inputs::fixture(), &check::Options::default());
        let _ = render::check(&report, false, true);
        assert_rejudged(&report, FUZZED[which]);
        if let Ok(t) = topo::discover(&h) {
            let _ = render::topo(&t);
        }
        if let Ok(st) = stats::read(&h) {
            let _ = render::stats(&st, None);
        }
    }
}

/// The DMA function outside its GPU's IOMMU group: NCCL registers through Data Direct with the
/// PCIe mapping, the attach fails (error 524) and NCCL does not fall back, so the pair has no
/// dma-buf (on this dma-buf-only host: not ready) and `grace` warns with rdma_topo's fix;
/// `NCCL_IB_DATA_DIRECT=0` takes the NIC function with the C2C mapping; `GrdmaPciTopoCheckOverride=1`
/// lifts NVIDIA's check.
#[test]
fn a_dma_function_outside_its_gpus_iommu_group() {
    let (_dir, sys, proc) = fixture_copy("gb300");
    let link = sys
        .join("devices/pci0009:00/0009:00:00.0/0009:01:00.0/0009:02:00.0/0009:03:00.0/iommu_group");
    fs::remove_file(&link).unwrap();
    std::os::unix::fs::symlink("../../../../../../kernel/iommu_groups/3", &link).unwrap();
    let report = check::run(
        &Host::new(&sys, &proc),
        &Inputs::fixture(),
        &check::Options::default(),
    );
    let grace = report.get("grace").unwrap();
    assert_eq!(grace.status, Status::Warn, "{grace:?}");
    assert!(
        grace
            .detail
            .contains("DMA function 0009:03:00.0 is not in GPU0's IOMMU group")
            && grace.detail.contains("error 524"),
        "{}",
        grace.detail
    );
    assert!(grace
        .fix
        .as_deref()
        .unwrap()
        .contains("pci=config_acs=\"xx111x0@0009:00:00.0;"));
    assert!(!report.ready, "{}", report.verdict.text);
    assert_eq!(
        report.verdict.text,
        "not ready: paths (GPU0-mlx5_0 has no path)"
    );
    let why = &report.pairs[0].why_not[&check::GdrPath::Dmabuf];
    assert!(
        why.reason.contains("error 524") && why.reason.contains("does not fall back"),
        "{why:?}"
    );
    assert!(why.fix.contains("NCCL_IB_DATA_DIRECT=0"), "{why:?}");
    // NCCL_IB_DATA_DIRECT=0: through the NIC function, the C2C mapping.
    let mut inputs = Inputs::fixture();
    inputs.env.insert("NCCL_IB_DATA_DIRECT".into(), "0".into());
    let report = check::run(&Host::new(&sys, &proc), &inputs, &check::Options::default());
    assert!(report.ready, "{}", report.verdict.text);
    assert_eq!(report.pairs[0].mapping, Some(check::Mapping::C2c));
    assert!(
        report.pairs[0].notes.iter().any(|n| n.starts_with(
            "NCCL_IB_DATA_DIRECT=0: dma-buf through the NIC function with the C2C mapping"
        )),
        "{:?}",
        report.pairs[0].notes
    );
    let params = proc.join("driver/nvidia/params");
    let text = fs::read_to_string(&params).unwrap().replace(
        "GrdmaPciTopoCheckOverride: 0",
        "GrdmaPciTopoCheckOverride: 1",
    );
    fs::write(&params, text).unwrap();
    let report = check::run(
        &Host::new(&sys, &proc),
        &Inputs::fixture(),
        &check::Options::default(),
    );
    assert_eq!(report.get("grace").unwrap().status, Status::Ok);
    assert_eq!(report.pairs[0].mapping, Some(check::Mapping::Pcie));
}
