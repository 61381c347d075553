// SPDX-License-Identifier: MIT OR Apache-2.0
//! The data path: the `static inline` verbs of <infiniband/verbs.h> (`ibv_post_send`,
//! `ibv_post_recv`, `ibv_poll_cq`), which call through the `ops` table of the QP's or CQ's
//! `struct ibv_context`, and the work requests and completions they carry.

use std::ffi::c_int;

use nix::errno::Errno;

use super::{sys, Cq, Qp, RecvWr, SendWr, Sge, Wc};
use crate::commands::bench::BenchError;

/// The op table of a live context.
///
/// # Safety
/// `ctx` is an open `struct ibv_context`.
pub(super) unsafe fn ops<'a>(ctx: *mut sys::ibv_context) -> &'a sys::ibv_context_ops {
    // SAFETY: the caller's.
    unsafe { &(*ctx).ops }
}

/// A provider without one of the data-path ops (none does: verbs_set_ops fills them).
pub(super) fn no_op(what: &str) -> BenchError {
    BenchError::verbs(
        format!("{what} (the provider's op table has none)"),
        Errno::EOPNOTSUPP.into(),
    )
}

impl Cq {
    /// Polls up to `wc.len()` completions: `ibv_poll_cq`, i.e. `cq->context->ops.poll_cq`.
    pub fn poll(&self, wc: &mut [Wc]) -> Result<usize, BenchError> {
        let n = c_int::try_from(wc.len()).unwrap_or(c_int::MAX);
        // SAFETY: a live CQ, whose context outlives it.
        let poll = unsafe { ops((*self.cq).context) }
            .poll_cq
            .ok_or_else(|| no_op("ibv_poll_cq"))?;
        // SAFETY: wc has room for n entries.
        let got = unsafe { poll(self.cq, n, wc.as_mut_ptr()) };
        if got < 0 {
            return Err(BenchError::verbs(
                "ibv_poll_cq",
                std::io::Error::from_raw_os_error(-got),
            ));
        }
        Ok(usize::try_from(got).unwrap_or(0))
    }
}

impl Qp {
    /// `qp->context->ops`, through which the `ibv_post_*` inlines call.
    pub(super) fn ops(&self) -> &sys::ibv_context_ops {
        // SAFETY: a live QP, whose context outlives it.
        unsafe { ops((*self.qp).context) }
    }

    /// Posts one work request with one SGE.
    pub fn post_send(&self, wr: &mut SendWr) -> Result<(), BenchError> {
        let post = self.ops().post_send.ok_or_else(|| no_op("ibv_post_send"))?;
        let mut bad: *mut SendWr = std::ptr::null_mut();
        // SAFETY: wr and its SGE list are valid for the call (the provider copies them).
        let rc = unsafe { post(self.qp, wr, &mut bad) };
        if rc != 0 {
            return Err(BenchError::verbs(
                "ibv_post_send",
                std::io::Error::from_raw_os_error(rc.abs()),
            ));
        }
        Ok(())
    }

    pub fn post_recv(&self, sge: &mut Sge, wr_id: u64) -> Result<(), BenchError> {
        let mut wr = RecvWr {
            wr_id,
            next: std::ptr::null_mut(),
            sg_list: sge,
            num_sge: 1,
        };
        let post = self.ops().post_recv.ok_or_else(|| no_op("ibv_post_recv"))?;
        let mut bad: *mut RecvWr = std::ptr::null_mut();
        // SAFETY: as post_send.
        let rc = unsafe { post(self.qp, &mut wr, &mut bad) };
        if rc != 0 {
            return Err(BenchError::verbs(
                "ibv_post_recv",
                std::io::Error::from_raw_os_error(rc.abs()),
            ));
        }
        Ok(())
    }
}

/// The immediate data of a completion (`wc.imm_data`, sent in network order), in host order.
pub fn wc_imm(wc: &Wc) -> u32 {
    // SAFETY: both members of the union are a u32; any bit pattern is valid.
    u32::from_be(unsafe { wc.__bindgen_anon_1.imm_data })
}

/// A send work request with one SGE; `imm` (host order) goes out in network order.
pub fn send_wr(
    opcode: u32,
    sge: &mut Sge,
    remote_addr: u64,
    rkey: u32,
    imm: u32,
    flags: u32,
) -> SendWr {
    let mut wr = SendWr {
        wr_id: 0,
        next: std::ptr::null_mut(),
        sg_list: sge,
        num_sge: 1,
        opcode,
        send_flags: flags,
        ..SendWr::default()
    };
    wr.__bindgen_anon_1.imm_data = imm.to_be();
    wr.wr.rdma.remote_addr = remote_addr;
    wr.wr.rdma.rkey = rkey;
    wr
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::bench::ibv::{SEND_INLINE, SEND_SIGNALED, WR_RDMA_WRITE_WITH_IMM};

    #[test]
    fn send_wr_fills_the_rdma_member_and_the_immediate() {
        let mut sge = Sge {
            addr: 0x1000,
            length: 64,
            lkey: 7,
        };
        let wr = send_wr(
            WR_RDMA_WRITE_WITH_IMM,
            &mut sge,
            0xdead_0000,
            42,
            0x0102_0304,
            SEND_SIGNALED | SEND_INLINE,
        );
        // SAFETY: the members send_wr wrote.
        let (imm, rdma) = unsafe { (wr.__bindgen_anon_1.imm_data, wr.wr.rdma) };
        assert_eq!(imm.to_ne_bytes(), [1, 2, 3, 4], "network byte order");
        assert_eq!((rdma.remote_addr, rdma.rkey), (0xdead_0000, 42));
        assert_eq!((wr.opcode, wr.send_flags, wr.num_sge), (1, 10, 1));
        assert!(std::ptr::eq(wr.sg_list, &sge) && wr.next.is_null() && wr.wr_id == 0);
    }

    #[test]
    fn completion_immediate_is_read_in_host_order() {
        let mut wc = Wc::default();
        wc.__bindgen_anon_1.imm_data = 0x0102_0304u32.to_be();
        assert_eq!(wc_imm(&wc), 0x0102_0304);
    }
}
