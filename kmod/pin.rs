// SPDX-License-Identifier: GPL-2.0

//! NVIDIA pins, one per GPU range: the registrations of the same 64 KiB-aligned range by the
//! same process through the same client share one (NCCL, UCX and MPI register a buffer once per
//! NIC or protection domain on multi-rail nodes). Each registration still maps the pin for its
//! own NIC (NVIDIA keeps a list of DMA mappings per page table, CONTRACT 2.5); the pin goes with
//! the last registration. An invalidating pin has one free callback, which revokes every
//! registration on it through the core, each as a lone registration was revoked before.
//!
//! ```text
//!   Pinning --pinned--> Live --the last registration left--> Unpinning --> Unpinned
//!      |                  |                                       |
//!      |                  |                                       +--NVIDIA refused--> UnpinFailed
//!      +----callback------+--------------callback-----------------+-------------------+--> Revoked
//! ```
//!
//! Only `Live` pins are in the registry (a tree keyed by client, `mm` and range), so a new
//! registration joins a pin that is pinned and neither revoked nor being unpinned, or pins anew.
//! Two registrations of one range that both miss pin twice (no lock is held across NVIDIA's
//! call): the second pin is never listed, so no other registration joins it.
//!
//! The key's `mm` is the registering task's, held with `mmgrab` while the pin lives, so that no
//! other process's mm reuses its address meanwhile: NVIDIA resolves the VA in the caller's
//! address space, so only the same process may share.
//!
//! Which pins are shared (`share_pins`): an invalidating pin by default, since its free callback
//! takes it out of the registry before a cudaFree'd VA can be handed out again. A persistent pin
//! only with `share_pins=2`: nothing tells us of its cudaFree (NVIDIA keeps the memory until the
//! unpin, CONTRACT 2.6), so once an application frees a registered buffer and allocates another
//! at the same VA, a registration of the new buffer would join the old pin and the NIC would
//! read and write the freed buffer's memory. The stress suite does exactly that (cudaFree while
//! registered, which the persistent API allows) and saw the new buffer's writes go missing.
//!
//! # Locks
//!
//! The registry's `tree` mutex guards the tree and every pin's [`PinInner`] (`LockedBy`, shared
//! or not). It is
//! never held across a call into NVIDIA or into the core, nor together with a registration's
//! own lock (`context`): it nests under the core's `mapping_lock` (put_pages), its peer mutex
//! (acquire) and NVIDIA's RM lock (the free callback), nothing is taken under it, and nothing
//! allocates under it (a registry node and a grown member vector are allocated before it is
//! taken), so the callback never waits for reclaim while it holds RM. One lock for every pin is a
//! trade: a registration takes it two or three times, each for a tree lookup or a few state
//! updates, where a mutex per pin cost an allocation per registration; the free callback may wait
//! behind those short sections, never behind a call out.

use core::ffi::c_void;
use core::ptr::{self, NonNull};

use kernel::prelude::*;
use kernel::rbtree::{RBTree, RBTreeNodeReservation};
use kernel::sync::{new_mutex, Arc, ArcBorrow, LockedBy, Mutex};

use crate::client::{ClientKind, ClientSlot};
use crate::compat::{Acquire, Atomic, Release};
use crate::context::{GpuRange, RegContext};
use crate::ffi;
use crate::log::{nv_dbg, nv_err};
use crate::module_ref::ModuleRef;
use crate::p2p::Api;
use crate::stats::{self, Op, Stat};

/// An NVIDIA page table, by address.
///
/// # Invariants
///
/// Points to a table NVIDIA returned from a pin; whether it is still live is what the holders'
/// states say (see [`SharedPin`], [`PinRef`]).
#[derive(Clone, Copy)]
pub(crate) struct TablePtr(NonNull<ffi::nvidia_p2p_page_table>);

// SAFETY: an NVIDIA handle: any thread may hold it; it is dereferenced only under the rules of
// `p2p` (by a holder whose state says it is live).
unsafe impl Send for TablePtr {}

/// What makes two registrations share a pin.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct PinKey {
    persistent: bool,
    /// The registering task's `mm_struct`, by address (kept alive by the pin's [`MmRef`]); 0 for a
    /// private pin.
    mm: usize,
    start: u64,
    len: u64,
}

type Tree = RBTree<PinKey, Arc<SharedPin>>;

/// The live pins that registrations may join, and the lock of every pin's state (a private pin's
/// too: one lock per registration path instead of a mutex per pin).
#[pin_data]
pub(crate) struct Registry {
    #[pin]
    tree: Mutex<Tree>,
    sharing: Sharing,
}

/// `share_pins`: which pins registrations of one range and process share.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Sharing {
    /// 0: one pin per registration.
    Off,
    /// 1 (default): the invalidating client's pins.
    Invalidating,
    /// 2: both clients' pins (applications never free registered memory).
    All,
}

/// The module's registry, published for `SharedPin::acquire` (see [`RegistryOwner`]): a
/// `*const Registry` (untyped, as the atomics of every kernel we build for hold it).
static REGISTRY: Atomic<*mut c_void> = Atomic::new(ptr::null_mut());

/// Owns the registry from module init to exit; pins hold references of their own, so a pin that
/// outlives the module's clients (NVIDIA refused its unpin) still finds it.
///
/// # Invariants
///
/// `REGISTRY` holds `Arc::into_raw` of the registry, whose reference this value owns.
pub(crate) struct RegistryOwner(());

impl RegistryOwner {
    /// Creates and publishes the registry (with sharing off it only lists nothing).
    pub(crate) fn install(sharing: Sharing) -> Result<Self> {
        let registry = Arc::pin_init(
            pin_init!(Registry { tree <- new_mutex!(RBTree::new()), sharing }),
            GFP_KERNEL,
        )?;
        // INVARIANT: the reference from `into_raw` is this owner's.
        REGISTRY.store(Arc::into_raw(registry).cast_mut().cast(), Release);
        Ok(Self(()))
    }

    fn get() -> Option<Arc<Registry>> {
        let ptr = REGISTRY.load(Acquire).cast::<Registry>();
        if ptr.is_null() {
            return None;
        }
        // SAFETY: from `Arc::into_raw`, and the owner's reference stays until module exit, after
        // every `acquire` returned (the module's clients are unregistered first).
        Some(unsafe { ArcBorrow::from_raw(ptr) }.into())
    }
}

impl Drop for RegistryOwner {
    fn drop(&mut self) {
        let ptr = REGISTRY.load(Acquire).cast::<Registry>();
        REGISTRY.store(ptr::null_mut(), Release);
        if !ptr.is_null() {
            // SAFETY: the owner's reference (type invariant), taken back once.
            drop(unsafe { Arc::from_raw(ptr) });
        }
    }
}

/// `mmgrab` on the registering task's `mm_struct`.
///
/// # Invariants
///
/// `mm` is a non-null `mm_struct` on which this value holds an `mmgrab` reference.
struct MmRef {
    mm: NonNull<c_void>,
}

// SAFETY: `mmdrop` may be called from any thread.
unsafe impl Send for MmRef {}
// SAFETY: only the address is read through `&MmRef`.
unsafe impl Sync for MmRef {}

impl MmRef {
    /// `None` for a task without an mm (a kernel thread): its pins are not shared.
    fn current() -> Option<Self> {
        // SAFETY: reads the current task's mm and grabs it; no precondition.
        let mm = NonNull::new(unsafe { ffi::nvpeer_glue_current_mm_grab() })?;
        // INVARIANT: grabbed just now.
        Some(Self { mm })
    }
}

impl Drop for MmRef {
    fn drop(&mut self) {
        // SAFETY: by the invariant we hold an mmgrab reference.
        unsafe { ffi::nvpeer_glue_mm_drop(self.mm.as_ptr()) };
    }
}

/// The context reference NVIDIA holds as the free callback's `data` (invalidating pins).
///
/// # Invariants
///
/// `ptr` came from `Arc::into_raw` and that reference is outstanding: it is taken back exactly
/// once, by `free_callback` (NVIDIA calls it at most once) or by [`NvidiaRef::reclaim`] once
/// NVIDIA will not call it. Dropping the token only forgets it: the callback owns the reference
/// then.
struct NvidiaRef {
    ptr: NonNull<SharedPin>,
}

// SAFETY: stands for one `Arc<SharedPin>` count, and `Arc<SharedPin>` is `Send` (asserted below).
unsafe impl Send for NvidiaRef {}

impl NvidiaRef {
    fn new(pin: &Arc<SharedPin>) -> Self {
        let raw = Arc::into_raw(pin.clone());
        // SAFETY: `into_raw` points at the live contents of an `Arc`: never null.
        let ptr = unsafe { NonNull::new_unchecked(raw.cast_mut()) };
        // INVARIANT: a reference of its own, from `into_raw`, not taken back yet.
        Self { ptr }
    }

    fn data(&self) -> *mut c_void {
        self.ptr.as_ptr().cast()
    }

    /// Gives the token up: NVIDIA's free callback takes (or took) the reference back.
    fn leave_to_callback(self) {
        core::mem::forget(self);
    }

    /// Takes the reference back.
    ///
    /// # Safety
    ///
    /// NVIDIA will never call the free callback with this `data`: `get_pages` failed, or
    /// `put_pages` succeeded before the callback ran (RM unlinks the pin and calls the callback
    /// in one hold of its lock, so "not run yet" means "never", CONTRACT 2.4).
    unsafe fn reclaim(self) -> Arc<SharedPin> {
        let ptr = self.ptr;
        core::mem::forget(self);
        // SAFETY: by the invariant, from `Arc::into_raw` and outstanding; by the caller, nobody
        // else takes it back.
        unsafe { Arc::from_raw(ptr.as_ptr()) }
    }
}

impl Drop for NvidiaRef {
    fn drop(&mut self) {
        // Not reached: every path ends a token with `reclaim` or `leave_to_callback`.
        stats::failure(Op::FreeCallback, EINVAL);
        nv_err!("a free-callback pin reference was dropped undecided: a pin is left behind\n");
    }
}

enum PinState {
    /// NVIDIA is being asked for the pin (its callback may already run).
    Pinning,
    /// Pinned, not revoked: registrations may use `table`.
    Live { table: TablePtr, nvidia_ref: Option<NvidiaRef> },
    /// The last registration left; NVIDIA is being asked to unpin (registry lock dropped).
    Unpinning,
    Unpinned,
    /// NVIDIA refused to unpin: it may still hold the pin and, with a callback, our reference.
    /// Still counted as pinned until that callback reports the memory freed.
    UnpinFailed,
    /// The free callback ran: NVIDIA frees the table when it returns.
    Revoked,
}

/// A pin's state.
///
/// # Invariants
///
/// - `listed` is true exactly while the registry maps the pin's key to this pin, and then the
///   state is `Live` (listed in the critical section that publishes `Live`, unlisted in the one
///   that leaves it).
/// - While `Live`, `users` is the number of [`PinRef`]s of registrations on the pin, and for an
///   invalidating pin the registrations in `first` and `more` are exactly their holders.
struct PinInner {
    state: PinState,
    /// Registrations holding the pin (`u32` keeps the pin in a 128-byte slab object).
    users: u32,
    /// The invalidating pin's registrations, each with a reference: the free callback revokes
    /// them (none for persistent pins). The first inline, the others in `more`; one that leaves
    /// empties its slot, which the next to join reuses (6.12's `KVec` cannot remove an element).
    first: Option<Arc<RegContext>>,
    more: KVec<Option<Arc<RegContext>>>,
    /// In the registry now (a private pin never is).
    listed: bool,
}

/// One NVIDIA pin and the registrations on it.
///
/// # Invariants
///
/// - A `table` in [`PinState::Live`] was returned by a successful pin of `key`'s range and is
///   live: NVIDIA frees it only after a successful unpin (which `Unpinning` precedes) or after
///   the free callback returned, which first moves the pin to `Revoked` and every member
///   registration out of the states that use the table.
/// - `nvidia_ref` is `Some` exactly for pins with a free callback.
/// - `PinnedPages`/`PinnedBytes`/`LivePins` count the pin from `Live` until NVIDIA no longer
///   holds it (unpinned, or its callback ran).
/// - `_mm` is `Some` exactly for a pin that may be listed (shared), and `key.mm` is then its
///   address (else 0).
pub(crate) struct SharedPin {
    /// The client (`persistent`), the process and the range: what a joining registration
    /// matches, and the range pinned.
    key: PinKey,
    /// Held for its `mmgrab` (the key's address stays this process's while the pin lives).
    _mm: Option<MmRef>,
    registry: Arc<Registry>,
    /// Under the registry's lock.
    state: LockedBy<PinInner, Tree>,
    /// Last: dropped after everything else (see `ModuleRef::drop`).
    _module: ModuleRef,
}

/// What a critical section on a pin's state does to the registry, under the same lock.
enum TreeOp {
    Keep,
    /// List the pin unless another pin of its key is listed (it then stays private).
    List(RBTreeNodeReservation<PinKey, Arc<SharedPin>>),
    Unlist,
}

/// The table a registration uses, with the pin it belongs to.
///
/// # Invariants
///
/// `table` is `pin`'s page table, live while the registration holding this value has not been
/// revoked (see [`SharedPin`]: a revocation moves every member out of the states that hold a
/// `PinRef` before NVIDIA frees the table).
pub(crate) struct PinRef {
    pin: Arc<SharedPin>,
    table: TablePtr,
}

// Pins and the registry move between the threads of the core, NVIDIA's callback and module exit.
const _: () = {
    const fn shared<T: Send + Sync>() {}
    const fn sendable<T: Send>() {}
    shared::<SharedPin>();
    shared::<Registry>();
    sendable::<PinRef>();
};

impl PinRef {
    pub(crate) fn table(&self) -> NonNull<ffi::nvidia_p2p_page_table> {
        self.table.0
    }

    pub(crate) fn pin(&self) -> &Arc<SharedPin> {
        &self.pin
    }
}

impl SharedPin {
    fn kind(&self) -> ClientKind {
        if self.key.persistent {
            ClientKind::Persistent
        } else {
            ClientKind::Invalidating
        }
    }

    fn range(&self) -> GpuRange {
        GpuRange { start: self.key.start, len: self.key.len }
    }

    /// Runs `f` on the pin's state under its lock, then applies the registry change it asks for.
    fn with_inner<R>(self: &Arc<Self>, f: impl FnOnce(&mut PinInner) -> (R, TreeOp)) -> R {
        let mut tree = self.registry.tree.lock();
        let (r, op) = f(self.state.access_mut(&mut tree));
        let key = self.key;
        match op {
            TreeOp::Keep => {}
            TreeOp::List(node) => {
                if tree.get(&key).is_none() {
                    tree.insert(node.into_node(key, self.clone()));
                    // INVARIANT: listed now, and `Live` (only `pin_with_nvidia` lists).
                    self.state.access_mut(&mut tree).listed = true;
                }
            }
            TreeOp::Unlist => {
                if tree.get(&key).is_some_and(|p| Arc::ptr_eq(p, self)) {
                    tree.remove(&key);
                }
                // INVARIANT: no longer in the tree.
                self.state.access_mut(&mut tree).listed = false;
            }
        }
        r
    }

    /// Takes a pin on `range` for `ctx`: joins the live pin of the same key, or pins anew.
    /// NVIDIA's refusals come back as its errno (host memory, a freed VA: "not ours").
    pub(crate) fn acquire(
        client: &ClientSlot,
        range: GpuRange,
        ctx: &Arc<RegContext>,
    ) -> Result<PinRef> {
        let persistent = client.kind() == ClientKind::Persistent;
        let registry = RegistryOwner::get().ok_or(ENODEV)?;
        // Shared only where the registry shares this client's pins, with a process to key on.
        let shares = match registry.sharing {
            Sharing::Off => false,
            Sharing::Invalidating => !persistent,
            Sharing::All => true,
        };
        let mm = if shares { MmRef::current() } else { None };
        let key = PinKey {
            persistent,
            mm: mm.as_ref().map_or(0, |mm| mm.mm.as_ptr() as usize),
            start: range.start,
            len: range.len,
        };
        if mm.is_some() {
            if let Some(pin) = Self::join(&registry, key, ctx) {
                return Ok(pin);
            }
        }
        let module = ModuleRef::try_get().ok_or(ENODEV)?;
        let first = (!persistent).then(|| ctx.clone());
        let state = PinInner { state: PinState::Pinning, users: 1, first, more: KVec::new(), listed: false };
        let state = LockedBy::new(&registry.tree, state);
        // A registry node for a pin others may join, reserved before the lock is taken.
        let node = match mm {
            Some(_) => Some(RBTreeNodeReservation::new(GFP_KERNEL)?),
            None => None,
        };
        // INVARIANT: `mm` only for a pin that may be listed, `key.mm` its address (else 0).
        let pin = Arc::new(SharedPin { key, _mm: mm, registry, state, _module: module }, GFP_KERNEL)?;
        let table = pin.pin_with_nvidia(node)?;
        // INVARIANT: the live pin's table; `ctx` is its (first) member.
        Ok(PinRef { pin, table })
    }

    /// Joins the live pin of `key`, if there is one. A member slot that must grow is allocated
    /// with the lock dropped (the free callback, under NVIDIA's RM lock, may wait for it), then
    /// the lookup is retried; without memory the caller pins anew.
    fn join(registry: &Registry, key: PinKey, ctx: &Arc<RegContext>) -> Option<PinRef> {
        let mut spare = KVec::new();
        loop {
            let mut tree = registry.tree.lock();
            let pin = tree.get(&key).cloned()?;
            let inner = pin.state.access_mut(&mut tree);
            let PinState::Live { table, .. } = &inner.state else {
                // Not reached: only live pins are listed (`PinInner` invariant).
                return None;
            };
            let table = *table;
            // A full count (four billion MRs of one range) pins anew rather than wrap.
            let users = inner.users.checked_add(1)?;
            if !key.persistent {
                if let Err(needed) = inner.add_member(ctx, &mut spare) {
                    drop(tree);
                    spare = KVec::with_capacity(needed, GFP_KERNEL).ok()?;
                    continue;
                }
            }
            // INVARIANT: one more registration with a `PinRef` (and, invalidating, a member).
            inner.users = users;
            drop(tree);
            stats::inc(Stat::PinShares);
            nv_dbg!("pin {:#x}+{:#x}: shared by {} registrations", key.start, key.len, users);
            // INVARIANT: the live pin's table. Invalidating: the registration is a member, so a
            // revocation moves it out of the states holding this value before NVIDIA frees the
            // table. Persistent (`share_pins=2`): no callback, and the table lives until `users`
            // reaches 0, which needs this value's `leave`.
            return Some(PinRef { pin, table });
        }
    }

    /// Pins with NVIDIA: `Pinning` -> `Live` (listed when it has a key and no other pin of that
    /// key is), or an error (refused, or revoked before it could be published).
    fn pin_with_nvidia(
        self: &Arc<Self>,
        node: Option<RBTreeNodeReservation<PinKey, Arc<SharedPin>>>,
    ) -> Result<TablePtr> {
        let api = Api::get().ok_or(ENODEV)?;
        stats::inc(Stat::PinCalls);
        let result = match self.kind() {
            ClientKind::Persistent => {
                // SAFETY: not called from a free callback (acquire/get_pages context).
                unsafe { api.get_pages_persistent(self.key.start, self.key.len) }
                    // INVARIANT: a table NVIDIA returned from a pin.
                    .map(|table| (TablePtr(table), None))
            }
            ClientKind::Invalidating => {
                let nvidia_ref = NvidiaRef::new(self);
                // SAFETY: not in a callback; `data` stays valid until the callback ran or the
                // pin is put (it is a pin reference of its own).
                let r = unsafe {
                    api.get_pages(self.key.start, self.key.len, free_callback, nvidia_ref.data())
                };
                match r {
                    // INVARIANT: a table NVIDIA returned from a pin.
                    Ok(table) => Ok((TablePtr(table), Some(nvidia_ref))),
                    Err(e) => {
                        // SAFETY: get_pages failed, so no callback was registered.
                        drop(unsafe { nvidia_ref.reclaim() });
                        Err(e)
                    }
                }
            }
        };
        // Checking for a revocation, publishing and listing the pin are one critical section:
        // a callback that ran after get_pages returned left `Revoked`, which must never be
        // overwritten (the table is freed and the callback took NVIDIA's reference).
        let outcome = self.with_inner(|inner| match result {
            Ok((_, nvidia_ref)) if !matches!(inner.state, PinState::Pinning) => {
                if let Some(r) = nvidia_ref {
                    r.leave_to_callback();
                }
                (Err(EFAULT), TreeOp::Keep)
            }
            Ok((table, nvidia_ref)) => {
                // INVARIANT: a successful pin, not revoked (checked under the lock); the token
                // exactly for callbacks; counted in the same critical section, so a callback
                // that runs right after it uncounts what was counted.
                inner.state = PinState::Live { table, nvidia_ref };
                stats::add(Stat::PinnedPages, self.range().pages());
                stats::add(Stat::PinnedBytes, self.key.len);
                stats::inc(Stat::LivePins);
                (Ok(table), node.map_or(TreeOp::Keep, TreeOp::List))
            }
            Err(e) => {
                inner.state = PinState::Unpinned;
                (Err(e), TreeOp::Keep)
            }
        });
        outcome
    }

    /// Takes `ctx` off the pin (`put_pages`, `release`); the last registration unpins.
    pub(crate) fn leave(self: &Arc<Self>, ctx: &RegContext) {
        let (member, unpin) = self.with_inner(|inner| {
            let member = inner.take_member(ctx);
            if !matches!(inner.state, PinState::Live { .. }) {
                // Revoked: the callback dealt with every member.
                return ((member, None), TreeOp::Keep);
            }
            inner.users = inner.users.saturating_sub(1);
            if inner.users > 0 {
                return ((member, None), TreeOp::Keep);
            }
            match core::mem::replace(&mut inner.state, PinState::Unpinning) {
                PinState::Live { table, nvidia_ref } => {
                    let op = if inner.listed { TreeOp::Unlist } else { TreeOp::Keep };
                    ((member, Some((table, nvidia_ref))), op)
                }
                other => {
                    inner.state = other;
                    ((member, None), TreeOp::Keep)
                }
            }
        });
        // Dropped with no lock held: the registration's reference (the caller holds another).
        drop(member);
        if let Some((table, nvidia_ref)) = unpin {
            self.unpin(table, nvidia_ref);
        }
    }

    /// Unpins with NVIDIA: `Unpinning` -> `Unpinned` or `UnpinFailed`, or the callback won.
    fn unpin(self: &Arc<Self>, table: TablePtr, nvidia_ref: Option<NvidiaRef>) {
        let Some(api) = Api::get() else { return };
        stats::inc(Stat::UnpinCalls);
        // Not in a callback: the core calls put_pages/release from its own context, and calls
        // made inside our callback's invalidate find their registration revoked and never get
        // here (`RegContext::unpin`).
        let result = match self.kind() {
            // SAFETY: see above; the persistent pin is ours and not used afterwards.
            ClientKind::Persistent => unsafe { api.put_pages_persistent(self.key.start, table.0) },
            // SAFETY: see above; the pin is ours, not put before, and not used afterwards.
            ClientKind::Invalidating => unsafe { api.put_pages(self.key.start, table.0) },
        };
        let callback_ran = self.with_inner(|inner| {
            let ran = matches!(inner.state, PinState::Revoked);
            inner.state = match (&result, ran) {
                (Err(_), false) => PinState::UnpinFailed,
                _ => PinState::Unpinned,
            };
            (ran, TreeOp::Keep)
        });
        nv_dbg!("unpin {:#x}: {:?}, callback ran meanwhile: {}", self.key.start, result, callback_ran);
        if callback_ran {
            // The callback won the race for the RM lock: NVIDIA freed the pin and the table
            // before our call reached RM (which answered 0, or met another pin's table: the
            // `p2p` module documentation), took its reference back and uncounted the pin.
            if let Some(r) = nvidia_ref {
                r.leave_to_callback();
            }
            return;
        }
        match result {
            Ok(()) => {
                self.uncount();
                if let Some(nvidia_ref) = nvidia_ref {
                    // SAFETY: put_pages succeeded and the callback had not run: NVIDIA dropped
                    // it. Not the last reference (the caller holds `self`).
                    drop(unsafe { nvidia_ref.reclaim() });
                }
            }
            Err(e) => {
                // The pin may still be registered with NVIDIA: it keeps its reference (the
                // callback takes it back when the memory is freed), and the pin stays counted.
                if let Some(r) = nvidia_ref {
                    r.leave_to_callback();
                }
                stats::failure(Op::PutPages, e);
                nv_err!("put_pages {:#x}: NVIDIA failed to unpin: {:?}\n", self.key.start, e);
            }
        }
    }

    fn uncount(&self) {
        stats::sub(Stat::PinnedPages, self.range().pages());
        stats::sub(Stat::PinnedBytes, self.key.len);
        stats::sub(Stat::LivePins, 1);
    }

    /// NVIDIA's free callback (cudaFree) under its RM lock: unlists the pin, then revokes its
    /// registrations one by one, with no lock of ours held while each calls the core.
    fn revoke(self: &Arc<Self>) {
        let revoked = self.with_inner(|inner| {
            let old = core::mem::replace(&mut inner.state, PinState::Revoked);
            let counted = match old {
                PinState::Live { nvidia_ref, .. } => {
                    // This very callback takes NVIDIA's reference back (`free_callback`).
                    if let Some(r) = nvidia_ref {
                        r.leave_to_callback();
                    }
                    true
                }
                PinState::Unpinning | PinState::UnpinFailed => true,
                // Fired inside get_pages, or before `pin_with_nvidia` took the lock again: that
                // sees `Revoked` and reports the pin as failed, never counted.
                PinState::Pinning => false,
                PinState::Revoked | PinState::Unpinned => {
                    inner.state = old;
                    return (None, TreeOp::Keep);
                }
            };
            let op = if inner.listed { TreeOp::Unlist } else { TreeOp::Keep };
            let members = (inner.first.take(), core::mem::replace(&mut inner.more, KVec::new()));
            (Some((counted, members)), op)
        });
        let Some((counted, (first, more))) = revoked else { return };
        if counted {
            self.uncount();
        }
        nv_dbg!("free callback {:#x}: revoking its registrations", self.key.start);
        for ctx in Iterator::chain(first.iter(), more.iter().flatten()) {
            ctx.revoke();
        }
        // NVIDIA frees the table and every mapping on it when we return.
    }
}

impl PinInner {
    /// Makes `ctx` a member, in a free slot or by moving `more` into `spare` when it has room;
    /// else `Err(capacity)`: the caller allocates `spare` that large, unlocked, and retries.
    fn add_member(&mut self, ctx: &Arc<RegContext>, spare: &mut KVec<Option<Arc<RegContext>>>) -> Result<(), usize> {
        if self.first.is_none() {
            self.first = Some(ctx.clone());
            return Ok(());
        }
        if let Some(slot) = self.more.iter_mut().find(|m| m.is_none()) {
            *slot = Some(ctx.clone());
            return Ok(());
        }
        let needed = (2 * self.more.len()).max(4);
        if spare.capacity() - spare.len() < self.more.len() + 1 {
            return Err(needed);
        }
        // Within `spare`'s room (checked above): `push` neither allocates nor fails.
        let mut keep = |m: Option<Arc<RegContext>>| {
            if spare.push(m, GFP_NOWAIT).is_err() {
                stats::failure(Op::Acquire, ENOMEM);
                nv_err!("pin member lost while growing the member vector\n");
            }
        };
        for m in self.more.iter_mut() {
            keep(m.take());
        }
        keep(Some(ctx.clone()));
        // The old vector, emptied of references, is freed with the lock held (kfree only).
        self.more = core::mem::replace(spare, KVec::new());
        Ok(())
    }

    /// Takes `ctx`'s member reference out, if it has one.
    fn take_member(&mut self, ctx: &RegContext) -> Option<Arc<RegContext>> {
        let is_ctx = |m: &Option<Arc<RegContext>>| m.as_ref().is_some_and(|m| ptr::eq(&**m, ctx));
        if is_ctx(&self.first) {
            return self.first.take();
        }
        self.more.iter_mut().find(|m| is_ctx(m)).and_then(Option::take)
    }
}

/// NVIDIA's free callback for non-persistent pins; `data` is the pin reference from
/// `pin_with_nvidia`.
///
/// # Safety
///
/// Only called by NVIDIA, at most once per successful `nvidia_p2p_get_pages`, with the `data`
/// given there, and never after a successful `nvidia_p2p_put_pages` of that pin.
unsafe extern "C" fn free_callback(data: *mut c_void) {
    if data.is_null() {
        stats::failure(Op::FreeCallback, EINVAL);
        nv_err!("free callback without a pin\n");
        return;
    }
    // SAFETY: `data` is an `NvidiaRef` of ours (caller), now taken back, once.
    let pin = unsafe { Arc::from_raw(data.cast::<SharedPin>()) };
    pin.revoke();
    // Dropping NVIDIA's reference last: the pin outlives everything above.
}
