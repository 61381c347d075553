// SPDX-License-Identifier: MIT OR Apache-2.0
//! The path rules (dma-buf, EFA, the policy) on hand-made [`Facts`]: no sysfs tree, no file read.

use std::collections::BTreeMap;

use super::rule_tests::ready_facts;
use super::*;
use crate::check::nccl;
use crate::host::kernel::{symbols, Kallsyms, SymbolOwner};
use crate::host::limits::Memlock;
use crate::host::nvidia_proc::{self, NvidiaProc};
use crate::host::peermem::Implementation;
use crate::host::topo::PathClass;
use crate::host::verbs::{DmabufProbe, Verbs, VerbsDevice};

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
        reg_dmabuf_mr_versioned: Some(true),
    };
    f
}

pub(super) fn why_not(r: &Report, path: GdrPath) -> String {
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
                    reg_dmabuf_mr_versioned: None,
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
                    reg_dmabuf_mr_versioned: None,
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
                    reg_dmabuf_mr_versioned: None,
                }
            },
            "with EPROTONOSUPPORT: the kernel has no dma-buf MR method",
        ),
        (
            |f| {
                f.verbs = Verbs::Probed {
                    devices: Vec::new(),
                    reg_dmabuf_mr: Some(true),
                    reg_dmabuf_mr_versioned: None,
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
pub(super) fn efa_facts(shim: bool, probe: DmabufProbe) -> Facts {
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
        reg_dmabuf_mr_versioned: Some(true),
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
