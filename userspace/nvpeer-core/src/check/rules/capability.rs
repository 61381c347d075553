// SPDX-License-Identifier: MIT OR Apache-2.0
//! Platforms that cannot do GPUDirect RDMA, whatever module is loaded: the `gpu_gdr` row, what
//! it does to each pair's paths, and [`moot`]: where the whole host cannot, that row is the one
//! failure and every other failing row says "moot".
//!
//! The markers, read without CUDA (the facts' sources are in `gather/capability.rs`):
//!
//! - GeForce and TITAN GPUs: the model in `/proc/driver/nvidia/gpus/*/information` (the
//!   driver's own name table). NVIDIA's user-space driver refuses GPUDirect RDMA on them (the
//!   kernel side works; the gate is in libcuda: aikitoria/open-gpu-kernel-modules#20; users meet
//!   it as `ibv_reg_mr` EFAULT: flagos-ai/FlagCX#61, kvcache-ai/Mooncake#983). Without the
//!   `information` file the model is unknown and nothing is judged: consumer PCI device ids
//!   are too many to list, and none is invented here.
//! - vGPU: a vGPU type as the model, `<board>-<framebuffer GB><series>` (`NVIDIA A30-8C`, the
//!   CUDA device name of linux-rdma/perftest#126, whose `ibv_reg_mr` failed with EFAULT; `GRID`
//!   boards). MIG: GPU instances in the driver's capability files. Both refuse persistent pins:
//!   "Persistent GPU memory mappings are not supported on PowerPC, MIG-enabled devices and vGPU"
//!   (`nv-p2p.h`, `nvidia_p2p_get_pages_persistent`).
//! - GB10 (DGX Spark and its OEM twins): PCI id 10de:2e12, VGA class, model `NVIDIA GB10`
//!   (lspci on a Spark: "NVIDIA Corporation GB20B [GB10] [10de:2e12]"). The DGX Spark porting
//!   guide: GPUDirect RDMA "is not supported, and the mechanisms ... nvidia-peermem (for
//!   DOCA-Host), dma-buf or GDRCopy, do not work".
//! - Tegra: the SoC family. CUDA 13.0's GPUDirect RDMA guide, 2.1.1: nv-p2p "will no longer be
//!   supported on NVIDIA Tegra platforms starting with NVIDIA Blackwell-based SoCs"; only Orin
//!   with L4T keeps its own nv-p2p, deprecated in CUDA 13.0. The integrated GPU is no PCI
//!   function: no peer-memory client or dma-buf MR reaches it.
//! - Confidential computing: a TDX or SEV-SNP guest, where NVIDIA's driver runs the GPU in CC
//!   mode and peer access is off ("We disable PeerAccess when we are in CC mode",
//!   NVIDIA/nvtrust#22).

use super::super::{Check, PairFacts, Status};
use super::predicates::{kind, Kind};
use super::{predicates, Ctx, GdrPath, PairVerdict, PathResult, WhyNot};

/// GB10's PCI device id (vendor 0x10de).
const GB10_DEVICE: u16 = 0x2e12;

/// Why a whole host cannot.
fn host_block(ctx: &Ctx) -> Option<WhyNot> {
    let c = ctx.f.capability.as_ref()?;
    if c.soc_family.as_deref() == Some("Tegra") {
        return Some(WhyNot {
            reason: "Tegra SoC: a Jetson, IGX or DRIVE integrated GPU has no GPUDirect RDMA through a peer-memory client or dma-buf; Orin's L4T nv-p2p is deprecated since CUDA 13.0 and Blackwell-based SoCs have none (CUDA 13.0 GPUDirect RDMA guide 2.1.1)".to_owned(),
            fix: "no module or setting enables it: on Orin, JetPack's own nv-p2p interface; elsewhere stage through host memory".to_owned(),
        });
    }
    if let Some(kind) = &c.confidential {
        let what = if kind == "tdx" {
            "Intel TDX"
        } else {
            "AMD SEV-SNP"
        };
        return Some(WhyNot {
            reason: format!("confidential VM: an {what} guest, where NVIDIA's driver runs its GPUs in confidential-computing mode, where peer access is disabled (NVIDIA/nvtrust#22): no GPUDirect RDMA"),
            fix: "run GPUDirect RDMA workloads outside confidential computing: a VM that is not confidential, or bare metal, with the GPU's CC mode off (nvidia_gpu_tools.py --set-cc-mode=off)".to_owned(),
        });
    }
    if ctx
        .f
        .gpus
        .iter()
        .any(|g| g.vendor == 0x10de && g.device == GB10_DEVICE)
    {
        return Some(WhyNot {
            reason: "GB10: a DGX Spark GPU (10de:2e12), where GPUDirect RDMA is not supported; nvidia-peermem, dma-buf and GDRCopy do not work (DGX Spark porting guide)".to_owned(),
            fix: "no module or setting enables it: NCCL and UCX stage through host memory on this platform".to_owned(),
        });
    }
    None
}

fn consumer_why(name: &str) -> WhyNot {
    WhyNot {
        reason: format!("GeForce/TITAN GPU: {name}; NVIDIA's driver refuses GPUDirect RDMA on consumer GPUs (the gate is in libcuda; no peer-memory module or dma-buf setting changes it)"),
        fix: "use a data-center or professional (RTX/Quadro) GPU for GPUDirect RDMA; on this one NCCL and UCX stage through host memory".to_owned(),
    }
}

/// The loaded peer-memory modules that pin persistently (nvpeer's default).
fn persistent_modules<'a>(ctx: &Ctx<'a>) -> Vec<&'a str> {
    let invalidating = predicates::invalidating_modules(ctx);
    ctx.f
        .modules
        .iter()
        .map(|m| m.name.as_str())
        .filter(|m| !invalidating.contains(m))
        .collect()
}

fn no_persistent_why(ctx: &Ctx, name: &str, what: &str) -> WhyNot {
    WhyNot {
        reason: format!(
            "no persistent pins on MIG/vGPU: {name} is {what}, where NVIDIA refuses them (nv-p2p.h: \"not supported on ... MIG-enabled devices and vGPU\"), and {} pins nv_mem persistently (persistent_api_support=1)",
            persistent_modules(ctx).join(", ")
        ),
        fix: "reload the module with persistent_api_support=0 (an invalidating nv_mem, which MIG and vGPU allow): `options nvidia_peermem persistent_api_support=0` in /etc/modprobe.d/nvidia-peermem.conf (kept across boots), then `rmmod nvidia_peermem && modprobe nvidia_peermem`".to_owned(),
    }
}

fn describe(kind: &Kind) -> String {
    match kind {
        Kind::Vgpu => "a vGPU".to_owned(),
        Kind::Mig(gi) => format!(
            "MIG-enabled (GPU instances {})",
            gi.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
        _ => String::new(),
    }
}

/// Each path's result for pair `p`, with what the platform forbids: a host or GPU that cannot
/// loses every path; on MIG or vGPU peer memory is lost when every loaded module pins
/// persistently.
pub(super) fn restrict(
    ctx: &Ctx,
    p: &PairFacts,
    results: [(GdrPath, Option<PathResult>); 3],
) -> [(GdrPath, Option<PathResult>); 3] {
    let (kind, name) = kind(ctx, &p.gpu);
    let block = host_block(ctx).or_else(|| (kind == Kind::Consumer).then(|| consumer_why(&name)));
    results.map(|(path, result)| {
        let result = result.map(|r| match (&block, &kind) {
            (Some(w), _) => PathResult::fails(w.reason.clone(), w.fix.clone()),
            (None, Kind::Vgpu | Kind::Mig(_))
                if path == GdrPath::PeerMemory
                    && r.works.is_ok()
                    && !persistent_modules(ctx).is_empty() =>
            {
                let w = no_persistent_why(ctx, &name, &describe(&kind));
                PathResult::fails(w.reason, w.fix)
            }
            _ => r,
        });
        (path, result)
    })
}

/// The `gpu_gdr` row.
pub(super) fn row(ctx: &Ctx, pairs: &[PairVerdict]) -> Check {
    if let Some(w) = host_block(ctx) {
        return Check::fail("gpu_gdr", w.reason, w.fix);
    }
    let kinds: Vec<(Kind, String)> = ctx.f.gpus.iter().map(|g| kind(ctx, &g.label)).collect();
    if kinds.is_empty() {
        return Check::ok("gpu_gdr", "no GPU to judge");
    }
    let consumer: Vec<&str> = kinds
        .iter()
        .filter(|(k, _)| *k == Kind::Consumer)
        .map(|(_, n)| n.as_str())
        .collect();
    if !consumer.is_empty() {
        let w = consumer_why(&consumer.join(", "));
        return Check::fail("gpu_gdr", w.reason, w.fix);
    }
    let no_persistent: Vec<(String, &Kind)> = kinds
        .iter()
        .filter(|(k, _)| matches!(k, Kind::Vgpu | Kind::Mig(_)))
        .map(|(k, n)| (format!("{n} is {}", describe(k)), k))
        .collect();
    if !no_persistent.is_empty() {
        let list = no_persistent
            .iter()
            .map(|(n, _)| n.as_str())
            .collect::<Vec<_>>()
            .join(", ");
        let persistent = persistent_modules(ctx);
        if persistent.is_empty() {
            return Check::ok(
                "gpu_gdr",
                format!("{list}: NVIDIA refuses persistent pins there (nv-p2p.h), so a peer-memory module must pin with invalidation (nvpeer: persistent_api_support=0); {}", if ctx.f.modules.is_empty() { "none is loaded" } else { "the loaded one does" }),
            );
        }
        let w = no_persistent_why(ctx, &list, "MIG-enabled or a vGPU");
        let lost = pairs.iter().any(|p| {
            p.paths.is_empty()
                && p.why_not
                    .get(&GdrPath::PeerMemory)
                    .is_some_and(|n| n.reason.contains("persistent pins"))
        });
        let detail = format!(
            "no persistent pins on MIG/vGPU: {list}, where NVIDIA refuses them (nv-p2p.h), and {} pins nv_mem persistently (persistent_api_support=1): peer memory fails for its pairs",
            persistent.join(", ")
        );
        return if lost {
            Check::fail("gpu_gdr", detail, w.fix)
        } else {
            Check::warn("gpu_gdr", detail, w.fix)
        };
    }
    let unknown: Vec<&str> = kinds
        .iter()
        .filter(|(k, _)| *k == Kind::Unknown)
        .map(|(_, n)| n.as_str())
        .collect();
    let named = kinds
        .iter()
        .filter(|(k, _)| *k == Kind::Capable)
        .map(|(_, n)| n.as_str())
        .collect::<Vec<_>>();
    let mut detail = String::new();
    if !named.is_empty() {
        detail.push_str(&format!(
            "{}: {}",
            named.join(", "),
            if ctx.f.capability.is_some() {
                "no GeForce, vGPU, MIG, GB10, Tegra or confidential-computing marker"
            } else {
                "no GeForce, vGPU or GB10 marker; Tegra, confidential VMs and MIG not examined (facts of an older nvpeer)"
            }
        ));
    }
    if !unknown.is_empty() {
        if !detail.is_empty() {
            detail.push_str("; ");
        }
        let why = match ctx.proc_unreadable(crate::host::nvidia_proc::Part::Gpus) {
            Some(e) => format!("could not read {e}"),
            None => "no /proc/driver/nvidia/gpus/*/information".to_owned(),
        };
        detail.push_str(&format!(
            "{}: model unknown ({why}), GeForce and vGPU not judged",
            unknown.join(", ")
        ));
    }
    Check::ok("gpu_gdr", detail)
}

/// Where the host cannot do GPUDirect RDMA at all (Tegra, GB10, a confidential VM, or only
/// consumer GPUs), `gpu_gdr` is its one failure: every other failing row is moot.
pub(super) fn moot(ctx: &Ctx, rows: &mut [Check]) {
    let whole_host = host_block(ctx).is_some()
        || (!ctx.f.gpus.is_empty()
            && ctx
                .f
                .gpus
                .iter()
                .all(|g| kind(ctx, &g.label).0 == Kind::Consumer));
    if !whole_host {
        return;
    }
    for r in rows
        .iter_mut()
        .filter(|r| r.id != "gpu_gdr" && r.status != Status::Ok)
    {
        r.detail = format!(
            "moot: this platform cannot do GPUDirect RDMA (see gpu_gdr); {}",
            r.detail
        );
        *r = r.clone().hidden();
    }
}
