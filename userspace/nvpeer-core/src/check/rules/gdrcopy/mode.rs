// SPDX-License-Identifier: MIT OR Apache-2.0
//! Which backend GDRCopy will use (`../shared/FIELD.md` U3). libgdrapi 2.6's `gdr_open()` tries
//! gdrdrv (`/dev/gdrdrv`) first and, when it cannot open it, maps an exported dma-buf instead;
//! `GDRCOPY_USE_DMABUF_MMAP=1` skips gdrdrv (gdrcopy's `gdrapi.c` and README: "CUDA driver 13.3
//! or newer"). In that mode every mapping is persistent, there is no invalidation callback and
//! each pinned buffer holds one file descriptor until it is unpinned, so `RLIMIT_NOFILE` counts.
//! Before 2.6 libgdrapi has gdrdrv only.
//!
//! The driver release giving CUDA 13.3 is not in gdrcopy's sources: 610 is reported
//! (unconfirmed); R595 and older ship CUDA 13.2 or older (assumed from NVIDIA's release
//! pairing), so they cannot; releases between are not probed.

use std::fmt;

use super::super::super::{Check, GdrapiLibrary, GdrcopyFacts, Status};
use super::super::Ctx;
use super::{dummy, major_minor};

/// The variable that makes libgdrapi 2.6+ skip gdrdrv.
pub(crate) const FORCE_DMABUF_ENV: &str = "GDRCOPY_USE_DMABUF_MMAP";

/// Soft `RLIMIT_NOFILE` at or below which the dma-buf mode's one fd per pinned buffer is a risk:
/// the usual default, which a job's sockets and verbs files already draw on.
const LOW_NOFILE: u64 = 1024;

/// The backend GDRCopy picks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::check::rules) enum Mode {
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
pub(super) fn dmabuf_library(g: &GdrcopyFacts) -> Option<&GdrapiLibrary> {
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
pub(in crate::check::rules) fn mode(ctx: &Ctx, g: &GdrcopyFacts) -> (Mode, String) {
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

/// The `gdrcopy_mode` row: the backend, what it costs, and `RLIMIT_NOFILE` in dma-buf mode.
pub(super) fn row(ctx: &Ctx, g: &GdrcopyFacts) -> Check {
    let (mode, why) = mode(ctx, g);
    let detail = format!("mode: {mode} ({why})");
    match mode {
        Mode::Gdrdrv => match dummy(g) {
            Some(d) => Check::ok("gdrcopy_mode", format!("{detail}; but {d} (see gdrcopy)")),
            None => Check::ok("gdrcopy_mode", detail),
        },
        Mode::Neither | Mode::NotProbed => Check::ok("gdrcopy_mode", detail),
        Mode::DmabufMmap => {
            let cost = "every mapping persistent, no invalidation callback, one file descriptor per pinned buffer";
            let nofile = ctx.f.process.as_ref().and_then(|p| p.open_files_soft);
            match nofile {
                Some(n) if n <= LOW_NOFILE => Check::warn(
                    "gdrcopy_mode",
                    format!("{detail}: {cost}; RLIMIT_NOFILE soft limit {n} (this process's): a job pinning many buffers runs out of descriptors (EMFILE)"),
                    "raise the open-files limit of the jobs (`ulimit -n`, LimitNOFILE= of the job starter's unit, Slurm PropagateResourceLimits); check it inside a job with `check --as-job`",
                ),
                Some(n) => Check::new(
                    "gdrcopy_mode",
                    Status::Info,
                    format!("{detail}: {cost}; RLIMIT_NOFILE soft limit {}", if n == u64::MAX { "unlimited".to_owned() } else { n.to_string() }),
                    Some("jobs need an open-files limit above the number of buffers they pin".to_owned()),
                ),
                None => Check::new(
                    "gdrcopy_mode",
                    Status::Info,
                    format!("{detail}: {cost}; RLIMIT_NOFILE not read"),
                    Some("jobs need an open-files limit above the number of buffers they pin".to_owned()),
                ),
            }
        }
    }
}
