// SPDX-License-Identifier: GPL-2.0

//! The generation of the MOFED peer-memory core we register with, detected at load from what it
//! exports (CONTRACT 1.1, checked on every release 4.0 ... 25.10, NV-Kernels and Ubuntu SAUCE),
//! and what follows from it: the ABI form of the invalidating client and the SG layout.
//!
//! `peerdirect_support` used to be the only way to say which core runs, and NVIDIA's default (0)
//! is wrong on the 4.1 ... 5.0 cores: their 152-byte struct reads our `ex_size` and `flags` as
//! `get/put_context_private_data`, so the client is silently never selected and an unprivileged
//! verb can make the core call address 0x98 (REVIEW-KMOD C4). The exports cannot be wrong about
//! the core, so the detection wins; a contradicting parameter is reported in one line.

use kernel::prelude::*;

use crate::client::Form;
use crate::ffi;
use crate::params::PeerDirectSupport;
use crate::sg::Layout;

/// A core generation, as far as a client can tell it apart and needs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CoreGeneration {
    /// MOFED 4.1 ... 5.0 (4.9 LTS): exports `ib_get_peer_private_data`; reads the 152-byte legacy
    /// struct, accounts `nmap * page_size` bytes (one page per SG entry), calls dma_unmap,
    /// put_pages and release from inside its invalidate.
    Legacy4x,
    /// MOFED 4.0 or 5.1-0.6.6.0 ... 5.4-2: exports neither marker. Reads the first 136 bytes
    /// only, so both forms are read alike; calls dma_unmap and put_pages from its invalidate.
    NoUnmaps,
    /// MOFED 5.1-2.5.8.0.60, 5.4-3 ... 25.10, NV-Kernels, Ubuntu SAUCE: exports
    /// `ib_umem_stop_invalidation_notifier` and honours `PEER_MEM_INVALIDATE_UNMAPS`.
    Unmaps,
}

impl CoreGeneration {
    /// Detects the running core from the glue's weak references. `None` when it exports both
    /// markers, which no known core does.
    pub(crate) fn detect(core: &ffi::nvpeer_core_api) -> Option<Self> {
        match (core.exports_peer_private_data, core.exports_stop_invalidation_notifier) {
            (true, false) => Some(Self::Legacy4x),
            (false, false) => Some(Self::NoUnmaps),
            (false, true) => Some(Self::Unmaps),
            (true, true) => None,
        }
    }

    /// The id shown in `/sys/module/<name>/nvpeer/core` and the load log (the names of
    /// `peer_core_sim`'s generations).
    pub(crate) fn id(self) -> &'static CStr {
        match self {
            Self::Legacy4x => kernel::c_str!("4x"),
            Self::NoUnmaps => kernel::c_str!("5x"),
            Self::Unmaps => kernel::c_str!("5x-unmaps"),
        }
    }

    pub(crate) fn description(self) -> &'static str {
        match self {
            Self::Legacy4x => "MOFED 4.1-5.0, legacy PeerDirect: exports ib_get_peer_private_data",
            Self::NoUnmaps => "MOFED 4.0 or 5.1-5.4-2: no INVALIDATE_UNMAPS",
            Self::Unmaps => "MOFED 5.1-2.5.8.0.60, 5.4-3 or later: honours INVALIDATE_UNMAPS",
        }
    }

    /// The `peerdirect_support` value this core wants, or `None` when both are read alike.
    fn wanted_peerdirect(self) -> Option<PeerDirectSupport> {
        match self {
            Self::Legacy4x => Some(PeerDirectSupport::Legacy),
            Self::NoUnmaps => None,
            Self::Unmaps => Some(PeerDirectSupport::Default),
        }
    }
}

/// How the clients are registered on the running core.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CorePlan {
    /// The ABI form of the invalidating client (the persistent one is always `Form::Legacy`).
    pub(crate) invalidating_form: Form,
    /// `Some(PerPage)` where the core assumes one 64 KiB page per SG entry; `None`: coalesced,
    /// bounded by the NIC's segment size.
    pub(crate) layout: Option<Layout>,
}

impl CorePlan {
    /// Reconciles the detected generation with `peerdirect_support`: the detection wins, a value
    /// that contradicts it is reported in one line.
    pub(crate) fn new(generation: CoreGeneration, peerdirect: PeerDirectSupport, value: i32) -> Self {
        let effective = match generation.wanted_peerdirect() {
            Some(wanted) if wanted != peerdirect => {
                pr_warn!(
                    "peerdirect_support={} contradicts the detected core {} ({}): following the core\n",
                    value,
                    generation.id().to_str().unwrap_or("?"),
                    generation.description()
                );
                wanted
            }
            Some(wanted) => wanted,
            // 4.0 and 5.1-5.4-2 look alike; `peerdirect_support=1` says "4.0", whose byte
            // accounting assumes one page per entry, as on 4.1-5.0.
            None => peerdirect,
        };
        let (invalidating_form, layout) = match effective {
            PeerDirectSupport::Default => (Form::ExUnmaps, None),
            PeerDirectSupport::Legacy => (Form::Legacy, Some(Layout::PerPage)),
        };
        Self { invalidating_form, layout }
    }
}
