// SPDX-License-Identifier: MIT OR Apache-2.0
//! Checks of the host stack every path needs: the NVIDIA driver, the RDMA devices, libibverbs.
//! The process's memlock limit is [`super::memlock`]'s.

use crate::host::kernel::symbols;
use crate::host::nvidia_proc::{Flavour, Part};
use crate::host::providers::PersistentApi;
use crate::host::rdma::RdmaDevice;
use crate::host::verbs::{Verbs, REG_DMABUF_MR_VERSION};

use super::super::Check;
use super::predicates::is_unread;
use super::Ctx;

/// `nvidia_driver`, `rdma_devices` and `verbs`, in that order.
pub(super) fn rows(ctx: &Ctx) -> Vec<Check> {
    let f = ctx.f;
    let nvidia = match ctx
        .unreadable("nvidia")
        .or(ctx.proc_unreadable(Part::Version))
    {
        Some(e) => Check::error("nvidia_driver", e),
        None => check_nvidia_driver(ctx),
    };
    let rdma = match (ctx.unreadable("rdma_devices"), ctx.unreadable("rdma")) {
        (Some(e), _) => Check::error("rdma_devices", e),
        (None, None) => check_rdma_devices(&f.rdma_devices),
        (None, Some(e)) => {
            let found = check_rdma_devices(&f.rdma_devices);
            let broken: Vec<(&str, &str)> = f
                .rdma_devices
                .iter()
                .filter_map(|d| Some((d.name.as_str(), broken_entry(d)?)))
                .collect();
            const FILE_FIX: &str = "the file should be the kernel's text; check its permissions (some need root) or report the content as a bug";
            // A device whose entry leads nowhere has one cause, whatever else of it is unread.
            let others = f
                .rdma_devices
                .iter()
                .any(|d| !d.unreadable.is_empty() && broken_entry(d).is_none());
            let fix = match (broken.is_empty(), others) {
                (true, _) => FILE_FIX.to_owned(),
                (false, false) => broken_entry_fix(&broken),
                (false, true) => format!(
                    "{}; for the other files: {FILE_FIX}",
                    broken_entry_fix(&broken)
                ),
            };
            Check::new(
                "rdma_devices",
                super::super::Status::Unknown,
                format!("{}; could not read: {e}", found.detail),
                Some(fix),
            )
        }
    };
    vec![nvidia, rdma, check_verbs(&f.verbs, f.rdma_devices.len())]
}

/// What `/proc/driver/nvidia/version` says, for the row: `, open kernel modules 580.159.04`.
fn proc_version(ctx: &Ctx) -> String {
    let Some(v) = ctx.f.nvidia_proc.as_ref().and_then(|p| p.version.as_ref()) else {
        return ", /proc/driver/nvidia/version absent".to_owned();
    };
    let flavour = match v.flavour {
        Flavour::Open => "open kernel modules",
        Flavour::Proprietary => "proprietary kernel modules",
    };
    let shown = ctx
        .f
        .nvidia
        .as_ref()
        .filter(|n| !n.stand_in)
        .and_then(|n| n.version.as_ref());
    match &v.release {
        Some(r) if Some(r) != shown => format!(", {flavour} {r}"),
        _ => format!(", {flavour}"),
    }
}

fn check_nvidia_driver(ctx: &Ctx) -> Check {
    let Some(d) = ctx.f.nvidia.as_ref() else {
        return Check::fail(
            "nvidia_driver",
            "nvidia.ko is not loaded: no GPU memory can be exported (dma-buf) or pinned (nvidia_p2p_*)",
            "install and load the NVIDIA GPU driver (`modprobe nvidia`); for dma-buf its open kernel modules",
        );
    };
    let mut detail = d.describe();
    detail.push_str(&proc_version(ctx));
    detail.push_str(match d.persistent_api {
        PersistentApi::Explicit => ", exports nvidia_p2p_get_pages_persistent (535+ persistent API)",
        PersistentApi::CapabilityVariable => {
            ", <= 530 API: no nvidia_p2p_get_pages_persistent, persistent pins through nvidia_p2p_cap_persistent_pages"
        }
        PersistentApi::None => ", exports no persistent pinning API",
        PersistentApi::Unknown => ", persistent API unknown (/proc/kallsyms not readable)",
    });
    if matches!(ctx.f.kallsyms.lookup(symbols::P2P_GET_PAGES), Ok(None)) {
        return Check::warn(
            "nvidia_driver",
            format!("{detail}; but nothing exports nvidia_p2p_get_pages: no peer-memory client can pin GPU memory (dma-buf does not need it)"),
            "this driver build lacks the P2P API: install NVIDIA's datacenter/desktop driver for Linux",
        );
    }
    if let Some(by) = &d.p2p_exported_by {
        if *by != d.module {
            detail.push_str(&format!(" (nvidia_p2p_get_pages from {by})"));
        }
    }
    Check::ok("nvidia_driver", detail)
}

/// The entry `class/infiniband/<name>` of `dev` when it is a link to nothing or a loop, as its
/// error names it (the path read, under `--sysfs-root` too).
fn broken_entry(dev: &RdmaDevice) -> Option<&str> {
    let entry = format!("class/infiniband/{}", dev.name);
    dev.unreadable.iter().find_map(|e| {
        let end = e.find(&format!("{entry}: "))? + entry.len();
        let why = &e[end + 2..];
        // `host::rdma::devices` writes the first; the second is ELOOP's text.
        (why == "a link to nothing" || why.ends_with("(os error 40)"))
            .then(|| e[..end].strip_prefix("cannot read ").unwrap_or(&e[..end]))
    })
}

/// The fix for class entries that lead nowhere (`broken`: name, path). The kernel creates and
/// removes `/sys/class/infiniband/<name>` together with the device (`device_add`/`device_del`
/// -> `device_remove_class_symlinks`), so on a live /sys such a link is a device being removed
/// while it was read, or a tree that is not the kernel's whole /sys.
fn broken_entry_fix(broken: &[(&str, &str)]) -> String {
    let names: Vec<&str> = broken.iter().map(|(n, _)| *n).collect();
    let paths: Vec<&str> = broken.iter().map(|(_, p)| *p).collect();
    let names = names.join(", ");
    let (it, was, them) = if broken.len() == 1 {
        ("it points", "was", "it")
    } else {
        ("they point", "were", "them")
    };
    let driver = if broken.iter().all(|(n, _)| n.starts_with("mlx5_")) {
        " (mlx5_ib; with MLNX_OFED or DOCA-OFED `/etc/init.d/openibd restart`)"
    } else {
        ""
    };
    format!(
        "`ls -l {}` shows where {it}: the kernel removes this link with its device, so a link to nothing or a loop means {names} {was} being removed as nvpeer read {them} (a driver unload, a hot unplug, a VF torn down) or this is not the kernel's whole /sys (a copy, a partial bind mount); run the check again; if it stays, compare `ibv_devices` and `rdma dev`, then reload the RDMA driver of {names}{driver}, which drops every RDMA connection through {them} (drain the node first), or reboot",
        paths.join(" ")
    )
}

fn check_rdma_devices(devices: &[RdmaDevice]) -> Check {
    if devices.is_empty() {
        return Check::fail(
            "rdma_devices",
            "no RDMA device in /sys/class/infiniband",
            "load the NIC's RDMA driver (e.g. mlx5_ib) or MOFED (`/etc/init.d/openibd start`)",
        );
    }
    let mut parts = Vec::new();
    let mut active = 0;
    for dev in devices {
        let at = match (&dev.pci, &dev.driver) {
            (Some(p), Some(d)) => format!(" ({} {d})", p.address),
            (Some(p), None) => format!(" ({})", p.address),
            (None, _) if !dev.unreadable.is_empty() => " (not readable)".to_owned(),
            (None, _) => " (software device)".to_owned(),
        };
        if dev.ports.is_empty() {
            // A device that could not be read has ports nobody saw: unknown, not "no ports".
            parts.push(if is_unread(dev) {
                format!("{} (not readable: ports unknown)", dev.name)
            } else {
                format!("{}{at} no ports", dev.name)
            });
        }
        for port in &dev.ports {
            active += usize::from(port.is_active());
            let link = port.link_layer.as_deref().unwrap_or("?");
            parts.push(format!(
                "{}/{}{at} {} {link}",
                dev.name, port.number, port.state
            ));
        }
    }
    let detail = parts.join(", ");
    // A port whose state could not be read may be the ACTIVE one.
    let unsure = devices.iter().any(|d| {
        (d.ports.is_empty() && is_unread(d)) || d.ports.iter().any(|p| p.state == "unknown")
    });
    if active == 0 {
        let none = if unsure {
            "no port known to be ACTIVE"
        } else {
            "no port is ACTIVE"
        };
        Check::warn(
            "rdma_devices",
            format!("{detail}: {none}"),
            // The device with a PCI function first: a software device's port is rarely the one.
            devices
                .iter()
                .find(|d| d.pci.is_some())
                .or(devices.first())
                .map(super::port_up_fix)
                .unwrap_or_default(),
        )
    } else {
        Check::ok("rdma_devices", detail)
    }
}

fn check_verbs(verbs: &Verbs, sysfs_devices: usize) -> Check {
    match verbs {
        Verbs::Skipped { reason } => Check::not_applicable("verbs", format!("libibverbs not probed: {reason}")),
        Verbs::Unavailable { reason } => Check::warn(
            "verbs",
            format!("{reason}; the verbs checks (device list, DMA-BUF probe) are skipped"),
            "install rdma-core's libibverbs (Debian: libibverbs1 ibverbs-providers) or MOFED's userspace",
        ),
        Verbs::Probed { devices, .. } if devices.is_empty() && sysfs_devices > 0 => Check::warn(
            "verbs",
            format!("libibverbs sees no device although sysfs has {sysfs_devices}"),
            "install the provider library of the NIC (Debian: ibverbs-providers; MOFED: its userspace packages)",
        ),
        Verbs::Probed {
            devices,
            reg_dmabuf_mr,
            reg_dmabuf_mr_versioned,
        } => {
            let seen = if devices.is_empty() {
                "libibverbs loaded; it sees no device".to_owned()
            } else {
                format!(
                    "libibverbs sees {}",
                    devices.iter().map(|d| d.name.as_str()).collect::<Vec<_>>().join(", ")
                )
            };
            let dmabuf = match (reg_dmabuf_mr, reg_dmabuf_mr_versioned) {
                (Some(true), Some(true)) => format!("; it has ibv_reg_dmabuf_mr@{REG_DMABUF_MR_VERSION}"),
                (Some(true), Some(false)) => format!("; it has ibv_reg_dmabuf_mr, but not at {REG_DMABUF_MR_VERSION} (what NCCL asks for)"),
                (Some(true), None) => format!("; it has ibv_reg_dmabuf_mr, at a symbol version these facts (of an older nvpeer) do not record: whether NCCL, which asks for {REG_DMABUF_MR_VERSION}, can load it is unknown"),
                (Some(false), _) => "; it has no ibv_reg_dmabuf_mr (rdma-core < 34): no dma-buf registration".to_owned(),
                (None, _) => String::new(),
            };
            Check::ok("verbs", format!("{seen}{dmabuf}"))
        }
    }
}
