// SPDX-License-Identifier: GPL-2.0

//! The module's own statistics, readable without MOFED's `memory_peers` sysfs (absent on new
//! kernels): `/sys/module/<name>/nvpeer/stats/*` and `.../nvpeer/failures` (their text: `show`).
//!
//! The counters are global atomics in two cache lines that every registration writes: cheap
//! against a registration's other costs at the rates measured (tests/BENCHMARKS.md), a shared
//! line on a many-core host under heavy registration traffic; per-CPU counters would remove that
//! (REVIEW-KMOD-2 T3-11, not done).

use core::ffi::CStr;

use kernel::error::Error;

use crate::atomic::{Atomic, Relaxed};
use crate::ffi;
use crate::p2p::GPU_PAGE_SIZE;

/// A counter, by its index in `nvpeer/stats/`'s files (the glue creates one per index).
#[derive(Clone, Copy)]
#[repr(u32)]
pub(crate) enum Stat {
    LiveContexts,
    Acquired,
    Declined,
    PinCalls,
    UnpinCalls,
    PinnedPages,
    /// Not counted: shown as `PinnedPages` times the GPU page size (one atomic less per pin).
    PinnedBytes,
    Registrations,
    Deregistrations,
    SgEntries,
    Revocations,
    InvalidateCalls,
    Failures,
    PinShares,
    LivePins,
    UnpinsLeftToCallback,
}

const STATS: usize = ffi::NVPEER_STATS as usize;

impl Stat {
    /// Every counter, by index.
    const ALL: [Stat; STATS] = [
        Stat::LiveContexts,
        Stat::Acquired,
        Stat::Declined,
        Stat::PinCalls,
        Stat::UnpinCalls,
        Stat::PinnedPages,
        Stat::PinnedBytes,
        Stat::Registrations,
        Stat::Deregistrations,
        Stat::SgEntries,
        Stat::Revocations,
        Stat::InvalidateCalls,
        Stat::Failures,
        Stat::PinShares,
        Stat::LivePins,
        Stat::UnpinsLeftToCallback,
    ];

    /// The counter of the glue's file `index`.
    pub(crate) fn from_index(index: u32) -> Option<Self> {
        Self::ALL.get(index as usize).copied()
    }

    /// Its file's name under `nvpeer/stats/`.
    pub(crate) fn file_name(self) -> &'static CStr {
        match self {
            Stat::LiveContexts => c"live_contexts",
            Stat::Acquired => c"acquired",
            Stat::Declined => c"declined",
            Stat::PinCalls => c"pin_calls",
            Stat::UnpinCalls => c"unpin_calls",
            Stat::PinnedPages => c"pinned_pages",
            Stat::PinnedBytes => c"pinned_bytes",
            Stat::Registrations => c"registrations",
            Stat::Deregistrations => c"deregistrations",
            Stat::SgEntries => c"sg_entries",
            Stat::Revocations => c"revocations",
            Stat::InvalidateCalls => c"invalidate_calls",
            Stat::Failures => c"failures",
            Stat::PinShares => c"pin_shares",
            Stat::LivePins => c"live_pins",
            Stat::UnpinsLeftToCallback => c"unpins_left_to_callback",
        }
    }
}

// `ALL` lists each counter at its own index (the glue's files are made by index), the last
// variant included.
const _: () = assert!(Stat::UnpinsLeftToCallback as usize + 1 == STATS);
const _: () = {
    let mut i = 0;
    while i < STATS {
        assert!(Stat::ALL[i] as usize == i);
        i += 1;
    }
};

/// The operation a failure is counted under.
#[derive(Clone, Copy, Debug)]
#[repr(u32)]
pub(crate) enum Op {
    Acquire,
    GetPages,
    DmaMap,
    DmaUnmap,
    PutPages,
    FreeCallback,
}

const OPS: usize = Op::FreeCallback as usize + 1;

impl Op {
    const ALL: [Op; OPS] = [Op::Acquire, Op::GetPages, Op::DmaMap, Op::DmaUnmap, Op::PutPages, Op::FreeCallback];

    /// The callback's name in `nvpeer/failures`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Op::Acquire => "acquire",
            Op::GetPages => "get_pages",
            Op::DmaMap => "dma_map",
            Op::DmaUnmap => "dma_unmap",
            Op::PutPages => "put_pages",
            Op::FreeCallback => "free_callback",
        }
    }
}

const _: () = {
    let mut i = 0;
    while i < OPS {
        assert!(Op::ALL[i] as usize == i);
        i += 1;
    }
};

const BUCKETS: usize = 10;
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

/// The value of a counter now.
pub(crate) fn value(stat: Stat) -> u64 {
    match stat {
        Stat::PinnedBytes => COUNTERS[Stat::PinnedPages as usize].load(Relaxed).wrapping_mul(GPU_PAGE_SIZE),
        _ => COUNTERS[stat as usize].load(Relaxed),
    }
}

/// The failures counted so far, by callback and errno (`None`: any other errno), each non-zero.
pub(crate) fn failures() -> impl Iterator<Item = (Op, Option<i32>, u64)> {
    Op::ALL.into_iter().flat_map(|op| {
        BUCKET_ERRNOS.iter().enumerate().filter_map(move |(bucket, &errno)| {
            let n = FAILURES[op as usize][bucket].load(Relaxed);
            (n != 0).then_some((op, (errno != 0).then_some(errno), n))
        })
    })
}
