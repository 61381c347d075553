// SPDX-License-Identifier: MIT OR Apache-2.0
//! The provenance, Grace and consumer rules on hand-made [`Facts`]: no sysfs tree, no file read.

use std::collections::BTreeMap;

use super::path_rule_tests::{dmabuf_facts, proc_580, why_not};
use super::rule_tests::ready_facts;
use super::*;
use crate::check::nccl;
use crate::host::topo::PathClass;

/// The `provenance` row judges the file `modprobe nvidia_peermem` would load, from the facts
/// `provenance::gather` reads (here with fake kmod tools): compatible, rebuild (fail before load,
/// warn while ours is loaded, not needed where dma-buf carries), what a build without the
/// provenance keys can and cannot be judged on, and nothing without an installed module.
#[test]
fn the_provenance_row_judges_the_installed_module_before_load() {
    use crate::host::provenance::fixture::{ours_modinfo, tree, Tree};
    let gathered =
        |t: &Tree| crate::host::provenance::gather(&t.host(), &t.tools, "nvidia_peermem").unwrap();
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
