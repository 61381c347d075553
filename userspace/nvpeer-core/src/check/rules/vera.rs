// SPDX-License-Identifier: MIT OR Apache-2.0
//! Vera (Vera Rubin, with ConnectX-9): rdma_topo's "NUMA-based" platforms, where GPUs and NIC
//! functions sit each directly below a CPU root port (rdma-core PR #1779, merged 2026-07, names
//! Grace-Vera among them). Its rules are the opposite of Grace's DMA-Direct complex, which wants
//! GPU and DMA function in one IOMMU group:
//!
//! * every NIC function and every GPU in an IOMMU group of its own;
//! * ATS off on the NIC functions;
//! * Vera root ports keep the kernel's own ACS default: no ACS advice here, neither the generic
//!   `acs` row's `pci=config_acs=`/`setpci` (relaxing ACS merges IOMMU groups, which the first
//!   rule forbids) nor Grace's masks.
//!
//! **[unverified]**: these three rules are `../shared/FIELD.md` U8's, as is that the root ports
//! 10de:2f95, 2f96 (NVIDIA's "TB500 RP x16/x8" in Debian's `pci.ids` 2026.10.24) are Vera's
//! (rdma-core commits 8db1b1f, c818b7d, a70c3fc, d279dd4, 84efa49 on master after v64.0); the
//! rdma_topo sources this nvpeer's authors could read predate them. What was read: rdma_topo's
//! unit test (2026) groups NIC physical functions with one parent and one VPD serial number into
//! a NIC and reports ATS per NIC from its lowest-addressed function ("NIC ATS: yes|no"), and PR
//! #1725 made ATS decide rdma_topo's bare-metal or virtualised ACS. So the rows say the rules
//! are rdma_topo's as reported, and warn (never fail) on them.

use crate::check::{Check, Status, VeraFacts};
use crate::host::kernel::{Iommu, IommuMode};

use super::Ctx;

/// Where the rules come from, said once per row that applies them.
const SOURCE: &str =
    "rdma_topo (rdma-core master after v64.0, as reported: not verified by nvpeer)";

/// The `vera` row: the platform, each GPU and NIC function with its IOMMU group and ATS, and what
/// breaks rdma_topo's Vera rules.
pub(super) fn row(ctx: &Ctx) -> Option<Check> {
    let v = match (&ctx.f.vera, ctx.unreadable("vera")) {
        (_, Some(e)) => return Some(Check::error("vera", e)),
        (None, None) => return None,
        (Some(v), None) => v,
    };
    Some(check(v))
}

fn check(v: &VeraFacts) -> Check {
    let ports: Vec<String> = v.root_ports.iter().map(ToString::to_string).collect();
    let mut listed = Vec::new();
    let mut shared = Vec::new();
    let mut ats_on = Vec::new();
    let mut unknown = Vec::new();
    for f in &v.functions {
        let group = match (&f.iommu_group, f.iommu_group_size) {
            (Some(g), Some(1)) => format!("IOMMU group {g} alone"),
            (Some(g), Some(n)) => {
                shared.push(format!(
                    "{} ({}) shares IOMMU group {g} with {} other functions",
                    f.name,
                    f.address,
                    n - 1
                ));
                format!("IOMMU group {g} of {n}")
            }
            (Some(g), None) => {
                unknown.push(format!("the members of IOMMU group {g} ({})", f.name));
                format!("IOMMU group {g}")
            }
            (None, _) => {
                unknown.push(format!("{}'s IOMMU group (none: IOMMU off?)", f.name));
                "no IOMMU group".to_owned()
            }
        };
        let ats = match (f.kind.as_str(), f.ats) {
            ("gpu", _) => String::new(),
            (_, Some(true)) => {
                ats_on.push(format!("{} ({})", f.name, f.address));
                ", ATS on".to_owned()
            }
            (_, Some(false)) => ", ATS off".to_owned(),
            (_, None) => {
                unknown.push(format!(
                    "ATS of {} (config space not readable: run as root)",
                    f.name
                ));
                ", ATS unknown".to_owned()
            }
        };
        listed.push(format!(
            "{} {} [{}] below {}: {group}{ats}",
            f.name, f.address, f.kind, f.root_port
        ));
    }
    let by_layout = if v.root_ports_by_layout.is_empty() {
        String::new()
    } else {
        format!(" ({})", v.root_ports_by_layout.join("; "))
    };
    let detail = format!(
        "Vera platform (rdma_topo's NUMA-based shape: GPUs and NIC functions each below a CPU root port; {SOURCE}: each in its own IOMMU group, ATS off on the NIC functions, the kernel's ACS default on Vera root ports): root ports {}{by_layout}; {}{}",
        ports.join(", "),
        if listed.is_empty() { "no GPU or ConnectX function below them".to_owned() } else { listed.join("; ") },
        boards(v)
    );
    let mut problems = Vec::new();
    let mut fixes = Vec::new();
    if !shared.is_empty() {
        problems.push(format!(
            "not in IOMMU groups of their own: {}",
            shared.join("; ")
        ));
        fixes.push("keep the kernel's default ACS on the Vera root ports, which isolates each function: remove kernel parameters that merge groups (pci=config_acs= entries for them, pcie_acs_override=, disable_acs_redir=), then reboot; `rdma_topo check` (rdma-core master) verifies".to_owned());
    }
    if !ats_on.is_empty() {
        problems.push(format!(
            "ATS enabled on NIC functions {}",
            ats_on.join(", ")
        ));
        fixes.push("turn ATS off in the NIC's firmware configuration (mlxconfig's ATS_ENABLED), then reset the NIC or reboot".to_owned());
    }
    if !problems.is_empty() {
        return Check::warn(
            "vera",
            format!("{detail}: {}", problems.join("; ")),
            fixes.join("; "),
        );
    }
    if !v.root_ports_unrecognised.is_empty() {
        let not_read = if unknown.is_empty() {
            String::new()
        } else {
            format!("; not read: {}", unknown.join(", "))
        };
        return Check::new(
            "vera",
            Status::Unknown,
            format!(
                "{detail}; not known to be Vera's, rdma_topo's rules not judged for the NIC functions below them: {}{not_read}",
                v.root_ports_unrecognised.join("; ")
            ),
            Some("run `rdma_topo check` (rdma-core master after v64.0), which knows these root ports, and report their ids to nvpeer".to_owned()),
        );
    }
    if !unknown.is_empty() {
        return Check::new(
            "vera",
            Status::Unknown,
            format!("{detail}; not read: {}", unknown.join(", ")),
            Some("run nvpeer check as root (config space beyond 64 bytes and the iommu_groups need it)".to_owned()),
        );
    }
    Check::ok("vera", detail)
}

/// The NIC functions grouped into boards by their VPD serial number, as rdma_topo groups them
/// (`NVCX_Topo.Board`: the functions of one `vpd_sn`, whatever their parents; verified in
/// rdma-core's `kernel-boot/rdma_topo_unit_test.py`, 2026, `TestNVCX_Topo_Constructor`): "; boards
/// by VPD serial number: board SN X: mlx5_0, mlx5_1". A function whose serial is unknown is on a
/// board of its own that is not named, never grouped with another by guess. Empty where no NIC
/// function is below a Vera root port.
fn boards(v: &VeraFacts) -> String {
    let mut by_sn: Vec<(&str, Vec<&str>)> = Vec::new();
    let mut unknown = Vec::new();
    let mut unrecorded = Vec::new();
    for f in v.functions.iter().filter(|f| f.kind != "gpu") {
        match &f.board_sn {
            Some(Some(sn)) => match by_sn.iter_mut().find(|(s, _)| *s == sn) {
                Some((_, names)) => names.push(&f.name),
                None => by_sn.push((sn, vec![&f.name])),
            },
            Some(None) => unknown.push(f.name.as_str()),
            None => unrecorded.push(f.name.as_str()),
        }
    }
    let mut parts: Vec<String> = by_sn
        .iter()
        .map(|(sn, names)| format!("board SN {sn}: {}", names.join(", ")))
        .collect();
    if !unknown.is_empty() {
        parts.push(format!(
            "board unknown (vpd absent, unreadable or without a serial number): {}",
            unknown.join(", ")
        ));
    }
    if !unrecorded.is_empty() {
        parts.push(format!(
            "board not recorded (older facts: that nvpeer did not read the VPD serial number): {}",
            unrecorded.join(", ")
        ));
    }
    if parts.is_empty() {
        return String::new();
    }
    format!(
        "; boards by VPD serial number (rdma_topo's grouping): {}",
        parts.join("; ")
    )
}

/// The `acs` row on a Vera platform: no ACS advice, which would merge the IOMMU groups rdma_topo
/// requires apart.
pub(super) fn check_acs() -> Check {
    Check::new(
        "acs",
        Status::Info,
        format!("Vera platform: no ACS advice; {SOURCE} leaves Vera root ports at the kernel's own ACS default and requires every NIC function and GPU in its own IOMMU group, which relaxing ACS (pci=config_acs=, setpci) would undo (see `vera`)"),
        None,
    )
}

/// The `iommu` row on a Vera platform: the domain type is not judged; the groups are (`vera`).
pub(super) fn check_iommu(i: &Iommu) -> Check {
    let mode = match i.mode {
        IommuMode::Off => "off",
        IommuMode::Passthrough => "passthrough",
        IommuMode::Translated => "translating DMA",
        IommuMode::Unknown => "domain type unknown",
    };
    Check::ok(
        "iommu",
        format!("{mode} ({} groups); on a Vera platform what rdma_topo requires is every NIC function and GPU in its own IOMMU group (see `vera`), not a passthrough setting", i.groups),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Facts of an older nvpeer carry no `board_sn`: the board is "not recorded", not taken for
    /// a VPD that could not be read; a null `board_sn` (this nvpeer's unknown) still says so.
    #[test]
    fn a_board_serial_absent_from_replayed_facts_is_not_recorded() {
        let json = |board: &str| {
            format!(
                r#"{{"root_ports": ["0000:00:00.0"], "functions": [{{"address": "0000:02:00.0",
                "name": "mlx5_0", "kind": "connectx9", "root_port": "0000:00:00.0",
                "iommu_group": "4", "iommu_group_size": 1, "ats": false{board}}}]}}"#
            )
        };
        let older: VeraFacts = serde_json::from_str(&json("")).unwrap();
        assert_eq!(older.functions[0].board_sn, None);
        let said = check(&older).detail;
        assert!(
            said.ends_with("board not recorded (older facts: that nvpeer did not read the VPD serial number): mlx5_0"),
            "{said}"
        );
        let unknown: VeraFacts = serde_json::from_str(&json(r#", "board_sn": null"#)).unwrap();
        assert_eq!(unknown.functions[0].board_sn, Some(None));
        let said = check(&unknown).detail;
        assert!(
            said.ends_with(
                "board unknown (vpd absent, unreadable or without a serial number): mlx5_0"
            ),
            "{said}"
        );
        let known: VeraFacts =
            serde_json::from_str(&json(r#", "board_sn": "MT2542X00001""#)).unwrap();
        assert!(check(&known)
            .detail
            .ends_with("board SN MT2542X00001: mlx5_0"));
        // Round trip: this nvpeer's null stays null, an absent one stays absent.
        let back = serde_json::to_string(&unknown).unwrap();
        assert!(back.contains(r#""board_sn":null"#), "{back}");
        let back = serde_json::to_string(&older).unwrap();
        assert!(!back.contains("board_sn"), "{back}");
    }
}
