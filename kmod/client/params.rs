// SPDX-License-Identifier: GPL-2.0

//! Module parameters, with NVIDIA's names, values and defaults so existing modprobe.d files keep
//! working. They are declared in `nvpeer_glue.c` (sysfs-visible, mode 0444) and validated here.

use kernel::prelude::*;

use crate::ffi;
use crate::pin::Sharing;

/// Which MOFED peer-memory ABI the invalidating client is registered with (`peerdirect_support`).
/// Only a hint since the core's generation is detected at load (`core_gen`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PeerDirectSupport {
    /// 0: MOFED >= 5.1: the `peer_memory_client_ex` form with `PEER_MEM_INVALIDATE_UNMAPS`.
    Default,
    /// 1: MOFED <= 5.0 and 4.9 LTS: the 152-byte legacy form with a zeroed tail.
    Legacy,
}

/// How the persistent (non-invalidating) client is exposed (`persistent_api_support`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PersistentApiSupport {
    /// 0: an invalidating `nv_mem` plus a persistent `nv_mem_nc` (NVIDIA before 560).
    Legacy,
    /// 1: a single persistent client named `nv_mem` (NVIDIA 560 and later).
    Default,
}

/// The validated parameter set the module runs with.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Params {
    pub(crate) peerdirect: PeerDirectSupport,
    /// `peerdirect_support` as given, for log lines.
    pub(crate) peerdirect_value: i32,
    pub(crate) persistent_api: PersistentApiSupport,
    /// `persistent_api_support` as given, for log lines.
    pub(crate) persistent_api_value: i32,
    /// `share_pins` (ours): which registrations of one range by one process share an NVIDIA pin.
    pub(crate) share_pins: Sharing,
    /// `share_pins` as given, for log lines.
    pub(crate) share_pins_value: i32,
}

impl Params {
    /// Reads and validates the load-time parameters; a bad value fails the load with a log
    /// line that names the parameter and the accepted values.
    pub(crate) fn from_module() -> Result<Self> {
        // SAFETY: plain getters of `int` module parameters that are only written by the module
        // loader before init runs.
        let (peerdirect, persistent_api, share_pins) = unsafe {
            (
                ffi::nvpeer_glue_peerdirect_support(),
                ffi::nvpeer_glue_persistent_api_support(),
                ffi::nvpeer_glue_share_pins(),
            )
        };
        let (peerdirect_value, persistent_api_value) = (peerdirect, persistent_api);
        let peerdirect = match peerdirect {
            0 => PeerDirectSupport::Default,
            1 => PeerDirectSupport::Legacy,
            v => {
                pr_err!(
                    "invalid peerdirect_support={}: use 0 (MOFED >= 5.1) or 1 (legacy MOFED <= 5.0, 4.9 LTS)\n",
                    v
                );
                return Err(EINVAL);
            }
        };
        let persistent_api = match persistent_api {
            0 => PersistentApiSupport::Legacy,
            1 => PersistentApiSupport::Default,
            v => {
                pr_err!(
                    "invalid persistent_api_support={}: use 1 (one persistent client nv_mem) or 0 (nv_mem invalidating + nv_mem_nc persistent)\n",
                    v
                );
                return Err(EINVAL);
            }
        };
        let share_pins_value = share_pins;
        let share_pins = match share_pins {
            0 => Sharing::Off,
            1 => Sharing::Invalidating,
            2 => Sharing::All,
            v => {
                pr_err!(
                    "invalid share_pins={}: use 1 (the invalidating client's registrations of one range and process share an NVIDIA pin), 2 (the persistent client's too) or 0 (one pin per registration)\n",
                    v
                );
                return Err(EINVAL);
            }
        };
        Ok(Self {
            peerdirect,
            peerdirect_value,
            persistent_api,
            persistent_api_value,
            share_pins,
            share_pins_value,
        })
    }
}
