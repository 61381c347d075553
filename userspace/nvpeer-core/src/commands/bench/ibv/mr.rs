// SPDX-License-Identifier: MIT OR Apache-2.0
//! Memory regions: `ibv_reg_mr`, `ibv_reg_dmabuf_mr` and its capability probe.

use std::ffi::{c_int, c_void};

use nix::errno::Errno;

use super::{
    errno, sys, Context, Ibv, ACCESS_LOCAL_WRITE, ACCESS_REMOTE_READ, ACCESS_REMOTE_WRITE,
};

/// A registered memory region.
pub struct Mr {
    pub ibv: &'static Ibv,
    pub mr: *mut sys::ibv_mr,
    pub lkey: u32,
    pub rkey: u32,
}

// SAFETY: see Context.
unsafe impl Send for Mr {}

impl Mr {
    fn from_raw(ibv: &'static Ibv, mr: *mut sys::ibv_mr) -> Self {
        // SAFETY: a live struct ibv_mr.
        let (lkey, rkey) = unsafe { ((*mr).lkey, (*mr).rkey) };
        Self {
            ibv,
            mr,
            lkey,
            rkey,
        }
    }

    /// `ibv_reg_mr`; the error keeps the errno (EFAULT diagnosis).
    pub fn register(ctx: &Context, addr: u64, len: usize) -> Result<Self, std::io::Error> {
        let access = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ;
        // SAFETY: the caller keeps [addr, addr+len) mapped for the life of the MR.
        let mr = unsafe { (ctx.ibv.reg_mr)(ctx.pd, addr as *mut c_void, len, access as c_int) };
        if mr.is_null() {
            return Err(errno());
        }
        Ok(Self::from_raw(ctx.ibv, mr))
    }

    /// `ibv_reg_dmabuf_mr(pd, offset, len, iova, fd, access)`.
    pub fn register_dmabuf(
        ctx: &Context,
        fd: c_int,
        offset: u64,
        len: usize,
        iova: u64,
    ) -> Result<Self, std::io::Error> {
        let Some(reg) = ctx.ibv.reg_dmabuf_mr else {
            return Err(Errno::EOPNOTSUPP.into());
        };
        let access = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ;
        // SAFETY: fd is a dma-buf the caller owns.
        let mr = unsafe { reg(ctx.pd, offset, len, iova, fd, access as c_int) };
        if mr.is_null() {
            return Err(errno());
        }
        Ok(Self::from_raw(ctx.ibv, mr))
    }
}

/// NCCL's capability probe: `ibv_reg_dmabuf_mr(pd, 0, 0, 0, -1, 0)`; true when the kernel and
/// provider support dma-buf (any errno other than EOPNOTSUPP/EPROTONOSUPPORT).
pub fn dmabuf_capable(ctx: &Context) -> bool {
    let Some(reg) = ctx.ibv.reg_dmabuf_mr else {
        return false;
    };
    // SAFETY: zero length and no fd: nothing can be registered.
    let mr = unsafe { reg(ctx.pd, 0, 0, 0, -1, 0) };
    if !mr.is_null() {
        // SAFETY: just registered.
        unsafe { (ctx.ibv.dereg_mr)(mr) };
        return true;
    }
    !matches!(Errno::last(), Errno::EOPNOTSUPP | Errno::EPROTONOSUPPORT)
}

impl Drop for Mr {
    fn drop(&mut self) {
        // SAFETY: registered once, deregistered once.
        unsafe { (self.ibv.dereg_mr)(self.mr) };
    }
}
