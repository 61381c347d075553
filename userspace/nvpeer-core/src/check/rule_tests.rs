// SPDX-License-Identifier: MIT OR Apache-2.0
//! The rules on hand-made [`Facts`]: no sysfs tree, no file read.

use std::collections::BTreeMap;

use super::*;
use crate::check::nccl;
use crate::host::kernel::{symbols, Iommu, IommuMode, Kallsyms, SymbolOwner};
use crate::host::limits::Memlock;
use crate::host::pci::{Acs, Bar, PciAddress};
use crate::host::peermem::{Implementation, LoadedModule};
use crate::host::providers::{
    CoreGeneration, GenerationSource, IbCore, NvidiaDriver, PeerCore, PersistentApi,
};
use crate::host::rdma::{Port, RdmaDevice};
use crate::host::topo::{NcclPathType, PathClass, Topology};
use crate::host::verbs::Verbs;

pub(super) fn address(text: &str) -> PciAddress {
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
        foundation: Some("own".to_owned()),
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
            path_links: Vec::new(),
            unknown_links: Vec::new(),
        }],
        grace: None,
        vera: None,
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
        cdmm: Some(crate::check::CdmmFacts {
            nvidia_uvm_loaded: true,
            zone_device: Some(true),
            kernel_config: Some("/boot/config-6.8.0-45-generic".to_owned()),
        }),
        gin_env: BTreeMap::new(),
        libraries: Some(crate::check::LibraryFacts::default()),
        unreadable: BTreeMap::new(),
        hostname: Some("node-a01".to_owned()),
    }
}

pub(super) fn get<'a>(checks: &'a [Check], id: &str) -> &'a Check {
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
        "nvpeer 0.1.0 loaded as nvidia_peermem, built on nvpeer's own Rust runtime (a kernel without usable Rust)"
    );
    assert!(get(&r.checks, "core_bugs").detail.contains("has the fix"));
    assert!(get(&r.checks, "bar1").detail.contains("64 GiB"));
    assert!(get(&r.checks, "gpus")
        .detail
        .contains("GPU0 0000:03:00.0 [10de:2330] NUMA 0"));
}

/// The module row names the Rust foundation the loaded module was built on (issue 44), and says
/// nothing of it for a module too old to tell.
#[test]
fn the_module_row_names_its_foundation() {
    for (foundation, says) in [
        (Some("kernel"), Some("built on the kernel's own Rust")),
        (Some("own"), Some("built on nvpeer's own Rust runtime")),
        (None, None),
    ] {
        let mut facts = ready_facts();
        facts.modules[0].foundation = foundation.map(str::to_owned);
        let r = report(facts, &Options::default());
        let detail = &get(&r.checks, "module").detail;
        match says {
            Some(s) => assert!(detail.contains(s), "{foundation:?}: {detail}"),
            None => assert_eq!(detail, "nvpeer 0.1.0 loaded as nvidia_peermem"),
        }
    }
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
    use crate::host::modprobe::{ModprobeTarget, TargetKind};
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
    // Nothing the package does not install (README, *.md) is named.
    assert!(!d.contains(".md") && !d.contains("README"), "{d}");
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
