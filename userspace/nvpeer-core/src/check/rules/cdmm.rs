// SPDX-License-Identifier: MIT OR Apache-2.0
//! The `cdmm` row: CoherentGPUMemoryMode "driver" (CDMM, R580+ on GB200/GB300).
//!
//! * Pins. `nv-p2p.h` of 580.65.06 says `nvidia_p2p_get_pages` "does not support Coherent
//!   Driver-based Memory Management(CDMM) mode"; 590.44.01 dropped the sentence.
//! * Page map (`../shared/FIELD.md` U1). From 580.142 (R580) and 595.44.02 on, CDMM mappings of
//!   GPU memory, peer memory (`nvidia_p2p_dma_map_pages`) and the default dma-buf mapping alike,
//!   take a reference on a page map that `nvidia_uvm` creates when a CUDA process registers the
//!   GPU (`nv_dma_get_dev_pagemap`); without it the driver logs "Failed to get a reference on
//!   dev_pagemap in CDMM(driver) mode" and returns NOT_SUPPORTED. The page map needs a kernel
//!   6.0 or later built with `CONFIG_ZONE_DEVICE`. 590.x (590.48.01 last seen) does not have it:
//!   releases outside the two ranges are "not probed".

use crate::host::kernel::release_major_minor;
use crate::host::nvidia_proc::DriverRelease;

use super::super::{Check, Status};
use super::{predicates, Ctx};

/// The dmesg line of a CDMM mapping without `nvidia_uvm`'s page map.
pub(crate) const PAGEMAP_SYMPTOM: &str =
    "Failed to get a reference on dev_pagemap in CDMM(driver) mode";

/// Whether a release's CDMM mappings need `nvidia_uvm`'s page map.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pagemap {
    Needed,
    NotNeeded,
    NotProbed,
}

/// 580.142+ in R580 and 595.44.02+ need it; R580 before 580.142 does not; 581..595.44.01
/// (590.x among them) are not probed.
fn pagemap(release: &DriverRelease) -> Pagemap {
    match release.major() {
        ..=579 => Pagemap::NotNeeded,
        580 if release.at_least([580, 142, 0]) => Pagemap::Needed,
        580 => Pagemap::NotNeeded,
        _ if release.at_least([595, 44, 2]) => Pagemap::Needed,
        _ => Pagemap::NotProbed,
    }
}

/// The `cdmm` row on a Grace platform.
pub(super) fn row(ctx: &Ctx) -> Check {
    let pins = pins_row(ctx);
    if ctx.params.and_then(|p| p.coherent_gpu_memory_mode()) != Some("driver") {
        return pins;
    }
    let Some(release) = &ctx.release else {
        return with(
            pins,
            Status::Ok,
            format!("whether CDMM mappings need nvidia_uvm's page map is not judged (580.142+ and 595.44.02+ do; symptom: \"{PAGEMAP_SYMPTOM}\" in dmesg)"),
            None,
        );
    };
    match pagemap(release) {
        Pagemap::NotNeeded => pins,
        Pagemap::NotProbed => with(
            pins,
            Status::Info,
            format!("driver {release}: whether CDMM mappings need nvidia_uvm's page map is not probed (580.142+ and 595.44.02+ do, 590.x up to 590.48.01 did not; symptom: \"{PAGEMAP_SYMPTOM}\" in dmesg)"),
            Some("load nvidia_uvm at boot (it is needed from 580.142 and 595.44.02 on)".to_owned()),
        ),
        Pagemap::Needed => needed(ctx, pins, release),
    }
}

/// The page map's needs judged, on a release that has the dependency.
fn needed(ctx: &Ctx, pins: Check, release: &DriverRelease) -> Check {
    let cost = format!("peer-memory and dma-buf mappings of GPU memory fail with NOT_SUPPORTED and dmesg shows \"{PAGEMAP_SYMPTOM}\"");
    let head = format!("driver {release} maps CDMM memory through the page map nvidia_uvm creates when a CUDA process registers the GPU (580.142+, 595.44.02+)");
    if let Some(e) = ctx.unreadable("cdmm") {
        return with(
            pins,
            Status::Unknown,
            format!("{head}; could not read whether nvidia_uvm is loaded: {e}"),
            Some("check /sys/module/nvidia_uvm".to_owned()),
        );
    }
    let Some(c) = &ctx.f.cdmm else {
        return with(pins, Status::Unknown, format!("{head}; nvidia_uvm and CONFIG_ZONE_DEVICE were not read (facts of an older nvpeer)"), Some("run this nvpeer's `check` on the host".to_owned()));
    };
    let kernel = ctx.f.kernel_release.as_deref();
    if let Some((major, minor)) = kernel.and_then(release_major_minor) {
        if major < 6 {
            return with(
                pins,
                Status::Fail,
                format!("{head}, which needs a kernel >= 6.0; kernel {major}.{minor}: {cost}"),
                Some(
                    "boot a kernel >= 6.0 with CONFIG_ZONE_DEVICE=y, rebuild the driver against it"
                        .to_owned(),
                ),
            );
        }
    }
    let config = c.kernel_config.as_deref().unwrap_or("the kernel config");
    if c.zone_device == Some(false) {
        return with(
            pins,
            Status::Fail,
            format!("{head}, which needs CONFIG_ZONE_DEVICE; {config} has it unset: {cost}"),
            Some(
                "boot a kernel built with CONFIG_ZONE_DEVICE=y and rebuild the driver against it"
                    .to_owned(),
            ),
        );
    }
    let zone = match c.zone_device {
        Some(_) => format!("CONFIG_ZONE_DEVICE=y ({config})"),
        None => "CONFIG_ZONE_DEVICE not probed (no /boot/config-<release>)".to_owned(),
    };
    if !c.nvidia_uvm_loaded {
        return with(
            pins,
            Status::Warn,
            format!("{head}; nvidia_uvm is not loaded: until a CUDA process loads it and registers the GPU, {cost}; {zone}"),
            Some("load nvidia_uvm at boot (`modprobe nvidia_uvm`, or nvidia-persistenced); in a container the host must load it".to_owned()),
        );
    }
    with(
        pins,
        Status::Ok,
        format!("{head}; nvidia_uvm loaded (the page map of a GPU exists once a CUDA process has registered it: not probed); {zone}"),
        None,
    )
}

/// `pins` with `detail` appended, its status raised to `status` and `fix` added.
fn with(mut pins: Check, status: Status, detail: String, fix: Option<String>) -> Check {
    pins.detail.push_str("; ");
    pins.detail.push_str(&detail);
    if status > pins.status {
        pins.status = status;
    }
    if let Some(fix) = fix.filter(|_| status != Status::Ok) {
        pins.fix = Some(match pins.fix.take() {
            Some(old) => format!("{old}; {fix}"),
            None => fix,
        });
    }
    pins
}

/// The pins part: whether `nvidia_p2p_get_pages` takes CDMM memory on this release.
fn pins_row(ctx: &Ctx) -> Check {
    let release = ctx
        .release
        .as_ref()
        .map_or_else(|| "(release unknown)".to_owned(), ToString::to_string);
    if let Some(e) = ctx.proc_unreadable(crate::host::nvidia_proc::Part::Params) {
        return Check::error("cdmm", e);
    }
    let Some(mode) = ctx.params.and_then(|p| p.coherent_gpu_memory_mode()) else {
        return Check::ok(
            "cdmm",
            format!("driver {release} shows no CoherentGPUMemoryMode in /proc/driver/nvidia/params (CDMM came with R580): GPU memory is onlined as a NUMA node"),
        );
    };
    if mode != "driver" {
        return Check::ok(
            "cdmm",
            format!("CoherentGPUMemoryMode \"{mode}\" (not CDMM): GPU memory is onlined as a NUMA node; pins and dma-buf export work as on PCIe platforms, through C2C"),
        );
    }
    let dmabuf_note = match &ctx.release {
        Some(r) if r.at_least([595, 0, 0]) => {
            "; 595's nv-dmabuf.c exports CDMM memory through MEMORY_DEVICE_COHERENT pages"
        }
        Some(_) => "; 595's nv-dmabuf.c added a CDMM path (MEMORY_DEVICE_COHERENT pages): dma-buf under CDMM on this older driver is not judged here",
        None => "; 595's nv-dmabuf.c added a CDMM path (MEMORY_DEVICE_COHERENT pages): dma-buf under CDMM is not judged here",
    };
    let invalidating = predicates::invalidating_modules(ctx);
    if ctx.release.is_none() {
        let base = format!("CoherentGPUMemoryMode \"driver\" (CDMM), driver release unknown: not judged whether nvidia_p2p_get_pages pins it (nv-p2p.h 580.65.06 says it does not; the sentence is gone in 590.44.01){dmabuf_note}");
        return if invalidating.is_empty() {
            Check::ok("cdmm", base)
        } else {
            Check::warn(
                "cdmm",
                format!(
                    "{base}; the nv_mem client of {} is invalidating: its pins fail on a 580 driver",
                    invalidating.join(", ")
                ),
                "read the release in /proc/driver/nvidia/version; on 580: load the module with persistent_api_support=1, upgrade the driver to 590.44.01 or later, or use dma-buf",
            )
        };
    }
    if !predicates::cdmm_refuses_invalidating_pins(ctx.release.as_ref()) {
        return Check::ok(
            "cdmm",
            format!("CoherentGPUMemoryMode \"driver\" (CDMM) on driver {release}: nvidia_p2p_get_pages supports it (590.44.01+){dmabuf_note}"),
        );
    }
    let base = format!("CoherentGPUMemoryMode \"driver\" (CDMM) on driver {release}: nvidia_p2p_get_pages does not support CDMM there (nv-p2p.h 580.65.06); persistent pins (nvidia_p2p_get_pages_persistent, nvpeer's default) are not named there and are assumed to work (not confirmed by NVIDIA){dmabuf_note}");
    if invalidating.is_empty() {
        Check::ok("cdmm", base)
    } else {
        Check::warn(
            "cdmm",
            format!(
                "{base}; the nv_mem client of {} is invalidating: its pins fail",
                invalidating.join(", ")
            ),
            "load the module with persistent_api_support=1, upgrade the driver to 590.44.01 or later, or use dma-buf",
        )
    }
}
