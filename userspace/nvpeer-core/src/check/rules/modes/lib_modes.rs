// SPDX-License-Identifier: MIT OR Apache-2.0
//! The modes of UCX, NVSHMEM and libfabric's EFA provider on a pair (issue 47 item 1), from
//! their settings ([`super::super::LibraryFacts`]: where each library reads them) and releases.
//!
//! * UCX (IB pairs): an IB transport in `UCX_TLS` (default `all`); GPUDirect RDMA unless
//!   `UCX_IB_GPU_DIRECT_RDMA=no` (a ternary, default `try`); dma-buf first unless
//!   `UCX_CUDA_COPY_DMABUF=no` (`uct/cuda/cuda_copy/cuda_copy_md.c`), else peer memory where
//!   UCX's own test sees a module (`uct/ib/base/ib_md.c`, [`crate::check::nccl::UCX_RULE`]); its
//!   `gdr_copy` transport where gdrdrv opens and `UCX_TLS` keeps it. The UCX release that first
//!   registers dma-bufs is taken as 1.14 (**unverified**).
//! * NVSHMEM (IB pairs): a CPU proxy (IBRC, its default remote transport) unless
//!   `NVSHMEM_IB_ENABLE_IBGDA=1` or `NVSHMEM_REMOTE_TRANSPORT=ibgda`; IBGDA's NIC handler per
//!   `NVSHMEM_IBGDA_NIC_HANDLER` (`gpu`, `cpu`; unset or `auto` picks) and `PeerMappingOverride`:
//!   3.4.5 added CPU-assisted IBGDA "without the use of GDRCopy or the x86 regkey", to which
//!   systems without those fall back (NVSHMEM 3.4.5 release notes; `../shared/FIELD.md` U6);
//!   before 3.4.5 IBGDA without the regkey needs GDRCopy (read from those notes, not from the
//!   code). That a forced `gpu` handler fails without the regkey rather than falling back is
//!   **assumed** (as NCCL's `NCCL_GIN_GDAKI_NIC_HANDLER=2` does). Its IB transports register GPU
//!   memory with the NIC: no GPUDirect RDMA path, no NVSHMEM over IB ("mem registration failed",
//!   NVSHMEM's FAQ). On EFA pairs NVSHMEM uses its libfabric transport (a CPU proxy).
//! * libfabric EFA (EFA pairs): `efa_hmem.c` registers a CUDA buffer once at initialisation,
//!   through dma-buf unless `FI_HMEM_CUDA_USE_DMABUF` says no, then `ibv_reg_mr` (peer memory);
//!   where both fail P2P is off for good and the provider copies through host bounce buffers
//!   (`../shared/FIELD.md` U11, libfabric PR#11865, PR#12311); `FI_HMEM_DISABLE_P2P=1`
//!   (`hmem_disable_p2p`) turns P2P off. The first release that tries dma-buf by default is not
//!   verified here.
//! * dma-buf for these three is judged by `facts.verbs.reg_dmabuf_mr` alone, never by the symbol
//!   version NCCL asks for (`dlvsym` at `IBVERBS_1.12`, [`crate::host::verbs::REG_DMABUF_MR_VERSION`]):
//!   none of them looks the verb up by version. Read in their sources: UCX calls
//!   `ibv_reg_dmabuf_mr` directly from `uct_ib_reg_mr` (`src/uct/ib/base/ib_md.c`, under
//!   `HAVE_DECL_IBV_REG_DMABUF_MR`), linked to libibverbs; libfabric's EFA provider calls it
//!   directly (`efa_mr_reg_ibv_dmabuf_mr`, `prov/efa/src/efa_mr.c`, under `HAVE_EFA_DMABUF_MR`);
//!   NVSHMEM's IB transports `dlopen("libibverbs.so.1")` and load it with `LOAD_SYM`, which
//!   `transport_common.h` defines as plain `dlsym` (`transport_ib_common.cpp`, NVIDIA/nvshmem; the
//!   releases before that public repository are not checked). So where the verb is exported at
//!   another version, or the facts of an older nvpeer do not record the version, dma-buf still
//!   carries the pair for them when every other dma-buf condition holds ([`dmabuf_for`]).
//!   **Not verified**, and not judged: whether the installed UCX or libfabric was built with the
//!   call (configure found rdma-core >= 34), and which version node a linked build bound it to
//!   (that of the libibverbs it was built against: a build against another libibverbs than the
//!   installed one is not probed); NVSHMEM's Data Direct registration
//!   (`mlx5dv_reg_dmabuf_mr` by `dlvsym` at `MLX5_1.25`), which nvpeer does not record. GDRCopy
//!   uses no verbs (`predicates::mode`): its mode does not depend on libibverbs at all.

use super::super::super::{Facts, LibraryFacts, PairFacts, Workload};
use super::super::predicates::{self, Mode as GdrcopyMode};
use super::super::{capability, dmabuf, Ctx, GdrPath, PairVerdict};
use super::{LibraryMode, STAGED_COST};
use crate::host::verbs::{Verbs, REG_DMABUF_MR_VERSION};

const CPU_PROXY_COST: &str =
    "each doorbell is rung by a CPU proxy thread: added latency per operation and a busy CPU core";
const BOUNCE_COST: &str = "every GPU transfer is copied through host bounce buffers: lower bandwidth, higher latency, CPU load";

/// A setting's value and where it came from, as the rows word it (`set to "no" in
/// /etc/ucx/ucx.conf`); `None`: not set.
fn setting<'a>(f: &'a Facts, name: &str) -> Option<(&'a str, String)> {
    let s = f.libraries.as_ref()?.settings.get(name)?;
    let from = match &s.file {
        None => format!("set to {:?}", s.value),
        Some(file) => format!("set to {:?} in {file}", s.value),
    };
    Some((s.value.as_str(), from))
}

/// `NAME=value (source)`, or `NAME unset (default <default>)`; facts without the settings say so.
fn describe(f: &Facts, name: &str, default: &str) -> String {
    if f.libraries.is_none() {
        return format!(
            "{name} not recorded (facts of an older nvpeer; default {default} assumed)"
        );
    }
    match setting(f, name) {
        Some((v, from)) => format!("{name}={v} ({from})"),
        None => format!("{name} unset (default {default})"),
    }
}

fn truthy(v: &str) -> Option<bool> {
    match v.to_ascii_lowercase().as_str() {
        "y" | "yes" | "on" | "1" | "true" => Some(true),
        "n" | "no" | "off" | "0" | "false" => Some(false),
        _ => None,
    }
}

fn value<'a>(f: &'a Facts, name: &str) -> Option<&'a str> {
    setting(f, name).map(|(v, _)| v)
}

/// ` (UCX 1.18.0, /usr/lib/.../ucx.pc)` or ` (no UCX found installed: <rule>)`.
fn release(l: Option<&LibraryFacts>, library: &str) -> Option<String> {
    l?.version(library).map(|i| i.version.clone())
}

fn at_least(version: &str, min: &[u64]) -> bool {
    super::super::super::facts::release_key(version).as_slice() >= min
}

fn mode(
    library: &'static str,
    mode: impl Into<String>,
    decided_by: String,
    cost: Option<&str>,
    fails: bool,
) -> LibraryMode {
    LibraryMode {
        library,
        mode: mode.into(),
        decided_by,
        cost: cost.map(str::to_owned),
        fails,
    }
}

/// Whether dma-buf carries pair `p` for a library that calls `ibv_reg_dmabuf_mr` by its default
/// symbol (`caller` says how, as the mode's words name it), and, where that differs from NCCL's
/// `dmabuf` path (the verb not at [`REG_DMABUF_MR_VERSION`], or that version not recorded), the
/// words that say so (`; <caller>: ...`); otherwise empty.
fn dmabuf_for(ctx: &Ctx, p: &PairFacts, v: &PairVerdict, caller: &str) -> (bool, String) {
    if v.paths.contains(&GdrPath::Dmabuf) {
        return (true, String::new());
    }
    let state = match &ctx.f.verbs {
        Verbs::Probed {
            reg_dmabuf_mr: Some(true),
            reg_dmabuf_mr_versioned: Some(false),
            ..
        } => format!("libibverbs exports it, not at {REG_DMABUF_MR_VERSION}"),
        Verbs::Probed {
            reg_dmabuf_mr: Some(true),
            reg_dmabuf_mr_versioned: None,
            ..
        } => {
            "libibverbs exports it; these facts, of an older nvpeer, do not record at which version"
                .to_owned()
        }
        // The version is not what stands in the way: NCCL's path decides for every caller.
        _ => return (false, String::new()),
    };
    // The same conditions without the version, and what the platform forbids every path.
    let [(_, result), ..] = capability::restrict(
        ctx,
        p,
        [
            (
                GdrPath::Dmabuf,
                Some(dmabuf::pair_by(ctx, p, dmabuf::Lookup::DefaultSymbol)),
            ),
            (GdrPath::PeerMemory, None),
            (GdrPath::Efa, None),
        ],
    );
    if result.is_some_and(|r| r.works.is_ok()) {
        (
            true,
            format!("; {caller}: the version {REG_DMABUF_MR_VERSION} NCCL asks for (dlvsym) does not decide it ({state})"),
        )
    } else {
        (false, String::new())
    }
}

/// `UCX_TLS` keeps an IB transport (`rc*`, `dc*`, `ud*`, `ib`; `all`); a leading `^` excludes.
fn ucx_tls_has_ib(tls: &str) -> bool {
    let is_ib =
        |t: &str| t == "ib" || t.starts_with("rc") || t.starts_with("dc") || t.starts_with("ud");
    match tls.strip_prefix('^') {
        Some(excluded) => {
            let ex: Vec<&str> = excluded.split(',').map(str::trim).collect();
            !(ex.contains(&"ib")
                || ["rc", "dc", "ud"]
                    .iter()
                    .all(|g| ex.iter().any(|t| t.starts_with(g))))
        }
        None => tls
            .split(',')
            .map(str::trim)
            .any(|t| t == "all" || is_ib(t)),
    }
}

/// `UCX_TLS` keeps `gdr_copy` (by name, `cuda` or `all`).
fn ucx_tls_has_gdr_copy(tls: &str) -> bool {
    let named = |t: &str| t == "gdr_copy" || t == "cuda";
    match tls.strip_prefix('^') {
        Some(excluded) => !excluded.split(',').map(str::trim).any(named),
        None => tls
            .split(',')
            .map(str::trim)
            .any(|t| t == "all" || named(t)),
    }
}

/// UCX on pair `p`; `None` on EFA pairs (UCX has no EFA transport).
pub(super) fn ucx(ctx: &Ctx, p: &PairFacts, v: &PairVerdict) -> Option<LibraryMode> {
    if Ctx::is_efa(p) {
        return None;
    }
    let f = ctx.f;
    let version = release(f.libraries.as_ref(), "ucx");
    let installed = match &version {
        Some(v) => format!("UCX {v}"),
        None => "UCX not found installed".to_owned(),
    };
    let tls = value(f, "UCX_TLS").unwrap_or("all");
    if !ucx_tls_has_ib(tls) {
        return Some(mode(
            "ucx",
            "no IB transport, staged",
            format!(
                "{}: no rc, dc, ud or ib transport; {installed}",
                describe(f, "UCX_TLS", "all")
            ),
            Some("no RDMA: GPU memory moves over TCP or shared memory, copied through host memory"),
            false,
        ));
    }
    // Old facts: the variable from its own field.
    let gdr = match f.libraries {
        Some(_) => value(f, "UCX_IB_GPU_DIRECT_RDMA").and_then(truthy),
        None => f.ucx_gpu_direct_rdma,
    };
    if gdr == Some(false) {
        return Some(mode(
            "ucx",
            "IB, staged",
            format!(
                "{}; {installed}",
                describe(f, "UCX_IB_GPU_DIRECT_RDMA", "try")
            ),
            Some(STAGED_COST),
            false,
        ));
    }
    let dmabuf_setting = match f.libraries {
        Some(_) => value(f, "UCX_CUDA_COPY_DMABUF").and_then(truthy),
        None => f.ucx_cuda_copy_dmabuf,
    };
    let dmabuf_release = version.as_deref().map(|v| at_least(v, &[1, 14]));
    let gdr_copy = f
        .gdrcopy
        .as_ref()
        .filter(|g| g.loaded || !g.libraries.is_empty())
        .map(|g| predicates::mode(ctx, g).0)
        == Some(GdrcopyMode::Gdrdrv)
        && ucx_tls_has_gdr_copy(tls);
    let plus = if gdr_copy { ", gdr_copy" } else { "" };
    let gdr_copy_why = if gdr_copy {
        "; gdrdrv opens: UCX's gdr_copy transport copies small messages to and from the GPU"
    } else {
        ""
    };
    let dmabuf_why = describe(f, "UCX_CUDA_COPY_DMABUF", "try");
    let (dmabuf, by_default_symbol) = dmabuf_for(
        ctx,
        p,
        v,
        "UCX calls ibv_reg_dmabuf_mr directly, by its default symbol (linked to libibverbs, uct/ib/base/ib_md.c)",
    );
    let (m, why, cost) = if dmabuf && dmabuf_setting != Some(false) && dmabuf_release != Some(false)
    {
        let rule = if version.is_none() {
            " (UCX 1.14 and later, taken as the first release that registers dma-bufs: unverified)"
        } else {
            ""
        };
        (
            format!("IB, GDR, dma-buf{plus}"),
            format!("{dmabuf_why}: UCX registers GPU memory as dma-buf{rule}{by_default_symbol}; {installed}{gdr_copy_why}"),
            None,
        )
    } else if v.paths.contains(&GdrPath::PeerMemory) && f.ucx.peer_memory {
        let no_dmabuf = if dmabuf_setting == Some(false) {
            dmabuf_why
        } else if dmabuf_release == Some(false) {
            "UCX before 1.14 registers no dma-buf (release unverified)".to_owned()
        } else {
            "no dma-buf carries the pair".to_owned()
        };
        (
            format!("IB, GDR, peer memory{plus}"),
            format!(
                "{no_dmabuf}; UCX's test sees the peer-memory module; {installed}{gdr_copy_why}"
            ),
            None,
        )
    } else {
        let why = if v.paths.contains(&GdrPath::PeerMemory) {
            "only peer memory carries the pair and UCX's test finds none of the files it looks for"
                .to_owned()
        } else if dmabuf {
            format!("only dma-buf carries the pair and UCX does not use it ({dmabuf_why})")
        } else {
            "no GPUDirect RDMA path carries the pair (see paths)".to_owned()
        };
        (
            format!("IB, staged{plus}"),
            format!("{why}; {installed}"),
            Some(STAGED_COST),
        )
    };
    Some(mode("ucx", m, why, cost, false))
}

/// NVSHMEM on pair `p`.
pub(super) fn nvshmem(ctx: &Ctx, p: &PairFacts, v: &PairVerdict) -> LibraryMode {
    let f = ctx.f;
    let version = release(f.libraries.as_ref(), "nvshmem");
    let installed = match &version {
        Some(v) => format!("NVSHMEM {v}"),
        None => "NVSHMEM not found installed".to_owned(),
    };
    let transport = value(f, "NVSHMEM_REMOTE_TRANSPORT")
        .map(str::to_ascii_lowercase)
        .unwrap_or_else(|| "ibrc".to_owned());
    if Ctx::is_efa(p) {
        return mode(
            "nvshmem",
            "proxy (libfabric)",
            format!("EFA: NVSHMEM's libfabric transport (NVSHMEM_REMOTE_TRANSPORT=libfabric), posted by a CPU proxy; IBGDA needs a ConnectX NIC; {installed}"),
            None,
            false,
        );
    }
    if transport == "none" {
        return mode(
            "nvshmem",
            "none (no remote transport)",
            describe(f, "NVSHMEM_REMOTE_TRANSPORT", "ibrc"),
            Some("no NVSHMEM transfers between nodes"),
            false,
        );
    }
    let ibgda_env = value(f, "NVSHMEM_IB_ENABLE_IBGDA").and_then(truthy) == Some(true);
    let ibgda = ibgda_env || transport == "ibgda";
    let (dmabuf, by_default_symbol) = dmabuf_for(
        ctx,
        p,
        v,
        "NVSHMEM loads ibv_reg_dmabuf_mr by dlsym, its default symbol (transport_ib_common.cpp)",
    );
    let memory = if dmabuf {
        Some(format!("dma-buf{by_default_symbol}"))
    } else if v.paths.contains(&GdrPath::PeerMemory) {
        Some("peer memory".to_owned())
    } else {
        None
    };
    let Some(memory) = memory else {
        return mode(
            "nvshmem",
            "none (no GPUDirect RDMA)",
            format!("neither dma-buf nor peer memory carries the pair: NVSHMEM's IB transports register GPU memory with the NIC (\"mem registration failed\"); {installed}"),
            ibgda.then_some("NVSHMEM's IB transports fail on this pair"),
            ibgda,
        );
    };
    if !ibgda {
        let name = match transport.as_str() {
            "ucx" => "proxy (UCX)",
            "libfabric" => "proxy (libfabric)",
            _ => "proxy (IBRC)",
        };
        return mode(
            "nvshmem",
            name,
            format!(
                "{}: a CPU proxy thread posts each transfer; {memory}; {installed}",
                describe(f, "NVSHMEM_IB_ENABLE_IBGDA", "0")
            ),
            None,
            false,
        );
    }
    let asked = if ibgda_env {
        describe(f, "NVSHMEM_IB_ENABLE_IBGDA", "0")
    } else {
        describe(f, "NVSHMEM_REMOTE_TRANSPORT", "ibrc")
    };
    let Some(params) = ctx.params else {
        return mode(
            "nvshmem",
            "IBGDA, handler not probed",
            format!("{asked}; {memory}; /proc/driver/nvidia/params not read (PeerMappingOverride unknown); {installed}"),
            None,
            false,
        );
    };
    let handler = value(f, "NVSHMEM_IBGDA_NIC_HANDLER").map(str::to_ascii_lowercase);
    let handler_why = describe(f, "NVSHMEM_IBGDA_NIC_HANDLER", "auto");
    let regkey = params.registry_dword("PeerMappingOverride") == Some("1");
    if handler.as_deref() == Some("cpu") {
        return mode(
            "nvshmem",
            "IBGDA, CPU-assisted",
            format!(
                "{asked}; {handler_why} forces the CPU-assisted handler; {memory}; {installed}"
            ),
            Some(CPU_PROXY_COST),
            false,
        );
    }
    if regkey {
        return mode(
            "nvshmem",
            "IBGDA, GPU-side NIC handler",
            format!("{asked}; PeerMappingOverride=1 in RegistryDwords: the GPU maps the NIC's doorbell; {memory}; {installed}"),
            None,
            false,
        );
    }
    if handler.as_deref() == Some("gpu") {
        return mode(
            "nvshmem",
            "none (IBGDA fails)",
            format!("{asked}; {handler_why} forces the GPU-side handler, but without PeerMappingOverride=1 the GPU cannot map the NIC's doorbell; {installed}"),
            Some("no GPU-initiated transfers"),
            true,
        );
    }
    let gdrcopy = f
        .gdrcopy
        .as_ref()
        .filter(|g| g.loaded || !g.libraries.is_empty())
        .map(|g| predicates::mode(ctx, g).0)
        .is_some_and(|m| matches!(m, GdrcopyMode::Gdrdrv | GdrcopyMode::DmabufMmap))
        && value(f, "NVSHMEM_DISABLE_GDRCOPY").and_then(truthy) != Some(true);
    match version.as_deref() {
        Some(v) if !at_least(v, &[3, 4, 5]) => {
            if gdrcopy {
                mode(
                    "nvshmem",
                    "IBGDA, CPU-assisted (GDRCopy)",
                    format!("{asked}; {handler_why}; no PeerMappingOverride=1: NVSHMEM {v} (before 3.4.5) rings the doorbell from the CPU through GDRCopy; {memory}"),
                    Some(CPU_PROXY_COST),
                    false,
                )
            } else {
                mode(
                    "nvshmem",
                    "none (IBGDA fails)",
                    format!("{asked}; {handler_why}; NVSHMEM {v} (before 3.4.5) needs PeerMappingOverride=1 or GDRCopy for IBGDA, and has neither"),
                    Some("no GPU-initiated transfers"),
                    true,
                )
            }
        }
        Some(v) => mode(
            "nvshmem",
            "IBGDA, CPU-assisted",
            format!("{asked}; {handler_why}; no PeerMappingOverride=1: NVSHMEM {v} (3.4.5 and later) falls back to CPU-assisted IBGDA; {memory}"),
            Some(CPU_PROXY_COST),
            false,
        ),
        None => mode(
            "nvshmem",
            "IBGDA, CPU-assisted",
            format!("{asked}; {handler_why}; no PeerMappingOverride=1: NVSHMEM 3.4.5 and later fall back to CPU-assisted IBGDA; before 3.4.5 IBGDA needs the regkey or GDRCopy ({}); {memory}; NVSHMEM not found installed", if gdrcopy { "GDRCopy opens here" } else { "GDRCopy does not open here, so it fails" }),
            Some(CPU_PROXY_COST),
            false,
        ),
    }
}

/// libfabric's EFA provider on pair `p`; `None` on other NICs.
pub(super) fn libfabric_efa(ctx: &Ctx, p: &PairFacts, v: &PairVerdict) -> Option<LibraryMode> {
    if !Ctx::is_efa(p) {
        return None;
    }
    let f = ctx.f;
    let installed = match release(f.libraries.as_ref(), "libfabric") {
        Some(v) => format!("libfabric {v}"),
        None => "libfabric not found installed".to_owned(),
    };
    let rdma_read = match value(f, "FI_EFA_USE_DEVICE_RDMA").and_then(truthy) {
        Some(false) => "; FI_EFA_USE_DEVICE_RDMA=0: the provider does not use the device's RDMA read (its effect on GPU memory per release is not judged)",
        _ => "",
    };
    if value(f, "FI_HMEM_DISABLE_P2P").and_then(truthy) == Some(true) {
        return Some(mode(
            "libfabric",
            "EFA, bounce buffers",
            format!(
                "{}: P2P off; {installed}{rdma_read}",
                describe(f, "FI_HMEM_DISABLE_P2P", "0")
            ),
            Some(BOUNCE_COST),
            false,
        ));
    }
    let dmabuf_env = value(f, "FI_HMEM_CUDA_USE_DMABUF").and_then(truthy);
    let dmabuf_why = describe(
        f,
        "FI_HMEM_CUDA_USE_DMABUF",
        "dma-buf tried first (libfabric PR#11865; first release not verified)",
    );
    let peer = v.paths.contains(&GdrPath::Efa) || v.paths.contains(&GdrPath::PeerMemory);
    let (dmabuf, by_default_symbol) = dmabuf_for(
        ctx,
        p,
        v,
        "the EFA provider calls ibv_reg_dmabuf_mr directly, by its default symbol (linked to libibverbs, prov/efa/src/efa_mr.c)",
    );
    let (m, why, cost) = if dmabuf && dmabuf_env != Some(false) {
        (
            "EFA, dma-buf",
            format!("{dmabuf_why}: its registration of a CUDA buffer at start goes through dma-buf{by_default_symbol}; {installed}{rdma_read}"),
            None,
        )
    } else if peer {
        let module = if v.paths.contains(&GdrPath::Efa) {
            "efa_nv_peermem"
        } else {
            "the peer-memory module"
        };
        let no_dmabuf = if dmabuf_env == Some(false) {
            dmabuf_why
        } else {
            "no dma-buf carries the pair".to_owned()
        };
        (
            "EFA, peer memory",
            format!(
                "{no_dmabuf}; ibv_reg_mr of GPU memory through {module}; {installed}{rdma_read}"
            ),
            None,
        )
    } else {
        (
            "EFA, bounce buffers",
            format!("no GPUDirect RDMA path carries the pair (see paths): the provider's registration of GPU memory at start fails, it warns once and copies through host bounce buffers for good (libfabric PR#12311); {installed}{rdma_read}"),
            Some(BOUNCE_COST),
        )
    };
    Some(mode("libfabric", m, why, cost, false))
}

/// Whether a degraded mode of `library` is worth a warning here: the library is installed, a
/// setting of it is set, or (NVSHMEM) GPU-initiated networking is asked for. libfabric's modes
/// exist only on EFA pairs, where NCCL itself goes through it.
pub(super) fn counts(ctx: &Ctx, library: &str) -> bool {
    let prefix = match library {
        "ucx" => "UCX_",
        "nvshmem" => "NVSHMEM_",
        _ => return true,
    };
    let Some(l) = ctx.f.libraries.as_ref() else {
        return false;
    };
    l.installed.iter().any(|i| i.library == library)
        || l.settings.keys().any(|k| k.starts_with(prefix))
        || (library == "nvshmem" && ctx.options.workload == Some(Workload::Gin))
}

/// The line for a node without a GPU-NIC pair: UCX and NVSHMEM have no RDMA transport for GPU
/// memory, libfabric's EFA provider no device; with the releases found.
pub(super) fn without_pairs(ctx: &Ctx) -> String {
    let l = ctx.f.libraries.as_ref();
    let named = |library: &str, name: &str| match release(l, library) {
        Some(v) => format!("{name} {v}"),
        None => name.to_owned(),
    };
    format!(
        "; {} and {}: no RDMA NIC beside a GPU, so GPU memory between nodes goes over TCP or a CPU path, staged; {}: no EFA device",
        named("ucx", "UCX"),
        named("nvshmem", "NVSHMEM"),
        named("libfabric", "libfabric")
    )
}
