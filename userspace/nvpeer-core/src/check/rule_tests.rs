// SPDX-License-Identifier: MIT OR Apache-2.0
//! The rules on hand-made [`Facts`]: no sysfs tree, no file read.

use std::collections::BTreeMap;

use super::*;
use crate::kernel::{symbols, Iommu, IommuMode, Kallsyms, SymbolOwner};
use crate::limits::Memlock;
use crate::nccl;
use crate::nvidia_proc::{self, NvidiaProc};
use crate::pci::{Acs, Bar, PciAddress};
use crate::peermem::{Implementation, LoadedModule};
use crate::providers::{
    CoreGeneration, GenerationSource, IbCore, NvidiaDriver, PeerCore, PersistentApi,
};
use crate::rdma::{Port, RdmaDevice};
use crate::topo::{NcclPathType, PathClass, Topology};
use crate::verbs::{DmabufProbe, Verbs, VerbsDevice};

fn address(text: &str) -> PciAddress {
    text.parse().unwrap()
}

/// A host that is ready through peer memory: our module (persistent nv_mem), NVIDIA 570 (no
/// `/proc/driver/nvidia`, so dma-buf is not judged possible), MOFED 25.04 with the core in
/// ib_core, one ACTIVE port, one GPU with a 64 GiB BAR1 paired with mlx5_0 below one switch,
/// IOMMU passthrough, no topology, memlock unlimited.
pub(super) fn ready_facts() -> Facts {
    let module = LoadedModule {
        name: "nvidia_peermem".to_owned(),
        version: Some("0.1.0".to_owned()),
        implementation: Implementation::Nvpeer,
        marker: Some("nvpeer 0.1.0".to_owned()),
        parameters: BTreeMap::from([("persistent_api_support".to_owned(), "1".to_owned())]),
        core: Some("5x-unmaps".to_owned()),
    };
    let found = BTreeMap::from(
        [
            (symbols::P2P_GET_PAGES, "nvidia"),
            (symbols::P2P_GET_PAGES_PERSISTENT, "nvidia"),
            (symbols::REGISTER_PEER_MEMORY_CLIENT, "ib_core"),
            (symbols::STOP_INVALIDATION_NOTIFIER, "ib_core"),
            (symbols::IB_UMEM_DMABUF_GET, "ib_core"),
        ]
        .map(|(s, m)| (s.to_owned(), SymbolOwner::Module(m.to_owned()))),
    );
    let present = [
        nccl::DetectionPath::MemoryPeersNvMem,
        nccl::DetectionPath::ModuleNvidiaPeermem,
    ];
    let env = BTreeMap::new();
    let nccl_env = nccl::nccl_env(&env);
    Facts {
        modules: vec![module],
        memory_peers: Some(vec![PeerClientInfo {
            name: "nv_mem".to_owned(),
            version: Some("0.1.0".to_owned()),
        }]),
        nvidia_proc: None,
        kernel_release: Some("6.8.0-45-generic".to_owned()),
        hypervisor: Some(false),
        pairs: vec![PairFacts {
            gpu: "GPU0".to_owned(),
            nic: "mlx5_0".to_owned(),
            source: PairSource::Nearest,
            class: PathClass::Pix,
            nccl_class: NcclPathType::Pix,
            common_bridge: true,
            coherent: false,
            nic_driver: Some("mlx5_core".to_owned()),
            nic_vendor: 0x15b3,
            nic_device: 0x1021,
            gpu_iommu_group: Some("0".to_owned()),
            nic_iommu_group: Some("0".to_owned()),
            gpu_link: None,
            nic_link: None,
        }],
        grace: None,
        efa_nv_peermem: false,
        nvidia: Some(NvidiaDriver {
            module: "nvidia".to_owned(),
            stand_in: false,
            version: Some("570.86.15".to_owned()),
            open_kernel_module: Some(true),
            persistent_api: PersistentApi::Explicit,
            p2p_exported_by: Some("nvidia".to_owned()),
        }),
        ib_core: Some(IbCore {
            ib_core_loaded: true,
            ib_core_version: Some("25.04-0.6.1".to_owned()),
            peer_core: Some(PeerCore {
                provider: "ib_core".to_owned(),
                stand_in: false,
                version: Some("25.04-0.6.1".to_owned()),
                srcversion: None,
                generation: Some(CoreGeneration::Mofed5xUnmaps),
                generation_from: Some(GenerationSource::Kallsyms),
                memory_peers_sysfs: None,
                holders: None,
                refcnt: None,
            }),
            kallsyms_readable: true,
        }),
        kallsyms: Kallsyms::Read { found },
        rdma_devices: vec![RdmaDevice {
            name: "rxe0".to_owned(),
            driver: None,
            pci: None,
            ports: vec![Port {
                number: "1".to_owned(),
                state: "ACTIVE".to_owned(),
                phys_state: Some("LinkUp".to_owned()),
                link_layer: Some("Ethernet".to_owned()),
                rate: None,
            }],
            unreadable: Vec::new(),
            unreadable_details: Vec::new(),
        }],
        verbs: Verbs::Skipped {
            reason: "hand-made facts".to_owned(),
        },
        gpus: vec![GpuFacts {
            label: "GPU0".to_owned(),
            address: address("0000:03:00.0"),
            vendor: 0x10de,
            device: 0x2330,
            numa_node: Some(0),
            bar1: Some(Bar {
                index: 1,
                start: 0x2000_0000_0000,
                size: 64 << 30,
                prefetchable: true,
                is_64bit: true,
            }),
        }],
        topology: None,
        iommu: Some(Iommu {
            mode: IommuMode::Passthrough,
            units: vec!["dmar0".to_owned()],
            groups: 1,
            device_domains: BTreeMap::new(),
            cmdline: vec!["iommu=pt".to_owned()],
        }),
        acs: Vec::new(),
        memlock: None,
        nccl: nccl::NCCL_RULES
            .iter()
            .map(|r| nccl::replay(r, &present))
            .collect(),
        ucx: nccl::replay(&nccl::UCX_RULE, &present),
        ucx_gpu_direct_rdma: None,
        dmabuf: DmabufFacts {
            kernel: Some(true),
            gpu_open_kernel_module: Some(true),
            nics: BTreeMap::new(),
            nccl_dmabuf_enable: nccl_env.dmabuf_enable,
        },
        nccl_env,
        module_counters: BTreeMap::new(),
        provenance: None,
        ucx_cuda_copy_dmabuf: None,
        modprobe_target: None,
        gdrcopy: Some(GdrcopyFacts::default()),
        job_starters: Some(JobStarters::default()),
        process: Some(ProcessFacts::default()),
        capability: Some(CapabilityFacts::default()),
        gin_env: BTreeMap::new(),
        unreadable: BTreeMap::new(),
        hostname: Some("node-a01".to_owned()),
    }
}

fn get<'a>(checks: &'a [Check], id: &str) -> &'a Check {
    checks
        .iter()
        .find(|c| c.id == id)
        .unwrap_or_else(|| panic!("no {id} check in {checks:?}"))
}

#[test]
fn hand_made_ready_facts_are_ready() {
    let facts = ready_facts();
    let r = report(facts, &Options::default());
    let not_ok: Vec<&Check> = r.checks.iter().filter(|c| c.status != Status::Ok).collect();
    // `topology` is left out of these facts: its check says so, as unknown (which decides
    // nothing here: the pairs are given).
    assert_eq!(
        not_ok.iter().map(|c| c.id).collect::<Vec<_>>(),
        ["topology", "acs"],
        "{not_ok:?}"
    );
    assert!(r.ready);
    assert_eq!(r.verdict.text, "ready (peer memory)");
    assert_eq!(r.status, Status::Unknown);
    assert_eq!(
        get(&r.checks, "module").detail,
        "nvpeer 0.1.0 loaded as nvidia_peermem"
    );
    assert!(get(&r.checks, "core_bugs").detail.contains("has the fix"));
    assert!(get(&r.checks, "bar1").detail.contains("64 GiB"));
    assert!(get(&r.checks, "gpus")
        .detail
        .contains("GPU0 0000:03:00.0 [10de:2330] NUMA 0"));
}

#[test]
fn no_module_fails_module_newest_nccl_and_ucx() {
    let mut f = ready_facts();
    f.modules.clear();
    f.memory_peers = None;
    f.nccl = nccl::NCCL_RULES
        .iter()
        .map(|r| nccl::replay(r, &[]))
        .collect();
    f.ucx = nccl::replay(&nccl::UCX_RULE, &[]);
    // Without DMA-BUF either: nothing gives GPUDirect RDMA.
    f.dmabuf.gpu_open_kernel_module = Some(false);
    let r = report(f, &Options::default());
    assert!(!r.ready);
    let failed: Vec<&str> = r
        .checks
        .iter()
        .filter(|c| c.status == Status::Fail)
        .map(|c| c.id)
        .collect();
    assert_eq!(failed, ["paths", "module", "peer_clients", "nccl", "ucx"]);
    assert_eq!(r.verdict.text, "not ready: paths (GPU0-mlx5_0 has no path)");
    assert!(get(&r.checks, "module")
        .fix
        .as_deref()
        .unwrap()
        .contains("modprobe"));
    assert!(r.get("parameters").is_none());
    assert_eq!(get(&r.checks, "dmabuf").status, Status::Warn);
}

#[test]
fn small_bar1_memlock_and_acs_warn() {
    let mut f = ready_facts();
    if let Some(b) = &mut f.gpus[0].bar1 {
        b.size = 256 << 20;
    }
    f.memlock = Some(Memlock {
        soft: Some(64 << 10),
        hard: Some(64 << 10),
    });
    f.acs = vec![AcsFinding {
        bridge: address("0000:02:00.0"),
        gpu: "GPU0".to_owned(),
        nic: "mlx5_0".to_owned(),
        acs: Some(Acs::Present {
            offset: 0x148,
            control: 0x0004,
        }),
        redirecting: vec!["P2P Request Redirect".to_owned()],
    }];
    f.topology = Some(Topology::build(Vec::new(), &[]));
    let checks = judge(&f, &Options::default()).checks;
    let bar1 = get(&checks, "bar1");
    assert_eq!(bar1.status, Status::Warn);
    assert!(bar1.detail.contains("GPU0 can map only"), "{}", bar1.detail);
    let memlock = get(&checks, "memlock");
    assert_eq!(memlock.status, Status::Warn);
    assert!(memlock.detail.contains("64 KiB"), "{}", memlock.detail);
    let acs = get(&checks, "acs");
    assert_eq!(acs.status, Status::Warn);
    assert!(
        acs.detail
            .contains("P2P Request Redirect on 0000:02:00.0 (GPU0-mlx5_0)"),
        "{}",
        acs.detail
    );
}

#[test]
fn a_legacy_core_fails_nvidias_module_with_peerdirect_support_0() {
    let mut f = ready_facts();
    let m = &mut f.modules[0];
    m.implementation = Implementation::NvidiaPeermem;
    m.marker = None;
    m.core = None;
    m.parameters
        .insert("peerdirect_support".to_owned(), "0".to_owned());
    if let Some(p) = f.ib_core.as_mut().and_then(|c| c.peer_core.as_mut()) {
        p.generation = Some(CoreGeneration::Legacy4x);
    }
    let checks = judge(&f, &Options::default()).checks;
    let p = get(&checks, "parameters");
    assert_eq!(p.status, Status::Fail, "{p:?}");
    assert!(p.fix.as_deref().unwrap().contains("peerdirect_support=1"));
    assert_eq!(get(&checks, "module").status, Status::Info);
}

#[test]
fn unreadable_facts_are_said_so_by_their_checks() {
    let mut f = ready_facts();
    f.unreadable.insert(
        "bars".to_owned(),
        "cannot read /sys/x/resource: EACCES".to_owned(),
    );
    let checks = judge(&f, &Options::default()).checks;
    let bar1 = get(&checks, "bar1");
    assert_eq!(bar1.status, Status::Unknown);
    assert_eq!(
        bar1.detail,
        "could not check: cannot read /sys/x/resource: EACCES"
    );
    f.unreadable.insert("gpus".to_owned(), "bad".to_owned());
    let checks = judge(&f, &Options::default()).checks;
    assert_eq!(get(&checks, "gpus").detail, "could not check: bad");
    assert!(get(&checks, "bar1").detail.starts_with("not examined:"));
}

#[test]
fn hand_made_facts_survive_json() {
    let mut f = ready_facts();
    f.topology = Some(Topology::build(Vec::new(), &[]));
    f.unreadable.insert("iommu".to_owned(), "x".to_owned());
    let r = report(f, &Options::default());
    let text = serde_json::to_string(&r).unwrap();
    let back = parse_facts(text.as_bytes(), "report.json").unwrap();
    assert_eq!(judge(&back, &Options::default()).checks, r.checks);
    // The bare facts object too.
    let bare = serde_json::to_string(&r.facts).unwrap();
    assert_eq!(
        judge(
            &parse_facts(bare.as_bytes(), "facts.json").unwrap(),
            &Options::default()
        )
        .checks,
        r.checks
    );
}

#[test]
fn what_is_not_a_report_is_refused_in_one_line() {
    for (text, says) in [
        ("not json", "not JSON"),
        (
            r#"{"schema": "nvpeer.topo/1", "gpus": []}"#,
            "not a nvpeer.check/2 report",
        ),
        (
            r#"{"schema": "nvpeer.check/1", "checks": []}"#,
            "not a `nvpeer check --json` report",
        ),
        (
            r#"{"modules": 3, "unreadable": {}}"#,
            "not a `nvpeer check --json` report",
        ),
        ("[]", "not a `nvpeer check --json` report"),
        (
            r#"{"modules": []}"#,
            "from an nvpeer older than `check --facts`",
        ),
    ] {
        let e = parse_facts(text.as_bytes(), "in.json")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("in.json: ") && e.contains(says),
            "{text}: {e}"
        );
        assert_eq!(e.lines().count(), 1, "{e}");
    }
}

#[test]
fn modprobe_target_warns_when_the_next_load_is_not_ours() {
    use crate::modprobe::{ModprobeTarget, TargetKind};
    let status = |path: Option<&str>, kind: Option<TargetKind>, ours: bool| {
        let mut f = ready_facts();
        if !ours {
            f.modules.clear();
        }
        f.modprobe_target = Some(ModprobeTarget {
            release: "7.2.0".to_owned(),
            path: path.map(str::to_owned),
            kind,
        });
        let c = judge(&f, &Options::default())
            .checks
            .into_iter()
            .find(|c| c.id == "modprobe")
            .unwrap();
        (c.status, c.detail)
    };
    let (s, d) = status(
        Some("updates/nvidia_peermem.ko"),
        Some(TargetKind::Nvpeer),
        true,
    );
    assert_eq!(s, Status::Ok);
    assert!(d.contains("loads nvpeer"), "{d}");
    let (s, d) = status(
        Some("kernel/nvidia-peermem.ko"),
        Some(TargetKind::Other),
        true,
    );
    assert_eq!(s, Status::Warn);
    assert!(d.contains("replaces ours"), "{d}");
    assert_eq!(status(None, None, true).0, Status::Warn);
    assert_eq!(status(None, None, false).0, Status::Ok);
    assert_eq!(
        status(
            Some("kernel/nvidia-peermem.ko"),
            Some(TargetKind::Other),
            false
        )
        .0,
        Status::Ok
    );
    let mut f = ready_facts();
    f.modprobe_target = None;
    assert!(
        judge(&f, &Options::default())
            .checks
            .iter()
            .all(|c| c.id != "modprobe"),
        "no modules.dep: no check"
    );
}

/// `/proc/driver/nvidia` of a 580 driver as the real files print it
/// (../shared/REAL-HOST-H200.txt), with `release`, `open` and `params` lines added.
pub(super) fn proc_580(release: &str, open: bool, params: &str) -> NvidiaProc {
    let flavour = if open {
        "Open Kernel Module for x86_64"
    } else {
        "x86_64 Kernel Module"
    };
    NvidiaProc {
        version: Some(
            nvidia_proc::parse_version(
                "version",
                &format!("NVRM version: NVIDIA UNIX {flavour}  {release}  Release Build  (nixbld@)  \n"),
            )
            .unwrap(),
        ),
        params: Some(
            nvidia_proc::parse_params(
                "params",
                &format!("EnableStreamMemOPs: 0\nGrdmaPciTopoCheckOverride: 0\nCoherentGPUMemoryMode: \"\"\nRegistryDwords: \"\"\n{params}"),
            )
            .unwrap(),
        ),
        gpus: Vec::new(),
    }
}

/// An inbox host ready through dma-buf alone: no peer-memory module or core, open modules 580,
/// ib_umem_dmabuf_get in the kernel, libibverbs with ibv_reg_dmabuf_mr, mlx5_0 answering NCCL's
/// probe with EBADF.
pub(super) fn dmabuf_facts() -> Facts {
    let mut f = ready_facts();
    f.modules.clear();
    f.memory_peers = None;
    f.module_counters.clear();
    f.nccl = nccl::NCCL_RULES
        .iter()
        .map(|r| nccl::replay(r, &[]))
        .collect();
    f.ucx = nccl::replay(&nccl::UCX_RULE, &[]);
    if let Some(c) = f.ib_core.as_mut() {
        c.peer_core = None;
        c.ib_core_version = None;
    }
    f.kallsyms = Kallsyms::Read {
        found: BTreeMap::from(
            [
                (symbols::P2P_GET_PAGES, "nvidia"),
                (symbols::P2P_GET_PAGES_PERSISTENT, "nvidia"),
                (symbols::IB_UMEM_DMABUF_GET, "ib_core"),
            ]
            .map(|(s, m)| (s.to_owned(), SymbolOwner::Module(m.to_owned()))),
        ),
    };
    f.nvidia_proc = Some(proc_580("580.159.04", true, ""));
    f.verbs = Verbs::Probed {
        devices: vec![VerbsDevice {
            name: "mlx5_0".to_owned(),
            dmabuf: DmabufProbe::Supported { errno: 9 },
        }],
        reg_dmabuf_mr: Some(true),
    };
    f
}

fn why_not(r: &Report, path: GdrPath) -> String {
    r.pairs[0]
        .why_not
        .get(&path)
        .map(|w| w.reason.clone())
        .unwrap_or_default()
}

#[test]
fn a_dma_buf_only_host_is_ready_and_the_peer_memory_rows_are_not_needed() {
    let r = report(dmabuf_facts(), &Options::default());
    assert_eq!(r.verdict.text, "ready (dma-buf)", "{:?}", r.checks);
    assert!(r.ready && r.verdict.not_probed.is_empty());
    let p = &r.pairs[0];
    assert_eq!(p.paths, [GdrPath::Dmabuf]);
    assert_eq!(p.preferred, Some(GdrPath::Dmabuf));
    assert_eq!(p.mapping, Some(Mapping::Pcie));
    assert!(why_not(&r, GdrPath::PeerMemory).contains("no peer-memory core"));
    for id in ["module", "peer_clients", "ib_core", "nccl", "ucx"] {
        let c = r.get(id).unwrap();
        assert_eq!(c.status, Status::Ok, "{id}: {c:?}");
        assert!(!c.applies, "{id}: {c:?}");
        assert!(
            c.detail.starts_with("not needed: dma-buf ready; "),
            "{id}: {}",
            c.detail
        );
        assert!(c.fix.is_none());
    }
    assert!(r.checks.iter().all(|c| c.status != Status::Fail));
    // Unless the policy demands peer memory: then nothing is settled.
    let r = report(
        dmabuf_facts(),
        &Options {
            require: Require::Peermem,
            ..Options::default()
        },
    );
    assert_eq!(
        r.verdict.text,
        "not ready: paths (GPU0-mlx5_0 has no peermem path)"
    );
    assert_eq!(r.get("module").unwrap().status, Status::Fail);
}

#[test]
fn every_dma_buf_failure_class_is_named() {
    type Change = fn(&mut Facts);
    let cases: [(Change, &str); 8] = [
        (
            |f| f.nvidia_proc = Some(proc_580("550.54.15", false, "")),
            "proprietary kernel modules export no GPU memory as dma-buf",
        ),
        (
            |f| f.nvidia_proc = Some(proc_580("510.108.03", true, "")),
            "driver 510.108.03 predates dma-buf export",
        ),
        (
            |f| {
                f.kernel_release = Some("5.4.0-150-generic".to_owned());
                if let Kallsyms::Read { found } = &mut f.kallsyms {
                    found.remove(symbols::IB_UMEM_DMABUF_GET);
                }
            },
            "kernel 5.4.0-150-generic is older than 5.12",
        ),
        (
            |f| {
                f.verbs = Verbs::Probed {
                    devices: Vec::new(),
                    reg_dmabuf_mr: Some(false),
                }
            },
            "no ibv_reg_dmabuf_mr (rdma-core older than 34)",
        ),
        (
            |f| {
                f.verbs = Verbs::Probed {
                    devices: vec![VerbsDevice {
                        name: "mlx5_0".to_owned(),
                        dmabuf: DmabufProbe::Unsupported { errno: 95 },
                    }],
                    reg_dmabuf_mr: Some(true),
                }
            },
            "mlx5_0 answers NCCL's probe (ibv_reg_dmabuf_mr with fd -1) with EOPNOTSUPP",
        ),
        (
            |f| {
                f.verbs = Verbs::Probed {
                    devices: vec![VerbsDevice {
                        name: "mlx5_0".to_owned(),
                        dmabuf: DmabufProbe::Unsupported { errno: 93 },
                    }],
                    reg_dmabuf_mr: Some(true),
                }
            },
            "with EPROTONOSUPPORT: the kernel has no dma-buf MR method",
        ),
        (
            |f| {
                f.verbs = Verbs::Probed {
                    devices: Vec::new(),
                    reg_dmabuf_mr: Some(true),
                }
            },
            "libibverbs does not list mlx5_0",
        ),
        (
            |f| {
                f.nvidia_proc = Some(proc_580(
                    "580.159.04",
                    true,
                    "GrdmaPciTopoCheckOverride: 2\n",
                ))
            },
            "GrdmaPciTopoCheckOverride=2",
        ),
    ];
    for (change, says) in cases {
        let mut f = dmabuf_facts();
        change(&mut f);
        let r = report(f, &Options::default());
        assert!(!r.ready, "{says}");
        assert!(
            why_not(&r, GdrPath::Dmabuf).contains(says),
            "{says}: {:?}",
            r.pairs
        );
        assert_eq!(r.get("dmabuf").unwrap().status, Status::Warn, "{says}");
        assert_eq!(r.get("paths").unwrap().status, Status::Fail, "{says}");
        assert_eq!(
            r.verdict.text, "not ready: paths (GPU0-mlx5_0 has no path)",
            "{says}"
        );
    }
}

#[test]
fn nvidias_topology_rule_by_release_override_vm_and_coherence() {
    let far = |release: &str, params: &str, change: fn(&mut Facts)| {
        let mut f = dmabuf_facts();
        f.nvidia_proc = Some(proc_580(release, true, params));
        f.pairs[0].common_bridge = false;
        f.pairs[0].class = PathClass::Node;
        change(&mut f);
        report(f, &Options::default())
    };
    // 580.65.06 brought the common-switch rule, for chipsets RM flags unsupported: which ones is
    // not in sysfs, so the pair is ready and names the assumption (review R1: it was refused).
    let chipset = |r: &Report| {
        r.pairs[0]
            .not_probed
            .iter()
            .any(|n| n.contains("NV_FLAG_PCI_P2P_UNSUPPORTED_CHIPSET"))
    };
    let r = far("580.65.06", "", |_| {});
    assert!(r.ready && chipset(&r), "{:?}", r.pairs);
    assert!(r
        .verdict
        .not_probed
        .iter()
        .any(|n| n.contains("GPU0-mlx5_0 (NODE, no common PCIe bridge)")));
    let r = far("575.64.05", "", |_| {});
    assert!(r.ready && !chipset(&r));
    let mut near = dmabuf_facts();
    near.nvidia_proc = Some(proc_580("580.65.06", true, ""));
    assert!(!chipset(&report(near, &Options::default())));
    let r = far("580.65.06", "GrdmaPciTopoCheckOverride: 1\n", |_| {});
    assert!(r.ready);
    assert!(r.pairs[0]
        .notes
        .iter()
        .any(|n| n.contains("GrdmaPciTopoCheckOverride=1")));
    assert!(far("580.65.06", "", |f| f.hypervisor = Some(true)).ready);
    let r = far("580.65.06", "", |f| f.pairs[0].coherent = true);
    assert!(r.ready);
    assert_eq!(r.pairs[0].mapping, Some(Mapping::C2c));
    // Before 570.86.15 there is no rule, and the regkey does nothing.
    assert!(far("560.35.03", "GrdmaPciTopoCheckOverride: 2\n", |_| {}).ready);
}

#[test]
fn cdmm_refuses_invalidating_pins_on_580_only() {
    let cdmm = |release: &str, persistent: &str| {
        let mut f = ready_facts();
        f.pairs[0].coherent = true;
        f.pairs[0].class = PathClass::Node;
        f.pairs[0].common_bridge = false;
        f.nvidia_proc = Some(proc_580(
            release,
            true,
            "CoherentGPUMemoryMode: \"driver\"\n",
        ));
        // NVIDIA's module: with persistent_api_support=0 it registers an invalidating nv_mem.
        let m = &mut f.modules[0];
        m.implementation = Implementation::NvidiaPeermem;
        m.marker = None;
        m.core = None;
        m.parameters
            .insert("persistent_api_support".to_owned(), persistent.to_owned());
        f.grace = Some(crate::check::GraceFacts::default());
        if release.is_empty() {
            // Neither /proc/driver/nvidia/version nor /sys/module/nvidia/version names it.
            if let Some(n) = f.nvidia.as_mut() {
                n.version = None;
            }
        }
        report(f, &Options::default())
    };
    let r = cdmm("580.65.06", "0");
    assert!(
        why_not(&r, GdrPath::PeerMemory).contains("CDMM"),
        "{:?}",
        r.pairs
    );
    let r = cdmm("580.65.06", "1");
    assert!(
        r.pairs[0].paths.contains(&GdrPath::PeerMemory),
        "{:?}",
        r.pairs
    );
    assert_eq!(r.pairs[0].mapping, Some(Mapping::C2c));
    assert!(r.pairs[0]
        .notes
        .iter()
        .any(|n| n.contains("peer-memory MRs here are mapped through C2C")));
    // Review R4: nv-p2p.h names only nvidia_p2p_get_pages: the persistent pins are assumed, and
    // said so (the row claimed they "do" support CDMM).
    assert!(
        r.pairs[0]
            .not_probed
            .iter()
            .any(|n| n
                .contains("CDMM pins through nvidia_p2p_get_pages_persistent on driver 580.65.06")),
        "{:?}",
        r.pairs[0]
    );
    let row = &r.get("cdmm").unwrap().detail;
    assert!(
        row.contains("assumed to work (not confirmed by NVIDIA)") && !row.contains(") do"),
        "{row}"
    );
    let r = cdmm("590.44.01", "0");
    assert!(r.pairs[0].paths.contains(&GdrPath::PeerMemory));
    // Review B4: an unknown release is not judged (it was "supports it (590.44.01+)"); with an
    // invalidating client loaded the row warns and the pair says what it assumed.
    let r = cdmm("", "0");
    let row = r.get("cdmm").unwrap();
    assert_eq!(row.status, Status::Warn, "{row:?}");
    assert!(
        row.detail.contains("driver release unknown: not judged")
            && !row.detail.contains("supports it"),
        "{}",
        row.detail
    );
    assert!(
        r.pairs[0]
            .not_probed
            .iter()
            .any(|n| n.contains("CDMM pins")),
        "{:?}",
        r.pairs[0]
    );
    let r = cdmm("", "1");
    assert_eq!(r.get("cdmm").unwrap().status, Status::Ok);
    assert!(r.get("cdmm").unwrap().detail.contains("not judged"));
}

#[test]
fn a_loaded_module_keeps_its_problems_as_warnings_when_dma_buf_carries() {
    let mut f = dmabuf_facts();
    let mut module = ready_facts().modules.remove(0);
    module.implementation = Implementation::NvidiaPeermem;
    module.marker = None;
    module.core = None;
    f.modules = vec![module];
    // Its client did not register: peer memory fails, which dma-buf makes no blocker.
    f.memory_peers = Some(Vec::new());
    let r = report(f, &Options::default());
    assert_eq!(r.verdict.text, "ready (dma-buf)");
    let c = r.get("peer_clients").unwrap();
    assert_eq!(c.status, Status::Warn, "{c:?}");
    assert!(
        c.detail.starts_with("dma-buf ready, so not blocking: "),
        "{}",
        c.detail
    );
}

/// The dma-buf host with its NIC an EFA device `efa_0`, `efa_nv_peermem` loaded or not, and
/// the NIC's answer to NCCL's dma-buf probe.
fn efa_facts(shim: bool, probe: DmabufProbe) -> Facts {
    let mut f = dmabuf_facts();
    f.pairs[0].nic = "efa_0".to_owned();
    f.pairs[0].nic_driver = Some("efa".to_owned());
    f.rdma_devices[0].name = "efa_0".to_owned();
    f.rdma_devices[0].driver = Some("efa".to_owned());
    f.efa_nv_peermem = shim;
    f.verbs = Verbs::Probed {
        devices: vec![VerbsDevice {
            name: "efa_0".to_owned(),
            dmabuf: probe,
        }],
        reg_dmabuf_mr: Some(true),
    };
    f
}

#[test]
fn efa_pairs_are_ready_through_efa_nv_peermem_or_dma_buf() {
    let efa = |shim: bool, probe: DmabufProbe| report(efa_facts(shim, probe), &Options::default());
    let r = efa(true, DmabufProbe::Unsupported { errno: 95 });
    assert_eq!(r.verdict.text, "ready (EFA)", "{:?}", r.checks);
    assert_eq!(r.pairs[0].paths, [GdrPath::Efa]);
    assert_eq!(r.pairs[0].mapping, Some(Mapping::Pcie));
    assert!(r
        .get("module")
        .unwrap()
        .detail
        .starts_with("not needed: EFA ready"));
    // Without efa_nv_peermem only dma-buf carries the pair (review B6: this was "ready (EFA)").
    let r = efa(false, DmabufProbe::Supported { errno: 9 });
    assert_eq!(r.verdict.text, "ready (dma-buf)");
    assert_eq!(r.verdict.paths, [GdrPath::Dmabuf]);
    assert_eq!(r.pairs[0].preferred, Some(GdrPath::Dmabuf));
    let r = efa(false, DmabufProbe::Unsupported { errno: 95 });
    assert!(!r.ready);
    assert_eq!(r.get("efa").unwrap().status, Status::Warn);
    assert!(why_not(&r, GdrPath::PeerMemory).contains("EFA has no PeerDirect"));
    assert!(why_not(&r, GdrPath::Efa).contains("efa_nv_peermem is not loaded"));
}

/// Review B5: efa_nv_peermem pins through nvidia_p2p_get_pages, whose pages are C2C pages on a
/// coherent platform (FIELD §1.2.3): the EFA path maps through C2C there, as peer memory does.
#[test]
fn efa_on_a_coherent_platform_maps_through_c2c() {
    let mut f = efa_facts(true, DmabufProbe::Unsupported { errno: 95 });
    f.pairs[0].coherent = true;
    let r = report(f, &Options::default());
    assert_eq!(r.verdict.text, "ready (EFA)", "{:?}", r.checks);
    assert_eq!(r.pairs[0].preferred, Some(GdrPath::Efa));
    assert_eq!(r.pairs[0].mapping, Some(Mapping::C2c));
}

#[test]
fn require_dmabuf_fails_a_peer_memory_host() {
    let r = report(
        ready_facts(),
        &Options {
            require: Require::Dmabuf,
            ..Options::default()
        },
    );
    assert_eq!(
        r.verdict.text,
        "not ready: paths (GPU0-mlx5_0 has no dmabuf path)"
    );
    assert_eq!(r.get("dmabuf").unwrap().status, Status::Fail);
    assert_eq!(r.require, Require::Dmabuf);
}

#[test]
fn memlock_limits() {
    let status = |soft: Option<u64>| {
        let mut f = ready_facts();
        f.memlock = Some(Memlock { soft, hard: soft });
        report(f, &Options::default())
            .get("memlock")
            .cloned()
            .unwrap()
    };
    assert_eq!(status(None).status, Status::Ok);
    let c = status(Some(8 << 20));
    assert_eq!(c.status, Status::Warn);
    assert!(c.detail.contains("8 MiB"));
}

/// The `provenance` row judges the file `modprobe nvidia_peermem` would load, from the facts
/// `provenance::gather` reads (here with fake kmod tools): compatible, rebuild (fail before load,
/// warn while ours is loaded, not needed where dma-buf carries), what a build without the
/// provenance keys can and cannot be judged on, and nothing without an installed module.
#[test]
fn the_provenance_row_judges_the_installed_module_before_load() {
    use crate::provenance::tests::{ours_modinfo, tree, Tree};
    let gathered =
        |t: &Tree| crate::provenance::gather(&t.host(), &t.tools, "nvidia_peermem").unwrap();
    let row = |mut f: Facts, p| {
        f.provenance = p;
        judge(&f, &Options::default())
            .checks
            .into_iter()
            .find(|c| c.id == "provenance")
    };
    let unloaded = || {
        let mut f = ready_facts();
        f.modules.clear();
        f
    };
    let c = row(ready_facts(), gathered(&tree(0x11))).unwrap();
    assert_eq!(c.status, Status::Ok, "{c:?}");
    assert!(
        c.detail.starts_with("compatible: ")
            && c.detail.contains("(built for kernel 7.2.0-test; 3 of 3 imported symbols with a CRC, each as ib_uverbs 24.10-1.1.4 and nvidia 580.159.04 export it)"),
        "{}",
        c.detail
    );
    let rebuild = gathered(&tree(0x99));
    let c = row(unloaded(), rebuild.clone()).unwrap();
    assert_eq!(c.status, Status::Fail, "{c:?}");
    assert!(
        c.detail.starts_with("rebuild: built against ib_uverbs 24.10-1.1.4 (ib_register_peer_memory_client 0x00000011), running ib_uverbs 24.10-1.1.4 (0x00000099): `modprobe nvidia_peermem` would be refused"),
        "{}",
        c.detail
    );
    assert!(c.fix.unwrap().contains("nvpeer-rebuild.service"));
    let c = row(ready_facts(), rebuild.clone()).unwrap();
    assert_eq!(c.status, Status::Warn, "{c:?}");
    assert!(
        c.detail.contains("works until it is unloaded"),
        "{}",
        c.detail
    );
    let c = row(dmabuf_facts(), rebuild).unwrap();
    assert_eq!(c.status, Status::Ok, "{c:?}");
    assert!(
        c.detail.starts_with("not needed: dma-buf ready; rebuild: "),
        "{}",
        c.detail
    );
    // A build before the provenance keys: the kernel release is judged, the CRCs are not.
    let mut t = tree(0x11);
    let no_keys: Vec<(String, String)> = ours_modinfo("0x11")
        .into_iter()
        .filter(|(k, _)| !k.starts_with("nvpeer_"))
        .collect();
    t.tools
        .modinfo
        .insert("nvidia_peermem.ko".into(), no_keys.clone());
    let c = row(unloaded(), gathered(&t)).unwrap();
    assert_eq!(c.status, Status::Ok, "{c:?}");
    assert!(
        c.detail.contains("nvidia_peermem.ko is built for kernel 7.2.0-test, the running one; the CRCs of the symbols it imports from the IB core and the NVIDIA driver: not judged: it records none"),
        "{}",
        c.detail
    );
    let mut old = no_keys;
    old[1].1 = "7.1.9 SMP".into();
    t.tools.modinfo.insert("nvidia_peermem.ko".into(), old);
    let c = row(unloaded(), gathered(&t)).unwrap();
    assert_eq!(
        (
            c.status,
            c.detail
                .starts_with("rebuild: built against kernel 7.1.9, running kernel 7.2.0-test")
        ),
        (Status::Fail, true),
        "{c:?}"
    );
    // What cannot be read is a warning with the reason; NVIDIA's module is nothing to judge.
    let mut t = tree(0x11);
    t.tools.exports.remove("ib_uverbs.ko.xz");
    let c = row(unloaded(), gathered(&t)).unwrap();
    assert_eq!(c.status, Status::Warn, "{c:?}");
    assert!(
        c.detail
            .starts_with("unknown: CRCs of ib_uverbs not readable"),
        "{}",
        c.detail
    );
    t.tools.modinfo.insert(
        "nvidia_peermem.ko".into(),
        vec![("description".into(), "NVIDIA GPU memory plug-in".into())],
    );
    let c = row(unloaded(), gathered(&t)).unwrap();
    assert_eq!(c.status, Status::Ok, "{c:?}");
    assert!(
        c.detail
            .ends_with("which is not nvpeer's: it records no provenance to judge"),
        "{}",
        c.detail
    );
    assert!(row(unloaded(), None).is_none());
    let mut f = unloaded();
    f.unreadable.insert(
        "provenance".into(),
        "cannot read /lib/modules/7.2.0/modules.dep: EACCES".into(),
    );
    let c = row(f, None).unwrap();
    assert!(
        c.detail
            .starts_with("could not check: cannot read /lib/modules"),
        "{c:?}"
    );
}

/// On a coherent platform NCCL forces the PCIe mapping for a NIC below the GPU's switch; outside
/// the GPU's IOMMU group the attach fails (524) and NCCL does not fall back: no dma-buf for the
/// pair. In the group: the PCIe mapping; a NIC on the GPU's CPU: C2C.
#[test]
fn a_coherent_pair_below_the_gpus_switch_needs_its_iommu_group() {
    let run = |common: bool, nic_group: &str| {
        let mut f = dmabuf_facts();
        f.pairs[0].coherent = true;
        f.pairs[0].common_bridge = common;
        f.pairs[0].nic_iommu_group = Some(nic_group.to_owned());
        report(f, &Options::default())
    };
    let r = run(true, "1");
    assert!(r.pairs[0].paths.is_empty(), "{:?}", r.pairs[0]);
    let w = why_not(&r, GdrPath::Dmabuf);
    assert!(
        w.starts_with("NCCL forces the PCIe mapping for a NIC below the GPU's switch")
            && w.contains("error 524"),
        "{w}"
    );
    assert!(!r.ready);
    let r = run(true, "0");
    assert_eq!(
        (r.pairs[0].paths.as_slice(), r.pairs[0].mapping),
        (&[GdrPath::Dmabuf][..], Some(Mapping::Pcie))
    );
    let r = run(false, "1");
    assert_eq!(r.pairs[0].mapping, Some(Mapping::C2c));
    assert!(r.ready);
}

/// `NCCL_DMABUF_ENABLE=0` keeps NCCL off dma-buf: on a dma-buf-only host NCCL uses no GPUDirect
/// path (`preferred` none) and its peer-memory rows are not "not needed" (the host is not ready
/// for NCCL); `UCX_CUDA_COPY_DMABUF=no` does the same to UCX and its row; where both paths
/// work, each consumer's choice is named.
#[test]
fn the_consumers_own_dma_buf_switches() {
    let with = |f: &mut Facts, vars: &[(&str, &str)]| {
        let env: BTreeMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        f.nccl_env = nccl::nccl_env(&env);
        f.ucx_cuda_copy_dmabuf = nccl::ucx_cuda_copy_dmabuf(&env);
        f.ucx_gpu_direct_rdma = nccl::ucx_gpu_direct_rdma(&env);
    };
    let mut f = dmabuf_facts();
    with(&mut f, &[("NCCL_DMABUF_ENABLE", "0")]);
    let r = report(f, &Options::default());
    assert_eq!(r.pairs[0].paths, [GdrPath::Dmabuf]);
    assert_eq!((r.pairs[0].preferred, r.pairs[0].mapping), (None, None));
    assert_eq!(r.verdict.text, "not ready: nccl (no peer memory)");
    let c = r.get("nccl").unwrap();
    assert_eq!(c.status, Status::Fail);
    assert!(
        c.detail.starts_with("NCCL_DMABUF_ENABLE=0 keeps it off dma-buf, which carries every pair, so it needs peer memory: "),
        "{}",
        c.detail
    );
    assert!(c
        .fix
        .as_deref()
        .unwrap()
        .starts_with("unset NCCL_DMABUF_ENABLE"));
    assert!(r
        .get("module")
        .unwrap()
        .detail
        .starts_with("not needed: dma-buf ready"));
    assert!(r
        .get("ucx")
        .unwrap()
        .detail
        .starts_with("not needed: dma-buf ready"));
    assert!(
        r.pairs[0]
            .notes
            .iter()
            .any(|n| n == "UCX uses dma-buf here"),
        "{:?}",
        r.pairs[0].notes
    );
    let mut f = dmabuf_facts();
    with(&mut f, &[("UCX_CUDA_COPY_DMABUF", "no")]);
    let r = report(f, &Options::default());
    assert_eq!(r.pairs[0].preferred, Some(GdrPath::Dmabuf));
    assert_eq!(r.verdict.text, "not ready: ucx (no peer memory)");
    assert!(r
        .get("ucx")
        .unwrap()
        .detail
        .starts_with("UCX_CUDA_COPY_DMABUF=no"));
    // Both paths: NCCL without dma-buf takes peer memory; UCX without it too.
    let mut f = ready_facts();
    f.nvidia_proc = Some(proc_580("580.159.04", true, ""));
    with(&mut f, &[("NCCL_DMABUF_ENABLE", "0")]);
    let r = report(f, &Options::default());
    assert_eq!(r.pairs[0].paths, [GdrPath::Dmabuf, GdrPath::PeerMemory]);
    assert_eq!(r.pairs[0].preferred, Some(GdrPath::PeerMemory));
    assert!(r.ready, "{}", r.verdict.text);
    assert!(r.pairs[0]
        .notes
        .iter()
        .any(|n| n == "UCX uses dma-buf here"));
}

/// Review R7: NCCL 2.26 and older see a C2C-attached NIC as a PHB path, within
/// NCCL_NET_GDR_LEVEL=PHB (the advice said SYS).
#[test]
fn nccl_2_26_needs_phb_for_a_c2c_attached_nic() {
    let nccl_gdr = |level: Option<&str>| {
        let mut f = dmabuf_facts();
        f.pairs[0].coherent = true;
        f.pairs[0].class = PathClass::Node;
        f.pairs[0].nccl_class = PathClass::Node.nccl();
        let env: BTreeMap<String, String> = level
            .map(|l| ("NCCL_NET_GDR_LEVEL".to_owned(), l.to_owned()))
            .into_iter()
            .collect();
        f.nccl_env = nccl::nccl_env(&env);
        report(f, &Options::default())
            .get("nccl_gdr")
            .unwrap()
            .detail
            .clone()
    };
    let d = nccl_gdr(None);
    assert!(
        d.contains("NCCL 2.26 and older count GPU0-mlx5_0 as PHB, GPUDirect RDMA there only with NCCL_NET_GDR_LEVEL=PHB or above"),
        "{d}"
    );
    let d = nccl_gdr(Some("PHB"));
    assert!(
        d.contains("as PHB, which NCCL_NET_GDR_LEVEL=PHB allows"),
        "{d}"
    );
}
