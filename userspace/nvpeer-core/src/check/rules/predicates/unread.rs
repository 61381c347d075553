// SPDX-License-Identifier: MIT OR Apache-2.0
//! An RDMA device that could not be read (a dangling or looping `class/infiniband/<name>`, an
//! unreadable `device` link) where no GPU-NIC pair was formed: it may be the NIC of a pair, so
//! whether a pair exists, and every answer that rests on it, is unknown.

use crate::host::rdma::RdmaDevice;

use super::super::super::{Check, Facts, Status};

/// A device whose entry or PCI function could not be read: not a software device, not absent.
pub(in crate::check::rules) fn is_unread(d: &RdmaDevice) -> bool {
    d.pci.is_none() && !d.unreadable.is_empty()
}

/// Where no GPU-NIC pair was formed, the RDMA devices that could not be read ([`is_unread`]):
/// each may be a NIC on PCI whose pair is unknown, so whether a path is needed at all is
/// unknown too.
pub(in crate::check::rules) fn unread_nics(f: &Facts) -> Vec<&str> {
    if !f.pairs.is_empty() {
        return Vec::new();
    }
    f.rdma_devices
        .iter()
        .filter(|d| is_unread(d))
        .map(|d| d.name.as_str())
        .collect()
}

/// How `settle` (`paths.rs`) begins a peer-memory row it makes unknown because of
/// [`unread_nics`] (`fold` folds such a row under `rdma_devices`).
pub(in crate::check::rules) const NEEDED_IF_UNREAD: &str =
    "needed only if dma-buf does not carry a pair of ";

/// Why a row that judges GPU-NIC pairs cannot tell, where a GPU is seen but no pair was formed
/// because of [`unread_nics`], naming them; `None` elsewhere (without a GPU no pair can exist,
/// whatever the devices are).
pub(in crate::check::rules) fn pair_unknown(f: &Facts) -> Option<String> {
    let unread = unread_nics(f);
    if f.gpus.is_empty() || unread.is_empty() {
        return None;
    }
    let which = if unread.len() == 1 {
        "it pairs"
    } else {
        "they pair"
    };
    Some(format!(
        "{} could not be read (see `rdma_devices`), so whether {which} with a GPU is unknown",
        unread.join(", ")
    ))
}

/// The rows whose answer depends on whether a pair exists. Where [`pair_unknown`] holds, each
/// is unknown, never "no pair" as a fact (`gin_umem` without `--for gin` stays not applicable,
/// saying so), and `fold` folds it under `rdma_devices`.
pub(in crate::check::rules) const PAIR_ROWS: [&str; 8] = [
    "paths",
    "gdr_used",
    "topology",
    "acs",
    "nccl_gdr",
    "gin_umem",
    "modes",
    "silent_failures",
];

/// Row `id`, unknown because of [`pair_unknown`]: `what` is what it cannot tell ("whether NCCL
/// uses GPUDirect RDMA on a GPU-NIC pair"). `None` where whether a pair exists is known.
pub(in crate::check::rules) fn unknown_pair_row(
    f: &Facts,
    id: &'static str,
    what: &str,
) -> Option<Check> {
    let why = pair_unknown(f)?;
    Some(Check::new(
        id,
        Status::Unknown,
        format!("{what} is unknown: {why}"),
        Some("see `rdma_devices`".to_owned()),
    ))
}
