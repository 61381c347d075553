//! A replay of what the consumers would decide: NCCL per version range, its environment and
//! distance rule, UCX, and the DMA-BUF path that needs no peer-memory module.

use crate::nccl::{self, NcclEnv, PeerMemoryVerdict, Source};
use crate::topo::{self, Topology};
use crate::verbs::{DmabufProbe, Verbs};

use super::{Check, DmabufFacts};

/// "A exists" / "A and B exist".
fn exist(paths: &[String]) -> String {
    match paths {
        [one] => format!("{one} exists"),
        many => format!("{} exist", many.join(" and ")),
    }
}

/// "A does not exist" / "none of A, B exists".
fn none_exist(paths: &[String]) -> String {
    match paths {
        [one] => format!("{one} does not exist"),
        many => format!("none of {} exists", many.join(", ")),
    }
}

fn source(s: &Source) -> String {
    match s {
        Source::Default => "default".to_owned(),
        Source::Environment(v) => format!("set to {v:?}"),
        Source::Ignored(v) => format!("{v:?} not understood by NCCL: default used"),
    }
}

pub(super) fn check_nccl_env(e: &NcclEnv) -> Check {
    let read = match e.gdr_read {
        None => "on for compute capability >= 8.0 or NVLink".to_owned(),
        Some(true) => "on".to_owned(),
        Some(false) => "off".to_owned(),
    };
    let detail = format!(
        "NCCL_IB_DISABLE={} ({}), NCCL_NET_GDR_LEVEL={} ({}), NCCL_NET_GDR_READ {read} ({}), NCCL_DMABUF_ENABLE={} ({})",
        u8::from(e.ib_disable),
        source(&e.ib_disable_source),
        e.gdr_level,
        source(&e.gdr_level_source),
        source(&e.gdr_read_source),
        u8::from(e.dmabuf_enable),
        source(&e.dmabuf_enable_source),
    );
    if e.ib_disable {
        return Check::warn(
            "nccl_env",
            format!(
                "{detail}: NCCL will not use the IB transport at all (sockets, no GPUDirect RDMA)"
            ),
            "unset NCCL_IB_DISABLE",
        );
    }
    if e.gdr_level == topo::NcclPathType::Loc {
        return Check::warn(
            "nccl_env",
            format!("{detail}: LOC disables GPUDirect RDMA"),
            "unset NCCL_NET_GDR_LEVEL (default PXB) or set it to the class `nvpeer topo` shows",
        );
    }
    let ignored = [
        ("NCCL_IB_DISABLE", &e.ib_disable_source),
        ("NCCL_NET_GDR_LEVEL", &e.gdr_level_source),
        ("NCCL_NET_GDR_READ", &e.gdr_read_source),
        ("NCCL_DMABUF_ENABLE", &e.dmabuf_enable_source),
    ];
    if let Some((name, _)) = ignored
        .iter()
        .find(|(_, s)| matches!(s, Source::Ignored(_)))
    {
        return Check::warn(
            "nccl_env",
            detail,
            format!("{name} has a value NCCL cannot parse: use a number, or for NCCL_NET_GDR_LEVEL one of LOC PIX PXB PHB SYS (upper case)"),
        );
    }
    Check::ok("nccl_env", detail)
}

pub(super) fn check_nccl_range(
    rule: &nccl::Rule,
    v: &PeerMemoryVerdict,
    dmabuf: &DmabufFacts,
) -> Check {
    if v.peer_memory {
        return Check::ok(
            rule.id,
            format!(
                "{} would enable GPUDirect RDMA through peer memory: {}",
                rule.name,
                exist(&v.found)
            ),
        );
    }
    let newest = rule.id == nccl::NCCL_RULES[nccl::NCCL_RULES.len() - 1].id;
    let dmabuf_note = if dmabuf.possible() {
        "; DMA-BUF could still give it GPUDirect RDMA (CUDA >= 11.7)"
    } else {
        ""
    };
    let detail = format!(
        "{} would not use peer memory: {}{dmabuf_note}",
        rule.name,
        none_exist(&v.looked_for)
    );
    if newest && !dmabuf.possible() {
        Check::fail(
            rule.id,
            detail,
            "load the peer-memory module under the name nvidia_peermem (the default build), or set up DMA-BUF (see `dmabuf`)",
        )
    } else {
        Check::warn(
            rule.id,
            detail,
            "use NCCL >= 2.23.4 with the module named nvidia_peermem; older NCCL needs /sys/kernel/mm/memory_peers (MOFED < 24.04, or a kernel that exports mm_kobj)",
        )
    }
}

pub(super) fn check_nccl_gdr(e: &NcclEnv, topology: Option<&Topology>) -> Check {
    let Some(t) = topology.filter(|t| !t.links.is_empty()) else {
        return Check::ok(
            "nccl_gdr",
            "no GPU-NIC pair on PCI: NCCL's distance rule has nothing to judge",
        );
    };
    let level = format!(
        "NCCL_NET_GDR_LEVEL={} ({})",
        e.gdr_level,
        if e.gdr_level_source == Source::Default {
            "default"
        } else {
            "environment"
        }
    );
    let mut yes = Vec::new();
    let mut no = Vec::new();
    for link in &t.links {
        let entry = format!("{}-{} {}", link.gpu, link.nic, link.nccl_class);
        if nccl::within_gdr_level(link.nccl_class, e.gdr_level) {
            yes.push(entry);
        } else {
            no.push(entry);
        }
    }
    let gpus_with_gdr = t
        .gpus
        .iter()
        .filter(|g| {
            t.links
                .iter()
                .any(|l| l.gpu == g.label && nccl::within_gdr_level(l.nccl_class, e.gdr_level))
        })
        .count();
    let detail = format!(
        "with {level}: GPUDirect RDMA for {}; not for {}",
        if yes.is_empty() {
            "no pair".to_owned()
        } else {
            yes.join(", ")
        },
        if no.is_empty() {
            "none".to_owned()
        } else {
            no.join(", ")
        }
    );
    if e.ib_disable {
        Check::warn(
            "nccl_gdr",
            format!("{detail}; but NCCL_IB_DISABLE is set"),
            "unset NCCL_IB_DISABLE",
        )
    } else if gpus_with_gdr < t.gpus.len() {
        Check::warn(
            "nccl_gdr",
            detail,
            "NCCL stages through host memory for the GPUs listed as 'not for': place GPU and NIC under one PCIe switch, or raise NCCL_NET_GDR_LEVEL (e.g. PHB) if the lower bandwidth is acceptable",
        )
    } else {
        Check::ok("nccl_gdr", detail)
    }
}

pub(super) fn check_ucx(
    v: &PeerMemoryVerdict,
    switch: Option<bool>,
    dmabuf: &DmabufFacts,
) -> Check {
    if switch == Some(false) {
        return Check::warn(
            "ucx",
            "UCX_IB_GPU_DIRECT_RDMA=no: UCX will not use GPUDirect RDMA",
            "unset UCX_IB_GPU_DIRECT_RDMA (default: try)",
        );
    }
    if v.peer_memory {
        return Check::ok(
            "ucx",
            format!(
                "UCX would enable GPUDirect RDMA through peer memory: {}",
                exist(&v.found)
            ),
        );
    }
    let detail = format!(
        "UCX would not use peer memory: {}",
        none_exist(&v.looked_for)
    );
    if dmabuf.possible() {
        Check::warn(
            "ucx",
            format!("{detail}; it can still use DMA-BUF"),
            "load the peer-memory module",
        )
    } else {
        Check::fail(
            "ucx",
            detail,
            "load the peer-memory module (see `module`); UCX says \"Please make sure nv_peer_mem or amdgpu plugin installed correctly, or dmabuf is supported\"",
        )
    }
}

pub(super) fn check_dmabuf(d: &DmabufFacts, verbs: &Verbs, peer_memory_works: bool) -> Check {
    let known = |v: Option<bool>, yes: &str, no: &str| match v {
        Some(true) => yes.to_owned(),
        Some(false) => no.to_owned(),
        None => "unknown".to_owned(),
    };
    let nics = match verbs {
        Verbs::Probed { .. } if d.nics.is_empty() => "no verbs device to probe".to_owned(),
        Verbs::Probed { .. } => d
            .nics
            .iter()
            .map(|(name, p)| match p {
                DmabufProbe::Supported { .. } => format!("{name} supports it"),
                DmabufProbe::Unsupported { errno } => {
                    format!("{name} does not ({})", errno_name(*errno))
                }
                DmabufProbe::NotRun { reason } => format!("{name} not probed ({reason})"),
            })
            .collect::<Vec<_>>()
            .join(", "),
        Verbs::Skipped { reason } | Verbs::Unavailable { reason } => {
            format!("NIC side not probed ({reason})")
        }
    };
    let detail = format!(
        "kernel ib_umem_dmabuf_get: {}; GPU driver: {}; NIC probe (NCCL's ibv_reg_dmabuf_mr(fd=-1)): {nics}; NCCL_DMABUF_ENABLE={}; CUDA >= 11.7 not checked",
        known(d.kernel, "exported", "absent (ib_core not loaded, kernel < 5.12, or no DMA_SHARED_BUFFER)"),
        known(d.gpu_open_kernel_module, "open kernel modules", "proprietary kernel modules (no DMA-BUF export)"),
        u8::from(d.nccl_dmabuf_enable)
    );
    if d.possible() || peer_memory_works {
        Check::ok("dmabuf", detail)
    } else {
        Check::warn(
            "dmabuf",
            format!("{detail}: neither DMA-BUF nor peer memory is available"),
            "use the peer-memory module, or for DMA-BUF: kernel >= 5.12, NVIDIA open kernel modules, a NIC driver with dma-buf MRs (mlx5), rdma-core >= 34, CUDA >= 11.7",
        )
    }
}

/// The errnos the DMA-BUF probe meets, by name.
fn errno_name(errno: i32) -> String {
    match errno {
        95 => "EOPNOTSUPP".to_owned(),
        93 => "EPROTONOSUPPORT".to_owned(),
        9 => "EBADF".to_owned(),
        n => format!("errno {n}"),
    }
}
