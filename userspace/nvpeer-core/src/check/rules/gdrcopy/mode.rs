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

use super::super::super::{Check, GdrcopyFacts, Status};
use super::super::predicates::{dummy, mode, Mode};
use super::super::Ctx;

/// Soft `RLIMIT_NOFILE` at or below which the dma-buf mode's one fd per pinned buffer is a risk:
/// the usual default, which a job's sockets and verbs files already draw on.
const LOW_NOFILE: u64 = 1024;

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
