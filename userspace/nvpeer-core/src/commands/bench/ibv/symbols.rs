// SPDX-License-Identifier: MIT OR Apache-2.0
//! libibverbs loaded once with libloading, and its exported entry points.

use std::ffi::{c_char, c_int, c_void};
use std::sync::OnceLock;

use super::sys;
use crate::commands::bench::BenchError;

/// The exported entry points, typed with the generated declarations (the prototypes of
/// <infiniband/verbs.h>).
pub struct Ibv {
    _lib: libloading::Library,
    pub get_device_list: unsafe extern "C" fn(*mut c_int) -> *mut *mut sys::ibv_device,
    pub free_device_list: unsafe extern "C" fn(*mut *mut sys::ibv_device),
    pub get_device_name: unsafe extern "C" fn(*mut sys::ibv_device) -> *const c_char,
    pub open_device: unsafe extern "C" fn(*mut sys::ibv_device) -> *mut sys::ibv_context,
    pub close_device: unsafe extern "C" fn(*mut sys::ibv_context) -> c_int,
    pub alloc_pd: unsafe extern "C" fn(*mut sys::ibv_context) -> *mut sys::ibv_pd,
    pub dealloc_pd: unsafe extern "C" fn(*mut sys::ibv_pd) -> c_int,
    pub reg_mr:
        unsafe extern "C" fn(*mut sys::ibv_pd, *mut c_void, usize, c_int) -> *mut sys::ibv_mr,
    pub reg_dmabuf_mr: Option<
        unsafe extern "C" fn(*mut sys::ibv_pd, u64, usize, u64, c_int, c_int) -> *mut sys::ibv_mr,
    >,
    pub dereg_mr: unsafe extern "C" fn(*mut sys::ibv_mr) -> c_int,
    pub create_cq: unsafe extern "C" fn(
        *mut sys::ibv_context,
        c_int,
        *mut c_void,
        *mut sys::ibv_comp_channel,
        c_int,
    ) -> *mut sys::ibv_cq,
    pub destroy_cq: unsafe extern "C" fn(*mut sys::ibv_cq) -> c_int,
    pub create_qp:
        unsafe extern "C" fn(*mut sys::ibv_pd, *mut sys::ibv_qp_init_attr) -> *mut sys::ibv_qp,
    pub destroy_qp: unsafe extern "C" fn(*mut sys::ibv_qp) -> c_int,
    pub modify_qp: unsafe extern "C" fn(*mut sys::ibv_qp, *mut sys::ibv_qp_attr, c_int) -> c_int,
    /// The exported symbol (not the `___ibv_query_port` inline): it fills the
    /// `struct ibv_port_attr` prefix the provider knows.
    pub query_port:
        unsafe extern "C" fn(*mut sys::ibv_context, u8, *mut sys::ibv_port_attr) -> c_int,
    pub query_gid:
        unsafe extern "C" fn(*mut sys::ibv_context, u8, c_int, *mut sys::ibv_gid) -> c_int,
}

// SAFETY: the function pointers and the library handle are immutable after loading;
// libibverbs' entry points are thread-safe.
unsafe impl Send for Ibv {}
// SAFETY: as above.
unsafe impl Sync for Ibv {}

/// The name of the library that is loaded, overridable for tests (`NVPEER_LIBIBVERBS`).
fn lib_name() -> String {
    std::env::var("NVPEER_LIBIBVERBS").unwrap_or_else(|_| "libibverbs.so.1".to_owned())
}

fn load() -> Result<Ibv, String> {
    let name = lib_name();
    // SAFETY: loading libibverbs runs its initialisers, which only set up its own state.
    let lib = unsafe { libloading::Library::new(&name) }
        .map_err(|e| format!("cannot load {name} (rdma-core not installed?): {e}"))?;
    macro_rules! sym {
        ($name:literal) => {
            // SAFETY: the types are the C prototypes of <infiniband/verbs.h>.
            *unsafe { lib.get(concat!($name, "\0").as_bytes()) }
                .map_err(|e| format!("{name} lacks {}: {e}", $name))?
        };
    }
    Ok(Ibv {
        get_device_list: sym!("ibv_get_device_list"),
        free_device_list: sym!("ibv_free_device_list"),
        get_device_name: sym!("ibv_get_device_name"),
        open_device: sym!("ibv_open_device"),
        close_device: sym!("ibv_close_device"),
        alloc_pd: sym!("ibv_alloc_pd"),
        dealloc_pd: sym!("ibv_dealloc_pd"),
        reg_mr: sym!("ibv_reg_mr"),
        // SAFETY: as above; absent before rdma-core 34.
        reg_dmabuf_mr: unsafe { lib.get(b"ibv_reg_dmabuf_mr\0") }.ok().map(|s| *s),
        dereg_mr: sym!("ibv_dereg_mr"),
        create_cq: sym!("ibv_create_cq"),
        destroy_cq: sym!("ibv_destroy_cq"),
        create_qp: sym!("ibv_create_qp"),
        destroy_qp: sym!("ibv_destroy_qp"),
        modify_qp: sym!("ibv_modify_qp"),
        query_port: sym!("ibv_query_port"),
        query_gid: sym!("ibv_query_gid"),
        _lib: lib,
    })
}

/// libibverbs, loaded once.
pub fn ibv() -> Result<&'static Ibv, BenchError> {
    static IBV: OnceLock<Result<Ibv, String>> = OnceLock::new();
    IBV.get_or_init(load)
        .as_ref()
        .map_err(|e| BenchError::NoVerbs(e.clone()))
}
