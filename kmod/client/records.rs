// SPDX-License-Identifier: GPL-2.0

//! Who holds pinned GPU memory (issue 37): every registration from `acquire` to the section in
//! which it leaves its pin (`put_pages`, else `release`) is listed in its shard, read by
//! `/sys/kernel/debug/<name>/registrations`, and the per-GPU totals under
//! `/sys/module/<name>/nvpeer/gpus/` are summed over the same lists when read (kmod/README.md,
//! "Who holds pinned GPU memory").
//!
//! The record is part of the registration's own object ([`Record`]): what is fixed at
//! `acquire` (process, cgroup, comm, range, time), filled before the registration is shared,
//! and its links in its shard's list ([`List`]), written in critical sections the registration
//! takes anyway: it is linked in the one that publishes its pin (`RegContext::take_pin`) and
//! unlinked in the one that leaves it (`RegContext::unpin`); the last registration of a pin
//! that NVIDIA still holds after it left (left to its callback, or an unpin NVIDIA refused) is
//! linked again, with a new id, while the pin keeps it (`RegContext::hold_locked`), and
//! unlinked by the callback's revocation (`RegContext::revoke_locked`). So recording takes no
//! lock and allocates nothing; what changes (state, pin, GPU, NIC) is never copied for the
//! reader, which reads it from the registration under the same lock, one registration at a time.
//!
//! The file and the directories are the C glue's (6.12 has no Rust debugfs, and 7.2's makes
//! neither a 0400 file nor one read a line at a time); what they show is formatted in `show`.
//!
//! # Locks
//!
//! A list and the links of its registrations are guarded by their shard's lock, like the
//! registrations' states. The reader takes one shard lock at a time (inside the records file's
//! seq_file `m->lock` and debugfs' file reference, or a per-GPU file's kernfs active
//! reference: `m->lock -> shard`, `kernfs active -> shard`) and, under it, only takes references
//! (a `struct pid`'s and a cgroup's: atomic increments), copies and, for the per-GPU totals,
//! marks pins; it formats (`show`; a cgroup's path takes `cgroup_mutex`) with no lock held.
//! The full list is `context`'s.

use core::ptr::NonNull;

use crate::atomic::{Atomic, Relaxed};
use crate::context::RegContext;
use crate::ffi;
use crate::gpus::Totals;
use crate::pin::{self, Chain, ShardLocked};

/// A registration's record: what is fixed at `acquire`, and its links in its shard's list.
///
/// # Invariants
///
/// `fixed` holds a reference on its `tgid` and (when not null) its `cgroup`, taken by
/// `nvpeer_glue_record_init`, and is not written after [`Record::new`]. `entry` is guarded by
/// the lock of the shard of the registration holding this record.
pub(crate) struct Record {
    fixed: ffi::nvpeer_record,
    entry: ShardLocked<Entry>,
}

// SAFETY: `fixed` is read-only after `new` and its pointers are references on reference-counted
// kernel objects, which any thread may read and put; `entry` is reached only under its shard's
// lock (`ShardLocked`).
unsafe impl Send for Record {}
// SAFETY: as above: shared access reads `fixed`, which nobody writes.
unsafe impl Sync for Record {}

/// A registration's place in its shard's list.
///
/// # Invariants
///
/// `id` is 0 while the registration is not listed; while listed, its id, and `prev` and `next`
/// are its neighbours in its shard's list, each a listed (so live) registration of that shard.
struct Entry {
    id: u64,
    prev: Option<NonNull<RegContext>>,
    next: Option<NonNull<RegContext>>,
}

// SAFETY: the pointers are to registrations that are live while listed and only followed under
// the lock that guards the list (type invariant); moving the entry moves no ownership.
unsafe impl Send for Entry {}

/// A shard's listed registrations, oldest first (so by increasing id: ids are drawn in the
/// critical section that links).
///
/// # Invariants
///
/// `head` and `tail` are the first and last registrations whose [`Entry`] links them, all of
/// this shard, each live while listed: a registration is unlinked before its last reference can
/// go (`RegContext`'s invariants).
pub(crate) struct List {
    head: Option<NonNull<RegContext>>,
    tail: Option<NonNull<RegContext>>,
}

// SAFETY: as `Entry`'s: the pointers are followed only under the list's shard lock.
unsafe impl Send for List {}

impl List {
    pub(crate) const fn new() -> Self {
        // INVARIANT: empty.
        Self { head: None, tail: None }
    }
}

/// The next registration's id (never 0, which says "not listed"; below 2^56, which the reader's
/// file positions need, for as long as a registration a nanosecond would take 2 years).
static IDS: Atomic<u64> = Atomic::new(1);

impl Record {
    /// The record of a registration of `[va, va + bytes)` the current task begins.
    pub(crate) fn new(va: u64, bytes: u64) -> Self {
        let mut fixed = ffi::nvpeer_record::default();
        // SAFETY: `fixed` is writable; the call takes references for it (dropped in `drop`).
        unsafe { ffi::nvpeer_glue_record_init(&mut fixed, va, bytes) };
        // INVARIANT: references just taken; not listed.
        Self { fixed, entry: ShardLocked::new(Entry { id: 0, prev: None, next: None }) }
    }
}

impl Record {
    /// The fixed part, for `nvpeer_glue_record_copy` (which only reads it).
    pub(crate) fn fixed(&self) -> *const ffi::nvpeer_record {
        &self.fixed
    }

    /// The registering thread group's `struct pid`, referenced by this record until it is
    /// dropped (type invariant): a pin hosted in the same object borrows it as its owner.
    pub(crate) fn tgid(&self) -> Option<NonNull<core::ffi::c_void>> {
        NonNull::new(self.fixed.tgid.cast())
    }
}

impl Drop for Record {
    fn drop(&mut self) {
        // SAFETY: the references `new` took (type invariant), dropped once.
        unsafe { ffi::nvpeer_glue_record_fini(&mut self.fixed) };
    }
}

/// `ctx`'s entry, under its shard's lock.
///
/// # Safety
///
/// `chain` is the data of `ctx`'s shard's lock.
unsafe fn entry<'a>(ctx: &'a RegContext, chain: &'a mut Chain) -> &'a mut Entry {
    // SAFETY: `chain` locks `ctx`'s shard (caller), which guards the entry (invariant).
    unsafe { ctx.record().entry.access_mut(ctx.shard(), chain) }
}

/// Lists `ctx` at the end of its shard's list, with a new id.
///
/// # Safety
///
/// `chain` is the data of `ctx`'s shard's lock; `ctx` is not listed, lives in its `Arc` (it does
/// not move), and is unlinked ([`unlink`]) before its last reference goes.
pub(crate) unsafe fn link(ctx: &RegContext, chain: &mut Chain) {
    let me = NonNull::from(ctx);
    let tail = chain.records.tail;
    let id = IDS.fetch_add(1, Relaxed);
    // SAFETY: `chain` is `ctx`'s shard's (caller).
    // INVARIANT: listed, after the list's last registration.
    *unsafe { entry(ctx, chain) } = Entry { id, prev: tail, next: None };
    match tail {
        // SAFETY: the list's tail is a live registration of this shard (`List` invariant);
        // `chain` locks that shard.
        Some(t) => unsafe { entry(t.as_ref(), chain) }.next = Some(me),
        None => chain.records.head = Some(me),
    }
    chain.records.tail = Some(me);
}

/// Takes `ctx` out of its shard's list, if it is listed.
///
/// # Safety
///
/// `chain` is the data of `ctx`'s shard's lock.
pub(crate) unsafe fn unlink(ctx: &RegContext, chain: &mut Chain) {
    // SAFETY: `chain` is `ctx`'s shard's (caller).
    let e = unsafe { entry(ctx, chain) };
    if e.id == 0 {
        return;
    }
    let (prev, next) = (e.prev, e.next);
    // INVARIANT: not listed from here on; its neighbours are linked to each other below.
    *e = Entry { id: 0, prev: None, next: None };
    match prev {
        // SAFETY: a listed neighbour: live, of this shard (invariant), whose lock is held.
        Some(p) => unsafe { entry(p.as_ref(), chain) }.next = next,
        None => chain.records.head = next,
    }
    match next {
        // SAFETY: as above.
        Some(n) => unsafe { entry(n.as_ref(), chain) }.prev = prev,
        None => chain.records.tail = prev,
    }
}

/// Where a reader of the records file is, as a seq_file position: 0 the header (the glue's),
/// else `((shard + 1) << 56) | id`, the first registration of `shard` with an id of at least
/// `id`, else the first of a later shard (ids stay below 2^56, see `IDS`); a position below
/// 2^56 is shard 0's, so the glue steps with `+ 1` from the header on.
const POS_SHARD_SHIFT: u32 = 56;
const POS_ID_MASK: u64 = (1 << POS_SHARD_SHIFT) - 1;

/// For the records file (C glue, `records_at`): the registration at or after position `*pos`
/// (see [`POS_SHARD_SHIFT`]; not 0): fills `view` (taking references for its `rec`), moves
/// `*pos` to it and returns true; false after the last.
///
/// # Safety
///
/// `pos` and `view` are valid for reads and writes; called with no lock held, between
/// `nvpeer_glue_records_init` and `_exit` (which run with the registry installed).
#[no_mangle]
pub(crate) unsafe extern "C" fn nvpeer_records_at(pos: *mut i64, view: *mut ffi::nvpeer_record_view) -> bool {
    // SAFETY: valid (caller), and ours for the call.
    let (pos, view) = unsafe { (&mut *pos, &mut *view) };
    let at = *pos as u64;
    let mut shard = (at >> POS_SHARD_SHIFT).saturating_sub(1);
    let mut min_id = at & POS_ID_MASK;
    loop {
        let found = pin::with_shard(shard as usize, |chain| {
            let mut cur = chain.records.head;
            while let Some(ptr) = cur {
                // SAFETY: listed in this shard, so live (`List` invariant), its lock held.
                let ctx = unsafe { ptr.as_ref() };
                // SAFETY: `chain` is `ctx`'s shard's.
                let e = unsafe { entry(ctx, chain) };
                let (id, next) = (e.id, e.next);
                if id >= min_id {
                    // SAFETY: as above; `view` is writable (caller).
                    unsafe { ctx.view_locked(chain, view) };
                    view.id = id;
                    return Some(id);
                }
                cur = next;
            }
            None
        });
        match found {
            // Past the last shard (or the registry is gone: not reached, see Safety).
            None => return false,
            Some(Some(id)) => {
                *pos = (((shard + 1) << POS_SHARD_SHIFT) | (id & POS_ID_MASK)) as i64;
                return true;
            }
            Some(None) => {
                shard += 1;
                min_id = 0;
            }
        }
    }
}

/// The pins, their bytes and the registrations on them of the GPU of NVIDIA's UUID `uuid`
/// (`gpus`), summed over every shard's listed registrations (held ones included: a pin NVIDIA
/// still holds after its last registration left). A pin is counted once: a pin's registrations
/// are all in its shard, whose list is walked twice under its lock, first clearing each held
/// pin's mark, then counting a pin where its mark was clear and setting it: O(listed
/// registrations), so that anyone reading a GPU's files (mode 0444) holds a shard lock, which
/// NVIDIA's free callback may wait for, only for one walk of its list (REVIEW-KMOD-3 T4-5).
/// Called with no lock held while the registry is installed.
pub(crate) fn gpu_totals(uuid: &[u8; 16]) -> Totals {
    let mut sum = Totals::default();
    let mut shard = 0;
    while let Some(()) = pin::with_shard(shard, |chain| {
        for counting in [false, true] {
            let mut cur = chain.records.head;
            while let Some(ptr) = cur {
                // SAFETY: listed in this shard, so live (`List` invariant), its lock held.
                let ctx = unsafe { ptr.as_ref() };
                // SAFETY: `chain` is `ctx`'s shard's.
                let held = unsafe { ctx.pin_locked(chain) };
                if let Some(held) = held.filter(|h| h.gpu.as_ref() == Some(uuid)) {
                    // SAFETY: the pin `ctx` holds, live while it does (the lock is held), of
                    // `ctx`'s shard, whose lock `chain` is, held across both walks.
                    let first = unsafe { held.pin.as_ref().mark_locked(chain, counting) };
                    if counting {
                        sum.registrations += 1;
                        if first {
                            sum.pins += 1;
                            sum.pinned_bytes += held.bytes;
                        }
                    }
                }
                // SAFETY: as above.
                cur = unsafe { entry(ctx, chain) }.next;
            }
        }
    }) {
        shard += 1;
    }
    sum
}

/// What a registration holds now (`RegContext::pin_locked`): its pin, the pin's bytes and its
/// GPU's UUID.
pub(crate) struct Held {
    pub(crate) pin: NonNull<pin::SharedPin>,
    pub(crate) bytes: u64,
    pub(crate) gpu: Option<[u8; 16]>,
}
