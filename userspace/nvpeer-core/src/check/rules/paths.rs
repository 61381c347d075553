// SPDX-License-Identifier: MIT OR Apache-2.0
//! Each GPU-NIC pair put together from its paths' results (`paths`, `preferred`, `mapping`,
//! `why_not`), the `paths` row that lists them, and [`settle`]: the rows of a path that no pair
//! needs say "not needed" instead of failing.

use std::collections::BTreeMap;

use super::super::{Check, Facts, PairFacts, Require, Status};
use super::{predicates, Ctx, GdrPath, PairVerdict, PathResult};

/// A pair is carried under `require` by these of its paths.
pub(crate) fn carried(paths: &[GdrPath], require: Require) -> bool {
    match require {
        Require::Any => !paths.is_empty(),
        Require::Dmabuf => paths.contains(&GdrPath::Dmabuf),
        Require::Peermem => paths.contains(&GdrPath::PeerMemory) || paths.contains(&GdrPath::Efa),
    }
}

/// Why a pair is not carried under `require`, as the verdict and `--brief` say it:
/// `GPU0-mlx5_0 has no path`, or under a policy `GPU0-mlx5_0 has no dmabuf path`.
pub(crate) fn uncarried(p: &PairVerdict, require: Require) -> String {
    if p.paths.is_empty() {
        format!("{} has no path", p.name())
    } else {
        format!("{} has no {} path", p.name(), require.label())
    }
}

/// One pair from each path's result (`None`: the path does not apply to this NIC).
pub(super) fn pair(
    ctx: &Ctx,
    p: &PairFacts,
    results: [(GdrPath, Option<PathResult>); 3],
) -> PairVerdict {
    let mut paths = Vec::new();
    let mut why_not = BTreeMap::new();
    let mut not_probed = Vec::new();
    let mut notes = Vec::new();
    let mut mappings = BTreeMap::new();
    for (path, result) in results {
        let Some(r) = result else { continue };
        match r.works {
            Ok(()) => {
                paths.push(path);
                if let Some(m) = r.mapping {
                    mappings.insert(path, m);
                }
                for n in r.not_probed {
                    if !not_probed.contains(&n) {
                        not_probed.push(n);
                    }
                }
            }
            Err(w) => {
                why_not.insert(path, w);
            }
        }
        notes.extend(r.notes);
    }
    // What NCCL uses, and UCX where it differs.
    let preferred = nccl_uses(ctx.f, &paths);
    let ucx = ucx_uses(ctx.f, &paths);
    if ucx != preferred {
        notes.push(match ucx {
            Some(g) => format!("UCX uses {} here", g.describe()),
            None => "UCX uses no GPUDirect RDMA path here (UCX_IB_GPU_DIRECT_RDMA=no, or UCX_CUDA_COPY_DMABUF=no without peer memory)".to_owned(),
        });
    }
    let mapping = preferred.and_then(|g| mappings.get(&g).copied());
    if p.coherent {
        notes.push(predicates::C2C_NOTE.to_owned());
        if paths.contains(&GdrPath::Dmabuf) {
            notes.extend(predicates::mapping_note(
                ctx,
                p,
                mappings.get(&GdrPath::Dmabuf).copied(),
            ));
        }
    }
    let not_used = if paths.is_empty() {
        None
    } else {
        predicates::not_used(ctx, p).ok().flatten()
    };
    let degraded = if paths.is_empty() || not_used.is_some() {
        Vec::new()
    } else {
        super::usage::degraded_links(ctx, p)
    };
    let gpu_address = ctx
        .f
        .gpus
        .iter()
        .find(|g| g.label == p.gpu)
        .map(|g| g.address);
    let gpu_uuid = ctx
        .f
        .nvidia_proc
        .iter()
        .flat_map(|n| &n.gpus)
        .find(|i| i.bus_location.is_some() && i.bus_location == gpu_address)
        .and_then(|i| i.uuid.clone());
    let nic_bus_id = ctx
        .f
        .rdma_devices
        .iter()
        .find(|d| d.name == p.nic)
        .and_then(|d| d.pci.as_ref())
        .map(|pci| pci.address.to_string());
    PairVerdict {
        gpu: p.gpu.clone(),
        nic: p.nic.clone(),
        gpu_bus_id: gpu_address.map(|a| a.to_string()),
        gpu_uuid,
        nic_bus_id,
        class: p.class,
        paths,
        preferred,
        mapping,
        why_not,
        not_probed,
        notes,
        not_used,
        degraded,
        modes: Vec::new(),
    }
}

/// The path NCCL registers GPU memory through, of those that work: dma-buf first unless
/// `NCCL_DMABUF_ENABLE=0` (then none where dma-buf is all there is), then peer memory, then EFA.
fn nccl_uses(f: &Facts, paths: &[GdrPath]) -> Option<GdrPath> {
    [GdrPath::Dmabuf, GdrPath::PeerMemory, GdrPath::Efa]
        .into_iter()
        .filter(|g| paths.contains(g))
        .find(|g| *g != GdrPath::Dmabuf || f.nccl_env.dmabuf_enable)
}

/// The path UCX registers GPU memory through: dma-buf first unless `UCX_CUDA_COPY_DMABUF=no`,
/// then peer memory; none with `UCX_IB_GPU_DIRECT_RDMA=no`.
fn ucx_uses(f: &Facts, paths: &[GdrPath]) -> Option<GdrPath> {
    if f.ucx_gpu_direct_rdma == Some(false) {
        return None;
    }
    [GdrPath::Dmabuf, GdrPath::PeerMemory]
        .into_iter()
        .filter(|g| paths.contains(g))
        .find(|g| *g != GdrPath::Dmabuf || f.ucx_cuda_copy_dmabuf != Some(false))
}

fn describe(p: &PairVerdict) -> String {
    let mut s = format!("{} {}: ", p.name(), p.class);
    if p.paths.is_empty() {
        s.push_str("no path");
    } else {
        s.push_str(
            &p.paths
                .iter()
                .map(|g| g.describe())
                .collect::<Vec<_>>()
                .join(" + "),
        );
        if let Some(pref) = p.preferred.filter(|_| p.paths.len() > 1) {
            s.push_str(&format!(", NCCL/UCX use {}", pref.describe()));
        }
        if let Some(m) = p.mapping {
            s.push_str(&format!(" ({})", m.describe()));
        }
    }
    for (g, w) in &p.why_not {
        s.push_str(&format!("; not {}: {}", g.describe(), w.reason));
    }
    for n in &p.notes {
        s.push_str(&format!("; {n}"));
    }
    s
}

/// The `paths` row: every pair with its paths and why not; fails when a pair is not carried
/// under the policy, or when there is no pair at all.
pub(super) fn row(ctx: &Ctx, pairs: &[PairVerdict]) -> Check {
    let require = ctx.options.require;
    if pairs.is_empty() {
        let why = match (ctx.f.gpus.is_empty(), ctx.f.topology.as_ref()) {
            (true, _) => "no NVIDIA GPU on the PCI bus",
            (false, Some(t)) if t.nics.iter().all(|n| n.pci.is_none()) => {
                "no RDMA NIC with a PCI function (software devices such as rxe carry no GPUDirect RDMA)"
            }
            _ => "no GPU has a NIC `topo` can place",
        };
        // A device that could not be read may be the NIC of a pair: unknown, not "no pair".
        if let Some(unknown) = predicates::pair_unknown(ctx.f) {
            return Check::new(
                "paths",
                Status::Unknown,
                format!("no GPU-NIC pair known: {unknown}; of the rest: {why}"),
                Some("see `rdma_devices`".to_owned()),
            );
        }
        return Check::fail(
            "paths",
            format!("no GPU-NIC pair: {why}"),
            "see `gpus` and `rdma_devices`",
        );
    }
    let mut detail = pairs.iter().map(describe).collect::<Vec<_>>().join(" | ");
    let not_probed: Vec<&String> = pairs.iter().flat_map(|p| &p.not_probed).collect();
    if let Some(n) = not_probed.first() {
        detail.push_str(&format!(" | not probed, assumed good: {n}"));
    }
    let Some(first) = pairs.iter().find(|p| !carried(&p.paths, require)) else {
        return Check::ok("paths", detail);
    };
    let wanted = match require {
        Require::Any => None,
        Require::Dmabuf => Some(GdrPath::Dmabuf),
        Require::Peermem => Some(GdrPath::PeerMemory),
    };
    let fix = wanted
        .and_then(|g| first.why_not.get(&g))
        .or_else(|| first.why_not.values().next())
        .map(|w| w.fix.clone())
        .unwrap_or_else(|| format!("--require {} is not met", require.label()));
    // Facts of an older nvpeer (no `reg_dmabuf_mr_versioned`): where dma-buf, which the policy
    // accepts, is missing from every uncarried pair only for the verb's unrecorded symbol
    // version, whether the pairs are carried is unknown, not a failure (as the verdict says).
    let unrecorded_only = require != Require::Peermem
        && pairs
            .iter()
            .filter(|p| !carried(&p.paths, require))
            .all(|p| {
                p.why_not
                    .get(&GdrPath::Dmabuf)
                    .is_some_and(super::dmabuf::version_unrecorded)
            });
    if unrecorded_only {
        return Check::new("paths", Status::Unknown, detail, Some(fix));
    }
    Check::fail("paths", detail, fix)
}

/// No pair, because an RDMA device could not be read ([`predicates::unread_nics`]): where
/// dma-buf works on this host (its row ok) and the policy does not demand peer memory, a
/// peer-memory row's failure decides nothing unless dma-buf does not carry that device's pair,
/// which is unknown: the row is unknown, not failing (`fold` folds it under `rdma_devices`).
fn settle_unread(rows: &mut [Check], require: Require, f: &Facts) {
    let unread = predicates::unread_nics(f);
    let dmabuf_ok = rows
        .iter()
        .any(|r| r.id == "dmabuf" && r.status == Status::Ok);
    if unread.is_empty() || !dmabuf_ok || require == Require::Peermem {
        return;
    }
    for row in rows
        .iter_mut()
        .filter(|r| predicates::is_peer_memory_row(r.id) && r.applies && r.status == Status::Fail)
    {
        row.status = Status::Unknown;
        row.detail = format!(
            "{}{} (not readable; dma-buf works on this host): {}",
            predicates::NEEDED_IF_UNREAD,
            unread.join(", "),
            row.detail
        );
    }
}

/// Rows of a path that another path makes unneeded: when dma-buf or EFA carries every pair
/// (and the policy does not demand peer memory), the peer-memory rows stop failing ("not
/// needed"; with a peer-memory module loaded its problems stay warnings); when peer memory or
/// EFA carries every pair, so does the `dmabuf` row. A consumer's own rows count dma-buf only
/// where that consumer uses it: the NCCL rows not under `NCCL_DMABUF_ENABLE=0` (NCCL then needs
/// peer memory, and its rows say so), the `ucx` row not under `UCX_CUDA_COPY_DMABUF=no` or
/// `UCX_IB_GPU_DIRECT_RDMA=no`.
pub fn settle(rows: &mut [Check], pairs: &[PairVerdict], require: Require, f: &Facts) {
    if pairs.is_empty() {
        settle_unread(rows, require, f);
        return;
    }
    let module_loaded = !f.modules.is_empty();
    let all = |g: &[GdrPath]| pairs.iter().all(|p| g.iter().any(|g| p.paths.contains(g)));
    let every = |g: GdrPath| pairs.iter().all(|p| p.paths.contains(&g));
    let carriers = |g: &[GdrPath]| -> &'static str {
        match (
            g.contains(&GdrPath::Efa) && every(GdrPath::Efa),
            every(GdrPath::Dmabuf),
        ) {
            (true, _) => "EFA ready",
            (false, true) => "dma-buf ready",
            (false, false) => "dma-buf and EFA ready",
        }
    };
    if require != Require::Peermem {
        let nccl_dmabuf = f.nccl_env.dmabuf_enable;
        let ucx_dmabuf =
            f.ucx_cuda_copy_dmabuf != Some(false) && f.ucx_gpu_direct_rdma != Some(false);
        for row in rows
            .iter_mut()
            .filter(|r| predicates::is_peer_memory_row(r.id))
        {
            let consumer_dmabuf = if predicates::is_nccl_row(row.id) {
                nccl_dmabuf
            } else if row.id == "ucx" {
                ucx_dmabuf
            } else {
                true
            };
            let by: &[GdrPath] = if consumer_dmabuf {
                &[GdrPath::Dmabuf, GdrPath::Efa]
            } else {
                &[GdrPath::Efa]
            };
            if !all(by) {
                if !consumer_dmabuf && all(&[GdrPath::Dmabuf]) && row.status != Status::Ok {
                    let (var, default) = if row.id == "ucx" {
                        (
                            "UCX_CUDA_COPY_DMABUF=no or UCX_IB_GPU_DIRECT_RDMA=no",
                            "unset them",
                        )
                    } else {
                        ("NCCL_DMABUF_ENABLE=0", "unset NCCL_DMABUF_ENABLE")
                    };
                    row.detail = format!(
                        "{var} keeps it off dma-buf, which carries every pair, so it needs peer memory: {}",
                        row.detail
                    );
                    row.fix = Some(format!(
                        "{default} (dma-buf is used by default), or: {}",
                        row.fix.as_deref().unwrap_or("load a peer-memory module")
                    ));
                }
                continue;
            }
            let by = carriers(by);
            match (row.status, module_loaded) {
                // What could not be read stays said, needed or not.
                (Status::Unknown, _) => {}
                // Peer memory is not needed and no module is loaded: nothing applies.
                (_, false) => {
                    row.detail = format!("not needed: {by}; {}", row.detail);
                    *row = row.clone().hidden();
                }
                (Status::Fail, true) => {
                    row.status = Status::Warn;
                    row.detail = format!("{by}, so not blocking: {}", row.detail);
                }
                _ => {}
            }
        }
    }
    if require != Require::Dmabuf && all(&[GdrPath::PeerMemory, GdrPath::Efa]) {
        let by = match (every(GdrPath::Efa), every(GdrPath::PeerMemory)) {
            (true, _) => "EFA ready",
            (false, true) => "peer memory ready",
            (false, false) => "peer memory and EFA ready",
        };
        for row in rows.iter_mut().filter(|r| r.id == "dmabuf") {
            if !matches!(row.status, Status::Ok | Status::Unknown) {
                row.detail = format!("not needed: {by}; {}", row.detail);
                *row = row.clone().hidden();
            }
        }
    }
}
