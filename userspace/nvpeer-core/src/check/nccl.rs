//! A replay of the rules by which NCCL and UCX decide to use GPUDirect RDMA (CONTRACT 4.1):
//! which sysfs paths each version looks for, the environment variables that gate it, and the
//! topology cut-off `NCCL_NET_GDR_LEVEL`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::host::topo::NcclPathType;
use crate::host::Host;

/// A file whose existence (`access(path, F_OK)`) a consumer takes as "peer memory available".
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DetectionPath {
    MemoryPeersNvMem,
    MemoryPeersNvMemNc,
    /// Looked for by NCCL 2.9.8 ... 2.21.5; no module ever creates it.
    MemoryPeersNvidiaPeermem,
    ModuleNvidiaPeermem,
    ModuleNvPeerMem,
}

impl DetectionPath {
    pub const ALL: [Self; 5] = [
        Self::MemoryPeersNvMem,
        Self::MemoryPeersNvMemNc,
        Self::MemoryPeersNvidiaPeermem,
        Self::ModuleNvidiaPeermem,
        Self::ModuleNvPeerMem,
    ];

    /// The path relative to the sysfs root.
    pub fn sys_rel(self) -> &'static str {
        match self {
            Self::MemoryPeersNvMem => "kernel/mm/memory_peers/nv_mem/version",
            Self::MemoryPeersNvMemNc => "kernel/mm/memory_peers/nv_mem_nc/version",
            Self::MemoryPeersNvidiaPeermem => "kernel/mm/memory_peers/nvidia-peermem/version",
            Self::ModuleNvidiaPeermem => "module/nvidia_peermem/version",
            Self::ModuleNvPeerMem => "module/nv_peer_mem/version",
        }
    }

    /// The absolute path on a live host.
    pub fn display(self) -> String {
        format!("/sys/{}", self.sys_rel())
    }
}

/// A consumer (a version range of NCCL, or UCX) and the paths it looks for.
#[derive(Clone, Copy, Debug)]
pub struct Rule {
    /// The check id, e.g. `nccl>=2.23.4`.
    pub id: &'static str,
    pub name: &'static str,
    pub paths: &'static [DetectionPath],
}

use DetectionPath as P;

/// NCCL's peer-memory test by version (CONTRACT 4.1), oldest first.
pub const NCCL_RULES: [Rule; 4] = [
    Rule {
        id: "nccl<=2.9.6",
        name: "NCCL up to 2.9.6",
        paths: &[P::MemoryPeersNvMem],
    },
    Rule {
        id: "nccl=2.9.8..2.21.5",
        name: "NCCL 2.9.8 to 2.21.5",
        paths: &[P::MemoryPeersNvMem, P::MemoryPeersNvidiaPeermem],
    },
    Rule {
        id: "nccl=2.22.3",
        name: "NCCL 2.22.3",
        paths: &[P::MemoryPeersNvMem, P::MemoryPeersNvMemNc],
    },
    Rule {
        id: "nccl>=2.23.4",
        name: "NCCL 2.23.4 and later",
        paths: &[
            P::MemoryPeersNvMem,
            P::MemoryPeersNvMemNc,
            P::ModuleNvidiaPeermem,
        ],
    },
];

/// UCX's test (`src/uct/ib/base/ib_md.c`).
pub const UCX_RULE: Rule = Rule {
    id: "ucx",
    name: "UCX",
    paths: &[
        P::MemoryPeersNvMem,
        P::ModuleNvidiaPeermem,
        P::ModuleNvPeerMem,
    ],
};

/// Which detection paths exist on the host.
pub fn present_paths(host: &Host) -> Vec<DetectionPath> {
    DetectionPath::ALL
        .into_iter()
        .filter(|p| host.sys_exists(p.sys_rel()))
        .collect()
}

/// What one consumer concludes about peer memory.
#[derive(Clone, Debug, Serialize)]
pub struct PeerMemoryVerdict {
    pub consumer: &'static str,
    pub looked_for: Vec<String>,
    pub found: Vec<String>,
    /// The consumer would register GPU memory through the peer-memory client.
    pub peer_memory: bool,
}

/// A [`PeerMemoryVerdict`] as a saved report has it: the consumer is one of the rules' ids
/// ([`NCCL_RULES`], [`UCX_RULE`]).
#[derive(Deserialize)]
struct SavedVerdict {
    consumer: String,
    looked_for: Vec<String>,
    found: Vec<String>,
    peer_memory: bool,
}

impl<'de> Deserialize<'de> for PeerMemoryVerdict {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        SavedVerdict::deserialize(d)?
            .try_into()
            .map_err(serde::de::Error::custom)
    }
}

impl TryFrom<SavedVerdict> for PeerMemoryVerdict {
    type Error = String;

    fn try_from(v: SavedVerdict) -> Result<Self, String> {
        let consumer = NCCL_RULES
            .iter()
            .chain(std::iter::once(&UCX_RULE))
            .map(|r| r.id)
            .find(|id| *id == v.consumer)
            .ok_or_else(|| format!("unknown consumer {:?}", v.consumer))?;
        Ok(Self {
            consumer,
            looked_for: v.looked_for,
            found: v.found,
            peer_memory: v.peer_memory,
        })
    }
}

/// Replays one rule against the paths present.
pub fn replay(rule: &Rule, present: &[DetectionPath]) -> PeerMemoryVerdict {
    let found: Vec<String> = rule
        .paths
        .iter()
        .filter(|p| present.contains(p))
        .map(|p| p.display())
        .collect();
    PeerMemoryVerdict {
        consumer: rule.id,
        looked_for: rule.paths.iter().map(|p| p.display()).collect(),
        peer_memory: !found.is_empty(),
        found,
    }
}

/// NCCL's integer parameters (`ncclParam*`): `strtoll(value, &end, 0)` and the whole value must
/// be consumed, otherwise NCCL keeps the default.
pub fn parse_nccl_int(value: &str) -> Option<i64> {
    let (negative, body) = match value.as_bytes().first() {
        Some(b'-') => (true, &value[1..]),
        Some(b'+') => (false, &value[1..]),
        _ => (false, value),
    };
    let (digits, radix) =
        if let Some(hex) = body.strip_prefix("0x").or_else(|| body.strip_prefix("0X")) {
            (hex, 16)
        } else if body.len() > 1 && body.starts_with('0') {
            (&body[1..], 8)
        } else {
            (body, 10)
        };
    // from_str_radix alone would also take a second sign.
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    let magnitude = i64::from_str_radix(digits, radix).ok()?;
    Some(if negative { -magnitude } else { magnitude })
}

/// `NCCL_NET_GDR_LEVEL` as NCCL's `ncclGetLevel` reads it: a path type name (exact, upper
/// case), or a legacy integer (leading digits): 0 LOC, 1 PIX, 2 PXB, 3 PHB, 4 and above SYS.
/// `None`: NCCL does not understand the value and keeps its default.
pub fn parse_gdr_level(value: &str) -> Option<NcclPathType> {
    if let Some(t) = NcclPathType::ALL.into_iter().find(|t| t.label() == value) {
        return Some(t);
    }
    let digits: String = value.chars().take_while(char::is_ascii_digit).collect();
    if digits.is_empty() {
        return None;
    }
    let old = digits.parse::<u64>().unwrap_or(u64::MAX);
    Some(match old {
        0 => NcclPathType::Loc,
        1 => NcclPathType::Pix,
        2 => NcclPathType::Pxb,
        3 => NcclPathType::Phb,
        _ => NcclPathType::Sys,
    })
}

/// Where a setting came from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "from", content = "value", rename_all = "snake_case")]
pub enum Source {
    Default,
    Environment(String),
    /// Set, but NCCL cannot parse it and uses its default.
    Ignored(String),
    /// Not in the environment: a line `NAME=value` of one of NCCL's config files ([`conf_files`]).
    File {
        path: String,
        value: String,
    },
}

/// The variables that decide whether NCCL uses GPUDirect RDMA.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct NcclEnv {
    /// `NCCL_IB_DISABLE` != 0: NCCL does not use the IB transport at all (sockets only).
    pub ib_disable: bool,
    pub ib_disable_source: Source,
    /// `NCCL_NET_GDR_LEVEL`: the farthest path type that still gets GPUDirect RDMA (PXB by
    /// default on PCIe systems).
    pub gdr_level: NcclPathType,
    pub gdr_level_source: Source,
    /// `NCCL_NET_GDR_READ`: `None` = default (reads on for compute capability >= 8.0 or NVLink).
    pub gdr_read: Option<bool>,
    pub gdr_read_source: Source,
    /// `NCCL_DMABUF_ENABLE` (default 1).
    pub dmabuf_enable: bool,
    pub dmabuf_enable_source: Source,
    /// `NCCL_NET_GDR_C2C` (NCCL 2.27 and later, default 1): on a C2C platform a NIC attached to
    /// the GPU's CPU counts as distance C2C (within the default level) instead of PHB
    /// (`ncclTopoCheckGdr`, `src/graph/paths.cc`).
    #[serde(default = "default_true")]
    pub gdr_c2c: bool,
    #[serde(default = "default_source")]
    pub gdr_c2c_source: Source,
    /// `NCCL_IB_DATA_DIRECT` (default 1): a ConnectX-8 with a Data Direct DMA function is used
    /// through it (NCCL places the NIC at the DMA function's PCI path and registers dma-bufs with
    /// the PCIe mapping); 0: through the NIC function itself (`src/transport/net_ib`).
    #[serde(default = "default_true")]
    pub ib_data_direct: bool,
    #[serde(default = "default_source")]
    pub ib_data_direct_source: Source,
    /// NCCL's config files that exist, in the order NCCL reads them ([`conf_files`]); absent in
    /// facts of an older nvpeer, which read the environment only.
    #[serde(default)]
    pub conf_files: Vec<String>,
}

fn default_true() -> bool {
    true
}

fn default_source() -> Source {
    Source::Default
}

/// The default `NCCL_NET_GDR_LEVEL` on PCIe systems (`graph/paths.cc`).
pub const DEFAULT_GDR_LEVEL: NcclPathType = NcclPathType::Pxb;

/// The NCCL settings in `vars` (the process environment, or a test's map).
pub fn nccl_env(vars: &BTreeMap<String, String>) -> NcclEnv {
    nccl_env_with_files(vars, &[])
}

/// One of NCCL's config files as read: its path as the host names it and its `NAME=value` lines.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfFile {
    pub path: String,
    pub vars: BTreeMap<String, String>,
}

/// NCCL's config files, in the order NCCL reads them (`initEnv` and `setEnvFile`, NCCL's
/// `param.h`/`param.cc`): `NCCL_CONF_FILE` when set and not empty (NCCL 2.x later releases),
/// else `~/.nccl.conf` (`home`: the home directory of the user check runs as); then
/// `/etc/nccl.conf`. Each `NAME=value` line (everything before the first `=` is the name,
/// nothing trimmed) is set with `setenv(name, value, 0)`: only where not set before, so the
/// environment wins over the files and the first file over the second.
pub fn conf_files(
    host: &Host,
    vars: &BTreeMap<String, String>,
    home: Option<&str>,
) -> Vec<ConfFile> {
    let first = match vars.get("NCCL_CONF_FILE").filter(|v| !v.is_empty()) {
        Some(f) => Some(f.clone()),
        None => home.map(|h| format!("{}/.nccl.conf", h.trim_end_matches('/'))),
    };
    first
        .into_iter()
        .chain(std::iter::once("/etc/nccl.conf".to_owned()))
        .filter_map(|path| {
            let on_host = host.root_path(path.trim_start_matches('/'));
            let text = crate::host::read_optional(&on_host).ok().flatten()?;
            let vars = text
                .lines()
                .filter_map(|l| l.split_once('='))
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect();
            Some(ConfFile { path, vars })
        })
        .collect()
}

/// [`nccl_env`] with NCCL's config files under the environment, as NCCL layers them.
pub fn nccl_env_with_files(vars: &BTreeMap<String, String>, files: &[ConfFile]) -> NcclEnv {
    let lookup = |name: &str| -> Option<(String, Source)> {
        if let Some(v) = vars.get(name) {
            return Some((v.clone(), Source::Environment(v.clone())));
        }
        files.iter().find_map(|f| {
            let v = f.vars.get(name)?;
            Some((
                v.clone(),
                Source::File {
                    path: f.path.clone(),
                    value: v.clone(),
                },
            ))
        })
    };
    let int = |name: &str, default: i64| -> (i64, Source) {
        match lookup(name) {
            None => (default, Source::Default),
            Some((v, from)) => match parse_nccl_int(&v) {
                Some(n) => (n, from),
                None => (default, Source::Ignored(v)),
            },
        }
    };
    let (ib_disable, ib_disable_source) = int("NCCL_IB_DISABLE", 0);
    let (gdr_read, gdr_read_source) = int("NCCL_NET_GDR_READ", -2);
    let (dmabuf_enable, dmabuf_enable_source) = int("NCCL_DMABUF_ENABLE", 1);
    let (gdr_c2c, gdr_c2c_source) = int("NCCL_NET_GDR_C2C", 1);
    let (ib_data_direct, ib_data_direct_source) = int("NCCL_IB_DATA_DIRECT", 1);
    let (gdr_level, gdr_level_source) = match lookup("NCCL_NET_GDR_LEVEL") {
        None => (DEFAULT_GDR_LEVEL, Source::Default),
        Some((v, from)) => match parse_gdr_level(&v) {
            Some(l) => (l, from),
            None => (DEFAULT_GDR_LEVEL, Source::Ignored(v)),
        },
    };
    NcclEnv {
        ib_disable: ib_disable != 0,
        ib_disable_source,
        gdr_level,
        gdr_level_source,
        gdr_read: (gdr_read >= 0).then_some(gdr_read != 0),
        gdr_read_source,
        dmabuf_enable: dmabuf_enable != 0,
        dmabuf_enable_source,
        gdr_c2c: gdr_c2c != 0,
        gdr_c2c_source,
        ib_data_direct: ib_data_direct != 0,
        ib_data_direct_source,
        conf_files: files.iter().map(|f| f.path.clone()).collect(),
    }
}

/// `UCX_IB_GPU_DIRECT_RDMA`: `Some(false)` when set to no, `Some(true)` for yes, `None` for
/// try / unset (the default) or an unknown value.
pub fn ucx_gpu_direct_rdma(vars: &BTreeMap<String, String>) -> Option<bool> {
    match vars
        .get("UCX_IB_GPU_DIRECT_RDMA")?
        .to_ascii_lowercase()
        .as_str()
    {
        "y" | "yes" | "on" | "1" => Some(true),
        "n" | "no" | "off" | "0" => Some(false),
        _ => None,
    }
}

/// `UCX_CUDA_COPY_DMABUF` (UCX's cuda_copy `DMABUF`, a ternary, default `try`; `uct/cuda/cuda_copy/
/// cuda_copy_md.c`): `Some(false)` for no (UCX then registers no GPU memory as dma-buf),
/// `Some(true)` for yes, `None` for try / unset / an unknown value.
pub fn ucx_cuda_copy_dmabuf(vars: &BTreeMap<String, String>) -> Option<bool> {
    match vars
        .get("UCX_CUDA_COPY_DMABUF")?
        .to_ascii_lowercase()
        .as_str()
    {
        "y" | "yes" | "on" | "1" => Some(true),
        "n" | "no" | "off" | "0" => Some(false),
        _ => None,
    }
}

/// The environment variables nvpeer looks at, from the process environment.
pub fn relevant_env() -> BTreeMap<String, String> {
    std::env::vars()
        .filter(|(k, _)| {
            matches!(
                k.as_str(),
                "NCCL_IB_DISABLE"
                    | "NCCL_NET_GDR_LEVEL"
                    | "NCCL_NET_GDR_READ"
                    | "NCCL_DMABUF_ENABLE"
                    | "NCCL_NET_GDR_C2C"
                    | "NCCL_IB_DATA_DIRECT"
                    | "UCX_IB_GPU_DIRECT_RDMA"
                    | "UCX_CUDA_COPY_DMABUF"
                    | "NCCL_CONF_FILE"
            ) || crate::check::LIBRARY_ENV.contains(&k.as_str())
        })
        .collect()
}

/// NCCL's topology cut-off for one GPU-NIC pair: GPUDirect RDMA only when the path type is at
/// most `NCCL_NET_GDR_LEVEL` (`ncclTopoCheckGdr`).
pub fn within_gdr_level(path: NcclPathType, level: NcclPathType) -> bool {
    path <= level
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn vars(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// Every NCCL range and UCX, against every combination of the five paths.
    #[test]
    fn replays_every_rule_against_every_combination_of_paths() {
        for mask in 0u32..(1 << DetectionPath::ALL.len()) {
            let present: Vec<DetectionPath> = DetectionPath::ALL
                .into_iter()
                .enumerate()
                .filter(|(i, _)| mask & (1 << i) != 0)
                .map(|(_, p)| p)
                .collect();
            let has = |p: DetectionPath| present.contains(&p);
            let expected = [
                has(P::MemoryPeersNvMem),
                has(P::MemoryPeersNvMem) || has(P::MemoryPeersNvidiaPeermem),
                has(P::MemoryPeersNvMem) || has(P::MemoryPeersNvMemNc),
                has(P::MemoryPeersNvMem)
                    || has(P::MemoryPeersNvMemNc)
                    || has(P::ModuleNvidiaPeermem),
            ];
            for (rule, want) in NCCL_RULES.iter().zip(expected) {
                let v = replay(rule, &present);
                assert_eq!(v.peer_memory, want, "{} with {present:?}", rule.id);
                assert_eq!(v.found.is_empty(), !want);
            }
            let ucx = replay(&UCX_RULE, &present);
            assert_eq!(
                ucx.peer_memory,
                has(P::MemoryPeersNvMem) || has(P::ModuleNvidiaPeermem) || has(P::ModuleNvPeerMem)
            );
        }
    }

    /// The shapes that matter in practice.
    #[test]
    fn named_situations() {
        // nvidia_peermem on a kernel where MOFED creates no memory_peers (nccl#1939).
        let only_module = [P::ModuleNvidiaPeermem];
        let v: Vec<bool> = NCCL_RULES
            .iter()
            .map(|r| replay(r, &only_module).peer_memory)
            .collect();
        assert_eq!(v, [false, false, false, true]);
        assert!(replay(&UCX_RULE, &only_module).peer_memory);
        // nv_peer_mem without memory_peers: only UCX sees it.
        let legacy = [P::ModuleNvPeerMem];
        assert!(NCCL_RULES.iter().all(|r| !replay(r, &legacy).peer_memory));
        assert!(replay(&UCX_RULE, &legacy).peer_memory);
        // 560+ style with memory_peers: everyone.
        let full = [P::MemoryPeersNvMem, P::ModuleNvidiaPeermem];
        assert!(NCCL_RULES.iter().all(|r| replay(r, &full).peer_memory));
        // Only nv_mem_nc (persistent_api_support=0 with a broken nv_mem): 2.22.3 and later.
        let nc = [P::MemoryPeersNvMemNc];
        let v: Vec<bool> = NCCL_RULES
            .iter()
            .map(|r| replay(r, &nc).peer_memory)
            .collect();
        assert_eq!(v, [false, false, true, true]);
    }

    #[test]
    fn gdr_level_names_and_legacy_integers() {
        assert_eq!(parse_gdr_level("PIX"), Some(NcclPathType::Pix));
        assert_eq!(parse_gdr_level("PHB"), Some(NcclPathType::Phb));
        assert_eq!(parse_gdr_level("SYS"), Some(NcclPathType::Sys));
        assert_eq!(parse_gdr_level("LOC"), Some(NcclPathType::Loc));
        assert_eq!(parse_gdr_level("0"), Some(NcclPathType::Loc));
        assert_eq!(parse_gdr_level("1"), Some(NcclPathType::Pix));
        assert_eq!(parse_gdr_level("2"), Some(NcclPathType::Pxb));
        assert_eq!(parse_gdr_level("3"), Some(NcclPathType::Phb));
        assert_eq!(parse_gdr_level("4"), Some(NcclPathType::Sys));
        assert_eq!(parse_gdr_level("5"), Some(NcclPathType::Sys));
        assert_eq!(
            parse_gdr_level("99999999999999999999"),
            Some(NcclPathType::Sys)
        );
        assert_eq!(parse_gdr_level("pxb"), None);
        assert_eq!(parse_gdr_level("NODE"), None);
        assert_eq!(parse_gdr_level("-1"), None);
        assert_eq!(parse_gdr_level(""), None);
    }

    #[test]
    fn the_gdr_level_cuts_off_by_distance() {
        use NcclPathType::*;
        for (path, level, want) in [
            (Pix, Pxb, true),
            (Pxb, Pxb, true),
            (Phb, Pxb, false),
            (Sys, Pxb, false),
            (Phb, Phb, true),
            (Sys, Sys, true),
            (Pix, Loc, false),
            (Pix, Pix, true),
            (Pxb, Pix, false),
        ] {
            assert_eq!(
                within_gdr_level(path, level),
                want,
                "{path} at level {level}"
            );
        }
    }

    #[test]
    fn reads_the_nccl_environment() {
        let e = nccl_env(&BTreeMap::new());
        assert!(!e.ib_disable && e.dmabuf_enable);
        assert_eq!(e.gdr_level, NcclPathType::Pxb);
        assert_eq!(e.gdr_read, None);
        let e = nccl_env(&vars(&[
            ("NCCL_IB_DISABLE", "1"),
            ("NCCL_NET_GDR_LEVEL", "SYS"),
            ("NCCL_NET_GDR_READ", "0"),
            ("NCCL_DMABUF_ENABLE", "0"),
        ]));
        assert!(e.ib_disable && !e.dmabuf_enable);
        assert_eq!(e.gdr_level, NcclPathType::Sys);
        assert_eq!(e.gdr_read, Some(false));
        let e = nccl_env(&vars(&[
            ("NCCL_IB_DISABLE", "yes"),
            ("NCCL_NET_GDR_LEVEL", "near"),
        ]));
        assert!(!e.ib_disable);
        assert_eq!(e.ib_disable_source, Source::Ignored("yes".into()));
        assert_eq!(e.gdr_level_source, Source::Ignored("near".into()));
    }

    #[test]
    fn nccl_integers_follow_strtoll_base_0() {
        assert_eq!(parse_nccl_int("1"), Some(1));
        assert_eq!(parse_nccl_int("-2"), Some(-2));
        assert_eq!(parse_nccl_int("0x10"), Some(16));
        assert_eq!(parse_nccl_int("010"), Some(8));
        assert_eq!(parse_nccl_int("0"), Some(0));
        assert_eq!(parse_nccl_int("1 "), None);
        assert_eq!(parse_nccl_int("one"), None);
        assert_eq!(parse_nccl_int(""), None);
    }

    #[test]
    fn ucx_switch() {
        assert_eq!(
            ucx_gpu_direct_rdma(&vars(&[("UCX_IB_GPU_DIRECT_RDMA", "no")])),
            Some(false)
        );
        assert_eq!(
            ucx_gpu_direct_rdma(&vars(&[("UCX_IB_GPU_DIRECT_RDMA", "YES")])),
            Some(true)
        );
        assert_eq!(
            ucx_gpu_direct_rdma(&vars(&[("UCX_IB_GPU_DIRECT_RDMA", "try")])),
            None
        );
        assert_eq!(ucx_gpu_direct_rdma(&BTreeMap::new()), None);
    }

    proptest! {
        #[test]
        fn env_parsers_never_panic(s in "\\PC{0,24}") {
            let _ = parse_gdr_level(&s);
            let _ = parse_nccl_int(&s);
        }
    }
}
