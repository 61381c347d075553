//! Which peer-memory module is loaded: ours, NVIDIA's nvidia-peermem or Mellanox's nv_peer_mem.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::host::Host;

/// Module names under which a GPU peer-memory client can be loaded (CONTRACT 4.1).
pub const MODULE_NAMES: [&str; 2] = ["nvidia_peermem", "nv_peer_mem"];

/// Who wrote the loaded module.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Implementation {
    /// This project: recognised by `/sys/module/<name>/nvpeer/implementation`.
    Nvpeer,
    /// NVIDIA's nvidia-peermem (shipped with the GPU driver since R470).
    NvidiaPeermem,
    /// Mellanox's nv_peer_mem (nv_peer_memory 1.x).
    MellanoxNvPeerMem,
}

impl Implementation {
    pub fn describe(self) -> &'static str {
        match self {
            Self::Nvpeer => "nvpeer",
            Self::NvidiaPeermem => "NVIDIA nvidia-peermem",
            Self::MellanoxNvPeerMem => "Mellanox nv_peer_mem",
        }
    }
}

/// A loaded peer-memory module as sysfs shows it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LoadedModule {
    pub name: String,
    pub version: Option<String>,
    pub implementation: Implementation,
    /// `/sys/module/<name>/nvpeer/implementation` (ours only), e.g. `nvpeer 0.1.0`.
    pub marker: Option<String>,
    /// `/sys/module/<name>/parameters/*`
    pub parameters: BTreeMap<String, String>,
    /// `/sys/module/<name>/nvpeer/core` (ours only): the core generation the module detected
    /// at load time (`4x`, `5x`, `5x-unmaps`), as written.
    pub core: Option<String>,
    /// `/sys/module/<name>/nvpeer/foundation` (ours, from issue 44 on): the Rust it was built on,
    /// `kernel` (the kernel's own crate) or `own` (nvpeer's runtime). Absent in older reports.
    #[serde(default)]
    pub foundation: Option<String>,
}

/// Every peer-memory module currently loaded (normally zero or one).
pub fn loaded_modules(host: &Host) -> Result<Vec<LoadedModule>> {
    let mut found = Vec::new();
    for name in MODULE_NAMES {
        let dir = format!("module/{name}");
        // A module that is loaded has an initstate; a built-in one has none but no version
        // either, which cannot happen for these out-of-tree modules.
        if !host.sys_exists(&dir) {
            continue;
        }
        let version = host.read_sys(format!("{dir}/version"))?;
        let marker = host.read_sys(format!("{dir}/nvpeer/implementation"))?;
        let core = host.read_sys(format!("{dir}/nvpeer/core"))?;
        let foundation = host.read_sys(format!("{dir}/nvpeer/foundation"))?;
        let implementation = if marker.is_some() {
            Implementation::Nvpeer
        } else if name == "nv_peer_mem" {
            Implementation::MellanoxNvPeerMem
        } else {
            Implementation::NvidiaPeermem
        };
        let mut parameters = BTreeMap::new();
        for p in host.list_sys(format!("{dir}/parameters"))? {
            if let Some(v) = host.read_sys(format!("{dir}/parameters/{p}"))? {
                parameters.insert(p, v);
            }
        }
        found.push(LoadedModule {
            name: name.to_owned(),
            version,
            implementation,
            marker: marker.map(|m| m.trim().to_owned()),
            parameters,
            core: core.map(|c| c.trim().to_owned()),
            foundation: foundation.map(|f| f.trim().to_owned()),
        });
    }
    Ok(found)
}

impl LoadedModule {
    /// Whether its `nv_mem` is persistent (`persistent_api_support=1`: the default of ours and
    /// of NVIDIA's >= 560; older NVIDIA modules and nv_peer_mem have no such parameter and an
    /// invalidating `nv_mem`).
    pub fn persistent_nv_mem(&self) -> bool {
        self.parameters
            .get("persistent_api_support")
            .is_some_and(|v| v.trim() == "1")
    }

    /// The peer clients this module must have registered, given its parameters in effect
    /// (CONTRACT 3.2): ours with `persistent_api_support=1` (default) one persistent `nv_mem`;
    /// with `0` an invalidating `nv_mem` plus a persistent `nv_mem_nc` (only `nv_mem` when the
    /// driver has no persistent API). Of NVIDIA's and Mellanox's modules only `nv_mem` is
    /// certain (whether they add `nv_mem_nc` depends on their version).
    pub fn expected_clients(&self, persistent_api_available: bool) -> Vec<&'static str> {
        if self.implementation != Implementation::Nvpeer {
            return vec!["nv_mem"];
        }
        match self
            .parameters
            .get("persistent_api_support")
            .map(|v| v.trim())
        {
            Some("0") if persistent_api_available => vec!["nv_mem", "nv_mem_nc"],
            _ => vec!["nv_mem"],
        }
    }
}
