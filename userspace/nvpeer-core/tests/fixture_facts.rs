// SPDX-License-Identifier: MIT OR Apache-2.0
//! The facts `check` gathers from the fixture trees of the platforms and paths (Vera, Grace,
//! the readiness paths, `/etc/nccl.conf`, GDRCopy, the job starters), each fixture's matrix too.

use nvpeer_core::check::{self, Inputs};

mod common;
use common::trees::{assert_matrix, host, ready_assuming};

/// The Vera fixtures (rdma_topo's NUMA-based shape): the platform recognised by its root ports,
/// each GPU and ConnectX-9 function with its IOMMU group, how many share it, ATS, and its board
/// (VPD serial number).
#[test]
fn vera_fixtures() {
    for name in [
        "vera",
        "vera-board",
        "vera-shared-group",
        "vera-unknown-rp",
        "vera-unlisted-nics",
    ] {
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
        Some(None)
    );
    let f = check::gather(&host("vera-board"), &Inputs::fixture());
    let sn = |n: &str| by_name(&f, n).board_sn.flatten();
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
    assert_eq!(
        v.root_ports_unrecognised,
        ["root port 0000:00:03.0 (10de:2f9f, an id this nvpeer does not list) with mlx5_2 (0000:04:00.0) below it"]
    );
    // Every NIC's root port unlisted: only the GPU's is shown to be Vera's (by its model); the
    // board rule has no NIC below a Vera port to start from, so each NIC's port is named as not
    // recognised (the row unknown), never silently left out.
    let f = check::gather(&host("vera-unlisted-nics"), &Inputs::fixture());
    let v = f.vera.as_ref().expect("Vera by the GPU's model");
    let rps: Vec<String> = v.root_ports.iter().map(ToString::to_string).collect();
    assert_eq!(rps, ["0000:00:00.0"]);
    let unrecognised: Vec<&str> = v
        .root_ports_unrecognised
        .iter()
        .map(|s| s.split(' ').nth(2).unwrap_or(""))
        .collect();
    assert_eq!(
        unrecognised,
        ["0000:00:01.0", "0000:00:02.0", "0000:00:03.0"]
    );
    // The listed fixture's facts carry no such reasons (and none in the JSON).
    let f = check::gather(&host("vera"), &Inputs::fixture());
    let v = f.vera.as_ref().expect("Vera by its ids");
    assert!(v.root_ports_by_layout.is_empty());
    assert!(v.root_ports_unrecognised.is_empty());
    let json = serde_json::to_string(&f).expect("facts serialise");
    assert!(!json.contains("root_ports_by_layout") && !json.contains("root_ports_unrecognised"));
    // Not a Vera host: no such facts, and none in the JSON.
    let f = check::gather(&host("gb300"), &Inputs::fixture());
    assert!(f.vera.is_none());
    assert!(serde_json::to_value(&f).unwrap().get("vera").is_none());
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
