// SPDX-License-Identifier: MIT OR Apache-2.0
//! What `check` knows about a host: [`Facts`], the `facts` of `nvpeer check --json`, and what
//! it is read from besides sysfs and procfs ([`Inputs`]). Fields added after `check --facts`
//! came are `#[serde(default)]`, so the facts of an older release are still judged (what they
//! lack reads as unknown).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::check::nccl::{self, NcclEnv, PeerMemoryVerdict};
use crate::host::kernel::{Iommu, Kallsyms};
use crate::host::limits::Memlock;
use crate::host::nvidia_proc::NvidiaProc;
use crate::host::pci::{Acs, Bar, KnownDevice, PciAddress};
use crate::host::peermem::LoadedModule;
use crate::host::providers::{IbCore, NvidiaDriver};
use crate::host::rdma::RdmaDevice;
use crate::host::topo::{NcclPathType, PathClass, Topology};
use crate::host::verbs::{self, DmabufProbe, Verbs};
use crate::host::Host;

/// What the checks need beyond sysfs and procfs: the process environment and probes that ask
/// the running system directly.
#[derive(Clone, Debug)]
pub struct Inputs {
    /// `NCCL_*` and `UCX_*` variables.
    pub env: BTreeMap<String, String>,
    /// The home directory whose `.nccl.conf` NCCL reads (`HOME` of the live process; `None`
    /// for fixture trees).
    pub home: Option<String>,
    /// `None`: not measured.
    pub memlock: Option<Memlock>,
    pub verbs: Verbs,
    /// The variables of [`Facts::gin_env`] and the names of the job markers
    /// (`KUBERNETES_SERVICE_HOST`, `SLURM_JOB_ID`) that are set.
    pub job_env: BTreeMap<String, String>,
}

/// The variables `check` reads for GPU-initiated networking and GDRCopy.
pub const GIN_ENV: [&str; 6] = [
    "NCCL_GDRCOPY_ENABLE",
    "NCCL_GIN_GDAKI_NIC_HANDLER",
    "GDRCOPY_USE_DMABUF_MMAP",
    "NCCL_GIN_ENABLE",
    "NVSHMEM_IB_ENABLE_IBGDA",
    "NVSHMEM_DISABLE_GDRCOPY",
];

/// The settings of UCX, NVSHMEM and libfabric that decide their modes ([`LibraryFacts`]), and
/// `NVSHMEM_CONF_FILE`, which names NVSHMEM's config file.
pub const LIBRARY_ENV: [&str; 13] = [
    "UCX_TLS",
    "UCX_IB_GPU_DIRECT_RDMA",
    "UCX_CUDA_COPY_DMABUF",
    "UCX_IB_REG_METHODS",
    "NVSHMEM_REMOTE_TRANSPORT",
    "NVSHMEM_IB_ENABLE_IBGDA",
    "NVSHMEM_IBGDA_NIC_HANDLER",
    "NVSHMEM_DISABLE_GDRCOPY",
    "NVSHMEM_CONF_FILE",
    "FI_PROVIDER",
    "FI_EFA_USE_DEVICE_RDMA",
    "FI_HMEM_CUDA_USE_DMABUF",
    "FI_HMEM_DISABLE_P2P",
];

/// The variables whose presence says that `check` runs in a Kubernetes pod or a Slurm job.
pub const JOB_MARKER_ENV: [&str; 2] = ["KUBERNETES_SERVICE_HOST", "SLURM_JOB_ID"];

impl Inputs {
    /// The running process and host: the environment (the caller's, as on any host), and when
    /// `host` is the live `/sys` and `/proc` libibverbs and getrlimit (asking this kernel and
    /// this process about another host's trees would mix two hosts). `as_job`: the caller is
    /// the job being judged (`check --as-job`), so its own limit is measured whatever the trees.
    pub fn live(host: &Host, as_job: bool) -> Self {
        let foreign = host.foreign_roots();
        Self {
            env: nccl::relevant_env(),
            home: std::env::var("HOME").ok().filter(|h| !h.is_empty()),
            memlock: (foreign.is_none() || as_job).then(Memlock::current),
            verbs: match foreign {
                None => verbs::probe(),
                Some(why) => Verbs::Skipped {
                    reason: why.to_owned(),
                },
            },
            job_env: std::env::vars()
                .filter(|(k, _)| {
                    GIN_ENV.contains(&k.as_str()) || JOB_MARKER_ENV.contains(&k.as_str())
                })
                .map(|(k, v)| {
                    // A marker's value (an address, a job id) differs per host: only its name counts.
                    let v = if JOB_MARKER_ENV.contains(&k.as_str()) {
                        "set".to_owned()
                    } else {
                        v
                    };
                    (k, v)
                })
                .collect(),
        }
    }

    /// Nothing measured: for fixture trees.
    pub fn fixture() -> Self {
        Self {
            env: BTreeMap::new(),
            home: None,
            memlock: None,
            verbs: Verbs::Skipped {
                reason: "fixture tree".to_owned(),
            },
            job_env: BTreeMap::new(),
        }
    }
}

/// One peer client in `/sys/kernel/mm/memory_peers`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PeerClientInfo {
    pub name: String,
    pub version: Option<String>,
}

/// A GPU with its BAR1.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct GpuFacts {
    pub label: String,
    pub address: PciAddress,
    /// PCI vendor and device id.
    #[serde(with = "crate::hexid::u16")]
    pub vendor: u16,
    #[serde(with = "crate::hexid::u16")]
    pub device: u16,
    pub numa_node: Option<i32>,
    pub bar1: Option<Bar>,
}

/// ACS on one bridge of a GPU-NIC path.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct AcsFinding {
    pub bridge: PciAddress,
    pub gpu: String,
    pub nic: String,
    pub acs: Option<Acs>,
    /// The names of the enabled control bits that hurt P2P ([`Acs::p2p_hurting_bits`]).
    pub redirecting: Vec<String>,
}

/// What the DMA-BUF path (no peer-memory module needed) would have, host-wide.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DmabufFacts {
    /// `ib_umem_dmabuf_get` is exported (kernel >= 5.12 ib_core); `None` = unknown.
    pub kernel: Option<bool>,
    /// The GPU driver is the open kernel module; `None` = unknown.
    pub gpu_open_kernel_module: Option<bool>,
    /// NCCL's probe per verbs device.
    pub nics: BTreeMap<String, DmabufProbe>,
    pub nccl_dmabuf_enable: bool,
}

/// Why a pair is one: `topo`'s nearest NIC of the GPU, or the NIC of the GPU's
/// Grace-Blackwell DMA-Direct complex (`rdma_topo`'s pairing).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PairSource {
    Nearest,
    DmaDirect,
}

/// One GPU-NIC pair with what the path rules need of its place in the PCIe tree.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PairFacts {
    pub gpu: String,
    pub nic: String,
    pub source: PairSource,
    pub class: PathClass,
    pub nccl_class: NcclPathType,
    /// GPU and NIC have a bridge in common (NVIDIA's `nv_pci_has_common_pci_switch`: the
    /// upstream bridges of both meet below the host bridge).
    pub common_bridge: bool,
    /// The GPU hangs off a Grace root port and is a Grace superchip's GPU by its model (GH200,
    /// GB200, GB300; model unknown: the root port alone): a coherent platform, where the NIC
    /// reaches GPU memory through the CPU's C2C link unless a PCIe mapping is asked for. An
    /// inference (NVIDIA's driver does not show its `coherent` flag): a PCIe card below a Grace
    /// root port is not coherent.
    pub coherent: bool,
    /// The NIC's PCI driver (`mlx5_core`, `efa`).
    pub nic_driver: Option<String>,
    /// The NIC's PCI vendor and device id.
    #[serde(with = "crate::hexid::u16")]
    pub nic_vendor: u16,
    #[serde(with = "crate::hexid::u16")]
    pub nic_device: u16,
    pub gpu_iommu_group: Option<String>,
    pub nic_iommu_group: Option<String>,
    /// The PCIe links of the GPU and of the NIC (absent in facts of an older nvpeer).
    #[serde(default)]
    pub gpu_link: Option<crate::host::pci::PcieLink>,
    #[serde(default)]
    pub nic_link: Option<crate::host::pci::PcieLink>,
    /// The PCIe links between root ports and switches that the pair's traffic crosses (not the
    /// GPU's and NIC's own links): each with its speed and width now and the most both its
    /// ends can (absent in facts of an older nvpeer).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub path_links: Vec<PathLink>,
    /// The links on the pair's path (the GPU's, the NIC's, and those between) whose files
    /// could not be read or parsed, each with the file and why: whether the pair runs below
    /// its devices' link is unknown (absent in facts of an older nvpeer).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unknown_links: Vec<String>,
}

/// A PCIe link on a GPU-NIC path between a downstream-facing port (a root port or a switch's
/// downstream port) and the switch's upstream port below it. `link.max_*` are the most both
/// ends can (the lower of their `max_link_*`): below that, the link trained down.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PathLink {
    pub port: crate::host::pci::PciAddress,
    pub device: crate::host::pci::PciAddress,
    pub link: crate::host::pci::PcieLink,
}

impl PathLink {
    /// Fewer lanes or a lower speed than both ends can.
    pub fn degraded(&self) -> bool {
        self.link.narrow() || self.link.slow()
    }
}

/// The role `rdma_topo` gives a Grace root port or ConnectX switch port, and the ACS mask
/// (bit 6 .. bit 0, `x` = either) it requires of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AcsRole {
    /// The root port above a DMA-Direct complex: Source Validation off, so the segment is one
    /// IOMMU group.
    ComplexRootPort,
    /// The downstream port toward the ConnectX-8 DMA function: Request Redirect off.
    TowardDma,
    /// The downstream port toward the GPU: Completion Redirect off.
    TowardGpu,
    /// Any other Grace root port or ConnectX switch port: the kernel's default.
    Other,
}

impl AcsRole {
    /// `rdma_topo`'s mask (`compute_acs`).
    pub fn mask(self) -> &'static str {
        match self {
            Self::ComplexRootPort => "xx111x0",
            Self::TowardDma => "xx110x1",
            Self::TowardGpu => "xx101x1",
            Self::Other => "xx111x1",
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            Self::ComplexRootPort => "root port of a DMA-Direct complex",
            Self::TowardDma => "switch port toward the DMA function",
            Self::TowardGpu => "switch port toward the GPU",
            Self::Other => "Grace or ConnectX bridge",
        }
    }
}

/// ACS of one bridge whose ACS `rdma_topo` manages.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AcsPort {
    pub bridge: PciAddress,
    pub kind: KnownDevice,
    pub role: AcsRole,
    /// `None`: no `config` file.
    pub acs: Option<Acs>,
}

/// `rdma_topo`'s DMA-Direct complex: Grace root port -> ConnectX switch -> {the ConnectX-8 DMA
/// function, ConnectX switch -> ConnectX switch -> the GPU}, and the ConnectX-8 NIC function
/// with the same VPD V3 (board UUID) wherever it sits.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DmaDirectComplex {
    pub gpu: String,
    pub gpu_address: PciAddress,
    pub dma_function: PciAddress,
    /// The NIC's RDMA device and PCI function; `None` when no function shares the V3.
    pub nic: Option<String>,
    pub nic_address: Option<PciAddress>,
    pub dma_iommu_group: Option<String>,
    pub gpu_iommu_group: Option<String>,
}

/// A Grace platform as sysfs shows it: `None` in [`Facts::grace`] where no Grace root port is.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GraceFacts {
    pub root_ports: Vec<PciAddress>,
    /// ConnectX-8 DMA functions, ConnectX switches, BlueField-3: what was recognised, by address.
    pub devices: BTreeMap<String, KnownDevice>,
    pub complexes: Vec<DmaDirectComplex>,
    pub acs_ports: Vec<AcsPort>,
    /// DMA functions whose surroundings are not `rdma_topo`'s shape, with why.
    pub unrecognised: Vec<String>,
    /// Root ports of ids nvpeer does not list, recognised as Grace's by what is below them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub root_ports_by_layout: Vec<String>,
}

/// A Vera platform (Vera Rubin) as sysfs shows it: `None` in [`Facts::vera`] where no Vera root
/// port is. rdma_topo's "NUMA-based" shape (rdma-core PR #1779): GPUs and NIC functions each
/// directly below a CPU root port, not behind a shared switch.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VeraFacts {
    pub root_ports: Vec<PciAddress>,
    /// The root ports among [`VeraFacts::root_ports`] of an id this nvpeer does not list, each
    /// with why it was taken as Vera's (a Rubin GPU below it, or a NIC function of a board that
    /// also sits below a Vera root port): as [`GraceFacts::root_ports_by_layout`]. Absent in the
    /// facts of an older nvpeer.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub root_ports_by_layout: Vec<String>,
    /// The other NVIDIA root ports of an id this nvpeer does not list, not Grace's, with a
    /// ConnectX function below them, each named with those functions: not shown to be Vera's
    /// (the `vera` row is unknown for them). Absent when there is none, and in the facts of an
    /// older nvpeer.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub root_ports_unrecognised: Vec<String>,
    /// The GPUs and ConnectX NIC functions below a Vera root port.
    pub functions: Vec<VeraFunction>,
}

/// A GPU or ConnectX NIC function below a Vera root port, with what rdma_topo's Vera rules look
/// at: its IOMMU group (alone in it?) and, for a NIC function, ATS.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VeraFunction {
    pub address: PciAddress,
    /// `GPU0`, the NIC's RDMA device (`mlx5_0`), or the address where it has none.
    pub name: String,
    /// `gpu`, or the NIC's kind (`connectx9`, `connectx8`, `connectx7`).
    pub kind: String,
    pub root_port: PciAddress,
    pub iommu_group: Option<String>,
    /// How many functions `/sys/kernel/iommu_groups/<group>/devices` lists; `None`: no group or
    /// not read.
    pub iommu_group_size: Option<usize>,
    /// ATS enabled (NIC functions; from the ATS capability in config space); `None`: a GPU, or
    /// config space not readable beyond 64 bytes (not root).
    pub ats: Option<bool>,
    /// NIC functions: the serial number of the board it is on (the `SN` keyword of its `vpd`'s
    /// read-only section), by which rdma_topo groups NIC functions into boards. `Some(None)`
    /// (JSON null): a GPU, or `vpd` absent, unreadable (not root) or malformed: unknown. `None`
    /// (the key absent): not recorded, the facts of an older nvpeer.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "recorded"
    )]
    pub board_sn: Option<Option<String>>,
}

/// A field that is there, null or not: `Some` (with `#[serde(default)]`, an absent one is
/// `None`), so that facts of an older nvpeer, without it, are told from a value it left unknown.
fn recorded<'de, D, T>(d: D) -> std::result::Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}

/// The gdrdrv module file that `modprobe gdrdrv` would load, as `modinfo` reads it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GdrdrvFile {
    /// The file (absolute, on this host).
    pub path: String,
    /// `version=`.
    pub version: Option<String>,
    /// `depends=`, split at commas: `nvidia` when built against the driver, `nv-p2p-dummy`
    /// when built without its sources.
    pub depends: Vec<String>,
    /// `description=`: "GDRCopy kernel-mode driver built for <flavour> NVIDIA driver".
    pub description: Option<String>,
    /// Why `modinfo` could not read it.
    pub error: Option<String>,
}

/// A device node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceNode {
    pub path: String,
    /// The permission bits (`0o666`).
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    /// The major number of a character device; `None`: not a character device.
    pub major: Option<u32>,
}

/// One installed `libgdrapi.so.<major>.<minor>`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GdrapiLibrary {
    pub path: String,
    /// `2.5` from the file name (gdrcopy's `src/Makefile`: `libgdrapi.so.$(LIB_VER)`).
    pub version: String,
}

/// GDRCopy on this host: its kernel module gdrdrv, the device node, the library.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GdrcopyFacts {
    /// `/sys/module/gdrdrv` exists.
    pub loaded: bool,
    /// `/sys/module/gdrdrv/version`.
    pub version: Option<String>,
    /// `/proc/driver/gdrdrv/params` (gdrdrv 2.4 and later): `Version`, `Built for NVIDIA driver
    /// flavor` (`opensource` | `proprietary`), `Use persistent mapping`, `dbg_enabled`,
    /// `info_enabled`; the module's parameters are not in sysfs (mode 0).
    pub params: Option<BTreeMap<String, String>>,
    /// `/sys/module/nv_p2p_dummy` exists: the dummy NVIDIA P2P module gdrcopy builds when the
    /// driver's sources are missing is loaded.
    pub dummy_loaded: bool,
    /// The gdrdrv file `modprobe` would load (`modules.dep` of the running release).
    pub installed: Option<GdrdrvFile>,
    /// `/dev/gdrdrv`; `None`: absent.
    pub device: Option<DeviceNode>,
    /// gdrdrv's major number in `/proc/devices`.
    pub major: Option<u32>,
    /// Every `libgdrapi.so.<major>.<minor>` in the usual library directories.
    pub libraries: Vec<GdrapiLibrary>,
}

/// A process that starts jobs (`slurmd`, `containerd`, `dockerd`, `crio`, `kubelet`): the
/// memlock limit it passes on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobStarter {
    pub pid: u32,
    /// `/proc/<pid>/comm`.
    pub comm: String,
    /// `Max locked memory` of `/proc/<pid>/limits`; `None`: not readable.
    pub memlock: Option<Memlock>,
    /// Its systemd unit, from `/proc/<pid>/cgroup` (`containerd.service`).
    pub unit: Option<String>,
    /// `LimitMEMLOCK=` as the unit's files set it (the last assignment of the unit file and its
    /// drop-ins), and the file that set it.
    pub unit_limit_memlock: Option<String>,
    pub unit_limit_from: Option<String>,
}

/// The job starters of this host and systemd's default limit.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobStarters {
    pub starters: Vec<JobStarter>,
    /// `DefaultLimitMEMLOCK=` of `/etc/systemd/system.conf` (and `system.conf.d`), what units
    /// without `LimitMEMLOCK=` get.
    pub default_limit_memlock: Option<String>,
}

/// The process that runs `check` (`/proc/self`), for `check --as-job` in a pod or job step.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessFacts {
    /// `CapEff` of `/proc/self/status`.
    pub cap_eff: Option<u64>,
    /// The real uid (`Uid:`, first value).
    pub uid: Option<u32>,
    /// `/proc/self/cgroup`, line by line.
    pub cgroup: Vec<String>,
    /// The soft `Max open files` of `/proc/self/limits` (`u64::MAX`: unlimited); `None`: not
    /// read (facts of an older nvpeer).
    #[serde(default)]
    pub open_files_soft: Option<u64>,
    /// What says where it runs: `/.dockerenv`, `/run/.containerenv`, and the variables
    /// `KUBERNETES_SERVICE_HOST` and `SLURM_JOB_ID` (their names only).
    pub markers: Vec<String>,
}

/// What says that GPUDirect RDMA cannot work on this platform, whatever is loaded.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CapabilityFacts {
    /// `family` of `/sys/bus/soc/devices/soc*` (`Tegra` on Jetson, IGX, DRIVE).
    pub soc_family: Option<String>,
    /// A confidential VM: `tdx` (the `tdx_guest` CPU flag or `/sys/class/misc/tdx_guest`) or
    /// `sev-snp` (`/sys/class/misc/sev-guest`).
    pub confidential: Option<String>,
    /// GPU device minor -> its MIG GPU instances (`/proc/driver/nvidia/capabilities/gpu<minor>/
    /// mig/gi<id>`).
    pub mig: BTreeMap<u32, Vec<u32>>,
}

/// What CDMM needs of the host besides the driver (`../shared/FIELD.md` U1).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CdmmFacts {
    /// `/sys/module/nvidia_uvm` exists: its page map of the GPU is what CDMM mappings need.
    pub nvidia_uvm_loaded: bool,
    /// `CONFIG_ZONE_DEVICE=y` in the running kernel's config; `None`: no config found.
    pub zone_device: Option<bool>,
    /// The config file it was read from.
    pub kernel_config: Option<String>,
}

/// One setting of UCX, NVSHMEM or libfabric as the library would read it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LibrarySetting {
    pub value: String,
    /// The config file it was read from; `None`: the environment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
}

/// An installed UCX, NVSHMEM or libfabric and its release.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstalledLibrary {
    /// `ucx`, `nvshmem`, `libfabric`.
    pub library: String,
    pub version: String,
    /// The file the release was read from (`ucx.pc`, `libnvshmem_host.so.3.4.5`, `libfabric.pc`).
    pub path: String,
}

/// What decides the modes of UCX, NVSHMEM and libfabric's EFA provider (issue 47): their
/// settings, where each library reads them, and their installed releases.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LibraryFacts {
    /// Name -> value and where it was set ([`super::gather`]'s `libraries`: the environment
    /// first, then UCX's `ucx.conf` and NVSHMEM's config files).
    pub settings: BTreeMap<String, LibrarySetting>,
    /// The config files that exist and were read, in the order read.
    pub conf_files: Vec<String>,
    pub installed: Vec<InstalledLibrary>,
}

impl LibraryFacts {
    /// The newest installed release of `library`.
    pub fn version(&self, library: &str) -> Option<&InstalledLibrary> {
        self.installed
            .iter()
            .filter(|l| l.library == library)
            .max_by_key(|l| release_key(&l.version))
    }
}

/// A release as numbers for ordering (`3.4.5` -> `[3, 4, 5]`; a part that is not a number: 0).
pub(crate) fn release_key(version: &str) -> Vec<u64> {
    version
        .split(['.', '-'])
        .map(|p| p.parse().unwrap_or(0))
        .collect()
}

/// Our module's counters that `peer_clients` shows when `memory_peers` is absent.
pub const MODULE_COUNTERS: [&str; 3] = ["acquired", "registrations", "live_contexts"];

/// Everything the checks are made from ([`super::gather`]), and all that the rules read: the
/// `facts` of `nvpeer check --json`, which [`super::read_facts`] reads back.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Facts {
    pub modules: Vec<LoadedModule>,
    /// `None` when `/sys/kernel/mm/memory_peers` does not exist.
    pub memory_peers: Option<Vec<PeerClientInfo>>,
    pub nvidia: Option<NvidiaDriver>,
    /// `/proc/driver/nvidia`: version (flavour, release), params, gpus/*/information.
    #[serde(default)]
    pub nvidia_proc: Option<NvidiaProc>,
    pub ib_core: Option<IbCore>,
    pub kallsyms: Kallsyms,
    /// `/proc/sys/kernel/osrelease`.
    #[serde(default)]
    pub kernel_release: Option<String>,
    /// `/proc/cpuinfo` has the `hypervisor` flag: a VM, where NVIDIA's driver treats its GPUs as
    /// passed through; `None` = unknown (no cpuinfo, or an architecture without the flag).
    #[serde(default)]
    pub hypervisor: Option<bool>,
    pub rdma_devices: Vec<RdmaDevice>,
    pub verbs: Verbs,
    pub gpus: Vec<GpuFacts>,
    pub topology: Option<Topology>,
    /// The GPU-NIC pairs whose paths are judged.
    #[serde(default)]
    pub pairs: Vec<PairFacts>,
    #[serde(default)]
    pub grace: Option<GraceFacts>,
    /// A Vera platform (absent in facts of an older nvpeer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vera: Option<VeraFacts>,
    pub iommu: Option<Iommu>,
    pub acs: Vec<AcsFinding>,
    pub memlock: Option<Memlock>,
    pub nccl_env: NcclEnv,
    pub nccl: Vec<PeerMemoryVerdict>,
    pub ucx: PeerMemoryVerdict,
    /// `UCX_IB_GPU_DIRECT_RDMA`: `Some(false)` = disabled by the user.
    pub ucx_gpu_direct_rdma: Option<bool>,
    /// `UCX_CUDA_COPY_DMABUF`: `Some(false)` = UCX registers no dma-buf.
    #[serde(default)]
    pub ucx_cuda_copy_dmabuf: Option<bool>,
    pub dmabuf: DmabufFacts,
    /// `/sys/module/efa_nv_peermem` exists: AWS's GPUDirect shim for EFA is loaded.
    #[serde(default)]
    pub efa_nv_peermem: bool,
    /// Our modules' [`MODULE_COUNTERS`] as written: module name -> counter -> value.
    pub module_counters: BTreeMap<String, BTreeMap<String, String>>,
    /// The build provenance of the module file `modprobe nvidia_peermem` would load, as
    /// [`crate::host::provenance::gather`] reads it (`modinfo`, the exporters' files); `None`: no
    /// `nvidia_peermem` in `modules.dep`. Unreadable: `unreadable["provenance"]`.
    #[serde(default)]
    pub provenance: Option<crate::host::provenance::ProvenanceFacts>,
    /// What `modprobe nvidia-peermem` would load (depmod's entry); `None`: no `modules.dep`.
    #[serde(default)]
    pub modprobe_target: Option<crate::host::modprobe::ModprobeTarget>,
    /// GDRCopy (`None`: facts of a release before these were gathered, as for every field
    /// below).
    #[serde(default)]
    pub gdrcopy: Option<GdrcopyFacts>,
    /// The processes that start jobs and their memlock limits.
    #[serde(default)]
    pub job_starters: Option<JobStarters>,
    /// The process that ran `check`.
    #[serde(default)]
    pub process: Option<ProcessFacts>,
    /// Platform markers: Tegra, confidential VM, MIG instances.
    #[serde(default)]
    pub capability: Option<CapabilityFacts>,
    /// `nvidia_uvm` and `CONFIG_ZONE_DEVICE`, which CDMM mappings need.
    #[serde(default)]
    pub cdmm: Option<CdmmFacts>,
    /// The environment variables of GPU-initiated networking and GDRCopy that were set
    /// (`NCCL_GDRCOPY_ENABLE`, `NCCL_GIN_ENABLE`, `NVSHMEM_IB_ENABLE_IBGDA`,
    /// `NVSHMEM_DISABLE_GDRCOPY`).
    #[serde(default)]
    pub gin_env: BTreeMap<String, String>,
    /// UCX's, NVSHMEM's and libfabric's settings and releases (`None`: facts of an nvpeer
    /// before them; their modes then say the settings were not recorded).
    #[serde(default)]
    pub libraries: Option<LibraryFacts>,
    /// The facts that could not be read, by facts field (`modules`, `memory_peers`, `nvidia`,
    /// `nvidia_proc`, `ib_core`, `rdma_devices`, `gpus`, `bars` for the GPUs' BAR1, `iommu`,
    /// `acs`, `pairs`, `grace`, `gdrcopy`, `job_starters`, `process`, `capability`) -> why; their checks say "could not check". Facts without it
    /// (and so without the other fields added with `--facts`) come from an older release and
    /// are refused.
    pub unreadable: BTreeMap<String, String>,
    /// `/proc/sys/kernel/hostname` (absent in facts of an older nvpeer).
    #[serde(default)]
    pub hostname: Option<String>,
}
