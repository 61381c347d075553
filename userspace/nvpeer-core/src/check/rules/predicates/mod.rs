// SPDX-License-Identifier: MIT OR Apache-2.0
//! The predicates more than one rule asks, in one place: a rule file calls these, never a
//! helper in another rule file. Each answers from the facts alone and makes no row.
//!
//! - the GPU's kind (consumer, vGPU, MIG): [`kind`], [`is_vgpu`], [`refuses_persistent`];
//! - peer memory: the concern's row ids, which modules pin invalidating, CDMM's refusal;
//! - an RDMA device that could not be read where no pair was formed ([`unread`]): the rows
//!   that then cannot tell whether a pair exists;
//! - NCCL: its GPUDirect RDMA decision per pair ([`nccl_gdr_of`]), why a carried pair is not
//!   used ([`not_used`]), how a setting was set ([`source`]), the GIN handler variable;
//! - GDRCopy: versions, the dummy build, the backend it picks ([`mode`]), whether it is usable;
//! - Grace: the mapping a pair's dma-buf gets ([`dmabuf_mapping`]) and what it means, the
//!   `pci=config_acs=` line rdma_topo wants ([`config_acs`]).

use std::fmt;

use crate::check::nccl::{self, NcclEnv, Source};
use crate::host::nvidia_proc::{
    DriverRelease, GpuInformation, GRDMA_OVERRIDE_ALLOW, GRDMA_OVERRIDE_DENY,
};
use crate::host::pci::PciAddress;
use crate::host::rdma::RdmaDevice;
use crate::host::topo::{self, PathClass};

use super::super::{AcsRole, GdrapiLibrary, GdrcopyFacts, GraceFacts, PairFacts, PairSource};
use super::{Ctx, Mapping, WhyNot};

mod unread;
pub(super) use unread::{
    is_unread, pair_unknown, unknown_pair_row, unread_nics, NEEDED_IF_UNREAD, PAIR_ROWS,
};

// The GPU's kind.

/// What one GPU is, by its `information` file and MIG instances.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    Consumer,
    Vgpu,
    Mig(Vec<u32>),
    Capable,
    /// No `information` file: the model is unknown.
    Unknown,
}

/// A vGPU type name: `NVIDIA A30-8C`, `GRID V100-8Q`, `NVIDIA A100-1-5C` (MIG-backed): the last
/// word ends in `-<digits><A|B|C|Q>`.
fn is_vgpu_model(model: &str) -> bool {
    if model.starts_with("GRID ") {
        return true;
    }
    let Some(last) = model.split_whitespace().last() else {
        return false;
    };
    let Some((_, tail)) = last.rsplit_once('-') else {
        return false;
    };
    let Some(series) = tail.chars().last() else {
        return false;
    };
    let digits = &tail[..tail.len() - series.len_utf8()];
    matches!(series, 'A' | 'B' | 'C' | 'Q')
        && !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
}

fn is_consumer_model(model: &str) -> bool {
    model.contains("GeForce") || model.starts_with("NVIDIA TITAN") || model.starts_with("TITAN")
}

fn information<'a>(ctx: &Ctx<'a>, address: PciAddress) -> Option<&'a GpuInformation> {
    ctx.f
        .nvidia_proc
        .as_ref()?
        .gpus
        .iter()
        .find(|i| i.bus_location == Some(address))
}

pub(super) fn kind(ctx: &Ctx, label: &str) -> (Kind, String) {
    let Some(g) = ctx.f.gpus.iter().find(|g| g.label == label) else {
        return (Kind::Unknown, label.to_owned());
    };
    let Some(info) = information(ctx, g.address) else {
        return (Kind::Unknown, format!("{label} {}", g.address));
    };
    let model = info.model.clone().unwrap_or_default();
    let name = format!("{label} {model}");
    let minor = info
        .fields
        .get("Device Minor")
        .and_then(|m| m.trim().parse::<u32>().ok());
    let mig = minor.and_then(|m| ctx.f.capability.as_ref()?.mig.get(&m).cloned());
    let k = if is_consumer_model(&model) {
        Kind::Consumer
    } else if is_vgpu_model(&model) {
        Kind::Vgpu
    } else if let Some(instances) = mig {
        Kind::Mig(instances)
    } else {
        Kind::Capable
    };
    (k, name)
}

/// The GPU of this label is a vGPU (its model a vGPU type).
pub(super) fn is_vgpu(ctx: &Ctx, label: &str) -> bool {
    kind(ctx, label).0 == Kind::Vgpu
}

/// The GPU of this label is MIG-enabled or a vGPU: NVIDIA refuses persistent pins on it.
pub(super) fn refuses_persistent(ctx: &Ctx, label: &str) -> bool {
    matches!(kind(ctx, label).0, Kind::Vgpu | Kind::Mig(_))
}

// Peer memory.

/// The row ids of this concern (and the consumers' peer-memory detection rows): what
/// [`super::settle`] calls "not needed" when another path carries every pair.
pub(super) fn is_peer_memory_row(id: &str) -> bool {
    matches!(
        id,
        "module"
            | "parameters"
            | "peer_clients"
            | "ib_core"
            | "modprobe"
            | "provenance"
            | "driver_reload"
            | "core_bugs"
            | "ucx"
    ) || is_nccl_row(id)
}

/// NCCL's row of this concern (its peer-memory detection, every version range).
pub(super) fn is_nccl_row(id: &str) -> bool {
    id == "nccl"
}

/// NVIDIA's `nv-p2p.h` of 580.65.06 on `nvidia_p2p_get_pages`: "This API does not support
/// Coherent Driver-based Memory Management(CDMM) mode"; the sentence is gone in 590.44.01.
pub(super) fn cdmm_refuses_invalidating_pins(release: Option<&DriverRelease>) -> bool {
    release.is_some_and(|r| r.major() == 580 && !r.at_least([590, 44, 1]))
}

/// The loaded peer-memory modules whose `nv_mem` pins through `nvidia_p2p_get_pages`
/// (invalidating, not persistent).
pub(super) fn invalidating_modules<'a>(ctx: &Ctx<'a>) -> Vec<&'a str> {
    ctx.f
        .modules
        .iter()
        .filter(|m| !m.persistent_nv_mem())
        .map(|m| m.name.as_str())
        .collect()
}

// NCCL.

pub(super) fn source(s: &Source) -> String {
    match s {
        Source::Default => "default".to_owned(),
        Source::Environment(v) => format!("set to {v:?}"),
        Source::Ignored(v) => format!("{v:?} not understood by NCCL: default used"),
        Source::File { path, value } => format!("set to {value:?} in {path}"),
    }
}

/// NCCL's GPUDirect RDMA decision for one pair (`ncclTopoCheckGdr`): `Ok(how)` when enabled.
/// On a C2C platform a NIC attached to the GPU's CPU (in sysfs: another root port of the same
/// NUMA node) is NCCL's P2C path, distance C2C with `NCCL_NET_GDR_C2C` (2.27+, default 1), PHB
/// without; a NIC below the GPU's switch gets GPUDirect RDMA in "PCI" mode (a forced PCIe
/// mapping).
pub(super) fn nccl_gdr_of(e: &NcclEnv, p: &PairFacts) -> Result<&'static str, String> {
    if p.source == PairSource::DmaDirect && e.ib_data_direct {
        // NCCL places a Data Direct NIC at its DMA function's PCI path
        // (mlx5dv_get_data_direct_sysfs_path), below the GPU's switch: PXB, PCI mode.
        return if nccl::within_gdr_level(topo::NcclPathType::Pxb, e.gdr_level) {
            Ok("Data Direct, PCI mode")
        } else {
            Err(format!("Data Direct PXB > {}", e.gdr_level))
        };
    }
    let c2c_attached = p.coherent && matches!(p.class, PathClass::Phb | PathClass::Node);
    if c2c_attached && e.gdr_c2c {
        return if nccl::within_gdr_level(topo::NcclPathType::C2c, e.gdr_level) {
            Ok("C2C, NCCL_NET_GDR_C2C")
        } else {
            Err(format!("C2C > {}", e.gdr_level))
        };
    }
    if nccl::within_gdr_level(p.nccl_class, e.gdr_level) {
        Ok(if p.coherent { "PCI mode" } else { "" })
    } else {
        Err(format!("{} > {}", p.nccl_class, e.gdr_level))
    }
}

/// The silent failure class of open modules 595.84 with the IOMMU translating (`silent.rs`);
/// `fold.rs` folds the `iommu` row under the row that names it.
pub(super) const IOMMU_DMABUF_595: &str = "iommu_dmabuf_595";

/// NCCL's GDAKI handler setting.
pub(super) const GPU_HANDLER_ENV: &str = "NCCL_GIN_GDAKI_NIC_HANDLER";

/// Why NCCL will not use GPUDirect RDMA on pair `p` although a path carries it; `Ok(None)`:
/// it will; `Err`: whether it will cannot be told (a port state that could not be read).
pub(super) fn not_used(ctx: &Ctx, p: &PairFacts) -> Result<Option<String>, String> {
    let f = ctx.f;
    if let Some(dev) = f.rdma_devices.iter().find(|d| d.name == p.nic) {
        if let Some(why) = ports_down(dev)? {
            return Ok(Some(why));
        }
    }
    if f.nccl_env.ib_disable {
        // `nccl_env` says so for the whole host.
        return Ok(None);
    }
    let Err(why) = nccl_gdr_of(&f.nccl_env, p) else {
        return Ok(None);
    };
    // Beyond PXB the class rests on NUMA nodes and root ports: a device file that could not be
    // read may have made it.
    if let Some(e) = ctx.unreadable("pci_details").or(ctx.unreadable("pci")) {
        return Err(format!(
            "NCCL's distance rule would exclude it ({why}), but its class rests on files that could not be read: {e}"
        ));
    }
    Ok(Some(format!(
        "NCCL's distance rule excludes it ({why}: NCCL_NET_GDR_LEVEL={}), so NCCL stages through host memory",
        f.nccl_env.gdr_level
    )))
}

/// `Some(why)` when no port of `dev` is ACTIVE; `Err` when a port's state could not be read.
fn ports_down(dev: &RdmaDevice) -> Result<Option<String>, String> {
    if dev.ports.iter().any(|p| p.is_active()) {
        return Ok(None);
    }
    if let Some(p) = dev.ports.iter().find(|p| p.state == "unknown") {
        return Err(format!(
            "{} port {} state unknown: {}",
            dev.name,
            p.number,
            dev.unreadable.join("; ")
        ));
    }
    let states: Vec<String> = dev
        .ports
        .iter()
        .map(|p| {
            let phys = p
                .phys_state
                .as_deref()
                .map_or_else(String::new, |s| format!(" ({s})"));
            format!("port {} {}{phys}", p.number, p.state)
        })
        .collect();
    Ok(Some(if states.is_empty() {
        format!("{} has no port", dev.name)
    } else {
        format!("{} {}: no port is ACTIVE", dev.name, states.join(", "))
    }))
}

// GDRCopy.

/// The dummy NVIDIA P2P module gdrcopy builds when it cannot find the driver's sources:
/// `modinfo gdrdrv` then shows `depends: nv-p2p-dummy` and gdrdrv loads but pins nothing
/// (NVIDIA/gdrcopy#334).
fn is_dummy(name: &str) -> bool {
    name.replace('_', "-") == "nv-p2p-dummy"
}

/// `2.5` of `2.5`, `2.5-1`, `2.5.1`: major and minor.
pub(super) fn major_minor(version: &str) -> Option<(u32, u32)> {
    let mut parts = version.trim().split(['.', '-', '_']);
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

/// The version of the loaded gdrdrv: sysfs, else its `params` file.
pub(super) fn loaded_version(g: &GdrcopyFacts) -> Option<&str> {
    g.version
        .as_deref()
        .or_else(|| g.params.as_ref()?.get("Version").map(String::as_str))
}

/// Why gdrdrv is built against the dummy, if it is.
pub(super) fn dummy(g: &GdrcopyFacts) -> Option<String> {
    if g.loaded && g.dummy_loaded {
        return Some(
            "the loaded gdrdrv runs on nv_p2p_dummy (/sys/module/nv_p2p_dummy)".to_owned(),
        );
    }
    let f = g.installed.as_ref()?;
    f.depends
        .iter()
        .any(|d| is_dummy(d))
        .then(|| format!("{} depends on nv-p2p-dummy (modinfo)", f.path))
}

/// The GDRCopy release both sides run when it is usable (for the dma-buf mmap backend: the
/// library's); else why not.
pub(super) fn usable(ctx: &Ctx, g: &GdrcopyFacts) -> Result<(u32, u32), String> {
    let (mode, why) = mode(ctx, g);
    if mode == Mode::DmabufMmap {
        return dmabuf_library(g)
            .and_then(|l| major_minor(&l.version))
            .ok_or(why);
    }
    if mode == Mode::Neither && dmabuf_library(g).is_some() {
        return Err(format!("neither backend opens: {why}"));
    }
    if mode == Mode::NotProbed {
        return Err(format!(
            "gdrdrv does not open and the dma-buf mmap backend is not probed: {why}"
        ));
    }
    if !g.loaded {
        return Err("gdrdrv is not loaded".to_owned());
    }
    if let Some(why) = dummy(g) {
        return Err(format!("gdrdrv is built against nv-p2p-dummy ({why})"));
    }
    if g.device.is_none() {
        return Err("/dev/gdrdrv is absent".to_owned());
    }
    let module = loaded_version(g)
        .and_then(major_minor)
        .ok_or("gdrdrv shows no version")?;
    if g.libraries.is_empty() {
        return Err("no libgdrapi is installed".to_owned());
    }
    let oldest = g
        .libraries
        .iter()
        .filter_map(|l| major_minor(&l.version))
        .min()
        .ok_or("libgdrapi shows no version")?;
    Ok(module.min(oldest))
}

/// The variable that makes libgdrapi 2.6+ skip gdrdrv.
pub(crate) const FORCE_DMABUF_ENV: &str = "GDRCOPY_USE_DMABUF_MMAP";

/// The backend GDRCopy picks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Mode {
    Gdrdrv,
    DmabufMmap,
    /// Neither backend opens: `gdr_open()` fails.
    Neither,
    /// It depends on what is not probed (the driver's CUDA version).
    NotProbed,
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Gdrdrv => "gdrdrv",
            Self::DmabufMmap => "dma-buf mmap",
            Self::Neither => "none (gdr_open fails)",
            Self::NotProbed => "not probed",
        })
    }
}

/// The newest installed libgdrapi of release 2.6 or later.
fn dmabuf_library(g: &GdrcopyFacts) -> Option<&GdrapiLibrary> {
    g.libraries
        .iter()
        .filter(|l| major_minor(&l.version).is_some_and(|v| v >= (2, 6)))
        .max_by_key(|l| major_minor(&l.version))
}

/// Whether the driver can export GPU memory for GDRCopy's dma-buf `mmap`: `Some(true)`,
/// `Some(false)` or `None` (not probed), with why.
fn driver_exports(ctx: &Ctx) -> (Option<bool>, String) {
    if ctx.f.dmabuf.gpu_open_kernel_module == Some(false) {
        return (
            Some(false),
            "the proprietary NVIDIA modules export no dma-buf".to_owned(),
        );
    }
    match &ctx.release {
        None => (None, "driver release unknown".to_owned()),
        Some(r) if !r.at_least([600, 0, 0]) => (
            Some(false),
            format!("driver {r} predates CUDA 13.3, which the dma-buf mmap backend needs (R595 ships CUDA 13.2; assumed)"),
        ),
        Some(r) if r.at_least([610, 0, 0]) => (
            Some(true),
            format!("driver {r} (CUDA 13.3 reported from 610 on, not confirmed)"),
        ),
        Some(r) => (
            None,
            format!("whether driver {r} gives CUDA 13.3 (the dma-buf mmap backend's minimum) is not probed"),
        ),
    }
}

/// gdrdrv opens: loaded and its node present (a dummy build opens too, then pins nothing).
fn gdrdrv_opens(g: &GdrcopyFacts) -> bool {
    g.loaded && g.device.is_some()
}

/// The backend and why.
pub(super) fn mode(ctx: &Ctx, g: &GdrcopyFacts) -> (Mode, String) {
    let forced = ctx.f.gin_env.get(FORCE_DMABUF_ENV).map(String::as_str) == Some("1");
    let Some(lib) = dmabuf_library(g) else {
        return if gdrdrv_opens(g) {
            (
                Mode::Gdrdrv,
                "libgdrapi before 2.6 has gdrdrv only".to_owned(),
            )
        } else {
            (
                Mode::Neither,
                "libgdrapi before 2.6 has gdrdrv only, and gdrdrv does not open".to_owned(),
            )
        };
    };
    if gdrdrv_opens(g) && !forced {
        return (
            Mode::Gdrdrv,
            format!("libgdrapi {} tries gdrdrv first", lib.version),
        );
    }
    let because = if forced {
        format!("{FORCE_DMABUF_ENV}=1")
    } else {
        "gdrdrv does not open (not loaded or no /dev/gdrdrv)".to_owned()
    };
    let (exports, why) = driver_exports(ctx);
    match exports {
        Some(true) => (
            Mode::DmabufMmap,
            format!("libgdrapi {}, {because}; {why}", lib.version),
        ),
        Some(false) => (
            Mode::Neither,
            format!(
                "libgdrapi {}, {because}, and no dma-buf mmap: {why}",
                lib.version
            ),
        ),
        None => (
            Mode::NotProbed,
            format!("libgdrapi {}, {because}; {why}", lib.version),
        ),
    }
}

// Grace: the mapping of a dma-buf.

/// The C2C sentence every pair on a coherent platform gets.
pub(super) const C2C_NOTE: &str = "peer-memory MRs here are mapped through C2C (nv-p2p refuses IO mappings of forced-PCIe tables); the dma-buf PCIe mapping / Data Direct is the fast path";

/// The DMA-Direct complex of this pair's GPU, when the pair is its Data Direct pairing.
fn complex_of<'a>(ctx: &Ctx<'a>, p: &PairFacts) -> Option<&'a super::super::DmaDirectComplex> {
    ctx.f
        .grace
        .as_ref()?
        .complexes
        .iter()
        .find(|c| c.gpu == p.gpu && c.nic.as_deref() == Some(&p.nic))
}

/// Whether NVIDIA's driver lets a PCIe-mapped (FORCE_PCIE) dma-buf of this GPU attach to the
/// DMA device `group` belongs to (`nv_pci_is_valid_topology_for_direct_pci`).
fn force_pcie_allowed(ctx: &Ctx, gpu_group: Option<&str>, peer_group: Option<&str>) -> bool {
    match ctx.params.and_then(|p| p.grdma_pci_topo_check_override()) {
        Some(GRDMA_OVERRIDE_ALLOW) => true,
        Some(GRDMA_OVERRIDE_DENY) => false,
        _ => gpu_group.is_some() && gpu_group == peer_group,
    }
}

/// The mapping a dma-buf of this pair gets as NCCL registers it, or why its registration fails.
/// PCIe on a PCIe platform. On a coherent one NCCL forces the PCIe mapping where the NIC's path
/// to the GPU goes through PCI ("Force PCIe mapping if path goes through PCI on a C2C system",
/// `ncclTopoCheckGdr`): a Data Direct NIC, which NCCL places at its DMA function
/// (`NCCL_IB_DATA_DIRECT`, default 1), or a NIC below the GPU's switch. It exports with
/// `CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE`, which succeeds; the driver then refuses the
/// attach unless `nv_pci_is_valid_topology_for_direct_pci` holds, and NCCL does not fall back
/// to the C2C mapping (`src/transport/net.cc`: the export under `CUCHECK`, then `regMrDmaBuf`
/// under `NCCLCHECK`). Every other NIC (one on the GPU's CPU) gets the C2C mapping.
pub(super) fn dmabuf_mapping(ctx: &Ctx, p: &PairFacts) -> Result<Mapping, WhyNot> {
    if !p.coherent {
        return Ok(Mapping::Pcie);
    }
    let data_direct = ctx.f.nccl_env.ib_data_direct;
    let (gpu_group, peer_group, why) = match complex_of(ctx, p) {
        Some(c) if data_direct => (
            c.gpu_iommu_group.as_deref(),
            c.dma_iommu_group.as_deref(),
            WhyNot {
                reason: format!(
                    "NCCL registers through Data Direct (NCCL_IB_DATA_DIRECT=1, its default) with the PCIe mapping, but DMA function {} is not in {}'s IOMMU group: NVIDIA's driver refuses the attach (nv-dmabuf.c: \"topology not supported for mapping type FORCE_PCIE\", -ENOTSUPP: ibv_reg_dmabuf_mr fails with error 524) and NCCL does not fall back to the C2C mapping",
                    c.dma_function, c.gpu
                ),
                fix: "boot with rdma_topo's ACS so that the complex is one IOMMU group (see `grace`; `rdma_topo check` verifies it), or set NCCL_IB_DATA_DIRECT=0 (dma-buf through the NIC function with the C2C mapping, the slower path), or NVreg_GrdmaPciTopoCheckOverride=1".to_owned(),
            },
        ),
        _ if p.common_bridge => (
            p.gpu_iommu_group.as_deref(),
            p.nic_iommu_group.as_deref(),
            WhyNot {
                reason: format!(
                    "NCCL forces the PCIe mapping for a NIC below the GPU's switch on a C2C platform, but {} is not in {}'s IOMMU group: NVIDIA's driver refuses the attach (\"topology not supported for mapping type FORCE_PCIE\", -ENOTSUPP: ibv_reg_dmabuf_mr fails with error 524) and NCCL does not fall back to the C2C mapping",
                    p.nic, p.gpu
                ),
                fix: "put GPU and NIC in one IOMMU group (the ACS rdma_topo requires, see `acs`), or NVreg_GrdmaPciTopoCheckOverride=1".to_owned(),
            },
        ),
        _ => return Ok(Mapping::C2c),
    };
    if force_pcie_allowed(ctx, gpu_group, peer_group) {
        Ok(Mapping::Pcie)
    } else if ctx.params.and_then(|p| p.grdma_pci_topo_check_override())
        == Some(GRDMA_OVERRIDE_DENY)
    {
        Err(WhyNot {
            reason: "NCCL asks for the PCIe mapping here, and GrdmaPciTopoCheckOverride=2 makes NVIDIA's driver refuse its attach (error 524); NCCL does not fall back to the C2C mapping".to_owned(),
            fix: "remove NVreg_GrdmaPciTopoCheckOverride=2 from the nvidia module options".to_owned(),
        })
    } else {
        Err(why)
    }
}

/// What the mapping of a pair's dma-buf means on a coherent platform; `None` elsewhere.
pub(super) fn mapping_note(ctx: &Ctx, p: &PairFacts, mapping: Option<Mapping>) -> Option<String> {
    if !p.coherent {
        return None;
    }
    match (mapping, complex_of(ctx, p)) {
        (Some(Mapping::Pcie), Some(c)) => Some(format!(
            "dma-buf with the PCIe mapping through Data Direct (DMA function {}; NCCL_IB_DATA_DIRECT=1 is NCCL's default)",
            c.dma_function
        )),
        (Some(Mapping::Pcie), None) => Some("dma-buf with the PCIe mapping (NCCL forces it for a NIC below the GPU's switch on a C2C platform)".to_owned()),
        (Some(Mapping::C2c), Some(c)) => Some(format!(
            "NCCL_IB_DATA_DIRECT=0: dma-buf through the NIC function with the C2C mapping (Data Direct through DMA function {} would take the PCIe mapping)",
            c.dma_function
        )),
        _ => None,
    }
}

/// `pci=config_acs=...` as `rdma_topo write-grub-acs` writes it: every port whose mask is not
/// the kernel's default, by address.
pub(super) fn config_acs(g: &GraceFacts) -> Option<String> {
    let mut entries: Vec<(_, &str)> = g
        .acs_ports
        .iter()
        .filter(|p| p.role != AcsRole::Other)
        .map(|p| (p.bridge, p.role.mask()))
        .collect();
    entries.sort();
    entries.dedup();
    (!entries.is_empty()).then(|| {
        format!(
            "pci=config_acs=\"{}\"",
            entries
                .iter()
                .map(|(b, m)| format!("{m}@{b}"))
                .collect::<Vec<_>>()
                .join(";")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vgpu_and_consumer_names() {
        for vgpu in [
            "NVIDIA A30-8C",
            "GRID V100-8Q",
            "NVIDIA A100-1-5C",
            "NVIDIA H100-80C",
            "NVIDIA L40S-48A",
        ] {
            assert!(is_vgpu_model(vgpu), "{vgpu}");
        }
        for physical in [
            "NVIDIA H200",
            "NVIDIA A100-SXM4-80GB",
            "NVIDIA A100 80GB PCIe",
            "Tesla V100-SXM2-32GB",
            "NVIDIA RTX A6000",
            "NVIDIA GeForce RTX 4090",
            "NVIDIA GB10",
            "",
        ] {
            assert!(!is_vgpu_model(physical), "{physical}");
        }
        assert!(is_consumer_model("NVIDIA GeForce RTX 4090"));
        assert!(is_consumer_model("NVIDIA TITAN RTX"));
        assert!(!is_consumer_model("NVIDIA RTX 6000 Ada Generation"));
        assert!(!is_consumer_model("Quadro RTX 8000"));
    }

    #[test]
    fn versions_and_the_dummy() {
        assert_eq!(major_minor("2.5"), Some((2, 5)));
        assert_eq!(major_minor("2.4-1"), Some((2, 4)));
        assert_eq!(major_minor("2.5.1"), Some((2, 5)));
        assert_eq!(major_minor("two"), None);
        assert!(is_dummy("nv-p2p-dummy") && is_dummy("nv_p2p_dummy"));
        assert!(!is_dummy("nvidia"));
    }
}
