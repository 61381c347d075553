//! The two kernel-side providers a peer-memory module needs: the NVIDIA driver (its P2P API)
//! and a peer-memory capable IB core (MOFED), or the test stand-ins for them.

use serde::Serialize;

use crate::error::Result;
use crate::host::Host;
use crate::kernel::{symbols, Kallsyms, SymbolOwner};

/// Test stand-ins for nvidia.ko's P2P API (tests/stand-ins/nv_p2p_sim).
pub const NV_P2P_STAND_INS: [&str; 2] = ["nv_p2p_sim", "nv_p2p_sim_530"];
/// Test stand-in for MOFED's peer-memory core (tests/stand-ins/peer_core_sim).
pub const PEER_CORE_STAND_IN: &str = "peer_core_sim";

/// How a driver offers persistent (callback-less) pinning.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PersistentApi {
    /// `nvidia_p2p_get_pages_persistent` (535.43.02+).
    Explicit,
    /// `nvidia_p2p_cap_persistent_pages` (<= 530: `get_pages` with a NULL callback).
    CapabilityVariable,
    /// Neither symbol is exported.
    None,
    /// `/proc/kallsyms` could not be read.
    Unknown,
}

/// The module that provides `nvidia_p2p_*`.
#[derive(Clone, Debug, Serialize)]
pub struct NvidiaDriver {
    /// `nvidia`, or a stand-in's name.
    pub module: String,
    pub stand_in: bool,
    /// `/sys/module/nvidia/version`.
    pub version: Option<String>,
    /// From `/proc/driver/nvidia/version`: the open kernel modules (needed for DMA-BUF).
    pub open_kernel_module: Option<bool>,
    pub persistent_api: PersistentApi,
    /// Which module exports `nvidia_p2p_get_pages`, when kallsyms is readable.
    pub p2p_exported_by: Option<String>,
}

impl NvidiaDriver {
    pub fn describe(&self) -> String {
        if self.stand_in {
            format!("{} (test stand-in for nvidia.ko's P2P API)", self.module)
        } else {
            format!(
                "nvidia {}",
                self.version.as_deref().unwrap_or("(no version)")
            )
        }
    }
}

fn persistent_api(kallsyms: &Kallsyms) -> PersistentApi {
    match (
        kallsyms.lookup(symbols::P2P_GET_PAGES_PERSISTENT),
        kallsyms.lookup(symbols::P2P_CAP_PERSISTENT_PAGES),
    ) {
        (Err(_), _) | (_, Err(_)) => PersistentApi::Unknown,
        (Ok(Some(_)), _) => PersistentApi::Explicit,
        (Ok(None), Ok(Some(_))) => PersistentApi::CapabilityVariable,
        (Ok(None), Ok(None)) => PersistentApi::None,
    }
}

/// The loaded P2P provider: nvidia.ko or a stand-in; `None` when neither is loaded.
pub fn nvidia_driver(host: &Host, kallsyms: &Kallsyms) -> Result<Option<NvidiaDriver>> {
    let p2p_exported_by = match kallsyms.lookup(symbols::P2P_GET_PAGES) {
        Ok(Some(owner)) => Some(owner.describe()),
        _ => None,
    };
    let (module, stand_in) = if host.sys_exists("module/nvidia") {
        ("nvidia".to_owned(), false)
    } else if let Some(sim) = NV_P2P_STAND_INS
        .iter()
        .find(|m| host.sys_exists(format!("module/{m}")))
    {
        ((*sim).to_owned(), true)
    } else {
        return Ok(None);
    };
    let version = host.read_sys(format!("module/{module}/version"))?;
    let open_kernel_module = if stand_in {
        None
    } else {
        host.read_proc("driver/nvidia/version")?
            .map(|text| text.contains("Open Kernel Module"))
    };
    Ok(Some(NvidiaDriver {
        module,
        stand_in,
        version,
        open_kernel_module,
        persistent_api: persistent_api(kallsyms),
        p2p_exported_by,
    }))
}

/// Core generations (CONTRACT 1.7, 1.8, 5.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum CoreGeneration {
    /// MOFED 4.1 ... 5.0 (legacy client layout; needs `peerdirect_support=1`).
    #[serde(rename = "4x")]
    Legacy4x,
    /// MOFED 5.1 ... 5.4-2 (`_ex` marker ignored; lock inversion 2696789).
    #[serde(rename = "5x")]
    Mofed5x,
    /// MOFED 5.4-3 and later, Ubuntu and NV-Kernels copies (`_ex` + INVALIDATE_UNMAPS).
    #[serde(rename = "5x-unmaps")]
    Mofed5xUnmaps,
}

impl CoreGeneration {
    pub fn label(self) -> &'static str {
        match self {
            Self::Legacy4x => "4x",
            Self::Mofed5x => "5x",
            Self::Mofed5xUnmaps => "5x-unmaps",
        }
    }

    fn from_stand_in(param: &str) -> Option<Self> {
        match param.trim() {
            "4x" => Some(Self::Legacy4x),
            "5x" => Some(Self::Mofed5x),
            "5x-unmaps" => Some(Self::Mofed5xUnmaps),
            _ => None,
        }
    }
}

/// A MOFED version string (`4.9-6.0.6`, `5.4-3.0.3.0`, `24.10-1.1.4`) to its core generation.
pub fn mofed_generation(version: &str) -> Option<CoreGeneration> {
    let (release, build) = version
        .trim()
        .split_once('-')
        .unwrap_or((version.trim(), ""));
    let mut it = release.split('.');
    let major: u32 = it.next()?.parse().ok()?;
    let minor: u32 = it.next().unwrap_or("0").parse().ok()?;
    let build_major: u32 = build
        .split('.')
        .next()
        .and_then(|b| b.parse().ok())
        .unwrap_or(0);
    Some(match (major, minor) {
        (0..=4, _) | (5, 0) => CoreGeneration::Legacy4x,
        (5, 1..=3) => CoreGeneration::Mofed5x,
        (5, 4) if build_major < 3 => CoreGeneration::Mofed5x,
        _ => CoreGeneration::Mofed5xUnmaps,
    })
}

/// Who provides `ib_register_peer_memory_client`.
#[derive(Clone, Debug, Serialize)]
pub struct PeerCore {
    /// `peer_core_sim`, `ib_core`, or `kernel` (built in).
    pub provider: String,
    pub stand_in: bool,
    /// `/sys/module/ib_core/version` (MOFED sets one; upstream ib_core has none).
    pub version: Option<String>,
    pub srcversion: Option<String>,
    pub generation: Option<CoreGeneration>,
    /// `peer_core_sim`'s `sysfs` parameter (memory_peers on or off).
    pub memory_peers_sysfs: Option<bool>,
}

/// What is known about ib_core and the peer-memory core.
#[derive(Clone, Debug, Serialize)]
pub struct IbCore {
    /// `/sys/module/ib_core` exists (loaded module, or built in with parameters).
    pub ib_core_loaded: bool,
    pub ib_core_version: Option<String>,
    /// The peer-memory core; `None` when nothing exports `ib_register_peer_memory_client`
    /// (or kallsyms is unreadable and no stand-in is loaded).
    pub peer_core: Option<PeerCore>,
    /// `false` when kallsyms could not be read, so the absence of a core is not proven.
    pub kallsyms_readable: bool,
}

/// Reads ib_core and the peer-memory core.
pub fn ib_core(host: &Host, kallsyms: &Kallsyms) -> Result<IbCore> {
    let ib_core_loaded = host.sys_exists("module/ib_core");
    let ib_core_version = host.read_sys("module/ib_core/version")?;
    let ib_core_srcversion = host.read_sys("module/ib_core/srcversion")?;
    let owner = kallsyms.lookup(symbols::REGISTER_PEER_MEMORY_CLIENT);
    let peer_core = if host.sys_exists(format!("module/{PEER_CORE_STAND_IN}")) {
        let generation = host
            .read_sys(format!("module/{PEER_CORE_STAND_IN}/parameters/generation"))?
            .and_then(|g| CoreGeneration::from_stand_in(&g));
        let memory_peers_sysfs = host
            .read_sys(format!("module/{PEER_CORE_STAND_IN}/parameters/sysfs"))?
            .map(|v| matches!(v.trim(), "Y" | "1"));
        Some(PeerCore {
            provider: PEER_CORE_STAND_IN.to_owned(),
            stand_in: true,
            version: None,
            srcversion: None,
            generation,
            memory_peers_sysfs,
        })
    } else {
        match owner {
            Ok(Some(owner)) => {
                let provider = match owner {
                    SymbolOwner::Kernel => "kernel".to_owned(),
                    SymbolOwner::Module(m) => m.clone(),
                };
                let (version, srcversion) = if provider == "ib_core" {
                    (ib_core_version.clone(), ib_core_srcversion)
                } else {
                    (None, None)
                };
                Some(PeerCore {
                    generation: version.as_deref().and_then(mofed_generation),
                    provider,
                    stand_in: false,
                    version,
                    srcversion,
                    memory_peers_sysfs: None,
                })
            }
            _ => None,
        }
    };
    Ok(IbCore {
        ib_core_loaded,
        ib_core_version,
        peer_core,
        kallsyms_readable: owner.is_ok(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mofed_versions_map_to_generations() {
        use CoreGeneration::*;
        for (v, g) in [
            ("4.9-6.0.6", Legacy4x),
            ("5.0-2.1.8", Legacy4x),
            ("5.1-0.6.6.0", Mofed5x),
            ("5.4-1.0.3.0", Mofed5x),
            ("5.4-3.0.3.0", Mofed5xUnmaps),
            ("5.9-0.5.6", Mofed5xUnmaps),
            ("24.10-1.1.4", Mofed5xUnmaps),
        ] {
            assert_eq!(mofed_generation(v), Some(g), "{v}");
        }
        assert_eq!(mofed_generation("abc"), None);
        assert_eq!(mofed_generation(""), None);
    }
}
