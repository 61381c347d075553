// SPDX-License-Identifier: MIT OR Apache-2.0
//! Facts from `/sys/module` and `/sys/kernel/mm/memory_peers`: the peer-memory clients the core
//! lists, and our module's counters.

use std::collections::BTreeMap;

use crate::error::Result;
use crate::host::peermem::{Implementation, LoadedModule};
use crate::host::Host;

use super::super::{PeerClientInfo, MODULE_COUNTERS};

pub(super) fn memory_peers(host: &Host) -> Result<Option<Vec<PeerClientInfo>>> {
    let dir = "kernel/mm/memory_peers";
    if !host.sys_exists(dir) {
        return Ok(None);
    }
    let mut clients = Vec::new();
    for name in host.list_sys(dir)? {
        clients.push(PeerClientInfo {
            version: host.read_sys(format!("{dir}/{name}/version"))?,
            name,
        });
    }
    Ok(Some(clients))
}

/// The [`MODULE_COUNTERS`] of each of our modules, as written (trimmed); a counter that cannot
/// be read is left out (they only illustrate `peer_clients`).
pub(super) fn module_counters(
    host: &Host,
    modules: &[LoadedModule],
) -> BTreeMap<String, BTreeMap<String, String>> {
    modules
        .iter()
        .filter(|m| m.implementation == Implementation::Nvpeer)
        .map(|m| {
            let counters = MODULE_COUNTERS
                .iter()
                .filter_map(|c| {
                    let v = host
                        .read_sys(format!("module/{}/nvpeer/stats/{c}", m.name))
                        .ok()
                        .flatten()?;
                    Some(((*c).to_owned(), v.trim().to_owned()))
                })
                .collect();
            (m.name.clone(), counters)
        })
        .collect()
}
