// SPDX-License-Identifier: MIT OR Apache-2.0
//! What is installed rather than loaded: the module a `modprobe nvidia-peermem` would load
//! next (at boot, after a driver reload, or from the NVIDIA GPU Operator's peer-memory
//! container).

use crate::host::modprobe::{ModprobeTarget, TargetKind};
use crate::host::peermem::{Implementation, LoadedModule};

use super::super::super::Check;

/// `None` without a `modules.dep` to read (nothing to say).
pub(super) fn check_modprobe_target(
    target: Option<&ModprobeTarget>,
    modules: &[LoadedModule],
) -> Option<Check> {
    let t = target?;
    let ours_loaded = modules
        .iter()
        .any(|m| m.implementation == Implementation::Nvpeer);
    let install = format!(
        "install ours so that depmod prefers it: the nvpeer-dkms package (its dkms.conf installs under /lib/modules/{0}/updates, which depmod ranks before the driver's directories), then `depmod -a {0}`",
        t.release
    );
    let operator = "the GPU Operator's peer-memory container runs `modprobe nvidia-peermem` in its driver container's /lib/modules, not this one";
    Some(match (&t.path, &t.kind) {
        (None, _) if ours_loaded => Check::warn(
            "modprobe",
            format!(
                "no nvidia_peermem in /lib/modules/{}/modules.dep: ours was loaded by hand, and nothing loads it at the next boot or driver reload",
                t.release
            ),
            install,
        ),
        (None, _) => Check::ok(
            "modprobe",
            format!("no nvidia_peermem installed for {}", t.release),
        ),
        (Some(p), Some(TargetKind::Nvpeer)) => Check::ok(
            "modprobe",
            format!("`modprobe nvidia-peermem` loads nvpeer ({p}); {operator}"),
        ),
        (Some(p), Some(TargetKind::Other)) if ours_loaded => Check::warn(
            "modprobe",
            format!("`modprobe nvidia-peermem` loads another nvidia_peermem ({p}), not the nvpeer loaded now: the next boot or driver reload replaces ours"),
            install,
        ),
        (Some(p), Some(TargetKind::Other)) => Check::ok(
            "modprobe",
            format!("`modprobe nvidia-peermem` loads {p} (not nvpeer)"),
        ),
        (Some(p), _) => Check::ok(
            "modprobe",
            format!("`modprobe nvidia-peermem` loads {p} (compressed: which implementation is not read)"),
        ),
    })
}
