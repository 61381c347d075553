// SPDX-License-Identifier: MIT OR Apache-2.0
//! Per pair, per library, the mode it will pick and what decides it (issue 47 item 1, in part):
//! NCCL's net transport and GPUDirect RDMA path, NCCL GIN's GDAKI handler, GDRCopy's backend,
//! UCX's, NVSHMEM's and libfabric EFA's paths.
//! The `modes` row lists them; each pair's `modes` carries them in `--json`.
//!
//! * NCCL: IB (or aws-ofi-nccl on EFA) unless `NCCL_IB_DISABLE` (then sockets); GPUDirect RDMA
//!   where a path carries the pair and NCCL uses it (`gdr_used`), else staged through host
//!   memory; dma-buf before peer memory unless `NCCL_DMABUF_ENABLE=0`.
//! * NCCL GIN (`../shared/FIELD.md` U5, U6): GDAKI counts peer memory only through
//!   `ncclIbPeerMemSupport` ("GDAKI does not support nv_peer_mem", NCCL `gin.cc`), which looks
//!   for the module `nvidia_peermem`; dma-buf otherwise. Without `PeerMappingOverride=1` the GPU
//!   cannot map the NIC's doorbell and NCCL >= 2.28.7 (`NCCL_GIN_GDAKI_NIC_HANDLER=AUTO`, its
//!   default) falls back to a CPU proxy. The installed NCCL release is not read: both are
//!   named as the rule of their version range.
//! * GDRCopy: [`super::gdrcopy_mode`].
//! * UCX, NVSHMEM, libfabric's EFA provider: [`super::lib_modes`].

use serde::Serialize;

use super::super::{Check, PairFacts, Status, Workload};
use super::{predicates, Ctx, GdrPath, PairVerdict};

mod lib_modes;

/// One library's mode on one pair.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LibraryMode {
    /// `nccl`, `nccl_gin`, `gdrcopy`, `ucx`, `nvshmem`, `libfabric` ([`super::lib_modes`]).
    pub library: &'static str,
    pub mode: String,
    /// The setting or fact that decides it.
    pub decided_by: String,
    /// What it costs against the library's best mode; `None`: not degraded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost: Option<String>,
    /// Under `check --for gin`: the library fails here (GDAKI with no memory path it accepts).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub fails: bool,
}

/// The words of a GPUDirect RDMA mode, as NCCL's line of `modes` ends (`net IB, GDR, dma-buf`)
/// and as `bench --loopback-all` and `selftest` name the mode they got (`got`), so the two can
/// be compared: `GDR, dma-buf`, `GDR, peer memory`, `GDR, efa_nv_peermem`; `staged` (through
/// host memory) where no path carries the pair.
pub fn gdr_words(path: Option<GdrPath>) -> &'static str {
    match path {
        Some(GdrPath::Dmabuf) => "GDR, dma-buf",
        Some(GdrPath::PeerMemory) => "GDR, peer memory",
        Some(GdrPath::Efa) => "GDR, efa_nv_peermem",
        None => "staged",
    }
}

pub(super) const STAGED_COST: &str = "every transfer is copied through host memory: lower bandwidth, higher latency, CPU and PCIe load";

fn nccl(ctx: &Ctx, p: &PairFacts, v: &PairVerdict) -> LibraryMode {
    let e = &ctx.f.nccl_env;
    let net = if Ctx::is_efa(p) {
        "net OFI (aws-ofi-nccl on EFA)"
    } else {
        "net IB"
    };
    let mode = |mode: String, decided_by: String, cost: Option<&str>| LibraryMode {
        library: "nccl",
        mode,
        decided_by,
        cost: cost.map(str::to_owned),
        fails: false,
    };
    if e.ib_disable {
        return mode(
            "net socket, staged".to_owned(),
            format!("NCCL_IB_DISABLE=1 ({})", predicates::source(&e.ib_disable_source)),
            Some("no RDMA at all: TCP sockets through host memory, a fraction of the NIC's bandwidth, CPU-bound"),
        );
    }
    if let Some(why) = &v.not_used {
        return mode(
            format!("{net}, {}", gdr_words(None)),
            why.clone(),
            Some(STAGED_COST),
        );
    }
    let dmabuf = format!(
        "NCCL_DMABUF_ENABLE={} ({})",
        u8::from(e.dmabuf_enable),
        predicates::source(&e.dmabuf_enable_source)
    );
    // dma-buf decided by the verb's symbol version, which these facts do not record: NCCL's
    // mode is unknown between dma-buf and what it would use without it.
    if let Some(w) = v
        .why_not
        .get(&GdrPath::Dmabuf)
        .filter(|w| e.dmabuf_enable && super::dmabuf::version_unrecorded(w))
    {
        return mode(
            format!(
                "{net}, unknown ({} or {})",
                gdr_words(Some(GdrPath::Dmabuf)),
                gdr_words(v.preferred)
            ),
            w.reason.clone(),
            None,
        );
    }
    match v.preferred {
        None => mode(
            format!("{net}, {}", gdr_words(None)),
            "no GPUDirect RDMA path carries the pair (see paths)".to_owned(),
            Some(STAGED_COST),
        ),
        Some(GdrPath::Dmabuf) => {
            // The verb NCCL loads by its version (`ibvsymbols.cc`): where recorded, the fact
            // that decides dma-buf on the libibverbs side.
            let verb = match &ctx.f.verbs {
                crate::host::verbs::Verbs::Probed {
                    reg_dmabuf_mr_versioned: Some(true),
                    ..
                } => format!(
                    "; libibverbs has ibv_reg_dmabuf_mr@{}",
                    crate::host::verbs::REG_DMABUF_MR_VERSION
                ),
                _ => String::new(),
            };
            mode(
                format!("{net}, {}", gdr_words(Some(GdrPath::Dmabuf))),
                format!("{dmabuf}: NCCL registers dma-bufs first{verb}"),
                None,
            )
        }
        Some(GdrPath::PeerMemory) => {
            let why = if e.dmabuf_enable {
                match v.why_not.get(&GdrPath::Dmabuf) {
                    Some(w) => format!("no dma-buf: {}", w.reason),
                    None => "dma-buf not used".to_owned(),
                }
            } else {
                dmabuf
            };
            mode(
                format!("{net}, {}", gdr_words(Some(GdrPath::PeerMemory))),
                why,
                None,
            )
        }
        Some(GdrPath::Efa) => mode(
            format!("{net}, {}", gdr_words(Some(GdrPath::Efa))),
            "EFA's own GPUDirect path".to_owned(),
            None,
        ),
    }
}

fn nccl_gin(ctx: &Ctx, v: &PairVerdict) -> LibraryMode {
    let mode = |mode: &str, decided_by: String, cost: Option<&str>, fails: bool| LibraryMode {
        library: "nccl_gin",
        mode: mode.to_owned(),
        decided_by,
        cost: cost.map(str::to_owned),
        fails,
    };
    let dmabuf = v.paths.contains(&GdrPath::Dmabuf);
    let peer = v.paths.contains(&GdrPath::PeerMemory);
    let visible = ctx.f.modules.iter().any(|m| m.name == "nvidia_peermem");
    // GDAKI's memory: dma-buf, or peer memory of a module it sees.
    let accepted = dmabuf || (peer && visible);
    // Without dma-buf GIN would be unavailable, and dma-buf is unknown (the verb's symbol
    // version not recorded): unknown, never a failure.
    if let Some(w) = v
        .why_not
        .get(&GdrPath::Dmabuf)
        .filter(|w| !accepted && super::dmabuf::version_unrecorded(w))
    {
        return mode(
            "unknown (GDAKI over dma-buf, or GIN unavailable)",
            w.reason.clone(),
            None,
            false,
        );
    }
    if !accepted {
        let why = if peer {
            let names: Vec<&str> = ctx.f.modules.iter().map(|m| m.name.as_str()).collect();
            format!("peer memory only through a module loaded as {}, not nvidia_peermem: GDAKI (NCCL >= 2.29.2) does not count it (\"GDAKI does not support nv_peer_mem\"), and no dma-buf", names.join(", "))
        } else {
            "neither dma-buf nor peer memory carries the pair".to_owned()
        };
        return mode(
            "none (GIN unavailable)",
            why,
            Some("no GPU-initiated networking on this pair"),
            true,
        );
    }
    let memory = if dmabuf {
        "dma-buf"
    } else {
        "peer memory (nvidia_peermem)"
    };
    let Some(params) = ctx.params else {
        return mode(
            "GDAKI, handler not probed",
            format!("{memory}; /proc/driver/nvidia/params not read (PeerMappingOverride unknown)"),
            None,
            false,
        );
    };
    let handler = ctx
        .f
        .gin_env
        .get(predicates::GPU_HANDLER_ENV)
        .map(String::as_str);
    if handler == Some("1") {
        return mode(
            "GDAKI, CPU proxy",
            format!("{memory}; NCCL_GIN_GDAKI_NIC_HANDLER=1 forces the CPU-assisted handler"),
            Some("each doorbell is rung by a CPU proxy thread: added latency per operation and a busy CPU core"),
            false,
        );
    }
    let doorbell = params.registry_dword("PeerMappingOverride") == Some("1");
    if !doorbell && handler == Some("2") {
        return mode(
            "none (GDAKI fails)",
            format!("{memory}; NCCL_GIN_GDAKI_NIC_HANDLER=2 forces the GPU-side handler, but without PeerMappingOverride=1 the GPU cannot map the NIC's doorbell"),
            Some("no GPU-initiated networking"),
            true,
        );
    }
    match params.registry_dword("PeerMappingOverride") {
        Some("1") => mode(
            "GDAKI, GPU-side NIC handler",
            format!("{memory}; PeerMappingOverride=1 in RegistryDwords: the GPU maps the NIC's doorbell"),
            None,
            false,
        ),
        _ => mode(
            "GDAKI, CPU proxy",
            format!("{memory}; no PeerMappingOverride=1 in RegistryDwords: the GPU cannot map the NIC's doorbell, so NCCL >= 2.28.7 (NCCL_GIN_GDAKI_NIC_HANDLER=AUTO, the default) falls back to a CPU proxy; a GPU-side handler forced, or NCCL before 2.28.7, fails"),
            Some("each doorbell is rung by a CPU proxy thread: added latency per operation and a busy CPU core"),
            false,
        ),
    }
}

fn gdrcopy(ctx: &Ctx) -> Option<LibraryMode> {
    let g = ctx.f.gdrcopy.as_ref()?;
    if !g.loaded && g.libraries.is_empty() {
        return None;
    }
    let (mode, why) = predicates::mode(ctx, g);
    Some(LibraryMode {
        library: "gdrcopy",
        mode: mode.to_string(),
        decided_by: why,
        cost: None,
        fails: false,
    })
}

/// The modes of pair `p` (its verdict `v`).
pub(super) fn of_pair(ctx: &Ctx, p: &PairFacts, v: &PairVerdict) -> Vec<LibraryMode> {
    let mut modes = vec![nccl(ctx, p, v), nccl_gin(ctx, v)];
    modes.extend(gdrcopy(ctx));
    modes.extend(lib_modes::ucx(ctx, p, v));
    modes.push(lib_modes::nvshmem(ctx, p, v));
    modes.extend(lib_modes::libfabric_efa(ctx, p, v));
    modes
}

/// Whether GIN is this run's concern: `--for gin` or `NCCL_GIN_ENABLE` set to 1.
fn gin_asked(ctx: &Ctx) -> bool {
    ctx.options.workload == Some(Workload::Gin)
        || ctx.f.gin_env.get("NCCL_GIN_ENABLE").map(String::as_str) == Some("1")
}

/// The `modes` row: every pair's modes; a warning names each degraded mode and its cost (GIN's
/// only where GIN is asked for); under `--for gin` a failure where GDAKI would fail.
pub(super) fn row(ctx: &Ctx, pairs: &[PairVerdict]) -> Check {
    if pairs.is_empty() {
        let what = "how NCCL, UCX and NVSHMEM move GPU memory between nodes";
        if let Some(mut row) = predicates::unknown_pair_row(ctx.f, "modes", what) {
            if let Some(g) = gdrcopy(ctx) {
                row.detail
                    .push_str(&format!("; gdrcopy {} ({})", g.mode, g.decided_by));
            }
            return row;
        }
        let mut detail = "no GPU-NIC pair: NCCL between nodes would run over sockets, staged through host memory; no GIN".to_owned();
        if let Some(g) = gdrcopy(ctx) {
            detail.push_str(&format!("; gdrcopy {} ({})", g.mode, g.decided_by));
        }
        detail.push_str(&lib_modes::without_pairs(ctx));
        return Check::not_applicable("modes", detail);
    }
    let gin = gin_asked(ctx);
    let mut lines = Vec::new();
    let mut degraded = Vec::new();
    let mut failing = Vec::new();
    for v in pairs {
        let text: Vec<String> = v
            .modes
            .iter()
            .map(|m| format!("{} {} ({})", m.library, m.mode, m.decided_by))
            .collect();
        lines.push(format!("{}: {}", v.name(), text.join("; ")));
        for m in &v.modes {
            let counts = match m.library {
                "nccl_gin" => gin,
                "ucx" | "nvshmem" => lib_modes::counts(ctx, m.library),
                _ => true,
            };
            if let (Some(cost), true) = (&m.cost, counts) {
                degraded.push(format!("{} {} on {}: {cost}", m.library, m.mode, v.name()));
            }
            if m.fails && ctx.options.workload == Some(Workload::Gin) {
                failing.push(format!("{} on {}: {}", m.library, v.name(), m.decided_by));
            }
        }
    }
    let detail = lines.join(" | ");
    if !failing.is_empty() {
        return Check::fail(
            "modes",
            format!("{detail}: {}", failing.join("; ")),
            "give GDAKI and IBGDA a memory path they accept: dma-buf (open NVIDIA modules, kernel >= 6.1), or the peer-memory module loaded as nvidia_peermem; where a GPU-side handler is forced, set PeerMappingOverride=1 in NVreg_RegistryDwords or let the library pick its handler",
        );
    }
    if !degraded.is_empty() {
        return Check::warn(
            "modes",
            format!("{detail}: degraded: {}", degraded.join("; ")),
            "see the rows that decide each mode (nccl_env, gdr_used, paths, gin_driver)",
        );
    }
    Check::new("modes", Status::Ok, detail, None)
}
