// SPDX-License-Identifier: GPL-2.0

//! The GPUs pinned since load, for their totals under `/sys/module/<name>/nvpeer/gpus/GPU-<uuid>/`
//! (issue 37): NVIDIA's UUIDs in a fixed table kept until unload, each with its directory (the
//! glue's kobject, created by [`note`]); a file's text is summed when read ([`totals`]).
//!
//! # Locks
//!
//! The table is read with no lock: an entry below `COUNT` holds its UUID for good, written before
//! the release store that counts it and read after an acquire load. Adding one takes the
//! registry's GPU lock (`pin::with_gpu_lock`, a mutex), with no shard held: a pin notes its GPU
//! after the critical section that made it live; the glue's directory mutex is taken after it is
//! dropped.

use crate::atomic::{Acquire, Atomic, Relaxed, Release};
use crate::ffi;
use crate::module_ref::ModuleRef;
use crate::pin;
use crate::records;

const MAX_GPUS: usize = ffi::NVPEER_MAX_GPUS as usize;

/// How many entries of `UUIDS` are set (see the module's Locks).
static COUNT: Atomic<u64> = Atomic::new(0);
/// Each entry's UUID as two native-endian halves.
static UUIDS: [[Atomic<u64>; 2]; MAX_GPUS] = [const { [const { Atomic::new(0) }; 2] }; MAX_GPUS];

/// A 16-byte NVIDIA UUID as the two halves `UUIDS` keeps.
fn halves(uuid: &[u8; 16]) -> [u64; 2] {
    let value = u128::from_ne_bytes(*uuid);
    [value as u64, (value >> 64) as u64]
}

/// The UUID of entry `gpu`, if it is set.
fn uuid_of(gpu: usize) -> Option<[u8; 16]> {
    if gpu >= COUNT.load(Acquire) as usize {
        return None;
    }
    let [lo, hi] = &UUIDS[gpu];
    let value = u128::from(lo.load(Relaxed)) | (u128::from(hi.load(Relaxed)) << 64);
    Some(value.to_ne_bytes())
}

/// The index of `halves` among the first `count` entries.
fn find(halves: [u64; 2], from: usize, count: usize) -> Option<usize> {
    (from..count.min(MAX_GPUS))
        .find(|&i| UUIDS[i][0].load(Relaxed) == halves[0] && UUIDS[i][1].load(Relaxed) == halves[1])
}

/// Notes the GPU of a new pin: at its first pin since load it is added and gets its directory.
/// May sleep: called with no lock held, with a module reference (`module`, which keeps the
/// registry installed).
pub(crate) fn note(uuid: &[u8; 16], module: &ModuleRef) {
    let want = halves(uuid);
    let seen = COUNT.load(Acquire) as usize;
    if find(want, 0, seen).is_some() {
        return;
    }
    let added = pin::with_gpu_lock(module, || {
        let count = COUNT.load(Relaxed) as usize;
        if find(want, seen, count).is_some() || count == MAX_GPUS {
            return None;
        }
        let [lo, hi] = &UUIDS[count];
        lo.store(want[0], Relaxed);
        hi.store(want[1], Relaxed);
        // Counted after its UUID is written: readers load the count with acquire.
        COUNT.store(count as u64 + 1, Release);
        Some(count)
    });
    if let Some(Some(gpu)) = added {
        let name = GpuName::of(uuid);
        // SAFETY: an index of the table and a NUL-terminated name that outlives the call; no
        // lock of ours is held (the glue's function takes its directory mutex and may sleep).
        unsafe { ffi::nvpeer_glue_gpu_publish(gpu as u32, name.as_c_ptr()) };
    }
}

/// A GPU's name as nvidia-smi writes it, `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`, NUL-terminated.
pub(crate) struct GpuName([u8; GpuName::LEN + 1]);

impl GpuName {
    const LEN: usize = 4 + 36;

    pub(crate) fn of(uuid: &[u8; 16]) -> Self {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut name = [0u8; Self::LEN + 1];
        name[..4].copy_from_slice(b"GPU-");
        let mut at = 4;
        for (i, byte) in uuid.iter().enumerate() {
            if matches!(i, 4 | 6 | 8 | 10) {
                name[at] = b'-';
                at += 1;
            }
            name[at] = HEX[usize::from(byte >> 4)];
            name[at + 1] = HEX[usize::from(byte & 0xf)];
            at += 2;
        }
        Self(name)
    }

    /// The name without its NUL.
    pub(crate) fn as_str(&self) -> &str {
        // Only ASCII was written.
        core::str::from_utf8(&self.0[..Self::LEN]).unwrap_or("GPU-?")
    }

    fn as_c_ptr(&self) -> *const kernel::ffi::c_char {
        self.0.as_ptr().cast()
    }
}

/// The totals a GPU's files show.
#[derive(Default)]
pub(crate) struct Totals {
    pub(crate) pinned_bytes: u64,
    pub(crate) pins: u64,
    pub(crate) registrations: u64,
}

/// The totals of entry `gpu` now (`None`: no such entry), summed over the registrations.
/// Called with no lock held while the registry is installed (the directories go before it).
pub(crate) fn totals(gpu: usize) -> Option<Totals> {
    uuid_of(gpu).map(|uuid| records::gpu_totals(&uuid))
}
