// SPDX-License-Identifier: GPL-2.0

//! The per-registration context: one per successful `acquire`, shared by the IB core (through
//! `client_context`) and by its pin (`pin`: the invalidating pin's free callback revokes every
//! registration on it), so it is reference counted (`Arc`) and driven by an explicit state
//! machine. The NVIDIA pin itself is a [`SharedPin`], which registrations of the same range by
//! the same process share, kept in the object of the registration that pinned it (its host:
//! the object outlives that registration while others hold the pin, [`PinArc`]); the DMA
//! mapping is the registration's own (one per NIC).
//!
//! States and transitions (a revocation is the pin's free callback, i.e. a cudaFree):
//!
//! ```text
//!   Pinning --pinned/joined--> Acquired --get_pages--> Pinned --dma_map--> Mapping --ok--> Mapped
//!      |                          |                    ^  |                   |             |
//!      |                          |                    +--|------failed-------+             |
//!      |                          |                       +--put_pages/release--+-----------+
//!      |                          |                                             v
//!      |                          |                     Unpinned (unmapped if Mapped; then leaves the
//!      |                          |                               pin, and the pin's last one unpins)
//!      +-------revocation---------+----revocation------+-----revocation------+--> Revoked  (no NIC use yet:
//!                                                                          the core is told nothing)
//!   Mapped --revocation--> Invalidating (the core's invalidate runs, lock dropped) --> Revoked
//! ```
//!
//! `dma_unmap` changes nothing: every core follows it with `put_pages` (teardown: `dma_unmap`,
//! `put_pages`, `release`; CONTRACT 1.6), or calls it from inside our free callback's invalidate,
//! where NVIDIA frees the mapping itself once the callback returns. `put_pages` unmaps and leaves
//! the pin in one critical section, so a deregistration takes its shard lock once; where it
//! unpins, the mapping is left to NVIDIA's unpin, which frees every mapping left on the table
//! (`p2p`), and unmapped only if NVIDIA refuses ([`crate::pin::Leaving::leave_mapping`]).
//!
//! In `Revoked` NVIDIA has freed (or is about to free, when the callback returns) the page table
//! and its DMA mappings: nothing of NVIDIA's is touched again.
//!
//! Why the callback only invalidates `Mapped` contexts: before `dma_map` returns, the core has
//! not exposed the range to the NIC, and MOFED 5.x holds the umem's `mapping_lock` around
//! get_pages/dma_map while those wait for NVIDIA's RM lock, which the callback holds: calling
//! invalidate then would deadlock (CONTRACT 1.10). Marking `Revoked` makes the pending `dma_map`
//! fail with -EFAULT instead. Likewise `put_pages` never calls NVIDIA while a callback is running
//! (state `Invalidating`): the MOFED 5.1-5.4 dereg path calls it under `mapping_lock` (the
//! 2696789 deadlock), and NVIDIA frees the pin itself when the callback returns.
//!
//! What this cannot make safe, because it happens inside NVIDIA (CONTRACT 2.4, and `p2p`): a
//! cudaFree while an invalidating registration is inside `dma_map_pages` (NVIDIA reads and
//! writes the freed table), and on 515-530 drivers a `put_pages` that lost the race to the
//! callback (NVIDIA reads the freed table). Our own state stays sound in both: the callback marks
//! the context `Revoked` and we never touch the table again. The persistent client (the default)
//! has no callback and meets neither. Sharing does not widen the first window: the callback
//! revokes every registration of its pin before it calls the core for any (`pin`), so only a
//! `dma_map` already inside NVIDIA when the callback started can meet it.
//!
//! # Locks
//!
//! Edges that exist (A -> B: B taken while A is held; RM = NVIDIA's RM API lock):
//! - MOFED `peer_memory_mutex` (4.x: also the per-client mutex) -> RM: `acquire` pins.
//! - core `mapping_lock` -> RM: 5.x `dma_map` maps, 5.1-5.4-2 dereg `put_pages` unpins, and a
//!   `get_pages` range mismatch unpins.
//! - RM -> `mapping_lock` (4.x: the per-client mutex): the free callback calls the core's
//!   invalidate.
//! - `mapping_lock` -> shard, RM -> shard, shard -> NVIDIA's per-table mapping semaphore
//!   (`dma_unmap_pages`, which takes no RM lock), shard -> the workqueue's pool lock
//!   (`schedule_work` in the free callback's `defer_drop`, `pin`; nothing of ours is taken
//!   under it, the work function takes a shard only after the pool lock is dropped).
//! - A GPU's first pin, after its critical section: the registry's GPU lock -> nothing; then
//!   the glue's directory mutex -> kernfs (`gpus`).
//! - The readers (`records`): the records file's seq_file `m->lock` and debugfs' file
//!   reference -> shard (`nvpeer_records_at`), the per-GPU sysfs files' kernfs active
//!   reference -> shard (`records::gpu_totals`), one shard at a time; the path of a record's
//!   cgroup (`cgroup_mutex`, `css_set_lock`) and everything else they print is read with no
//!   shard held (`show`).
//!
//! No cycle: nothing above is ever taken under a shard but the semaphore and the pool lock,
//! under which nothing of ours or the core's is taken.
//!
//! A registration's `inner` is locked by the shard lock of its pin key (`pin`), its pin's too: one
//! lock for a pin and its registrations, taken one section at a time (never two shards, never
//! nested). It is innermost but for NVIDIA's semaphore: never held across a call into the IB
//! core or into an NVIDIA function that takes the RM lock. Under it, `dma_unmap_pages` (an IOMMU
//! unmap) is the one call that may take long, and only because the free callback must wait for
//! it; the sg_table is allocated with it dropped (`dma_map`).
//!
//! The `mapping_lock <-> RM` cycle between lock classes is made safe per object by one rule,
//! which lockdep cannot check (it sees neither RM's lock nor, in the stand-in, its semaphore):
//! the callback waits for a umem's `mapping_lock` only after moving
//! that context from `Mapped` to `Invalidating` under `inner`, and every thread that may hold
//! that `mapping_lock` re-checks the state under `inner` before calling an RM-locking function
//! and calls none in `Invalidating` (nor in `Revoked`). A shared pin keeps it: the callback
//! revokes the pin and moves every member out of the table-using states in one critical section
//! before it waits for any `mapping_lock`, so a member's `put_pages` (under its own
//! `mapping_lock`) that finds another member being invalidated never unpins; and the threads
//! holding a member's `mapping_lock` call RM only for that member (its `dma_map`, or the last
//! `put_pages`), which the callback then does not wait for.

use core::ptr::NonNull;

use kernel::bindings;
use kernel::prelude::*;
use kernel::sync::Arc;

use crate::client::{ClientKind, ClientSlot};
use crate::atomic::{Acquire, Atomic, Release};
use crate::compat;
use crate::ffi;
use crate::log::{nv_dbg, nv_err, nv_warn};
use crate::module_ref::ModuleRef;
use crate::p2p::{self, Api, DmaMapping, PeerDevice, GPU_PAGE_SIZE};
use crate::owner::Owner;
use crate::pin::{Chain, PinArc, PinRef, Registry, Shard, ShardLocked, SharedPin};
use crate::records::{self, Held, Record};
use crate::sg::{Layout, SgAlloc, SgSlot, SgTable};
use crate::stats::{self, Op, Stat};

/// The 64 KiB-aligned GPU range covering a registration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct GpuRange {
    pub(crate) start: u64,
    pub(crate) len: u64,
}

impl GpuRange {
    /// `[addr, addr + size)` widened to 64 KiB pages; `None` for an empty or overflowing range.
    pub(crate) fn covering(addr: u64, size: u64) -> Option<Self> {
        if size == 0 {
            return None;
        }
        let end = addr.checked_add(size)?.checked_add(GPU_PAGE_SIZE - 1)? & !(GPU_PAGE_SIZE - 1);
        let start = addr & !(GPU_PAGE_SIZE - 1);
        Some(Self { start, len: end - start })
    }

    pub(crate) fn pages(&self) -> u64 {
        self.len / GPU_PAGE_SIZE
    }
}

enum State {
    /// A pin is being taken or joined (NVIDIA's lock may be held by a racing callback); where a
    /// refused acquire ends (the context is then dropped unused).
    Pinning,
    /// Pinned by `acquire`; kept for `get_pages` (one pin per registration at most).
    Acquired(PinRef),
    /// `get_pages` done; not visible to the NIC.
    Pinned(PinRef),
    /// `dma_map` is calling NVIDIA or allocating the sg_table (lock dropped).
    Mapping(PinRef),
    /// DMA addresses handed to the core: the NIC may use them.
    Mapped(PinRef, DmaMapping),
    /// The free callback is telling the core to stop the NIC (lock dropped).
    Invalidating,
    /// NVIDIA revoked the memory: nothing of NVIDIA's may be touched.
    Revoked,
    /// No pin: left it (final but for `Held`), or taken out of the state for a moment under
    /// the lock.
    Unpinned,
    /// Left its pin as its last registration, which NVIDIA still holds (`LeftToCallback`,
    /// `UnpinFailed`): listed again, kept by the pin ([`SharedPin`]'s `links`) until its free
    /// callback makes it `Revoked` (REVIEW-KMOD-3 T4-6). Never uses the pin's table but to read
    /// its GPU's UUID for the records, under the lock: NVIDIA frees the table only after a
    /// successful `put_pages` (not called, or refused, here) or after the callback returned,
    /// which revokes this registration first (CONTRACT 2.5).
    Held(PinArc),
}

impl State {
    /// The state's name, NUL-terminated for the records' reader (C).
    fn c_name(&self) -> &'static CStr {
        match self {
            State::Pinning => kernel::c_str!("pinning"),
            State::Acquired(_) => kernel::c_str!("acquired"),
            State::Pinned(_) => kernel::c_str!("pinned"),
            State::Mapping(_) => kernel::c_str!("mapping"),
            State::Mapped(..) => kernel::c_str!("mapped"),
            State::Invalidating => kernel::c_str!("invalidating"),
            State::Revoked => kernel::c_str!("revoked"),
            State::Unpinned => kernel::c_str!("unpinned"),
            // Named by its pin's state in the records (`view_locked`).
            State::Held(_) => kernel::c_str!("held"),
        }
    }

    fn name(&self) -> &'static str {
        self.c_name().to_str().unwrap_or("?")
    }
}

struct Inner {
    state: State,
    /// From `get_pages`: the core's handle for this umem, passed back to its invalidate.
    core_context: u64,
    /// The entries we handed the core (in `sg_slot` for one entry): taken back (and freed when
    /// allocated) by the core's `put_pages` or `release`, or with the context, never
    /// by the free callback (the core may still be using them then).
    sg: Option<SgTable>,
}

/// One registration.
///
/// # Invariants
///
/// - A state holding a [`PinRef`] holds it from [`SharedPin::acquire`] for this context until
///   the context left the pin ([`PinArc::leave_locked`]) or was revoked by it.
/// - `inner` is locked by `shard`'s lock, the shard of the context's pin key (its pin's).
/// - `_module` holds a module reference for the whole life of the context, and so of the pin
///   it may host (`pin`, made for its pin key and its record's owner; a pin once
///   [`SharedPin::acquire`] pinned anew for it, unused otherwise).
/// - Once `left` is set `sg` is `None` for good and the state is `Unpinned`, or, for the last
///   registration of a pin that NVIDIA still holds, `Held` and then `Revoked` (each set in a
///   critical section of that pin's, [`SharedPin`]).
/// - `sg` is `None` in `Pinning`, `Acquired`, `Pinned` and `Mapping`.
/// - `record` is listed in its shard (`records`) from the critical section that publishes its
///   pin ([`Self::take_pin`]) until one of [`Self::unpin`]'s, and again while `Held`, and never
///   otherwise: `release` always calls `unpin`, which takes the lock unless `left` was set in a
///   section of its own that unlinked; so the context is unlisted before the core's reference
///   goes, and no other reference outlives that listed but the held pin's, which keeps it
///   listed until the revocation that unlists it ([`Self::revoke_locked`]).
/// - Nobody uses `sg_slot`'s entry but through the table in `sg`, when that table is in it: the
///   core stops using a table at or before the `put_pages` or `release` that takes
///   it out of `sg` (an invalidating core may stop inside its invalidate), and a failed
///   `dma_map` gives it none.
pub(crate) struct RegContext {
    kind: ClientKind,
    /// Set in the critical section in which the registration left its pin (`unpin`), whose
    /// `Unpinned` is final: a later `unpin` (`release` after `put_pages`) returns at once.
    left: Atomic<bool>,
    shard: Shard,
    inner: ShardLocked<Inner>,
    /// The pin, when this registration pinned anew (it hosts it, [`PinArc`]); unused when it
    /// joined another's. Before `record`, so dropped before the `struct pid` it borrows.
    pin: SharedPin,
    /// Who registered what, and the context's place in its shard's list (`records`).
    record: Record,
    /// The one entry of a one-entry table, which the core reads and writes (its first/last-entry
    /// fix-ups) while it holds the table.
    sg_slot: SgSlot,
    /// Last: dropped after everything else (see `ModuleRef::drop`).
    _module: ModuleRef,
}

// The memory budget: with its table's entry (32 bytes on x86_64 and arm64, which both select
// NEED_SG_DMA_LENGTH), its record (80 bytes: issue 37) and its pin slot (at most 56, `pin`), a
// 256-byte slab object (an `Arc`'s count and at most 248 bytes); a one-entry table allocates
// nothing more, nor does the pin: 256 bytes, beside NVIDIA's 128-byte context and its table's
// entry (160), which record nothing. (Before the pin moved in: a 192-byte registration and a
// 64-byte pin, the same 256 bytes in two objects.)
const _: () = assert!(
    core::mem::size_of::<RegContext>()
        <= 56 + core::mem::size_of::<bindings::scatterlist>() + core::mem::size_of::<Record>() + 56
);
const _: () = assert!(core::mem::size_of::<RegContext>() <= 256 - 8);

/// The context's state under its shard's lock, for one critical section: `$guard` is a guard
/// every caller took from `$ctx.shard.lock()`.
macro_rules! locked {
    ($ctx:expr, $guard:ident) => {
        // SAFETY: `$guard` locks `$ctx.shard` (see above), which guards `inner` (invariant).
        unsafe { $ctx.inner.access_mut($ctx.shard, &mut $guard) }
    };
}

impl RegContext {
    /// `acquire`: is `[addr, addr + size)` GPU memory? Answers by pinning it and keeps the pin
    /// for `get_pages`. `None` means "not ours" (host memory, freed memory, ...) or "cannot take
    /// it" (the module is being removed, out of memory).
    pub(crate) fn acquire(client: &'static ClientSlot, addr: u64, size: u64) -> Option<Arc<Self>> {
        let range = GpuRange::covering(addr, size)?;
        let Some(module) = ModuleRef::try_get() else {
            nv_dbg!("acquire {:#x}+{:#x}: the module is being removed: declined", addr, size);
            return None;
        };
        let kind = client.kind();
        let (key, shard) = Registry::get(&module)?.place(kind, range)?;
        let inner = ShardLocked::new(Inner { state: State::Pinning, core_context: 0, sg: None });
        let left = Atomic::new(false);
        let sg_slot = SgSlot::new();
        let record = Record::new(addr, size);
        // SAFETY: the record's thread group, referenced by the record, which moves into the
        // object below with the pin slot that keeps the value, and is dropped after that slot.
        let owner = record.tgid().map(|pid| unsafe { Owner::borrowed(pid) });
        let pin = SharedPin::slot(&key, owner, shard);
        // INVARIANT: locked by the shard of its pin key; the module reference is its own; not
        // left; no table yet, so nobody uses the slot; not listed.
        let ctx = Self { kind, left, shard, inner, record, sg_slot, pin, _module: module };
        let ctx = match Arc::new(ctx, GFP_KERNEL) {
            Ok(ctx) => ctx,
            Err(e) => {
                stats::failure(Op::Acquire, e.into());
                nv_err!("acquire {:#x}+{:#x}: cannot allocate a context: out of memory\n", addr, size);
                return None;
            }
        };
        // Until `release` (or below, when the acquire fails).
        stats::inc(Stat::LiveContexts);
        // `Pinning` -> `Acquired`; on an error the context holds no pin and is dropped unused.
        let acquired = match SharedPin::acquire(kind, key, &ctx) {
            Ok(()) => {
                nv_dbg!(
                    "acquire {:#x}+{:#x}: GPU memory, pinned {:#x}+{:#x} ({:?})",
                    addr, size, range.start, range.len, client.kind()
                );
                Some(ctx)
            }
            Err(e) if e == ENOTSUPP && client.kind() == ClientKind::Persistent => {
                // The persistent API refuses MIG instances and vGPU (nv-p2p.h): the user only
                // sees EFAULT from ibv_reg_mr, so say why here.
                stats::failure(Op::Acquire, e);
                nv_warn!(
                    "acquire {:#x}+{:#x}: NVIDIA refused a persistent pin (-ENOTSUPP: MIG or vGPU?); load with persistent_api_support=0 for an invalidating nv_mem\n",
                    addr, size
                );
                None
            }
            Err(e) => {
                // Most often host memory or a freed VA: not a failure, just not ours.
                nv_dbg!("acquire {:#x}+{:#x}: not GPU memory ({:?})", addr, size, e);
                None
            }
        };
        if acquired.is_none() {
            stats::sub(Stat::LiveContexts, 1);
        }
        acquired
    }

    /// The shard whose lock guards this registration's state (and its pin's).
    pub(crate) fn shard(&self) -> Shard {
        self.shard
    }

    fn client(&self) -> &'static ClientSlot {
        ClientSlot::slot(self.kind)
    }

    /// Its record (`records`).
    pub(crate) fn record(&self) -> &Record {
        &self.record
    }

    /// Its pin slot, for `pin` alone: the pin, when this registration pinned anew, reached as
    /// such only through a [`PinArc`] (whose invariant says when the slot is one).
    pub(crate) fn pin_slot(&self) -> &SharedPin {
        &self.pin
    }

    /// What the records' reader shows of this registration now: its record (with references
    /// of the view's own), client and state and, while it holds a pin, the pin, its bytes,
    /// registrations and GPU, and while it is mapped, the NIC. Under the lock, so one
    /// consistent line; neither allocates nor calls out.
    ///
    /// # Safety
    ///
    /// `chain` is the data of this registration's shard's lock.
    pub(crate) unsafe fn view_locked(&self, chain: &mut Chain, view: &mut ffi::nvpeer_record_view) {
        // SAFETY: the record's fixed part, read-only; `view.rec` is writable and gets
        // references of its own (the C reader drops them).
        unsafe { ffi::nvpeer_glue_record_copy(&mut view.rec, self.record.fixed()) };
        view.client = self.client().c_name();
        // SAFETY: `chain` locks this context's shard (caller).
        let inner = unsafe { self.inner.access_mut(self.shard, chain) };
        view.state = compat::char_ptr(inner.state.c_name());
        let (pin, table, held) = match &inner.state {
            State::Mapped(pin, mapping) => {
                // SAFETY: mapped and not revoked while we hold the lock: a live mapping.
                unsafe { mapping.peer_name(&mut view.nic) };
                (pin.pin().clone(), Some(pin.table()), false)
            }
            State::Acquired(pin) | State::Pinned(pin) | State::Mapping(pin) => {
                (pin.pin().clone(), Some(pin.table()), false)
            }
            State::Held(pin) => (pin.clone(), pin.table(), true),
            _ => return,
        };
        if held {
            // SAFETY: `chain` locks the pin's shard, this registration's.
            view.state = compat::char_ptr(unsafe { pin.held_name_locked(chain) });
        }
        view.pin = core::ptr::from_ref::<SharedPin>(&pin).cast();
        view.pin_bytes = pin.range().len;
        // SAFETY: the table of a pin this registration holds, not revoked (the lock is held; a
        // held pin's callback revokes this registration before NVIDIA frees the table).
        if let Some(uuid) = table.and_then(|table| unsafe { p2p::gpu_uuid(table) }) {
            view.has_gpu = true;
            view.gpu = uuid;
        }
        // SAFETY: `chain` locks the pin's shard, this registration's.
        view.shares = unsafe { pin.users_locked(chain) };
        // Not the pin's last reference: the state holds another, unchanged while locked.
        drop(pin);
    }

    /// The pin this registration holds now, its bytes and its GPU (`None`: no pin).
    ///
    /// # Safety
    ///
    /// `chain` is the data of this registration's shard's lock.
    pub(crate) unsafe fn pin_locked(&self, chain: &mut Chain) -> Option<Held> {
        // SAFETY: `chain` locks this context's shard (caller).
        let inner = unsafe { self.inner.access_mut(self.shard, chain) };
        let (pin, table) = match &inner.state {
            State::Acquired(pin) | State::Pinned(pin) | State::Mapping(pin) | State::Mapped(pin, _) => {
                (pin.pin(), Some(pin.table()))
            }
            State::Held(pin) => (pin, pin.table()),
            _ => return None,
        };
        // SAFETY: the table of a pin this registration holds, not revoked (the lock is held; a
        // held pin's callback revokes this registration before NVIDIA frees the table).
        let gpu = table.and_then(|table| unsafe { p2p::gpu_uuid(table) });
        Some(Held { pin: NonNull::from(&**pin), bytes: pin.range().len, gpu })
    }

    /// Publishes the pin [`SharedPin::acquire`] took or joined for this registration, under the
    /// shard's lock (`chain`) in the critical section that made the pin live or joined it:
    /// `Pinning` -> `Acquired`. A revocation is then either before (the pin never went live and
    /// is not published) or after (it finds `Acquired`). Any other state gives the pin back, for
    /// the caller to leave in the same section.
    ///
    /// # Safety
    ///
    /// `pin` is this registration's, from [`SharedPin::acquire`] for it: counted in the pin's
    /// users and, for an invalidating pin, this context is one of its members. `chain` is the
    /// data of the pin's shard's lock.
    pub(crate) unsafe fn take_pin(&self, chain: &mut Chain, pin: PinRef) -> core::result::Result<(), PinRef> {
        // SAFETY: `chain` locks the pin's shard (caller), which is this context's: the pin is
        // one this registration took or joined in its own shard.
        let inner = unsafe { self.inner.access_mut(self.shard, chain) };
        if !matches!(inner.state, State::Pinning) {
            return Err(pin);
        }
        // INVARIANT: this context's pin (caller).
        inner.state = State::Acquired(pin);
        // INVARIANT: listed in the section that publishes its pin; `self` is in its `Arc`, and
        // the core's `release` unlinks it (`unpin`).
        // SAFETY: `chain` locks this context's shard (above).
        unsafe { records::link(self, chain) };
        Ok(())
    }

    /// Keeps this registration, which left `pin` as its last one, listed while NVIDIA still
    /// holds the pin (`Unpinned` -> `Held`, [`SharedPin`]'s `hold`), so that the records name its
    /// owner; the pin's callback revokes it ([`Self::revoke_locked`]).
    ///
    /// # Safety
    ///
    /// `chain` is the data of `pin`'s shard's lock (this registration's); this registration
    /// left `pin` and is kept by it (its `links`) until it is revoked.
    pub(crate) unsafe fn hold_locked(&self, chain: &mut Chain, pin: PinArc) {
        // SAFETY: `chain` locks this context's shard (caller).
        let inner = unsafe { self.inner.access_mut(self.shard, chain) };
        if !matches!(inner.state, State::Unpinned) {
            // Not reached: it left its pin, and only that pin's callback moves it on.
            return;
        }
        // INVARIANT: left, held by `pin` until its callback; listed below until then.
        inner.state = State::Held(pin);
        // SAFETY: `chain` locks this context's shard; `self` lives in its `Arc`, which the pin
        // keeps until the revocation that unlinks it.
        unsafe { records::link(self, chain) };
    }

    /// `get_pages`: the pin taken by `acquire` is reused when the core asks for the same range.
    pub(crate) fn get_pages(&self, addr: u64, size: u64, core_context: u64) -> Result {
        let range = GpuRange::covering(addr, size);
        let (acquired, state) = {
            let mut guard = self.shard.lock();
            let inner = locked!(self, guard);
            inner.core_context = core_context;
            match core::mem::replace(&mut inner.state, State::Unpinned) {
                State::Acquired(pin) if range == Some(pin.pin().range()) => {
                    inner.state = State::Pinned(pin);
                    nv_dbg!("get_pages {:#x}: reusing acquire's pin, core_context {}", addr, core_context);
                    return Ok(());
                }
                State::Revoked => {
                    inner.state = State::Revoked;
                    nv_err!("get_pages {:#x}+{:#x}: the GPU memory was freed after acquire\n", addr, size);
                    return Err(EFAULT);
                }
                other => {
                    let acquired = match &other {
                        State::Acquired(pin) => Some(pin.pin().range()),
                        _ => None,
                    };
                    let state = other.name();
                    inner.state = other;
                    (acquired, state)
                }
            }
        };
        // Every core passes acquire's range again; anything else is a core bug.
        match acquired {
            Some(r) => nv_err!(
                "get_pages {:#x}+{:#x} differs from the acquired range {:#x}+{:#x}\n",
                addr, size, r.start, r.len
            ),
            None => nv_err!("get_pages {:#x}+{:#x}: called in state {}\n", addr, size, state),
        }
        self.unpin();
        Err(EINVAL)
    }

    /// `dma_map`: maps the pin for the NIC and hands the core an sg_table.
    ///
    /// # Safety
    ///
    /// `sg_head` and `nmap` are the core's valid pointers; `dma_device` is the live DMA device
    /// the core passed for the umem of this registration, which it holds.
    pub(crate) unsafe fn dma_map(
        &self,
        sg_head: *mut bindings::sg_table,
        dma_device: *mut bindings::device,
        nmap: *mut i32,
        layout: Option<Layout>,
    ) -> Result {
        let api = Api::get().ok_or(ENODEV)?;
        // SAFETY: the core's live DMA device for a umem it holds (caller).
        let peer = unsafe { PeerDevice::from_dma_device(dma_device) }.inspect_err(|_| {
            nv_err!("dma_map: the DMA device is not a PCI device\n");
        })?;
        // SAFETY: the core's live DMA device (caller).
        let layout = layout.unwrap_or_else(|| unsafe { Layout::coalesced_for(dma_device) });
        let (table, range) = {
            let mut guard = self.shard.lock();
            let inner = locked!(self, guard);
            match core::mem::replace(&mut inner.state, State::Unpinned) {
                State::Pinned(pin) => {
                    let range = pin.pin().range();
                    // SAFETY: not revoked while we hold the lock: the table is live.
                    let info = match unsafe { p2p::table_info(pin.table()) } {
                        Ok(info) if u64::from(info.entries) == range.pages() => info,
                        Ok(info) => {
                            inner.state = State::Pinned(pin);
                            nv_err!(
                                "dma_map {:#x}: NVIDIA's page table has {} pages, the range {}\n",
                                range.start, info.entries, range.pages()
                            );
                            return Err(EINVAL);
                        }
                        Err(e) => {
                            inner.state = State::Pinned(pin);
                            return Err(e);
                        }
                    };
                    nv_dbg!(
                        "dma_map {:#x}+{:#x}: table v{:#x}, {} pages, cpu_cacheable={}",
                        range.start, range.len, info.version, info.entries, info.cpu_cacheable
                    );
                    let table = pin.table();
                    inner.state = State::Mapping(pin);
                    (table, range)
                }
                State::Revoked => {
                    inner.state = State::Revoked;
                    nv_err!("dma_map: the GPU memory was freed before it was mapped\n");
                    return Err(EFAULT);
                }
                other => {
                    nv_err!("dma_map: called in state {}\n", other.name());
                    inner.state = other;
                    return Err(EINVAL);
                }
            }
        };
        // For a pin with a callback a cudaFree may free the table at any point from here on,
        // before or while NVIDIA reads it (`p2p` module documentation): no client can prevent
        // it. Our side stays sound: the callback leaves `Revoked`, and we touch neither the
        // table nor the mapping afterwards.
        // SAFETY: not in a callback; in the core's dma_map for the umem; the table was live
        // under the lock just now (see above).
        let mapped = unsafe { api.dma_map_pages(peer, table) };
        let mut guard = self.shard.lock();
        let mut inner = locked!(self, guard);
        let pin = match core::mem::replace(&mut inner.state, State::Unpinned) {
            State::Mapping(pin) => pin,
            other => {
                // Revoked meanwhile: NVIDIA freed the table and any mapping on it.
                inner.state = other;
                nv_err!("dma_map {:#x}: the GPU memory was freed while being mapped\n", range.start);
                return Err(EFAULT);
            }
        };
        let mapping = match mapped {
            Ok(m) => m,
            Err(e) => {
                inner.state = State::Pinned(pin);
                nv_err!("dma_map {:#x}: nvidia_p2p_dma_map_pages failed: {:?}\n", range.start, e);
                return Err(e);
            }
        };
        // A one-entry table is the context's own slot, filled in this critical section. A larger
        // one is allocated with the lock dropped (the free callback of any pin of this shard may
        // wait for the lock, holding RM): its size is read from the mapping under the lock, and
        // the mapping is checked again under the lock before the table is filled.
        // SAFETY: live mapping (not revoked, the lock held).
        let count = unsafe { mapping.addresses() }.and_then(|addrs| {
            if addrs.len() as u64 != range.pages() {
                // A short table would give the NIC less than `umem->length` (REVIEW-KMOD C9).
                nv_err!("dma_map {:#x}: NVIDIA mapped {} pages of {}\n", range.start, addrs.len(), range.pages());
                return Err(EINVAL);
            }
            Ok(SgAlloc::entries(addrs, layout))
        });
        let (pin, built) = match count {
            Err(e) => (pin, Err(e)),
            Ok(1) => {
                // SAFETY: the state was `Mapping` when this critical section took it out, so
                // `sg` is `None` (type invariant) and nobody uses the slot; the table goes into
                // `sg` or is dropped here, and `self` (in its `Arc`) does not move.
                let sg = unsafe { SgAlloc::in_slot(&self.sg_slot) };
                // SAFETY: live mapping (not revoked, the lock held).
                let filled = unsafe { mapping.addresses() }.and_then(|addrs| sg.fill(addrs, layout));
                (pin, filled)
            }
            Ok(count) => {
                // `Mapping` again while unlocked, so that a revocation meanwhile is seen.
                inner.state = State::Mapping(pin);
                drop(guard);
                let sg = SgAlloc::new(count);
                guard = self.shard.lock();
                inner = locked!(self, guard);
                let pin = match core::mem::replace(&mut inner.state, State::Unpinned) {
                    State::Mapping(pin) => pin,
                    other => {
                        // Revoked meanwhile: NVIDIA freed the table and the mapping on it.
                        inner.state = other;
                        drop(guard);
                        nv_err!("dma_map {:#x}: the GPU memory was freed while its sg_table was allocated\n", range.start);
                        return Err(EFAULT);
                    }
                };
                // SAFETY: live mapping (not revoked, the lock held again).
                let filled = sg.and_then(|sg| unsafe { mapping.addresses() }.and_then(|addrs| sg.fill(addrs, layout)));
                (pin, filled)
            }
        };
        match built {
            Ok(sg) => {
                // SAFETY: the core's pointers (caller).
                unsafe {
                    sg.publish(sg_head);
                    *nmap = sg.nents() as i32;
                }
                stats::inc(Stat::Registrations);
                stats::add(Stat::SgEntries, u64::from(sg.nents()));
                nv_dbg!(
                    "dma_map {:#x}+{:#x}: {} pages in {} sg entries",
                    range.start, range.len, range.pages(), sg.nents()
                );
                inner.sg = Some(sg);
                inner.state = State::Mapped(pin, mapping);
                Ok(())
            }
            Err(e) => {
                // SAFETY: table and mapping live (the lock held, not revoked); no RM lock taken;
                // in the core's dma_map for the umem.
                let _ = unsafe { api.dma_unmap_pages(pin.table(), &mapping) };
                inner.state = State::Pinned(pin);
                nv_err!("dma_map {:#x}: building the sg_table failed: {:?}\n", range.start, e);
                Err(e)
            }
        }
    }

    /// `put_pages` and the unpin part of `release`: unmaps a `Mapped` registration and leaves the
    /// pin (the last registration on it unpins). One critical section: the context is `Unpinned`
    /// from here on (a revocation that comes meanwhile finds nothing to do: the pin's callback
    /// handles the pin itself).
    pub(crate) fn unpin(&self) {
        if self.left.load(Acquire) {
            return;
        }
        let mut guard = self.shard.lock();
        let inner = locked!(self, guard);
        let sg = inner.sg.take();
        let (pin, mapping) = match core::mem::replace(&mut inner.state, State::Unpinned) {
            State::Mapped(pin, mapping) => {
                stats::inc(Stat::Deregistrations);
                (pin, Some(mapping))
            }
            State::Acquired(pin) | State::Pinned(pin) => (pin, None),
            other => {
                // Revoked, being revoked (NVIDIA frees it), or already left.
                inner.state = other;
                // INVARIANT: unlisted in a section of `unpin` (done already if it left).
                // SAFETY: `guard` locks this context's shard.
                unsafe { records::unlink(self, &mut guard) };
                drop(guard);
                drop(sg);
                return;
            }
        };
        // Off the pin in the same critical section (the pin's state is under the same lock).
        // SAFETY: `guard` locks this context's shard, its pin's (invariant).
        let mut leaving = unsafe { pin.pin().leave_locked(&mut guard, self) };
        // The mapping (`dma_unmap` left it here: see the module documentation) goes with
        // NVIDIA's unpin where this leaving unpins, else now, before anything can free its table.
        if let Some(mapping) = mapping.and_then(|m| leaving.leave_mapping(m)) {
            // SAFETY: live table and mapping (the lock held, not revoked); takes no RM lock; in
            // the core's put_pages or release for the umem.
            unsafe { p2p::unmap_at_dereg(pin.table(), mapping, pin.pin().range().start) };
            nv_dbg!("dma_unmap {:#x}", pin.pin().range().start);
        }
        // INVARIANT: unlisted in the section that sets `left`.
        // SAFETY: as above.
        unsafe { records::unlink(self, &mut guard) };
        self.left.store(true, Release);
        drop(guard);
        drop(sg);
        // Not in a callback: the core calls put_pages/release from its own context, and calls
        // made inside our callback's invalidate find the state `Invalidating` and returned above.
        leaving.finish();
        nv_dbg!("unpin {:#x}: left its pin", pin.pin().range().start);
    }

    /// Revokes this registration in its pin's free callback (cudaFree, under NVIDIA's RM lock),
    /// in the critical section that revokes the pin (`chain`): out of every state that uses the
    /// page table at once; a `Mapped` one goes to `Invalidating`, for [`Self::finish_revoke`] to
    /// tell the core with the lock dropped. Not yet visible to the NIC, or leaving: a pending
    /// `get_pages` or `dma_map` then sees `Revoked` and fails with -EFAULT (a pending acquire
    /// sees its pin revoked).
    ///
    /// # Safety
    ///
    /// `chain` is the data of this registration's shard's lock (its pin's).
    pub(crate) unsafe fn revoke_locked(&self, chain: &mut Chain) {
        // SAFETY: `chain` locks this context's shard (caller).
        let inner = unsafe { self.inner.access_mut(self.shard, chain) };
        // The old state's pin reference is never the pin's last (the callback holds one), so
        // dropping it here frees nothing under the lock; `Mapped`'s mapping is NVIDIA's, which
        // it frees when the callback returns.
        let mut held = false;
        inner.state = match core::mem::replace(&mut inner.state, State::Revoked) {
            State::Mapped(..) => State::Invalidating,
            State::Pinning | State::Acquired(_) | State::Pinned(_) | State::Mapping(_) => State::Revoked,
            State::Held(_) => {
                held = true;
                State::Revoked
            }
            // Left its pin meanwhile, or revoked already: unchanged.
            old @ (State::Invalidating | State::Revoked | State::Unpinned) => old,
        };
        if held {
            // INVARIANT: unlisted in the revocation of the pin that held it.
            // SAFETY: `chain` locks this context's shard (caller).
            unsafe { records::unlink(self, chain) };
        }
    }

    /// The rest of a revocation, in the free callback with no lock held: a registration that was
    /// `Mapped` ([`Self::revoke_locked`] left it `Invalidating`) has the core stop the NIC, then
    /// becomes `Revoked`.
    pub(crate) fn finish_revoke(&self) {
        let mut guard = self.shard.lock();
        let inner = locked!(self, guard);
        // Only this callback moves a member of its pin to `Invalidating`, and nothing else
        // moves it out: still ours to finish.
        if !matches!(inner.state, State::Invalidating) {
            return;
        }
        let core_context = inner.core_context;
        drop(guard);
        nv_dbg!("free callback: invalidating core_context {}", core_context);
        stats::inc(Stat::InvalidateCalls);
        // Old-style cores call our dma_unmap/put_pages (and 4.x release) from inside.
        self.client().invalidate(core_context);
        // The sg_table stays: a dereg that took the core's mapping_lock before this invalidate
        // may still restore its first/last-entry fix-ups in it and call dma_unmap with it
        // (CONTRACT 1.7, items 5 and 6); it goes with put_pages, release or the context.
        let mut guard = self.shard.lock();
        locked!(self, guard).state = State::Revoked;
    }
}

impl RegContext {
    /// The module reference the registration holds for its whole life.
    pub(crate) fn module(&self) -> &ModuleRef {
        &self._module
    }

    /// The core's `release`: leaves the pin (if it did not already) and ends the registration
    /// for `live_contexts` (its object may outlive it: a held pin keeps its last registration,
    /// and the pin it hosts keeps it while other registrations, the chain or NVIDIA hold that pin).
    pub(crate) fn release(&self) {
        self.unpin();
        stats::sub(Stat::LiveContexts, 1);
    }
}
