// SPDX-License-Identifier: MIT OR Apache-2.0
//! The known silent failures as named classes (issue 47 item 5, `../shared/FIELD.md` U4, U9,
//! U10): the `silent_failures` row names each class that matches a pair, what goes wrong
//! without an error, and how to prove it. It decides no verdict: the classes are reported,
//! their root causes are not all known.
//!
//! * `iommu_dmabuf_595` (U4): NVIDIA's open modules 595.84 with the IOMMU translating for the
//!   pair and dma-buf the path used: dma-buf hands the NIC raw BAR addresses and the IOMMU
//!   drops the peer writes without an error (open-gpu-kernel-modules#1324, open; reported on
//!   kernel 7.0; root cause **unverified**, so the class matches the driver release whatever
//!   the kernel and says which kernel it was reported on).
//! * `mana_dmabuf` (U9): an Azure MANA NIC (PCI vendor 0x1414 or driver `mana`) carries GPU
//!   memory through dma-buf only where rdma-core's `mana` provider registers dma-bufs (added
//!   with rdma-core v62's dma-buf work per FIELD U9: the exact release is **unverified**);
//!   without it NCCL and UCX stage silently. The NIC's answer to NCCL's dma-buf probe decides;
//!   not probed is unknown.
//! * `vm_bar_mapping` (U10): a GPU passed through to a VM: whether the VMM maps the GPU's and
//!   NIC's BARs for peer-to-peer (through VFIO's dma-buf export since kernel 6.19 on iommufd)
//!   cannot be seen from the guest, so the answer is unknown, not assumed.

use super::super::{Check, Status};
use super::{predicates, Ctx, GdrPath, PairVerdict};
use crate::host::kernel::IommuMode;
use crate::host::verbs::{DmabufProbe, Verbs};

/// Microsoft's PCI vendor id (MANA).
const MICROSOFT: u16 = 0x1414;

/// One class matched on one pair.
struct Found {
    class: &'static str,
    status: Status,
    detail: String,
    fix: String,
}

/// The IOMMU domain of the device at `bus_id` (`DMA`, `DMA-FQ`, `identity`), else the mode.
fn translating(ctx: &Ctx, bus_ids: [Option<&str>; 2]) -> Option<bool> {
    let iommu = ctx.f.iommu.as_ref()?;
    let by_device: Vec<bool> = bus_ids
        .iter()
        .flatten()
        .filter_map(|b| iommu.device_domains.get(*b))
        .map(|d| d.starts_with("DMA"))
        .collect();
    if !by_device.is_empty() {
        return Some(by_device.iter().any(|t| *t));
    }
    match iommu.mode {
        IommuMode::Translated => Some(true),
        IommuMode::Off | IommuMode::Passthrough => Some(false),
        IommuMode::Unknown => None,
    }
}

fn iommu_dmabuf_595(ctx: &Ctx, v: &PairVerdict) -> Option<Found> {
    let release = ctx.release.as_ref()?;
    if !release.at_least([595, 84, 0]) || release.at_least([595, 85, 0]) {
        return None;
    }
    if v.preferred != Some(GdrPath::Dmabuf) || v.not_used.is_some() {
        return None;
    }
    if translating(ctx, [v.gpu_bus_id.as_deref(), v.nic_bus_id.as_deref()]) != Some(true) {
        return None;
    }
    let kernel = match ctx.f.kernel_release.as_deref() {
        Some(k) if k.starts_with("7.0") => format!("kernel {k}, as reported"),
        Some(k) => format!("reported on kernel 7.0; on {k} not known either way"),
        None => "reported on kernel 7.0; this kernel unknown".to_owned(),
    };
    Some(Found {
        class: predicates::IOMMU_DMABUF_595,
        status: Status::Warn,
        detail: format!(
            "{}: open modules {release} with the IOMMU translating and dma-buf the path used: the NIC gets raw BAR addresses and the IOMMU drops its peer writes without an error (open-gpu-kernel-modules#1324, root cause unconfirmed; {kernel})",
            v.name()
        ),
        fix: {
            // The passthrough parameter of this architecture (x86's iommu=pt does nothing on
            // arm64), and peer memory only where a core exports it (else the module cannot load).
            let arm64 = ctx
                .f
                .nvidia_proc
                .as_ref()
                .and_then(|p| p.version.as_ref())
                .and_then(|v| v.arch.as_deref())
                == Some("aarch64")
                || ctx
                    .f
                    .iommu
                    .as_ref()
                    .is_some_and(|i| i.units.iter().any(|u| u.contains("smmu")));
            let param = if arm64 { "iommu.passthrough=1" } else { "iommu=pt" };
            let core = ctx
                .f
                .ib_core
                .as_ref()
                .is_some_and(|c| c.peer_core.is_some());
            format!(
                "prove it with `nvpeer bench --loopback-all` (it verifies the data moved); until NVIDIA fixes #1324, boot with the IOMMU in passthrough (add `{param}` to the kernel command line, GRUB_CMDLINE_LINUX in /etc/default/grub, then update-grub or grub2-mkconfig, and reboot; it costs the IOMMU's protection against stray DMA of host drivers' devices){}, or run another driver release",
                if core {
                    ", or use peer memory (NCCL_DMABUF_ENABLE=0 with nvidia_peermem loaded)"
                } else {
                    ""
                }
            )
        },
    })
}

fn mana_dmabuf(ctx: &Ctx, v: &PairVerdict) -> Option<Found> {
    let p = ctx
        .f
        .pairs
        .iter()
        .find(|p| p.gpu == v.gpu && p.nic == v.nic)?;
    if p.nic_vendor != MICROSOFT && p.nic_driver.as_deref() != Some("mana") {
        return None;
    }
    let what = format!(
        "{}: {} is an Azure MANA NIC, GPUDirect RDMA only through dma-buf, which rdma-core's mana provider registers only in releases with its dma-buf support (rdma-core v62, release unconfirmed); without it NCCL and UCX stage through host memory without an error",
        v.name(),
        v.nic
    );
    let probe = match &ctx.f.verbs {
        Verbs::Probed { devices, .. } => {
            devices.iter().find(|d| d.name == v.nic).map(|d| &d.dmabuf)
        }
        _ => None,
    };
    let (status, answer) = match probe {
        Some(DmabufProbe::Supported { .. }) => (
            Status::Ok,
            "the NIC answered NCCL's dma-buf probe: supported",
        ),
        Some(DmabufProbe::Unsupported { .. }) => (
            Status::Warn,
            "the NIC answered NCCL's dma-buf probe: not supported, so this pair is staged",
        ),
        _ => (
            Status::Unknown,
            "its dma-buf registration not probed (libibverbs not asked here)",
        ),
    };
    Some(Found {
        class: "mana_dmabuf",
        status,
        detail: format!("{what}; {answer}"),
        fix: "install an rdma-core whose mana provider registers dma-bufs (v62 or later, unconfirmed) and run `nvpeer check` on the node itself; prove it with `nvpeer bench --loopback-all`".to_owned(),
    })
}

fn vm_bar_mapping(ctx: &Ctx, v: &PairVerdict) -> Option<Found> {
    if ctx.f.hypervisor != Some(true) || predicates::is_vgpu(ctx, &v.gpu) {
        return None;
    }
    Some(Found {
        class: "vm_bar_mapping",
        status: Status::Unknown,
        detail: format!(
            "{}: a VM (cpuinfo: hypervisor) with {} passed through: whether the VMM maps the GPU's and the NIC's BARs for peer-to-peer (VFIO exports BARs as dma-buf since kernel 6.19, which VMMs on iommufd must use) cannot be seen from the guest, so GPUDirect RDMA here is unknown, not assumed",
            v.name(),
            v.gpu
        ),
        fix: "prove it in this VM with `nvpeer bench --loopback-all`; ask the provider whether its VMM maps device BARs for peer-to-peer".to_owned(),
    })
}

/// The `silent_failures` row.
pub(super) fn row(ctx: &Ctx, pairs: &[PairVerdict]) -> Check {
    let found: Vec<Found> = pairs
        .iter()
        .flat_map(|v| {
            [
                iommu_dmabuf_595(ctx, v),
                mana_dmabuf(ctx, v),
                vm_bar_mapping(ctx, v),
            ]
        })
        .flatten()
        .collect();
    let Some(worst) = found.iter().map(|f| f.status).max() else {
        // Each class is judged per pair: none known is no answer where one may exist.
        let what = "whether a known silent failure class (iommu_dmabuf_595, mana_dmabuf, vm_bar_mapping) matches a GPU-NIC pair";
        if let Some(row) = predicates::unknown_pair_row(ctx.f, "silent_failures", what) {
            return row;
        }
        return Check::not_applicable(
            "silent_failures",
            "no known silent failure class matches (iommu_dmabuf_595, mana_dmabuf, vm_bar_mapping)",
        );
    };
    let detail = found
        .iter()
        .map(|f| format!("{}: {}", f.class, f.detail))
        .collect::<Vec<_>>()
        .join(" | ");
    let mut fixes: Vec<&str> = Vec::new();
    for f in found.iter().filter(|f| f.status != Status::Ok) {
        if !fixes.contains(&f.fix.as_str()) {
            fixes.push(&f.fix);
        }
    }
    Check::new(
        "silent_failures",
        worst,
        detail,
        (!fixes.is_empty()).then(|| fixes.join("; ")),
    )
}
