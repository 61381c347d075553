// SPDX-License-Identifier: MIT OR Apache-2.0
//! What `check` knows about a host: [`Facts`], the `facts` of `nvpeer check --json`, and what
//! it is read from besides sysfs and procfs ([`Inputs`]). Fields added after `check --facts`
//! came are `#[serde(default)]`, so the facts of an older release are still judged (what they
//! lack reads as unknown).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::host::Host;
use crate::kernel::{Iommu, Kallsyms};
use crate::limits::Memlock;
use crate::nccl::{self, NcclEnv, PeerMemoryVerdict};
use crate::nvidia_proc::NvidiaProc;
use crate::pci::{Acs, Bar, KnownDevice, PciAddress};
use crate::peermem::LoadedModule;
use crate::providers::{IbCore, NvidiaDriver};
use crate::rdma::RdmaDevice;
use crate::topo::{NcclPathType, PathClass, Topology};
use crate::verbs::{self, DmabufProbe, Verbs};

/// What the checks need beyond sysfs and procfs: the process environment and probes that ask
/// the running system directly.
#[derive(Clone, Debug)]
pub struct Inputs {
    /// `NCCL_*` and `UCX_*` variables.
    pub env: BTreeMap<String, String>,
    /// `None`: not measured.
    pub memlock: Option<Memlock>,
    pub verbs: Verbs,
}

impl Inputs {
    /// The running process and host: environment, getrlimit, and libibverbs when `host` is the
    /// live `/sys` (probing the kernel about another tree would mix two hosts).
    pub fn live(host: &Host) -> Self {
        Self {
            env: nccl::relevant_env(),
            memlock: Some(Memlock::current()),
            verbs: if host.is_live_sysfs() {
                verbs::probe()
            } else {
                Verbs::Skipped {
                    reason: "--sysfs-root is not /sys".to_owned(),
                }
            },
        }
    }

    /// Nothing measured: for fixture trees.
    pub fn fixture() -> Self {
        Self {
            env: BTreeMap::new(),
            memlock: None,
            verbs: Verbs::Skipped {
                reason: "fixture tree".to_owned(),
            },
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
    pub vendor: u16,
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
    /// The GPU hangs off a Grace root port: a coherent platform (GH200, GB200, GB300), where
    /// the NIC reaches GPU memory through the CPU's C2C link unless a PCIe mapping is asked for.
    pub coherent: bool,
    /// The NIC's PCI driver (`mlx5_core`, `efa`).
    pub nic_driver: Option<String>,
    /// The NIC's PCI vendor and device id.
    pub nic_vendor: u16,
    pub nic_device: u16,
    pub gpu_iommu_group: Option<String>,
    pub nic_iommu_group: Option<String>,
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
    /// [`crate::provenance::gather`] reads it (`modinfo`, the exporters' files); `None`: no
    /// `nvidia_peermem` in `modules.dep`. Unreadable: `unreadable["provenance"]`.
    #[serde(default)]
    pub provenance: Option<crate::provenance::ProvenanceFacts>,
    /// What `modprobe nvidia-peermem` would load (depmod's entry); `None`: no `modules.dep`.
    #[serde(default)]
    pub modprobe_target: Option<crate::modprobe::ModprobeTarget>,
    /// The facts that could not be read, by facts field (`modules`, `memory_peers`, `nvidia`,
    /// `nvidia_proc`, `ib_core`, `rdma_devices`, `gpus`, `bars` for the GPUs' BAR1, `iommu`,
    /// `acs`, `pairs`, `grace`) -> why; their checks say "could not check". Facts without it
    /// (and so without the other fields added with `--facts`) come from an older release and
    /// are refused.
    pub unreadable: BTreeMap<String, String>,
}
