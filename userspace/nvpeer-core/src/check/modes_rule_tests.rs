// SPDX-License-Identifier: MIT OR Apache-2.0
//! Per pair, per library modes (`modes` row, each pair's `modes`) on hand-made [`Facts`].

use std::collections::BTreeMap;

use super::job_rule_tests::gin;
use super::path_rule_tests::{dmabuf_facts, proc_580};
use super::rule_tests::ready_facts;
use super::*;
use crate::check::nccl;
use crate::host::kernel::Kallsyms;

pub(super) fn mode<'a>(r: &'a Report, library: &str) -> &'a rules::modes::LibraryMode {
    r.pairs[0]
        .modes
        .iter()
        .find(|m| m.library == library)
        .unwrap_or_else(|| panic!("no {library} mode in {:?}", r.pairs[0].modes))
}

pub(super) fn row(r: &Report) -> &Check {
    r.get("modes").expect("a modes row")
}

/// `f` with libibverbs' `ibv_reg_dmabuf_mr` exported and its version at `IBVERBS_1.12` as
/// `versioned` says (`None`: not recorded, the facts of an older nvpeer).
pub(super) fn verb_version(mut f: Facts, versioned: Option<bool>) -> Facts {
    let crate::host::verbs::Verbs::Probed {
        reg_dmabuf_mr,
        reg_dmabuf_mr_versioned,
        ..
    } = &mut f.verbs
    else {
        panic!("the facts probe libibverbs");
    };
    *reg_dmabuf_mr = Some(true);
    *reg_dmabuf_mr_versioned = versioned;
    f
}

#[test]
fn nccl_mode_names_the_path_and_what_decides_it() {
    let r = report(dmabuf_facts(), &Options::default());
    let m = mode(&r, "nccl");
    assert_eq!(m.mode, "net IB, GDR, dma-buf");
    assert!(
        m.decided_by.starts_with("NCCL_DMABUF_ENABLE=1 (default)"),
        "{m:?}"
    );
    assert!(
        m.decided_by
            .ends_with("; libibverbs has ibv_reg_dmabuf_mr@IBVERBS_1.12"),
        "{m:?}"
    );
    assert_eq!(row(&r).status, Status::Ok, "{:?}", row(&r));

    let r = report(ready_facts(), &Options::default());
    assert_eq!(mode(&r, "nccl").mode, "net IB, GDR, peer memory");

    // /etc/nccl.conf turning IB off: sockets, a warning naming the file and the cost.
    let mut f = dmabuf_facts();
    f.nccl_env = nccl::nccl_env_with_files(
        &BTreeMap::new(),
        &[nccl::ConfFile {
            path: "/etc/nccl.conf".to_owned(),
            vars: BTreeMap::from([("NCCL_IB_DISABLE".to_owned(), "1".to_owned())]),
        }],
    );
    let r = report(f, &Options::default());
    let m = mode(&r, "nccl");
    assert_eq!(m.mode, "net socket, staged");
    assert_eq!(
        m.decided_by,
        "NCCL_IB_DISABLE=1 (set to \"1\" in /etc/nccl.conf)"
    );
    let c = row(&r);
    assert_eq!(c.status, Status::Warn);
    assert!(
        c.detail
            .contains("degraded: nccl net socket, staged on GPU0-")
            && c.detail.contains("TCP sockets through host memory"),
        "{}",
        c.detail
    );
}

#[test]
fn gin_mode_falls_back_to_the_cpu_proxy_without_peer_mapping_override() {
    let mut f = dmabuf_facts();
    f.nvidia_proc = Some(proc_580("580.159.04", true, ""));
    let r = report(f.clone(), &Options::default());
    let m = mode(&r, "nccl_gin");
    assert_eq!(m.mode, "GDAKI, CPU proxy");
    assert!(m.decided_by.contains("NCCL >= 2.28.7"));
    // Not GIN's run: no warning for it.
    assert_eq!(row(&r).status, Status::Ok, "{:?}", row(&r));
    // --for gin: a warning naming the mode and its cost, not a failure.
    let r = report(f.clone(), &gin());
    let c = row(&r);
    assert_eq!(c.status, Status::Warn, "{c:?}");
    assert!(
        c.detail.contains("nccl_gin GDAKI, CPU proxy on GPU0-")
            && c.detail.contains("busy CPU core")
    );
    // The regkey set: the GPU-side handler.
    f.nvidia_proc = Some(proc_580(
        "580.159.04",
        true,
        "RegistryDwords: \"PeerMappingOverride=1\"\n",
    ));
    let r = report(f, &gin());
    assert_eq!(mode(&r, "nccl_gin").mode, "GDAKI, GPU-side NIC handler");
}

#[test]
fn gdaki_ignores_a_module_not_named_nvidia_peermem() {
    let mut f = ready_facts();
    f.modules[0].name = "nv_peer_mem".to_owned();
    let r = report(f.clone(), &Options::default());
    assert!(
        r.pairs[0].paths.contains(&GdrPath::PeerMemory)
            && !r.pairs[0].paths.contains(&GdrPath::Dmabuf),
        "{:?}",
        r.pairs[0]
    );
    let m = mode(&r, "nccl_gin");
    assert_eq!(m.mode, "none (GIN unavailable)");
    assert!(m
        .decided_by
        .contains("loaded as nv_peer_mem, not nvidia_peermem"));
    // Only `--for gin` fails on it.
    assert_ne!(row(&r).status, Status::Fail);
    let r = report(f, &gin());
    assert_eq!(row(&r).status, Status::Fail, "{:?}", row(&r));
}

#[test]
fn gin_driver_without_the_doorbell_mapping_is_degraded_not_failed() {
    let mut f = dmabuf_facts();
    f.kernel_release = Some("6.8.0-45-generic".to_owned());
    f.nvidia_proc = Some(proc_580("580.159.04", true, "EnableStreamMemOPs: 1\n"));
    let r = report(f.clone(), &gin());
    let c = r.get("gin_driver").unwrap();
    assert_eq!(c.status, Status::Warn, "{c:?}");
    assert!(c
        .detail
        .contains("degraded, not failed: NCCL >= 2.28.7 falls back to a CPU proxy"));
    assert!(r.ready, "{:?}", r.verdict);
    // Stream memory operations off too: still a failure.
    f.nvidia_proc = Some(proc_580("580.159.04", true, ""));
    let r = report(f.clone(), &gin());
    assert_eq!(r.get("gin_driver").unwrap().status, Status::Fail);
    // EFA (aws-ofi-nccl's GIN) has no CPU-proxy fallback.
    f.nvidia_proc = Some(proc_580("580.159.04", true, "EnableStreamMemOPs: 1\n"));
    f.pairs[0].nic_driver = Some("efa".to_owned());
    let r = report(f, &gin());
    assert_eq!(r.get("gin_driver").unwrap().status, Status::Fail);
}

#[test]
fn a_forced_gpu_side_handler_fails_where_the_doorbell_cannot_be_mapped() {
    let mut f = dmabuf_facts();
    f.kernel_release = Some("6.8.0-45-generic".to_owned());
    f.nvidia_proc = Some(proc_580("580.159.04", true, "EnableStreamMemOPs: 1\n"));
    f.gin_env
        .insert("NCCL_GIN_GDAKI_NIC_HANDLER".to_owned(), "2".to_owned());
    let r = report(f.clone(), &gin());
    assert_eq!(mode(&r, "nccl_gin").mode, "none (GDAKI fails)");
    assert_eq!(r.get("gin_driver").unwrap().status, Status::Fail);
    assert_eq!(row(&r).status, Status::Fail);
    // 1: the CPU-assisted handler by choice.
    f.gin_env
        .insert("NCCL_GIN_GDAKI_NIC_HANDLER".to_owned(), "1".to_owned());
    let r = report(f, &gin());
    let m = mode(&r, "nccl_gin");
    assert_eq!(m.mode, "GDAKI, CPU proxy");
    assert!(m.decided_by.contains("NCCL_GIN_GDAKI_NIC_HANDLER=1"));
}

#[test]
fn a_node_without_a_pair_says_what_nccl_would_do() {
    let mut f = dmabuf_facts();
    f.pairs.clear();
    let r = report(f, &Options::default());
    let c = row(&r);
    assert!(!c.applies);
    assert!(
        c.detail
            .starts_with("no GPU-NIC pair: NCCL between nodes would run over sockets"),
        "{}",
        c.detail
    );
    assert!(
        c.detail.ends_with("; UCX and NVSHMEM: no RDMA NIC beside a GPU, so GPU memory between nodes goes over TCP or a CPU path, staged; libfabric: no EFA device"),
        "{}",
        c.detail
    );
}

/// The symbol version of `ibv_reg_dmabuf_mr` decides dma-buf for NCCL, which loads the verb at
/// `IBVERBS_1.12` (`ibvsymbols.cc`): exported at another version, NCCL has no dma-buf
/// registration and a dma-buf-only host is staged; `verbs` and `dmabuf` name the fact.
#[test]
fn reg_dmabuf_mr_at_another_symbol_version_leaves_nccl_staged() {
    let mut f = dmabuf_facts();
    let crate::host::verbs::Verbs::Probed {
        reg_dmabuf_mr_versioned,
        ..
    } = &mut f.verbs
    else {
        panic!("dmabuf_facts probes libibverbs");
    };
    *reg_dmabuf_mr_versioned = Some(false);
    let r = report(f, &Options::default());
    assert_eq!(mode(&r, "nccl").mode, "net IB, staged");
    assert!(
        super::path_rule_tests::why_not(&r, GdrPath::Dmabuf)
            .contains("not at symbol version IBVERBS_1.12"),
        "{:?}",
        r.pairs[0].why_not
    );
    let verbs = r.get("verbs").unwrap();
    assert!(
        verbs.detail.contains("but not at IBVERBS_1.12"),
        "{}",
        verbs.detail
    );
}

/// `--facts` of an older nvpeer record `ibv_reg_dmabuf_mr` present but not its symbol version
/// (no `facts.verbs.reg_dmabuf_mr_versioned`): where the version decides (a dma-buf-only host),
/// NCCL's mode, GIN's, the `dmabuf` row and the verdict are unknown, never "staged", "GIN
/// unavailable" or "not ready"; where peer memory carries the pair too, the host is ready over
/// it and only which path NCCL takes is unknown.
#[test]
fn reg_dmabuf_mr_of_unrecorded_version_is_unknown_where_it_decides() {
    let r = report(verb_version(dmabuf_facts(), None), &Options::default());
    assert_eq!(
        mode(&r, "nccl").mode,
        "net IB, unknown (GDR, dma-buf or staged)"
    );
    assert!(mode(&r, "nccl")
        .decided_by
        .starts_with("whether NCCL can load"));
    let gin = mode(&r, "nccl_gin");
    assert!(gin.mode.starts_with("unknown"), "{gin:?}");
    assert!(!gin.fails);
    let dmabuf = r.get("dmabuf").unwrap();
    assert_eq!(dmabuf.status, Status::Unknown, "{dmabuf:?}");
    assert!(r.verdict.unknown && !r.verdict.ready, "{}", r.verdict.text);
    assert!(r.get("verbs").unwrap().detail.contains("do not record"));
    // The table agrees: `paths` unknown (not "fail paths"), `modes` not folded under it.
    let paths = r.get("paths").unwrap();
    assert_eq!(paths.status, Status::Unknown, "{paths:?}");
    assert_eq!(row(&r).cause, None, "{:?}", row(&r));
    // Peer memory carries the pair as well: ready over it; NCCL's choice still unknown.
    let (mut f, d) = (ready_facts(), dmabuf_facts());
    if let (Kallsyms::Read { found }, Kallsyms::Read { found: more }) =
        (&mut f.kallsyms, &d.kallsyms)
    {
        found.extend(more.clone());
    }
    (f.nvidia_proc, f.verbs) = (d.nvidia_proc, d.verbs);
    let r = report(verb_version(f, None), &Options::default());
    assert!(
        r.verdict.ready,
        "{} {:?}",
        r.verdict.text, r.pairs[0].why_not
    );
    assert_eq!(
        mode(&r, "nccl").mode,
        "net IB, unknown (GDR, dma-buf or GDR, peer memory)",
        "{:?}",
        r.pairs[0].why_not
    );
    // A pair that fails dma-buf for a known reason says that reason, not the version.
    let mut f = verb_version(dmabuf_facts(), None);
    if let crate::host::verbs::Verbs::Probed { reg_dmabuf_mr, .. } = &mut f.verbs {
        *reg_dmabuf_mr = Some(false);
    }
    let r = report(f, &Options::default());
    assert_eq!(mode(&r, "nccl").mode, "net IB, staged");
    assert!(!r.verdict.unknown, "{}", r.verdict.text);
    // So does one whose mapping fails (GB200/GB300: NCCL's Data Direct default with the DMA
    // function outside the GPU's IOMMU group, the error-524 attach): the known failure and its
    // fix, not "unknown: dmabuf (...)" for the unrecorded version.
    let mut f = verb_version(dmabuf_facts(), None);
    f.pairs[0].coherent = true;
    f.pairs[0].common_bridge = false;
    let (gpu, nic) = (f.pairs[0].gpu.clone(), f.pairs[0].nic.clone());
    let address = f.gpus[0].address;
    f.grace = Some(crate::check::GraceFacts {
        complexes: vec![crate::check::DmaDirectComplex {
            gpu,
            gpu_address: address,
            dma_function: address,
            nic: Some(nic),
            nic_address: None,
            dma_iommu_group: Some("8".to_owned()),
            gpu_iommu_group: Some("7".to_owned()),
        }],
        ..Default::default()
    });
    let r = report(f, &Options::default());
    let w = super::path_rule_tests::why_not(&r, GdrPath::Dmabuf);
    assert!(
        w.starts_with("NCCL registers through Data Direct") && w.contains("error 524"),
        "{w}"
    );
    assert!(!r.verdict.unknown, "{}", r.verdict.text);
    assert_ne!(r.get("dmabuf").unwrap().status, Status::Unknown);
}
