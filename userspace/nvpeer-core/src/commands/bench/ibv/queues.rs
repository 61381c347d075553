// SPDX-License-Identifier: MIT OR Apache-2.0
//! Completion queues and RC queue pairs: creation (with the data-path ops checked present),
//! `ibv_modify_qp`, destruction. Posting and polling are in `ops.rs`.

use std::ffi::c_int;

use super::ops::{no_op, ops};
use super::{errno, sys, Context, Ibv, QpAttr, MAX_INLINE, QPT_RC};
use crate::commands::bench::BenchError;

/// A completion queue.
pub struct Cq {
    pub ibv: &'static Ibv,
    pub cq: *mut sys::ibv_cq,
}

// SAFETY: see Context.
unsafe impl Send for Cq {}

impl Cq {
    pub fn new(ctx: &Context, depth: i32) -> Result<Self, BenchError> {
        // SAFETY: ctx is open; no channel, vector 0.
        let cq = unsafe {
            (ctx.ibv.create_cq)(
                ctx.ctx,
                depth,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                0,
            )
        };
        if cq.is_null() {
            return Err(BenchError::verbs("ibv_create_cq", errno()));
        }
        let cq = Self { ibv: ctx.ibv, cq };
        // SAFETY: the CQ is live; its context is ctx.
        unsafe { ops((*cq.cq).context) }
            .poll_cq
            .ok_or_else(|| no_op("ibv_poll_cq"))?;
        Ok(cq)
    }
}

impl Drop for Cq {
    fn drop(&mut self) {
        // SAFETY: its QPs are destroyed first (owners drop QPs before CQs).
        unsafe { (self.ibv.destroy_cq)(self.cq) };
    }
}

/// An RC queue pair.
pub struct Qp {
    pub ibv: &'static Ibv,
    pub qp: *mut sys::ibv_qp,
    pub qpn: u32,
}

// SAFETY: see Context.
unsafe impl Send for Qp {}

impl Qp {
    pub fn new(ctx: &Context, send_cq: &Cq, recv_cq: &Cq, depth: u32) -> Result<Self, BenchError> {
        let mut attr = sys::ibv_qp_init_attr {
            qp_context: std::ptr::null_mut(),
            send_cq: send_cq.cq,
            recv_cq: recv_cq.cq,
            srq: std::ptr::null_mut(),
            cap: sys::ibv_qp_cap {
                max_send_wr: depth,
                max_recv_wr: depth,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: MAX_INLINE,
            },
            qp_type: QPT_RC,
            sq_sig_all: 0,
        };
        // SAFETY: attr is fully initialised; the CQs are live.
        let qp = unsafe { (ctx.ibv.create_qp)(ctx.pd, &mut attr) };
        if qp.is_null() {
            return Err(BenchError::verbs("ibv_create_qp (RC)", errno()));
        }
        // SAFETY: a live struct ibv_qp.
        let qpn = unsafe { (*qp).qp_num };
        let qp = Self {
            ibv: ctx.ibv,
            qp,
            qpn,
        };
        let ops = qp.ops();
        ops.post_send.ok_or_else(|| no_op("ibv_post_send"))?;
        ops.post_recv.ok_or_else(|| no_op("ibv_post_recv"))?;
        Ok(qp)
    }

    pub fn modify(&self, attr: &mut QpAttr, mask: c_int, what: &str) -> Result<(), BenchError> {
        // SAFETY: attr is a full struct ibv_qp_attr.
        let rc = unsafe { (self.ibv.modify_qp)(self.qp, &mut attr.0, mask) };
        if rc != 0 {
            return Err(BenchError::verbs(
                format!("ibv_modify_qp to {what}"),
                std::io::Error::from_raw_os_error(rc.abs()),
            ));
        }
        Ok(())
    }
}

impl Drop for Qp {
    fn drop(&mut self) {
        // SAFETY: destroyed once.
        unsafe { (self.ibv.destroy_qp)(self.qp) };
    }
}
