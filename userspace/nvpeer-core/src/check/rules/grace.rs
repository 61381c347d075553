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
//!   `MEMORY_DEVICE_COHERENT` pages (`../shared/FIELD.md` #2). The `cdmm` row: [`super::cdmm`]; the `acs` and
//!   `iommu` rows on Grace: [`super::platform`].

use crate::host::nvidia_proc::GRDMA_OVERRIDE_ALLOW;

use super::super::{Check, GraceFacts};
use super::predicates::config_acs;
use super::{Ctx, PairVerdict};

/// The `grace` row (platform, complexes, IOMMU groups), on a Grace platform.
pub(super) fn rows(ctx: &Ctx, pairs: &[PairVerdict]) -> Vec<Check> {
    let Some(g) = &ctx.f.grace else {
        return match ctx.unreadable("grace") {
            Some(e) => vec![Check::error("grace", e)],
            None => Vec::new(),
        };
    };
    vec![check_grace(ctx, g, pairs)]
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
