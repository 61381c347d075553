// SPDX-License-Identifier: GPL-2.0

//! The module's own statistics, readable without MOFED's `memory_peers` sysfs (absent on new
//! kernels): `/sys/module/<name>/nvpeer/stats/*` and `.../nvpeer/failures`, shown by the C glue.
//!
//! The counters are global atomics in two cache lines that every registration writes: cheap
//! against a registration's other costs at the rates measured (tests/BENCHMARKS.md), a shared
//! line on a many-core host under heavy registration traffic; per-CPU counters would remove that
//! (REVIEW-KMOD-2 T3-11, not done).

use kernel::error::Error;

use crate::atomic::{Atomic, Relaxed};
use crate::ffi;
use crate::p2p::GPU_PAGE_SIZE;

/// A counter; the discriminants are the C glue's `enum nvpeer_stat`.
#[derive(Clone, Copy)]
#[repr(u32)]
pub(crate) enum Stat {
    LiveContexts = ffi::nvpeer_stat_NVPEER_STAT_LIVE_CONTEXTS,
    Acquired = ffi::nvpeer_stat_NVPEER_STAT_ACQUIRED,
    Declined = ffi::nvpeer_stat_NVPEER_STAT_DECLINED,
    PinCalls = ffi::nvpeer_stat_NVPEER_STAT_PIN_CALLS,
    UnpinCalls = ffi::nvpeer_stat_NVPEER_STAT_UNPIN_CALLS,
    PinnedPages = ffi::nvpeer_stat_NVPEER_STAT_PINNED_PAGES,
    /// Not counted: shown as `PinnedPages` times the GPU page size (one atomic less per pin).
    PinnedBytes = ffi::nvpeer_stat_NVPEER_STAT_PINNED_BYTES,
    Registrations = ffi::nvpeer_stat_NVPEER_STAT_REGISTRATIONS,
    Deregistrations = ffi::nvpeer_stat_NVPEER_STAT_DEREGISTRATIONS,
    SgEntries = ffi::nvpeer_stat_NVPEER_STAT_SG_ENTRIES,
    Revocations = ffi::nvpeer_stat_NVPEER_STAT_REVOCATIONS,
    InvalidateCalls = ffi::nvpeer_stat_NVPEER_STAT_INVALIDATE_CALLS,
    Failures = ffi::nvpeer_stat_NVPEER_STAT_FAILURES,
    PinShares = ffi::nvpeer_stat_NVPEER_STAT_PIN_SHARES,
    LivePins = ffi::nvpeer_stat_NVPEER_STAT_LIVE_PINS,
    UnpinsLeftToCallback = ffi::nvpeer_stat_NVPEER_STAT_UNPINS_LEFT_TO_CALLBACK,
}

/// The operation a failure is counted under; the discriminants are `enum nvpeer_op`.
#[derive(Clone, Copy, Debug)]
#[repr(u32)]
pub(crate) enum Op {
    Acquire = ffi::nvpeer_op_NVPEER_OP_ACQUIRE,
    GetPages = ffi::nvpeer_op_NVPEER_OP_GET_PAGES,
    DmaMap = ffi::nvpeer_op_NVPEER_OP_DMA_MAP,
    DmaUnmap = ffi::nvpeer_op_NVPEER_OP_DMA_UNMAP,
    PutPages = ffi::nvpeer_op_NVPEER_OP_PUT_PAGES,
    FreeCallback = ffi::nvpeer_op_NVPEER_OP_FREE_CALLBACK,
}

const STATS: usize = ffi::nvpeer_stat_NVPEER_STAT_COUNT as usize;
const OPS: usize = ffi::nvpeer_op_NVPEER_OP_COUNT as usize;
const BUCKETS: usize = ffi::NVPEER_ERRNO_BUCKETS as usize;
/// Errnos counted separately; everything else lands in the last bucket (errno 0 = "other").
const BUCKET_ERRNOS: [i32; BUCKETS] = [
    kernel::bindings::EINVAL as i32,
    kernel::bindings::ENOMEM as i32,
    kernel::bindings::EIO as i32,
    kernel::bindings::ENOTSUPP as i32,
    kernel::bindings::EBUSY as i32,
    kernel::bindings::ENODEV as i32,
    kernel::bindings::EFAULT as i32,
    kernel::bindings::EAGAIN as i32,
    kernel::bindings::EOPNOTSUPP as i32,
    0,
];

static COUNTERS: [Atomic<u64>; STATS] = [const { Atomic::new(0) }; STATS];
static FAILURES: [[Atomic<u64>; BUCKETS]; OPS] = [const { [const { Atomic::new(0) }; BUCKETS] }; OPS];

pub(crate) fn add(stat: Stat, n: u64) {
    COUNTERS[stat as usize].add(n, Relaxed);
}

pub(crate) fn sub(stat: Stat, n: u64) {
    // Atomics wrap: adding the two's complement subtracts.
    COUNTERS[stat as usize].add(n.wrapping_neg(), Relaxed);
}

pub(crate) fn inc(stat: Stat) {
    add(stat, 1);
}

/// Counts a failed operation by its errno.
pub(crate) fn failure(op: Op, err: Error) {
    let errno = -err.to_errno();
    let bucket = BUCKET_ERRNOS
        .iter()
        .position(|&e| e == errno)
        .unwrap_or(BUCKETS - 1);
    FAILURES[op as usize][bucket].add(1, Relaxed);
    inc(Stat::Failures);
}

/// For the C glue's sysfs `show`.
#[no_mangle]
pub(crate) extern "C" fn nvpeer_stat_value(stat: u32) -> u64 {
    if stat == Stat::PinnedBytes as u32 {
        return nvpeer_stat_value(Stat::PinnedPages as u32).wrapping_mul(GPU_PAGE_SIZE);
    }
    COUNTERS.get(stat as usize).map_or(0, |c| c.load(Relaxed))
}

/// For the C glue's sysfs `show`.
#[no_mangle]
pub(crate) extern "C" fn nvpeer_failure_count(op: u32, bucket: u32) -> u64 {
    FAILURES
        .get(op as usize)
        .and_then(|row| row.get(bucket as usize))
        .map_or(0, |c| c.load(Relaxed))
}

/// For the C glue's sysfs `show`: the errno of a bucket, 0 for "other".
#[no_mangle]
pub(crate) extern "C" fn nvpeer_failure_bucket_errno(bucket: u32) -> i32 {
    BUCKET_ERRNOS.get(bucket as usize).copied().unwrap_or(0)
}
