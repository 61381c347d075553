// SPDX-License-Identifier: MIT OR Apache-2.0
//! `struct ibv_qp_attr` with setters, and the `enum ibv_qp_attr_mask` bits of `ibv_modify_qp`.

use std::ffi::c_int;

use super::sys;

/// `struct ibv_qp_attr` with setters for the fields the engine sets (all others zero).
#[repr(transparent)]
#[derive(Default)]
pub struct QpAttr(pub sys::ibv_qp_attr);

impl QpAttr {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn qp_state(&mut self, v: u32) {
        self.0.qp_state = v;
    }
    pub fn path_mtu(&mut self, v: u32) {
        self.0.path_mtu = v;
    }
    pub fn rq_psn(&mut self, v: u32) {
        self.0.rq_psn = v;
    }
    pub fn sq_psn(&mut self, v: u32) {
        self.0.sq_psn = v;
    }
    pub fn dest_qp_num(&mut self, v: u32) {
        self.0.dest_qp_num = v;
    }
    pub fn qp_access_flags(&mut self, v: u32) {
        self.0.qp_access_flags = v;
    }
    /// ah_attr: grh.dgid, grh.sgid_index, grh.hop_limit (64), dlid, is_global, port_num.
    pub fn ah(&mut self, dgid: &[u8; 16], sgid_index: u8, dlid: u16, global: bool, port: u8) {
        let ah = &mut self.0.ah_attr;
        ah.grh.dgid = sys::ibv_gid { raw: *dgid };
        ah.grh.sgid_index = sgid_index;
        ah.grh.hop_limit = 64;
        ah.dlid = dlid;
        ah.is_global = u8::from(global);
        ah.port_num = port;
    }
    pub fn pkey_index(&mut self, v: u16) {
        self.0.pkey_index = v;
    }
    pub fn max_rd_atomic(&mut self, v: u8) {
        self.0.max_rd_atomic = v;
    }
    pub fn max_dest_rd_atomic(&mut self, v: u8) {
        self.0.max_dest_rd_atomic = v;
    }
    pub fn min_rnr_timer(&mut self, v: u8) {
        self.0.min_rnr_timer = v;
    }
    pub fn port_num(&mut self, v: u8) {
        self.0.port_num = v;
    }
    pub fn timeout(&mut self, v: u8) {
        self.0.timeout = v;
    }
    pub fn retry_cnt(&mut self, v: u8) {
        self.0.retry_cnt = v;
    }
    pub fn rnr_retry(&mut self, v: u8) {
        self.0.rnr_retry = v;
    }
}

/// `enum ibv_qp_attr_mask` bits, as the `int attr_mask` of `ibv_modify_qp`.
const fn mask(bit: sys::ibv_qp_attr_mask) -> c_int {
    bit as c_int
}
pub const QP_STATE: c_int = mask(sys::IBV_QP_STATE);
pub const QP_ACCESS_FLAGS: c_int = mask(sys::IBV_QP_ACCESS_FLAGS);
pub const QP_PKEY_INDEX: c_int = mask(sys::IBV_QP_PKEY_INDEX);
pub const QP_PORT: c_int = mask(sys::IBV_QP_PORT);
pub const QP_AV: c_int = mask(sys::IBV_QP_AV);
pub const QP_PATH_MTU: c_int = mask(sys::IBV_QP_PATH_MTU);
pub const QP_TIMEOUT: c_int = mask(sys::IBV_QP_TIMEOUT);
pub const QP_RETRY_CNT: c_int = mask(sys::IBV_QP_RETRY_CNT);
pub const QP_RNR_RETRY: c_int = mask(sys::IBV_QP_RNR_RETRY);
pub const QP_RQ_PSN: c_int = mask(sys::IBV_QP_RQ_PSN);
pub const QP_MAX_QP_RD_ATOMIC: c_int = mask(sys::IBV_QP_MAX_QP_RD_ATOMIC);
pub const QP_MIN_RNR_TIMER: c_int = mask(sys::IBV_QP_MIN_RNR_TIMER);
pub const QP_SQ_PSN: c_int = mask(sys::IBV_QP_SQ_PSN);
pub const QP_MAX_DEST_RD_ATOMIC: c_int = mask(sys::IBV_QP_MAX_DEST_RD_ATOMIC);
pub const QP_DEST_QPN: c_int = mask(sys::IBV_QP_DEST_QPN);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::bench::ibv::QPS_RTR;

    #[test]
    fn qp_attr_setters_write_their_fields_only() {
        let mut a = QpAttr::new();
        a.qp_state(QPS_RTR);
        a.ah(&[9; 16], 3, 0x11, true, 1);
        a.max_dest_rd_atomic(16);
        let q = &a.0;
        assert_eq!(
            (q.qp_state, q.max_dest_rd_atomic, q.cur_qp_state),
            (2, 16, 0)
        );
        // SAFETY: dgid was written whole.
        assert_eq!(unsafe { q.ah_attr.grh.dgid.raw }, [9; 16]);
        let ah = &q.ah_attr;
        assert_eq!(
            (
                ah.grh.sgid_index,
                ah.grh.hop_limit,
                ah.dlid,
                ah.is_global,
                ah.port_num
            ),
            (3, 64, 0x11, 1, 1)
        );
        assert_eq!((q.port_num, q.alt_ah_attr.dlid, q.qkey), (0, 0, 0));
    }

    #[test]
    fn modify_masks_are_the_qp_attr_mask_bits() {
        assert_eq!(QP_STATE | QP_AV | QP_DEST_QPN, 1 | 128 | 1 << 20);
    }
}
