// SPDX-License-Identifier: MIT OR Apache-2.0
//! A replay of what the consumers would decide: NCCL per version range (whether it detects a
//! peer-memory client), its environment and its distance rule per pair (`NCCL_NET_GDR_LEVEL`,
//! and on C2C platforms `NCCL_NET_GDR_C2C`), and UCX.

use crate::check::nccl::{self, NcclEnv, PeerMemoryVerdict, Source};
use crate::host::topo;

use super::super::{Check, PairFacts};
use super::predicates::{self, nccl_gdr_of, source};
use super::Ctx;

/// `nccl_env`, the NCCL version ranges, `nccl_gdr`, `ucx`.
pub(super) fn rows(ctx: &Ctx) -> Vec<Check> {
    let f = ctx.f;
    let mut rows = vec![check_nccl_env(&f.nccl_env)];
    let ranges: Option<Vec<(&nccl::Rule, &PeerMemoryVerdict)>> = nccl::NCCL_RULES
        .iter()
        .map(|rule| {
            f.nccl
                .iter()
                .find(|v| v.consumer == rule.id)
                .map(|v| (rule, v))
        })
        .collect();
    rows.push(match ranges {
        Some(ranges) => check_nccl_versions(&ranges),
        None => Check::not_examined("nccl", "the facts have no verdict for every NCCL release"),
    });
    rows.push(
        predicates::unknown_pair_row(f, "nccl_gdr", "NCCL's distance rule on a GPU-NIC pair")
            .unwrap_or_else(|| check_nccl_gdr(&f.nccl_env, &f.pairs)),
    );
    rows.push(check_ucx(&f.ucx, f.ucx_gpu_direct_rdma));
    rows
}

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

fn check_nccl_env(e: &NcclEnv) -> Check {
    let read = match e.gdr_read {
        None => "on for compute capability >= 8.0 or NVLink".to_owned(),
        Some(true) => "on".to_owned(),
        Some(false) => "off".to_owned(),
    };
    let detail = format!(
        "NCCL_IB_DISABLE={} ({}), NCCL_NET_GDR_LEVEL={} ({}), NCCL_NET_GDR_READ {read} ({}), NCCL_DMABUF_ENABLE={} ({}), NCCL_NET_GDR_C2C={} ({}), NCCL_IB_DATA_DIRECT={} ({})",
        u8::from(e.ib_disable),
        source(&e.ib_disable_source),
        e.gdr_level,
        source(&e.gdr_level_source),
        source(&e.gdr_read_source),
        u8::from(e.dmabuf_enable),
        source(&e.dmabuf_enable_source),
        u8::from(e.gdr_c2c),
        source(&e.gdr_c2c_source),
        u8::from(e.ib_data_direct),
        source(&e.ib_data_direct_source),
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
        ("NCCL_NET_GDR_C2C", &e.gdr_c2c_source),
        ("NCCL_IB_DATA_DIRECT", &e.ib_data_direct_source),
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

/// One row for every NCCL release range (`ranges` oldest first): whether each detects a
/// peer-memory client. The newest range decides: it failing fails the row; older ranges that
/// would not detect it are worth knowing (a job pinned to an old NCCL), nothing to act on here.
fn check_nccl_versions(ranges: &[(&nccl::Rule, &PeerMemoryVerdict)]) -> Check {
    let Some(((newest_rule, newest), older)) = ranges.split_last() else {
        return Check::not_examined("nccl", "no NCCL release range is known");
    };
    if !newest.peer_memory {
        return Check::fail(
            "nccl",
            format!(
                "no NCCL release would use peer memory: {}",
                none_exist(&newest.looked_for)
            ),
            "load the peer-memory module under the name nvidia_peermem (the default build), or set up dma-buf (see `dmabuf`)",
        );
    }
    let found = format!(
        "{} enable GPUDirect RDMA through peer memory ({})",
        newest_rule.name,
        exist(&newest.found)
    );
    let blind: Vec<&str> = older
        .iter()
        .filter(|(_, v)| !v.peer_memory)
        .map(|(r, _)| r.name)
        .collect();
    if blind.is_empty() {
        return Check::ok("nccl", format!("every NCCL release would: {found}"));
    }
    Check::info(
        "nccl",
        format!(
            "{found}; {} would not (they look for /sys/kernel/mm/memory_peers)",
            blind.join(", ")
        ),
        "a job pinned to NCCL 2.22 or older needs /sys/kernel/mm/memory_peers (MOFED < 24.04, or a kernel that exports mm_kobj); NCCL >= 2.23.4 needs nothing more",
    )
}

fn check_nccl_gdr(e: &NcclEnv, pairs: &[PairFacts]) -> Check {
    if pairs.is_empty() {
        return Check::not_applicable(
            "nccl_gdr",
            "no GPU-NIC pair on PCI: NCCL's distance rule has nothing to judge",
        );
    }
    let from = |s: &Source| match s {
        Source::Default => "default".to_owned(),
        Source::File { path, .. } => path.clone(),
        _ => "environment".to_owned(),
    };
    let mut level = format!(
        "NCCL_NET_GDR_LEVEL={} ({})",
        e.gdr_level,
        from(&e.gdr_level_source)
    );
    if pairs.iter().any(|p| p.coherent) {
        level.push_str(&format!(
            ", NCCL_NET_GDR_C2C={} ({}; NCCL 2.27 and later)",
            u8::from(e.gdr_c2c),
            from(&e.gdr_c2c_source)
        ));
    }
    let mut yes = Vec::new();
    let mut no = Vec::new();
    let mut older = Vec::new();
    for p in pairs {
        let entry = format!("{}-{} {}", p.gpu, p.nic, p.nccl_class);
        match nccl_gdr_of(e, p) {
            Ok("") => yes.push(entry),
            Ok(how) => {
                if how.starts_with("C2C") {
                    older.push(format!("{}-{}", p.gpu, p.nic));
                }
                yes.push(format!("{entry} ({how})"));
            }
            Err(why) => no.push(format!("{entry} ({why})")),
        }
    }
    let list = |v: &[String], none: &str| {
        if v.is_empty() {
            none.to_owned()
        } else {
            v.join(", ")
        }
    };
    let mut detail = format!(
        "with {level}: GPUDirect RDMA for {}; not for {}",
        list(&yes, "no pair"),
        list(&no, "none")
    );
    if !older.is_empty() {
        // Before P2C and NCCL_NET_GDR_C2C (2.27) the GPU's C2C link to the CPU and the CPU's
        // PCIe link to the NIC made a PHB path: within any level from PHB up.
        let within = if nccl::within_gdr_level(topo::NcclPathType::Phb, e.gdr_level) {
            format!("which NCCL_NET_GDR_LEVEL={} allows", e.gdr_level)
        } else {
            "GPUDirect RDMA there only with NCCL_NET_GDR_LEVEL=PHB or above".to_owned()
        };
        detail.push_str(&format!(
            "; NCCL 2.26 and older count {} as PHB, {within}",
            older.join(", ")
        ));
    }
    if e.ib_disable {
        Check::warn(
            "nccl_gdr",
            format!("{detail}; but NCCL_IB_DISABLE is set"),
            "unset NCCL_IB_DISABLE",
        )
    } else if !no.is_empty() {
        // One cause, one fix: `gdr_used` fails for these pairs and says what to do.
        Check::info(
            "nccl_gdr",
            detail,
            "NCCL stages through host memory for the pairs listed as 'not for' (see `gdr_used`)",
        )
    } else {
        Check::ok("nccl_gdr", detail)
    }
}

fn check_ucx(v: &PeerMemoryVerdict, switch: Option<bool>) -> Check {
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
    Check::fail(
        "ucx",
        format!(
            "UCX would not use peer memory: {}",
            none_exist(&v.looked_for)
        ),
        "load the peer-memory module (see `module`), or set up dma-buf (UCX registers dma-buf too; see `dmabuf`); UCX says \"Please make sure nv_peer_mem or amdgpu plugin installed correctly, or dmabuf is supported\"",
    )
}
