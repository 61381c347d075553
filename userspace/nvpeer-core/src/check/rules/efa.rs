// SPDX-License-Identifier: MIT OR Apache-2.0
//! AWS EFA: GPUDirect RDMA through `efa_nv_peermem` or dma-buf. `efa_nv_peermem` is not a MOFED
//! peer-memory client but a shim that re-exports NVIDIA's P2P API to the `efa` driver
//! (amzn/amzn-drivers `kernel/linux/efa/src/efa_nvmem_impl.h`: `symbol_get` of
//! `efa_nv_peermem_p2p_get_pages`, else `nvidia_p2p_get_pages`), so `ibv_reg_mr` of GPU memory
//! on an EFA device works without any peer-memory core (and, being nv-p2p pins, maps through C2C
//! on a coherent platform, as peer memory does); dma-buf works as on any NIC whose driver has
//! dma-buf MRs. nvpeer's module plays no part here; the verdict does.

use super::super::{Check, PairFacts};
use super::{Ctx, GdrPath, Mapping, PairVerdict, PathResult};

/// The EFA path of a pair whose NIC is an EFA device; `None` for any other NIC.
pub(super) fn pair(ctx: &Ctx, p: &PairFacts) -> Option<PathResult> {
    if !Ctx::is_efa(p) {
        return None;
    }
    Some(if ctx.f.efa_nv_peermem {
        // The pins are nvidia_p2p_get_pages' (efa_nvmem_impl.h): on a coherent platform those
        // are C2C pages, as for every nv-p2p client (../shared/FIELD.md §1.2.3).
        PathResult::works(if p.coherent {
            Mapping::C2c
        } else {
            Mapping::Pcie
        })
    } else {
        PathResult::fails(
            "efa_nv_peermem is not loaded (EFA's ibv_reg_mr of GPU memory needs it)",
            "`modprobe efa_nv_peermem` (AWS's EFA driver package builds it against the NVIDIA driver), or use dma-buf",
        )
    })
}

/// The `efa` row, on hosts with an EFA device.
pub(super) fn row(ctx: &Ctx, pairs: &[PairVerdict]) -> Option<Check> {
    let devices: Vec<&str> = ctx
        .f
        .rdma_devices
        .iter()
        .filter(|d| d.driver.as_deref() == Some("efa"))
        .map(|d| d.name.as_str())
        .collect();
    if devices.is_empty() {
        return None;
    }
    let shim = if ctx.f.efa_nv_peermem {
        "efa_nv_peermem loaded (ibv_reg_mr of GPU memory through the NVIDIA P2P API)"
    } else {
        "efa_nv_peermem not loaded"
    };
    let detail = format!(
        "EFA devices {}; {shim}; nvpeer's module is not used by EFA",
        devices.join(", ")
    );
    let uncarried: Vec<String> = pairs
        .iter()
        .filter(|p| devices.contains(&p.nic.as_str()))
        .filter(|p| !p.paths.contains(&GdrPath::Efa) && !p.paths.contains(&GdrPath::Dmabuf))
        .map(PairVerdict::name)
        .collect();
    Some(if uncarried.is_empty() {
        Check::ok("efa", detail)
    } else {
        Check::warn(
            "efa",
            format!(
                "{detail}: neither efa_nv_peermem nor dma-buf carries {}",
                uncarried.join(", ")
            ),
            "`modprobe efa_nv_peermem`, or set up dma-buf (see `dmabuf`)",
        )
    })
}
