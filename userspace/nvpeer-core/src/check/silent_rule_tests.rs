// SPDX-License-Identifier: MIT OR Apache-2.0
//! The known silent failure classes (`silent_failures` row, issue 47 item 5) on hand-made
//! [`Facts`].

use super::path_rule_tests::{dmabuf_facts, proc_580};
use super::*;
use crate::host::kernel::IommuMode;
use crate::host::verbs::{DmabufProbe, Verbs, VerbsDevice};

fn row(r: &Report) -> &Check {
    r.get("silent_failures").expect("a silent_failures row")
}

/// The dma-buf host on open modules `release`, kernel `kernel`, the IOMMU `mode`.
fn u4(release: &str, kernel: &str, mode: IommuMode) -> Facts {
    let mut f = dmabuf_facts();
    f.nvidia_proc = Some(proc_580(release, true, ""));
    f.kernel_release = Some(kernel.to_owned());
    if let Some(i) = f.iommu.as_mut() {
        i.mode = mode;
    }
    f
}

#[test]
fn iommu_dmabuf_595_is_named_on_that_release_with_a_translating_iommu() {
    let r = report(
        u4("595.84", "7.0.0-12-generic", IommuMode::Translated),
        &Options::default(),
    );
    let c = row(&r);
    assert_eq!(c.status, Status::Warn, "{c:?}");
    assert!(
        c.detail.starts_with(
            "iommu_dmabuf_595: GPU0-mlx5_0: open modules 595.84 with the IOMMU translating"
        ) && c.detail.contains("kernel 7.0.0-12-generic, as reported"),
        "{}",
        c.detail
    );
    assert!(c
        .fix
        .as_deref()
        .unwrap()
        .contains("nvpeer bench --loopback-all"));
    // The verdict is not decided by it.
    assert!(r.ready, "{:?}", r.verdict);
    // Another kernel: still named, the kernel said not known.
    let r = report(
        u4("595.84.01", "6.8.0-45-generic", IommuMode::Translated),
        &Options::default(),
    );
    assert!(row(&r)
        .detail
        .contains("reported on kernel 7.0; on 6.8.0-45-generic not known"));
    // Passthrough, another release: no class.
    for f in [
        u4("595.84", "7.0.0-12-generic", IommuMode::Passthrough),
        u4("595.44.02", "7.0.0-12-generic", IommuMode::Translated),
        u4("580.159.04", "7.0.0-12-generic", IommuMode::Translated),
    ] {
        let r = report(f, &Options::default());
        assert!(!row(&r).applies, "{:?}", row(&r));
    }
}

/// One cause, one fix (issue 46): the IOMMU translating on 595.84 is said once, by the
/// `silent_failures` row with its fix; the general `iommu` row is folded under it. Not where
/// the class does not match, nor where another class shares the row (its cause is another).
#[test]
fn the_iommu_row_is_folded_under_iommu_dmabuf_595() {
    let r = report(
        u4("595.84", "7.0.0-12-generic", IommuMode::Translated),
        &Options::default(),
    );
    let iommu = r.get("iommu").unwrap();
    assert_eq!(
        (iommu.status, iommu.cause),
        (Status::Warn, Some("silent_failures")),
        "{iommu:?}"
    );
    assert_eq!(row(&r).cause, None);
    let fixes: Vec<&str> = r
        .checks
        .iter()
        .filter(|c| c.applies && c.status != Status::Ok && c.cause.is_none())
        .filter_map(|c| c.fix.as_deref())
        .filter(|fix| fix.contains("iommu=pt"))
        .collect();
    assert_eq!(fixes.len(), 1, "{fixes:?}");
    let r = report(
        u4("580.159.04", "7.0.0-12-generic", IommuMode::Translated),
        &Options::default(),
    );
    assert_eq!(r.get("iommu").unwrap().cause, None);
    let mut f = u4("595.84", "7.0.0-12-generic", IommuMode::Translated);
    f.hypervisor = Some(true);
    let r = report(f, &Options::default());
    assert!(
        row(&r).detail.contains(" | vm_bar_mapping: "),
        "{:?}",
        row(&r)
    );
    assert_eq!(r.get("iommu").unwrap().cause, None);
}

fn mana(probe: Option<DmabufProbe>) -> Facts {
    let mut f = dmabuf_facts();
    f.pairs[0].nic = "mana_0".to_owned();
    f.pairs[0].nic_vendor = 0x1414;
    f.pairs[0].nic_device = 0x00ba;
    f.pairs[0].nic_driver = Some("mana".to_owned());
    f.rdma_devices[0].name = "mana_0".to_owned();
    f.rdma_devices[0].driver = Some("mana".to_owned());
    f.verbs = match probe {
        Some(dmabuf) => Verbs::Probed {
            devices: vec![VerbsDevice {
                name: "mana_0".to_owned(),
                dmabuf,
            }],
            reg_dmabuf_mr: Some(true),
            reg_dmabuf_mr_versioned: None,
        },
        None => Verbs::Skipped {
            reason: "fixture tree".to_owned(),
        },
    };
    f
}

#[test]
fn mana_is_a_dma_buf_nic_judged_by_its_probe() {
    let r = report(mana(None), &Options::default());
    let c = row(&r);
    assert_eq!(c.status, Status::Unknown, "{c:?}");
    assert!(c
        .detail
        .starts_with("mana_dmabuf: GPU0-mana_0: mana_0 is an Azure MANA NIC, GPUDirect RDMA only through dma-buf"));
    assert!(c
        .detail
        .ends_with("its dma-buf registration not probed (libibverbs not asked here)"));
    let r = report(
        mana(Some(DmabufProbe::Unsupported { errno: 95 })),
        &Options::default(),
    );
    assert_eq!(row(&r).status, Status::Warn);
    assert!(row(&r)
        .detail
        .contains("not supported, so this pair is staged"));
    let r = report(
        mana(Some(DmabufProbe::Supported { errno: 9 })),
        &Options::default(),
    );
    assert_eq!(row(&r).status, Status::Ok);
    assert_eq!(row(&r).fix, None);
}

#[test]
fn a_gpu_in_a_vm_leaves_the_vmm_bar_mapping_unknown() {
    let mut f = dmabuf_facts();
    f.hypervisor = Some(true);
    let r = report(f.clone(), &Options::default());
    let c = row(&r);
    assert_eq!(c.status, Status::Unknown, "{c:?}");
    assert!(c.detail.starts_with(
        "vm_bar_mapping: GPU0-mlx5_0: a VM (cpuinfo: hypervisor) with GPU0 passed through"
    ));
    assert!(c.detail.ends_with("unknown, not assumed"));
    // Not the verdict's: the paths are judged as before.
    assert_eq!(r.verdict.text, "ready (dma-buf)");
    // Bare metal, or not known: no class.
    for h in [Some(false), None] {
        f.hypervisor = h;
        assert!(!row(&report(f.clone(), &Options::default())).applies);
    }
}
