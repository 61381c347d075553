// SPDX-License-Identifier: MIT OR Apache-2.0
//! GDRCopy, the sibling of peer memory: a kernel module (`gdrdrv`) that pins GPU memory through
//! the same NVIDIA P2P API and maps it for the CPU, used by NCCL, NVSHMEM, UCX and aws-ofi-nccl's
//! GPU-initiated networking. Rows: `gdrcopy` (the module: loaded or installed, version, its
//! parameters, what it was built against), and where GDRCopy is there at all `gdrcopy_device`
//! (`/dev/gdrdrv`) and `gdrcopy_lib` (libgdrapi against the module). [`usable`] is what
//! `gin_gdrcopy` asks of it.

use crate::host::nvidia_proc::Flavour;

use super::super::{Check, GdrcopyFacts};
use super::predicates::{dummy, loaded_version, major_minor};
use super::{predicates, Ctx};
use mode as gdrcopy_mode;

pub(super) mod mode;

/// Anything of GDRCopy on this host.
fn present(g: &GdrcopyFacts) -> bool {
    g.loaded || g.installed.is_some() || g.device.is_some() || !g.libraries.is_empty()
}

/// The rows of this concern.
pub(super) fn rows(ctx: &Ctx) -> Vec<Check> {
    if let Some(e) = ctx.unreadable("gdrcopy") {
        return vec![Check::error("gdrcopy", e)];
    }
    let Some(g) = ctx.f.gdrcopy.as_ref() else {
        return vec![Check::not_examined(
            "gdrcopy",
            "the facts have no gdrcopy (an older nvpeer made them)",
        )];
    };
    if !present(g) {
        return vec![Check::not_applicable(
            "gdrcopy",
            "not installed (no gdrdrv loaded or in modules.dep, no /dev/gdrdrv, no libgdrapi): NCCL, NVSHMEM and UCX work without it",
        )];
    }
    let mut rows = vec![module(ctx, g), device(g), library(g)];
    // libgdrapi 2.6+ maps exported dma-bufs where gdrdrv does not open: then gdrdrv and its
    // node are not required.
    if predicates::mode(ctx, g).0 == predicates::Mode::DmabufMmap {
        for r in rows
            .iter_mut()
            .filter(|r| r.id != "gdrcopy_lib" && r.status > super::super::Status::Info)
        {
            r.status = super::super::Status::Ok;
            r.detail
                .push_str("; not required: libgdrapi 2.6+ uses dma-buf mmap (see gdrcopy_mode)");
            r.fix = None;
        }
    }
    rows.push(gdrcopy_mode::row(ctx, g));
    // NCCL, NVSHMEM and UCX work without GDRCopy: a broken one degrades, and fails only the
    // workload that needs it (`--for gin`, where `gin_gdrcopy` fails too).
    if ctx.options.workload != Some(super::super::Workload::Gin) {
        for r in rows
            .iter_mut()
            .filter(|r| r.status == super::super::Status::Fail)
        {
            r.status = super::super::Status::Warn;
        }
    }
    rows
}

fn module(ctx: &Ctx, g: &GdrcopyFacts) -> Check {
    if let Some(why) = dummy(g) {
        return Check::fail(
            "gdrcopy",
            format!("built against nv-p2p-dummy: {why}; it loads and pins nothing, so every GDRCopy user fails (NVIDIA/gdrcopy#334)"),
            format!(
                "rebuild gdrdrv against the installed NVIDIA driver's sources (reinstall the gdrdrv-dkms/gdrcopy-kmod package after the driver{}), then `rmmod gdrdrv nv_p2p_dummy; modprobe gdrdrv`",
                match &ctx.release {
                    Some(r) => format!(", or in GDRCopy's sources `make driver NVIDIA_SRC_DIR=/usr/src/nvidia-{r}/nvidia`"),
                    None => String::new(),
                }
            ),
        );
    }
    if !g.loaded {
        let Some(f) = &g.installed else {
            return Check::warn(
                "gdrcopy",
                "no gdrdrv: libgdrapi or /dev/gdrdrv without the module (not loaded, not in modules.dep), so gdr_open() fails and its users fall back",
                "install GDRCopy's kernel module of the library's release (gdrdrv-dkms, or gdrcopy's `make driver` + `insmod.sh`) and load it",
            );
        };
        return Check::warn(
            "gdrcopy",
            format!(
                "gdrdrv {} installed ({}) but not loaded",
                f.version.as_deref().unwrap_or("(no version)"),
                f.path
            ),
            "`modprobe gdrdrv` (gdrcopy's insmod.sh also creates /dev/gdrdrv), and load it at boot (modules-load.d)",
        );
    }
    let version = loaded_version(g).unwrap_or("(no version)");
    let params = g.params.as_ref();
    let built_for = params.and_then(|p| p.get("Built for NVIDIA driver flavor"));
    let mut detail = format!("gdrdrv {version} loaded");
    if let Some(p) = params {
        let shown: Vec<String> = p
            .iter()
            .filter(|(k, _)| k.as_str() != "Version")
            .map(|(k, v)| format!("{k}: {v}"))
            .collect();
        detail.push_str(&format!(" ({})", shown.join(", ")));
    } else {
        detail.push_str(" (no /proc/driver/gdrdrv/params: gdrdrv older than 2.4)");
    }
    if let Some(f) = &g.installed {
        if f.version.as_deref().is_some_and(|v| v != version) {
            detail.push_str(&format!(
                "; the installed file {} is {}: the next load brings it",
                f.path,
                f.version.as_deref().unwrap_or("?")
            ));
        }
    }
    let running = ctx
        .f
        .nvidia_proc
        .as_ref()
        .and_then(|p| p.version.as_ref())
        .map(|v| v.flavour);
    let mismatch = match (built_for.map(String::as_str), running) {
        (Some("opensource"), Some(Flavour::Proprietary)) => Some("proprietary"),
        (Some("proprietary"), Some(Flavour::Open)) => Some("open"),
        _ => None,
    };
    if let Some(r) = mismatch {
        return Check::warn(
            "gdrcopy",
            format!(
                "flavour mismatch: built for the {} NVIDIA driver, the running one is {r}; {detail}",
                built_for.map_or("?", String::as_str)
            ),
            "rebuild gdrdrv against the running driver's flavour (gdrcopy's Makefile detects it from the driver's sources), then reload it",
        );
    }
    Check::ok("gdrcopy", detail)
}

fn device(g: &GdrcopyFacts) -> Check {
    let Some(d) = &g.device else {
        return if g.loaded {
            Check::fail(
                "gdrcopy_device",
                "no /dev/gdrdrv: gdrdrv is loaded but its device node is absent, so gdr_open() fails with ENOENT",
                format!("create it as gdrcopy's insmod.sh does: `mknod -m 666 /dev/gdrdrv c {} 0`; in a container, mount it from the host (Kubernetes: a hostPath volume /dev/gdrdrv, NVIDIA/gdrcopy#291)", g.major.map_or_else(|| "<major of gdrdrv in /proc/devices>".to_owned(), |m| m.to_string())),
            )
        } else {
            Check::ok(
                "gdrcopy_device",
                "/dev/gdrdrv absent; gdrdrv is not loaded either (see gdrcopy)",
            )
        };
    };
    let stale = match (d.major, g.major) {
        (Some(node), Some(now)) if node != now => Some((node, now)),
        _ => None,
    };
    if let Some((node, now)) = stale {
        return Check::fail(
            "gdrcopy_device",
            format!("stale node: {} has major {node}, gdrdrv's is {now} (/proc/devices), a node left from an earlier load", d.path),
            format!("recreate it: `rm {0}; mknod -m 666 {0} c {now} 0`", d.path),
        );
    }
    let detail = format!("{} mode {:04o} owner {}:{}", d.path, d.mode, d.uid, d.gid);
    // libgdrapi opens it O_RDWR (gdrapi.c, gdr_open): every job user needs read and write.
    if d.mode & 0o006 != 0o006 {
        return Check::warn(
            "gdrcopy_device",
            format!("not world read-write: {detail}; only its owner and group can open it read-write, so jobs of other users get EACCES from gdr_open()"),
            format!("`chmod 666 {}` (gdrcopy's insmod.sh default), or give the job users its group", d.path),
        );
    }
    Check::ok(
        "gdrcopy_device",
        format!("{detail}: any job user can open it"),
    )
}

fn library(g: &GdrcopyFacts) -> Check {
    let libs = g
        .libraries
        .iter()
        .map(|l| format!("libgdrapi {} ({})", l.version, l.path))
        .collect::<Vec<_>>()
        .join(", ");
    if g.libraries.is_empty() {
        return Check::ok(
            "gdrcopy_lib",
            "no libgdrapi installed (only applications that bring their own use gdrdrv)",
        );
    }
    let Some(module) = loaded_version(g)
        .or_else(|| g.installed.as_ref()?.version.as_deref())
        .and_then(|v| major_minor(v).map(|mm| (v, mm)))
    else {
        return Check::ok(
            "gdrcopy_lib",
            format!("{libs}; no gdrdrv version to compare"),
        );
    };
    let skewed: Vec<&str> = g
        .libraries
        .iter()
        .filter(|l| major_minor(&l.version) != Some(module.1))
        .map(|l| l.version.as_str())
        .collect();
    if skewed.is_empty() {
        return Check::ok("gdrcopy_lib", format!("{libs}, as gdrdrv {}", module.0));
    }
    Check::warn(
        "gdrcopy_lib",
        format!(
            "skew: {libs} with gdrdrv {}: the library's ioctls and the module's differ (aws-ofi-nccl PR#1351: GIN needs GDRCopy 2.5 or later on both sides)",
            module.0
        ),
        "install one GDRCopy release for both (the library package and gdrdrv-dkms of the same version) and reload gdrdrv",
    )
}
