//! The two kernel-side providers a peer-memory module needs: the NVIDIA driver (its P2P API)
//! and a peer-memory capable IB core (MOFED), or the test stand-ins for them.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::host::kernel::{symbols, Kallsyms, SymbolOwner};
use crate::host::nvidia_proc::{Flavour, NvidiaProc};
use crate::host::Host;

/// Test stand-ins for nvidia.ko's P2P API (tests/stand-ins/nv_p2p_sim).
pub const NV_P2P_STAND_INS: [&str; 2] = ["nv_p2p_sim", "nv_p2p_sim_530"];
/// Test stand-ins for MOFED's peer-memory core (tests/stand-ins/peer_core_sim), one build per
/// generation. A fourth build takes DOCA's name `ib_uverbs`; it is told from the real module by
/// the `generation` parameter every build has.
pub const PEER_CORE_STAND_INS: [&str; 3] =
    ["peer_core_sim", "peer_core_sim_5x", "peer_core_sim_4x"];

/// How a driver offers persistent (callback-less) pinning.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
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
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct NvidiaDriver {
    /// `nvidia`, or a stand-in's name.
    pub module: String,
    pub stand_in: bool,
    /// `/sys/module/nvidia/version`.
    pub version: Option<String>,
    /// From `/proc/driver/nvidia/version` (which the stand-in shows too): the open kernel
    /// modules (needed for DMA-BUF).
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

/// The loaded P2P provider: nvidia.ko or a stand-in; `None` when neither is loaded. `proc`:
/// what `/proc/driver/nvidia` says ([`crate::host::nvidia_proc::read`]).
pub fn nvidia_driver(
    host: &Host,
    kallsyms: &Kallsyms,
    proc: Option<&NvidiaProc>,
) -> Result<Option<NvidiaDriver>> {
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
    let open_kernel_module = proc
        .and_then(|p| p.version.as_ref())
        .map(|v| v.flavour == Flavour::Open);
    Ok(Some(NvidiaDriver {
        module,
        stand_in,
        version,
        open_kernel_module,
        persistent_api: persistent_api(kallsyms),
        p2p_exported_by,
    }))
}

/// Core generations as a client sees them (CONTRACT 1.1, 1.4, 1.7, 1.8).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CoreGeneration {
    /// MOFED 4.1 ... 5.0: peer private data, whose callbacks a new-style client's `ex_size` and
    /// `flags` would overlay, so the client needs the legacy layout (`peerdirect_support=1`).
    #[serde(rename = "4x")]
    Legacy4x,
    /// MOFED 4.0 and 5.1-0.6.6.0 ... 5.4-2: no private data, and the `_ex` marker is ignored
    /// (on 5.x: lock inversion 2696789).
    #[serde(rename = "5x")]
    Mofed5x,
    /// MOFED 5.1-2.5.8.0.60, 5.4-3 and later, Ubuntu and NV-Kernels copies: `_ex` and
    /// `PEER_MEM_INVALIDATE_UNMAPS` honoured.
    #[serde(rename = "5x-unmaps")]
    Mofed5xUnmaps,
}

impl CoreGeneration {
    /// The id, as JSON, the stand-in's `generation` parameter and our `nvpeer/core` write it.
    pub fn label(self) -> &'static str {
        match self {
            Self::Legacy4x => "4x",
            Self::Mofed5x => "5x",
            Self::Mofed5xUnmaps => "5x-unmaps",
        }
    }

    /// The releases of this generation.
    pub fn describe(self) -> &'static str {
        match self {
            Self::Legacy4x => "MOFED 4.1-5.0 (legacy PeerDirect)",
            Self::Mofed5x => "MOFED 4.0 or 5.1-5.4-2 (no INVALIDATE_UNMAPS)",
            Self::Mofed5xUnmaps => "UNMAPS-capable (MOFED 5.1-2.5.8.0.60, 5.4-3 and later)",
        }
    }

    /// The inverse of [`Self::label`].
    pub fn from_label(text: &str) -> Option<Self> {
        match text.trim() {
            "4x" => Some(Self::Legacy4x),
            "5x" => Some(Self::Mofed5x),
            "5x-unmaps" => Some(Self::Mofed5xUnmaps),
            _ => None,
        }
    }

    /// The generation the two marker exports tell, as our module tells it at load time
    /// (CONTRACT 1.1): `Err` when kallsyms is unreadable, `Ok(None)` when both are exported,
    /// which no known core does.
    pub fn from_kallsyms(kallsyms: &Kallsyms) -> std::result::Result<Option<Self>, &str> {
        let private_data = kallsyms.lookup(symbols::GET_PEER_PRIVATE_DATA)?.is_some();
        let stop_notifier = kallsyms
            .lookup(symbols::STOP_INVALIDATION_NOTIFIER)?
            .is_some();
        Ok(match (private_data, stop_notifier) {
            (true, true) => None,
            (true, false) => Some(Self::Legacy4x),
            (false, true) => Some(Self::Mofed5xUnmaps),
            (false, false) => Some(Self::Mofed5x),
        })
    }
}

/// Where a [`PeerCore::generation`] comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GenerationSource {
    /// `ib_get_peer_private_data` / `ib_umem_stop_invalidation_notifier` in `/proc/kallsyms`.
    Kallsyms,
    /// `peer_core_sim`'s `generation` parameter (a stand-in that exports neither marker).
    StandInParameter,
    /// `/sys/module/ib_core/version`, when kallsyms could not be read.
    MofedVersion,
}

impl GenerationSource {
    pub fn describe(self) -> &'static str {
        match self {
            Self::Kallsyms => "kallsyms",
            Self::StandInParameter => "peer_core_sim's generation parameter",
            Self::MofedVersion => "the MOFED version (kallsyms not readable)",
        }
    }
}

/// A MOFED / DOCA-OFED release as `/sys/module/ib_core/version` gives it:
/// `MAJOR.MINOR-BUILD[.N...]` (`4.9-6.0.6`, `5.4-3.0.3`, `24.10-3.2.5`). Ordered as releases are.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct MofedVersion {
    pub major: u32,
    pub minor: u32,
    pub build: Vec<u32>,
}

/// Whether a core has the `ib_umem_stop_invalidation_notifier` `!=` bug (CONTRACT 1.7 item 7).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StopNotifierBug {
    /// Before 5.4-3 (4.x included): the code with the bug came with 5.4-3.
    Absent,
    /// 5.4-3 ... 24.10.
    Present,
    /// 25.04 and later.
    Fixed,
}

impl MofedVersion {
    /// `None` for any other shape: claims about a release are made only from a version read as
    /// one.
    pub fn parse(text: &str) -> Option<Self> {
        fn number(s: &str) -> Option<u32> {
            // `u32::from_str` would also take a sign.
            if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            s.parse().ok()
        }
        let (release, build) = text.trim().split_once('-')?;
        let (major, minor) = release.split_once('.')?;
        Some(Self {
            major: number(major)?,
            minor: number(minor)?,
            build: build.split('.').map(number).collect::<Option<_>>()?,
        })
    }

    fn at_least(&self, major: u32, minor: u32, build: &[u32]) -> bool {
        (self.major, self.minor, self.build.as_slice()) >= (major, minor, build)
    }

    /// The generation of this release; `None` for a major number MOFED never had (< 4, 6 ... 22:
    /// 23.04 followed 5.9).
    pub fn generation(&self) -> Option<CoreGeneration> {
        Some(match (self.major, self.minor) {
            (4, 0) => CoreGeneration::Mofed5x,
            (4, _) | (5, 0) => CoreGeneration::Legacy4x,
            // The one 5.1 branch with `_ex` and UNMAPS (CONTRACT 1.4).
            (5, 1) if self.build.starts_with(&[2, 5, 8]) => CoreGeneration::Mofed5xUnmaps,
            (5, _) if !self.at_least(5, 4, &[3]) => CoreGeneration::Mofed5x,
            (5, _) | (23.., _) => CoreGeneration::Mofed5xUnmaps,
            _ => return None,
        })
    }

    /// Whether this release has the `!=` bug; `None` for a major number MOFED never had.
    pub fn stop_notifier_bug(&self) -> Option<StopNotifierBug> {
        match self.major {
            4 | 5 if !self.at_least(5, 4, &[3]) => Some(StopNotifierBug::Absent),
            5 | 23.. if !self.at_least(25, 4, &[]) => Some(StopNotifierBug::Present),
            25.. => Some(StopNotifierBug::Fixed),
            _ => None,
        }
    }
}

/// A MOFED version string (`4.9-6.0.6`, `5.4-3.0.3.0`, `24.10-1.1.4`) to its core generation.
pub fn mofed_generation(version: &str) -> Option<CoreGeneration> {
    MofedVersion::parse(version)?.generation()
}

/// Who provides `ib_register_peer_memory_client`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PeerCore {
    /// The exporter: the module kallsyms names (`ib_core` on MOFED <= 23.x, `ib_uverbs` on
    /// DOCA-OFED >= 24.07 and NV-Kernels, any other name as it is), `peer_core_sim` (the
    /// stand-in), or `kernel` (built in).
    pub provider: String,
    pub stand_in: bool,
    /// `/sys/module/ib_core/version`, whichever module exports the core: MOFED sets one
    /// (upstream ib_core has none).
    pub version: Option<String>,
    pub srcversion: Option<String>,
    pub generation: Option<CoreGeneration>,
    pub generation_from: Option<GenerationSource>,
    /// `peer_core_sim`'s `sysfs` parameter (memory_peers on or off).
    pub memory_peers_sysfs: Option<bool>,
    /// `/sys/module/<provider>/holders/*`: the modules that hold the exporter in use; `None`
    /// when there is no such directory (built in, or a tree without it).
    pub holders: Option<Vec<String>>,
    /// `/sys/module/<provider>/refcnt`.
    pub refcnt: Option<u64>,
}

/// What is known about ib_core and the peer-memory core.
#[derive(Clone, Debug, Serialize, Deserialize)]
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

/// The holders and reference count of a loaded module.
fn module_users(host: &Host, module: &str) -> Result<(Option<Vec<String>>, Option<u64>)> {
    let holders_dir = format!("module/{module}/holders");
    let holders = if host.sys_exists(&holders_dir) {
        Some(host.list_sys(&holders_dir)?)
    } else {
        None
    };
    let refcnt_file = format!("module/{module}/refcnt");
    let refcnt =
        match host.read_sys(&refcnt_file)? {
            Some(text) => Some(text.trim().parse().map_err(|_| {
                Error::parse(host.sys_path(&refcnt_file), text, "a reference count")
            })?),
            None => None,
        };
    Ok((holders, refcnt))
}

/// Reads ib_core and the peer-memory core.
pub fn ib_core(host: &Host, kallsyms: &Kallsyms) -> Result<IbCore> {
    let ib_core_loaded = host.sys_exists("module/ib_core");
    let ib_core_version = host.read_sys("module/ib_core/version")?;
    let ib_core_srcversion = host.read_sys("module/ib_core/srcversion")?;
    let owner = kallsyms.lookup(symbols::REGISTER_PEER_MEMORY_CLIENT);
    let markers = CoreGeneration::from_kallsyms(kallsyms);
    // The exporter kallsyms names; without kallsyms, a loaded stand-in is taken for it (the
    // VM rig), a real core cannot be told.
    let exporter = match owner {
        Ok(Some(SymbolOwner::Module(m))) => Some(m.clone()),
        Ok(Some(SymbolOwner::Kernel)) => Some("kernel".to_owned()),
        Ok(None) => None,
        Err(_) => PEER_CORE_STAND_INS
            .iter()
            .find(|m| host.sys_exists(format!("module/{m}")))
            .map(|m| (*m).to_owned()),
    };
    let Some(provider) = exporter else {
        return Ok(IbCore {
            ib_core_loaded,
            ib_core_version,
            peer_core: None,
            kallsyms_readable: owner.is_ok(),
        });
    };
    let stand_in = PEER_CORE_STAND_INS.contains(&provider.as_str())
        || (provider != "kernel"
            && host.sys_exists(format!("module/{provider}/parameters/generation")));
    let peer_core = if stand_in {
        let parameter = host
            .read_sys(format!("module/{provider}/parameters/generation"))?
            .and_then(|g| CoreGeneration::from_label(&g));
        let memory_peers_sysfs = host
            .read_sys(format!("module/{provider}/parameters/sysfs"))?
            .map(|v| matches!(v.trim(), "Y" | "1"));
        // A marker the stand-in exports is what a client sees; one that exports none (or an
        // older build) behaves as its parameter says.
        let (generation, generation_from) = match (markers, parameter) {
            (Ok(Some(g @ (CoreGeneration::Legacy4x | CoreGeneration::Mofed5xUnmaps))), _) => {
                (Some(g), Some(GenerationSource::Kallsyms))
            }
            (_, Some(g)) => (Some(g), Some(GenerationSource::StandInParameter)),
            (Ok(Some(g)), None) => (Some(g), Some(GenerationSource::Kallsyms)),
            _ => (None, None),
        };
        let (holders, refcnt) = module_users(host, &provider)?;
        PeerCore {
            provider,
            stand_in: true,
            version: None,
            srcversion: None,
            generation,
            generation_from,
            memory_peers_sysfs,
            holders,
            refcnt,
        }
    } else {
        let (generation, generation_from) = match markers {
            Ok(Some(g)) => (Some(g), Some(GenerationSource::Kallsyms)),
            Ok(None) => (None, None),
            Err(_) => (
                ib_core_version.as_deref().and_then(mofed_generation),
                Some(GenerationSource::MofedVersion),
            ),
        };
        let (holders, refcnt) = if provider == "kernel" {
            (None, None)
        } else {
            module_users(host, &provider)?
        };
        PeerCore {
            provider,
            stand_in: false,
            version: ib_core_version.clone(),
            srcversion: ib_core_srcversion,
            generation,
            generation_from: generation.and(generation_from),
            memory_peers_sysfs: None,
            holders,
            refcnt,
        }
    };
    Ok(IbCore {
        ib_core_loaded,
        ib_core_version,
        peer_core: Some(peer_core),
        kallsyms_readable: owner.is_ok(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::kernel::parse_kallsyms;

    #[test]
    fn mofed_versions_map_to_generations() {
        use CoreGeneration::*;
        for (v, g) in [
            ("4.0-2.0.0.1", Mofed5x),
            ("4.9-6.0.6", Legacy4x),
            ("5.0-2.1.8", Legacy4x),
            ("5.1-0.6.6.0", Mofed5x),
            ("5.1-2.5.8.0.60", Mofed5xUnmaps),
            ("5.4-1.0.3.0", Mofed5x),
            ("5.4-2.4.1.3", Mofed5x),
            ("5.4-3.0.3.0", Mofed5xUnmaps),
            ("5.9-0.5.6", Mofed5xUnmaps),
            ("24.10-1.1.4", Mofed5xUnmaps),
            (" 25.10-1.2.3\n", Mofed5xUnmaps),
        ] {
            assert_eq!(mofed_generation(v), Some(g), "{v}");
        }
        for v in [
            "abc",
            "",
            "24.10",
            "5.4",
            "7.1-1.0",
            "24.10-OFED.24.10.1",
            "+5.4-3",
            "5.4-3.x",
        ] {
            assert_eq!(mofed_generation(v), None, "{v}");
        }
    }

    #[test]
    fn the_stop_notifier_bug_spans_5_4_3_to_24_10() {
        use StopNotifierBug::*;
        let bug = |v: &str| MofedVersion::parse(v).and_then(|m| m.stop_notifier_bug());
        for (v, want) in [
            ("4.9-7.1.0.0", Absent),
            ("5.1-2.5.8.0.60", Absent),
            ("5.4-2.4.1.3", Absent),
            ("5.4-3", Present),
            ("5.4-3.0.3", Present),
            ("5.9-0.5.6.0", Present),
            ("23.10-1.1.9", Present),
            ("24.04-0.6.6.0", Present),
            ("24.10-3.2.5", Present),
            ("25.01-0.6.0", Present),
            ("25.04-0.6.1", Fixed),
            ("25.10-1.2.8.0", Fixed),
            ("26.01-1", Fixed),
        ] {
            assert_eq!(bug(v), Some(want), "{v}");
        }
        // Unknown shapes and majors MOFED never had: no claim.
        for v in [
            "24.10",
            "garbage",
            "3.4-1.0.0",
            "7.0-1",
            "24.10-3.2.5-rc1",
            "99999999999.1-1",
        ] {
            assert_eq!(bug(v), None, "{v}");
        }
    }

    #[test]
    fn versions_order_as_releases() {
        let v = |t: &str| MofedVersion::parse(t).unwrap();
        assert!(v("5.4-3.0.3") < v("5.10-0.1"));
        assert!(v("5.9-0.5.6") < v("23.04-0.5.3"));
        assert!(v("24.10-3.2.5") < v("25.04-0.6.1"));
    }

    fn read(text: &str) -> Kallsyms {
        Kallsyms::Read {
            found: parse_kallsyms(text, &symbols::ALL),
        }
    }

    #[test]
    fn kallsyms_markers_tell_the_generation() {
        use CoreGeneration::*;
        let reg = "0 T ib_register_peer_memory_client\t[ib_core]\n";
        let private = "0 T ib_get_peer_private_data\t[ib_core]\n";
        let stop = "0 T ib_umem_stop_invalidation_notifier\t[ib_uverbs]\n";
        assert_eq!(CoreGeneration::from_kallsyms(&read(reg)), Ok(Some(Mofed5x)));
        assert_eq!(
            CoreGeneration::from_kallsyms(&read(&format!("{reg}{private}"))),
            Ok(Some(Legacy4x))
        );
        assert_eq!(
            CoreGeneration::from_kallsyms(&read(&format!("{reg}{stop}"))),
            Ok(Some(Mofed5xUnmaps))
        );
        assert_eq!(
            CoreGeneration::from_kallsyms(&read(&format!("{reg}{private}{stop}"))),
            Ok(None)
        );
        let unreadable = Kallsyms::Unavailable {
            reason: "locked down".to_owned(),
        };
        assert_eq!(
            CoreGeneration::from_kallsyms(&unreadable),
            Err("locked down")
        );
        for g in [Legacy4x, Mofed5x, Mofed5xUnmaps] {
            assert_eq!(CoreGeneration::from_label(g.label()), Some(g));
        }
        assert_eq!(CoreGeneration::from_label("5x-unmap"), None);
    }

    #[test]
    fn the_exporter_is_whichever_module_kallsyms_names() {
        let sys = tempfile::tempdir().unwrap();
        let s = sys.path();
        for (rel, text) in [
            ("module/ib_core/version", "23.10-1.1.9\n"),
            ("module/ib_uverbs/refcnt", "3\n"),
        ] {
            std::fs::create_dir_all(s.join(rel).parent().unwrap()).unwrap();
            std::fs::write(s.join(rel), text).unwrap();
        }
        std::fs::create_dir_all(s.join("module/ib_uverbs/holders/nvidia_peermem")).unwrap();
        let host = Host::new(s, "/nonexistent");
        let k = read(
            "0 T ib_register_peer_memory_client\t[ib_uverbs]\n\
             0 T ib_umem_stop_invalidation_notifier\t[ib_uverbs]\n",
        );
        let core = ib_core(&host, &k).unwrap();
        let p = core.peer_core.unwrap();
        assert_eq!(p.provider, "ib_uverbs");
        assert_eq!(p.version.as_deref(), Some("23.10-1.1.9"));
        assert_eq!(p.generation, Some(CoreGeneration::Mofed5xUnmaps));
        assert_eq!(p.generation_from, Some(GenerationSource::Kallsyms));
        assert_eq!(p.holders, Some(vec!["nvidia_peermem".to_owned()]));
        assert_eq!(p.refcnt, Some(3));
        // The rig's stand-in, or any other name, is reported as it is.
        let k = read("0 T ib_register_peer_memory_client\t[mlnx_peer_core]\n");
        let p = ib_core(&host, &k).unwrap().peer_core.unwrap();
        assert_eq!(p.provider, "mlnx_peer_core");
        assert_eq!(p.holders, None);
        assert_eq!(p.generation, Some(CoreGeneration::Mofed5x));
        // The stand-in built under DOCA's name: the exporter is ib_uverbs, known as the stand-in
        // by the generation parameter every build has.
        let gen = s.join("module/ib_uverbs/parameters/generation");
        std::fs::create_dir_all(gen.parent().unwrap()).unwrap();
        std::fs::write(&gen, "5x-unmaps\n").unwrap();
        let k = read(
            "0 T ib_register_peer_memory_client\t[ib_uverbs]\n\
             0 T ib_umem_stop_invalidation_notifier\t[ib_uverbs]\n",
        );
        let p = ib_core(&host, &k).unwrap().peer_core.unwrap();
        assert!(p.stand_in && p.provider == "ib_uverbs" && p.version.is_none());
        assert_eq!(p.generation_from, Some(GenerationSource::Kallsyms));
        std::fs::remove_file(&gen).unwrap();
        // A broken refcnt is an error naming the file.
        std::fs::write(s.join("module/ib_uverbs/refcnt"), "lots\n").unwrap();
        let k = read("0 T ib_register_peer_memory_client\t[ib_uverbs]\n");
        let err = ib_core(&host, &k).unwrap_err().to_string();
        assert!(
            err.contains("ib_uverbs/refcnt") && err.contains("lots"),
            "{err}"
        );
    }
}
