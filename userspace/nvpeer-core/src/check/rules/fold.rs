// SPDX-License-Identifier: MIT OR Apache-2.0
//! One cause, one row: the rows that only follow from another row's cause are folded under it
//! (`cause` in the JSON; the table lists them on the cause's row instead of as rows of their own,
//! `--brief` does not name them). Only where the dependency is certain:
//!
//! - no `nvidia.ko` (`nvidia_driver` fails, nothing loaded): no GPU memory can be exported or
//!   pinned, so every path, peer-memory and consumer row that is not ok follows from it (a
//!   peer-memory module cannot load without NVIDIA's symbols either);
//! - no peer-memory module (`module` fails with none loaded): the peer-memory clients and the
//!   consumers that look for one (`peer_clients`, `nccl`, `ucx`);
//! - a pair not used (`gdr_used` fails): the `modes` row that says it is staged, and for the port
//!   the `rdma_devices` row that names the same port, for NCCL's distance rule the `topology`
//!   and `nccl_gdr` rows that say the same distance;
//! - no NVIDIA GPU (`gpus` fails), or no RDMA device (`rdma_devices` fails, none listed): no pair
//!   can exist, so `paths` and `gdr_used` follow from it (the first of the two that fails);
//! - no pair formed while an RDMA device could not be read (`rdma_devices` unknown): whether a
//!   pair exists is unknown, so the rows that judge pairs (`paths`, `gdr_used`, `topology`,
//!   `acs`, `nccl_gdr`, `gin_umem` under `--for gin`, `modes`, `silent_failures`: unknown)
//!   follow from it, and so do the peer-memory rows that `settle` made unknown (needed only if
//!   dma-buf does not carry that device's pair);
//! - no path (`paths` fails): the `modes` row that says each pair is staged;
//! - the IOMMU translating where the only silent failure class is `iommu_dmabuf_595` (open
//!   modules 595.84): both rows warn of the same cause, the `iommu` row in general and
//!   `silent_failures` of its worst effect (peer writes dropped without an error), whose fix
//!   is passthrough too, with how to prove it and the other ways out. The `iommu` row is folded
//!   under `silent_failures`, so the table says the cause once, with one fix.
//!
//! A row already folded keeps its first cause; a cause folded under another (`module` under
//! `nvidia_driver`) passes its rows on to that one.

use super::super::{Check, Facts, Status};
use super::predicates::{unread_nics, IOMMU_DMABUF_595, NEEDED_IF_UNREAD, PAIR_ROWS};
use crate::host::kernel::IommuMode;

/// The rows that follow from NVIDIA's driver not being loaded.
const WITHOUT_NVIDIA: [&str; 12] = [
    "paths",
    "gdr_used",
    "dmabuf",
    "efa",
    "module",
    "parameters",
    "peer_clients",
    "nccl",
    "ucx",
    "modes",
    "cdmm",
    "silent_failures",
];

/// The rows that follow from no peer-memory module being loaded.
const WITHOUT_MODULE: [&str; 3] = ["peer_clients", "nccl", "ucx"];

fn with_status(rows: &[Check], id: &str, status: Status) -> Option<String> {
    rows.iter()
        .find(|c| c.id == id && c.applies && c.status == status)
        .map(|c| c.detail.clone())
}

fn failed(rows: &[Check], id: &str) -> Option<String> {
    with_status(rows, id, Status::Fail)
}

/// Sets `cause` on every row that follows from another's (see the module's doc).
pub(super) fn fold(rows: &mut [Check], f: &Facts) {
    let mut rules: Vec<(&'static str, Vec<&'static str>)> = Vec::new();
    if f.nvidia.is_none() && failed(rows, "nvidia_driver").is_some() {
        rules.push(("nvidia_driver", WITHOUT_NVIDIA.to_vec()));
    }
    if f.modules.is_empty() && failed(rows, "module").is_some() {
        rules.push(("module", WITHOUT_MODULE.to_vec()));
    }
    // Without a GPU or an RDMA device no pair can exist (a cause already folded keeps its own).
    if f.gpus.is_empty() && failed(rows, "gpus").is_some() {
        rules.push(("gpus", vec!["paths", "gdr_used"]));
    }
    if f.rdma_devices.is_empty() && failed(rows, "rdma_devices").is_some() {
        rules.push(("rdma_devices", vec!["paths", "gdr_used"]));
    }
    if !unread_nics(f).is_empty() && with_status(rows, "rdma_devices", Status::Unknown).is_some() {
        let mut follow: Vec<&'static str> = PAIR_ROWS.to_vec();
        follow.extend(
            rows.iter()
                .filter(|r| r.detail.starts_with(NEEDED_IF_UNREAD))
                .map(|r| r.id),
        );
        rules.push(("rdma_devices", follow));
    }
    if let Some(detail) = failed(rows, "gdr_used") {
        let mut follow = vec!["modes"];
        if detail.contains("no port is ACTIVE") {
            follow.push("rdma_devices");
        }
        if detail.contains("NCCL's distance rule") {
            follow.extend(["topology", "nccl_gdr"]);
        }
        rules.push(("gdr_used", follow));
    }
    if failed(rows, "paths").is_some() {
        rules.push(("paths", vec!["modes"]));
    }
    // The row names each class as `<class>: ...`, classes apart by ` | `.
    let only_595 = with_status(rows, "silent_failures", Status::Warn).is_some_and(|d| {
        d.split(" | ")
            .all(|class| class.starts_with(&format!("{IOMMU_DMABUF_595}: ")))
    });
    let translating = f
        .iommu
        .as_ref()
        .is_some_and(|i| i.mode == IommuMode::Translated);
    if only_595 && translating && with_status(rows, "iommu", Status::Warn).is_some() {
        rules.push(("silent_failures", vec!["iommu"]));
    }
    for (cause, follow) in rules {
        // A cause folded under an earlier one passes its rows on to that one.
        let root = rows
            .iter()
            .find(|c| c.id == cause)
            .and_then(|c| c.cause)
            .unwrap_or(cause);
        for row in rows.iter_mut() {
            if row.applies
                && row.status != Status::Ok
                && row.cause.is_none()
                && row.id != root
                && follow.contains(&row.id)
            {
                row.cause = Some(root);
            }
        }
    }
}
