// SPDX-License-Identifier: MIT OR Apache-2.0
//! Ready means used: whether NCCL will move data over each carried GPU-NIC pair with GPUDirect
//! RDMA. A pair whose NIC has no ACTIVE port, or that NCCL's distance rule
//! (`NCCL_NET_GDR_LEVEL`, with the environment) excludes, is not used; a PCIe link below its
//! width (or a NIC below its speed) degrades it. The `gdr_used` row names each such pair.

use super::super::{Check, PairFacts, Status};
use super::predicates::not_used;
use super::{Ctx, PairVerdict};

/// A link of pair `p` that runs below what its devices can: (what, worth a warning). Fewer
/// lanes, or a NIC below its speed, warn; a GPU below its speed is said only (GPUs train the
/// link down while idle to save power).
fn degraded(p: &PairFacts, gpu_address: Option<String>) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    let gpu = gpu_address.unwrap_or_else(|| p.gpu.clone());
    if let Some(l) = p.gpu_link {
        if l.narrow() {
            out.push((format!("{} link {}", gpu, l.describe()), true));
        } else if l.slow() {
            out.push((
                format!(
                    "{} link {} (a GPU trains its link down while idle: check it under load)",
                    gpu,
                    l.describe()
                ),
                false,
            ));
        }
    }
    if let Some(l) = p.nic_link.filter(|l| l.narrow() || l.slow()) {
        out.push((format!("{} link {}", p.nic, l.describe()), true));
    }
    out
}

/// The `gdr_used` row: fails for a carried pair that will not be used, warns for one whose
/// link is degraded, unknown where a port's state could not be read.
pub(super) fn row(ctx: &Ctx, pairs: &[PairVerdict]) -> Check {
    let facts_of = |v: &PairVerdict| {
        ctx.f
            .pairs
            .iter()
            .find(|p| p.gpu == v.gpu && p.nic == v.nic)
    };
    let carried: Vec<(&PairVerdict, &PairFacts)> = pairs
        .iter()
        .filter(|v| !v.paths.is_empty())
        .filter_map(|v| Some((v, facts_of(v)?)))
        .collect();
    if carried.is_empty() {
        return Check::not_applicable(
            "gdr_used",
            "no pair has a GPUDirect RDMA path (see `paths`)",
        );
    }
    let mut unused = Vec::new();
    let mut unknown = Vec::new();
    let mut slow = Vec::new();
    let mut used = Vec::new();
    for (v, p) in &carried {
        match &v.not_used {
            Some(why) => unused.push(format!("{}: {why}", v.name())),
            None => match not_used(ctx, p) {
                Err(why) => unknown.push(format!("{}: {why}", v.name())),
                Ok(_) => used.push(v.name()),
            },
        }
        let address = ctx
            .f
            .gpus
            .iter()
            .find(|g| g.label == p.gpu)
            .map(|g| format!("{} {}", g.label, g.address));
        for (what, warn) in degraded(p, address) {
            slow.push((format!("{}: {what}", v.name()), warn));
        }
    }
    let mut detail = if used.is_empty() {
        "NCCL uses GPUDirect RDMA on no pair".to_owned()
    } else {
        format!("NCCL uses GPUDirect RDMA on {}", used.join(", "))
    };
    for (label, list) in [("not on", &unused), ("unknown for", &unknown)] {
        if !list.is_empty() {
            detail.push_str(&format!("; {label} {}", list.join("; ")));
        }
    }
    if !slow.is_empty() {
        let list: Vec<&str> = slow.iter().map(|(s, _)| s.as_str()).collect();
        detail.push_str(&format!("; below the device's link: {}", list.join("; ")));
    }
    if !unused.is_empty() {
        // One cause, one fix: the first unused pair's.
        let port = carried
            .iter()
            .find_map(|(v, _)| v.not_used.as_deref())
            .is_some_and(|why| !why.starts_with("NCCL's distance rule"));
        let fix = if port {
            "bring the NIC's port up: cable and switch port, a subnet manager for InfiniBand (`ibstat` shows the state), the netdev for RoCE (`ip link set <dev> up`)"
        } else {
            "place GPU and NIC under one PCIe switch, or set NCCL_NET_GDR_LEVEL in the jobs' environment to the pair's class (e.g. PHB) if the CPU's bandwidth between them is acceptable"
        };
        return Check::fail("gdr_used", detail, fix);
    }
    if !unknown.is_empty() {
        return Check::new(
            "gdr_used",
            Status::Unknown,
            detail,
            Some("the port's state file should be the kernel's text; check the tree (or report it as a bug)".to_owned()),
        );
    }
    if slow.iter().any(|(_, warn)| *warn) {
        return Check::warn(
            "gdr_used",
            detail,
            "reseat the card or its riser/cable and check `lspci -vv` (LnkSta against LnkCap) and the BIOS's PCIe settings: a link below its width or speed divides GPUDirect RDMA bandwidth",
        );
    }
    if !slow.is_empty() {
        return Check::info(
            "gdr_used",
            detail,
            "`nvidia-smi -q -d PCIE` under load shows the GPU's link at its top speed unless it is degraded",
        );
    }
    Check::ok("gdr_used", detail)
}
