// SPDX-License-Identifier: MIT OR Apache-2.0
//! The peer-memory module itself: which one is loaded, its parameters, and the clients it
//! registered with the core.

use std::collections::BTreeMap;

use crate::host::peermem::{Implementation, LoadedModule};
use crate::host::providers::{CoreGeneration, IbCore, NvidiaDriver, PersistentApi};

use super::super::super::{Check, PeerClientInfo, MODULE_COUNTERS};

/// `core`: the IB core (`None`: unknown); `installed`: `modprobe nvidia_peermem` finds a module.
pub(super) fn check_module(
    modules: &[LoadedModule],
    core: Option<&IbCore>,
    installed: bool,
) -> Check {
    match modules {
        // Never a step that cannot work: without a peer-memory core the module refuses to load.
        [] => Check::fail(
            "module",
            "no peer-memory module loaded (neither nvidia_peermem nor nv_peer_mem)",
            match core {
                Some(c) if c.peer_core.is_none() && c.kallsyms_readable => {
                    "no module can load here: nothing exports ib_register_peer_memory_client (see `ib_core`); install MLNX_OFED / DOCA-OFED first, or use dma-buf, which needs no module (see `dmabuf`)"
                }
                _ if installed => "`modprobe nvidia_peermem` (and add it to /etc/modules-load.d to load it at boot)",
                _ => "install the nvpeer-dkms package (DKMS builds the module for each kernel installed), then `modprobe nvidia_peermem`",
            },
        ),
        [m] => {
            let version = m.version.as_deref().unwrap_or("(no version)");
            let detail = match m.implementation {
                Implementation::Nvpeer => format!(
                    "nvpeer {version} loaded as {}{}",
                    m.name,
                    match m.foundation.as_deref() {
                        Some("own") => ", built on nvpeer's own Rust runtime (a kernel without usable Rust)",
                        Some("kernel") => ", built on the kernel's own Rust",
                        _ => "",
                    }
                ),
                other => format!("{} {version} loaded as {}", other.describe(), m.name),
            };
            if m.implementation == Implementation::Nvpeer {
                Check::ok("module", detail)
            } else {
                Check::info(
                    "module",
                    detail,
                    "GPUDirect RDMA works with it; nvpeer's statistics and fixes need nvpeer's module: install the nvpeer-dkms package, and once the `modprobe` row (`nvpeer check --all`) says `modprobe nvidia-peermem` loads nvpeer, `nvpeer detach` then `nvpeer attach` (nvpeer-detach(1), nvpeer-attach(1))",
                )
            }
        }
        many => Check::fail(
            "module",
            format!(
                "{} peer-memory modules loaded at once: {}",
                many.len(),
                many.iter()
                    .map(|m| format!("{} ({})", m.name, m.implementation.describe()))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            "only one may be loaded: `rmmod` all but one (they register the same client name nv_mem)",
        ),
    }
}

/// What a parameter value means (CONTRACT 3.2).
fn parameter_meaning(name: &str, value: &str) -> Option<&'static str> {
    Some(match (name, value.trim()) {
        ("peerdirect_support", "0") => {
            "MOFED >= 5.1 API, peer_memory_client_ex with INVALIDATE_UNMAPS"
        }
        ("peerdirect_support", "1") => "legacy API for MOFED <= 5.0 / 4.9 LTS",
        ("persistent_api_support", "1") => "one persistent client nv_mem",
        ("persistent_api_support", "0") => "invalidating nv_mem plus persistent nv_mem_nc",
        _ => return None,
    })
}

pub(super) fn check_parameters(module: &LoadedModule, ib_core: Option<&IbCore>) -> Check {
    if module.parameters.is_empty() {
        return Check::ok("parameters", format!("{} has no parameters", module.name));
    }
    let list = module
        .parameters
        .iter()
        .map(|(k, v)| match parameter_meaning(k, v) {
            Some(m) => format!("{k}={v} ({m})"),
            None => format!("{k}={v}"),
        })
        .collect::<Vec<_>>()
        .join(", ");
    let generation = ib_core
        .and_then(|c| c.peer_core.as_ref())
        .and_then(|p| p.generation);
    let legacy = module
        .parameters
        .get("peerdirect_support")
        .map(|v| v.trim() == "1");
    let follows_core = module.implementation == Implementation::Nvpeer;
    match (legacy, generation) {
        // nvpeer detects the core's generation at load and overrides a contradicting value
        // (its log says so in one line); NVIDIA's and Mellanox's modules register what it says.
        (Some(false), Some(CoreGeneration::Legacy4x))
        | (Some(true), Some(CoreGeneration::Mofed5xUnmaps))
            if follows_core =>
        {
            Check::ok(
                "parameters",
                format!("{list}; contradicts the detected core, which nvpeer follows instead (see its load log)"),
            )
        }
        (Some(false), Some(g @ CoreGeneration::Legacy4x)) => Check::fail(
            "parameters",
            format!("{list}; but the peer-memory core is generation 4x, {}, which needs the legacy client layout", g.describe()),
            format!("reload with peerdirect_support=1: `rmmod {0}; modprobe {0} peerdirect_support=1`", module.name),
        ),
        (Some(true), Some(g @ (CoreGeneration::Mofed5x | CoreGeneration::Mofed5xUnmaps))) => Check::warn(
            "parameters",
            format!("{list}; on a generation {} core the legacy mode gives up INVALIDATE_UNMAPS and is exposed to the lock inversion NVIDIA 2696789", g.label()),
            format!("reload with peerdirect_support=0 unless this really is MOFED <= 5.0: `rmmod {0}; modprobe {0}`", module.name),
        ),
        (Some(false), Some(g @ CoreGeneration::Mofed5x)) => Check::warn(
            "parameters",
            format!("{list}; the core is generation 5x, {}, which ignores INVALIDATE_UNMAPS: on 5.1 ... 5.4-2 the lock inversion NVIDIA 2696789 can deadlock when memory is freed while registered", g.describe()),
            "upgrade MOFED to 5.4-3 or later",
        ),
        _ => Check::ok("parameters", list),
    }
}

pub(super) fn check_peer_clients(
    modules: &[LoadedModule],
    memory_peers: Option<&[PeerClientInfo]>,
    nvidia: Option<&NvidiaDriver>,
    module_counters: &BTreeMap<String, BTreeMap<String, String>>,
) -> Check {
    let persistent = nvidia.is_none_or(|n| n.persistent_api != PersistentApi::None);
    match memory_peers {
        Some(clients) => {
            let listed = clients
                .iter()
                .map(|c| format!("{} {}", c.name, c.version.as_deref().unwrap_or("(no version)")))
                .collect::<Vec<_>>()
                .join(", ");
            if clients.is_empty() {
                return Check::fail(
                    "peer_clients",
                    "/sys/kernel/mm/memory_peers exists but no client is registered",
                    "load the peer-memory module; if it is loaded, its registration failed: see dmesg",
                );
            }
            if let [module] = modules {
                let missing: Vec<&str> = module
                    .expected_clients(persistent)
                    .into_iter()
                    .filter(|want| !clients.iter().any(|c| c.name == *want))
                    .collect();
                if !missing.is_empty() {
                    return Check::fail(
                        "peer_clients",
                        format!("memory_peers lists {listed}; {} should have registered {} too", module.name, missing.join(", ")),
                        "another module may own the name (see `module`), or the registration failed: see dmesg",
                    );
                }
            }
            Check::ok("peer_clients", format!("memory_peers: {listed}"))
        }
        None => match modules {
            [] => Check::fail(
                "peer_clients",
                "no peer-memory client: /sys/kernel/mm/memory_peers is absent and no peer-memory module is loaded",
                "load the peer-memory module (see `module`)",
            ),
            [m] if m.implementation == Implementation::Nvpeer => {
                let counters = MODULE_COUNTERS
                    .iter()
                    .filter_map(|c| {
                        let v = module_counters.get(&m.name)?.get(*c)?;
                        Some(format!("{c}={v}"))
                    })
                    .collect::<Vec<_>>()
                    .join(" ");
                Check::info(
                    "peer_clients",
                    format!(
                        "/sys/kernel/mm/memory_peers is absent (MOFED >= 24.04 on a kernel that no longer exports mm_kobj, or a core built without it); {} registered {} (it refuses to load otherwise){}",
                        m.name,
                        m.expected_clients(persistent).join(" and "),
                        if counters.is_empty() { String::new() } else { format!("; its counters: {counters}") }
                    ),
                    "NCCL >= 2.23.4 and UCX detect GPUDirect RDMA through /sys/module/nvidia_peermem/version; NCCL <= 2.22 needs memory_peers (see `nccl`)",
                )
            }
            _ => Check::info(
                "peer_clients",
                "/sys/kernel/mm/memory_peers is absent: the registered clients cannot be listed",
                "NCCL >= 2.23.4 and UCX detect GPUDirect RDMA through /sys/module/nvidia_peermem/version; NCCL <= 2.22 needs memory_peers (see `nccl`)",
            ),
        },
    }
}
