// SPDX-License-Identifier: GPL-2.0

//! NVIDIA pins, one per GPU range: the registrations of the same 64 KiB-aligned range by the
//! same process through the same client share one (NCCL, UCX and MPI register a buffer once per
//! NIC or protection domain on multi-rail nodes). Each registration still maps the pin for its
//! own NIC (NVIDIA keeps a list of DMA mappings per page table, CONTRACT 2.5); the pin goes with
//! the last registration. An invalidating pin has one free callback, which revokes every
//! registration on it through the core, each as a lone registration was revoked before.
//!
//! ```text
//!   Pinning --pinned--> Live --the last registration left--> Unpinning (final once unpinned)
//!      |  |               |                                       |
//!      |  |               |                                       +--NVIDIA refused--> UnpinFailed
//!      |  |               |                                       +--left from another
//!      |  |               |                                       |  process--> LeftToCallback
//!      |  +--refused--> Unpinned                                  |                       |
//!      +----callback------+--------------callback-----------------+-----------------------+--> Revoked
//! ```
//!
//! Only `Live` pins are listed (in their shard's chain, by client, owner and range), so a new
//! registration joins a pin that is pinned and neither revoked nor being unpinned, or pins anew.
//! Two registrations of one range that both miss pin twice (no lock is held across NVIDIA's
//! call): the second pin is never listed, so no other registration joins it.
//!
//! The key's owner is the registering task's thread group ([`Owner`]: the `struct pid` its host's
//! record holds while the pin lives, so that no other process reuses its address meanwhile): NVIDIA scopes pins by
//! the calling process (RM's lookups are keyed by its tgid), so only the same thread group may
//! share; a process that shares the `mm` but not the thread group (`CLONE_VM` without
//! `CLONE_THREAD`) pins on its own, as NVIDIA would refuse it the other's pin (REVIEW-KMOD-2 T3-7).
//!
//! Every invalidating pin records its owner, shared or not, because NVIDIA's `put_pages` from
//! any other process finds nothing, answers 0 and keeps the pin and our free callback: the last
//! registration may leave from another process (uverbs' disassociate on a NIC reset, unbind or
//! removal deregisters from a kworker; the last close of a uverbs fd inherited across `fork` or
//! passed to another process). Such an unpin is never taken for one: the pin is left to NVIDIA's
//! free callback (`LeftToCallback`), with its host's module reference, until the owner frees the memory
//! or exits (REVIEW-KMOD-2 T3-1). A persistent pin needs no owner unless it is shared: 535+
//! unpins it through its own RM object, not by a process lookup; the <= 530 form (`put_pages` of
//! a pin without a callback) is looked up in the calling process like the invalidating one; from
//! another process it fails (so the stand-in models it), which is counted and logged as a failed
//! unpin, since no callback will come to wait for.
//!
//! The free callback revokes every registration on its pin in the critical section in which it
//! revokes the pin (`revoke`): none is left in a state that uses the page table while the
//! callback tells the core about the others, so no registration of the buffer enters
//! `get_pages` or `dma_map` once the callback started (REVIEW-KMOD-2 T3-2). Its last reference
//! to the pin goes to a work item of the module (`defer_drop`), which module exit flushes: the
//! drop that can be the module's last reference never runs in NVIDIA's thread; the callback
//! holds a module reference of its own until its last instruction (REVIEW-KMOD C5: see
//! `defer_drop`).
//!
//! Which pins are shared (`share_pins`): an invalidating pin by default, since its free callback
//! takes it out of the registry before a cudaFree'd VA can be handed out again. A persistent pin
//! only with `share_pins=2`: nothing tells us of its cudaFree (NVIDIA keeps the memory until the
//! unpin, CONTRACT 2.6), so once an application frees a registered buffer and allocates another
//! at the same VA, a registration of the new buffer would join the old pin and the NIC would
//! read and write the freed buffer's memory. The stress suite does exactly that (cudaFree while
//! registered, which the persistent API allows) and saw the new buffer's writes go missing.
//!
//! Where a pin lives: inside the object of the registration that pinned it, its host
//! ([`RegContext`]'s pin slot, reached through [`PinArc`], a counted reference to the host), so
//! a registration and its pin are one allocation, one module reference and one `struct pid`
//! reference (its record's): the object outlives the host's registration while other
//! registrations, NVIDIA's callback or the deferred drop hold the pin. A registration that joins
//! a listed pin leaves its own slot unused (PERF-STUDY step 1, without its dedicated cache and its
//! 160-byte packing: a joiner's object is as large as a host's).
//!
//! What sharing an invalidating pin assumes (REVIEW-KMOD-2 T3-6): a VA can resolve to other GPU
//! memory only after the old pin's free callback ran (and unlisted the pin, in its first section).
//! True for cudaFree: RM registers video memory per VA range and refuses overlaps, and fires the
//! callbacks when that registration goes, so a new allocation at the VA needs the old one gone,
//! callback included. For CUDA VMM (`cuMemUnmap` then `cuMemMap` of another handle at the same VA
//! while the first handle lives) and stream-ordered pools it rests on the closed user-mode driver
//! unregistering the video memory at unmap rather than at release; the stand-in cannot show
//! which. Hence the default (`persistent_api_support=1`, a persistent `nv_mem`) shares nothing.
//!
//! # Locks
//!
//! The registry is [`SHARDS`] mutexes, each owning a [`Chain`] of listed pins. A registration's
//! key (client, owner, range) hashes to one shard, whose lock guards the chain, the state of
//! every pin of that key (its `state` and `links`, shared or private) and the state of every
//! registration on such a pin (the context's `inner`), each a [`ShardLocked`] value: one lock for
//! a pin and its members, so a registration needs no mutex of its own (which a lockdep kernel
//! makes as large as the rest of the context), and registrations of different buffers rarely
//! meet on one lock.
//!
//! A shard lock nests under the core's `mapping_lock` (dma_map, put_pages), its peer
//! mutex (acquire) and NVIDIA's RM lock (the free callback). Under it: only NVIDIA's per-table
//! mapping semaphore (`dma_unmap_pages`, which takes no RM lock; its holders never wait for RM or
//! for a shard), the glue's GPU table spinlock (a GPU's first pin, `records::Gpu`; nothing is
//! taken inside it) and the workqueue's pool lock (`schedule_work` in [`defer_drop`]); above it,
//! the records' readers (`context` has the whole list). It is never held across a call into the
//! core or into an NVIDIA function that takes the RM lock, no two shards are ever held
//! together, and nothing allocates under it (a
//! grown member vector and a registration's sg_table are allocated with it dropped), so the free
//! callback, which waits for it while holding RM, waits only behind short sections (the longest:
//! an IOMMU unmap in `dma_unmap_pages`, or the free callback's own walk over its members), never
//! behind a call out or reclaim. A lookup walks its shard's chain (`find`, `unlink`): O(listed
//! pins / 64), a few at the registration counts we know of; a callback may wait behind one walk
//! (REVIEW-KMOD-2 T3-11).

use core::cell::UnsafeCell;
use core::ffi::c_void;
use core::pin::Pin;
use core::ptr::{self, NonNull};

use kernel::prelude::*;
use kernel::sync::lock::{mutex::MutexBackend, Guard};
use kernel::sync::{new_mutex, Arc, Mutex};

use crate::atomic::{Acquire, Atomic, Relaxed, Release};
use crate::client::ClientKind;
use crate::context::{GpuRange, RegContext};
use crate::ffi;
use crate::log::{nv_dbg, nv_pin_err, nv_pin_warn};
use crate::module_ref::ModuleRef;
use crate::owner::Owner;
use crate::p2p::{self, Api, DmaMapping, GPU_PAGE_SIZE};
use crate::gpus;
use crate::records;
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

/// Shards of the registry (a power of two): enough that registrations of different buffers on
/// a many-core host seldom share a lock, few enough to cost nothing at load.
const SHARD_BITS: u32 = 6;
const SHARDS: usize = 1 << SHARD_BITS;
// A shard's index is a byte (and `install` counts them in one).
const _: () = assert!(SHARDS < 256);

/// What makes two registrations share a pin (with the client, which the pin's live state says).
///
/// # Invariants
///
/// `owned` (the pin has an owner, the registering task's thread group, borrowed from the
/// registration's record) for every pin with a free callback (the invalidating client's) and
/// for every pin that may be listed (`listable`: a shared client's). `pages` is the range's
/// length in 64 KiB pages (a `u32`, so that the pin, which keeps these fields, stays small).
pub(crate) struct PinKey {
    owned: bool,
    listable: bool,
    start: u64,
    pages: u32,
}

fn owner_addr(owner: &Option<Owner>) -> usize {
    owner.as_ref().map_or(0, Owner::addr)
}

/// A key by value, as a listed pin is matched: the owner by address.
#[derive(Clone, Copy, PartialEq, Eq)]
struct KeyId {
    owner: usize,
    start: u64,
    pages: u32,
}

/// The shard of a registration of `range` by the thread group whose `struct pid` is at `owner`:
/// a multiplicative hash of both (CUDA hands many ranks of a node the same VAs).
fn shard_index(range: GpuRange, owner: usize) -> u8 {
    let h = (range.start >> 16) ^ (range.len >> 16).rotate_left(24) ^ (owner as u64 >> 6).rotate_left(40);
    (h.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - SHARD_BITS)) as u8
}

/// A shard's listed pins: a singly linked chain through [`PinLinks::next`], newest first.
///
/// # Invariants
///
/// Made only inside a registry shard's mutex (`RegistryOwner::install`), so a `&Chain` or
/// `&mut Chain` exists only while that lock is held.
pub(crate) struct Chain {
    head: Option<PinArc>,
    /// The shard's own index: what [`ShardLocked`] checks a lock against.
    shard: u8,
    /// The shard's registrations, for the records' reader (`records`).
    pub(crate) records: records::List,
}

pub(crate) type ShardLock = Mutex<Chain>;
pub(crate) type ShardGuard<'a> = Guard<'a, Chain, MutexBackend>;

/// A shard of the registry, by index (a byte: a registration and a pin each record theirs within
/// their memory budget): what a pin and each registration on it lock.
///
/// # Invariants
///
/// The index is below [`SHARDS`]. Every `Shard` is kept by a registration or a pin (in its
/// host registration's object), whose object holds a `ModuleRef`, or by a function of theirs
/// (a registration's reference, taken before [`Registry::place`]), so the registry is installed
/// while it is used: module exit drops it only once every module reference is gone.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Shard(u8);

impl Shard {
    pub(crate) fn lock(&self) -> ShardGuard<'_> {
        let registry = REGISTRY.load(Acquire).cast::<Registry>().cast_const();
        // SAFETY: installed (non-null, from `Arc::into_raw` in `install`) and not dropped while
        // a `Shard` is kept (type invariant), for at least as long as `self` is borrowed.
        let shards = unsafe { &(*registry).shards };
        // A test build (`NVPEER_PLANT=wrong-shard`, tests/compat/test-wrong-shard.sh) takes the
        // next shard's lock instead, so that `assert_held` must fire at the first access. Every
        // access after it breaks `ShardLocked`'s rule; that test makes one registration on one
        // thread, so nothing races there.
        #[cfg(nvpeer_plant_wrong_shard)]
        let index = (usize::from(self.0) + 1) % SHARDS;
        #[cfg(not(nvpeer_plant_wrong_shard))]
        let index = usize::from(self.0);
        // SAFETY: the index is below `SHARDS` (type invariant, and the remainder in a test
        // build), the vector's length (`install`).
        unsafe { shards.get_unchecked(index) }.lock()
    }
}

/// For the records' reader (`records`): runs `f` under the lock of shard `index`; `None` when
/// there is no such shard or no registry. The reader's files are created after the registry is
/// installed and removed (their readers drained) before it is dropped, so a reader never meets
/// a registry being dropped.
pub(crate) fn with_shard<R>(index: usize, f: impl FnOnce(&mut Chain) -> R) -> Option<R> {
    let registry = REGISTRY.load(Acquire).cast::<Registry>().cast_const();
    // SAFETY: null or installed and not dropped while the reader's files exist (see above).
    let shards = unsafe { registry.as_ref() }.map(|r| &r.shards)?;
    let mut guard = shards.get(index)?.lock();
    Some(f(&mut guard))
}

/// For the per-GPU table (`gpus`): runs `f` under the lock that serialises adding a GPU; `None`
/// when there is no registry. `module`, held by the caller, keeps the registry installed
/// ([`Registry::get`]); called with no shard held (`gpus`' Locks).
pub(crate) fn with_gpu_lock<R>(module: &ModuleRef, f: impl FnOnce() -> R) -> Option<R> {
    let _guard = Registry::get(module)?.gpu_lock.lock();
    Some(f())
}

/// State under a registry shard's lock: [`kernel::sync::LockedBy`] without the owner's address,
/// which neither a registration nor a pin has the 8 bytes for. Each records its [`Shard`],
/// which says the lock.
///
/// # Invariants
///
/// The value is reached only through [`Self::access`], [`Self::access_mut`] and
/// [`Self::access_both`], whose callers hold the lock of the shard guarding it.
pub(crate) struct ShardLocked<T>(UnsafeCell<T>);

/// `lockdep_assert_held` for a shard: a WARN (which fails every VM suite) when `chain` is not
/// `shard`'s. A byte compare: cheap enough for every access, on every kernel.
fn assert_held(shard: Shard, chain: &Chain) {
    if chain.shard != shard.0 {
        // SAFETY: no precondition (it only prints).
        unsafe { ffi::nvpeer_glue_warn_wrong_shard(chain.shard.into(), shard.0.into()) };
    }
}

// SAFETY: as `LockedBy`'s: the value is moved with its holder (`T: Send`) ...
unsafe impl<T: Send> Send for ShardLocked<T> {}
// SAFETY: ... and reached through `&Self` only under a lock: mutably by the one thread holding
// it, so sharing the holder sends the value at most (`T: Send`); shared only for `T: Sync`
// (`access`).
unsafe impl<T: Send> Sync for ShardLocked<T> {}

impl<T> ShardLocked<T> {
    pub(crate) fn new(value: T) -> Self {
        Self(UnsafeCell::new(value))
    }

    /// The value, for as long as the lock whose data is `chain` is held and borrowed.
    ///
    /// # Safety
    ///
    /// `shard` guards this value (its holder's) and `chain` is the data of `shard`'s lock.
    pub(crate) unsafe fn access_mut<'a>(&'a self, shard: Shard, chain: &'a mut Chain) -> &'a mut T {
        assert_held(shard, chain);
        // SAFETY: the lock guarding the value is held and exclusively borrowed for `'a`
        // (caller), so no other reference to the value exists meanwhile (type invariant).
        unsafe { &mut *self.0.get() }
    }

    /// The value, before its holder is shared: no lock needed.
    ///
    /// # Safety
    ///
    /// No other thread can reach the value's holder yet, and no other reference to the value
    /// exists while the returned one is used.
    #[allow(clippy::mut_from_ref)]
    unsafe fn access_unshared(&self) -> &mut T {
        // SAFETY: no other reference to the value exists, nor can another thread make one
        // (caller).
        unsafe { &mut *self.0.get() }
    }

    /// [`Self::access_mut`] on this value and on `other`, together.
    ///
    /// # Safety
    ///
    /// As for [`Self::access_mut`], for both values; `other` is not `self`.
    unsafe fn access_both<'a, U>(
        &'a self,
        other: &'a ShardLocked<U>,
        shard: Shard,
        chain: &'a mut Chain,
    ) -> (&'a mut T, &'a mut U) {
        assert_held(shard, chain);
        // SAFETY: the lock guarding both values is held and exclusively borrowed for `'a`
        // (caller), and they are two values: no other reference to either exists meanwhile.
        unsafe { (&mut *self.0.get(), &mut *other.0.get()) }
    }

    /// [`Self::access_mut`], shared: the lock's holder may share `&Chain` with other threads
    /// (as `LockedBy::access`, so `T: Sync`).
    ///
    /// # Safety
    ///
    /// As for [`Self::access_mut`].
    unsafe fn access<'a>(&'a self, shard: Shard, chain: &'a Chain) -> &'a T
    where
        T: Sync,
    {
        assert_held(shard, chain);
        // SAFETY: the lock guarding the value is held and borrowed for `'a` (caller), so the
        // value is not written meanwhile (type invariant).
        unsafe { &*self.0.get() }
    }
}

/// The pins registrations may join, in shards, and the lock of every pin's and registration's
/// state.
pub(crate) struct Registry {
    /// [`SHARDS`] locks, each boxed so that its address is stable.
    shards: KVec<Pin<KBox<ShardLock>>>,
    sharing: Sharing,
    /// Serialises adding a GPU to the per-GPU table (`gpus`), which is read without it.
    gpu_lock: Pin<KBox<Mutex<()>>>,
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

impl Registry {
    /// The installed registry, for as long as `_module` is held (module exit drops it, after
    /// every module reference is gone); `None` before it is installed.
    pub(crate) fn get(_module: &ModuleRef) -> Option<&Registry> {
        let ptr = REGISTRY.load(Acquire).cast::<Registry>().cast_const();
        // SAFETY: null or from `Arc::into_raw` in `install`, whose reference the owner drops at
        // module exit, which cannot run while `_module` holds a module reference.
        unsafe { ptr.as_ref() }
    }

    /// The key a registration of `range` by `kind` from the current task pins or joins under,
    /// and its shard (`None`: the range is larger than any GPU range).
    pub(crate) fn place(&self, kind: ClientKind, range: GpuRange) -> Option<(PinKey, Shard)> {
        let shares = match self.sharing {
            Sharing::Off => false,
            Sharing::Invalidating => kind == ClientKind::Invalidating,
            Sharing::All => true,
        };
        // NVIDIA pins far less than 2^32 64 KiB pages (256 TiB): a larger range is not GPU
        // memory.
        let Ok(pages) = u32::try_from(range.pages()) else {
            nv_dbg!("acquire {:#x}+{:#x}: larger than any GPU range: declined", range.start, range.len);
            return None;
        };
        // An invalidating pin needs its owner to tell its unpin from another process's (T3-1).
        let owned = shares || kind == ClientKind::Invalidating;
        // INVARIANT: an owner for an invalidating or shared pin (the registration's record's
        // thread group, `SharedPin::slot`); `pages` is the range's.
        let key = PinKey { owned, listable: shares, start: range.start, pages };
        // The registering thread group picks the shard: the address the record's reference will
        // be on (the same `task_tgid(current)`), for a private pin too.
        // INVARIANT: below `SHARDS`; the caller got `self` from `get` with a module reference
        // that its registration, the pin's host, keeps.
        Some((key, Shard(shard_index(range, Owner::current_addr()))))
    }
}

/// The module's registry, published for [`Registry::get`] and [`Shard::lock`] (see
/// [`RegistryOwner`]): a `*const Registry` (untyped, as the atomics of every kernel we build for
/// hold it).
static REGISTRY: Atomic<*mut c_void> = Atomic::new(ptr::null_mut());

/// Owns the registry from module init to exit (after every registration's object, each holding
/// a module reference, and with it every pin).
///
/// # Invariants
///
/// `REGISTRY` holds `Arc::into_raw` of the registry, whose reference this value owns.
pub(crate) struct RegistryOwner(());

impl RegistryOwner {
    /// Creates and publishes the registry (with sharing off it only lists nothing).
    pub(crate) fn install(sharing: Sharing) -> Result<Self> {
        let mut shards = KVec::with_capacity(SHARDS, GFP_KERNEL)?;
        for shard in 0..SHARDS as u8 {
            // INVARIANT: the chain is made inside its mutex, with its own index.
            let chain = KBox::pin_init(new_mutex!(Chain { head: None, shard, records: records::List::new() }), GFP_KERNEL)?;
            shards.push(chain, GFP_KERNEL)?;
        }
        let gpu_lock = KBox::pin_init(new_mutex!(()), GFP_KERNEL)?;
        let registry = Arc::new(Registry { shards, sharing, gpu_lock }, GFP_KERNEL)?;
        // INVARIANT: the reference from `into_raw` is this owner's.
        REGISTRY.store(Arc::into_raw(registry).cast_mut().cast(), Release);
        Ok(Self(()))
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

/// The pin reference NVIDIA holds as the free callback's `data` (invalidating pins): a token
/// for one [`PinArc::into_raw`] of the pin whose state keeps it (the address is the pin's host's,
/// so the token needs none).
///
/// # Invariants
///
/// Kept only in the state of the pin it stands for, and that pin's reference is outstanding: it
/// is taken back exactly once, by `free_callback` (NVIDIA calls it at most once) or by
/// [`NvidiaRef::reclaim`] once NVIDIA will not call it. Dropping the token only forgets it: the
/// callback owns the reference then.
struct NvidiaRef(());

impl NvidiaRef {
    fn new(pin: &PinArc) -> Self {
        // The pointer is `pin`'s host's address (`callback_data`), given to NVIDIA as `data`.
        let _ = pin.clone().into_raw();
        // INVARIANT: a reference of its own, from `into_raw`, not taken back yet; the caller
        // keeps the token in `pin`'s state.
        Self(())
    }

    /// Gives the token up: NVIDIA's free callback takes (or took) the reference back.
    fn leave_to_callback(self) {
        core::mem::forget(self);
    }

    /// Takes the reference back.
    ///
    /// # Safety
    ///
    /// `pin` is the pin this token stands for, and NVIDIA will never call the free callback with
    /// its `data`: `get_pages` failed, or `put_pages` called by the pin's owner (RM looks the pin
    /// up in the calling process only) succeeded before the callback ran (RM unlinks the pin and
    /// calls the callback in one hold of its lock, so "not run yet" means "never", CONTRACT 2.4).
    unsafe fn reclaim(self, pin: &PinArc) -> PinArc {
        core::mem::forget(self);
        // SAFETY: by the invariant, `PinArc::into_raw` of `pin` (that is its host's address)
        // and outstanding; by the caller, nobody else takes it back.
        unsafe { PinArc::from_raw(pin.as_raw()) }
    }
}

impl Drop for NvidiaRef {
    fn drop(&mut self) {
        // Not reached: every path ends a token with `reclaim` or `leave_to_callback`.
        stats::failure(Op::FreeCallback, EINVAL);
        nv_pin_err!("a free-callback pin reference was dropped undecided: a pin is left behind\n");
    }
}

/// The free callback's `data` for `pin`: the pointer `PinArc::into_raw` gave [`NvidiaRef::new`].
fn callback_data(pin: &PinArc) -> *mut c_void {
    pin.as_raw()
}

enum PinState {
    /// NVIDIA is being asked for the pin (its callback may already run).
    Pinning,
    /// Pinned, not revoked: registrations may use the table. `users` registrations hold a
    /// [`PinRef`] (a byte: while 255 registrations of a range hold it, each further one pins
    /// alone, see `join`); `nvidia_ref` is `Some` exactly for a pin with a free callback, so
    /// `None` says a persistent pin.
    Live { users: u8, nvidia_ref: Option<NvidiaRef> },
    /// The last registration left; NVIDIA is being asked to unpin (shard lock dropped), or it
    /// did unpin (final: no callback follows a successful unpin, see `SharedPin::unpin`).
    Unpinning,
    /// NVIDIA refused the pin.
    Unpinned,
    /// NVIDIA refused to unpin a pin with a callback: it may still hold the pin and our
    /// reference. Still counted as pinned until that callback reports the memory freed.
    UnpinFailed,
    /// The last registration left from another process than the pin's owner, whose
    /// `put_pages` NVIDIA would answer with 0 and nothing freed: not called; NVIDIA holds the
    /// pin and our reference until its callback (the owner's cudaFree or exit). Counted as
    /// pinned until then.
    LeftToCallback,
    /// The free callback ran: NVIDIA frees the table when it returns.
    Revoked,
}

/// A pin's members and its place in its shard's chain, under the shard's lock.
struct PinLinks {
    /// The invalidating pin's registrations, each with a reference: the free callback revokes
    /// them (none for persistent pins). The first inline, the others in `more` (allocated only
    /// for a second member); one that leaves empties its slot, which the next to join reuses
    /// (6.12's `KVec` cannot remove an element).
    first: Option<Arc<RegContext>>,
    more: Option<KBox<Members>>,
    next: Option<PinArc>,
}

type Members = KVec<Option<Arc<RegContext>>>;

/// A pin's state and links in one critical section (see [`SharedPin::locked`]).
struct PinInner<'a> {
    state: &'a mut PinState,
    links: &'a mut PinLinks,
}

/// One NVIDIA pin and the registrations on it, in the object of the registration that pinned it
/// (its host: [`PinArc`]). A registration that joined another's pin leaves its own slot
/// `Pinning` and unused: no [`PinArc`] is ever made of it.
///
/// # Invariants
///
/// - `state` and `links` are guarded by `shard`'s lock, the shard [`Registry::place`] gave the
///   pin's first registration (and every registration on the pin: they found it in that shard).
/// - The pin is in its shard's chain only while `Live` and only with an owner: listed in the
///   critical section that publishes `Live` unless another pin of its key is, unlisted in the
///   one that leaves `Live`. `links.next` is the chain's next pin while listed; once revoked,
///   the next pin of the deferred-drop stack while the pin waits there ([`defer_drop`]); `None`
///   otherwise.
/// - `owner` is `Some` for every pin with a free callback: its owner's thread group, borrowed
///   from the host's record, which lives with the pin (same object).
/// - While `Live`, `users` is the number of [`PinRef`]s of registrations on the pin, and for an
///   invalidating pin the registrations in `links.first` and `links.more` are exactly their
///   holders.
/// - `table` is null until the critical section that makes the pin `Live`, which sets it to the
///   table a successful pin of the range returned, and never changes after. That table is live
///   while the pin is `Live`: NVIDIA frees it only after a successful unpin (which `Unpinning`
///   precedes) or after the free callback returned, which first moves the pin to `Revoked` and,
///   in the same critical section, every member registration out of the states that use the
///   table.
/// - `PinnedPages` (and so `pinned_bytes`) and `LivePins` count the pin from `Live` until NVIDIA
///   no longer holds it (unpinned, or its callback ran), or until NVIDIA refused to unpin a
///   persistent pin (no callback will ever tell when it lets go).
/// - `flags`' [`CALLBACK_RAN`] is set in the critical section in which the free callback moves
///   the pin to `Revoked` (from any state but `Revoked` and `Unpinned`), and only there; its
///   [`COUNTED`] is the per-GPU totals' mark, written only under the shard's lock
///   (`records::gpu_totals`).
/// - In `LeftToCallback` and `UnpinFailed`, `links.first` is the registration that left last
///   (held: `RegContext::hold_locked`) when the pin has a free callback, which revokes it.
pub(crate) struct SharedPin {
    /// The owner and the range (the pin's [`PinKey`], kept field by field): what a joining
    /// registration matches, and the range pinned.
    owner: Option<Owner>,
    start: u64,
    pages: u32,
    shard: Shard,
    /// [`CALLBACK_RAN`], set in the free callback's critical section (`revoke`): lets an unpin
    /// that NVIDIA answered with success tell, with no lock, whether the callback ran before it.
    /// [`COUNTED`]: the per-GPU totals' mark (one byte for both: the pin's memory budget).
    flags: Atomic<u8>,
    /// The page table (a `*mut nvidia_p2p_page_table`), read through the registrations'
    /// [`PinRef`]s, each made in or after the critical section that set it; they read it under
    /// the same shard lock, which orders the read after the set (the atomic spares
    /// [`PinRef::table`] a lock argument).
    table: Atomic<*mut c_void>,
    state: ShardLocked<PinState>,
    links: ShardLocked<PinLinks>,
}

/// A counted reference to a pin: to the registration whose object hosts it ([`SharedPin`]),
/// which therefore lives, with its module reference, until the pin's last reference goes, after
/// its own registration ended if others still hold the pin.
///
/// # Invariants
///
/// The registration hosts a pin: [`SharedPin::acquire`] made its slot into the pin it takes
/// (never a joiner's unused slot).
#[derive(Clone)]
pub(crate) struct PinArc(Arc<RegContext>);

impl core::ops::Deref for PinArc {
    type Target = SharedPin;

    fn deref(&self) -> &SharedPin {
        self.0.pin_slot()
    }
}

impl PinArc {
    fn ptr_eq(&self, other: &PinArc) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// The host's address, which [`Self::into_raw`] gives and [`Self::from_raw`] takes.
    fn as_raw(&self) -> *mut c_void {
        Arc::as_ptr(&self.0).cast_mut().cast()
    }

    /// The reference as a pointer: NVIDIA's callback `data`, the deferred-drop stack's links.
    fn into_raw(self) -> *mut c_void {
        Arc::into_raw(self.0).cast_mut().cast()
    }

    /// # Safety
    ///
    /// `raw` is from [`Self::into_raw`], and this takes that reference back (once).
    unsafe fn from_raw(raw: *mut c_void) -> Self {
        // SAFETY: `Arc::into_raw` of a host (caller), outstanding; a host still (invariant of
        // the value it came from).
        Self(unsafe { Arc::from_raw(raw.cast::<RegContext>()) })
    }
}

/// [`SharedPin::flags`]: the free callback ran.
const CALLBACK_RAN: u8 = 1;
/// [`SharedPin::flags`]: counted by the per-GPU totals' walk in progress (under the shard lock).
const COUNTED: u8 = 2;

// The memory budget: a pin is at most 56 bytes of its host registration's object on every
// kernel, lockdep or not (it holds no lock of its own; `context` has the object's size).
const _: () = assert!(core::mem::size_of::<SharedPin>() <= 56);

/// What a critical section on a pin's state does to its shard's chain, under the same lock.
enum ChainOp {
    Keep,
    /// List the pin unless another pin of its key is listed (it then stays private).
    List,
    Unlist,
}

/// What is left of a registration's leaving once the shard's lock is dropped: [`Leaving::finish`].
#[must_use]
pub(crate) struct Leaving<'a> {
    /// The pin left (the token and the table below are its own).
    pin: &'a PinArc,
    member: Option<Arc<RegContext>>,
    unpin: Option<(TablePtr, Option<NvidiaRef>)>,
    /// The registration's DMA mapping, left to NVIDIA's unpin ([`Self::leave_mapping`]).
    mapping: Option<DmaMapping>,
}

impl Leaving<'_> {
    /// Leaves the leaving registration's `mapping` to NVIDIA's unpin, which frees it with the
    /// table (`p2p`), instead of an unmap of its own first: one NVIDIA call and its lookup less
    /// per deregistration. Should NVIDIA refuse to unpin, the mapping is unmapped then
    /// ([`SharedPin::hold`], [`SharedPin::unpin_persistent`]). Gives the mapping back, for the
    /// caller to unmap in its critical section, where [`Self::finish`] will not ask NVIDIA to
    /// unpin: other registrations remain on the pin, or the pin has a callback and this is not
    /// its owner's thread group (it is left to that callback, [`SharedPin::unpin`]).
    pub(crate) fn leave_mapping(&mut self, mapping: DmaMapping) -> Option<DmaMapping> {
        let unpins = match &self.unpin {
            Some((_, None)) => true,
            Some((_, Some(_))) => self.pin.owner.as_ref().is_some_and(Owner::is_current),
            None => false,
        };
        if !unpins {
            return Some(mapping);
        }
        self.mapping = Some(mapping);
        None
    }

    /// With no lock held: drops the registration's member reference (the caller holds another)
    /// and, for the last one, unpins (which may keep that reference: [`SharedPin::hold`]).
    pub(crate) fn finish(self) {
        match self.unpin {
            Some((table, nvidia_ref)) => self.pin.unpin(table, nvidia_ref, self.member, self.mapping),
            // No mapping: one is left only to a leaving that unpins (`leave_mapping`).
            None => drop(self.member),
        }
    }
}

/// A registration's hold on its pin, and so on the pin's page table.
///
/// # Invariants
///
/// Made in or after the critical section that made `pin` live, so `pin`'s table is set; that
/// table is live while the registration holding this value has not been revoked (see
/// [`SharedPin`]: a revocation moves every member out of the states that hold a `PinRef` before
/// NVIDIA frees the table).
pub(crate) struct PinRef {
    pin: PinArc,
}

// Pins move between the threads of the core, NVIDIA's callback and module exit.
const _: () = {
    const fn shared<T: Send + Sync>() {}
    const fn sendable<T: Send>() {}
    shared::<SharedPin>();
    shared::<Registry>();
    sendable::<PinRef>();
};

impl PinRef {
    pub(crate) fn table(&self) -> NonNull<ffi::nvidia_p2p_page_table> {
        let table = self.pin.table.load(Acquire).cast::<ffi::nvidia_p2p_page_table>();
        // SAFETY: set, so non-null, before this value was made, and never changed (invariants).
        unsafe { NonNull::new_unchecked(table) }
    }

    pub(crate) fn pin(&self) -> &PinArc {
        &self.pin
    }
}

/// Publishes `pin` in `ctx`, a registration being acquired ([`RegContext::take_pin`]), and
/// drops `guard`. A context that is no longer `Pinning` (not reached: only its pin's callback
/// revokes it, and the pin is `Live` in this critical section, so its callback has not run)
/// leaves the pin in the same section: -EFAULT.
///
/// # Safety
///
/// `pin` is `ctx`'s: counted in its pin's `users` and, for an invalidating pin, `ctx` is one of
/// its members. `guard` locks `ctx`'s shard, which is the pin's.
unsafe fn publish(mut guard: ShardGuard<'_>, ctx: &RegContext, pin: PinRef) -> Result {
    // SAFETY: guaranteed by the caller.
    let Err(pin) = (unsafe { ctx.take_pin(&mut guard, pin) }) else {
        return Ok(());
    };
    // SAFETY: `guard` locks the pin's shard (caller).
    let leaving = unsafe { pin.pin().leave_locked(&mut guard, ctx) };
    drop(guard);
    leaving.finish();
    Err(EFAULT)
}

/// The listed pin of `key` and client in `chain` (a shard lock's data, held).
fn find(chain: &Chain, key: KeyId, persistent: bool) -> Option<&PinArc> {
    let mut cur = chain.head.as_ref();
    while let Some(pin) = cur {
        // SAFETY: a listed pin is in its own shard's chain (`SharedPin` invariant), so `chain`
        // is the data of the lock guarding its state and links, held (`Chain` invariant).
        let (state, links) =
            unsafe { (pin.state.access(pin.shard, chain), pin.links.access(pin.shard, chain)) };
        // Listed pins are `Live` (`SharedPin` invariant), which says the client.
        let live_persistent = matches!(state, PinState::Live { nvidia_ref: None, .. });
        if live_persistent == persistent && pin.id() == key {
            return Some(pin);
        }
        cur = links.next.as_ref();
    }
    None
}

/// Takes `target` out of `chain`, if it is listed there. A pin with an owner that another pin of
/// its key kept out of the chain (`ChainOp::List`), or that was never listable (an unshared
/// invalidating pin, whose chain is empty then), is looked for in vain: that is rare or cheap,
/// and spares the pin a `listed` flag.
///
/// # Safety
///
/// `chain` is the data of `target`'s shard's lock.
unsafe fn unlink(chain: &mut Chain, target: &PinArc) {
    // SAFETY: `chain` is `target`'s shard's (caller), held (`Chain` invariant).
    // INVARIANT: `target`'s `next` is `None` from here on: it leaves the chain or was not in it.
    let after = unsafe { target.links.access_mut(target.shard, chain) }.next.take();
    if chain.head.as_ref().is_some_and(|h| h.ptr_eq(target)) {
        // Drops the chain's reference, never the last (the caller holds `target`).
        chain.head = after;
        return;
    }
    let mut cur = chain.head.clone();
    while let Some(pin) = cur {
        // SAFETY: a listed pin is in its own shard's chain (`SharedPin` invariant): `chain` is
        // the data of the lock guarding its links, held.
        let links = unsafe { pin.links.access_mut(pin.shard, chain) };
        if links.next.as_ref().is_some_and(|n| n.ptr_eq(target)) {
            links.next = after;
            return;
        }
        cur = links.next.clone();
    }
    // Not listed: then `next` was `None` (invariant), and `after` is.
    drop(after);
}

impl SharedPin {
    pub(crate) fn range(&self) -> GpuRange {
        GpuRange { start: self.start, len: u64::from(self.pages) * GPU_PAGE_SIZE }
    }

    fn id(&self) -> KeyId {
        KeyId { owner: owner_addr(&self.owner), start: self.start, pages: self.pages }
    }

    /// Takes a pin on `key`'s range for `ctx` (in `ctx`'s shard, which [`Registry::place`] gave
    /// for `key`): joins the live pin of the same key and client, or pins anew, and publishes it
    /// in `ctx`'s state ([`RegContext::take_pin`]) in the critical section that joins it or
    /// makes it live. On an error `ctx` holds no pin and is dropped by the caller (its object lives
    /// on only if a free callback revoked the pin it hosts while pinning, until the module's
    /// work item drops the callback's reference, `defer_drop`): NVIDIA's refusals
    /// come back as its errno (host memory, a freed VA: "not ours"); a free callback that ran
    /// before the pin was published gives -EFAULT; -ENODEV and -ENOMEM as they come.
    pub(crate) fn acquire(kind: ClientKind, key: PinKey, ctx: &Arc<RegContext>) -> Result {
        // The registration's own shard: the pin's and that of every registration joining it,
        // which `publish` relies on (one lock for the pin and its members).
        let shard = ctx.shard();
        let persistent = kind == ClientKind::Persistent;
        if key.listable {
            if let Some(joined) = Self::join(shard, &key, persistent, ctx) {
                return joined;
            }
        }
        // Pins anew, in `ctx`'s own slot (made for `key` with `ctx`, `Pinning`): `ctx` hosts it.
        let listable = key.listable && ctx.pin_slot().owner.is_some();
        // INVARIANT: `ctx`'s slot becomes the pin taken here.
        let pin = PinArc(ctx.clone());
        // SAFETY: `ctx`'s own slot, `Pinning`; `ctx` is reachable by no other thread yet: it
        // is in no chain, list or state (a `join` that found no pin made it nobody's member).
        unsafe { pin.pin_with_nvidia(kind, listable, ctx) }
    }

    /// The pin slot of a registration for `key` in `shard` (`RegContext::acquire`), `Pinning`
    /// and unused until [`Self::acquire`] makes it the registration's pin, if it pins anew.
    /// `owner` is the registration's record's thread group, given for an owned key.
    pub(crate) fn slot(key: &PinKey, owner: Option<Owner>, shard: Shard) -> Self {
        // INVARIANT: guarded by `shard`, its registration's (from `Registry::place`); not
        // listed, `Pinning`, no table yet; the key's range; the owner the caller's record holds
        // (the object's, `RegContext`).
        Self {
            owner: owner.filter(|_| key.owned),
            start: key.start,
            pages: key.pages,
            shard,
            flags: Atomic::new(0),
            table: Atomic::new(ptr::null_mut()),
            state: ShardLocked::new(PinState::Pinning),
            links: ShardLocked::new(PinLinks { first: None, more: None, next: None }),
        }
    }

    /// Joins the live pin of `key`, if there is one (`None`: pin anew), and publishes it in
    /// `ctx` ([`publish`]). A member vector that must grow is allocated with the lock dropped
    /// (the free callback, under NVIDIA's RM lock, may wait for it), then the lookup is retried;
    /// without memory for it the caller pins anew; a member that cannot be added fails the
    /// registration.
    fn join(shard: Shard, key: &PinKey, persistent: bool, ctx: &Arc<RegContext>) -> Option<Result> {
        let mut spare = None;
        // The key with its owner: the one `ctx`'s slot was made with.
        let id = ctx.pin_slot().id();
        loop {
            let mut chain = shard.lock();
            let pin = find(&chain, id, persistent)?.clone();
            // SAFETY: `pin` is listed in `chain`, so `chain` is its shard's (`SharedPin`
            // invariant), locked.
            let (state, links) = unsafe { pin.state.access_both(&pin.links, pin.shard, &mut chain) };
            let PinState::Live { users, .. } = state else {
                // Not reached: only live pins are listed (`SharedPin` invariant).
                return None;
            };
            // A full count (255 registrations of one range at once) pins anew rather than wrap.
            let joined = users.checked_add(1)?;
            if !persistent {
                match links.add_member(ctx, &mut spare) {
                    Ok(()) => {}
                    Err(Some(needed)) => {
                        drop(chain);
                        spare = Some(KBox::new(KVec::with_capacity(needed, GFP_KERNEL).ok()?, GFP_KERNEL).ok()?);
                        continue;
                    }
                    // Not a member: the registration fails rather than hold the pin unrevoked.
                    Err(None) => return Some(Err(ENOMEM)),
                }
            }
            // INVARIANT: one more registration with a `PinRef` (and, invalidating, a member).
            *users = joined;
            // INVARIANT: made while the pin is live, so its table is set. Invalidating: the
            // registration is a member, so a revocation moves it out of the states holding this
            // value before NVIDIA frees the table. Persistent (`share_pins=2`): no callback, and
            // the table lives until `users` reaches 0, which needs this value's `leave_locked`.
            // SAFETY: `ctx`'s pin: counted in `users` and, invalidating, a member (above), in
            // the critical section of `chain`, `ctx`'s shard.
            let published = unsafe { publish(chain, ctx, PinRef { pin }) };
            stats::inc(Stat::PinShares);
            nv_dbg!("pin {:#x} ({} pages): shared by {} registrations", key.start, key.pages, joined);
            return Some(published);
        }
    }

    /// How many registrations hold the pin (its `users` while `Live`; 0 otherwise), for the
    /// records' reader.
    ///
    /// # Safety
    ///
    /// `chain` is the data of the pin's shard's lock.
    pub(crate) unsafe fn users_locked(&self, chain: &Chain) -> u32 {
        // SAFETY: `chain` is the pin's shard's (caller).
        match unsafe { self.state.access(self.shard, chain) } {
            PinState::Live { users, .. } => u32::from(*users),
            _ => 0,
        }
    }

    /// For the per-GPU totals (`records::gpu_totals`): clears the pin's mark
    /// (`mark: false`), or sets it and says whether it was clear (`mark: true`: count the pin
    /// now, once per walk).
    ///
    /// # Safety
    ///
    /// `chain` is the data of the pin's shard's lock, held across the walk.
    pub(crate) unsafe fn mark_locked(&self, chain: &Chain, mark: bool) -> bool {
        assert_held(self.shard, chain);
        if mark {
            self.flags.fetch_or(COUNTED, Relaxed) & COUNTED == 0
        } else {
            self.flags.fetch_and(!COUNTED, Relaxed);
            false
        }
    }

    /// The name of a pin's state for the records of a held registration: `left-to-callback`,
    /// `unpin-failed`, else `unpinned`.
    ///
    /// # Safety
    ///
    /// `chain` is the data of the pin's shard's lock.
    pub(crate) unsafe fn held_name_locked(&self, chain: &Chain) -> &'static CStr {
        // SAFETY: `chain` is the pin's shard's (caller).
        match unsafe { self.state.access(self.shard, chain) } {
            PinState::LeftToCallback => kernel::c_str!("left-to-callback"),
            PinState::UnpinFailed => kernel::c_str!("unpin-failed"),
            _ => kernel::c_str!("unpinned"),
        }
    }

    /// Its page table: set (non-null) once the pin went live.
    pub(crate) fn table(&self) -> Option<NonNull<ffi::nvidia_p2p_page_table>> {
        NonNull::new(self.table.load(Acquire).cast())
    }

    /// A persistent pin: unpinned through its own RM object (no process lookup, no callback).
    fn unpin_persistent(&self, api: &Api, table: TablePtr, mapping: Option<DmaMapping>) {
        stats::inc(Stat::UnpinCalls);
        // SAFETY: not in a callback (the core's put_pages/release); the persistent pin (no
        // callback) is ours and not used afterwards.
        let result = unsafe { api.put_pages_persistent(self.start, table.0) };
        nv_dbg!("unpin {:#x} (persistent): {:?}", self.start, result);
        // Uncounted either way: no callback will ever say when NVIDIA lets go of a pin it
        // refused to unpin (REVIEW-KMOD-2 T3-14); the failure is counted and logged instead.
        self.uncount();
        match result {
            // NVIDIA freed the mapping with the table.
            Ok(()) => drop(mapping),
            Err(e) => {
                if let Some(mapping) = mapping {
                    // SAFETY: NVIDIA refused to unpin, and a persistent pin has no callback:
                    // the table and the mapping are live; in the core's put_pages or release
                    // for the registration's umem.
                    unsafe { p2p::unmap_at_dereg(table.0, mapping, self.start) };
                }
                stats::failure(Op::PutPages, e);
                nv_pin_err!(
                    "put_pages_persistent {:#x}: NVIDIA failed to unpin: {:?}; the pin stays with NVIDIA and is no longer counted\n",
                    self.start, e
                );
            }
        }
    }

    fn uncount(&self) {
        stats::sub(Stat::PinnedPages, self.range().pages());
        stats::sub(Stat::LivePins, 1);
    }
}

impl PinArc {
    /// Runs `f` on the pin's state under its shard's lock, held by the caller (`chain` is its
    /// data), then applies the chain change it asks for.
    ///
    /// # Safety
    ///
    /// `chain` is the data of the pin's shard's lock.
    unsafe fn locked<R>(
        &self,
        chain: &mut Chain,
        f: impl FnOnce(PinInner<'_>) -> (R, ChainOp),
    ) -> R {
        // SAFETY: `chain` is the pin's shard's (caller), which guards both (type invariant).
        let (state, links) = unsafe { self.state.access_both(&self.links, self.shard, chain) };
        let (r, op) = f(PinInner { state, links });
        match op {
            ChainOp::Keep => {}
            ChainOp::List => {
                // SAFETY: as above.
                let state = unsafe { self.state.access(self.shard, chain) };
                let persistent = matches!(state, PinState::Live { nvidia_ref: None, .. });
                if self.owner.is_some() && find(chain, self.id(), persistent).is_none() {
                    let head = chain.head.take();
                    // SAFETY: as above.
                    // INVARIANT: in its shard's chain now, and `Live` (only `pin_with_nvidia`
                    // lists, in the section that makes it `Live`), with an owner.
                    unsafe { self.links.access_mut(self.shard, chain) }.next = head;
                    chain.head = Some(self.clone());
                }
            }
            ChainOp::Unlist => {
                // A pin with an owner may be listed: looked for (in a chain that is empty when
                // nothing is shared, `share_pins=0`).
                if self.owner.is_some() {
                    // INVARIANT: no longer in the chain (the section leaves `Live`).
                    // SAFETY: `chain` is the pin's shard's (caller).
                    unsafe { unlink(chain, self) };
                }
            }
        }
        r
    }

    /// Pins with NVIDIA: `Pinning` -> `Live` (listed when `listable` and no other pin of its key
    /// is) and publishes the pin in `ctx`, its first registration, in the same critical section
    /// ([`publish`]); or an error (refused, or revoked before it could be published).
    ///
    /// # Safety
    ///
    /// `self` is `ctx`'s own slot, in state `Pinning`, and no other thread can reach `ctx` yet.
    unsafe fn pin_with_nvidia(self, kind: ClientKind, listable: bool, ctx: &RegContext) -> Result {
        let api = Api::get().ok_or(ENODEV)?;
        stats::inc(Stat::PinCalls);
        let GpuRange { start, len } = self.range();
        let result = match kind {
            ClientKind::Persistent => {
                // SAFETY: not called from a free callback (acquire/get_pages context).
                unsafe { api.get_pages_persistent(start, len) }
                    // INVARIANT: a table NVIDIA returned from a pin.
                    .map(|table| (TablePtr(table), None))
            }
            ClientKind::Invalidating => {
                // SAFETY: no other thread can reach `ctx`, whose slot this is (caller).
                // INVARIANT: the pin's first registration is its member (taken back below if
                // NVIDIA refuses, or by the callback's revocation).
                unsafe { self.links.access_unshared() }.first = Some(self.0.clone());
                let nvidia_ref = NvidiaRef::new(&self);
                // SAFETY: not in a callback; `data` stays valid until the callback ran or the
                // pin is put (it is a pin reference of its own).
                let r = unsafe { api.get_pages(start, len, ffi::nvpeer_glue_free_callback, callback_data(&self)) };
                match r {
                    // INVARIANT: a table NVIDIA returned from a pin.
                    Ok(table) => Ok((TablePtr(table), Some(nvidia_ref))),
                    Err(e) => {
                        // SAFETY: this pin's token, and get_pages failed, so no callback was
                        // registered.
                        drop(unsafe { nvidia_ref.reclaim(&self) });
                        Err(e)
                    }
                }
            }
        };
        // Checking for a revocation, publishing and listing the pin, and publishing it in its
        // first registration are one critical section: a callback that ran after get_pages
        // returned left `Revoked`, which must never be overwritten (the table is freed and the
        // callback took NVIDIA's reference); one that runs after it finds the registration
        // `Acquired`. (The lock is taken through a copy of the shard: `self` moves into the
        // registration's `PinRef` inside it.)
        let shard = self.shard;
        let mut chain = shard.lock();
        let mut gpu = None;
        // A refused pin's member: its host, whose slot it must not keep (a cycle), dropped
        // unlocked (not its last reference: the caller holds `ctx`).
        let mut refused = None;
        let go_live = |inner: PinInner<'_>| match result {
            Ok((_, nvidia_ref)) if !matches!(inner.state, PinState::Pinning) => {
                if let Some(r) = nvidia_ref {
                    r.leave_to_callback();
                }
                (Err(EFAULT), ChainOp::Keep)
            }
            Ok((table, nvidia_ref)) => {
                // INVARIANT: a successful pin, not revoked (checked under the lock): its
                // table is set, once, in the section that makes it `Live`, with `ctx` its one
                // user; the token exactly for callbacks; counted in the same critical
                // section, so a callback that runs right after it uncounts what was counted.
                self.table.store(table.0.as_ptr().cast(), Release);
                *inner.state = PinState::Live { users: 1, nvidia_ref };
                stats::add(Stat::PinnedPages, self.range().pages());
                stats::inc(Stat::LivePins);
                // Its GPU, noted for the per-GPU totals once unlocked (`gpus`).
                // SAFETY: the table of a pin that is not revoked, under its shard's lock.
                gpu = unsafe { p2p::gpu_uuid(table.0) };
                (Ok(()), if listable { ChainOp::List } else { ChainOp::Keep })
            }
            Err(e) => {
                *inner.state = PinState::Unpinned;
                refused = inner.links.first.take();
                (Err(e), ChainOp::Keep)
            }
        };
        // SAFETY: `chain` locks the pin's shard, just taken.
        let published = unsafe { self.locked(&mut chain, go_live) };
        if let Err(e) = published {
            drop(chain);
            drop(refused);
            return Err(e);
        }
        // INVARIANT: made in the section that made the pin live.
        let pin = PinRef { pin: self };
        // SAFETY: `ctx` is the pin's first registration: counted in `users: 1` and, invalidating,
        // its member (`first`) (caller); `chain` locks the pin's shard, which is `ctx`'s.
        let published = unsafe { publish(chain, ctx, pin) };
        // Unlocked now (`publish` dropped the guard).
        if let Some(uuid) = gpu {
            gpus::note(&uuid, ctx.module());
        }
        published
    }

    /// Takes `ctx` off the pin (`put_pages`, `release`, [`publish`]'s fallback); the last
    /// registration unpins. This is the part under the shard's lock (which the caller holds:
    /// `chain`, in the same critical section as its own state change); [`Leaving::finish`] does
    /// the rest once it is dropped.
    ///
    /// # Safety
    ///
    /// `chain` is the data of the pin's shard's lock (`ctx`'s: a registration on the pin found
    /// it in its own shard).
    pub(crate) unsafe fn leave_locked<'a>(
        &'a self,
        chain: &mut Chain,
        ctx: &RegContext,
    ) -> Leaving<'a> {
        let table = self.table.load(Acquire);
        let leave = |inner: PinInner<'_>| {
            let member = inner.links.take_member(ctx);
            let PinState::Live { users, .. } = &mut *inner.state else {
                // Revoked: the callback dealt with every member.
                return ((member, None), ChainOp::Keep);
            };
            *users = users.saturating_sub(1);
            if *users > 0 {
                return ((member, None), ChainOp::Keep);
            }
            match (core::mem::replace(inner.state, PinState::Unpinning), NonNull::new(table.cast())) {
                // `Live` (matched above), so its table is set (`SharedPin` invariant).
                (PinState::Live { nvidia_ref, .. }, Some(table)) => {
                    ((member, Some((TablePtr(table), nvidia_ref))), ChainOp::Unlist)
                }
                (other, _) => {
                    // Not reached: a live pin's table is set.
                    nv_pin_err!("pin {:#x}: live with no page table: left pinned\n", self.start);
                    *inner.state = other;
                    ((member, None), ChainOp::Keep)
                }
            }
        };
        // SAFETY: guaranteed by the caller.
        let (member, unpin) = unsafe { self.locked(chain, leave) };
        Leaving { pin: self, member, unpin, mapping: None }
    }

    /// Unpins with NVIDIA: `Unpinning` -> `UnpinFailed` when NVIDIA refuses, `LeftToCallback`
    /// when called from another process than the owner's, or the callback won (`Revoked`). A
    /// successful unpin takes no lock again and leaves `Unpinning`, final then: no callback can
    /// follow, and no registration holds the unlisted pin. `member` is the last registration's
    /// member reference (invalidating pins), kept while NVIDIA holds the pin ([`Self::hold`]),
    /// else dropped. `mapping`, that registration's DMA mapping, goes with a successful unpin
    /// and is unmapped otherwise ([`Leaving::leave_mapping`]).
    fn unpin(
        &self,
        table: TablePtr,
        nvidia_ref: Option<NvidiaRef>,
        member: Option<Arc<RegContext>>,
        mapping: Option<DmaMapping>,
    ) {
        let Some(api) = Api::get() else { return };
        let Some(nvidia_ref) = nvidia_ref else {
            drop(member);
            return self.unpin_persistent(api, table, mapping);
        };
        if !self.owner.as_ref().is_some_and(Owner::is_current) {
            return self.leave_to_owner(nvidia_ref, member, mapping);
        }
        stats::inc(Stat::UnpinCalls);
        // Not in a callback: the core calls put_pages/release from its own context, and calls
        // made inside our callback's invalidate find their registration revoked and never get
        // here (`RegContext::unpin`). From the owner's thread group: RM finds the pin unless the
        // callback already took it (the check above).
        // SAFETY: see above; the pin is ours, not put before, and not used afterwards.
        let result = unsafe { api.put_pages(self.start, table.0) };
        // A callback that ran before our call reached RM set `callback_ran` in its critical
        // section, under RM's lock, which our call took after it: no lock of ours is needed to
        // see it. A successful unpin by the owner means no callback will run after it (RM
        // unlinks the pin and calls the callback in one hold of its lock, CONTRACT 2.4).
        let callback_ran = match &result {
            // NVIDIA refused: whether the callback ran and what the pin is now are decided
            // under the lock, in one section with the callback's own.
            Err(_) => self.hold(PinState::UnpinFailed, member, mapping),
            Ok(()) => {
                // NVIDIA freed the mapping with the table, as it does after a callback.
                drop(mapping);
                drop(member);
                self.flags.load(Acquire) & CALLBACK_RAN != 0
            }
        };
        nv_dbg!("unpin {:#x}: {:?}, callback ran meanwhile: {}", self.start, result, callback_ran);
        if callback_ran {
            // The callback won the race for the RM lock: NVIDIA freed the pin and the table
            // before our call reached RM (which answered 0, or met another pin's table: the
            // `p2p` module documentation), took its reference back and uncounted the pin.
            nvidia_ref.leave_to_callback();
            return;
        }
        match result {
            Ok(()) => {
                self.uncount();
                // SAFETY: this pin's token; put_pages, called by the pin's owner, succeeded and
                // the callback had not run (see above): NVIDIA unlinked the pin and will not
                // call back. Not the last reference (the caller holds `self`).
                drop(unsafe { nvidia_ref.reclaim(self) });
            }
            Err(e) => {
                // The pin may still be registered with NVIDIA: it keeps its reference (the
                // callback takes it back when the memory is freed), and the pin stays counted.
                nvidia_ref.leave_to_callback();
                stats::failure(Op::PutPages, e);
                nv_pin_err!("put_pages {:#x}: NVIDIA failed to unpin: {:?}\n", self.start, e);
            }
        }
    }

    /// The last registration of a pin with a callback left from another thread group than the
    /// owner's (REVIEW-KMOD-2 T3-1): NVIDIA would look the pin up among that process's objects,
    /// find nothing, answer 0 and keep the pin and our callback. So NVIDIA is not asked; the pin
    /// (with its host's module reference) is left to the callback, which the owner's cudaFree or exit
    /// fires, and stays counted until then.
    fn leave_to_owner(
        &self,
        nvidia_ref: NvidiaRef,
        member: Option<Arc<RegContext>>,
        mapping: Option<DmaMapping>,
    ) {
        let ran = self.hold(PinState::LeftToCallback, member, mapping);
        // Either way the callback takes NVIDIA's reference back: it ran, or it will.
        nvidia_ref.leave_to_callback();
        if ran {
            return;
        }
        stats::inc(Stat::UnpinsLeftToCallback);
        nv_pin_warn!(
            "unpin {:#x}+{:#x}: the last registration left from process {}, not {} which pinned it (a NIC reset or unbind, or an inherited uverbs fd): NVIDIA would not unpin it from there; left pinned until process {} frees the memory or exits\n",
            self.start,
            self.range().len,
            Owner::current_tgid(),
            self.owner.as_ref().map_or(0, Owner::tgid),
            self.owner.as_ref().map_or(0, Owner::tgid)
        );
    }

    /// The last registration of a pin with a free callback left, and NVIDIA still holds the pin
    /// (`held`: `LeftToCallback` or `UnpinFailed`) until that callback. In one critical section
    /// with the callback's own: unless it ran (`true`), the pin takes `held`, and `member`, that
    /// registration, is the pin's member again and listed in the records, held
    /// ([`RegContext::hold_locked`]): `nvpeer who` names the process whose memory blocks the
    /// module's unload, and the per-GPU totals count the pin (REVIEW-KMOD-3 T4-6). The
    /// callback revokes it like any member. `mapping`, the registration's DMA mapping left to the
    /// unpin, is unmapped in that section unless the callback ran (NVIDIA then frees it).
    fn hold(
        &self,
        held: PinState,
        member: Option<Arc<RegContext>>,
        mapping: Option<DmaMapping>,
    ) -> bool {
        let mut chain = self.shard.lock();
        // SAFETY: `chain` locks the pin's shard, just taken.
        let state = unsafe { self.state.access_mut(self.shard, &mut chain) };
        if matches!(state, PinState::Revoked) {
            drop(chain);
            // Maybe the registration's last reference: dropped unlocked.
            drop(member);
            return true;
        }
        *state = held;
        if let (Some(mapping), Some(table)) = (mapping, self.table()) {
            // SAFETY: not revoked, and no callback can complete while we hold the shard lock
            // (it revokes under it first): NVIDIA still holds the pin (it refused to unpin, or
            // was not asked), so the table and the mapping are live; in the core's put_pages
            // or release for the registration's umem.
            unsafe { p2p::unmap_at_dereg(table, mapping, self.start) };
        }
        let Some(ctx) = member else { return false };
        // SAFETY: `chain` locks the pin's shard, which is its registration's; `ctx` left this
        // pin (its last registration) and the pin keeps it below until its callback.
        unsafe { ctx.hold_locked(&mut chain, self.clone()) };
        // SAFETY: as above.
        let links = unsafe { self.links.access_mut(self.shard, &mut chain) };
        // INVARIANT: the registration that left last, held. The slot is empty: every member
        // left (`users` reached 0), so nothing is dropped here.
        let before = links.first.replace(ctx);
        drop(chain);
        drop(before);
        false
    }

    /// NVIDIA's free callback (cudaFree) under its RM lock, first part: in one critical section,
    /// unlists the pin, takes its members and moves each out of the states that use the page
    /// table (a `Mapped` one to `Invalidating`). Returns the members, whose [`RegContext::finish_revoke`]
    /// then tells the core about the `Invalidating` ones with no lock held; `None` when there
    /// is nothing to revoke (revoked already, or refused by NVIDIA).
    fn revoke(&self) -> Option<(Option<Arc<RegContext>>, Option<KBox<Members>>)> {
        let mut chain = self.shard.lock();
        // SAFETY: `chain` locks the pin's shard, just taken, which guards both.
        let (state, links) = unsafe { self.state.access_both(&self.links, self.shard, &mut chain) };
        let old = core::mem::replace(state, PinState::Revoked);
        if !matches!(old, PinState::Revoked | PinState::Unpinned) {
            // Read by an unpin that RM answered after this callback (`unpin`).
            self.flags.fetch_or(CALLBACK_RAN, Release);
        }
        // Only a `Live` pin may be listed (`SharedPin` invariant).
        let (counted, unlist) = match old {
            PinState::Live { nvidia_ref, .. } => {
                // This very callback takes NVIDIA's reference back (`free_callback`).
                if let Some(r) = nvidia_ref {
                    r.leave_to_callback();
                }
                (true, true)
            }
            PinState::Unpinning | PinState::UnpinFailed | PinState::LeftToCallback => (true, false),
            // Fired inside get_pages, or before `pin_with_nvidia` took the lock again: that
            // sees `Revoked` and reports the pin as failed, never counted.
            PinState::Pinning => (false, false),
            PinState::Revoked | PinState::Unpinned => {
                *state = old;
                return None;
            }
        };
        let (first, more) = (links.first.take(), links.more.take());
        if unlist && self.owner.is_some() {
            // INVARIANT: no longer in the chain (this section leaves `Live`).
            // SAFETY: `chain` is the pin's shard's.
            unsafe { unlink(&mut chain, self) };
        }
        // Every member out of the table-using states in this same section (T3-2): a member not
        // told yet can no longer enter get_pages or dma_map with the table NVIDIA frees when
        // this callback returns.
        let more_iter = more.iter().flat_map(|m| m.iter().flatten());
        for ctx in Iterator::chain(first.iter(), more_iter) {
            // SAFETY: a member of this pin, so guarded by the pin's shard, whose lock `chain` is.
            unsafe { ctx.revoke_locked(&mut chain) };
        }
        drop(chain);
        if counted {
            self.uncount();
        }
        nv_dbg!("free callback {:#x}: every registration revoked", self.start);
        Some((first, more))
    }
}

impl PinLinks {
    /// Makes `ctx` a member, inline, in a free slot, or by moving the members into `spare` when
    /// it has room for them and `ctx`; else `Err(Some(capacity))`: the caller allocates `spare`
    /// that large, unlocked, and retries. `Err(None)`: `ctx` could not be added (not reached:
    /// the room is checked first), and the join fails rather than leave a registration holding
    /// the pin without being a member, which the callback would never revoke (T3-10).
    fn add_member(&mut self, ctx: &Arc<RegContext>, spare: &mut Option<KBox<Members>>) -> Result<(), Option<usize>> {
        if self.first.is_none() {
            self.first = Some(ctx.clone());
            return Ok(());
        }
        let len = self.more.as_ref().map_or(0, |m| m.len());
        if let Some(more) = self.more.as_mut() {
            if let Some(slot) = more.iter_mut().find(|m| m.is_none()) {
                *slot = Some(ctx.clone());
                return Ok(());
            }
            if more.len() < more.capacity() {
                // Within the capacity: `push` neither allocates nor fails.
                return more.push(Some(ctx.clone()), GFP_NOWAIT).map_err(|_| None);
            }
        }
        let needed = (2 * len).max(4);
        let mut grown = match spare.take() {
            Some(s) if s.capacity() - s.len() > len => s,
            other => {
                *spare = other;
                return Err(Some(needed));
            }
        };
        // Within `grown`'s room for `len + 1` (checked above): no `push` below allocates or
        // fails. The joiner goes first, so that it fails alone, before any member has moved.
        grown.push(Some(ctx.clone()), GFP_NOWAIT).map_err(|_| None)?;
        for m in self.more.iter_mut().flat_map(|m| m.iter_mut()) {
            // Within the room checked above (`len` more after the joiner): `push` within the
            // capacity neither allocates nor fails, so no member is lost (REVIEW-KMOD-3 T4-9:
            // no error branch that cannot be taken).
            let _ = grown.push(m.take(), GFP_NOWAIT);
        }
        // The old vector, emptied of references, is freed with the lock held (kfree only).
        self.more = Some(grown);
        Ok(())
    }

    /// Takes `ctx`'s member reference out, if it has one.
    fn take_member(&mut self, ctx: &RegContext) -> Option<Arc<RegContext>> {
        let is_ctx = |m: &Option<Arc<RegContext>>| m.as_ref().is_some_and(|m| ptr::eq(&**m, ctx));
        if is_ctx(&self.first) {
            return self.first.take();
        }
        self.more.iter_mut().flat_map(|m| m.iter_mut()).find(|m| is_ctx(m)).and_then(Option::take)
    }
}

/// The body of NVIDIA's free callback for non-persistent pins (`nvpeer_glue_free_callback`,
/// which NVIDIA calls, holds a module reference around it); `data` is the pin reference from
/// `pin_with_nvidia`.
///
/// # Safety
///
/// Only called by `nvpeer_glue_free_callback` for NVIDIA, at most once per successful
/// `nvidia_p2p_get_pages`, with the `data` given there, and never after a successful
/// `nvidia_p2p_put_pages` of that pin.
#[no_mangle]
pub(crate) unsafe extern "C" fn nvpeer_free_callback(data: *mut c_void) {
    if data.is_null() {
        stats::failure(Op::FreeCallback, EINVAL);
        nv_pin_err!("free callback without a pin\n");
        return;
    }
    stats::inc(Stat::Revocations);
    // SAFETY: `data` is an `NvidiaRef` of ours (caller), now taken back, once.
    let pin = unsafe { PinArc::from_raw(data) };
    if let Some((first, more)) = pin.revoke() {
        let more_iter = more.iter().flat_map(|m| m.iter().flatten());
        for ctx in Iterator::chain(first.iter(), more_iter) {
            ctx.finish_revoke();
        }
        // The member references may be the last of their registrations (and of those
        // registrations' module references): the pin's host's module reference, held below,
        // keeps the module's count above zero meanwhile.
        drop((first, more));
    }
    // NVIDIA frees the table and every mapping on it when we return.
    defer_drop(pin);
    // Test only: the window in which the work may drop the pin's last reference while this
    // thread is still in the module (tests/compat/test-callback-stall.sh).
    #[cfg(nvpeer_plant_callback_stall)]
    // SAFETY: no precondition. It sleeps, as this callback may: it takes mutexes above (the
    // shard's, and the core's in its invalidate).
    unsafe {
        ffi::nvpeer_glue_plant_callback_stall()
    };
}

/// The free callbacks' pin references, for the module's work item to drop ([`defer_drop`]): a
/// stack of [`PinArc::into_raw`] pointers linked through each pin's `links.next`.
static DEFERRED: Atomic<*mut c_void> = Atomic::new(ptr::null_mut());

/// Hands a free callback's reference to `pin` to the module's work item. That reference may be
/// the pin's last (its host's), and the host's module reference the module's last: dropped here, NVIDIA's
/// thread would go on running this module's text (the returns, the kfree) after an `rmmod` could
/// have completed (REVIEW-KMOD C5). The work item drops it instead, and module exit flushes the
/// work (`NvPeer::drop`), which returns only once the work function has. The work may run on
/// another CPU as soon as it is queued, while this thread still returns through the module: the
/// callback's entry (`nvpeer_glue_free_callback`, C) holds a module reference of its own across
/// this body and drops it with its last instruction, a tail jump into `module_put`
/// (`kmod/scripts/check-tail-call.sh` refuses a build without it), so an `rmmod` is refused until no
/// instruction of the module is left to run (tests/compat/test-callback-stall.sh).
///
/// The pin, revoked, is in no chain, so its `links.next` is free to link it into the stack: set
/// under its shard's lock, held from before the pin is pushed until the link is set, so that a
/// drain that pops it waits for the link.
fn defer_drop(pin: PinArc) {
    let shard = pin.shard;
    let mut chain = shard.lock();
    let host = pin.as_raw().cast::<RegContext>().cast_const();
    let raw = pin.into_raw();
    // SAFETY: our reference, just turned into `raw`, keeps the host (a registration hosting the
    // pin) alive until the drain takes it back, which needs the lock we hold to read the link.
    let pin = unsafe { &*host }.pin_slot();
    let next = DEFERRED.xchg(raw, Release);
    // SAFETY: a pointer from `PinArc::into_raw` pushed on the stack, whose reference is now the
    // link's; null for the bottom of the stack.
    let next = NonNull::new(next).map(|n| unsafe { PinArc::from_raw(n.as_ptr()) });
    // SAFETY: `chain` locks the pin's shard.
    // INVARIANT: revoked (a free callback's pin), hence unlisted: `next` links the stack.
    unsafe { pin.links.access_mut(pin.shard, &mut chain) }.next = next;
    // Queued before the lock goes: a drain already running (another callback's) pops this pin
    // only through the lock, so the work that drops it is queued before it can be dropped, and
    // the flush at module exit waits for it.
    // SAFETY: no precondition (`schedule_work` neither sleeps nor takes our locks); the work is
    // the module's own, flushed at module exit.
    unsafe { ffi::nvpeer_glue_schedule_deferred() };
    drop(chain);
}

/// The module's work item: drops every pin [`defer_drop`] queued (called by the C glue).
#[no_mangle]
pub(crate) extern "C" fn nvpeer_drain_deferred() {
    let mut cur = DEFERRED.xchg(ptr::null_mut(), Acquire);
    while let Some(raw) = NonNull::new(cur) {
        // SAFETY: a pointer `defer_drop` pushed, whose reference the stack held and this drain
        // took (the exchange above, or the previous pin's link).
        let pin = unsafe { PinArc::from_raw(raw.as_ptr()) };
        let next = {
            let mut chain = pin.shard.lock();
            // SAFETY: `chain` locks the pin's shard; the pusher set the link before it dropped
            // this lock.
            unsafe { pin.links.access_mut(pin.shard, &mut chain) }.next.take()
        };
        cur = next.map_or(ptr::null_mut(), PinArc::into_raw);
        // Maybe the pin's last reference (its host's), and the module's: in the work function,
        // which module exit waits for.
        drop(pin);
    }
}
