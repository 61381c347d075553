// SPDX-License-Identifier: MIT OR Apache-2.0
//! The build provenance of the module `modprobe nvidia_peermem` would load (issue 37), read with
//! the kmod tools through [`crate::host::provenance::gather`] (the same facts `nvpeer attach` judges):
//! the file's `.modinfo` and, for each exporting module, the CRCs its module file exports. Only
//! the host's own `modules.dep` is looked at: that is where `modprobe` on the host loads from.

use crate::error::Result;
use crate::host::modtools::ModuleTools;
use crate::host::provenance::{self, ProvenanceFacts};
use crate::host::Host;

/// The name `modprobe` is asked for (the legacy `nv_peer_mem` build is judged by `nvpeer attach
/// --module nv_peer_mem`).
pub(super) const MODULE: &str = "nvidia_peermem";

/// `None`: no `modules.dep` for the running release, or no `nvidia_peermem` in it.
pub(super) fn installed(host: &Host, tools: &dyn ModuleTools) -> Result<Option<ProvenanceFacts>> {
    provenance::gather(host, tools, MODULE)
}
