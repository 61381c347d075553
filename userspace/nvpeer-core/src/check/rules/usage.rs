// SPDX-License-Identifier: MIT OR Apache-2.0
//! Ready means used: whether NCCL will move data over each carried GPU-NIC pair with GPUDirect
//! RDMA. A pair whose NIC has no ACTIVE port, or that NCCL's distance rule
//! (`NCCL_NET_GDR_LEVEL`, with the environment) excludes, is not used; a PCIe link below its
//! width (or a NIC below its speed) degrades it. The `gdr_used` row names each such pair.

use super::super::{Check, PairFacts, Status};
use super::predicates::{self, not_used};
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
    // The links between switches and root ports: below what both ends can, the link trained
    // down (a switch does not idle its upstream link down as a GPU does).
    for l in p.path_links.iter().filter(|l| l.degraded()) {
        out.push((
            format!("link {} - {} {}", l.port, l.device, l.link.describe()),
            true,
        ));
    }
    out
}

/// The degraded links of pair `p` worth a warning (fewer lanes or a lower speed than the
/// devices can, a GPU's idle speed aside), each named: the pair is not ready at full
/// bandwidth, and the verdict says which.
pub(super) fn degraded_links(ctx: &Ctx, p: &PairFacts) -> Vec<String> {
    degraded(p, gpu_address(ctx, p))
        .into_iter()
        .filter(|(_, warn)| *warn)
        .map(|(what, _)| what)
        .collect()
}

/// `GPU0 0000:03:00.0`.
fn gpu_address(ctx: &Ctx, p: &PairFacts) -> Option<String> {
    ctx.f
        .gpus
        .iter()
        .find(|g| g.label == p.gpu)
        .map(|g| format!("{} {}", g.label, g.address))
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
        if let Some(row) = predicates::unknown_pair_row(
            ctx.f,
            "gdr_used",
            "whether NCCL uses GPUDirect RDMA on a GPU-NIC pair",
        ) {
            return row;
        }
        return Check::not_applicable(
            "gdr_used",
            "no pair has a GPUDirect RDMA path (see `paths`)",
        );
    }
    let mut unused = Vec::new();
    let mut unknown = Vec::new();
    let mut slow = Vec::new();
    let mut used = Vec::new();
    // Links on a carried pair's path whose files could not be read: whether the pair runs at
    // full bandwidth is unknown (never taken for a link at its best).
    let mut links_unknown = Vec::new();
    for (v, p) in &carried {
        match &v.not_used {
            Some(why) => unused.push(format!("{}: {why}", v.name())),
            None => match not_used(ctx, p) {
                Err(why) => unknown.push(format!("{}: {why}", v.name())),
                Ok(_) => used.push(v.name()),
            },
        }
        for (what, warn) in degraded(p, gpu_address(ctx, p)) {
            slow.push((format!("{}: {what}", v.name()), warn));
        }
        for what in &p.unknown_links {
            links_unknown.push(format!("{}: {what}", v.name()));
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
    if !links_unknown.is_empty() {
        detail.push_str(&format!(
            "; link width and speed unknown for {}",
            links_unknown.join("; ")
        ));
    }
    if !unused.is_empty() {
        // One cause, one fix: the first unused pair's.
        let first = carried.iter().find(|(v, _)| v.not_used.is_some());
        let port_down = first
            .and_then(|(v, _)| v.not_used.as_deref())
            .is_some_and(|why| !why.starts_with("NCCL's distance rule"));
        let nic = first.and_then(|(v, _)| ctx.f.rdma_devices.iter().find(|d| d.name == v.nic));
        let fix = match (port_down, nic, first) {
            (true, Some(dev), _) => super::port_up_fix(dev),
            (false, _, Some((v, p))) => format!(
                "place {} and {} under one PCIe switch, or set NCCL_NET_GDR_LEVEL={} in the jobs' environment if the CPU's bandwidth between them is acceptable",
                v.gpu, v.nic, p.nccl_class.label()
            ),
            _ => "bring the NIC's port up (`ibstat` shows its state)".to_owned(),
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
    // A link known to be degraded is worth acting on whatever the unknown ones are; with none,
    // an unknown link decides whether the pair is degraded, so the row (and the verdict) is
    // unknown, naming the file.
    if !links_unknown.is_empty() && !slow.iter().any(|(_, warn)| *warn) {
        return Check::new(
            "gdr_used",
            Status::Unknown,
            detail,
            Some("the PCIe link files should be the kernel's text; check the tree (or report it as a bug); `lspci -vv` shows LnkSta against LnkCap".to_owned()),
        );
    }
    if slow.iter().any(|(_, warn)| *warn) {
        // The functions whose links trained down, by address: the fix names them.
        let mut at: Vec<String> = Vec::new();
        for (_, p) in &carried {
            let gpu = ctx.f.gpus.iter().find(|g| g.label == p.gpu);
            let nic = ctx
                .f
                .rdma_devices
                .iter()
                .find(|d| d.name == p.nic)
                .and_then(|d| d.pci.as_ref());
            let ends = [
                gpu.filter(|_| p.gpu_link.is_some_and(|l| l.narrow()))
                    .map(|g| g.address.to_string()),
                nic.filter(|_| p.nic_link.is_some_and(|l| l.narrow() || l.slow()))
                    .map(|n| n.address.to_string()),
            ];
            let links = p
                .path_links
                .iter()
                .filter(|l| l.degraded())
                .map(|l| l.device.to_string());
            for a in ends.into_iter().flatten().chain(links) {
                if !at.contains(&a) {
                    at.push(a);
                }
            }
        }
        let first = at.first().cloned().unwrap_or_default();
        return Check::warn(
            "gdr_used",
            detail,
            format!(
                "reseat the card, riser or cable at {} and compare LnkSta with LnkCap in `lspci -vv -s {first}`; check the BIOS's PCIe link settings: a link below its width or speed divides GPUDirect RDMA bandwidth",
                at.join(", ")
            ),
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
