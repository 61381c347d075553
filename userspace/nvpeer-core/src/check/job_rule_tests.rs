// SPDX-License-Identifier: MIT OR Apache-2.0
//! The rules of what a job needs beyond a path for GPU memory, on hand-made facts: the
//! platforms that cannot (`gpu_gdr`), GDRCopy, memlock where jobs start, GPU-initiated
//! networking. The fixture trees and the binary test the same rules end to end
//! (`nvpeer/tests/fixture_rows.rs`); these reach the cases no fixture has.

use std::collections::BTreeMap;

use super::path_rule_tests::{dmabuf_facts, proc_580};
use super::rule_tests::ready_facts;
use super::*;
use crate::host::limits::Memlock;
use crate::host::nvidia_proc::{self, GpuInformation, NvidiaProc};

fn row<'a>(r: &'a Report, id: &str) -> &'a Check {
    r.get(id)
        .unwrap_or_else(|| panic!("no {id} in {:?}", r.checks))
}

pub(super) fn gin() -> Options {
    Options {
        workload: Some(Workload::Gin),
        ..Options::default()
    }
}

/// GPU0's `information` file with this model and device minor 0.
pub(super) fn information(f: &mut Facts, model: &str) {
    let text = format!(
        "Model: \t\t {model}\nBus Location: \t {}\nDevice Minor: \t 0\n",
        f.gpus[0].address
    );
    let info: GpuInformation =
        nvidia_proc::parse_information("information", "0000:03:00.0", &text).unwrap();
    f.nvidia_proc.get_or_insert_with(NvidiaProc::default).gpus = vec![info];
}

pub(super) fn gdrdrv_ok() -> GdrcopyFacts {
    GdrcopyFacts {
        loaded: true,
        version: Some("2.5".to_owned()),
        params: Some(BTreeMap::from([
            (
                "Built for NVIDIA driver flavor".to_owned(),
                "opensource".to_owned(),
            ),
            ("Version".to_owned(), "2.5".to_owned()),
        ])),
        dummy_loaded: false,
        installed: None,
        device: Some(DeviceNode {
            path: "/dev/gdrdrv".to_owned(),
            mode: 0o666,
            uid: 0,
            gid: 0,
            major: Some(508),
        }),
        major: Some(508),
        libraries: vec![GdrapiLibrary {
            path: "/usr/lib64/libgdrapi.so.2.5".to_owned(),
            version: "2.5".to_owned(),
        }],
    }
}

#[test]
fn gpu_gdr_per_platform() {
    // A capable GPU, and what an older nvpeer's facts could not say.
    let mut f = dmabuf_facts();
    information(&mut f, "NVIDIA H200");
    let r = report(f.clone(), &Options::default());
    assert_eq!(row(&r, "gpu_gdr").status, Status::Ok);
    f.capability = None;
    let r = report(f, &Options::default());
    assert!(row(&r, "gpu_gdr")
        .detail
        .contains("Tegra, confidential VMs and MIG not examined"));

    // MIG with an invalidating module: allowed, said.
    let mut f = ready_facts();
    information(&mut f, "NVIDIA A100-SXM4-80GB");
    f.capability.as_mut().unwrap().mig.insert(0, vec![3]);
    f.modules[0]
        .parameters
        .insert("persistent_api_support".to_owned(), "0".to_owned());
    f.memory_peers.as_mut().unwrap().push(PeerClientInfo {
        name: "nv_mem_nc".to_owned(),
        version: None,
    });
    let r = report(f.clone(), &Options::default());
    let g = row(&r, "gpu_gdr");
    assert_eq!(g.status, Status::Ok, "{g:?}");
    assert!(g.detail.contains("GPU instances 3") && g.detail.ends_with("the loaded one does"));
    assert_eq!(r.pairs[0].paths, [GdrPath::PeerMemory]);
    // The same with the persistent default: peer memory is lost; with no other path, a fail.
    f.modules[0]
        .parameters
        .insert("persistent_api_support".to_owned(), "1".to_owned());
    let r = report(f, &Options::default());
    let g = row(&r, "gpu_gdr");
    assert_eq!(g.status, Status::Fail, "{g:?}");
    assert!(g
        .fix
        .as_deref()
        .unwrap()
        .contains("persistent_api_support=0"));
    assert_eq!(r.verdict.blocking.as_ref().unwrap().check, "gpu_gdr");
    // A vGPU where dma-buf still carries the pair: a warning.
    let mut f = ready_facts();
    f.nvidia_proc = Some(proc_580("580.159.04", true, ""));
    f.verbs = dmabuf_facts().verbs;
    information(&mut f, "NVIDIA A30-8C");
    let r = report(f, &Options::default());
    assert_eq!(row(&r, "gpu_gdr").status, Status::Warn);
    assert_eq!(r.pairs[0].paths, [GdrPath::Dmabuf]);
    assert!(r.pairs[0].why_not[&GdrPath::PeerMemory]
        .reason
        .starts_with("no persistent pins on MIG/vGPU: GPU0 NVIDIA A30-8C is a vGPU"));

    // Host-wide: each platform one failing row; everything else that failed is moot.
    for (what, mark, says) in [
        ("tegra", 0, "Tegra SoC:"),
        ("tdx", 1, "confidential VM: an Intel TDX guest"),
        ("snp", 2, "confidential VM: an AMD SEV-SNP guest"),
        ("gb10", 3, "GB10: a DGX Spark GPU (10de:2e12)"),
        (
            "geforce",
            4,
            "GeForce/TITAN GPU: GPU0 NVIDIA GeForce RTX 4090",
        ),
    ] {
        let mut f = ready_facts();
        f.modules.clear();
        let c = f.capability.as_mut().unwrap();
        match mark {
            0 => c.soc_family = Some("Tegra".to_owned()),
            1 => c.confidential = Some("tdx".to_owned()),
            2 => c.confidential = Some("sev-snp".to_owned()),
            3 => f.gpus[0].device = 0x2e12,
            _ => information(&mut f, "NVIDIA GeForce RTX 4090"),
        }
        let r = report(f, &Options::default());
        let failing: Vec<&str> = r
            .checks
            .iter()
            .filter(|c| c.status == Status::Fail)
            .map(|c| c.id)
            .collect();
        assert_eq!(failing, ["gpu_gdr"], "{what}");
        assert!(row(&r, "gpu_gdr").detail.starts_with(says), "{what}");
        assert!(row(&r, "module").detail.starts_with("moot: "), "{what}");
        assert!(r.pairs[0].paths.is_empty(), "{what}");
    }
}

#[test]
fn gdrcopy_rows() {
    let with = |g: GdrcopyFacts| {
        let mut f = dmabuf_facts();
        f.gdrcopy = Some(g);
        report(f, &Options::default())
    };
    // Nothing of GDRCopy: one row.
    let r = with(GdrcopyFacts::default());
    assert!(row(&r, "gdrcopy").detail.starts_with("not installed"));
    assert!(r.get("gdrcopy_device").is_none() && r.get("gdrcopy_lib").is_none());
    // Healthy.
    let r = with(gdrdrv_ok());
    for id in ["gdrcopy", "gdrcopy_device", "gdrcopy_lib"] {
        assert_eq!(row(&r, id).status, Status::Ok, "{:?}", row(&r, id));
    }
    // Installed, not loaded.
    let mut g = gdrdrv_ok();
    g.loaded = false;
    g.version = None;
    g.params = None;
    g.installed = Some(GdrdrvFile {
        path: "/lib/modules/6.8.0/updates/dkms/gdrdrv.ko".to_owned(),
        version: Some("2.5".to_owned()),
        depends: vec!["nvidia".to_owned()],
        description: None,
        error: None,
    });
    let r = with(g.clone());
    let c = row(&r, "gdrcopy");
    assert_eq!(c.status, Status::Warn);
    assert!(c.detail.starts_with("gdrdrv 2.5 installed"), "{c:?}");
    assert_eq!(
        c.fix.as_deref().unwrap().split(' ').next(),
        Some("`modprobe")
    );
    // The installed file depends on the dummy: a warning, loaded or not (NCCL, NVSHMEM and UCX
    // work without GDRCopy); under `--for gin` a failure.
    g.installed.as_mut().unwrap().depends = vec!["nv_p2p_dummy".to_owned()];
    assert_eq!(row(&with(g.clone()), "gdrcopy").status, Status::Warn);
    let gin = Options {
        workload: Some(crate::check::Workload::Gin),
        ..Options::default()
    };
    let mut f = crate::check::rule_tests::ready_facts();
    f.gdrcopy = Some(g.clone());
    assert_eq!(row(&report(f, &gin), "gdrcopy").status, Status::Fail);
    // A library without the module.
    let g = GdrcopyFacts {
        libraries: gdrdrv_ok().libraries,
        ..GdrcopyFacts::default()
    };
    assert!(row(&with(g), "gdrcopy").detail.starts_with("no gdrdrv:"));
    // Built for the proprietary driver, the open one runs.
    let mut g = gdrdrv_ok();
    g.params.as_mut().unwrap().insert(
        "Built for NVIDIA driver flavor".to_owned(),
        "proprietary".to_owned(),
    );
    let c = row(&with(g), "gdrcopy").clone();
    assert_eq!(c.status, Status::Warn);
    assert!(c.detail.starts_with(
        "flavour mismatch: built for the proprietary NVIDIA driver, the running one is open"
    ));
    // A node of an earlier load; a node only root can open.
    let mut g = gdrdrv_ok();
    g.device.as_mut().unwrap().major = Some(507);
    // A warning: GPUDirect RDMA does not need GDRCopy (`--for gin` fails it).
    let c = row(&with(g), "gdrcopy_device").clone();
    assert_eq!(c.status, Status::Warn);
    assert!(c
        .fix
        .as_deref()
        .unwrap()
        .contains("mknod -m 666 /dev/gdrdrv c 508 0"));
    let mut g = gdrdrv_ok();
    g.device.as_mut().unwrap().mode = 0o600;
    assert_eq!(row(&with(g), "gdrcopy_device").status, Status::Warn);
    // Skew.
    let mut g = gdrdrv_ok();
    g.version = Some("2.4".to_owned());
    let c = row(&with(g), "gdrcopy_lib").clone();
    assert_eq!(c.status, Status::Warn);
    assert!(c.detail.starts_with("skew: libgdrapi 2.5"));
}

#[test]
fn memlock_of_the_job_and_of_its_starters() {
    let as_job = Options {
        as_job: true,
        ..Options::default()
    };
    let mut f = ready_facts();
    f.memlock = Some(Memlock {
        soft: Some(64 << 10),
        hard: Some(64 << 10),
    });
    // No runtime seen: the generic fix; the peer-memory core's pinned_vm said.
    let r = report(f.clone(), &as_job);
    let m = row(&r, "memlock");
    assert_eq!(m.status, Status::Fail);
    assert!(
        m.detail.contains("64 KiB") && m.detail.contains("pinned_vm"),
        "{m:?}"
    );
    assert!(m
        .fix
        .as_deref()
        .unwrap()
        .starts_with("raise the limit where the job is started"));
    assert!(r.get("job_memlock").is_none());
    assert_eq!(r.verdict.text, "not ready: memlock (64 KiB)");
    // In a Slurm job step, by its variable.
    f.process.as_mut().unwrap().markers = vec!["SLURM_JOB_ID".to_owned()];
    let r = report(f.clone(), &as_job);
    assert!(row(&r, "memlock")
        .fix
        .as_deref()
        .unwrap()
        .starts_with("Slurm: "));
    // In a pod whose cgroup names CRI-O.
    f.process.as_mut().unwrap().cgroup =
        vec!["0::/kubepods.slice/kubepods-pod1.slice/crio-9a8b.scope".to_owned()];
    let r = report(f.clone(), &as_job);
    assert!(row(&r, "memlock")
        .fix
        .as_deref()
        .unwrap()
        .starts_with("CRI-O: "));
    // The old facts (no memlock measured).
    f.memlock = None;
    assert_eq!(row(&report(f, &as_job), "memlock").status, Status::Unknown);

    // The starters: kubelet's limit alone warns of nothing; dockerd's does, with Docker's fix.
    let starter = |pid, comm: &str, soft| JobStarter {
        pid,
        comm: comm.to_owned(),
        memlock: Some(Memlock { soft, hard: soft }),
        unit: Some(format!("{comm}.service")),
        unit_limit_memlock: None,
        unit_limit_from: None,
    };
    let mut f = ready_facts();
    f.job_starters = Some(JobStarters {
        starters: vec![starter(10, "kubelet", Some(8 << 20))],
        default_limit_memlock: None,
    });
    let r = report(f.clone(), &Options::default());
    assert_eq!(row(&r, "job_memlock").status, Status::Ok);
    f.job_starters
        .as_mut()
        .unwrap()
        .starters
        .push(starter(11, "dockerd", Some(8 << 20)));
    let r = report(f.clone(), &Options::default());
    let j = row(&r, "job_memlock");
    assert_eq!(j.status, Status::Warn);
    assert!(j.fix.as_deref().unwrap().starts_with("Docker: "));
    assert!(j.detail.contains("pinned_vm"));
    f.job_starters = None;
    assert!(row(&report(f, &Options::default()), "job_memlock")
        .detail
        .starts_with("not examined:"));
}

#[test]
fn gin_rows_fail_only_when_asked() {
    let mut f = dmabuf_facts();
    f.kernel_release = Some("6.8.0-45-generic".to_owned());
    f.nvidia_proc = Some(proc_580(
        "580.159.04",
        true,
        "RegistryDwords: \"RMForceStaticBar1=0;PeerMappingOverride=1\"\n",
    ));
    // The parser keeps the last line of a name: EnableStreamMemOPs from proc_580's first line
    // is 0 until overridden.
    let r = report(f.clone(), &gin());
    let d = row(&r, "gin_driver");
    assert_eq!(d.status, Status::Fail);
    assert!(
        d.detail.contains("EnableStreamMemOPs is 0, not 1")
            && !d.detail.contains("PeerMappingOverride")
    );
    let r = report(f.clone(), &Options::default());
    assert_eq!(row(&r, "gin_driver").status, Status::Ok);
    assert!(row(&r, "gin_driver")
        .detail
        .ends_with("`check --for gin` judges it)"));
    if let Some(p) = f.nvidia_proc.as_mut().and_then(|p| p.params.as_mut()) {
        p.0.insert("EnableStreamMemOPs".to_owned(), "1".to_owned());
    }
    let r = report(f.clone(), &gin());
    assert_eq!(row(&r, "gin_driver").status, Status::Ok);
    assert_eq!(r.verdict.text, "ready (dma-buf) for GIN");

    // dma-buf on a kernel before 6.1 carries GPU memory, not GIN's umems.
    f.kernel_release = Some("5.15.0-119-generic".to_owned());
    let r = report(f.clone(), &gin());
    let u = row(&r, "gin_umem");
    assert_eq!(u.status, Status::Fail);
    assert!(
        u.detail
            .contains("dma-buf on kernel 5.15.0-119-generic (GIN needs 6.1+)"),
        "{u:?}"
    );
    f.kernel_release = Some("6.8.0-45-generic".to_owned());

    // --require peermem leaves dma-buf out of GIN's umems too.
    let peermem = Options {
        require: Require::Peermem,
        ..gin()
    };
    let r = report(f.clone(), &peermem);
    assert!(row(&r, "gin_umem")
        .detail
        .contains("GPU0-mlx5_0: no peer memory"));

    // GDRCopy: asked for by an EFA pair; 2.4 is too old.
    f.pairs[0].nic_driver = Some("efa".to_owned());
    let mut g = gdrdrv_ok();
    g.version = Some("2.4".to_owned());
    g.libraries[0].version = "2.4".to_owned();
    f.gdrcopy = Some(g);
    let r = report(f.clone(), &gin());
    let c = row(&r, "gin_gdrcopy");
    assert_eq!(c.status, Status::Fail, "{c:?}");
    assert!(c.detail.starts_with(
        "GDRCopy too old: asked for by an EFA NIC (aws-ofi-nccl's GIN), but GDRCopy 2.4"
    ));
    f.gdrcopy = Some(gdrdrv_ok());
    let r = report(f, &gin());
    assert_eq!(row(&r, "gin_gdrcopy").status, Status::Ok);
}

/// Review R5: NVIDIA allows a VM's GPU for GPUDirect RDMA only when passed through
/// (NV_FLAG_PASSTHRU, set for IS_PASSTHRU in RmInitAdapter), not a vGPU; cpuinfo's `hypervisor`
/// tells a VM only. A pair without a common bridge in a VM: assumed passed through (said so);
/// in a vGPU guest the chipset rule still applies, named as assumed.
#[test]
fn a_vm_is_assumed_passthrough_unless_its_gpu_is_a_vgpu() {
    let vm = |model: &str| {
        let mut f = dmabuf_facts();
        f.hypervisor = Some(true);
        f.pairs[0].common_bridge = false;
        f.pairs[0].class = crate::host::topo::PathClass::Node;
        information(&mut f, model);
        report(f, &Options::default())
    };
    let r = vm("NVIDIA H100 80GB HBM3");
    assert!(
        r.pairs[0]
            .notes
            .iter()
            .any(|n| n.contains("GPU0 assumed passed through")),
        "{:?}",
        r.pairs[0]
    );
    assert!(r.pairs[0].not_probed.iter().all(|n| !n.contains("chipset")));
    let r = vm("NVIDIA A30-8C");
    assert!(
        r.pairs[0]
            .notes
            .iter()
            .any(|n| n.contains("a vGPU guest: NVIDIA's allowance for passed-through GPUs")),
        "{:?}",
        r.pairs[0]
    );
    assert!(
        r.pairs[0]
            .not_probed
            .iter()
            .any(|n| n.contains("NV_FLAG_PCI_P2P_UNSUPPORTED_CHIPSET")),
        "{:?}",
        r.pairs[0]
    );
}
