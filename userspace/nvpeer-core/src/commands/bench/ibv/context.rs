// SPDX-License-Identifier: MIT OR Apache-2.0
//! The RDMA devices, and an open device with its protection domain and port queries.

use std::ffi::{c_int, CStr};

use super::{errno, ibv, sys, Ibv};
use crate::commands::bench::BenchError;

/// The names of the RDMA devices libibverbs sees.
pub fn device_names() -> Result<Vec<String>, BenchError> {
    let ibv = ibv()?;
    let mut n: c_int = 0;
    // SAFETY: n is a valid out pointer; the list is freed below.
    let list = unsafe { (ibv.get_device_list)(&mut n) };
    if list.is_null() {
        return Ok(Vec::new());
    }
    let mut names = Vec::new();
    for i in 0..usize::try_from(n).unwrap_or(0) {
        // SAFETY: the list has n entries.
        let dev = unsafe { *list.add(i) };
        // SAFETY: a device of the live list; its name is NUL-terminated.
        let p = unsafe { (ibv.get_device_name)(dev) };
        if !p.is_null() {
            // SAFETY: non-NULL and NUL-terminated.
            names.push(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned());
        }
    }
    // SAFETY: freed once.
    unsafe { (ibv.free_device_list)(list) };
    Ok(names)
}

/// An open device with one protection domain.
pub struct Context {
    pub ibv: &'static Ibv,
    pub name: String,
    pub ctx: *mut sys::ibv_context,
    pub pd: *mut sys::ibv_pd,
}

// SAFETY: verbs objects may be used from any thread (libibverbs is thread-safe).
unsafe impl Send for Context {}
// SAFETY: as above.
unsafe impl Sync for Context {}

impl Context {
    /// Opens `name` (or the first device when `None`) and allocates a PD.
    pub fn open(name: Option<&str>) -> Result<Self, BenchError> {
        let ibv = ibv()?;
        let mut n: c_int = 0;
        // SAFETY: n is a valid out pointer.
        let list = unsafe { (ibv.get_device_list)(&mut n) };
        if list.is_null() || n <= 0 {
            if !list.is_null() {
                // SAFETY: freed once.
                unsafe { (ibv.free_device_list)(list) };
            }
            return Err(BenchError::NoDevice(
                "libibverbs lists no RDMA device (no NIC, driver not loaded, or for Soft-RoCE: \
                 `rdma link add rxe0 type rxe netdev ETH`)"
                    .to_owned(),
            ));
        }
        let mut found: Option<(*mut sys::ibv_device, String)> = None;
        let mut all = Vec::new();
        for i in 0..usize::try_from(n).unwrap_or(0) {
            // SAFETY: the list has n entries.
            let dev = unsafe { *list.add(i) };
            // SAFETY: a device of the live list.
            let p = unsafe { (ibv.get_device_name)(dev) };
            let dn = if p.is_null() {
                String::new()
            } else {
                // SAFETY: NUL-terminated.
                unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
            };
            if found.is_none() && name.is_none_or(|w| w == dn) {
                found = Some((dev, dn.clone()));
            }
            all.push(dn);
        }
        let Some((dev, dn)) = found else {
            // SAFETY: freed once.
            unsafe { (ibv.free_device_list)(list) };
            return Err(BenchError::NoDevice(format!(
                "{:?} not found; libibverbs lists: {}",
                name.unwrap_or(""),
                all.join(", ")
            )));
        };
        // SAFETY: dev belongs to the live list (an open context keeps its device alive).
        let ctx = unsafe { (ibv.open_device)(dev) };
        let err = errno();
        // SAFETY: freed once; the opened context stays valid.
        unsafe { (ibv.free_device_list)(list) };
        if ctx.is_null() {
            return Err(BenchError::verbs(format!("ibv_open_device({dn})"), err));
        }
        // SAFETY: ctx is open.
        let pd = unsafe { (ibv.alloc_pd)(ctx) };
        if pd.is_null() {
            let err = errno();
            // SAFETY: opened above.
            unsafe { (ibv.close_device)(ctx) };
            return Err(BenchError::verbs(format!("ibv_alloc_pd({dn})"), err));
        }
        Ok(Self {
            ibv,
            name: dn,
            ctx,
            pd,
        })
    }

    /// (state, active_mtu, lid, link_layer) of a port.
    pub fn port(&self, port: u8) -> Result<(u32, u32, u16, u8), BenchError> {
        // A zeroed buffer larger than struct ibv_port_attr (room for a libibverbs newer than
        // the headers built against).
        let mut buf = PortAttr { room: [0; 32] };
        let out = std::ptr::addr_of_mut!(buf).cast::<sys::ibv_port_attr>();
        // SAFETY: as above; the pointer covers the whole buffer.
        let rc = unsafe { (self.ibv.query_port)(self.ctx, port, out) };
        if rc != 0 {
            return Err(BenchError::verbs(
                format!("ibv_query_port({}, {port})", self.name),
                std::io::Error::from_raw_os_error(rc.abs()),
            ));
        }
        // SAFETY: zero-initialised, then written by ibv_query_port; every field is an integer.
        let a = unsafe { buf.attr };
        Ok((a.state, a.active_mtu, a.lid, a.link_layer))
    }

    pub fn gid(&self, port: u8, index: i32) -> Option<[u8; 16]> {
        let mut gid = sys::ibv_gid { raw: [0; 16] };
        // SAFETY: an out union ibv_gid.
        let rc = unsafe { (self.ibv.query_gid)(self.ctx, port, index, &mut gid) };
        // SAFETY: both members of union ibv_gid are plain bytes/integers.
        let raw = unsafe { gid.raw };
        (rc == 0).then_some(raw)
    }
}

/// The out buffer of `ibv_query_port`.
#[repr(C)]
union PortAttr {
    attr: sys::ibv_port_attr,
    room: [u64; 32],
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: every MR, QP and CQ of this context is dropped before it (owners hold it).
        unsafe {
            (self.ibv.dealloc_pd)(self.pd);
            (self.ibv.close_device)(self.ctx);
        }
    }
}
