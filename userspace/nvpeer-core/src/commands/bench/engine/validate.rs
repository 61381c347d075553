// SPDX-License-Identifier: MIT OR Apache-2.0
//! Payload and completion checks: bytes against the pattern, receives, failed completions.

use crate::commands::bench::ibv::{self, sys, Wc};
use crate::commands::bench::mem::{first_mismatch, pattern, Buffer};
use crate::commands::bench::{BenchError, Op};

/// Compares the `size`-byte message `seed` in `buf`'s sink half (at `half`) with its pattern;
/// the bytes verified, or the first differing byte as a validation error.
pub(super) fn verify(
    buf: &Buffer,
    half: usize,
    seed: u64,
    size: usize,
    what: &str,
) -> Result<u64, BenchError> {
    let want = pattern(seed, size);
    let mut got = vec![0u8; size];
    buf.read(half, &mut got)?;
    match first_mismatch(&got, &want) {
        None => Ok(size as u64),
        Some(i) => Err(BenchError::Validation(format!(
            "{what}: {size}-byte message {seed}: byte {i} is {:#04x}, expected {:#04x}",
            got[i], want[i]
        ))),
    }
}

pub(super) fn check_recv(op: Op, wc: &Wc, seed: u64, size: usize) -> Result<(), BenchError> {
    if wc.byte_len as usize != size && op == Op::Send {
        return Err(BenchError::Validation(format!(
            "received {} bytes, expected {size}",
            wc.byte_len
        )));
    }
    if op == Op::WriteImm {
        if wc.opcode != ibv::WC_RECV_RDMA_WITH_IMM {
            return Err(BenchError::Validation(format!(
                "completion opcode {} is not RECV_RDMA_WITH_IMM",
                wc.opcode
            )));
        }
        if ibv::wc_imm(wc) != seed as u32 {
            return Err(BenchError::Validation(format!(
                "immediate {} where {seed} was expected",
                ibv::wc_imm(wc)
            )));
        }
    }
    Ok(())
}

/// A failed work completion as an error that names a peer that went away.
pub(super) fn check_completion(what: &str, w: &Wc) -> Result<(), BenchError> {
    if w.status == sys::IBV_WC_SUCCESS {
        return Ok(());
    }
    Err(BenchError::Peer(format!(
        "{what} completion failed: {} (status {}, vendor error {:#x}){}",
        ibv::wc_status_str(w.status),
        w.status,
        w.vendor_err,
        if matches!(
            w.status,
            sys::IBV_WC_RETRY_EXC_ERR | sys::IBV_WC_WR_FLUSH_ERR
        ) {
            ": the peer is gone (killed or disconnected)"
        } else {
            ""
        }
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wc(status: u32) -> Wc {
        Wc {
            status,
            vendor_err: 0x81,
            ..Wc::default()
        }
    }

    fn message(status: u32) -> Option<String> {
        check_completion("send", &wc(status))
            .err()
            .map(|e| e.to_string())
    }

    #[test]
    fn success_passes_and_failures_name_the_status() {
        assert!(message(0).is_none());
        let local = message(4).unwrap_or_default();
        assert!(
            local.contains(
                "send completion failed: local protection error (status 4, vendor error 0x81)"
            ),
            "{local}"
        );
        assert!(!local.contains("the peer is gone"), "{local}");
    }

    #[test]
    fn retry_exceeded_and_flush_say_the_peer_is_gone() {
        // 12 = IBV_WC_RETRY_EXC_ERR, 5 = IBV_WC_WR_FLUSH_ERR (the numbers compared before).
        for status in [12, 5] {
            let m = message(status).unwrap_or_default();
            assert!(
                m.ends_with(&format!(
                    "(status {status}, vendor error 0x81): the peer is gone (killed or disconnected)"
                )),
                "{m}"
            );
        }
    }
}
