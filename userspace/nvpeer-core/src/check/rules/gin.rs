// SPDX-License-Identifier: MIT OR Apache-2.0
//! GPU-initiated networking (NCCL GIN with its GDAKI backend, NVSHMEM IBGDA, DeepEP): the GPU
//! itself writes the NIC's work queues and rings its doorbells. It needs more than GPUDirect
//! RDMA, and none of its error messages says what is missing (aws/aws-ofi-nccl#1369):
//!
//! - `gin_driver`: the NVIDIA driver must let the GPU map the NIC's doorbell page
//!   (`PeerMappingOverride=1` in `NVreg_RegistryDwords`, aws-ofi-nccl's GIN documentation after
//!   #1369) and run stream memory operations (`NVreg_EnableStreamMemOPs=1`); both show in
//!   `/proc/driver/nvidia/params` (`RegistryDwords: "..."`, `EnableStreamMemOPs: 0`).
//! - `gin_umem`: the NIC's CQ/QP buffers (DEVX umems) live in GPU memory and cannot be
//!   invalidated under the NIC: they need dma-buf ("GIN GDAKI requires DMA-BUF with kernel
//!   version >= 6.1 or nvidia-peermem support", NCCL's documentation) or a peer-memory client
//!   that does not invalidate: a persistent `nv_mem` (nvpeer's default) or `nv_mem_nc`
//!   (deepseek-ai/DeepEP#36; NVIDIA/nvshmem#67, where the dma-buf umem failed and the peer path
//!   was the fallback).
//! - `gin_gdrcopy`: GDRCopy 2.5 or later on both sides where the library asks for it:
//!   aws-ofi-nccl's GIN ("GIN requires GDRCopy 2.5+", aws-ofi-nccl PR#1351 and its 1.21.0 release
//!   notes), i.e. on EFA, and NCCL with `NCCL_GDRCOPY_ENABLE=1`.
//!
//! The rows fail only under `check --for gin`; otherwise they inform (ok, saying what GIN would
//! lack). `--for gin` adds to `--require`, it does not replace it: `gin_umem` counts only the
//! paths the policy allows (`--require dmabuf`: dma-buf; `peermem`: the peer-memory client), and
//! a ready host's verdict says `for GIN`.

use crate::host::kernel::release_major_minor;

use super::super::{Check, Require, Workload};
use super::predicates::GPU_HANDLER_ENV;
use super::{predicates, Ctx, GdrPath, PairVerdict};

/// aws-ofi-nccl's GIN needs GDRCopy 2.5 or later (PR#1351).
const GDRCOPY_FOR_GIN: (u32, u32) = (2, 5);
/// NCCL's GIN over dma-buf needs kernel 6.1 or later.
const DMABUF_KERNEL_FOR_GIN: (u32, u32) = (6, 1);

/// A row that fails under `--for gin`, warns where something else asks for it (`asked`: the
/// workload may run, GPUDirect RDMA does not need it) and otherwise does not apply.
fn judged(
    ctx: &Ctx,
    id: &'static str,
    asked: bool,
    problem: Result<String, (String, String)>,
) -> Check {
    let gin = ctx.options.workload == Some(Workload::Gin);
    match problem {
        Ok(detail) if asked || gin => Check::ok(id, detail),
        Err((detail, fix)) if gin => Check::fail(id, detail, fix),
        Err((detail, fix)) if asked => Check::warn(id, detail, fix),
        Ok(detail) | Err((detail, _)) => not_asked(id, &detail),
    }
}

/// Row `id` where GIN is not asked for: not applicable, saying what it found.
fn not_asked(id: &'static str, detail: &str) -> Check {
    Check::not_applicable(
        id,
        format!("{detail} (only GPU-initiated networking needs it: `check --for gin` judges it)"),
    )
}

/// `gin_umem`; unknown where whether a pair exists is (an RDMA device that could not be read).
fn gin_umem(ctx: &Ctx, pairs: &[PairVerdict]) -> Check {
    let what = "the umem path (dma-buf or a non-invalidating peer-memory client)";
    match predicates::unknown_pair_row(ctx.f, "gin_umem", what) {
        Some(row) if ctx.options.workload == Some(Workload::Gin) => row,
        Some(row) => not_asked("gin_umem", &row.detail),
        None => judged(ctx, "gin_umem", false, umem(ctx, pairs)),
    }
}

/// `gin_driver`, `gin_umem`, `gin_gdrcopy`.
pub(super) fn rows(ctx: &Ctx, pairs: &[PairVerdict]) -> Vec<Check> {
    vec![
        gin_driver(ctx, pairs),
        gin_umem(ctx, pairs),
        judged(
            ctx,
            "gin_gdrcopy",
            gdrcopy_asked_by(ctx, pairs).is_some(),
            gdrcopy_for_gin(ctx, pairs),
        ),
    ]
}

/// `gin_driver`. Only the doorbell mapping missing (`PeerMappingOverride`, stream memory
/// operations on) is a degraded mode under `--for gin`, not a failure (`../shared/FIELD.md` U6):
/// NCCL >= 2.28.7 (`NCCL_GIN_GDAKI_NIC_HANDLER=AUTO`, its default) falls back to a CPU proxy and
/// NVSHMEM >= 3.4.5 to CPU-assisted IBGDA; aws-ofi-nccl's GIN on EFA has no such fallback
/// (aws/aws-ofi-nccl#1369), so EFA pairs still fail.
fn gin_driver(ctx: &Ctx, pairs: &[PairVerdict]) -> Check {
    let d = driver(ctx);
    let doorbell_only = ctx.params.is_some_and(|p| {
        p.registry_dword("PeerMappingOverride") != Some("1") && p.enable_stream_mem_ops() == Some(1)
    });
    let efa = pairs
        .iter()
        .any(|p| p.paths.contains(&GdrPath::Efa) || p.why_not.contains_key(&GdrPath::Efa));
    // NCCL_GIN_GDAKI_NIC_HANDLER: 0 AUTO (default), 1 CPU-assisted, 2 GPU SM doorbells (NCCL's
    // GIN test script): 2 forces the GPU-side handler, which has no fallback.
    let gpu_forced = ctx.f.gin_env.get(GPU_HANDLER_ENV).map(String::as_str) == Some("2");
    match d {
        Err((detail, fix))
            if doorbell_only
                && !efa
                && !gpu_forced
                && ctx.options.workload == Some(Workload::Gin) =>
        {
            Check::warn(
                "gin_driver",
                format!("{detail}: degraded, not failed: NCCL >= 2.28.7 falls back to a CPU proxy (NCCL_GIN_GDAKI_NIC_HANDLER=AUTO, the default) and NVSHMEM >= 3.4.5 to CPU-assisted IBGDA, each doorbell rung by a CPU thread (latency per operation, a busy core); NCCL before 2.28.7, or a GPU-side handler forced, fails"),
                fix,
            )
        }
        d => judged(ctx, "gin_driver", false, d),
    }
}

/// What asks for GDRCopy besides `--for gin`: an EFA NIC (aws-ofi-nccl's GIN), or
/// `NCCL_GDRCOPY_ENABLE=1`.
fn gdrcopy_asked_by(ctx: &Ctx, pairs: &[PairVerdict]) -> Option<&'static str> {
    let efa = pairs
        .iter()
        .any(|p| p.why_not.contains_key(&GdrPath::Efa) || p.paths.contains(&GdrPath::Efa));
    let env = ctx.f.gin_env.get("NCCL_GDRCOPY_ENABLE").map(String::as_str) == Some("1");
    match (efa, env) {
        (true, _) => Some("an EFA NIC (aws-ofi-nccl's GIN)"),
        (false, true) => Some("NCCL_GDRCOPY_ENABLE=1"),
        _ => None,
    }
}

const DRIVER_FIX: &str = "`options nvidia NVreg_RegistryDwords=\"PeerMappingOverride=1;\" NVreg_EnableStreamMemOPs=1` in /etc/modprobe.d/ (add PeerMappingOverride=1 to an existing RegistryDwords string rather than a second line), rebuild the initramfs, then reload the NVIDIA driver or reboot";

fn driver(ctx: &Ctx) -> Result<String, (String, String)> {
    if let Some(e) = ctx.proc_unreadable(crate::host::nvidia_proc::Part::Params) {
        return Err((
            format!("driver settings unknown: PeerMappingOverride and EnableStreamMemOPs not read: could not read {e}"),
            "/proc/driver/nvidia/params should be the driver's own text: check its permissions, or report its content as a bug".to_owned(),
        ));
    }
    let Some(p) = ctx.params else {
        return Err((
            "driver settings unknown: no /proc/driver/nvidia/params, so PeerMappingOverride and EnableStreamMemOPs cannot be read".to_owned(),
            "load the NVIDIA driver (see nvidia_driver), then check again".to_owned(),
        ));
    };
    let mut missing = Vec::new();
    match p.registry_dword("PeerMappingOverride") {
        Some("1") => {}
        Some(v) => missing.push(format!("RegistryDwords has PeerMappingOverride={v}, not 1: the GPU may not map the NIC's doorbells")),
        None => missing.push(format!(
            "RegistryDwords {} has no PeerMappingOverride=1: the GPU may not map the NIC's doorbells",
            p.raw("RegistryDwords").unwrap_or("(absent)")
        )),
    }
    match p.enable_stream_mem_ops() {
        Some(1) => {}
        v => missing.push(format!(
            "EnableStreamMemOPs is {}, not 1: no stream memory operations",
            v.map_or_else(|| "absent".to_owned(), |v| v.to_string())
        )),
    }
    if missing.is_empty() {
        Ok("RegistryDwords has PeerMappingOverride=1 and EnableStreamMemOPs is 1 (/proc/driver/nvidia/params)".to_owned())
    } else {
        Err((
            format!("driver settings missing: {}", missing.join("; ")),
            DRIVER_FIX.to_owned(),
        ))
    }
}

/// The non-invalidating peer-memory client a GIN umem registration would get, if any.
fn non_invalidating_client(ctx: &Ctx) -> Option<String> {
    let f = ctx.f;
    if let Some(m) = f.modules.iter().find(|m| m.persistent_nv_mem()) {
        return Some(format!("{}'s persistent nv_mem", m.name));
    }
    let listed = f
        .memory_peers
        .as_ref()
        .is_some_and(|c| c.iter().any(|c| c.name == "nv_mem_nc"));
    let expected = f.modules.iter().any(|m| {
        m.expected_clients(
            f.nvidia
                .as_ref()
                .is_none_or(|n| n.persistent_api != crate::host::providers::PersistentApi::None),
        )
        .contains(&"nv_mem_nc")
    });
    (listed || expected).then(|| "nv_mem_nc".to_owned())
}

fn umem(ctx: &Ctx, pairs: &[PairVerdict]) -> Result<String, (String, String)> {
    let fix = "dma-buf on a kernel 6.1 or later (open kernel modules), or a non-invalidating peer-memory client: nvpeer's default persistent_api_support=1 (a persistent nv_mem), or nv_mem_nc".to_owned();
    if pairs.is_empty() {
        return Err(("no umem path: no GPU-NIC pair (see paths)".to_owned(), fix));
    }
    let require = ctx.options.require;
    let kernel = ctx.f.kernel_release.as_deref();
    let kernel_ok = kernel
        .and_then(release_major_minor)
        .is_some_and(|v| v >= DMABUF_KERNEL_FOR_GIN);
    let client = non_invalidating_client(ctx);
    let mut ok = Vec::new();
    let mut not = Vec::new();
    for p in pairs {
        let dmabuf = require != Require::Peermem && p.paths.contains(&GdrPath::Dmabuf) && kernel_ok;
        let no_persistent = predicates::refuses_persistent(ctx, &p.gpu);
        let peer = require != Require::Dmabuf
            && p.paths.contains(&GdrPath::PeerMemory)
            && client.is_some()
            && !no_persistent;
        if dmabuf || peer {
            ok.push(format!(
                "{} by {}",
                p.name(),
                if dmabuf {
                    "dma-buf".to_owned()
                } else {
                    client.clone().unwrap_or_default()
                }
            ));
            continue;
        }
        let mut why = Vec::new();
        if require != Require::Peermem {
            why.push(if !p.paths.contains(&GdrPath::Dmabuf) {
                "no dma-buf".to_owned()
            } else {
                format!(
                    "dma-buf on kernel {} (GIN needs 6.1+)",
                    kernel.unwrap_or("(unknown)")
                )
            });
        }
        if require != Require::Dmabuf {
            why.push(if !p.paths.contains(&GdrPath::PeerMemory) {
                "no peer memory".to_owned()
            } else if no_persistent {
                "MIG or vGPU, where NVIDIA refuses the persistent pins a non-invalidating client needs".to_owned()
            } else {
                "only invalidating peer-memory clients (DEVX umems need a non-invalidating one)"
                    .to_owned()
            });
        }
        not.push(format!("{}: {}", p.name(), why.join(", ")));
    }
    if !not.is_empty() {
        return Err((
            format!(
                "no umem path: nothing carries the NIC's CQ/QP umems in GPU memory for {}",
                not.join("; ")
            ),
            fix,
        ));
    }
    Ok(format!(
        "the NIC's CQ/QP umems in GPU memory: {}",
        ok.join(", ")
    ))
}

fn gdrcopy_for_gin(ctx: &Ctx, pairs: &[PairVerdict]) -> Result<String, (String, String)> {
    let asked = gdrcopy_asked_by(ctx, pairs);
    let state = match ctx.f.gdrcopy.as_ref().map(|g| predicates::usable(ctx, g)) {
        None => Err("not examined (facts of an older nvpeer)".to_owned()),
        Some(r) => r,
    };
    let Some(asked) = asked else {
        return Ok(format!(
            "not asked for (no EFA pair, NCCL_GDRCOPY_ENABLE unset); GDRCopy here: {}",
            match &state {
                Ok((a, b)) => format!("{a}.{b}"),
                Err(e) => e.clone(),
            }
        ));
    };
    let fix = "install GDRCopy 2.5 or later, library and gdrdrv of one release, load gdrdrv and create /dev/gdrdrv (see gdrcopy)".to_owned();
    match state {
        Ok(v) if v >= GDRCOPY_FOR_GIN => Ok(format!(
            "asked for by {asked}: GDRCopy {}.{} on both sides",
            v.0, v.1
        )),
        Ok(v) => Err((
            format!(
                "GDRCopy too old: asked for by {asked}, but GDRCopy {}.{} is older than 2.5, which GIN needs (aws-ofi-nccl PR#1351)",
                v.0, v.1
            ),
            fix,
        )),
        Err(why) => Err((
            format!("GDRCopy not usable: asked for by {asked}, but {why}"),
            fix,
        )),
    }
}
