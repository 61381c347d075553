// SPDX-License-Identifier: MIT OR Apache-2.0
//! Build provenance, judged before load (issue 37): does the `nvidia_peermem` that `modprobe`
//! would load fit the kernel, the IB core and the NVIDIA driver that run now? The verdict is
//! [`crate::check::provenance::verdict`] of the facts gathered (`Facts::provenance`), the one
//! `nvpeer attach` acts on: `compatible`, `rebuild: built against X, running Y`, or `unknown`.
//!
//! What it can judge depends on the build. Every build has the kernel release it was built for
//! (`vermagic`); the imported symbols' CRCs and the exporters' versions are in the
//! `nvpeer_import`/`nvpeer_provider` keys, which the module writes from the second part of
//! issue 37 on. A build without them is judged on the kernel release alone, and the row says
//! that the CRCs are left to the kernel's loader.

use crate::check::provenance::{self, Verdict};
use crate::host::peermem::Implementation;
use crate::host::provenance::ProvenanceFacts;

use super::super::Check;
use super::Ctx;

const ID: &str = "provenance";

/// The `provenance` row; `None` without an `nvidia_peermem` in `modules.dep` (the `modprobe` row
/// says so).
pub(super) fn row(ctx: &Ctx) -> Option<Check> {
    if let Some(e) = ctx.unreadable(ID) {
        return Some(Check::error(ID, e));
    }
    let f = ctx.f.provenance.as_ref()?;
    if f.modinfo_error.is_none() && !f.ours {
        return Some(Check::ok(
            ID,
            format!(
                "`modprobe nvidia_peermem` loads {}, which is not nvpeer's: it records no provenance to judge",
                f.file
            ),
        ));
    }
    let ours_loaded = ctx
        .f
        .modules
        .iter()
        .any(|m| m.implementation == Implementation::Nvpeer);
    Some(match provenance::verdict(f) {
        Verdict::Compatible { notes } => {
            let mut detail = format!("compatible: {} {}", f.file, judged(f));
            for n in notes {
                detail.push_str(&format!("; {n}"));
            }
            Check::ok(ID, detail)
        }
        v @ Verdict::Rebuild { .. } if ours_loaded => Check::warn(
            ID,
            format!(
                "{v}: the loaded module works until it is unloaded, but the next load of {} (a reboot, a driver or network-stack reload) is refused",
                f.file
            ),
            REBUILD,
        ),
        v @ Verdict::Rebuild { .. } => Check::fail(
            ID,
            format!(
                "{v}: `modprobe nvidia_peermem` would be refused ({}: disagrees about version of symbol, or invalid module format)",
                f.file
            ),
            REBUILD,
        ),
        Verdict::Unknown { .. } if records_nothing(f) => Check::ok(
            ID,
            format!(
                "{} {}; the CRCs of the symbols it imports from the IB core and the NVIDIA driver: not judged: it records none (no nvpeer_import in its .modinfo: a build before the module wrote its provenance), so the kernel's loader judges them at load",
                f.file,
                release_only(f)
            ),
        ),
        Verdict::Unknown { why } => Check::warn(
            ID,
            format!("unknown: {why}"),
            "run nvpeer check as root (the exporters' module files must be readable); where an exporter was upgraded on disk and not reloaded, rebuild before its next reload (`systemctl start nvpeer-rebuild.service`)",
        ),
    })
}

const REBUILD: &str = "rebuild and reinstall it for what runs: `systemctl start nvpeer-rebuild.service` (the nvpeer package's unit), or `dkms autoinstall -k $(uname -r)` where DKMS installed it; then `nvpeer attach`";

/// A build without `nvpeer_*` keys (and nothing else wrong with its `.modinfo`).
fn records_nothing(f: &ProvenanceFacts) -> bool {
    f.modinfo_error.is_none() && f.ours && f.imports.is_empty() && f.malformed.is_empty()
}

/// What a build without the keys was judged on: its kernel release.
fn release_only(f: &ProvenanceFacts) -> String {
    match &f.built_for {
        Some(b) => format!("is built for kernel {b}, the running one"),
        None => "records no kernel release (no vermagic)".to_owned(),
    }
}

/// What a compatible verdict rests on.
fn judged(f: &ProvenanceFacts) -> String {
    let crcs = f.imports.iter().filter(|i| i.crc.is_some()).count();
    let exporters: Vec<String> = f
        .exporters
        .iter()
        .map(|e| match &e.version {
            Some(v) => format!("{} {v}", e.module),
            None => e.module.clone(),
        })
        .collect();
    format!(
        "(built for kernel {}; {crcs} of {} imported symbols with a CRC, each as {} export it)",
        f.built_for.as_deref().unwrap_or("?"),
        f.imports.len(),
        exporters.join(" and ")
    )
}
