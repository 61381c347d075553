// SPDX-License-Identifier: GPL-2.0

//! nvpeer: a GPUDirect RDMA peer-memory client. It registers with the MOFED IB core's
//! peer-memory interface and pins GPU memory through the NVIDIA P2P API, replacing NVIDIA's
//! `nvidia-peermem` and Mellanox's `nv_peer_mem`.
//!
//! Files: `compat` (what differs between kernel versions), `atomic` (the atomics and a set-once
//! cell), `params` (module parameters), `core_gen` (the IB core's generation, detected at load),
//! `client` (the clients and their C callbacks), `context` (the per-registration state machine),
//! `pin` (the shared NVIDIA pins and their registry), `owner` (a pin's process), `module_ref`,
//! `p2p` (NVIDIA's API), `sg` (the SG table), `records` (who holds pinned GPU memory), `stats`
//! and `log`; `nvpeer_glue.c` holds what Rust cannot express, `nvpeer_callback.c` the entry of
//! NVIDIA's free callback (its module reference, dropped by a tail jump).

use kernel::prelude::*;

mod atomic;
mod client;
mod compat;
mod context;
mod core_gen;
mod ffi;
mod gpus;
mod log;
mod module_ref;
mod owner;
mod p2p;
mod params;
mod pin;
mod records;
mod sg;
mod show;
mod stats;

use client::{ClientKind, Form, Registration};
use core_gen::{CoreGeneration, CorePlan};
use p2p::{Api, PersistentApi};
use params::{Params, PersistentApiSupport};
use pin::RegistryOwner;

#[cfg(not(nvpeer_legacy_name))]
compat::nvpeer_module!(
    NvPeer,
    "nvidia_peermem",
    "nvpeer developers",
    "GPUDirect RDMA peer-memory client for NVIDIA GPU memory (nvpeer, Rust)"
);

#[cfg(nvpeer_legacy_name)]
compat::nvpeer_module!(
    NvPeer,
    "nv_peer_mem",
    "nvpeer developers",
    "GPUDirect RDMA peer-memory client for NVIDIA GPU memory (nvpeer, Rust)"
);

/// The other name a GPU peer-memory module we replace has; only one may be loaded (they share
/// client names). A module of our own name cannot be loaded beside us anyway.
#[cfg(not(nvpeer_legacy_name))]
const OTHER_IMPLEMENTATION: &CStr = kernel::c_str!("nv_peer_mem");
#[cfg(nvpeer_legacy_name)]
const OTHER_IMPLEMENTATION: &CStr = kernel::c_str!("nvidia_peermem");

/// `/sys/module/<name>/nvpeer/`, removed when dropped.
struct SysfsDir;

impl SysfsDir {
    fn create(core_id: &'static CStr) -> Result<Self> {
        // SAFETY: called once from module init; the glue keeps its kobject in a static that only
        // `nvpeer_glue_sysfs_exit` (our `Drop`) releases; `core_id` is a static string.
        kernel::error::to_result(unsafe { ffi::nvpeer_glue_sysfs_init(compat::char_ptr(core_id).cast()) })
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

/// `/sys/kernel/debug/<name>/registrations` and `/sys/module/<name>/nvpeer/gpus/` (`records`),
/// whose readers walk the pin registry: made after it is installed, removed (their readers
/// drained) before it goes.
struct RecordsFiles;

impl RecordsFiles {
    fn create(_pins: &RegistryOwner) -> Result<Self> {
        // SAFETY: called once from module init, after the sysfs directory and the registry;
        // only `Drop` removes what it creates.
        kernel::error::to_result(unsafe { ffi::nvpeer_glue_records_init() })
            .inspect_err(|e| pr_err!("cannot create /sys/module/<name>/nvpeer/gpus: {:?}
", e))?;
        Ok(Self)
    }
}

impl Drop for RecordsFiles {
    fn drop(&mut self) {
        // SAFETY: after `create`, once; the registry is still installed (dropped after us).
        unsafe { ffi::nvpeer_glue_records_exit() };
    }
}

/// The loaded module. Fields drop in order: clients are unregistered (every registration
/// released) before the records' files, the pin registry and sysfs go.
struct NvPeer {
    _clients: KVec<Registration>,
    _records: RecordsFiles,
    _pins: RegistryOwner,
    _sysfs: SysfsDir,
}

fn refuse_other_implementations() -> Result {
    let name = OTHER_IMPLEMENTATION;
    // SAFETY: a NUL-terminated name.
    if unsafe { ffi::nvpeer_glue_module_loaded(compat::char_ptr(name).cast()) } {
        pr_err!(
            "{} is loaded: only one GPU peer-memory module may run (they register the same clients); `rmmod {}` first\n",
            name.to_str().unwrap_or("?"),
            name.to_str().unwrap_or("?")
        );
        return Err(EBUSY);
    }
    Ok(())
}

/// The clients to register, in order, as NVIDIA's 560+ module does (CONTRACT 3.2).
fn plan(params: &Params, persistent: PersistentApi) -> Result<KVec<(ClientKind, &'static str)>> {
    let mut clients = KVec::new();
    let can_persist = persistent != PersistentApi::Unavailable;
    let wanted: &[(ClientKind, &'static str)] = match params.persistent_api {
        PersistentApiSupport::Default if can_persist => &[(ClientKind::Persistent, "nv_mem")],
        PersistentApiSupport::Default => {
            pr_warn!("this NVIDIA driver has no persistent pinning API: registering nv_mem as an invalidating client\n");
            &[(ClientKind::Invalidating, "nv_mem")]
        }
        PersistentApiSupport::Legacy if can_persist => {
            &[(ClientKind::Invalidating, "nv_mem"), (ClientKind::Persistent, "nv_mem_nc")]
        }
        PersistentApiSupport::Legacy => {
            pr_warn!("this NVIDIA driver has no persistent pinning API: not registering nv_mem_nc\n");
            &[(ClientKind::Invalidating, "nv_mem")]
        }
    };
    for &c in wanted {
        clients.push(c, GFP_KERNEL)?;
    }
    Ok(clients)
}

impl kernel::Module for NvPeer {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        let params = Params::from_module()?;
        refuse_other_implementations()?;

        let mut p2p_raw = ffi::nvpeer_p2p_api::default();
        let mut core = ffi::nvpeer_core_api::default();
        // SAFETY: fills two plain structs with resolved (or NULL) function pointers.
        unsafe { ffi::nvpeer_glue_resolve(&mut p2p_raw, &mut core) };
        if core.register_client.is_none() || core.unregister_client.is_none() {
            pr_err!("ib_register_peer_memory_client not found: this IB core has no peer-memory support; install MLNX_OFED / DOCA-OFED (or a kernel with the peer-memory patches) and load ib_core first\n");
            return Err(ENODEV);
        }
        let api = Api::resolve(p2p_raw)?;
        let Some(generation) = CoreGeneration::detect(&core) else {
            pr_err!("this IB core exports both ib_get_peer_private_data (MOFED 4.1-5.0) and ib_umem_stop_invalidation_notifier (5.4-3+): no known core does; refusing to guess its client ABI\n");
            return Err(ENODEV);
        };
        let core_plan = CorePlan::new(generation, params.peerdirect, params.peerdirect_value);
        client::set_layout(core_plan.layout);
        let sysfs = SysfsDir::create(generation.id())?;
        // SAFETY: returns a static NUL-terminated string.
        let version = unsafe { CStr::from_char_ptr(ffi::nvpeer_glue_version()) }
            .to_str()
            .map_err(|_| EINVAL)?;

        let planned = plan(&params, api.persistent())?;
        let pins = RegistryOwner::install(params.share_pins)?;
        let records = RecordsFiles::create(&pins)?;
        // Reserved before the first registration, so that nothing after it can fail but a later
        // registration itself: a failed init frees the module whatever its reference count, and
        // a pin NVIDIA still held (after a failed put_pages) would then call freed code.
        let mut clients = KVec::with_capacity(planned.len(), GFP_KERNEL)?;
        for (kind, name) in planned {
            let client_form = match kind {
                ClientKind::Invalidating => core_plan.invalidating_form,
                // No invalidation, so nothing for the `_ex` flags to say.
                ClientKind::Persistent => Form::Legacy,
            };
            // On failure the clients registered so far are unregistered as `clients` drops.
            let reg = Registration::register(core, kind, name, version, client_form)?;
            let pinning = match (kind, api.persistent()) {
                (ClientKind::Invalidating, _) => "nvidia_p2p_get_pages with a free callback",
                (_, PersistentApi::Explicit) => "nvidia_p2p_get_pages_persistent",
                _ => "NULL-callback pins (driver <= 530)",
            };
            pr_info!(
                "registered peer-memory client {} ({:?}, {:?}, {})\n",
                reg.name(),
                kind,
                client_form,
                pinning
            );
            // Within the capacity reserved above: no allocation.
            clients.push(reg, GFP_KERNEL)?;
        }
        // Nothing below can fail: only now may the core's acquire succeed.
        for reg in clients.iter() {
            reg.open();
        }
        let sg_entries = match core_plan.layout {
            Some(_) => "one per 64 KiB page",
            None => "coalesced",
        };
        pr_info!(
            "nvpeer {} loaded: core {} ({}), peerdirect_support={} persistent_api_support={} share_pins={}, sg entries {}\n",
            version,
            generation.id().to_str().unwrap_or("?"),
            generation.description(),
            params.peerdirect_value,
            params.persistent_api_value,
            params.share_pins_value,
            sg_entries
        );
        Ok(Self {
            _clients: clients,
            _records: records,
            _pins: pins,
            _sysfs: sysfs,
        })
    }
}

impl Drop for NvPeer {
    fn drop(&mut self) {
        // Every pin a free callback handed to the work item is dropped already (each host held a
        // module reference, and exit runs only once none is left); this waits until the work
        // function that dropped the last one has returned (REVIEW-KMOD C5; the callbacks' own
        // returns are covered by their module reference: `pin::defer_drop`).
        // SAFETY: no precondition: flushes the module's own work item.
        unsafe { ffi::nvpeer_glue_flush_deferred() };
        pr_info!("nvpeer unloading\n");
    }
}
