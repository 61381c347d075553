// SPDX-License-Identifier: GPL-2.0

//! nvpeer: a GPUDirect RDMA peer-memory client. It registers with the MOFED IB core's
//! peer-memory interface and pins GPU memory through the NVIDIA P2P API, replacing NVIDIA's
//! `nvidia-peermem` and Mellanox's `nv_peer_mem`.

use kernel::prelude::*;

mod ffi;
mod params;

#[cfg(not(nvpeer_legacy_name))]
module! {
    type: NvPeer,
    name: "nvidia_peermem",
    authors: ["nvpeer developers"],
    description: "GPUDirect RDMA peer-memory client for NVIDIA GPU memory (nvpeer, Rust)",
    license: "GPL",
}

#[cfg(nvpeer_legacy_name)]
module! {
    type: NvPeer,
    name: "nv_peer_mem",
    authors: ["nvpeer developers"],
    description: "GPUDirect RDMA peer-memory client for NVIDIA GPU memory (nvpeer, Rust)",
    license: "GPL",
}

/// `/sys/module/<name>/nvpeer/`, removed when dropped.
struct SysfsDir;

impl SysfsDir {
    fn create() -> Result<Self> {
        // SAFETY: called once from module init; the glue keeps its kobject in a static that only
        // `nvpeer_glue_sysfs_exit` (our `Drop`) releases.
        kernel::error::to_result(unsafe { ffi::nvpeer_glue_sysfs_init() })
            .inspect_err(|e| pr_err!("cannot create /sys/module/<name>/nvpeer: {:?}\n", e))?;
        Ok(Self)
    }
}

impl Drop for SysfsDir {
    fn drop(&mut self) {
        // SAFETY: `create` succeeded, so the directory exists and is removed exactly once.
        unsafe { ffi::nvpeer_glue_sysfs_exit() };
    }
}

/// The loaded module.
struct NvPeer {
    params: params::Params,
    _sysfs: SysfsDir,
}

impl kernel::Module for NvPeer {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        let params = params::Params::from_module()?;
        pr_info!(
            "nvpeer loaded: peerdirect_support={:?} persistent_api_support={:?}\n",
            params.peerdirect,
            params.persistent_api
        );
        Ok(Self {
            params,
            _sysfs: SysfsDir::create()?,
        })
    }
}

impl Drop for NvPeer {
    fn drop(&mut self) {
        pr_info!("nvpeer unloaded ({:?})\n", self.params.peerdirect);
    }
}
