// SPDX-License-Identifier: MIT OR Apache-2.0
//! Grace-Blackwell (and Grace Hopper): coherent platforms where the NIC reaches GPU memory through
//! the CPU's C2C link unless a PCIe mapping is asked for.
//!
//! * Mapping. NVIDIA's nv-p2p gives CPU-cacheable pages on a coherent platform
//!   (`NVIDIA_P2P_PAGE_TABLE_FLAGS_CPU_CACHEABLE`, 580+) and refuses IO mappings of forced-PCIe
//!   tables ("Only CPU mappings are supported for forced PCIe config through nv-p2p APIs. IO
//!   mappings will not be supported", `nvidia_p2p_dma_map_pages` in `kernel-open/nvidia/nv-p2p.c`),
//!   so every peer-memory MR is mapped through C2C. A dma-buf can be exported with the PCIe
//!   mapping type (`NV_DMABUF_EXPORT_MAPPING_TYPE_FORCE_PCIE`), which `nv_dma_buf_attach`
//!   (`nv-dmabuf.c`) allows only where `nv_pci_is_valid_topology_for_direct_pci` (`nv-pci.c`)
//!   holds: a coherent platform and the NIC in the GPU's IOMMU group, unless
//!   `GrdmaPciTopoCheckOverride` is 1 (allow) or 2 (deny); else `-ENOTSUPP` (error 524 from
//!   `ibv_reg_dmabuf_mr`). NCCL asks for it with Data Direct (`NCCL_IB_DATA_DIRECT`, default 1)
//!   and for a NIC below the GPU's switch ("Force PCIe mapping if path goes through PCI on a
//!   C2C system", `ncclTopoCheckGdr` in `src/graph/paths.cc`).
//! * ACS. rdma-core's `kernel-boot/rdma_topo` (`compute_acs`) requires, on a ConnectX-8
//!   DMA-Direct complex, `xx110x1` on the switch port toward the DMA function, `xx101x1` on the
//!   one toward the GPU, `xx111x0` on the root port, and the kernel's `xx111x1` on every other
//!   Grace root port and ConnectX switch port; it sets them at boot with `pci=config_acs=`
//!   (`write-grub-acs`) and calls changing them from userspace "not recommended ... unprivileged
//!   userspace can trigger platform RAS failures" (`setpci-acs`). So the advice here is that
//!   kernel command line, never a config-space write.
//! * CDMM. `CoherentGPUMemoryMode` "driver" in `/proc/driver/nvidia/params` is Coherent
//!   Driver-based Memory Management (R580 on GB200/GB300): `nv-p2p.h` of 580.65.06 says
//!   `nvidia_p2p_get_pages` "does not support Coherent Driver-based Memory Management(CDMM)
//!   mode"; 590.44.01 dropped the sentence; 595's `nv-dmabuf.c` exports CDMM memory through
//!   `MEMORY_DEVICE_COHERENT` pages (`../shared/FIELD.md` #2). The `cdmm` row: [`super::cdmm`].

use crate::host::kernel::{Iommu, IommuMode};
use crate::host::nvidia_proc::{GRDMA_OVERRIDE_ALLOW, GRDMA_OVERRIDE_DENY};
use crate::host::pci::{acs_matches, Acs};

use super::super::{AcsRole, Check, GraceFacts, PairFacts};
use super::{Ctx, Mapping, PairVerdict, WhyNot};

/// The C2C sentence every pair on a coherent platform gets.
pub(super) const C2C_NOTE: &str = "peer-memory MRs here are mapped through C2C (nv-p2p refuses IO mappings of forced-PCIe tables); the dma-buf PCIe mapping / Data Direct is the fast path";

/// The DMA-Direct complex of this pair's GPU, when the pair is its Data Direct pairing.
fn complex_of<'a>(ctx: &Ctx<'a>, p: &PairFacts) -> Option<&'a super::super::DmaDirectComplex> {
    ctx.f
        .grace
        .as_ref()?
        .complexes
        .iter()
        .find(|c| c.gpu == p.gpu && c.nic.as_deref() == Some(&p.nic))
}

/// Whether NVIDIA's driver lets a PCIe-mapped (FORCE_PCIE) dma-buf of this GPU attach to the
/// DMA device `group` belongs to (`nv_pci_is_valid_topology_for_direct_pci`).
fn force_pcie_allowed(ctx: &Ctx, gpu_group: Option<&str>, peer_group: Option<&str>) -> bool {
    match ctx.params.and_then(|p| p.grdma_pci_topo_check_override()) {
        Some(GRDMA_OVERRIDE_ALLOW) => true,
        Some(GRDMA_OVERRIDE_DENY) => false,
        _ => gpu_group.is_some() && gpu_group == peer_group,
    }
}

/// The mapping a dma-buf of this pair gets as NCCL registers it, or why its registration fails.
/// PCIe on a PCIe platform. On a coherent one NCCL forces the PCIe mapping where the NIC's path
/// to the GPU goes through PCI ("Force PCIe mapping if path goes through PCI on a C2C system",
/// `ncclTopoCheckGdr`): a Data Direct NIC, which NCCL places at its DMA function
/// (`NCCL_IB_DATA_DIRECT`, default 1), or a NIC below the GPU's switch. It exports with
/// `CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE`, which succeeds; the driver then refuses the
/// attach unless `nv_pci_is_valid_topology_for_direct_pci` holds, and NCCL does not fall back
/// to the C2C mapping (`src/transport/net.cc`: the export under `CUCHECK`, then `regMrDmaBuf`
/// under `NCCLCHECK`). Every other NIC (one on the GPU's CPU) gets the C2C mapping.
pub(super) fn dmabuf_mapping(ctx: &Ctx, p: &PairFacts) -> Result<Mapping, WhyNot> {
    if !p.coherent {
        return Ok(Mapping::Pcie);
    }
    let data_direct = ctx.f.nccl_env.ib_data_direct;
    let (gpu_group, peer_group, why) = match complex_of(ctx, p) {
        Some(c) if data_direct => (
            c.gpu_iommu_group.as_deref(),
            c.dma_iommu_group.as_deref(),
            WhyNot {
                reason: format!(
                    "NCCL registers through Data Direct (NCCL_IB_DATA_DIRECT=1, its default) with the PCIe mapping, but DMA function {} is not in {}'s IOMMU group: NVIDIA's driver refuses the attach (nv-dmabuf.c: \"topology not supported for mapping type FORCE_PCIE\", -ENOTSUPP: ibv_reg_dmabuf_mr fails with error 524) and NCCL does not fall back to the C2C mapping",
                    c.dma_function, c.gpu
                ),
                fix: "boot with rdma_topo's ACS so that the complex is one IOMMU group (see `grace`; `rdma_topo check` verifies it), or set NCCL_IB_DATA_DIRECT=0 (dma-buf through the NIC function with the C2C mapping, the slower path), or NVreg_GrdmaPciTopoCheckOverride=1".to_owned(),
            },
        ),
        _ if p.common_bridge => (
            p.gpu_iommu_group.as_deref(),
            p.nic_iommu_group.as_deref(),
            WhyNot {
                reason: format!(
                    "NCCL forces the PCIe mapping for a NIC below the GPU's switch on a C2C platform, but {} is not in {}'s IOMMU group: NVIDIA's driver refuses the attach (\"topology not supported for mapping type FORCE_PCIE\", -ENOTSUPP: ibv_reg_dmabuf_mr fails with error 524) and NCCL does not fall back to the C2C mapping",
                    p.nic, p.gpu
                ),
                fix: "put GPU and NIC in one IOMMU group (the ACS rdma_topo requires, see `acs`), or NVreg_GrdmaPciTopoCheckOverride=1".to_owned(),
            },
        ),
        _ => return Ok(Mapping::C2c),
    };
    if force_pcie_allowed(ctx, gpu_group, peer_group) {
        Ok(Mapping::Pcie)
    } else if ctx.params.and_then(|p| p.grdma_pci_topo_check_override())
        == Some(GRDMA_OVERRIDE_DENY)
    {
        Err(WhyNot {
            reason: "NCCL asks for the PCIe mapping here, and GrdmaPciTopoCheckOverride=2 makes NVIDIA's driver refuse its attach (error 524); NCCL does not fall back to the C2C mapping".to_owned(),
            fix: "remove NVreg_GrdmaPciTopoCheckOverride=2 from the nvidia module options".to_owned(),
        })
    } else {
        Err(why)
    }
}

/// `pci=config_acs=...` as `rdma_topo write-grub-acs` writes it: every port whose mask is not
/// the kernel's default, by address.
pub fn config_acs(g: &GraceFacts) -> Option<String> {
    let mut entries: Vec<(_, &str)> = g
        .acs_ports
        .iter()
        .filter(|p| p.role != AcsRole::Other)
        .map(|p| (p.bridge, p.role.mask()))
        .collect();
    entries.sort();
    entries.dedup();
    (!entries.is_empty()).then(|| {
        format!(
            "pci=config_acs=\"{}\"",
            entries
                .iter()
                .map(|(b, m)| format!("{m}@{b}"))
                .collect::<Vec<_>>()
                .join(";")
        )
    })
}

/// The `acs` row on a Grace platform: `rdma_topo`'s masks, never a config-space write.
pub(super) fn check_acs(g: &GraceFacts) -> Check {
    let mut wrong = Vec::new();
    let mut unknown = Vec::new();
    for p in &g.acs_ports {
        let needs = p.role.mask();
        match &p.acs {
            Some(Acs::Present { control, .. }) if !acs_matches(*control, needs) => {
                wrong.push(format!(
                    "{} ({}) has {control:#06x}, needs {needs}",
                    p.bridge,
                    p.role.describe()
                ))
            }
            Some(Acs::Present { .. }) => {}
            Some(Acs::Absent) if p.role != AcsRole::Other => wrong.push(format!(
                "{} ({}) has no ACS capability, needs {needs}",
                p.bridge,
                p.role.describe()
            )),
            Some(Acs::Absent) => {}
            None | Some(Acs::NotReadable { .. }) => unknown.push(p.bridge.to_string()),
        }
    }
    let boot = match config_acs(g) {
        Some(line) => format!(
            "set ACS at boot as rdma_topo does: add {line} to the kernel command line (`rdma_topo write-grub-acs` writes it to /etc/default/grub.d/config-acs.cfg), run update-grub and reboot, then `rdma_topo check` must pass: config_acs came in kernel 6.11, and a list of several devices is parsed right only with Tushar Dave's 2025 fix \"PCI: Fix Extend ACS configurability\" (in NVIDIA's NV-Kernels; on another kernel look for it or its backport)"
        ),
        None => "reboot without ACS changes: the kernel's default (xx111x1) is what rdma_topo requires here".to_owned(),
    };
    let never = "do not change ACS from userspace on this platform (rdma_topo: unprivileged userspace can then trigger platform RAS failures)";
    if !wrong.is_empty() {
        return Check::warn(
            "acs",
            format!(
                "ACS differs from what rdma_topo requires on this Grace platform: {}",
                wrong.join("; ")
            ),
            format!("{boot}; {never}"),
        );
    }
    if !unknown.is_empty() {
        return Check::warn(
            "acs",
            format!(
                "config space of {} not readable beyond the first 64 bytes: ACS unknown",
                unknown.join(", ")
            ),
            "run nvpeer check as root to read the ACS control registers",
        );
    }
    let ports = g.acs_ports.len();
    if g.complexes.is_empty() {
        Check::ok(
            "acs",
            format!("Grace platform without a DMA-Direct complex: the kernel's default ACS on its {ports} Grace/ConnectX bridges, as rdma_topo requires; GPU memory is reached through C2C"),
        )
    } else {
        Check::ok(
            "acs",
            format!("as rdma_topo requires on all {ports} Grace/ConnectX bridges (DMA-Direct complexes: {})", config_acs(g).unwrap_or_default()),
        )
    }
}

/// The `iommu` row on a Grace platform: the SMMU translating is normal there; what matters is
/// the DMA-Direct complex's IOMMU group (`grace`).
pub(super) fn check_iommu(i: &Iommu) -> Check {
    let mode = match i.mode {
        IommuMode::Off => "off",
        IommuMode::Passthrough => "passthrough",
        IommuMode::Translated => "translating DMA",
        IommuMode::Unknown => "domain type unknown",
    };
    Check::ok(
        "iommu",
        format!("{mode} ({} groups); on a Grace platform translated DMA is the default, and what GPUDirect RDMA needs is each DMA-Direct function in its GPU's IOMMU group (see `grace`)", i.groups),
    )
}

/// The `grace` row (platform, complexes, IOMMU groups) and the `cdmm` row, on a Grace platform.
pub(super) fn rows(ctx: &Ctx, pairs: &[PairVerdict]) -> Vec<Check> {
    let Some(g) = &ctx.f.grace else {
        return match ctx.unreadable("grace") {
            Some(e) => vec![Check::error("grace", e)],
            None => Vec::new(),
        };
    };
    vec![check_grace(ctx, g, pairs), super::cdmm::row(ctx)]
}

fn check_grace(ctx: &Ctx, g: &GraceFacts, pairs: &[PairVerdict]) -> Check {
    let ports: Vec<String> = g.root_ports.iter().map(ToString::to_string).collect();
    let mut detail = format!(
        "Grace platform (coherent: the NIC reaches GPU memory through the CPU's C2C link unless a PCIe mapping is asked for): root ports {}",
        ports.join(", ")
    );
    if !g.root_ports_by_layout.is_empty() {
        detail.push_str(&format!(" ({})", g.root_ports_by_layout.join("; ")));
    }
    // The DMA functions, NICs and BlueField-3s by address; switch ports counted.
    let mut recognised: Vec<String> = g
        .devices
        .iter()
        .filter(|(_, k)| !k.is_acs_managed_bridge())
        .map(|(a, k)| format!("{} {a}", k.describe()))
        .collect();
    let ports = g
        .devices
        .values()
        .filter(|k| {
            k.is_acs_managed_bridge() && **k != crate::host::pci::KnownDevice::GraceRootPort
        })
        .count();
    if ports > 0 {
        recognised.push(format!("{ports} ConnectX/BlueField switch ports"));
    }
    if !recognised.is_empty() {
        detail.push_str(&format!("; {}", recognised.join(", ")));
    }
    let mut problems = Vec::new();
    let mut fixes = Vec::new();
    let override_ = ctx.params.and_then(|p| p.grdma_pci_topo_check_override());
    for c in &g.complexes {
        let nic = match (&c.nic, c.nic_address) {
            (Some(n), Some(a)) => format!("NIC {n} ({a})"),
            (None, Some(a)) => format!("NIC function {a} (no RDMA device)"),
            _ => "no NIC function with its VPD V3".to_owned(),
        };
        let group = |g: &Option<String>| g.clone().unwrap_or_else(|| "none".to_owned());
        detail.push_str(&format!(
            "; DMA-Direct complex: {} {} with DMA function {} and {nic}, IOMMU groups {} and {}",
            c.gpu,
            c.gpu_address,
            c.dma_function,
            group(&c.gpu_iommu_group),
            group(&c.dma_iommu_group)
        ));
        if c.nic_address.is_none() {
            problems.push(format!(
                "no NIC function shares the VPD V3 of DMA function {} (rdma_topo pairs them by it)",
                c.dma_function
            ));
            fixes.push(
                "check the ConnectX-8 firmware and `lspci -vv -s <DMA function>` (VPD V3)"
                    .to_owned(),
            );
        }
        let same = c.gpu_iommu_group.is_some() && c.gpu_iommu_group == c.dma_iommu_group;
        if !same && override_ != Some(GRDMA_OVERRIDE_ALLOW) {
            problems.push(format!(
                "DMA function {} is not in {}'s IOMMU group: the dma-buf PCIe mapping (Data Direct) fails to attach (nv-dmabuf.c: \"topology not supported for mapping type FORCE_PCIE\", -ENOTSUPP: error 524 from ibv_reg_dmabuf_mr), and NCCL, which asks for it under NCCL_IB_DATA_DIRECT=1, does not fall back to C2C",
                c.dma_function, c.gpu
            ));
            fixes.push(format!(
                "boot with rdma_topo's ACS so the complex is one IOMMU group ({}); `rdma_topo check` verifies it; until then NCCL_IB_DATA_DIRECT=0 (dma-buf with the C2C mapping); NVreg_GrdmaPciTopoCheckOverride=1 skips NVIDIA's check, which rdma_topo says correct IOMMU groups are required to avoid",
                config_acs(g).unwrap_or_else(|| "pci=config_acs=".to_owned())
            ));
        }
    }
    problems.extend(
        g.unrecognised
            .iter()
            .map(|u| format!("not rdma_topo's shape: {u}")),
    );
    if !g.unrecognised.is_empty() {
        fixes.push("compare with `rdma_topo topo` (rdma-core); report the layout (`rdma_topo dump`) if it is a supported platform".to_owned());
    }
    let mapped: Vec<String> = pairs
        .iter()
        .filter_map(|p| Some(format!("{} {}", p.name(), p.mapping?.describe())))
        .collect();
    if !mapped.is_empty() {
        detail.push_str(&format!("; pairs: {}", mapped.join(", ")));
    }
    if let Some(e) = ctx.unreadable("iommu_groups") {
        return Check::new(
            "grace",
            super::super::Status::Unknown,
            format!("{detail}; could not read: {e}"),
            Some("the iommu_group links should be the kernel's; check the tree (or report it as a bug)".to_owned()),
        );
    }
    if problems.is_empty() {
        Check::ok("grace", detail)
    } else {
        Check::warn(
            "grace",
            format!("{detail}: {}", problems.join("; ")),
            fixes.join("; "),
        )
    }
}

/// What the mapping of a pair's dma-buf means on a coherent platform; `None` elsewhere.
pub(super) fn mapping_note(ctx: &Ctx, p: &PairFacts, mapping: Option<Mapping>) -> Option<String> {
    if !p.coherent {
        return None;
    }
    match (mapping, complex_of(ctx, p)) {
        (Some(Mapping::Pcie), Some(c)) => Some(format!(
            "dma-buf with the PCIe mapping through Data Direct (DMA function {}; NCCL_IB_DATA_DIRECT=1 is NCCL's default)",
            c.dma_function
        )),
        (Some(Mapping::Pcie), None) => Some("dma-buf with the PCIe mapping (NCCL forces it for a NIC below the GPU's switch on a C2C platform)".to_owned()),
        (Some(Mapping::C2c), Some(c)) => Some(format!(
            "NCCL_IB_DATA_DIRECT=0: dma-buf through the NIC function with the C2C mapping (Data Direct through DMA function {} would take the PCIe mapping)",
            c.dma_function
        )),
        _ => None,
    }
}
