// SPDX-License-Identifier: MIT OR Apache-2.0
//! Issue 46 item 4: every fix names its device, fits the platform, prefers a persistent kernel
//! parameter to a runtime write and says what it costs, and never advises a step that cannot
//! work on the host. On hand-made [`Facts`] ([`super::rule_tests::ready_facts`]).

use std::collections::BTreeMap;

use super::rule_tests::ready_facts;
use super::*;
use crate::host::kernel::{Iommu, IommuMode};
use crate::host::pci::Acs;
use crate::host::topo::Topology;

fn row(f: &Facts, id: &str) -> Check {
    judge(f, &Options::default())
        .checks
        .into_iter()
        .find(|c| c.id == id)
        .unwrap_or_else(|| panic!("no {id}"))
}

fn translating(units: &[&str]) -> Facts {
    let mut f = ready_facts();
    f.iommu = Some(Iommu {
        mode: IommuMode::Translated,
        units: units.iter().map(|u| (*u).to_owned()).collect(),
        groups: 2,
        device_domains: BTreeMap::new(),
        cmdline: Vec::new(),
    });
    f
}

#[test]
fn the_iommu_fix_is_the_platforms_parameter_and_never_turns_it_off() {
    for (units, wanted, not) in [
        (
            &["dmar0"][..],
            "`intel_iommu=on iommu=pt`",
            "iommu.passthrough",
        ),
        (&["ivhd0"][..], "`iommu=pt`", "intel_iommu"),
        (
            &["smmu3.0x0000000016000000"][..],
            "`iommu.passthrough=1`",
            "iommu=pt",
        ),
    ] {
        let c = row(&translating(units), "iommu");
        assert_eq!(c.status, Status::Warn, "{c:?}");
        let fix = c.fix.unwrap();
        assert!(
            fix.contains(wanted) && !fix.contains(not),
            "{units:?}: {fix}"
        );
        assert!(
            fix.contains("kernel command line") && fix.contains("costs"),
            "{fix}"
        );
        assert!(!fix.to_lowercase().contains("off"), "{units:?}: {fix}");
    }
}

fn redirecting(kernel: &str) -> Facts {
    let mut f = ready_facts();
    f.kernel_release = Some(kernel.to_owned());
    f.topology = Some(Topology::build(Vec::new(), &[]));
    f.acs = ["0000:02:00.0", "0000:05:00.0"]
        .into_iter()
        .map(|b| AcsFinding {
            bridge: b.parse().unwrap(),
            gpu: "GPU0".to_owned(),
            nic: "mlx5_0".to_owned(),
            acs: Some(Acs::Present {
                offset: 0x148,
                control: 0x000c,
            }),
            redirecting: vec!["P2P Request Redirect".to_owned()],
        })
        .collect();
    f
}

#[test]
fn the_acs_fix_names_each_bridge_prefers_the_kernel_parameter_and_says_the_cost() {
    let fix = row(&redirecting("6.11.0-1010-nvidia"), "acs").fix.unwrap();
    assert!(!fix.contains('<'), "a placeholder: {fix}");
    assert!(
        fix.starts_with(
            "add pci=config_acs=\"x0x00xx@0000:02:00.0;x0x00xx@0000:05:00.0\" to the kernel command line"
        ),
        "{fix}"
    );
    // setpci clears exactly the redirect and egress bits of each bridge, lost at reboot.
    assert!(
        fix.contains("setpci -s 0000:02:00.0 ECAP_ACS+6.w=0000:002c; setpci -s 0000:05:00.0 ECAP_ACS+6.w=0000:002c")
            && fix.contains("lost at reboot")
            && !fix.contains("ECAP_ACS+6.w=0`"),
        "{fix}"
    );
    assert!(
        fix.contains("isolation") && fix.contains("IOMMU group"),
        "{fix}"
    );
    // Before 6.11 the kernel has no config_acs: the firmware first.
    let old = row(&redirecting("6.8.0-45-generic"), "acs").fix.unwrap();
    assert!(
        old.starts_with("turn ACS off for these ports in the firmware"),
        "{old}"
    );
}

#[test]
fn no_modprobe_where_no_core_can_take_the_module() {
    let mut f = ready_facts();
    f.modules.clear();
    if let Some(c) = f.ib_core.as_mut() {
        c.peer_core = None;
        c.kallsyms_readable = true;
    }
    let fix = row(&f, "module").fix.unwrap();
    assert!(
        !fix.contains("modprobe") && !fix.contains("insmod"),
        "{fix}"
    );
    assert!(fix.contains("ib_register_peer_memory_client"), "{fix}");
    // With a core: load it, as an installed system does (no checkout path).
    let mut f = ready_facts();
    f.modules.clear();
    let fix = row(&f, "module").fix.unwrap();
    assert!(
        fix.contains("modprobe nvidia_peermem") && !fix.contains("kmod/"),
        "{fix}"
    );
}
