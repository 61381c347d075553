// SPDX-License-Identifier: MIT OR Apache-2.0
//! The peer-memory path: `ibv_reg_mr` on GPU memory, which the IB core hands to a registered
//! peer-memory client (this project's module, NVIDIA's `nvidia-peermem`, Mellanox's
//! `nv_peer_mem`), which pins it through the NVIDIA P2P API. It needs a peer-memory core
//! (MLNX_OFED / DOCA-OFED, or a kernel with its patches), exactly one client module with its
//! clients registered, and consumers that detect it.
//!
//! Rows: [`module`] (the module, its parameters and clients), [`core`] (the core and its
//! release's bugs), [`installed`] (what `modprobe` loads next). Per pair: [`pair`].

mod core;
mod installed;
mod module;

use crate::check::nccl;
use crate::host::kernel::symbols;

use super::super::{Check, PairFacts, Status};
use super::predicates::{cdmm_refuses_invalidating_pins, invalidating_modules};
use super::{Ctx, Mapping, PathResult, WhyNot};

/// The rows of this concern, in report order: `module`, `parameters`, `peer_clients`,
/// `ib_core`, `modprobe`, `driver_reload`, `core_bugs` (the last four where they apply).
pub(super) fn rows(ctx: &Ctx) -> Vec<Check> {
    let f = ctx.f;
    let mut rows = vec![match ctx.unreadable("modules") {
        Some(e) => Check::error("module", e),
        None => module::check_module(
            &f.modules,
            f.ib_core.as_ref(),
            f.modprobe_target.as_ref().is_some_and(|t| t.path.is_some()),
        ),
    }];
    if let [m] = f.modules.as_slice() {
        rows.push(module::check_parameters(m, f.ib_core.as_ref()));
    }
    rows.push(match ctx.unreadable("memory_peers") {
        Some(e) => Check::error("peer_clients", e),
        None => module::check_peer_clients(
            &f.modules,
            f.memory_peers.as_deref(),
            f.nvidia.as_ref(),
            &f.module_counters,
        ),
    });
    rows.push(match (ctx.unreadable("ib_core"), &f.ib_core) {
        (Some(e), _) => Check::error("ib_core", e),
        (None, Some(c)) => core::check_ib_core(c, &f.modules),
        (None, None) => Check::not_examined("ib_core", "the facts have no ib_core"),
    });
    rows.extend(match ctx.unreadable("modprobe_target") {
        Some(e) => Some(Check::error("modprobe", e)),
        None => installed::check_modprobe_target(f.modprobe_target.as_ref(), &f.modules),
    });
    if let Some(c) = &f.ib_core {
        rows.extend(core::check_driver_reload(c, &f.modules));
        rows.extend(core::check_core_bugs(c, &f.modules));
    }
    rows
}

/// Whether peer memory works on this host at all (before anything per pair), and if not why:
/// from the facts and this concern's rows.
pub(super) fn host_state(ctx: &Ctx, rows: &[Check]) -> Result<(), WhyNot> {
    let f = ctx.f;
    let why = |reason: String, fix: &str| {
        Err(WhyNot {
            reason,
            fix: fix.to_owned(),
        })
    };
    if f.nvidia.is_none() {
        return why(
            "nvidia.ko is not loaded".to_owned(),
            "load the NVIDIA GPU driver (`modprobe nvidia`)",
        );
    }
    if matches!(f.kallsyms.lookup(symbols::P2P_GET_PAGES), Ok(None)) {
        return why(
            "nothing exports nvidia_p2p_get_pages".to_owned(),
            "install NVIDIA's datacenter/desktop driver, which has the P2P API",
        );
    }
    let failed = |id: &str| rows.iter().find(|c| c.id == id && c.status == Status::Fail);
    if let Some(c) = failed("ib_core") {
        let reason = if f.ib_core.as_ref().is_some_and(|c| c.peer_core.is_none()) {
            "no peer-memory core: nothing exports ib_register_peer_memory_client (the inbox RDMA stack has none)".to_owned()
        } else {
            format!("ib_core fails: {}", c.detail)
        };
        return why(reason, c.fix.as_deref().unwrap_or(""));
    }
    if let Some(c) = failed("module") {
        let reason = if f.modules.is_empty() {
            "no peer-memory module is loaded (nvidia_peermem, nv_peer_mem)".to_owned()
        } else {
            format!("module fails: {}", c.detail)
        };
        return why(reason, c.fix.as_deref().unwrap_or(""));
    }
    for id in ["parameters", "peer_clients"] {
        if let Some(c) = failed(id) {
            return why(
                format!("{id} fails: {}", c.detail),
                c.fix.as_deref().unwrap_or(""),
            );
        }
    }
    let newest = nccl::NCCL_RULES[nccl::NCCL_RULES.len() - 1].id;
    let detected =
        f.nccl.iter().any(|v| v.consumer == newest && v.peer_memory) || f.ucx.peer_memory;
    if !detected {
        return why(
            "neither NCCL >= 2.23.4 nor UCX would detect the peer-memory client".to_owned(),
            "load it under the name nvidia_peermem (the default build)",
        );
    }
    Ok(())
}

/// Peer memory for one pair.
pub(super) fn pair(ctx: &Ctx, p: &PairFacts, host: &Result<(), WhyNot>) -> PathResult {
    if Ctx::is_efa(p) {
        return PathResult::fails(
            "EFA has no PeerDirect (MOFED peer-memory) support: its GPUDirect path is efa_nv_peermem or dma-buf",
            "see `efa`",
        );
    }
    if let Err(w) = host {
        return PathResult::fails(w.reason.clone(), w.fix.clone());
    }
    let cdmm = ctx.params.and_then(|p| p.coherent_gpu_memory_mode()) == Some("driver");
    let mut not_probed = Vec::new();
    if p.coherent && cdmm && ctx.release.is_none() {
        let invalidating = invalidating_modules(ctx);
        if !invalidating.is_empty() {
            not_probed.push(format!(
                "CDMM pins of the invalidating nv_mem of {} (driver release unknown; a 580 driver refuses them)",
                invalidating.join(", ")
            ));
        }
    }
    if p.coherent && cdmm && cdmm_refuses_invalidating_pins(ctx.release.as_ref()) {
        // nv-p2p.h 580.65.06 names nvidia_p2p_get_pages only; the persistent call is assumed.
        not_probed.push(format!(
            "CDMM pins through nvidia_p2p_get_pages_persistent on driver {} (nv-p2p.h refuses CDMM for nvidia_p2p_get_pages only)",
            ctx.release.as_ref().map_or_else(String::new, ToString::to_string)
        ));
        let invalidating = invalidating_modules(ctx);
        if !invalidating.is_empty() {
            return PathResult::fails(
                format!(
                    "CoherentGPUMemoryMode is \"driver\" (CDMM) and driver {}'s nvidia_p2p_get_pages does not support CDMM (nv-p2p.h 580.65.06); the nv_mem client of {} pins through it (invalidating)",
                    ctx.release.as_ref().map_or_else(String::new, ToString::to_string),
                    invalidating.join(", ")
                ),
                "load the module with persistent_api_support=1 (nvpeer's default: persistent pins), upgrade the driver to 590.44.01 or later, or use dma-buf",
            );
        }
    }
    PathResult {
        not_probed,
        ..PathResult::works(if p.coherent {
            Mapping::C2c
        } else {
            Mapping::Pcie
        })
    }
}
