// SPDX-License-Identifier: MIT OR Apache-2.0
//! The `cdmm` row's page-map rule (`../shared/FIELD.md` U1) on hand-made [`Facts`].

use super::path_rule_tests::proc_580;
use super::rule_tests::ready_facts;
use super::*;
use crate::host::topo::PathClass;

/// A GB200-like host in CDMM on driver `release`, kernel `kernel`; `edit` changes the rest.
fn cdmm(release: &str, kernel: &str, edit: impl FnOnce(&mut Facts)) -> Report {
    let mut f = ready_facts();
    f.pairs[0].coherent = true;
    f.pairs[0].class = PathClass::Node;
    f.pairs[0].common_bridge = false;
    f.nvidia_proc = Some(proc_580(
        release,
        true,
        "CoherentGPUMemoryMode: \"driver\"\n",
    ));
    f.grace = Some(GraceFacts::default());
    f.kernel_release = Some(kernel.to_owned());
    edit(&mut f);
    report(f, &Options::default())
}

fn row(r: &Report) -> &Check {
    r.get("cdmm").expect("a cdmm row on a Grace platform")
}

#[test]
fn page_map_releases_need_nvidia_uvm() {
    for release in ["580.142", "580.159.04", "595.44.02", "610.10"] {
        let r = cdmm(release, "6.8.0-45-generic", |_| {});
        let c = row(&r);
        assert_eq!(c.status, Status::Ok, "{release}: {c:?}");
        assert!(
            c.detail.contains("page map nvidia_uvm creates")
                && c.detail.contains("nvidia_uvm loaded")
                && c.detail
                    .contains("CONFIG_ZONE_DEVICE=y (/boot/config-6.8.0-45-generic)"),
            "{release}: {}",
            c.detail
        );
        assert!(r.ready, "{release}");

        let r = cdmm(release, "6.8.0-45-generic", |f| {
            f.cdmm.as_mut().unwrap().nvidia_uvm_loaded = false;
        });
        let c = row(&r);
        assert_eq!(c.status, Status::Warn, "{release}: {c:?}");
        assert!(
            c.detail.contains("nvidia_uvm is not loaded")
                && c.detail.contains(
                    "dmesg shows \"Failed to get a reference on dev_pagemap in CDMM(driver) mode\""
                ),
            "{}",
            c.detail
        );
        assert!(c.fix.as_deref().unwrap().contains("modprobe nvidia_uvm"));
    }
}

#[test]
fn without_zone_device_or_on_an_old_kernel_cdmm_mappings_fail() {
    let r = cdmm("580.142", "6.8.0-45-generic", |f| {
        f.cdmm.as_mut().unwrap().zone_device = Some(false);
    });
    assert_eq!(row(&r).status, Status::Fail, "{:?}", row(&r));
    assert!(row(&r).detail.contains("has it unset"));
    assert!(!r.ready);
    assert_eq!(r.verdict.blocking.as_ref().unwrap().check, "cdmm");

    let r = cdmm("595.44.02", "5.15.0-100-generic", |_| {});
    assert_eq!(row(&r).status, Status::Fail, "{:?}", row(&r));
    assert!(row(&r)
        .detail
        .contains("needs a kernel >= 6.0; kernel 5.15"));

    // No kernel config found: not probed, and no warning the operator cannot act on.
    let r = cdmm("580.142", "6.8.0-45-generic", |f| {
        let c = f.cdmm.as_mut().unwrap();
        c.zone_device = None;
        c.kernel_config = None;
    });
    assert_eq!(row(&r).status, Status::Ok);
    assert!(row(&r).detail.contains("CONFIG_ZONE_DEVICE not probed"));
}

#[test]
fn releases_outside_the_ranges_are_not_probed_or_not_concerned() {
    for release in ["590.48.01", "590.44.01", "595.44.01"] {
        let r = cdmm(release, "6.8.0-45-generic", |f| {
            f.cdmm.as_mut().unwrap().nvidia_uvm_loaded = false;
        });
        let c = row(&r);
        assert_eq!(c.status, Status::Info, "{release}: {c:?}");
        assert!(
            c.detail.contains(&format!(
                "driver {release}: whether CDMM mappings need nvidia_uvm's page map is not probed"
            )),
            "{}",
            c.detail
        );
    }
    // R580 before 580.142: no page map; the pins rule alone.
    let r = cdmm("580.126.09", "6.8.0-45-generic", |f| {
        f.cdmm.as_mut().unwrap().nvidia_uvm_loaded = false;
    });
    assert_eq!(row(&r).status, Status::Ok);
    assert!(!row(&r).detail.contains("page map"), "{}", row(&r).detail);
}

#[test]
fn facts_of_an_older_nvpeer_leave_the_page_map_unknown() {
    let r = cdmm("580.142", "6.8.0-45-generic", |f| f.cdmm = None);
    let c = row(&r);
    assert_eq!(c.status, Status::Unknown, "{c:?}");
    assert!(c.detail.contains("facts of an older nvpeer"));
    // And such facts still load: `cdmm` is absent from their JSON.
    let mut json = serde_json::to_value(ready_facts()).unwrap();
    json.as_object_mut().unwrap().remove("cdmm");
    let back: Facts = serde_json::from_value(json).unwrap();
    assert!(back.cdmm.is_none());
}
